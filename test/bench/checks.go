package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/controller"
	"github.com/opr8r/opr8r/pkg/records"
)

// checksResult is the scheduled-checks bench (BENCH_CHECKS=1): N runs with
// spec.interval, observed for a window once every run's first apply is
// Ready. The bench plays an engine (BENCH_ENGINE, as make bench): it holds
// every child it sees for Hold, then finishes it with a plan without changes
// (a check that finds nothing).
type checksResult struct {
	Runs         int
	Interval     time.Duration
	Window       time.Duration
	Hold         time.Duration
	Cap          int
	Setup        time.Duration // until every run's first apply was Ready
	Checks       int           // checks finished in the window
	Started      int           // checks started (children seen) in the window
	Applies      int           // apply children seen in the window (drift or a moved source would start them; none expected)
	ManagerCPU   float64       // CPU seconds in the window
	APIServerCPU float64
	EtcdCPU      float64
	Writes       int            // the manager's API writes in the window
	WriteKinds   map[string]int // by "verb resource code"
	MaxActive    int            // unfinished children at once (the bench's view), whole bench
	Waits        []time.Duration
	MinPerRun    int // checks per run in the window
	MaxPerRun    int
	Errors       int
	// The survivor: one more run, checked every second, whose first
	// apply's records and history record must outlive SurvivorWant checks.
	SurvivorWant    int
	SurvivorChecks  int    // its checks the player finished
	SurvivorApply   string // its apply's run id
	SurvivorHistory string // its status.history ids at the end, newest first
	SurvivorRecords int    // the apply's records left at the end
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// player finishes the children the manager creates, after hold, and keeps
// the figures: unfinished children at once, and each check's wait (from
// when it was due, by the manager's own NextCheck, to when its child was
// seen).
type player struct {
	eng    enginePlayer
	ctx    context.Context
	c      client.Client
	runs   client.Reader
	hold   time.Duration
	minInt time.Duration

	mu        sync.Mutex
	seen      map[string]bool
	active    int
	maxActive int
	counting  bool // inside the window
	waits     []time.Duration
	perRun    map[string]int
	// skip is a run whose checks the figures leave out (the survivor's);
	// skipped counts its finished checks.
	skip    string
	skipped int
	checks  int
	started int
	applies int
	errors  int
}

func (p *player) add(obj any) {
	wf, ok := obj.(client.Object)
	if !ok || p.eng.Finished(wf) {
		return
	}
	seenAt := time.Now()
	p.mu.Lock()
	if p.seen[wf.GetName()] {
		p.mu.Unlock()
		return
	}
	p.seen[wf.GetName()] = true
	check := wf.GetLabels()[infrav1.RunTypeLabel] == string(infrav1.RunDrift)
	skipped := wf.GetLabels()[infrav1.RunNameLabel] == p.skip
	if skipped {
		// The survivor's children: finished, not counted.
	} else if p.counting && check {
		p.started++
	} else if p.counting {
		p.applies++
	}
	if !skipped {
		p.active++
	}
	if p.active > p.maxActive {
		p.maxActive = p.active
	}
	p.mu.Unlock()
	var wait time.Duration
	runName := wf.GetLabels()[infrav1.RunNameLabel]
	if check {
		run := &infrav1.TerraformRun{}
		if err := p.runs.Get(p.ctx, client.ObjectKey{Namespace: wf.GetNamespace(), Name: runName}, run); err == nil {
			wait = seenAt.Sub(controller.NextCheck(run, p.minInt))
		}
	}
	go func() {
		time.Sleep(p.hold)
		err := p.eng.Finish(p.ctx, p.c, client.ObjectKeyFromObject(wf))
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil && p.ctx.Err() != nil {
			return // the bench is over
		}
		if err != nil {
			p.errors++
			logf("finishing %s: %v", wf.GetName(), err)
			return
		}
		if check && skipped {
			p.skipped++
		} else if check && p.counting {
			p.checks++
			p.waits = append(p.waits, wait)
			p.perRun[runName]++
		}
	}()
}

// update counts a child finished when the bench's informer sees it
// finished: the API server's order, in which the manager saw it too (a
// count kept by the goroutine that finished it could see the next child
// first, and overstate the children active at once by one).
func (p *player) update(oldObj, newObj any) {
	o, ok1 := oldObj.(client.Object)
	n, ok2 := newObj.(client.Object)
	if ok1 && ok2 && !p.eng.Finished(o) && p.eng.Finished(n) && n.GetLabels()[infrav1.RunNameLabel] != p.skip {
		p.mu.Lock()
		p.active--
		p.mu.Unlock()
	}
}

// remove counts an unfinished child that was deleted as finished.
func (p *player) remove(obj any) {
	if o, ok := obj.(client.Object); ok && !p.eng.Finished(o) && o.GetLabels()[infrav1.RunNameLabel] != p.skip {
		p.mu.Lock()
		p.active--
		p.mu.Unlock()
	}
}

func benchChecks() (checksResult, error) {
	res := checksResult{
		Runs:     envInt("BENCH_CHECK_RUNS", 1000),
		Interval: envDuration("BENCH_CHECK_INTERVAL", 5*time.Minute),
		Window:   envDuration("BENCH_CHECK_WINDOW", 15*time.Minute),
		Hold:     envDuration("BENCH_CHECK_HOLD", 5*time.Second),
		Cap:      envInt("BENCH_CHECK_CAP", 50),
		// 0 leaves the survivor out.
		SurvivorWant: envInt("BENCH_CHECK_SURVIVOR", 100),
	}
	eng, err := benchEngine()
	if err != nil {
		return res, err
	}
	tmp, cleanup, err := tempDir("opr8r-bench-checks-")
	if err != nil {
		return res, err
	}
	defer cleanup()
	const ns = "checks"
	pl, err := startPlane(tmp, false, ns)
	if err != nil {
		return res, err
	}
	defer pl.stop()
	env, auditLog, bcfg, c := pl.env, pl.auditLog, pl.cfg, pl.c
	scheme := c.Scheme()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The player: informers on the children and runs of the namespace.
	ca, err := cache.New(bcfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return res, err
	}
	p := &player{eng: eng, ctx: ctx, c: c, runs: ca, hold: res.Hold, minInt: controller.DefaultMinCheckInterval, seen: map[string]bool{}, perRun: map[string]int{}, skip: survivorName}
	wfs, err := ca.GetInformer(ctx, eng.eng.NewChild())
	if err != nil {
		return res, err
	}
	if _, err := ca.GetInformer(ctx, &infrav1.TerraformRun{}); err != nil {
		return res, err
	}
	if _, err := wfs.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: p.add, UpdateFunc: p.update, DeleteFunc: p.remove}); err != nil {
		return res, err
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		return res, fmt.Errorf("the bench's caches did not sync")
	}

	user, err := env.ControlPlane.AddUser(envtest.User{Name: "opr8r-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return res, err
	}
	kc, _ := user.KubeConfig()
	kcPath := tmp + "/manager.kubeconfig"
	_ = os.WriteFile(kcPath, kc, 0o600)
	// --min-check-interval=1s lets the survivor be checked every second;
	// the other runs' 5m interval is above it anyway.
	// Every run is in one namespace: no namespace share (a quarter of the
	// cap by default, 12 of 50), which would hold the checks to 12 at once
	// and let the queue grow for the whole window (the survivor got 9
	// checks in 15 minutes that way). The bench measures the cap.
	mgr, _, err := startManager(kcPath, []string{fmt.Sprintf("--max-active-runs=%d", res.Cap), "--max-active-runs-per-namespace=0", "--min-check-interval=1s"})
	if err != nil {
		return res, err
	}
	defer func() { stop(mgr) }()
	defer onInterrupt(func() { stop(mgr) })()

	logf("checks: %d runs with interval %s, --max-active-runs=%d, children held %s", res.Runs, res.Interval, res.Cap, res.Hold)
	start := time.Now()
	if err := parallel(res.Runs, func(i int) error {
		run := eng.run(fmt.Sprintf("k%05d", i), ns).Obj()
		run.UID = ""
		run.Spec.Interval = &metav1.Duration{Duration: res.Interval}
		return c.Create(ctx, run)
	}); err != nil {
		return res, err
	}
	if err := waitFor(20*time.Minute, func() (bool, error) {
		time.Sleep(2 * time.Second)
		l := &infrav1.TerraformRunList{}
		if err := ca.List(ctx, l); err != nil {
			return false, err
		}
		ready := 0
		for _, r := range l.Items {
			if r.Status.Phase == string(infrav1.RunSucceeded) {
				ready++
			}
		}
		return ready == res.Runs, nil
	}); err != nil {
		return res, fmt.Errorf("first applies: %w", err)
	}
	res.Setup = time.Since(start)
	logf("checks: every first apply Ready after %s; observing for %s", res.Setup.Round(time.Second), res.Window)

	if res.SurvivorWant > 0 {
		if err := startSurvivor(ctx, c, bcfg, eng, ns, &res); err != nil {
			return res, err
		}
	}
	writes0 := settled(auditLog, countWrites)
	_, skip := auditSummary(auditLog, 1<<62)
	cpu0 := usage(mgr.Process.Pid)
	p.mu.Lock()
	p.counting = true
	p.mu.Unlock()
	for left := res.Window; left > 0; left -= time.Minute {
		d := min(left, time.Minute)
		time.Sleep(d)
		p.mu.Lock()
		logf("checks: %s left; %d checks finished, %d children unfinished (at most %d)", left-d, p.checks, p.active, p.maxActive)
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.counting = false
	p.mu.Unlock()
	cpu := sub(usage(mgr.Process.Pid), cpu0)
	res.ManagerCPU, res.APIServerCPU, res.EtcdCPU = cpu[0], cpu[1], cpu[2]
	// The window ends with the manager: the audit log then settles on the
	// writes made inside it.
	stop(mgr)
	res.Writes = settled(auditLog, countWrites) - writes0
	res.WriteKinds, _ = auditSummary(auditLog, skip)

	p.mu.Lock()
	res.Checks, res.Started, res.Applies, res.Waits, res.MaxActive, res.Errors = p.checks, p.started, p.applies, p.waits, p.maxActive, p.errors
	res.MinPerRun = -1
	for i := 0; i < res.Runs; i++ {
		n := p.perRun[fmt.Sprintf("k%05d", i)]
		if res.MinPerRun < 0 || n < res.MinPerRun {
			res.MinPerRun = n
		}
		res.MaxPerRun = max(res.MaxPerRun, n)
	}
	p.mu.Unlock()
	// res holds copies: no lock from here (judgeSurvivor takes it; a
	// deferred unlock of a lock released here crashed the bench when the
	// survivor failed, hiding why).
	if err := judgeSurvivor(ctx, c, bcfg, ns, p, &res); err != nil {
		return res, err
	}
	if res.MaxActive > res.Cap {
		return res, fmt.Errorf("the cap was not respected: %d children unfinished at once, --max-active-runs=%d", res.MaxActive, res.Cap)
	}
	if res.Errors > 0 {
		return res, fmt.Errorf("%d children could not be finished", res.Errors)
	}
	return res, nil
}

func printChecks(r checksResult) {
	fmt.Printf("\n== scheduled checks: %d runs, interval %s (+ up to 10%% jitter), --max-active-runs=%d, each child held %s, observed %s\n",
		r.Runs, r.Interval, r.Cap, r.Hold, r.Window)
	fmt.Printf("setup: every first apply Ready after %.0fs\n", r.Setup.Seconds())
	// Per check: the window's totals over the checks started in it (each
	// costs its writes when it starts and when it is recorded; the window's
	// edges cut as many of one as of the other).
	// The survivor's checks cost the manager too: they count in the
	// denominator of the per-check figures.
	per := func(x float64) float64 {
		if r.Started+r.SurvivorChecks == 0 {
			return 0
		}
		return x / float64(r.Started+r.SurvivorChecks)
	}
	fmt.Printf("checks started in the window: %d; finished: %d (%.2f per run; per run min %d, max %d); apply runs started: %d\n",
		r.Started, r.Checks, float64(r.Checks)/float64(r.Runs), r.MinPerRun, r.MaxPerRun, r.Applies)
	fmt.Printf("CPU per check: manager %.1f ms, kube-apiserver %.1f ms, etcd %.1f ms (window totals %.1fs/%.1fs/%.1fs)\n",
		1000*per(r.ManagerCPU), 1000*per(r.APIServerCPU), 1000*per(r.EtcdCPU), r.ManagerCPU, r.APIServerCPU, r.EtcdCPU)
	fmt.Printf("manager writes per check: %.2f (%d in the window)\n", per(float64(r.Writes)), r.Writes)
	keys := make([]string, 0, len(r.WriteKinds))
	for k := range r.WriteKinds {
		if f := strings.Fields(k); len(f) > 1 && f[0] == "opr8r-manager" && isWrite(f[1]) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("  %s: %d\n", k, r.WriteKinds[k])
	}
	patches, refused := statusPatches(r.WriteKinds)
	fmt.Printf("status patches refused with 409: %d of %d (%.1f%%)\n", refused, patches, 100*float64(refused)/math.Max(1, float64(patches)))
	fmt.Printf("cap: at most %d children unfinished at once (--max-active-runs=%d)\n", r.MaxActive, r.Cap)
	fmt.Printf("wait from due to started: p50 %.1fs, p99 %.1fs, longest %.1fs\n", pct(r.Waits, .5).Seconds(), pct(r.Waits, .99).Seconds(), pct(r.Waits, 1).Seconds())
	if r.SurvivorWant > 0 {
		fmt.Printf("survivor (checked every second): %d checks after its apply %s; the apply's history record kept: %v; its records left: %d of 2; history now %s\n",
			r.SurvivorChecks, r.SurvivorApply, strings.Contains(","+r.SurvivorHistory+",", ","+r.SurvivorApply+","), r.SurvivorRecords, r.SurvivorHistory)
	}
}

// statusPatches counts the manager's TerraformRun status patches in the
// audit summary, and those the API server refused with 409.
func statusPatches(kinds map[string]int) (all, refused int) {
	for k, n := range kinds {
		f := strings.Fields(k)
		if len(f) != 4 || f[0] != "opr8r-manager" || f[1] != "patch" || f[2] != "terraformruns/status" {
			continue
		}
		all += n
		if f[3] == "409" {
			refused += n
		}
	}
	return all, refused
}

// survivorName is the run the checks bench checks every second.
const survivorName = "survivor"

// startSurvivor creates the survivor, checked every second, waits for its
// first apply, and keeps records for that apply as its steps would (a log
// and the readable plan, owned by the TerraformRun).
func startSurvivor(ctx context.Context, c client.Client, cfg *rest.Config, eng enginePlayer, ns string, res *checksResult) error {
	run := eng.run(survivorName, ns).Obj()
	run.UID = ""
	run.Spec.Interval = &metav1.Duration{Duration: time.Second}
	if err := c.Create(ctx, run); err != nil {
		return err
	}
	got := &infrav1.TerraformRun{}
	if err := waitFor(5*time.Minute, func() (bool, error) {
		time.Sleep(time.Second)
		if err := c.Get(ctx, client.ObjectKeyFromObject(run), got); err != nil {
			return false, err
		}
		return got.Status.Run != nil && got.Status.Run.Type == infrav1.RunApply && got.Status.Run.Phase == infrav1.RunSucceeded, nil
	}); err != nil {
		return fmt.Errorf("the survivor's first apply: %w", err)
	}
	res.SurvivorApply = got.Status.Run.ID
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	store := records.NewRouter(cs, &metav1.OwnerReference{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: got.Name, UID: got.UID})
	for _, kind := range []records.Kind{records.KindLog, records.KindPlanText} {
		key := records.Key{Namespace: ns, Run: got.Name, RunID: res.SurvivorApply, Step: "apply", Kind: kind}
		if err := store.Put(ctx, key, []byte(res.SurvivorApply+" "+string(kind))); err != nil {
			return fmt.Errorf("keeping the survivor's apply records: %w", err)
		}
	}
	logf("checks: the survivor's apply %s is Ready and its records kept; it is checked every second", res.SurvivorApply)
	return nil
}

// judgeSurvivor reads what is left of the survivor's apply after the
// window: it fails the bench when the survivor went through its checks and
// lost the apply's history record or records.
func judgeSurvivor(ctx context.Context, c client.Client, cfg *rest.Config, ns string, p *player, res *checksResult) error {
	if res.SurvivorWant == 0 {
		return nil
	}
	p.mu.Lock()
	res.SurvivorChecks = p.skipped
	p.mu.Unlock()
	got := &infrav1.TerraformRun{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: survivorName}, got); err != nil {
		return err
	}
	var ids []string
	kept := false
	for _, h := range got.Status.History {
		ids = append(ids, h.ID)
		kept = kept || h.ID == res.SurvivorApply
	}
	res.SurvivorHistory = strings.Join(ids, ",")
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	recs, err := records.NewRouter(cs, nil).List(ctx, ns, survivorName)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if r.RunID == res.SurvivorApply {
			res.SurvivorRecords++
		}
	}
	switch {
	case res.SurvivorChecks < res.SurvivorWant:
		return fmt.Errorf("the survivor went through %d checks in the window, fewer than the %d asked (BENCH_CHECK_SURVIVOR): lengthen BENCH_CHECK_WINDOW", res.SurvivorChecks, res.SurvivorWant)
	case !kept || res.SurvivorRecords < 2:
		return fmt.Errorf("after %d checks the survivor's apply %s is gone: history %s, %d of its 2 records left", res.SurvivorChecks, res.SurvivorApply, res.SurvivorHistory, res.SurvivorRecords)
	}
	return nil
}
