//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// governedNS is labelled opr8r-e2e/governed=true (cluster.sh), which the
// cluster policy below selects; no other scenario runs there.
const governedNS = "e2e-governed"

// governancePolicies are docs/policies.md's worked examples set once: the
// rules of docs/examples/plan-rules.yaml as the namespace's
// TerraformRunPolicy (its groups security and sre are e2e's approvers),
// and a ClusterTerraformRunPolicy for the namespaces labelled governed: no
// author approves their own change, and no plan makes cluster roles. (A
// cluster policy's mode Manual would hold even add-only plans: a
// namespace policy's AutoApprove never waives a cluster policy's
// requirement.) The examples' Friday freeze is left out: a window that
// holds runs every Friday afternoon would make make e2e's result depend
// on the day (windows are TestPlanRules' window scenario and pkg/controller's
// TestWindowsStateEveryLayerMustBeOpen).
func governancePolicies(t *testing.T) (*infrav1.TerraformRunPolicy, *infrav1.ClusterTerraformRunPolicy) {
	t.Helper()
	b, err := os.ReadFile("../../docs/examples/plan-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc infrav1.TerraformRun
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	rules := doc.Spec.Approval.Rules
	for i := range rules {
		if r := rules[i].Require; r != nil && r.Approvers != nil {
			for j, g := range r.Approvers.Groups {
				if g == "security" || g == "sre" {
					r.Approvers.Groups[j] = "e2e-approvers"
				}
			}
		}
	}
	if len(rules) < 5 {
		t.Fatalf("docs/examples/plan-rules.yaml has %d rules, want the worked examples", len(rules))
	}
	nsPol := &infrav1.TerraformRunPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "platform", Namespace: governedNS},
		Spec:       infrav1.TerraformRunPolicySpec{Approval: infrav1.ApprovalPolicy{Rules: rules}},
	}
	clPol := &infrav1.ClusterTerraformRunPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-governed"},
		Spec: infrav1.ClusterTerraformRunPolicySpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"opr8r-e2e/governed": "true"}},
			TerraformRunPolicySpec: infrav1.TerraformRunPolicySpec{Approval: infrav1.ApprovalPolicy{
				SelfApproval: infrav1.SelfApprovalForbidden,
				Rules: []infrav1.ApprovalRule{{Name: "no-cluster-roles", Effect: infrav1.RuleDeny,
					Condition: "plan.resourceChanges.exists(r, r.type.startsWith('kubernetes_cluster_role'))",
					Message:   "cluster-wide roles are the platform team's"}},
			}},
		},
	}
	return nsPol, clPol
}

// governedRun is a tenant's run with no approval policy of its own (a
// tenant may not set mode Auto: opr8r-approval-policy): one
// terraform_data, replaced when trigger changes.
func governedRun(name, engine, trigger string) string {
	files, _ := json.Marshal(map[string]string{"main.tf": fmt.Sprintf(`resource "terraform_data" "app" {
  input            = %q
  triggers_replace = %q
}
`, name, trigger)})
	return fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: %s, namespace: %s}
spec:
  engine: %s
  source: {inline: {files: %s}}
  runner: {workspace: {size: 64Mi}}
`, name, governedNS, engine, files)
}

// TestGovernance: a platform team sets docs/policies.md's worked examples
// once, as a TerraformRunPolicy of e2e-governed and a
// ClusterTerraformRunPolicy selecting it by label, and they govern the
// runs tenants create there with no policy of their own, on every engine;
// a tenant can neither write nor delete them (issue 50).
func TestGovernance(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	nsPol, clPol := governancePolicies(t)
	if err := e.c.Create(ctx, nsPol); err != nil {
		t.Fatalf("the platform team's TerraformRunPolicy: %v", err)
	}
	if err := e.c.Create(ctx, clPol); err != nil {
		t.Fatalf("the platform team's ClusterTerraformRunPolicy: %v", err)
	}
	t.Cleanup(func() {
		_ = e.c.Delete(ctx, nsPol)
		_ = e.c.Delete(ctx, clPol)
	})

	// The tenant (edit and opr8r-editor in the namespace) writes, edits or
	// deletes a policy: the API server refuses (RBAC on the kinds).
	for _, try := range []struct {
		what, stdin string
		args        []string
	}{
		{"create a policy of her own", fmt.Sprintf("apiVersion: infra.opr8r.io/v1alpha1\nkind: TerraformRunPolicy\nmetadata: {name: mine, namespace: %s}\nspec: {approval: {mode: Auto}}\n", governedNS), []string{"create", "-f", "-"}},
		{"loosen the namespace's policy", "", []string{"patch", "terraformrunpolicy", "platform", "-n", governedNS, "--type=merge", "-p", `{"spec":{"approval":{"rules":[]}}}`}},
		{"delete the namespace's policy", "", []string{"delete", "terraformrunpolicy", "platform", "-n", governedNS}},
		{"delete the cluster policy", "", []string{"delete", "clusterterraformrunpolicy", "e2e-governed"}},
	} {
		out, err := e.as(mallory, try.stdin, e.kubectl, try.args...)
		t.Logf("$ (as mallory) kubectl %s\n%s", strings.Join(try.args, " "), out)
		if err == nil || !strings.Contains(strings.ToLower(out), "forbidden") {
			t.Fatalf("mallory could %s: %v\n%s", try.what, err, out)
		}
	}
	if out, err := e.as(mallory, "", e.kubectl, "get", "terraformrunpolicy", "platform", "-n", governedNS); err != nil {
		t.Fatalf("mallory cannot read the policy that governs her runs: %v\n%s", err, out)
	}

	for _, engine := range allEngines() {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			governedScenario(t, e, engine)
		})
	}
}

// governedScenario: mallory's add-only plan applies by the namespace
// policy's add-only rule, with both policies recorded; her next plan replaces, so the policy's
// destroys-need-two holds it for two approvers, and it applies after
// alice's and bob's.
func governedScenario(t *testing.T, e *env, engine string) {
	name := "gov-" + engine
	ctx := context.Background()
	t.Cleanup(func() {
		_ = e.c.Delete(ctx, &infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Namespace: governedNS, Name: name}})
	})
	if out, err := e.as(mallory, governedRun(name, engine, "1"), e.kubectl, "apply", "-f", "-"); err != nil {
		t.Fatalf("mallory's run: %v\n%s", err, out)
	}
	run := e.waitForIn(t, governedNS, name, "the add-only plan applied by the namespace policy's rule", 6*time.Minute, ready)
	if a := run.Status.Approval; a == nil || a.Source != infrav1.ApprovedByRule || !strings.Contains(condOf(run, infrav1.ApprovedCondition), "platform/add-only") {
		t.Fatalf("%s: approval %+v (%s), want by rule platform/add-only", name, run.Status.Approval, condOf(run, infrav1.ApprovedCondition))
	}
	p := run.Status.Approvals.Policy
	if p == nil || p.Mode != infrav1.ApprovalManual || p.SelfApproval != infrav1.SelfApprovalForbidden || len(p.Policies) != 2 ||
		p.Policies[0].Name != "platform" || p.Policies[1].Kind != "ClusterTerraformRunPolicy" || p.Policies[1].Name != "e2e-governed" {
		t.Fatalf("%s: status.approvals.policy = %+v, want both policies, mode Manual (the run's), self-approval forbidden (the cluster policy's)", name, p)
	}
	first := run.Status.Run.ID

	if out, err := e.as(mallory, governedRun(name, engine, "2"), e.kubectl, "apply", "-f", "-"); err != nil {
		t.Fatalf("mallory's edit: %v\n%s", err, out)
	}
	run = e.waitForIn(t, governedNS, name, "the replacing plan held for two approvers by the namespace policy", 6*time.Minute, func(r *infrav1.TerraformRun) bool {
		n, ok := ruleNeeds(r, "platform/destroys-need-two")
		return r.Status.Run != nil && r.Status.Run.ID != first && runPhase(r) == infrav1.RunAwaitingApproval && ok && n == 2
	})
	t.Logf("%s: %s", name, condOf(run, infrav1.ApprovedCondition))
	approve := func(user string) {
		out, err := e.as(user, "", e.tfrun, "approve", name, "-n", governedNS)
		t.Logf("$ (as %s) kubectl tfrun approve %s\n%s", user, name, out)
		if err != nil {
			t.Fatalf("%s approving: %v", user, err)
		}
	}
	approve("alice")
	e.waitForIn(t, governedNS, name, "alice's approval counted, one more needed", time.Minute, func(r *infrav1.TerraformRun) bool {
		n, ok := ruleNeeds(r, "platform/destroys-need-two")
		return ok && n == 1
	})
	time.Sleep(5 * time.Second)
	run = &infrav1.TerraformRun{}
	if err := e.c.Get(ctx, types.NamespacedName{Namespace: governedNS, Name: name}, run); err != nil || runPhase(run) != infrav1.RunAwaitingApproval {
		t.Fatalf("%s: with one of two approvals the run is %s (%v), want it still waiting", name, runPhase(run), err)
	}
	approve("bob")
	run = e.waitForIn(t, governedNS, name, "the replacing plan applied after two approvers", 6*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.ID != first && ready(r)
	})
	if a := run.Status.Approval; a == nil || !strings.Contains(a.By, "opr8r-e2e-alice") || !strings.Contains(a.By, "opr8r-e2e-bob") {
		t.Fatalf("%s: approval %+v, want alice's and bob's", name, run.Status.Approval)
	}
}
