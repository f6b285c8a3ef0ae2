//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// The module of the plan rules scenario: two ConfigMaps through the real
// terraform-provider-kubernetes, and a terraform_data replaced whenever an
// outside ConfigMap (<name>-ext, which the test edits by hand) changes.
func rulesModule(name string, keep bool) string {
	keepCM := ""
	if keep {
		keepCM = fmt.Sprintf(`
resource "kubernetes_config_map" "keep" {
  metadata {
    name      = "%s-keep"
    namespace = "%s"
  }
  data = { keep = "yes" }
}`, name, ns)
	}
	return fmt.Sprintf(`terraform {
  required_providers {
    kubernetes = { source = "hashicorp/kubernetes", version = "1.13.4" }
  }
}
provider "kubernetes" {
  load_config_file = false
}
data "kubernetes_config_map" "ext" {
  metadata {
    name      = "%[1]s-ext"
    namespace = "%[2]s"
  }
}
resource "kubernetes_config_map" "managed" {
  metadata {
    name      = "%[1]s-managed"
    namespace = "%[2]s"
  }
  data = { color = "blue" }
}
resource "terraform_data" "stamp" {
  triggers_replace = data.kubernetes_config_map.ext.data
}
resource "kubernetes_role" "reader" {
  metadata {
    name      = "%[1]s-reader"
    namespace = "%[2]s"
  }
  rule {
    api_groups = [""]
    resources  = ["configmaps"]
    verbs      = ["get"]
  }
}
%[3]s
`, name, ns, keepCM)
}

func rulesSource(name string, keep bool) string {
	files, _ := json.Marshal(map[string]string{"main.tf": rulesModule(name, keep)})
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s-src, namespace: %s}\ndata: %s\n", name, ns, files)
}

// rulesRun: Manual approval, with the rules of docs/policies.md that the
// module can meet (its IAM rule as it is, for e2e's group; a Deny of the
// keep ConfigMap for its state bucket one), checked for drift every 10s and
// repairing it.
func rulesRun(name, engine string) string {
	return fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: %s, namespace: %s}
spec:
  engine: %s
  source: {configMapRef: {name: %s-src}}
  interval: 10s
  driftRemediation: Apply
  deletionPolicy: Retain
  runner: {workspace: {size: 64Mi}}
  approval:
    mode: Manual
    rules:
      - name: add-only
        condition: "plan.change == 0 && plan.destroy == 0"
        effect: AutoApprove
      - name: destroys-need-two
        condition: "plan.destroy > 0 || run.type == 'Destroy'"
        effect: Require
        require: {approvals: 2, approvers: {groups: [e2e-approvers]}}
      - name: iam-needs-security
        condition: "plan.resourceChanges.exists(r, r.type.startsWith('aws_iam_') || r.type.startsWith('kubernetes_cluster_role') || r.type.startsWith('kubernetes_role'))"
        effect: Require
        require: {approvals: 1, approvers: {groups: [e2e-approvers]}}
      - name: drift-repair-safe
        condition: "run.trigger == 'Drift' && plan.destroy == 0"
        effect: AutoApprove
      - name: keep-the-keeper
        condition: "plan.resourceChanges.exists(r, r.type == 'kubernetes_config_map' && r.name == 'keep' && 'delete' in r.actions)"
        effect: Deny
        message: the keep ConfigMap is removed by the platform team
`, name, ns, engine, name)
}

// savePlanJSON writes the run's current plan as JSON (kubectl tfrun plan
// --json, verified against its digest) to file, without logging it whole.
func (e *env) savePlanJSON(t *testing.T, name, file string) {
	t.Helper()
	out, err := e.as("", "", e.tfrun, "plan", name, "-n", ns, "--json")
	if err != nil {
		t.Fatalf("kubectl tfrun plan %s --json: %v\n%s", name, err, out)
	}
	if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
}

func ruleNeeds(run *infrav1.TerraformRun, rule string) (int32, bool) {
	if a := run.Status.Approvals; a != nil {
		for _, r := range a.Rules {
			if r.Name == rule {
				return r.Needed, true
			}
		}
	}
	return 0, false
}

// planRulesScenario: rules over real plans of real terraform. An add-only
// first apply and a drift repair that only updates apply with nobody's
// approval; a drift repair that replaces waits for two approvers of
// e2e-approvers (an approver of another group does not count, and one is
// not enough); a source change that deletes the keep ConfigMap is denied
// and never applies.
func planRulesScenario(t *testing.T, e *env, engine string) {
	name := "rules-" + engine
	ctx := context.Background()
	t.Cleanup(func() {
		_ = e.c.Delete(ctx, &infrav1.TerraformRun{ObjectMeta: objMeta(name)})
		for _, cm := range []string{"-ext", "-managed", "-keep", "-src"} {
			_ = e.c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: objMeta(name + cm)})
		}
		_ = e.c.Delete(ctx, &rbacv1.Role{ObjectMeta: objMeta(name + "-reader")})
	})
	e.sh(t, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s-ext, namespace: %s}\ndata: {v: \"1\"}\n", name, ns), e.kubectl, "apply", "-f", "-")
	e.sh(t, rulesSource(name, true), e.kubectl, "apply", "-f", "-")
	e.sh(t, rulesRun(name, engine), e.kubectl, "apply", "-f", "-")

	// 1. The first plan only adds, but adds a Role: rule iam-needs-security
	// (docs/policies.md's, on the real provider's plan) holds it for one
	// approver of e2e-approvers, though add-only matches too.
	run := e.waitFor(t, name, "the first plan, which adds a Role, waiting for an approver", 6*time.Minute, func(r *infrav1.TerraformRun) bool {
		n, ok := ruleNeeds(r, "iam-needs-security")
		return runPhase(r) == infrav1.RunAwaitingApproval && ok && n == 1
	})
	t.Logf("%s: %s", name, condOf(run, infrav1.ApprovedCondition))
	// The rules of docs/policies.md, offline, on this real plan.
	planFile := filepath.Join(t.TempDir(), "plan.json")
	e.savePlanJSON(t, name, planFile)
	out := e.sh(t, "", e.tfrun, "policy", "test", "-f", "../../docs/examples/plan-rules.yaml", "--plan", planFile)
	for _, want := range []string{"add-only: matched, AutoApprove", "iam-needs-security: matched, Require 1 approvals from groups security", "destroys-need-two: no match", "decision: Require"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s: kubectl tfrun policy test with docs/examples/plan-rules.yaml on the real plan: want %q in\n%s", name, want, out)
		}
	}
	approve := func(user string) {
		out, err := e.as(user, "", e.tfrun, "approve", name, "-n", ns)
		t.Logf("$ (as %s) kubectl tfrun approve %s\n%s", user, name, out)
		if err != nil {
			t.Fatalf("%s approving: %v", user, err)
		}
	}
	approve("alice")
	run = e.waitFor(t, name, "the plan with the Role applied after one approver of the group", 6*time.Minute, ready)
	if a := run.Status.Approval; a == nil || a.Source != infrav1.ApprovedByApproval || a.By != "opr8r-e2e-alice" {
		t.Fatalf("%s: the first apply's approval = %+v, want alice's", name, run.Status.Approval)
	}
	first := run.Status.Run.ID

	// 2. Someone edits the managed ConfigMap: the repair only updates it,
	// and rule drift-repair-safe approves it.
	e.sh(t, "", e.kubectl, "patch", "configmap", name+"-managed", "-n", ns, "--type=merge", "-p", `{"data":{"color":"red"}}`)
	run = e.waitFor(t, name, "the drift repair that only updates, applied by rule", 6*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.Trigger == infrav1.TriggerDrift && ready(r)
	})
	if a := run.Status.Approval; a == nil || a.Source != infrav1.ApprovedByRule || !strings.Contains(condOf(run, infrav1.ApprovedCondition), "drift-repair-safe") {
		t.Fatalf("%s: the update-only drift repair's approval = %+v (%s), want by rule drift-repair-safe", name, run.Status.Approval, condOf(run, infrav1.ApprovedCondition))
	}
	e.waitColor(t, name, "blue", time.Minute)
	repaired := run.Status.Run.ID

	// 3. The outside ConfigMap changes: the repair replaces terraform_data.stamp
	// and waits for two approvers of e2e-approvers.
	e.sh(t, "", e.kubectl, "patch", "configmap", name+"-ext", "-n", ns, "--type=merge", "-p", `{"data":{"v":"2"}}`)
	run = e.waitFor(t, name, "the replacing drift repair waiting for two approvers", 6*time.Minute, func(r *infrav1.TerraformRun) bool {
		n, ok := ruleNeeds(r, "destroys-need-two")
		return r.Status.Run != nil && r.Status.Run.ID != repaired && r.Status.Run.Trigger == infrav1.TriggerDrift && runPhase(r) == infrav1.RunAwaitingApproval && ok && n == 2
	})
	if p := run.Status.Plan; p == nil || p.Replace != 1 {
		t.Fatalf("%s: the drift repair's plan = %+v, want one replacement", name, run.Status.Plan)
	}
	t.Logf("%s: %s", name, condOf(run, infrav1.ApprovedCondition))
	// trent may approve in e2e, but is not in e2e-approvers: counted for
	// nothing the rule needs.
	approve(trent)
	approve("alice")
	run = e.waitFor(t, name, "alice's approval counted, one more needed", time.Minute, func(r *infrav1.TerraformRun) bool {
		n, ok := ruleNeeds(r, "destroys-need-two")
		return ok && n == 1
	})
	time.Sleep(5 * time.Second)
	if run = e.get(t, name); runPhase(run) != infrav1.RunAwaitingApproval {
		t.Fatalf("%s: with one of two approvers the run is %s, want it still waiting", name, runPhase(run))
	}
	approve("bob")
	run = e.waitFor(t, name, "the replacing repair applied after two approvers", 6*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.ID != repaired && ready(r)
	})
	if a := run.Status.Approval; a == nil || !strings.Contains(a.By, "opr8r-e2e-alice") || !strings.Contains(a.By, "opr8r-e2e-bob") {
		t.Fatalf("%s: approval %+v, want alice's and bob's", name, run.Status.Approval)
	}

	// 4. The source drops the keep ConfigMap: rule keep-the-keeper denies it.
	e.sh(t, rulesSource(name, false), e.kubectl, "apply", "-f", "-")
	run = e.waitFor(t, name, "the plan that deletes keep denied", 6*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.Trigger == infrav1.TriggerSourceChange && strings.Contains(condOf(r, infrav1.ApprovedCondition), "DeniedByRule")
	})
	t.Logf("%s: %s", name, condOf(run, infrav1.ApprovedCondition))
	run = e.waitFor(t, name, "the denied run ended", 3*time.Minute, func(r *infrav1.TerraformRun) bool {
		return runPhase(r) == infrav1.RunRejected
	})
	// docs/policies.md's protected-resources rule, offline, on this real plan.
	e.savePlanJSON(t, name, planFile)
	out = e.sh(t, "", e.tfrun, "policy", "test", "-f", "../../docs/examples/plan-rules.yaml", "--plan", planFile)
	for _, want := range []string{"protected-resources: matched, Deny", "decision: Deny: denied by rule protected-resources"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s: kubectl tfrun policy test with docs/examples/plan-rules.yaml on the real plan that deletes keep: want %q in\n%s", name, want, out)
		}
	}
	cm := &corev1.ConfigMap{}
	if err := e.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name + "-keep"}, cm); err != nil {
		t.Fatalf("%s: the keep ConfigMap is gone after a denied plan: %v", name, err)
	}
	e.sh(t, "", e.tfrun, "history", name, "-n", ns)
	if run.Status.LastApplied == nil || run.Status.LastApplied.RunID == first {
		t.Fatalf("%s: last applied %+v, want the replacing repair", name, run.Status.LastApplied)
	}
}

// windowScenario: an Auto run whose plan is ready before its change window
// opens waits, visibly, and applies when it opens; an approver without
// the policy admin's right cannot override the window.
func windowScenario(t *testing.T, e *env, engine string) {
	name := "window-" + engine
	ctx := context.Background()
	t.Cleanup(func() {
		_ = e.c.Delete(ctx, &infrav1.TerraformRun{ObjectMeta: objMeta(name)})
		_ = e.c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: objMeta(name + "-managed")})
		_ = e.c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: objMeta(name + "-src")})
	})
	// An Allow window that opens at the first whole minute at least 150s
	// from now (the plan is ready well before), for ten minutes.
	opens := time.Now().UTC().Add(150 * time.Second).Truncate(time.Minute).Add(time.Minute)
	e.sh(t, driftSource(name, "green"), e.kubectl, "apply", "-f", "-")
	e.sh(t, fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: %s, namespace: %s}
spec:
  engine: %s
  source: {configMapRef: {name: %s-src}}
  deletionPolicy: Retain
  runner: {workspace: {size: 64Mi}}
  approval:
    mode: Auto
    windows:
      - {name: soon, type: Allow, schedule: "%d %d * * *", duration: 10m, timeZone: UTC}
`, name, ns, engine, name, opens.Minute(), opens.Hour()), e.kubectl, "apply", "-f", "-")
	run := e.waitFor(t, name, "the approved plan held by its window", 5*time.Minute, func(r *infrav1.TerraformRun) bool {
		return strings.Contains(condOf(r, infrav1.ApprovedCondition), "OutsideChangeWindow")
	})
	t.Logf("%s: %s", name, condOf(run, infrav1.ApprovedCondition))
	if w := run.Status.Approvals.ChangeWindow; w == nil || w.Open || w.OpensAt == nil || !w.OpensAt.Time.Equal(opens) {
		t.Fatalf("%s: status.approvals.changeWindow = %+v, want closed until %s", name, w, opens)
	}
	if time.Now().After(opens) {
		t.Fatalf("%s: the plan reached its gate after the window opened (%s): the scenario proves nothing; plan faster or open later", name, opens)
	}
	out, err := e.as(trent, "", e.tfrun, "approve", name, "-n", ns, "--override-change-windows")
	t.Logf("$ (as trent) kubectl tfrun approve %s --override-change-windows\n%s", name, out)
	if err == nil || !strings.Contains(out, "may not let a plan apply outside its change windows") {
		t.Fatalf("%s: an approver without the policy admin's right overrode the window: %v", name, err)
	}
	run = e.waitFor(t, name, "the plan applied once its window opened", 6*time.Minute, ready)
	if e.managedColor(t, name) != "green" {
		t.Fatalf("%s: the ConfigMap is not applied", name)
	}
	if a := run.Status.Approval; a == nil || !a.Approved || a.Source != infrav1.ApprovedAutomatically || a.At.Time.Before(opens) {
		t.Fatalf("%s: the gate passed %+v, want automatically and not before its window opened at %s", name, run.Status.Approval, opens)
	}
}

// runnerMayManageRoles lets the step pods' service account manage the
// ConfigMaps and the Role the rules module creates (it holds the get on
// ConfigMaps the Role grants). A Role of its own: TestDrift, running beside
// it, applies e2e-drift-configmaps, and two kubectl applies creating one
// object at once race (AlreadyExists).
const runnerMayManageRoles = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: e2e-rules-roles, namespace: e2e}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [get, list, watch, create, update, patch, delete]}
- {apiGroups: [rbac.authorization.k8s.io], resources: [roles], verbs: [get, list, watch, create, update, patch, delete]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: e2e-rules-roles, namespace: e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: e2e-rules-roles}
subjects:
- {kind: ServiceAccount, name: opr8r-runner, namespace: e2e}
`

func TestPlanRules(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.sh(t, runnerMayManageRoles, e.kubectl, "apply", "-f", "-")
	for _, engine := range allEngines() {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			planRulesScenario(t, e, engine)
		})
		t.Run("window-"+engine, func(t *testing.T) {
			t.Parallel()
			windowScenario(t, e, engine)
		})
	}
}
