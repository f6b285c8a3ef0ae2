// Command bench measures the manager against a real API server (envtest):
//
//	P1 throughput: N TerraformRuns created at once, time until N children
//	   exist, against a bare client creating N equivalent Workflows with the
//	   same QPS settings, in the same run (a ratio). Also the floor: a bare
//	   client making, per run, the writes a finalizer-first controller
//	   cannot avoid (create the run, finalizer, child, one ConfigMap,
//	   status).
//	P2 latency: a child's status patched, time until the run's status shows
//	   it; p50/p95/p99.
//	P3 writes: the manager's API writes, from the API server's audit log, on
//	   a restart (resync) of N Ready runs.
//	P4 memory: the manager's RSS with N runs, then with N readable-plan
//	   Secrets (as the plan step writes them) and 2N foreign Workflows and
//	   PipelineRuns added; then its live heap (after a forced
//	   GC, from its pprof endpoint).
//
// The manager runs as a subprocess (bin/bench-manager) so its RSS is its
// own; no engine controller runs, the bench writes child status itself.
// Run it with make bench; BENCH_SIZES sets N (default 100,1000,5000).
// BENCH_MANAGER_FLAGS adds manager flags (e.g. --max-concurrent-reconciles=8);
// BENCH_MANAGER_ENV adds environment variables to every manager start
// (e.g. "GOGC=100"; BENCH_P4_ENVS variants override them);
// BENCH_P1_ONLY=1 stops after P1; BENCH_MANAGER_BIN runs another manager
// build; BENCH_HEAP_PROFILE=dir saves the manager's heap profile at P4;
// BENCH_APISERVER_PROFILE=dir saves 10s CPU profiles of kube-apiserver
// (baseline, P1) and of the manager (P1). BENCH_ENGINE=NAME plays that
// engine instead of the first one whose test kit has a bench player
// (engines.go); BENCH_SHARDS=1 runs P6 instead, four
// managers over shards of the runs (shards.go).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opr8r/opr8r/engines/enginestest"
	"github.com/opr8r/opr8r/pkg/names"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/test/envtestutil"
)

const (
	qps   = 200
	burst = 400
)

type result struct {
	N                      int
	Engine                 infrav1.EngineName
	P1Manager, P1Baseline  time.Duration
	P1Floor, P1RunsCreated time.Duration
	// CPU seconds used by the manager, kube-apiserver and etcd during
	// the baseline, the floor and the manager's P1.
	P1BaselineCPU, P1FloorCPU, P1CPU [3]float64
	P2                               []time.Duration
	P2Parts                          p2Breakdown
	P3ResyncWrites                   int
	P3StatusWritesPerChange          float64
	P4RSS, P4RSSForeign              int64
	P4LiveHeap, P4PeakRSS            int64
	ManagerFlags                     string
	ManagerEnv                       string
	P4RSSAnon, P4RSSFile             int64
	// P4 at rest: once the manager has been idle, and two of its memory
	// release intervals (--memory-release-interval, 15 s) later.
	P4RestRSS, P4RestAnon, P4RestFile int64
	P4RestWait                        time.Duration
	P4Variants                        []p4Variant
	CreatesPerRun, WritesPerRun       float64
	ReadsPerRun                       float64
	// P1b: the manager's writes per run started without the finalizer
	// policy (opr8r-finalizer's binding deleted), over P1bRuns runs.
	WritesPerRunNoPolicy float64
	P1bRuns              int
	// How long P2 waited for the P1 storm to pass, and the CPU seconds
	// (manager, kube-apiserver, etcd) used meanwhile.
	P2Settle    time.Duration
	P2SettleCPU [3]float64
}

func main() {
	ctrllog.SetLogger(logr.Discard())
	handleInterrupts()
	if os.Getenv("BENCH_CHECKS") == "1" {
		r, err := benchChecks()
		if r.Checks > 0 {
			printChecks(r) // also when a check below failed: the figures say how
			b, _ := json.MarshalIndent(r, "", "  ")
			_ = os.WriteFile(filepath.Join(envtestutil.RepoRoot(), "bin", "bench-checks.json"), b, 0o644)
		}
		if err != nil {
			fail(err)
		}
		return
	}
	sizes := []int{100, 1000, 5000}
	if s := os.Getenv("BENCH_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				fail(err)
			}
			sizes = append(sizes, n)
		}
	}
	if os.Getenv("BENCH_SHARDS") == "1" {
		for _, n := range sizes {
			r, err := benchShards(n)
			if err != nil {
				fail(err)
			}
			printShards(r)
			b, _ := json.MarshalIndent(r, "", "  ")
			_ = os.WriteFile(filepath.Join(envtestutil.RepoRoot(), "bin", fmt.Sprintf("bench-shards-%d.json", n)), b, 0o644)
		}
		return
	}
	var results []result
	for _, n := range sizes {
		r, err := benchOne(n)
		if err != nil {
			fail(err)
		}
		results = append(results, r)
		print(r)
	}
	b, _ := json.MarshalIndent(results, "", "  ")
	_ = os.WriteFile(filepath.Join(envtestutil.RepoRoot(), "bin", "bench-results.json"), b, 0o644)
}

var (
	cleanupMu sync.Mutex
	cleanups  = map[int]func(){}
	cleanupID int
)

// onInterrupt registers fn to run if the bench is interrupted, so no
// kube-apiserver, etcd or manager outlives it; the returned func
// unregisters it.
func onInterrupt(fn func()) func() {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	cleanupID++
	id := cleanupID
	cleanups[id] = fn
	return func() {
		cleanupMu.Lock()
		defer cleanupMu.Unlock()
		delete(cleanups, id)
	}
}

func handleInterrupts() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ch
		cleanupMu.Lock()
		for id := cleanupID; id > 0; id-- { // newest first
			if fn, ok := cleanups[id]; ok {
				fn()
			}
		}
		os.Exit(130)
	}()
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration{}, d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

func print(r result) {
	fmt.Printf("\n== N=%d, engine %s\n", r.N, r.Engine)
	fmt.Printf("manager flags: %q, environment: %q\n", r.ManagerFlags, r.ManagerEnv)
	fmt.Printf("P1 throughput: manager %.2fs, bare client %.2fs, ratio %.2f (target <= 1.5)\n", r.P1Manager.Seconds(), r.P1Baseline.Seconds(), r.P1Manager.Seconds()/r.P1Baseline.Seconds())
	fmt.Printf("P1 floor: a bare client making the 3 unavoidable writes per run %.2fs, ratio %.2f; manager / floor %.2f\n", r.P1Floor.Seconds(), r.P1Floor.Seconds()/r.P1Baseline.Seconds(), r.P1Manager.Seconds()/r.P1Floor.Seconds())
	fmt.Printf("P1 detail: the bench's %d creates took %.2fs; CPU seconds (manager, kube-apiserver, etcd): baseline %s, floor %s, manager %s\n",
		r.N, r.P1RunsCreated.Seconds(), fmtCPU(r.P1BaselineCPU), fmtCPU(r.P1FloorCPU), fmtCPU(r.P1CPU))
	fmt.Printf("P1 API server CPU per run: baseline %.1f ms, floor %.1f ms, manager %.1f ms (manager / baseline %.2f)\n",
		1000*r.P1BaselineCPU[1]/float64(r.N), 1000*r.P1FloorCPU[1]/float64(r.N), 1000*r.P1CPU[1]/float64(r.N), r.P1CPU[1]/r.P1BaselineCPU[1])
	fmt.Printf("P1b writes: %.2f manager writes per run to start it with the finalizer policy (and %.2f reads: get, list); %.2f without it (%d runs) (targets 2, 3)\n",
		r.WritesPerRun, r.ReadsPerRun, r.WritesPerRunNoPolicy, r.P1bRuns)
	if r.P4RSS == 0 {
		return
	}
	fmt.Printf("P2 started after %.1fs of waiting for an idle control plane (CPU seconds meanwhile: %s)\n", r.P2Settle.Seconds(), fmtCPU(r.P2SettleCPU))
	fmt.Printf("P2 latency over %d events: p50 %dms, p95 %dms, p99 %dms (target p99 <= 100ms)\n", len(r.P2), pct(r.P2, .5).Milliseconds(), pct(r.P2, .95).Milliseconds(), pct(r.P2, .99).Milliseconds())
	printP2Breakdown(r.P2, r.P2Parts)
	fmt.Printf("P3 writes: %.2f status writes per observed child change; %d writes on a resync of %d Ready runs (target 0)\n", r.P3StatusWritesPerChange, r.P3ResyncWrites, r.N)
	fmt.Printf("P4 memory: manager RSS %d MiB with %d runs 30 s after its restart; %d MiB after %d plan Secrets of 16 KiB and %d foreign Workflows and PipelineRuns (%+.1f%%; target +0%%)\n",
		r.P4RSS>>20, r.N, r.P4RSSForeign>>20, r.N, 2*r.N, 100*float64(r.P4RSSForeign-r.P4RSS)/float64(r.P4RSS))
	if r.P4RestRSS > 0 {
		fmt.Printf("P4 at rest (idle after %.0fs, then 30 s): manager RSS %d MiB, anonymous %d MiB, file-backed %d MiB (target <= 120 MiB at 5000)\n",
			r.P4RestWait.Seconds(), r.P4RestRSS>>20, r.P4RestAnon>>20, r.P4RestFile>>20)
	}
	fmt.Printf("P4 live heap after a forced GC: %d MiB; the restarted manager's peak RSS: %d MiB; RSS anonymous %d MiB, file-backed %d MiB\n",
		r.P4LiveHeap>>20, r.P4PeakRSS>>20, r.P4RSSAnon>>20, r.P4RSSFile>>20)
	for _, v := range r.P4Variants {
		fmt.Printf("P4 with %s: RSS %d MiB (anonymous %d, file-backed %d), peak %d MiB, live heap %d MiB\n", v.Env, v.RSS>>20, v.Anon>>20, v.File>>20, v.Peak>>20, v.LiveHeap>>20)
	}
}

// auditPolicy logs every write and read, at metadata level.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
rules:
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection, get, list]
  - level: None
`

func benchOne(n int) (result, error) {
	p, err := benchEngine()
	if err != nil {
		return result{}, err
	}
	res := result{N: n, Engine: p.name}
	tmp, cleanup, err := tempDir("opr8r-bench-")
	if err != nil {
		return res, err
	}
	defer cleanup()
	// opr8r's admission policies, as installed by kustomize and Helm:
	// opr8r-finalizer adds the finalizer in the user's create.
	pl, err := startPlane(tmp, true, "runs", "baseline", "foreign", "floor", "warmup", "nopolicy")
	if err != nil {
		return res, err
	}
	defer pl.stop()
	env, auditLog, bcfg, c := pl.env, pl.auditLog, pl.cfg, pl.c
	ctx := context.Background()

	logf("P1 baseline (N=%d, %s)", n, p.name)
	// P1 baseline: a bare client creating the N children the manager would
	// create (Workflows or PipelineRuns).
	if dir := os.Getenv("BENCH_APISERVER_PROFILE"); dir != "" {
		go profileAPIServer(ctx, bcfg, filepath.Join(dir, fmt.Sprintf("apiserver-baseline-%d.pb.gz", n)))
	}
	cpu0 := usage(0)
	start := time.Now()
	if err := parallel(n, func(i int) error {
		obj, err := p.build(p.run(fmt.Sprintf("b%05d", i), "baseline").Obj())
		if err != nil {
			return err
		}
		obj.SetOwnerReferences(nil)
		return c.Create(ctx, obj)
	}); err != nil {
		return res, err
	}
	res.P1Baseline = time.Since(start)
	res.P1BaselineCPU = sub(usage(0), cpu0)

	logf("P1 floor (N=%d)", n)
	if res.P1Floor, res.P1FloorCPU, err = floor(ctx, c, p, n); err != nil {
		return res, fmt.Errorf("P1 floor: %w", err)
	}

	logf("The manager (N=%d)", n)
	// The manager, as a subprocess with its own user (for the audit log).
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "opr8r-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return res, err
	}
	kc, _ := user.KubeConfig()
	kcPath := filepath.Join(tmp, "manager.kubeconfig")
	_ = os.WriteFile(kcPath, kc, 0o600)
	res.ManagerFlags = os.Getenv("BENCH_MANAGER_FLAGS")
	res.ManagerEnv = os.Getenv("BENCH_MANAGER_ENV")
	// Its metrics, served for P2's breakdown (p2tail.go).
	metricsAddr, err := freeAddr()
	if err != nil {
		return res, err
	}
	mgr, pprofAddr, err := startManager(kcPath, []string{"--metrics-bind-address=" + metricsAddr, "--metrics-secure=false"})
	if err != nil {
		return res, err
	}
	defer func() { stop(mgr) }()
	defer onInterrupt(func() { stop(mgr) })()

	// P1 times a running manager, not its start: one warm-up run first,
	// whose child proves the caches synced and the engines are watched.
	warm := p.run("warmup", "warmup").Obj()
	warm.UID = ""
	if err := c.Create(ctx, warm); err != nil {
		return res, err
	}
	if err := waitFor(5*time.Minute, func() (bool, error) {
		time.Sleep(100 * time.Millisecond)
		r := &infrav1.TerraformRun{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(warm), r); err != nil || r.Status.Run == nil {
			return false, client.IgnoreNotFound(err)
		}
		return true, nil
	}); err != nil {
		return res, fmt.Errorf("manager warm-up: %w", err)
	}
	writesBefore := settled(auditLog, countWrites)
	readsBefore, _ := countReads(auditLog, "opr8r-manager")
	_, auditSkip := auditSummary(auditLog, 1<<62)

	logf("P1 (N=%d)", n)
	// P1: N TerraformRuns at once; time until N children exist, counted
	// with a metadata-only watch (see countChildren).
	children, err := countChildren(ctx, bcfg, p.gvr, "runs", n)
	if err != nil {
		return res, err
	}
	if dir := os.Getenv("BENCH_APISERVER_PROFILE"); dir != "" {
		go profileAPIServer(ctx, bcfg, filepath.Join(dir, fmt.Sprintf("apiserver-p1-%d.pb.gz", n)))
		if pprofAddr != "" {
			go func() {
				if err := saveProfile(pprofAddr, "profile?seconds=10", filepath.Join(dir, fmt.Sprintf("manager-p1-%d.pb.gz", n))); err != nil {
					logf("manager profile: %v", err)
				}
			}()
		}
	}
	cpu0 = usage(mgr.Process.Pid)
	start = time.Now()
	if err := parallel(n, func(i int) error {
		run := p.run(fmt.Sprintf("r%05d", i), "runs").Obj()
		run.UID = ""
		return c.Create(ctx, run)
	}); err != nil {
		return res, err
	}
	res.P1RunsCreated = time.Since(start)
	select {
	case err := <-children:
		if err != nil {
			return res, fmt.Errorf("P1: %w", err)
		}
	case <-time.After(10 * time.Minute):
		return res, fmt.Errorf("P1: timed out after 10m")
	}
	res.P1Manager = time.Since(start)
	res.P1CPU = sub(usage(mgr.Process.Pid), cpu0)
	writes := settled(auditLog, countWrites)
	res.WritesPerRun = float64(writes-writesBefore) / float64(n)
	reads, _ := countReads(auditLog, "opr8r-manager")
	res.ReadsPerRun = float64(reads-readsBefore) / float64(n)
	if os.Getenv("BENCH_AUDIT_SUMMARY") == "1" {
		sum, _ := auditSummary(auditLog, auditSkip)
		keys := make([]string, 0, len(sum))
		for k := range sum {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			logf("P1 audit: %s %d", k, sum[k])
		}
	}

	logf("P1b (N=%d): writes to start a run without the finalizer policy", n)
	res.P1bRuns = min(n, 100)
	if res.WritesPerRunNoPolicy, err = withoutFinalizerPolicy(ctx, c, bcfg, p, auditLog, res.P1bRuns); err != nil {
		return res, fmt.Errorf("P1b: %w", err)
	}
	if os.Getenv("BENCH_P1_ONLY") == "1" {
		return res, nil
	}

	logf("P2 (N=%d)", n)
	// P2: patch a child's status (the plan step finished); time until the
	// run's status shows it. One event per run, up to 1000.
	events := n
	if events > 1000 {
		events = 1000
	}
	// An engine's first change of a run may come before its first step
	// reports (Tekton's plan TaskRun): made before the timed changes, and
	// shown (its steps pending) before P2 starts.
	var madeSome atomic.Bool
	if err := parallel(events, func(i int) error {
		run := &infrav1.TerraformRun{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "runs", Name: fmt.Sprintf("r%05d", i)}, run); err != nil {
			return err
		}
		made, err := p.Prepare(ctx, c, key("runs", run.Status.Run.ID))
		if made {
			madeSome.Store(true)
		}
		return err
	}); err != nil {
		return res, fmt.Errorf("P2 prepare: %w", err)
	}
	if madeSome.Load() {
		if err := waitFor(5*time.Minute, func() (bool, error) {
			time.Sleep(time.Second)
			l := &infrav1.TerraformRunList{}
			if err := c.List(ctx, l, client.InNamespace("runs")); err != nil {
				return false, err
			}
			shown := 0
			for _, r := range l.Items {
				if r.Status.Run != nil && len(r.Status.Run.Steps) > 0 {
					shown++
				}
			}
			return shown >= events, nil
		}); err != nil {
			return res, fmt.Errorf("P2 prepare: %w", err)
		}
	}
	statusBefore := settled(auditLog, countStatusWrites)
	// P2 is latency in a steady state, not in the wake of P1's N creates
	// (the API server and etcd keep working for a while after them).
	res.P2Settle, res.P2SettleCPU = quiesce(mgr.Process.Pid, 2*time.Minute)
	// The run's status is read from a watch, as a user's client would see
	// it: polling would add its interval and load the API server.
	runs, err := watchRuns(ctx, bcfg, c.Scheme(), "runs")
	if err != nil {
		return res, err
	}
	metricsBefore, metricsErr := scrapeMetrics(metricsAddr)
	var ownWrites []time.Duration
	for i := 0; i < events; i++ {
		name := fmt.Sprintf("r%05d", i)
		run := &infrav1.TerraformRun{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "runs", Name: name}, run); err != nil {
			return res, err
		}
		child := run.Status.Run.ID
		t0 := time.Now()
		if err := p.StepDone(ctx, c, key("runs", child)); err != nil {
			return res, err
		}
		ownWrites = append(ownWrites, time.Since(t0))
		if err := runs.await(name, time.Minute, cloneDone); err != nil {
			runs.stop()
			return res, fmt.Errorf("P2: %w", err)
		}
		res.P2 = append(res.P2, time.Since(t0))
	}
	runs.stop()
	res.P2Parts = p2Breakdown{Write: ownWrites}
	if metricsAfter, err := scrapeMetrics(metricsAddr); err == nil && metricsErr == nil {
		res.P2Parts = breakdown(metricsBefore, metricsAfter, ownWrites)
	} else {
		logf("P2: the manager's metrics: %v %v", metricsErr, err)
	}
	statusAfter := settled(auditLog, countStatusWrites)
	res.P3StatusWritesPerChange = float64(statusAfter-statusBefore) / float64(events)

	logf("P3 (N=%d)", n)
	// P3: finish every run, then restart the manager and count its writes
	// while it resyncs N Ready runs.
	if err := parallel(n, func(i int) error {
		run := &infrav1.TerraformRun{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "runs", Name: fmt.Sprintf("r%05d", i)}, run); err != nil {
			return err
		}
		return p.Finish(ctx, c, key("runs", run.Status.Run.ID))
	}); err != nil {
		return res, err
	}
	if err := waitFor(10*time.Minute, func() (bool, error) {
		time.Sleep(500 * time.Millisecond) // full lists of N runs are heavy
		l := &infrav1.TerraformRunList{}
		if err := c.List(ctx, l, client.InNamespace("runs")); err != nil {
			return false, err
		}
		ready := 0
		for _, r := range l.Items {
			if r.Status.Phase == string(infrav1.RunSucceeded) {
				ready++
			}
		}
		return ready == n, nil
	}); err != nil {
		return res, fmt.Errorf("P3: %w", err)
	}
	// The manager labels each finished child settled on the pass after
	// the one that recorded its result: the resync starts once all are.
	if err := waitRecorded(ctx, bcfg, p, "runs", n); err != nil {
		return res, fmt.Errorf("P3: %w", err)
	}
	time.Sleep(2 * time.Second)
	stop(mgr)
	time.Sleep(2 * time.Second)
	before := settled(auditLog, countWrites)
	mgr, pprofAddr, err = startManager(kcPath, nil)
	if err != nil {
		return res, err
	}
	time.Sleep(time.Duration(10+n/250) * time.Second)
	after := settled(auditLog, countWrites)
	res.P3ResyncWrites = after - before

	logf("P4 (N=%d)", n)
	// P4: N readable-plan Secrets (opr8r's, not read by the manager) and
	// 2N foreign Workflows and PipelineRuns (not opr8r's).
	// Both P4 figures come from the same (restarted) manager, after it has
	// resynced every run.
	res.P4RSS = rss(mgr.Process.Pid)
	plan := []byte(strings.Repeat("  # terraform_data.x will be created\n  + resource \"terraform_data\" \"x\" {\n      + id = (known after apply)\n    }\n", 160)) // ~16 KiB
	if err := parallel(n, func(i int) error {
		// The readable plan the plan step writes for every run, labelled
		// as the step labels it: opr8r's, but never read by the manager.
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names.PlanSecretName(fmt.Sprintf("r%05d", i)), Namespace: "runs",
			Labels: map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue, infrav1.ComponentLabel: infrav1.ComponentPlan}},
			Data: map[string][]byte{"plan.txt": plan}}
		if err := c.Create(ctx, sec); err != nil {
			return err
		}
		for _, k := range enginestest.Kits() {
			if k.Bench == nil {
				continue
			}
			if err := c.Create(ctx, k.Bench.Foreign(fmt.Sprintf("f%05d", i), "foreign")); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return res, err
	}
	time.Sleep(10 * time.Second)
	res.P4RSSForeign = rss(mgr.Process.Pid)
	res.P4PeakRSS = procStatus(mgr.Process.Pid, "VmHWM:")
	res.P4RSSAnon, res.P4RSSFile = procStatus(mgr.Process.Pid, "RssAnon:"), procStatus(mgr.Process.Pid, "RssFile:")
	// At rest: the manager idle (its restart's resync and the objects
	// above handled), then two of its memory release intervals.
	res.P4RestWait, _ = quiesce(mgr.Process.Pid, 2*time.Minute)
	time.Sleep(30 * time.Second)
	res.P4RestRSS = rss(mgr.Process.Pid)
	res.P4RestAnon, res.P4RestFile = procStatus(mgr.Process.Pid, "RssAnon:"), procStatus(mgr.Process.Pid, "RssFile:")
	if dir := os.Getenv("BENCH_HEAP_PROFILE"); dir != "" && pprofAddr != "" {
		if err := saveHeapProfile(pprofAddr, filepath.Join(dir, fmt.Sprintf("heap-%d.pb.gz", n))); err != nil {
			return res, err
		}
	}
	// Last, as the forced GC would lower the RSS figures above.
	if pprofAddr == "" {
		return res, nil // a manager without --pprof-bind-address
	}
	if res.P4LiveHeap, err = liveHeap(pprofAddr); err != nil {
		return res, fmt.Errorf("P4 live heap: %w", err)
	}

	// Variants: the same resync under other Go runtime settings, e.g.
	// BENCH_P4_ENVS="GOGC=50;GOMEMLIMIT=110MiB".
	for _, v := range strings.Split(os.Getenv("BENCH_P4_ENVS"), ";") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		stop(mgr)
		if mgr, pprofAddr, err = startManager(kcPath, nil, strings.Fields(v)...); err != nil {
			return res, err
		}
		time.Sleep(time.Duration(20+n/250) * time.Second)
		p := p4Variant{Env: v, RSS: rss(mgr.Process.Pid), Peak: procStatus(mgr.Process.Pid, "VmHWM:"),
			Anon: procStatus(mgr.Process.Pid, "RssAnon:"), File: procStatus(mgr.Process.Pid, "RssFile:")}
		if pprofAddr != "" {
			if p.LiveHeap, err = liveHeap(pprofAddr); err != nil {
				return res, err
			}
		}
		res.P4Variants = append(res.P4Variants, p)
	}
	return res, nil
}

// controlPlaneWithAudit starts envtest's kube-apiserver and etcd with the
// CRDs and an audit log of every write and read (in tmp).
func controlPlaneWithAudit(tmp string) (env *envtest.Environment, cfg *rest.Config, auditLog string, err error) {
	auditLog = filepath.Join(tmp, "audit.log")
	_ = os.WriteFile(filepath.Join(tmp, "policy.yaml"), []byte(auditPolicy), 0o644)
	env = &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(envtestutil.RepoRoot(), "config", "crd", "bases")}}
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("audit-policy-file", filepath.Join(tmp, "policy.yaml"))
	args.Set("audit-log-path", auditLog)
	args.Set("audit-log-mode", "batch")
	args.Set("audit-log-batch-max-wait", "1s")
	// One file, never rotated (the default rotates at 100 MB, and the
	// counts would then lose what was rotated away), and a buffer that
	// does not overflow (the batch backend drops events when it does).
	args.Set("audit-log-maxsize", "0")
	args.Set("audit-log-batch-buffer-size", "500000")
	cfg, err = env.Start()
	return env, cfg, auditLog, err
}

// p4Variant is P4 (no foreign objects) under other runtime settings.
type p4Variant struct {
	Env                             string
	RSS, Peak, Anon, File, LiveHeap int64
}

// countChildren reports on the returned channel once n children (of the
// resource gvr) exist in ns. It counts the ADDED events of one metadata-only watch: polling lists
// of up to N Workflows would load the API server the manager is being
// timed on, and the baselines carry no such load.
func countChildren(ctx context.Context, cfg *rest.Config, gvr schema.GroupVersionResource, ns string, n int) (<-chan error, error) {
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	res := mc.Resource(gvr).Namespace(ns)
	l, err := res.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, m := range l.Items {
		seen[m.Name] = true
	}
	w, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		defer w.Stop()
		for len(seen) < n {
			ev, ok := <-w.ResultChan()
			if !ok {
				done <- fmt.Errorf("the watch of %s closed after %d of %d", gvr.Resource, len(seen), n)
				return
			}
			switch ev.Type {
			case watch.Added:
				if m, ok := ev.Object.(*metav1.PartialObjectMetadata); ok {
					seen[m.Name] = true
				}
			case watch.Error:
				done <- fmt.Errorf("watching %s: %v", gvr.Resource, ev.Object)
				return
			}
		}
		done <- nil
	}()
	return done, nil
}

// quiesce waits until the manager, kube-apiserver and etcd together use
// less than a tenth of a core over 3s, or until limit; it returns how long
// it waited and the CPU seconds each used meanwhile.
func quiesce(mgr int, limit time.Duration) (time.Duration, [3]float64) {
	const window = 3 * time.Second
	start, first := time.Now(), usage(mgr)
	for time.Since(start) < limit {
		a := usage(mgr)
		time.Sleep(window)
		d := sub(usage(mgr), a)
		if d[0]+d[1]+d[2] < 0.1*window.Seconds() {
			break
		}
	}
	return time.Since(start), sub(usage(mgr), first)
}

// runWatch is one watch of the TerraformRuns of a namespace.
type runWatch struct {
	w watch.Interface
}

func watchRuns(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, ns string) (*runWatch, error) {
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	l := &infrav1.TerraformRunList{}
	if err := wc.List(ctx, l, client.InNamespace(ns), client.Limit(1)); err != nil {
		return nil, err
	}
	w, err := wc.Watch(ctx, &infrav1.TerraformRunList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: l.ResourceVersion}})
	if err != nil {
		return nil, err
	}
	return &runWatch{w: w}, nil
}

// await reads events until the run called name satisfies ok.
func (rw *runWatch) await(name string, limit time.Duration, ok func(*infrav1.TerraformRun) bool) error {
	timeout := time.After(limit)
	for {
		select {
		case ev, open := <-rw.w.ResultChan():
			if !open {
				return fmt.Errorf("the watch of TerraformRuns closed")
			}
			if ev.Type == watch.Error {
				return fmt.Errorf("watching TerraformRuns: %v", ev.Object)
			}
			if r, isRun := ev.Object.(*infrav1.TerraformRun); isRun && r.Name == name && ok(r) {
				return nil
			}
		case <-timeout:
			return fmt.Errorf("run %s: timed out after %s", name, limit)
		}
	}
}

func (rw *runWatch) stop() { rw.w.Stop() }

// floor times a bare client making, for each of n runs, the writes a
// controller cannot avoid, with the run's creation that the manager's P1
// also includes: create the run (the finalizer comes with it, from the
// admission policy opr8r-finalizer), create the child (its small inputs
// inside), patch the status. Its objects are removed before the manager
// starts.
func floor(ctx context.Context, c client.Client, p enginePlayer, n int) (time.Duration, [3]float64, error) {
	const ns = "floor"
	children := make([]client.Object, n)
	gvk := p.eng.ChildGVK()
	cpu0 := usage(0)
	start := time.Now()
	if err := parallel(n, func(i int) error {
		run := p.run(fmt.Sprintf("f%05d", i), ns).Obj()
		run.UID = ""
		if err := c.Create(ctx, run); err != nil {
			return err
		}
		obj, err := p.build(run)
		if err != nil {
			return err
		}
		obj.SetOwnerReferences([]metav1.OwnerReference{*metav1.NewControllerRef(run, infrav1.GroupVersion.WithKind("TerraformRun"))})
		if err := c.Create(ctx, obj); err != nil {
			return err
		}
		children[i] = obj
		name := obj.GetName()
		base := run.DeepCopy()
		now := metav1.Now()
		run.Status.Run = &infrav1.RunStatus{ID: name, Type: infrav1.RunApply, Engine: p.name, Attempt: 1,
			Child: infrav1.ChildReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: name}, Phase: infrav1.RunPending, StartedAt: &now}
		for _, t := range []string{infrav1.PlannedCondition, infrav1.ReconcilingCondition, infrav1.ReadyCondition} {
			apimeta.SetStatusCondition(&run.Status.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionUnknown, Reason: infrav1.ReasonProgressing, Message: "run " + name + ": pending"})
		}
		run.Status.Phase = string(infrav1.RunPending)
		return c.Status().Patch(ctx, run, client.MergeFrom(base))
	}); err != nil {
		return 0, [3]float64{}, err
	}
	took, cpu := time.Since(start), sub(usage(0), cpu0)
	// Removed one by one: a deletecollection of thousands of children
	// outlasts the API server's request timeout.
	if err := parallel(n, func(i int) error {
		run := &infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("f%05d", i), Namespace: ns}}
		if err := c.Delete(ctx, children[i]); client.IgnoreNotFound(err) != nil {
			return err
		}
		if err := c.Patch(ctx, run, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`))); client.IgnoreNotFound(err) != nil {
			return err
		}
		return client.IgnoreNotFound(c.Delete(ctx, run))
	}); err != nil {
		return 0, [3]float64{}, err
	}
	return took, cpu, nil
}

// liveHeap forces a GC in the manager and reads its heap in use
// (runtime.MemStats.HeapAlloc) from its pprof endpoint.
func liveHeap(addr string) (int64, error) {
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "# HeapAlloc = "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no HeapAlloc in the heap profile")
}

// freeAddr returns a free local TCP address.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func parallel(n int, fn func(i int) error) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, 32)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	return first
}

func waitFor(limit time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("timed out after %s", limit)
}

func startManager(kubeconfig string, extra []string, env ...string) (*exec.Cmd, string, error) {
	bin := filepath.Join(envtestutil.RepoRoot(), "bin", "bench-manager")
	if b := os.Getenv("BENCH_MANAGER_BIN"); b != "" {
		bin = b // e.g. an older build, for before-and-after figures
	}
	// No cap on active children (--max-active-runs, 100 by default): P1
	// starts N runs at once, and their children never finish during it.
	args := []string{"--engines=" + playedEngines(), "--metrics-bind-address=0", "--health-probe-bind-address=0", "--max-active-runs=0",
		fmt.Sprintf("--kube-api-qps=%d", qps), fmt.Sprintf("--kube-api-burst=%d", burst), "--zap-log-level=error"}
	pprofAddr := ""
	if help, _ := exec.Command(bin, "--help").CombinedOutput(); strings.Contains(string(help), "pprof-bind-address") {
		var err error
		if pprofAddr, err = freeAddr(); err != nil {
			return nil, "", err
		}
		args = append(args, "--pprof-bind-address="+pprofAddr)
	}
	args = append(append(args, extra...), strings.Fields(os.Getenv("BENCH_MANAGER_FLAGS"))...)
	cmd := exec.Command(bin, args...)
	// Later entries win: BENCH_MANAGER_ENV over the bench's environment,
	// a P4 variant over both.
	cmd.Env = append(append(append(os.Environ(), "KUBECONFIG="+kubeconfig), strings.Fields(os.Getenv("BENCH_MANAGER_ENV"))...), env...)
	cmd.Stderr = os.Stderr
	return cmd, pprofAddr, cmd.Start()
}

func stop(cmd *exec.Cmd) {
	if cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	_, _ = cmd.Process.Wait()
}

// controlPlane returns the pids of this process's kube-apiserver and etcd.
func controlPlane() []int {
	var api, etcd int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := statFields(string(b))
		if len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		switch f[0] {
		case "kube-apiserver":
			api = pid
		case "etcd":
			etcd = pid
		}
	}
	return []int{api, etcd}
}

// statFields returns comm, ppid, ... utime (index 11), stime (12) of a
// /proc/<pid>/stat line.
func statFields(stat string) []string {
	open, end := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return nil
	}
	rest := strings.Fields(stat[end+1:]) // state, ppid, ...
	if len(rest) < 13 {
		return nil
	}
	return append([]string{stat[open+1 : end]}, rest[1:]...)
}

// cpuSeconds returns the user+system CPU seconds of each pid (0: none).
func cpuSeconds(pids ...int) [3]float64 {
	var out [3]float64
	for i, pid := range pids {
		if pid == 0 || i >= len(out) {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := statFields(string(b))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		out[i] = (u + st) / 100 // USER_HZ
	}
	return out
}

// usage returns the CPU seconds of the manager (pid mgr, 0: none),
// kube-apiserver and etcd.
func usage(mgr int) [3]float64 { return cpuSeconds(append([]int{mgr}, controlPlane()...)...) }

func sub(a, b [3]float64) [3]float64 { return [3]float64{a[0] - b[0], a[1] - b[1], a[2] - b[2]} }

func fmtCPU(c [3]float64) string { return fmt.Sprintf("%.1f/%.1f/%.1f", c[0], c[1], c[2]) }

// profileAPIServer saves a 10s CPU profile of kube-apiserver to path.
func profileAPIServer(ctx context.Context, cfg *rest.Config, path string) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		logf("profile: %v", err)
		return
	}
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "10").DoRaw(ctx)
	if err != nil {
		logf("profile: %v", err)
		return
	}
	_ = os.WriteFile(path, b, 0o644)
}

// saveHeapProfile writes the manager's heap profile (after a GC) to path.
func saveHeapProfile(addr, path string) error { return saveProfile(addr, "heap?gc=1", path) }

// saveProfile writes the manager's /debug/pprof/<what> to path.
func saveProfile(addr, what, path string) error {
	resp, err := http.Get("http://" + addr + "/debug/pprof/" + what)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// rss is a process's resident set size in bytes.
func rss(pid int) int64 { return procStatus(pid, "VmRSS:") }

// procStatus reads a size in kB from /proc/<pid>/status, in bytes.
func procStatus(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), field) {
			kb, _ := strconv.ParseInt(strings.Fields(s.Text())[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

type auditEvent struct {
	User      struct{ Username string } `json:"user"`
	Verb      string                    `json:"verb"`
	Stage     string                    `json:"stage"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

func readAudit(path, user string, keep func(auditEvent) bool) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<24)
	n := 0
	for s.Scan() {
		var e auditEvent
		if json.Unmarshal(s.Bytes(), &e) != nil || e.Stage != "ResponseComplete" || e.User.Username != user {
			continue
		}
		if keep(e) {
			n++
		}
	}
	return n, s.Err()
}

// settled returns the manager's count once the audit log has caught up:
// two reads 2s apart agree (under load the batched audit writer lags by
// seconds), or after a minute.
func settled(path string, count func(path, user string) (int, error)) int {
	prev := -1
	for i := 0; i < 30; i++ {
		n, _ := count(path, "opr8r-manager")
		if n == prev {
			return n
		}
		prev = n
		time.Sleep(2 * time.Second)
	}
	return prev
}

func isWrite(verb string) bool {
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

func countWrites(path, user string) (int, error) {
	return readAudit(path, user, func(e auditEvent) bool { return isWrite(e.Verb) })
}

func countReads(path, user string) (int, error) {
	return readAudit(path, user, func(e auditEvent) bool { return !isWrite(e.Verb) })
}

// auditSummary counts requests by user, verb and resource, skipping the
// first skip events (ResponseComplete only).
func auditSummary(path string, skip int) (map[string]int, int) {
	out := map[string]int{}
	f, err := os.Open(path)
	if err != nil {
		return out, skip
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<24)
	i := 0
	for s.Scan() {
		var e auditEvent
		if json.Unmarshal(s.Bytes(), &e) != nil || e.Stage != "ResponseComplete" {
			continue
		}
		i++
		if i <= skip {
			continue
		}
		out[fmt.Sprintf("%s %s %s/%s %d", e.User.Username, e.Verb, e.ObjectRef.Resource, e.ObjectRef.Subresource, e.ResponseStatus.Code)]++
	}
	return out, i
}

func countStatusWrites(path, user string) (int, error) {
	return readAudit(path, user, func(e auditEvent) bool {
		return e.ObjectRef.Resource == "terraformruns" && e.ObjectRef.Subresource == "status"
	})
}
