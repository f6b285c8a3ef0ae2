// Command bench measures the manager against a real API server (envtest):
//
//	P1 throughput: N TerraformRuns created at once, time until N children
//	   exist, against a bare client creating N equivalent Workflows with the
//	   same QPS settings, in the same run (a ratio).
//	P2 latency: a child's status patched, time until the run's status shows
//	   it; p50/p95/p99.
//	P3 writes: the manager's API writes, from the API server's audit log, on
//	   a restart (resync) of N Ready runs.
//	P4 memory: the manager's RSS with N runs, then with 2N foreign
//	   Workflows and PipelineRuns added.
//
// The manager runs as a subprocess (bin/bench-manager) so its RSS is its
// own; no engine controller runs, the bench writes child status itself.
// Run it with make bench; BENCH_SIZES sets N (default 100,1000,5000).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pipelines/argo"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/manager"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
	"github.com/opr8r/opr8r/test/envtestutil"
)

const (
	qps   = 200
	burst = 400
)

type result struct {
	N                           int
	P1Manager, P1Baseline       time.Duration
	P2                          []time.Duration
	P3ResyncWrites              int
	P3StatusWritesPerChange     float64
	P4RSS, P4RSSForeign         int64
	CreatesPerRun, WritesPerRun float64
}

func main() {
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
	fmt.Printf("\n== N=%d\n", r.N)
	fmt.Printf("P1 throughput: manager %.2fs, bare client %.2fs, ratio %.2f (target <= 1.25)\n", r.P1Manager.Seconds(), r.P1Baseline.Seconds(), r.P1Manager.Seconds()/r.P1Baseline.Seconds())
	fmt.Printf("P2 latency over %d events: p50 %dms, p95 %dms, p99 %dms (target p99 <= 100ms)\n", len(r.P2), pct(r.P2, .5).Milliseconds(), pct(r.P2, .95).Milliseconds(), pct(r.P2, .99).Milliseconds())
	fmt.Printf("P3 writes: %.2f manager writes per run to start it; %.2f status writes per observed child change; %d writes on a resync of %d Ready runs (target 0)\n", r.WritesPerRun, r.P3StatusWritesPerChange, r.P3ResyncWrites, r.N)
	fmt.Printf("P4 memory: manager RSS %d MiB with %d runs; %d MiB after %d foreign Workflows and PipelineRuns (%+.1f%%; targets <= 150 MiB, < 10%%)\n",
		r.P4RSS>>20, r.N, r.P4RSSForeign>>20, 2*r.N, 100*float64(r.P4RSSForeign-r.P4RSS)/float64(r.P4RSS))
}

// auditPolicy logs every write, at metadata level.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
rules:
  - level: Metadata
    verbs: [create, update, patch, delete]
  - level: None
`

func benchOne(n int) (result, error) {
	res := result{N: n}
	tmp, err := os.MkdirTemp("", "opr8r-bench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(tmp)
	auditLog := filepath.Join(tmp, "audit.log")
	_ = os.WriteFile(filepath.Join(tmp, "policy.yaml"), []byte(auditPolicy), 0o644)
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(envtestutil.RepoRoot(), "config", "crd", "bases")}}
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("audit-policy-file", filepath.Join(tmp, "policy.yaml"))
	args.Set("audit-log-path", auditLog)
	args.Set("audit-log-mode", "batch")
	args.Set("audit-log-batch-max-wait", "1s")
	cfg, err := env.Start()
	if err != nil {
		return res, err
	}
	defer env.Stop()
	ctx := context.Background()
	if err := envtestutil.InstallArgoCRDs(ctx, cfg); err != nil {
		return res, err
	}
	if err := envtestutil.InstallTektonCRDs(ctx, cfg); err != nil {
		return res, err
	}
	scheme, _ := manager.Scheme()
	bcfg := rest.CopyConfig(cfg)
	bcfg.QPS, bcfg.Burst = qps, burst
	c, err := client.New(bcfg, client.Options{Scheme: scheme})
	if err != nil {
		return res, err
	}
	for _, ns := range []string{"runs", "baseline", "foreign"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return res, err
		}
	}

	logf("P1 baseline (N=%d)", n)
	// P1 baseline: a bare client creating N Workflows the manager would create.
	start := time.Now()
	if err := parallel(n, func(i int) error {
		run := testutil.MakeRun(fmt.Sprintf("b%05d", i), "baseline").Auto().Obj()
		eff := pipeline.Defaults(run, infrav1.EngineArgo, testutil.Config)
		hash := pipeline.SpecHash(eff)
		obj, err := argo.New().Build(engine.Request{Run: eff, Type: infrav1.RunApply, Name: pipeline.ChildName(run.Name, infrav1.RunApply, hash, 1), SpecHash: hash, Config: testutil.Config})
		if err != nil {
			return err
		}
		obj.SetOwnerReferences(nil)
		return c.Create(ctx, obj)
	}); err != nil {
		return res, err
	}
	res.P1Baseline = time.Since(start)

	logf("The manager (N=%d)", n)
	// The manager, as a subprocess with its own user (for the audit log).
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "opr8r-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return res, err
	}
	kc, _ := user.KubeConfig()
	kcPath := filepath.Join(tmp, "manager.kubeconfig")
	_ = os.WriteFile(kcPath, kc, 0o600)
	mgr, err := startManager(kcPath)
	if err != nil {
		return res, err
	}
	defer stop(mgr)

	logf("P1 (N=%d)", n)
	// P1: N TerraformRuns at once; time until N children exist.
	start = time.Now()
	if err := parallel(n, func(i int) error {
		run := testutil.MakeRun(fmt.Sprintf("r%05d", i), "runs").Auto().Obj()
		run.UID = ""
		return c.Create(ctx, run)
	}); err != nil {
		return res, err
	}
	if err := waitFor(10*time.Minute, func() (bool, error) {
		l := &wfv1.WorkflowList{}
		if err := c.List(ctx, l, client.InNamespace("runs")); err != nil {
			return false, err
		}
		return len(l.Items) >= n, nil
	}); err != nil {
		return res, fmt.Errorf("P1: %w", err)
	}
	res.P1Manager = time.Since(start)
	time.Sleep(3 * time.Second)
	writes, _ := countWrites(auditLog, "opr8r-manager")
	res.WritesPerRun = float64(writes) / float64(n)

	logf("P2 (N=%d)", n)
	// P2: patch a child's status (the plan step finished); time until the
	// run's status shows it. One event per run, up to 1000.
	events := n
	if events > 1000 {
		events = 1000
	}
	statusBefore, _ := countStatusWrites(auditLog, "opr8r-manager")
	for i := 0; i < events; i++ {
		name := fmt.Sprintf("r%05d", i)
		run := &infrav1.TerraformRun{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "runs", Name: name}, run); err != nil {
			return res, err
		}
		wfName := run.Status.Run.ID
		t0 := time.Now()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			wf := &wfv1.Workflow{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "runs", Name: wfName}, wf); err != nil {
				return err
			}
			wf.Status.Phase = wfv1.WorkflowRunning
			wf.Status.StartedAt = metav1.Now()
			if wf.Status.Nodes == nil {
				wf.Status.Nodes = wfv1.Nodes{}
			}
			wf.Status.Nodes.Set(wfName+"-1", wfv1.NodeStatus{ID: wfName + "-1", Name: wfName + ".clone", DisplayName: "clone", TemplateName: "clone", Type: wfv1.NodeTypePod, Phase: wfv1.NodeSucceeded,
				StartedAt: metav1.Now(), FinishedAt: metav1.Now()})
			return c.Update(ctx, wf)
		}); err != nil {
			return res, err
		}
		if err := waitFor(time.Minute, func() (bool, error) {
			r := &infrav1.TerraformRun{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: "runs", Name: name}, r); err != nil {
				return false, err
			}
			return r.Status.Run != nil && len(r.Status.Run.Steps) > 0, nil
		}); err != nil {
			return res, fmt.Errorf("P2: %w", err)
		}
		res.P2 = append(res.P2, time.Since(t0))
	}
	time.Sleep(2 * time.Second)
	statusAfter, _ := countStatusWrites(auditLog, "opr8r-manager")
	res.P3StatusWritesPerChange = float64(statusAfter-statusBefore) / float64(events)

	logf("P3 (N=%d)", n)
	// P3: finish every run, then restart the manager and count its writes
	// while it resyncs N Ready runs.
	if err := parallel(n, func(i int) error { return finish(ctx, c, fmt.Sprintf("r%05d", i)) }); err != nil {
		return res, err
	}
	if err := waitFor(10*time.Minute, func() (bool, error) {
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
	time.Sleep(2 * time.Second)
	stop(mgr)
	time.Sleep(2 * time.Second)
	before, _ := countWrites(auditLog, "opr8r-manager")
	mgr, err = startManager(kcPath)
	if err != nil {
		return res, err
	}
	time.Sleep(time.Duration(10+n/250) * time.Second)
	after, _ := countWrites(auditLog, "opr8r-manager")
	res.P3ResyncWrites = after - before

	logf("P4 (N=%d)", n)
	// P4: 2N foreign Workflows and PipelineRuns (not opr8r's).
	// Both P4 figures come from the same (restarted) manager, after it has
	// resynced every run.
	res.P4RSS = rss(mgr.Process.Pid)
	if err := parallel(n, func(i int) error {
		wf := &wfv1.Workflow{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("f%05d", i), Namespace: "foreign"}, Spec: wfv1.WorkflowSpec{Entrypoint: "main",
			Templates: []wfv1.Template{{Name: "main", Container: &corev1.Container{Image: "busybox", Command: []string{"sh", "-c", strings.Repeat("echo padding; ", 40)}}}}}}
		if err := c.Create(ctx, wf); err != nil {
			return err
		}
		pr := &tektonv1.PipelineRun{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("f%05d", i), Namespace: "foreign"},
			Spec: tektonv1.PipelineRunSpec{PipelineRef: &tektonv1.PipelineRef{Name: "someone-elses-" + strings.Repeat("x", 100)}}}
		return c.Create(ctx, pr)
	}); err != nil {
		return res, err
	}
	time.Sleep(10 * time.Second)
	res.P4RSSForeign = rss(mgr.Process.Pid)
	return res, nil
}

// finish completes a run's Workflow as Argo would (no changes, outputs none).
func finish(ctx context.Context, c client.Client, name string) error {
	run := &infrav1.TerraformRun{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "runs", Name: name}, run); err != nil {
		return err
	}
	wfName := run.Status.Run.ID
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		wf := &wfv1.Workflow{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "runs", Name: wfName}, wf); err != nil {
			return err
		}
		now := metav1.Now()
		set := func(step string, typ wfv1.NodeType, phase wfv1.NodePhase, out *wfv1.Outputs) {
			wf.Status.Nodes.Set(wfName+"-"+step, wfv1.NodeStatus{ID: wfName + "-" + step, Name: wfName + "." + step, DisplayName: step, TemplateName: step, Type: typ, Phase: phase, StartedAt: now, FinishedAt: now, Outputs: out})
		}
		set("init", wfv1.NodeTypePod, wfv1.NodeSucceeded, nil)
		set("plan", wfv1.NodeTypePod, wfv1.NodeSucceeded, &wfv1.Outputs{Parameters: []wfv1.Parameter{
			{Name: "has-changes", Value: wfv1.AnyStringPtr("false")}, {Name: "digest", Value: wfv1.AnyStringPtr("sha256:" + strings.Repeat("0", 64))},
			{Name: "summary", Value: wfv1.AnyStringPtr(`{"add":0,"change":0,"destroy":0,"replace":0}`)}}})
		set("apply", wfv1.NodeTypeSkipped, wfv1.NodeSkipped, nil)
		wf.Status.Phase = wfv1.WorkflowSucceeded
		wf.Status.FinishedAt = now
		return c.Update(ctx, wf)
	})
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

func startManager(kubeconfig string) (*exec.Cmd, error) {
	bin := filepath.Join(envtestutil.RepoRoot(), "bin", "bench-manager")
	cmd := exec.Command(bin, "--engines=argo,tekton", "--metrics-bind-address=0", "--health-probe-bind-address=0",
		fmt.Sprintf("--kube-api-qps=%d", qps), fmt.Sprintf("--kube-api-burst=%d", burst), "--zap-log-level=error")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stderr = os.Stderr
	return cmd, cmd.Start()
}

func stop(cmd *exec.Cmd) {
	if cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	_, _ = cmd.Process.Wait()
}

// rss is a process's resident set size in bytes.
func rss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), "VmRSS:") {
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
	} `json:"objectRef"`
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

func countWrites(path, user string) (int, error) {
	return readAudit(path, user, func(auditEvent) bool { return true })
}

func countStatusWrites(path, user string) (int, error) {
	return readAudit(path, user, func(e auditEvent) bool {
		return e.ObjectRef.Resource == "terraformruns" && e.ObjectRef.Subresource == "status"
	})
}
