//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines/job"
	"github.com/opr8r/opr8r/pkg/names"
)

// TestLatencyBench is `make bench-e2e` (docs/performance.md, "Latency on
// the real cluster"): how long a user waits, on every engine, from
// `kubectl apply` of a trivial TerraformRun (one terraform_data, approval
// Auto) to Succeeded, BENCH_E2E_N runs one after another and then
// BENCH_E2E_BURST at once; for Manual runs (BENCH_E2E_MANUAL), from apply to
// the plan shown in status. Each run's time is broken down into waiting for
// the child, the pods' scheduling and start, each step as opr8r-step timed
// it (terraform's own share apart), and the rest (the engines' hand-offs
// between pods, the manager seeing the end). The floor is one bare pod
// running terraform init, plan and apply of the same module against the
// same kubernetes backend. It is a benchmark: it asserts only that every run
// succeeded, and prints the table (also to bin/e2e/latency.md).
func TestLatencyBench(t *testing.T) {
	if os.Getenv("OPR8R_E2E_BENCH") == "" {
		t.Skip("a benchmark, not a test: make bench-e2e runs it")
	}
	e := setup(t)
	n, burst, manual, floors := envN("BENCH_E2E_N", 10), envN("BENCH_E2E_BURST", 10), envN("BENCH_E2E_MANUAL", 5), envN("BENCH_E2E_FLOOR", 5)
	engs := allEngines()
	if v := os.Getenv("BENCH_E2E_ENGINES"); v != "" {
		engs = strings.Split(v, ",")
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nlatency on the from-source cluster (%d CPUs): %d runs one after another, %d at once, %d Manual runs, per engine; %d floor pods\n\n",
		runtime.NumCPU(), n, burst, manual, floors)
	fl := e.floor(t, floors)
	fmt.Fprintf(&out, "| engine | apply → Succeeded p50 / p95 (one at a time) | %d at once p50 / p95 | Manual: apply → plan in status p50 | p50 ÷ floor |\n| --- | --- | --- | --- | --- |\n", burst)
	var parts strings.Builder
	fmt.Fprintf(&parts, "| engine | to child | pods' scheduling and start | clone | init | plan | apply | export | cleanup | terraform in them | rest |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, engine := range engs {
		var seq []runSample
		for i := 0; i < n; i++ {
			seq = append(seq, e.timedRun(t, engine, fmt.Sprintf("lat-%s-s%d", engine, i), false))
		}
		at := make([]runSample, burst)
		var wg sync.WaitGroup
		for i := range at {
			wg.Add(1)
			go func() {
				defer wg.Done()
				at[i] = e.timedRun(t, engine, fmt.Sprintf("lat-%s-b%d", engine, i), false)
			}()
		}
		wg.Wait()
		var plans []time.Duration
		for i := 0; i < manual; i++ {
			plans = append(plans, e.timedRun(t, engine, fmt.Sprintf("lat-%s-m%d", engine, i), true).total)
		}
		totals := func(s []runSample) []time.Duration {
			var d []time.Duration
			for _, x := range s {
				d = append(d, x.total)
			}
			return d
		}
		p50 := quantile(totals(seq), .5)
		fmt.Fprintf(&out, "| %s | %s / %s | %s / %s | %s | %.1f |\n", engine, secs(p50), secs(quantile(totals(seq), .95)),
			secs(quantile(totals(at), .5)), secs(quantile(totals(at), .95)), secs(quantile(plans, .5)), p50.Seconds()/fl.total.Seconds())
		partsRow(&parts, engine, seq)
		if burst > 0 {
			partsRow(&parts, fmt.Sprintf("%s, %d at once", engine, burst), at)
		}
	}
	fmt.Fprintf(&out, "| floor: one bare pod, terraform init, plan, apply | %s / %s (terraform in it: %s) | | | 1.0 |\n",
		secs(fl.total), secs(fl.p95), secs(fl.terraform))
	fmt.Fprintf(&out, "\nThe p50 of each part, one at a time and at once (a part's p50, so the parts need not add up to the total's):\n\n%s", parts.String())
	t.Log(out.String())
	path := filepath.Join("..", "..", "bin", "e2e", "latency.md")
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		t.Logf("writing %s: %v", path, err)
	}
}

// latencyModule is the trivial module every run applies: one
// terraform_data and its output, nothing to download.
const latencyModule = `variable "v" { type = string }
resource "terraform_data" "x" { input = var.v }
output "v" { value = terraform_data.x.output }
`

// runSample is one run's times.
type runSample struct {
	total     time.Duration            // apply → Succeeded (Manual: → the plan in status)
	toChild   time.Duration            // apply → the child in status
	podStart  time.Duration            // summed over the run's pods: created → first container of a step running
	steps     map[string]time.Duration // each step, as opr8r-step timed it
	terraform time.Duration            // terraform itself, in all the steps
}

// rest is what neither the child's creation, the pods' start nor the steps
// account for: the engines' hand-offs from one pod to the next, and the
// manager seeing the end.
func (s runSample) rest() time.Duration {
	d := s.total - s.toChild - s.podStart
	for _, v := range s.steps {
		d -= v
	}
	return d
}

// timedRun applies one trivial run and times it, then deletes it (Retain:
// nothing to destroy), with its state.
func (e *env) timedRun(t *testing.T, engine, name string, manualPlan bool) runSample {
	t.Helper()
	mode := "Auto"
	if manualPlan {
		mode = "Manual"
	}
	e.absent(t, name)
	_ = e.c.Delete(context.Background(), &corev1.Secret{ObjectMeta: objMeta("tfstate-default-" + names.StateSecretSuffix(name))})
	files, _ := json.Marshal(map[string]string{"main.tf": latencyModule})
	manifest := fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: %s, namespace: %s}
spec:
  engine: %s
  source: {inline: {files: %s}}
  terraform:
    vars: [{name: v, value: %q}]
  approval: {mode: %s}
  deletionPolicy: Retain
  runner: {workspace: {size: 64Mi}}
`, name, ns, engine, files, name, mode)
	defer func() { _ = e.c.Delete(context.Background(), &infrav1.TerraformRun{ObjectMeta: objMeta(name)}) }()
	cmd := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	began := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply %s: %v %s", name, err, out)
	}
	var s runSample
	deadline := began.Add(10 * time.Minute)
	for {
		r := &infrav1.TerraformRun{}
		if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, r); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("%s: get: %v", name, err)
		}
		if s.toChild == 0 && r.Status.Run != nil && r.Status.Run.Child.Name != "" {
			s.toChild = time.Since(began)
		}
		if manualPlan && r.Status.Plan != nil && r.Status.Run != nil && r.Status.Plan.RunID == r.Status.Run.ID {
			s.total = time.Since(began)
			return s
		}
		switch runPhase(r) {
		case infrav1.RunSucceeded:
			s.total = time.Since(began)
			e.partsOf(t, name, &s)
			return s
		case infrav1.RunFailed:
			st, _ := json.MarshalIndent(r.Status, "", "  ")
			t.Fatalf("%s failed:\n%s", name, st)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not Succeeded in 10m", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stepDone is opr8r-step's last line for a step that succeeded.
var stepDone = regexp.MustCompile(`opr8r-step: (\S+) done in (\S+) \(terraform (\S+)\)`)

// partsOf reads the run's pods: when each was created and its first step
// container started, and what opr8r-step logged of each step's time.
func (e *env) partsOf(t *testing.T, name string, s *runSample) {
	pods := &corev1.PodList{}
	if err := e.c.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{infrav1.RunNameLabel: name}); err != nil {
		t.Fatal(err)
	}
	s.steps = map[string]time.Duration{}
	for _, p := range pods.Items {
		// The Job engine runs all steps but a pod's last as init
		// containers (opr8r-step's installer is not a step); Argo's init
		// container (named init) and Tekton's are the engines' own.
		statuses := p.Status.ContainerStatuses
		if p.Labels[job.EngineLabel] == string(infrav1.EngineJob) {
			for _, c := range p.Status.InitContainerStatuses {
				if c.Name != "install-opr8r-step" {
					statuses = append(statuses, c)
				}
			}
		}
		var first time.Time
		for _, c := range statuses {
			var at time.Time
			switch {
			case c.State.Terminated != nil:
				at = c.State.Terminated.StartedAt.Time
			case c.State.Running != nil:
				at = c.State.Running.StartedAt.Time
			}
			if !at.IsZero() && (first.IsZero() || at.Before(first)) {
				first = at
			}
		}
		if !first.IsZero() {
			s.podStart += first.Sub(p.CreationTimestamp.Time)
		}
		out, err := e.podLogs(p)
		if err != nil {
			t.Logf("%s: logs of %s: %v", name, p.Name, err)
			continue
		}
		for _, m := range stepDone.FindAllStringSubmatch(out, -1) {
			took, err1 := time.ParseDuration(m[2])
			tf, err2 := time.ParseDuration(m[3])
			if err1 != nil || err2 != nil || m[1] == "install" || m[1] == "results" {
				continue
			}
			s.steps[m[1]] += took
			s.terraform += tf
		}
	}
}

// partsRow adds a row of each part's p50 over the runs to the parts table.
func partsRow(parts *strings.Builder, label string, runs []runSample) {
	med := func(f func(runSample) time.Duration) string {
		var d []time.Duration
		for _, x := range runs {
			d = append(d, f(x))
		}
		return secs(quantile(d, .5))
	}
	step := func(s string) func(runSample) time.Duration {
		return func(x runSample) time.Duration { return x.steps[s] }
	}
	fmt.Fprintf(parts, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", label,
		med(func(x runSample) time.Duration { return x.toChild }), med(func(x runSample) time.Duration { return x.podStart }),
		med(step(names.StepClone)), med(step(names.StepInit)), med(step(names.StepPlan)), med(step(names.StepApply)),
		med(step(names.StepExport)), med(step(names.StepCleanup)),
		med(func(x runSample) time.Duration { return x.terraform }), med(func(x runSample) time.Duration { return x.rest() }))
}

// floorSample is the floor's times: a bare pod, created → Succeeded, and
// terraform's init, plan and apply in it (timed by the pod itself).
type floorSample struct{ total, p95, terraform time.Duration }

// floor runs n bare pods, one after another, each running terraform init,
// plan and apply of latencyModule against the kubernetes backend, as the
// runs' steps do, in the image the runs use.
func (e *env) floor(t *testing.T, n int) floorSample {
	t.Helper()
	dep := &appsv1.Deployment{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: "opr8r-system", Name: "opr8r"}, dep); err != nil {
		t.Fatal(err)
	}
	image := ""
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--terraform-image="); ok {
			image = v
		}
	}
	if image == "" {
		t.Fatalf("the manager has no --terraform-image: %v", dep.Spec.Template.Spec.Containers[0].Args)
	}
	e.sh(t, fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: bench-floor, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: bench-floor, namespace: %[1]s}
rules:
  - {apiGroups: [""], resources: [secrets], verbs: [get, list, watch, create, update, patch, delete]}
  - {apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, list, watch, create, update, patch, delete]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bench-floor, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: bench-floor}
subjects: [{kind: ServiceAccount, name: bench-floor, namespace: %[1]s}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: bench-floor, namespace: %[1]s}
data:
  main.tf: %[2]q
`, ns, latencyModule), e.kubectl, "apply", "-f", "-")
	var totals, tfTimes []time.Duration
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("bench-floor-%d", i)
		_ = e.c.Delete(context.Background(), &corev1.Pod{ObjectMeta: objMeta(name)})
		_ = e.c.Delete(context.Background(), &corev1.Secret{ObjectMeta: objMeta("tfstate-default-" + name + "-state")})
		for {
			if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &corev1.Pod{}); apierrors.IsNotFound(err) {
				break
			}
			time.Sleep(time.Second)
		}
		script := fmt.Sprintf(`set -e
cp /module/main.tf /work/
cat > /work/backend.tf <<EOF
terraform {
  backend "kubernetes" {
    secret_suffix     = "%[1]s-state"
    namespace         = "%[2]s"
    in_cluster_config = true
  }
}
EOF
cd /work
read t0 _ </proc/uptime
terraform init -input=false -no-color >/dev/null
terraform plan -input=false -no-color -var v=%[1]s -out=tfplan >/dev/null
terraform apply -input=false -no-color tfplan >/dev/null
read t1 _ </proc/uptime
echo "$t0 $t1" >/dev/termination-log
`, name, ns)
		pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  serviceAccountName: bench-floor
  restartPolicy: Never
  securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: terraform
      image: %[3]s
      command: [/bin/sh, -c, %[4]q]
      env: [{name: HOME, value: /work}, {name: TF_IN_AUTOMATION, value: "1"}]
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      volumeMounts: [{name: module, mountPath: /module}, {name: work, mountPath: /work}]
  volumes:
    - {name: module, configMap: {name: bench-floor}}
    - {name: work, emptyDir: {}}
`, name, ns, image, script)
		cmd := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(pod)
		began := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("floor pod: %v %s", err, out)
		}
		for {
			p := &corev1.Pod{}
			if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
				t.Fatal(err)
			}
			if p.Status.Phase == corev1.PodFailed {
				out, _ := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "logs", "-n", ns, name).CombinedOutput()
				t.Fatalf("the floor pod failed: %s", out)
			}
			if p.Status.Phase == corev1.PodSucceeded {
				totals = append(totals, time.Since(began))
				if c := p.Status.ContainerStatuses; len(c) == 1 && c[0].State.Terminated != nil {
					took, err := uptimeSpan(c[0].State.Terminated.Message)
					if err != nil {
						t.Fatalf("the floor pod's termination message: %v", err)
					}
					tfTimes = append(tfTimes, took)
				}
				break
			}
			if time.Since(began) > 5*time.Minute {
				t.Fatalf("the floor pod did not finish in 5m: %+v", p.Status)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return floorSample{total: quantile(totals, .5), p95: quantile(totals, .95), terraform: quantile(tfTimes, .5)}
}

// uptimeSpan reads the floor pod's termination message: /proc/uptime
// before terraform init and after apply. The container's own start and end
// (its status) are kept in whole seconds, too coarse for a second of
// terraform: one run read 1.0 s and the next 0.0 s.
func uptimeSpan(msg string) (time.Duration, error) {
	f := strings.Fields(msg)
	if len(f) != 2 {
		return 0, fmt.Errorf("%q: want two /proc/uptime readings", msg)
	}
	t0, err0 := strconv.ParseFloat(f[0], 64)
	t1, err1 := strconv.ParseFloat(f[1], 64)
	if err0 != nil || err1 != nil || t1 < t0 {
		return 0, fmt.Errorf("%q: want two increasing /proc/uptime readings", msg)
	}
	return time.Duration((t1 - t0) * float64(time.Second)), nil
}

// quantile is the q-quantile of d (nearest rank); 0 for none.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func envN(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}
