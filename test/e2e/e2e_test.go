//go:build e2e

// Package e2e runs the engine scenarios for real: the cluster from
// test/e2e/cluster.sh (kubelet, containerd, kube-proxy), the real Argo and
// Tekton controllers, real step pods running terraform, and opr8r installed
// from its Helm chart. `make e2e` brings the cluster up and runs this.
//
// The scenarios, on every engine (Argo, Tekton, plain Jobs): a plan
// approved with `kubectl tfrun approve` (and, on Argo, with `argo resume`),
// a reverted spec planning again, a no-change rerun, a reject, `kubectl
// tfrun history`, the outputs Secret checked against the state terraform
// wrote, destroy on delete, terraform's own error text for a failing
// module, and a real conftest policy check passing one plan and blocking
// another.
package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
)

const ns = "e2e"

type env struct {
	kubeconfig, kubectl, tfrun, argo string
	c                                client.Client
}

func setup(t *testing.T) *env {
	t.Helper()
	kc := os.Getenv("OPR8R_E2E_KUBECONFIG")
	if kc == "" {
		t.Fatal("OPR8R_E2E_KUBECONFIG is not set: run `make e2e`, which brings up the cluster (test/e2e/cluster.sh up) and sets it")
	}
	e := &env{kubeconfig: kc, kubectl: mustEnv(t, "OPR8R_E2E_KUBECTL"), tfrun: mustEnv(t, "OPR8R_E2E_TFRUN"), argo: mustEnv(t, "OPR8R_E2E_ARGO")}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = infrav1.AddToScheme(s)
	if e.c, err = client.New(cfg, client.Options{Scheme: s}); err != nil {
		t.Fatal(err)
	}
	return e
}

func mustEnv(t *testing.T, k string) string {
	v := os.Getenv(k)
	if v == "" {
		t.Fatalf("%s is not set (make e2e sets it)", k)
	}
	return v
}

// sh runs a real CLI against the cluster and returns its combined output.
func (e *env) sh(t *testing.T, stdin string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	t.Logf("$ %s %s\n%s", filepath.Base(name), strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

const module = `
variable "greeting" {
  type = string
  validation {
    condition     = can(regex("^[A-Za-z ,!]+$", var.greeting))
    error_message = "greeting must be letters, spaces and punctuation."
  }
}
resource "terraform_data" "hello" { input = var.greeting }
output "message" { value = terraform_data.hello.output }
output "token" {
  value     = sha256(terraform_data.hello.id)
  sensitive = true
}
`

func manifest(name, engine, greeting string) string {
	files, _ := json.Marshal(map[string]string{"main.tf": module})
	return fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: %s, namespace: %s}
spec:
  engine: %s
  source: {inline: {files: %s}}
  terraform:
    vars: [{name: greeting, value: %q}]
  approval: {mode: Manual, timeout: 30m}
  outputs: {rename: {message: greeting_message}}
  deletionPolicy: Destroy
  runner: {workspace: {size: 64Mi}}
`, name, ns, engine, files, greeting)
}

// e2eAdmin is the admin kubeconfig's user (its certificate's CN).
const e2eAdmin = "opr8r-e2e-admin"

// shAs runs a command as one of the cluster's people (cluster.sh makes
// <user>.kubeconfig next to the admin's, with its own client certificate).
func (e *env) shAs(t *testing.T, user, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(filepath.Dir(e.kubeconfig), user+".kubeconfig"))
	out, err := cmd.CombinedOutput()
	t.Logf("$ (as %s) %s %s\n%s", user, filepath.Base(name), strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("(as %s) %s %s: %v\n%s", user, filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// shAsErr is shAs for a command that may fail: its output and error.
func (e *env) shAsErr(user, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(filepath.Dir(e.kubeconfig), user+".kubeconfig"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (e *env) get(t *testing.T, name string) *infrav1.TerraformRun {
	t.Helper()
	run := &infrav1.TerraformRun{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, run); err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	return run
}

// waitFor polls the run until ok holds; it fails with the run's status.
func (e *env) waitFor(t *testing.T, name, what string, timeout time.Duration, ok func(*infrav1.TerraformRun) bool) *infrav1.TerraformRun {
	t.Helper()
	return e.waitForIn(t, ns, name, what, timeout, ok)
}

// waitForIn is waitFor for a run in another namespace.
func (e *env) waitForIn(t *testing.T, namespace, name, what string, timeout time.Duration, ok func(*infrav1.TerraformRun) bool) *infrav1.TerraformRun {
	t.Helper()
	deadline := time.Now().Add(timeout)
	start := time.Now()
	for {
		// A read that fails for a moment (the API server restarting in the
		// fault scenarios) is retried until the deadline, not fatal.
		run := &infrav1.TerraformRun{}
		if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, run); err != nil {
			if apierrors.IsNotFound(err) || time.Now().After(deadline) {
				t.Fatalf("get %s: %v", name, err)
			}
			t.Logf("%s: get failed, retrying: %v", name, err)
			time.Sleep(2 * time.Second)
			continue
		}
		if ok(run) {
			t.Logf("%s: %s after %s", name, what, time.Since(start).Round(time.Second))
			return run
		}
		if time.Now().After(deadline) {
			st, _ := json.MarshalIndent(run.Status, "", "  ")
			t.Logf("%s: diagnostics at the timeout:\n%s", name, e.diagnostics(run))
			t.Fatalf("%s: timed out after %s waiting for %s; status:\n%s", name, timeout, what, st)
		}
		time.Sleep(time.Second)
	}
}

// diagnostics is what a scenario that timed out prints besides the run's
// status: its child's status (the gate node, the tasks), the pods of the
// namespace with their phases, the namespace's recent events and the node's
// allocated resources (a node whose CPU requests are full leaves pods
// Pending).
func (e *env) diagnostics(run *infrav1.TerraformRun) string {
	var b strings.Builder
	show := func(args ...string) {
		cmd := exec.Command(e.kubectl, append([]string{"--kubeconfig", e.kubeconfig}, args...)...)
		out, err := cmd.CombinedOutput()
		fmt.Fprintf(&b, "$ kubectl %s\n%s", strings.Join(args, " "), out)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
	}
	if cur := run.Status.Run; cur != nil {
		show("get", strings.ToLower(cur.Child.Kind)+"."+strings.Split(cur.Child.APIVersion, "/")[0], cur.Child.Name, "-n", run.Namespace, "-o", "jsonpath={.status}")
		b.WriteString("\n")
	}
	show("get", "pods", "-n", run.Namespace, "-o", "wide")
	show("get", "events", "-n", run.Namespace, "--sort-by=.lastTimestamp")
	show("describe", "nodes")
	return b.String()
}

func runPhase(run *infrav1.TerraformRun) infrav1.RunPhase {
	if run.Status.Run == nil {
		return ""
	}
	return run.Status.Run.Phase
}

func ready(run *infrav1.TerraformRun) bool {
	for _, c := range run.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True" && run.Status.ObservedGeneration == run.Generation
		}
	}
	return false
}

// readyObserved: the Ready condition speaks for the current generation
// (status.observedGeneration itself moves only when a run for it finishes).
func readyObserved(r *infrav1.TerraformRun) bool {
	for _, c := range r.Status.Conditions {
		if c.Type == "Ready" {
			return c.ObservedGeneration == r.Generation
		}
	}
	return false
}

// awaiting: a new run (not the child named prev) has a plan with changes
// waiting at the gate, for the current spec.
func awaiting(prev string) func(*infrav1.TerraformRun) bool {
	return func(r *infrav1.TerraformRun) bool {
		return readyObserved(r) && r.Status.Run != nil && r.Status.Run.Child.Name != prev &&
			runPhase(r) == infrav1.RunAwaitingApproval && r.Status.Plan != nil && r.Status.Plan.HasChanges
	}
}

// state reads the state terraform wrote to its kubernetes backend.
func (e *env) state(t *testing.T, name string) (outputs map[string]any, resources int) {
	t.Helper()
	sec := &corev1.Secret{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "tfstate-default-" + names.StateSecretSuffix(name)}, sec); err != nil {
		t.Fatalf("state Secret: %v", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(sec.Data["tfstate"]))
	if err != nil {
		t.Fatalf("state Secret is not gzip: %v", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Outputs   map[string]struct{ Value any } `json:"outputs"`
		Resources []json.RawMessage              `json:"resources"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	outputs = map[string]any{}
	for k, v := range st.Outputs {
		outputs[k] = v.Value
	}
	return outputs, len(st.Resources)
}

func (e *env) checkOutputs(t *testing.T, name, greeting string) {
	t.Helper()
	run := e.get(t, name)
	sec := &corev1.Secret{}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: run.Status.OutputsSecretName}, sec); err != nil {
		t.Fatalf("outputs Secret %q: %v", run.Status.OutputsSecretName, err)
	}
	want, resources := e.state(t, name)
	if resources != 1 {
		t.Fatalf("state holds %d resources, want 1", resources)
	}
	if want["message"] != greeting {
		t.Fatalf("terraform's state output message = %v, want %q", want["message"], greeting)
	}
	if got := string(sec.Data["greeting_message"]); got != want["message"] {
		t.Fatalf("outputs Secret greeting_message = %q, terraform's output is %q", got, want["message"])
	}
	if got := string(sec.Data["token"]); got == "" || got != want["token"] {
		t.Fatalf("outputs Secret token = %q, terraform's output is %q", got, want["token"])
	}
	if _, ok := sec.Data["message"]; ok {
		t.Fatal("outputs Secret kept the renamed key message")
	}
}

// stepLogs: kubectl tfrun logs shows the log of every step that ran, each
// ending with opr8r-step's own last line (opr8r-step: <step> done in ...).
func (e *env) stepLogs(t *testing.T, run *infrav1.TerraformRun) {
	t.Helper()
	n := 0
	for _, s := range run.Status.Run.Steps {
		if s.Name == names.StepApprove || s.Phase != infrav1.StepSucceeded {
			continue
		}
		n++
		out := e.sh(t, "", e.tfrun, "logs", run.Name, "-n", ns, "--step", s.Name)
		if !strings.Contains(out, "opr8r-step: "+s.Name+" done in ") {
			t.Errorf("kubectl tfrun logs %s --step %s does not end with opr8r-step's line for %s:\n%s", run.Name, s.Name, s.Name, out)
		}
	}
	if n < 6 {
		t.Errorf("%d steps of %s succeeded, want at least clone, init, plan, apply, export-outputs and cleanup: %+v", n, run.Name, run.Status.Run.Steps)
	}
}

// lifecycle is the scenario list for one engine. The run's name ends in
// -<number>, which the kubernetes backend refuses as a state suffix: opr8r
// adds -state to the default one.
func lifecycle(t *testing.T, e *env, engine string) {
	name := "hello-" + engine + "-1"
	t.Cleanup(func() {
		_ = e.c.Delete(context.Background(), &infrav1.TerraformRun{ObjectMeta: objMeta(name)})
	})

	// 1. kubectl apply → real plan → approval with kubectl tfrun approve.
	e.sh(t, manifest(name, engine, "Hello"), e.kubectl, "apply", "-f", "-")
	run := e.waitFor(t, name, "a plan awaiting approval", 5*time.Minute, awaiting(""))
	if p := run.Status.Plan; p.Add != 1 || p.Digest == "" {
		t.Fatalf("plan = %+v, want 1 to add and a digest", p)
	}
	e.record(t, run, "awaiting-approval")
	e.sh(t, "", e.tfrun, "approve", name, "-n", ns)
	run = e.waitFor(t, name, "applied and Ready", 5*time.Minute, ready)
	e.record(t, run, "applied")
	e.stepLogs(t, run)
	if a := run.Status.Approval; a == nil || !a.Approved || a.By != e2eAdmin || a.Source != infrav1.ApprovedByApproval {
		t.Fatalf("approval = %+v, want approved by %s through a TerraformRunApproval", a, e2eAdmin)
	}
	e.checkOutputs(t, name, "Hello")
	out := e.sh(t, "", e.tfrun, "outputs", name, "-n", ns)
	if !strings.Contains(out, "Hello") {
		t.Fatalf("kubectl tfrun outputs does not show the output:\n%s", out)
	}

	// 2. A spec change → a new plan; on Argo approved with `argo resume`
	// by alice (an approver whose resume the API server stamps).
	e.sh(t, manifest(name, engine, "Hello again"), e.kubectl, "apply", "-f", "-")
	run = e.waitFor(t, name, "the changed plan awaiting approval", 5*time.Minute, awaiting(run.Status.Run.Child.Name))
	if engine == "argo" {
		e.waitGatePublished(t, name, run.Status.Run.Child.Name)
		e.shAs(t, "alice", e.argo, "resume", run.Status.Run.Child.Name, "-n", ns)
	} else {
		e.sh(t, "", e.tfrun, "approve", name, "-n", ns, "--plan", run.Status.Plan.Digest)
	}
	run = e.waitFor(t, name, "the change applied", 5*time.Minute, ready)
	if engine == "argo" && (run.Status.Approval == nil || run.Status.Approval.Source != infrav1.ApprovedByEngine || run.Status.Approval.By != "opr8r-e2e-alice") {
		t.Fatalf("approval by argo resume recorded as %+v, want source Engine, by opr8r-e2e-alice", run.Status.Approval)
	}
	e.checkOutputs(t, name, "Hello again")

	// 3. The spec reverted (A, B, A): a new run and a real plan, never the
	// first run's old child. It needs two approvals by distinct users, not
	// the author's: alice's and bob's, each with their own client
	// certificate; the admin who wrote the change is not counted.
	firstChild := e.get(t, name).Status.History[len(e.get(t, name).Status.History)-1].ID
	quorum := strings.Replace(manifest(name, engine, "Hello"), "approval: {mode: Manual, timeout: 30m}",
		"approval: {mode: Manual, timeout: 30m, requiredApprovals: 2, selfApproval: Forbidden}", 1)
	e.sh(t, quorum, e.kubectl, "apply", "-f", "-")
	run = e.waitFor(t, name, "the reverted spec's plan awaiting approval", 5*time.Minute, awaiting(run.Status.Run.Child.Name))
	if run.Status.Run.Child.Name == firstChild {
		t.Fatalf("the reverted spec reuses the first run's child %s", firstChild)
	}
	if p := run.Status.Plan; p.Change != 1 || p.RunID != run.Status.Run.ID {
		t.Fatalf("the reverted spec's plan = %+v, want 1 to change, from run %s", p, run.Status.Run.ID)
	}
	if run.Status.Run.Author != e2eAdmin {
		t.Fatalf("the run's author is %q, want %s (stamped at admission)", run.Status.Run.Author, e2eAdmin)
	}
	e.shAs(t, "alice", e.tfrun, "approve", name, "-n", ns)
	e.approveNotCounted(t, "", name, "an author of the change may not approve it", run)
	run = e.waitFor(t, name, "alice's approval counted, the author's ignored", time.Minute, func(r *infrav1.TerraformRun) bool {
		a := r.Status.Approvals
		return a != nil && a.Summary == "1/2" && len(a.Ignored) == 1 && a.Ignored[0].User == e2eAdmin
	})
	t.Logf("after alice and the author: %s", e.sh(t, "", e.tfrun, "list", name, "-n", ns))
	e.shAs(t, "bob", e.tfrun, "approve", name, "-n", ns)
	run = e.waitFor(t, name, "the revert applied", 5*time.Minute, ready)
	if a := run.Status.History[0].Approval; a == nil || a.By != "opr8r-e2e-alice, opr8r-e2e-bob" {
		t.Fatalf("the revert's approval = %+v, want by opr8r-e2e-alice, opr8r-e2e-bob", a)
	}
	e.checkOutputs(t, name, "Hello")

	// 4. A rerun of the unchanged spec plans no changes: no gate, no apply.
	first := run.Status.Run.Child.Name
	e.sh(t, "", e.tfrun, "rerun", name, "-n", ns)
	run = e.waitFor(t, name, "the rerun finished without changes", 5*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.Child.Name != first && r.Status.Plan != nil && !r.Status.Plan.HasChanges && ready(r)
	})
	for _, s := range run.Status.Run.Steps {
		if s.Name == "apply" && s.Phase != infrav1.StepSkipped {
			t.Fatalf("a no-change rerun ran apply: %+v", run.Status.Run.Steps)
		}
	}
	e.record(t, run, "no-changes")

	// 5. Reject: a plan that is rejected is never applied.
	e.sh(t, manifest(name, engine, "Goodbye"), e.kubectl, "apply", "-f", "-")
	e.waitFor(t, name, "the third plan awaiting approval", 5*time.Minute, awaiting(run.Status.Run.Child.Name))
	e.sh(t, "", e.tfrun, "reject", name, "-n", ns, "--reason", "not today")
	run = e.waitFor(t, name, "Rejected", 5*time.Minute, func(r *infrav1.TerraformRun) bool {
		return runPhase(r) == infrav1.RunRejected
	})
	e.record(t, run, "rejected")
	if outs, _ := e.state(t, name); outs["message"] != "Hello" {
		t.Fatalf("after a reject the state output is %v, want the last applied %q", outs["message"], "Hello")
	}

	// 6. kubectl tfrun history: every run, newest first, with its trigger,
	// plan, approval and result.
	out = e.sh(t, "", e.tfrun, "history", name, "-n", ns)
	rows := strings.Split(strings.TrimSpace(out), "\n")[1:]
	wantRows := []string{"SpecChange .* Rejected", "RerunRequest .*no changes.* Succeeded", "SpecChange .*\\+0 ~1 -0.* Succeeded", "SpecChange .*\\+0 ~1 -0.* Succeeded", "Created .*\\+1 ~0 -0.* Succeeded"}
	if len(rows) != len(wantRows) {
		t.Fatalf("kubectl tfrun history shows %d runs, want %d:\n%s", len(rows), len(wantRows), out)
	}
	for i, w := range wantRows {
		if !regexp.MustCompile(w).MatchString(rows[i]) {
			t.Fatalf("history row %d = %q, want /%s/:\n%s", i, rows[i], w, out)
		}
	}
	t.Logf("history of %s:\n%s", name, out)

	// 7. Delete → the destroy plans, and (the run is Manual) waits for
	// approval like an apply: the approver reads the verified plan, approves
	// it, and the destroy empties the state; then the run goes.
	e.sh(t, "", e.kubectl, "delete", "terraformrun", name, "-n", ns, "--wait=false")
	e.waitFor(t, name, "the destroy's plan awaiting approval", 5*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.Type == infrav1.RunDestroy && r.Status.Run.Phase == infrav1.RunAwaitingApproval
	})
	if plan := e.sh(t, "", e.tfrun, "plan", name, "-n", ns); !strings.Contains(plan, "verified") || !strings.Contains(plan, "destroy") {
		t.Fatalf("kubectl tfrun plan of the destroy did not show a verified destroy plan:\n%s", plan)
	}
	e.sh(t, "", e.tfrun, "approve", name, "-n", ns)
	deadline := time.Now().Add(6 * time.Minute)
	for {
		err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &infrav1.TerraformRun{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			st, _ := json.MarshalIndent(e.get(t, name).Status, "", "  ")
			t.Fatalf("run not gone after destroy; status:\n%s", st)
		}
		time.Sleep(time.Second)
	}
	if _, resources := e.state(t, name); resources != 0 {
		t.Fatalf("state after destroy holds %d resources, want 0", resources)
	}
}

// failing checks that terraform's own error text reaches the run's status.
func failing(t *testing.T, e *env, engine string) {
	name := "bad-" + engine
	t.Cleanup(func() {
		_ = e.c.Delete(context.Background(), &infrav1.TerraformRun{ObjectMeta: objMeta(name)})
	})
	e.sh(t, manifest(name, engine, "Hello #1"), e.kubectl, "apply", "-f", "-")
	run := e.waitFor(t, name, "the run failed", 5*time.Minute, func(r *infrav1.TerraformRun) bool { return runPhase(r) == infrav1.RunFailed })
	e.record(t, run, "plan-failed")
	st, _ := json.Marshal(run.Status)
	for _, want := range []string{"Invalid value for variable", "greeting must be letters, spaces and punctuation."} {
		if !strings.Contains(string(st), want) {
			t.Fatalf("status does not carry terraform's error %q:\n%s", want, st)
		}
	}
}

func TestEngines(t *testing.T) {
	// The scenario tests run side by side (make e2e runs the faults of
	// TestChaos apart, after them).
	t.Parallel()
	e := setup(t)
	// Each scenario has runs of its own names, so every one is a parallel
	// test of its own, named <engine>/<scenario>, waiting for one of
	// run.sh's E2E_PARALLEL slots from when this test's body returns: under
	// a parent test per engine they waited behind every other test's
	// subtests, and Argo's lifecycle, the longest, ended the suite late
	// (stop 41: 924 s, started last). The list's order is not the order
	// they start in: Go releases a parent's paused parallel subtests all at
	// once, and they take the slots in the scheduler's order (stop 42's CI:
	// Argo's lifecycle took the 9th slot, Job's and Tekton's the 25th and
	// 26th of 33).
	type scenario struct {
		name string
		f    func(t *testing.T, e *env, engine string)
	}
	scenarios := []scenario{
		{"lifecycle", lifecycle},
		{"backend-outage", backendOutage},
		{"argo-resume-policy", func(t *testing.T, e *env, _ string) { argoResumePolicy(t, e) }},
		{"policy-check", policyCheck},
		{"long-apply", longApply},
		{"terraform-error", failing},
	}
	for _, s := range scenarios {
		for _, engine := range allEngines() {
			if s.name == "argo-resume-policy" && engine != "argo" {
				continue
			}
			t.Run(engine+"/"+s.name, func(t *testing.T) {
				t.Parallel()
				s.f(t, e, engine)
			})
		}
	}
}

// longApply: an apply that runs past Tekton's default timeout, lowered to
// one minute on the e2e cluster (cluster.sh), applies on every engine: every
// step carries its own deadline (spec.timeouts), which the engines enforce.
func longApply(t *testing.T, e *env, engine string) {
	const seconds = 75
	name := "long-" + engine + "-1"
	t.Cleanup(func() {
		_ = e.c.Delete(context.Background(), &infrav1.TerraformRun{ObjectMeta: objMeta(name)})
	})
	files, _ := json.Marshal(map[string]string{"main.tf": slowModule(seconds)})
	e.sh(t, fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: %s, namespace: %s}
spec:
  engine: %s
  source: {inline: {files: %s}}
  terraform:
    vars: [{name: v, value: "long"}]
  approval: {mode: Auto}
  timeouts: {apply: 15m}
  deletionPolicy: Retain
  runner: {workspace: {size: 64Mi}}
`, name, ns, engine, files), e.kubectl, "apply", "-f", "-")
	// While apply runs, kubectl tfrun logs reads its log from its pod (not
	// a kept record: a step keeps its log when it ends). On the Job engine
	// apply is the first of the three steps its Job's pod runs.
	e.waitFor(t, name, "its apply running", 5*time.Minute, func(r *infrav1.TerraformRun) bool { return stepOf(r, names.StepApply) == infrav1.StepRunning })
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Second) {
		cmd := exec.Command(e.tfrun, "logs", name, "-n", ns, "--step", names.StepApply)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
		out, err := cmd.CombinedOutput()
		if err == nil && strings.Contains(string(out), "terraform_data.slow: Creating...") {
			t.Logf("kubectl tfrun logs %s --step apply, as apply runs:\n%s", name, out)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl tfrun logs %s --step apply, as apply runs, did not show terraform creating terraform_data.slow within a minute: %v\n%s", name, err, out)
		}
	}
	run := e.waitFor(t, name, "applied and Ready", 10*time.Minute, ready)
	var apply *infrav1.StepStatus
	for i, s := range run.Status.Run.Steps {
		if s.Name == names.StepApply {
			apply = &run.Status.Run.Steps[i]
		}
	}
	if apply == nil || apply.StartedAt == nil || apply.FinishedAt == nil {
		t.Fatalf("no finished apply step in %+v", run.Status.Run.Steps)
	}
	took := apply.FinishedAt.Sub(apply.StartedAt.Time)
	if took < seconds*time.Second {
		t.Fatalf("the apply step took %s, less than the %ds its provisioner sleeps: the test proves nothing", took, seconds)
	}
	if _, resources := e.state(t, name); resources != 1 {
		t.Fatalf("state holds %d resources after the long apply, want 1", resources)
	}
	t.Logf("%s: the apply ran %s, past Tekton's lowered default of 1m", name, took.Round(time.Second))
}

// absent waits until no TerraformRun of that name is left from an earlier
// run of the scenario on a kept cluster (E2E_KEEP=1: the cleanup deletes a
// run and does not wait for its destroy; applying the manifest again would
// find the old run destroying, and the scenario would follow its destroy).
func (e *env) absent(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(8 * time.Minute)
	for {
		err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &infrav1.TerraformRun{})
		if apierrors.IsNotFound(err) {
			return
		}
		if err == nil {
			_ = e.c.Delete(context.Background(), &infrav1.TerraformRun{ObjectMeta: objMeta(name)})
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s from an earlier run is still there after 8m: %v", name, err)
		}
		time.Sleep(2 * time.Second)
	}
}

func objMeta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }

// TestTektonWebhookIsLive: Tekton is installed with its admission webhook,
// so every PipelineRun and CustomRun opr8r creates above passed Tekton's own
// defaulting and validation. An invalid PipelineRun must be refused by it.
func TestTektonWebhookIsLive(t *testing.T) {
	e := setup(t)
	bad := `apiVersion: tekton.dev/v1
kind: PipelineRun
metadata: {name: invalid, namespace: e2e}
spec:
  pipelineSpec:
    tasks:
    - name: no-steps
      taskSpec: {steps: []}
`
	cmd := exec.Command(e.kubectl, "create", "-f", "-")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	cmd.Stdin = strings.NewReader(bad)
	out, err := cmd.CombinedOutput()
	if err == nil {
		e.sh(t, "", e.kubectl, "delete", "pipelinerun", "invalid", "-n", ns)
		t.Fatalf("an invalid PipelineRun was accepted: Tekton's webhook is not in the path\n%s", out)
	}
	if !strings.Contains(string(out), "admission webhook") || !strings.Contains(string(out), "validation.webhook.pipeline.tekton.dev") {
		t.Fatalf("refused, but not by Tekton's webhook:\n%s", out)
	}
	t.Logf("refused by Tekton's webhook: %s", strings.TrimSpace(string(out)))
}
