//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// The plan check's module: var.keep decides whether the resource exists,
// so turning it off plans a destroy, which the policy forbids.
const checkedModule = `
variable "keep" { type = bool }
resource "terraform_data" "guarded" {
  count = var.keep ? 1 : 0
  input = "kept"
}
`

// policyConfigMap holds test/e2e/testdata/policy, mounted at /opr8r/check.
const policyConfigMap = "e2e-no-destroy-policy"

func checkedManifest(name, engine, image string, keep bool) string {
	files, _ := json.Marshal(map[string]string{"main.tf": checkedModule})
	return fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: %s, namespace: %s}
spec:
  engine: %s
  source: {inline: {files: %s}}
  terraform:
    vars: [{name: keep, value: %t}]
  approval: {mode: Auto}
  checks:
  - name: policy
    image: %s
    command: [conftest, test, --no-color, --policy, /opr8r/check, /workspace/plan/plan.json]
    configMapRef: {name: %s}
  deletionPolicy: Destroy
  runner: {workspace: {size: 64Mi}}
`, name, ns, engine, files, keep, image, policyConfigMap)
}

// ensurePolicy creates the ConfigMap of Rego policies once.
func (e *env) ensurePolicy(t *testing.T) {
	t.Helper()
	dir := filepath.Join("testdata", "policy")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: objMeta(policyConfigMap), Data: map[string]string{}}
	for _, f := range entries {
		b, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		cm.Data[f.Name()] = string(b)
	}
	if err := e.c.Create(context.Background(), cm); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// policyCheck: a real conftest, built from source, runs a real Rego
// policy against real plans. A plan that creates passes its check and is
// applied; a plan that would destroy the resource is blocked: the run
// fails with the check's name and last line, and the resource stays.
func policyCheck(t *testing.T, e *env, engine string) {
	image := mustEnv(t, "OPR8R_E2E_CONFTEST_IMAGE")
	e.ensurePolicy(t)
	name := "policy-" + engine
	t.Cleanup(func() {
		_ = e.c.Delete(context.Background(), &infrav1.TerraformRun{ObjectMeta: objMeta(name)})
	})
	stepPhase := func(r *infrav1.TerraformRun, step string) infrav1.StepPhase {
		if r.Status.Run == nil {
			return ""
		}
		for _, s := range r.Status.Run.Steps {
			if s.Name == step {
				return s.Phase
			}
		}
		return ""
	}

	t.Log("1. a plan that only creates passes the policy and is applied")
	e.sh(t, checkedManifest(name, engine, image, true), e.kubectl, "apply", "-f", "-")
	run := e.waitFor(t, name, "the checked plan applied", 8*time.Minute, ready)
	if got := stepPhase(run, "check-policy"); got != infrav1.StepSucceeded {
		st, _ := json.MarshalIndent(run.Status.Run, "", "  ")
		t.Fatalf("check-policy = %q, want Succeeded:\n%s", got, st)
	}
	if _, resources := e.state(t, name); resources != 1 {
		t.Fatalf("state holds %d resources after the passing plan, want 1", resources)
	}
	out := e.sh(t, "", e.tfrun, "checks", name, "-n", ns)
	for _, want := range []string{"# check policy: Succeeded (exit code 0)", "0 failures"} {
		if !strings.Contains(out, want) {
			t.Fatalf("kubectl tfrun checks lacks %q:\n%s", want, out)
		}
	}
	passed := run.Status.Run.Child.Name

	t.Log("2. a plan that would destroy the resource is blocked by the policy")
	e.sh(t, checkedManifest(name, engine, image, false), e.kubectl, "apply", "-f", "-")
	run = e.waitFor(t, name, "the destroying plan blocked", 8*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.Child.Name != passed && runPhase(r) == infrav1.RunFailed
	})
	st, _ := json.Marshal(run.Status)
	for _, want := range []string{"step check-policy failed", "1 failure", "exit code 1"} {
		if !strings.Contains(string(st), want) {
			t.Fatalf("status lacks %q:\n%s", want, st)
		}
	}
	if got := stepPhase(run, "check-policy"); got != infrav1.StepFailed {
		t.Fatalf("check-policy = %q, want Failed", got)
	}
	for _, s := range run.Status.Run.Steps {
		if (s.Name == "apply" || s.Name == "approve") && s.Phase == infrav1.StepSucceeded {
			t.Fatalf("step %s succeeded after a failed check", s.Name)
		}
	}
	if run.Status.Plan == nil || run.Status.Plan.Destroy != 1 {
		t.Fatalf("the blocked plan = %+v, want one to destroy", run.Status.Plan)
	}
	if _, resources := e.state(t, name); resources != 1 {
		t.Fatalf("state holds %d resources after the blocked plan, want 1: the destroy was applied", resources)
	}
	out = e.sh(t, "", e.tfrun, "checks", name, "-n", ns)
	for _, want := range []string{"# check policy: Failed (exit code 1)", "terraform_data.guarded[0] would be destroyed"} {
		if !strings.Contains(out, want) {
			t.Fatalf("kubectl tfrun checks lacks %q:\n%s", want, out)
		}
	}
}

// argoResumePolicy: the real `argo resume` as two people, judged at
// admission by opr8r-argo-resume against the run's spec.approval: bob,
// not listed, is refused and the gate stays suspended; alice passes it and
// is recorded as the approver.
func argoResumePolicy(t *testing.T, e *env) {
	name := "resume-policy"
	t.Cleanup(func() {
		_ = e.c.Delete(context.Background(), &infrav1.TerraformRun{ObjectMeta: objMeta(name)})
	})
	m := strings.Replace(manifest(name, "argo", "Hello resume"), "  approval: {mode: Manual, timeout: 30m}\n",
		"  approval: {mode: Manual, timeout: 30m, approvers: {users: [opr8r-e2e-alice]}, selfApproval: Forbidden}\n", 1)
	e.sh(t, m, e.kubectl, "apply", "-f", "-")
	run := e.waitFor(t, name, "the plan awaiting approval", 5*time.Minute, awaiting(""))
	wf := run.Status.Run.Child.Name
	e.waitFor(t, name, "the rule published on the Workflow", time.Minute, func(*infrav1.TerraformRun) bool {
		out, err := exec.Command(e.kubectl, "--kubeconfig", e.kubeconfig, "get", "workflow", wf, "-n", ns,
			"-o", `jsonpath={.metadata.annotations.infra\.opr8r\.io/gate-needed}`).CombinedOutput()
		return err == nil && strings.TrimSpace(string(out)) == "1"
	})

	out, err := e.shAsErr("bob", e.argo, "resume", wf, "-n", ns)
	t.Logf("$ (as bob) argo resume %s -n %s\n%s(%v)", wf, ns, out, err)
	if err == nil || !strings.Contains(out, "opr8r-e2e-bob may not decide plans of TerraformRun "+name) {
		t.Fatalf("argo resume as bob: err = %v, want refused by opr8r-argo-resume:\n%s", err, out)
	}
	time.Sleep(3 * time.Second)
	if run = e.get(t, name); runPhase(run) != infrav1.RunAwaitingApproval {
		t.Fatalf("after bob's refused resume the run is %s, want AwaitingApproval", runPhase(run))
	}

	e.shAs(t, "alice", e.argo, "resume", wf, "-n", ns)
	run = e.waitFor(t, name, "the plan applied after alice's resume", 5*time.Minute, ready)
	if a := run.Status.Approval; a == nil || a.Source != infrav1.ApprovedByEngine || a.By != "opr8r-e2e-alice" {
		t.Fatalf("approval = %+v, want by opr8r-e2e-alice through the engine", a)
	}
}
