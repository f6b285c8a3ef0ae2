package planpolicy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// terraformIn runs real terraform in a fresh directory, with an empty CLI
// configuration (no provider downloads), skipping the test without
// terraform; it returns the directory and a runner that fails the test on
// an error.
func terraformIn(t *testing.T) (string, func(args ...string) []byte) {
	t.Helper()
	tf, err := exec.LookPath("terraform")
	if err != nil {
		t.Skip("terraform is not installed")
	}
	dir := t.TempDir()
	rc := filepath.Join(dir, "terraformrc")
	if err := os.WriteFile(rc, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(tf, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
}

// terraformPlans makes real plans with terraform (terraform_data needs no
// provider download): one that only adds, one that replaces and updates,
// and one that destroys, each as terraform show -json prints it.
func terraformPlans(t *testing.T) (addOnly, replace, destroy, update []byte) {
	t.Helper()
	dir, run := terraformIn(t)
	module := func(trigger, bucket string) {
		src := fmt.Sprintf(`
resource "terraform_data" "role" {
  input            = "admin"
  triggers_replace = [%q]
}
resource "terraform_data" "bucket" {
  input = %q
}
output "role" { value = terraform_data.role.output }
`, trigger, bucket)
		if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	module("v1", "logs")
	run("init", "-input=false", "-no-color")
	run("plan", "-input=false", "-no-color", "-out=p")
	addOnly = run("show", "-json", "p")
	run("apply", "-input=false", "-no-color", "p")
	module("v2", "logs")
	run("plan", "-input=false", "-no-color", "-out=p")
	replace = run("show", "-json", "p")
	run("plan", "-destroy", "-input=false", "-no-color", "-out=p")
	destroy = run("show", "-json", "p")
	module("v1", "audit")
	run("plan", "-input=false", "-no-color", "-out=p")
	update = run("show", "-json", "p")
	return addOnly, replace, destroy, update
}

func rule(name, cond string, effect infrav1.RuleEffect) infrav1.ApprovalRule {
	r := infrav1.ApprovalRule{Name: name, Condition: cond, Effect: effect}
	if effect == infrav1.RuleRequire {
		r.Require = &infrav1.RuleRequirement{Approvals: 2, Approvers: &infrav1.Approvers{Groups: []string{"security"}}}
	}
	return r
}

// The rules docs/policies.md shows, against real plans.
var docRules = []infrav1.ApprovalRule{
	rule("no-op-or-add-only", "plan.destroy == 0 && plan.change == 0", infrav1.RuleAutoApprove),
	rule("destroys-need-two", "plan.destroy > 0", infrav1.RuleRequire),
	rule("iam-needs-security", "plan.resourceChanges.exists(r, r.type.startsWith('aws_iam_') || r.address.contains('.role'))", infrav1.RuleRequire),
	rule("drift-repairs-non-destructive", "run.trigger == 'Drift' && plan.destroy > 0", infrav1.RuleDeny),
}

func TestRulesOnRealPlans(t *testing.T) {
	addOnly, replace, destroy, _ := terraformPlans(t)
	pol, err := Compile(docRules)
	if err != nil {
		t.Fatal(err)
	}
	read := func(b []byte) Plan {
		p, err := FromJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	apply := Run{Name: "web", Namespace: "team-a", Type: "Apply", Trigger: "SpecChange", Author: "alice", Authors: []string{"alice"}}

	p := read(addOnly)
	if p.Add != 2 || p.Destroy != 0 || p.Change != 0 || !p.HasChanges || len(p.OutputChanges) != 1 {
		t.Fatalf("add-only plan read as %+v", p)
	}
	o := pol.Evaluate(context.Background(), p, apply)
	// iam-needs-security matches (it adds terraform_data.role): a
	// Require wins over AutoApprove.
	if o.Decision != Require || len(o.Require) != 1 || o.Require[0].Name != "iam-needs-security" || o.AutoApprove == nil {
		t.Fatalf("add-only plan with a role: %+v, want Require by iam-needs-security (no-op-or-add-only matched too)", o)
	}
	onlyBucket, _ := Compile(docRules[:2])
	if o := onlyBucket.Evaluate(context.Background(), p, apply); o.Decision != AutoApprove || o.AutoApprove.Name != "no-op-or-add-only" {
		t.Fatalf("add-only plan: %+v, want AutoApprove by no-op-or-add-only", o)
	}

	p = read(replace)
	if p.Replace != 1 || p.Add != 1 || p.Destroy != 1 || len(p.ResourceChanges) != 1 || !p.ResourceChanges[0].Replace ||
		p.ResourceChanges[0].Address != "terraform_data.role" || p.ResourceChanges[0].Provider != "terraform.io/builtin/terraform" {
		t.Fatalf("replace plan read as %+v", p)
	}
	o = pol.Evaluate(context.Background(), p, apply)
	if o.Decision != Require || len(o.Require) != 2 {
		t.Fatalf("replace plan: %+v, want Require by destroys-need-two and iam-needs-security", o)
	}
	drift := apply
	drift.Trigger = "Drift"
	if o := pol.Evaluate(context.Background(), p, drift); o.Decision != Deny || o.Deny.Rule.Name != "drift-repairs-non-destructive" {
		t.Fatalf("a drift repair that replaces: %+v, want Deny by drift-repairs-non-destructive", o)
	}

	p = read(destroy)
	if p.Destroy != 2 || p.Add != 0 {
		t.Fatalf("destroy plan read as %+v", p)
	}
	if o := pol.Evaluate(context.Background(), p, Run{Type: "Destroy", Trigger: "Deletion"}); o.Decision != Require {
		t.Fatalf("destroy plan: %+v, want Require", o)
	}
	if got := o.Describe(docRules); len(got) != 4 || !strings.HasPrefix(got[3], "drift-repairs-non-destructive: no match") {
		t.Fatalf("Describe = %q", got)
	}
}

func TestRulesCombine(t *testing.T) {
	plan := Plan{Add: 1, Destroy: 1, HasChanges: true, ResourceChanges: []ResourceChange{{Address: "a.b", Type: "a", Actions: []string{"delete"}}}}
	for _, tc := range []struct {
		name  string
		rules []infrav1.ApprovalRule
		want  Decision
	}{
		{"nothing matches", []infrav1.ApprovalRule{rule("x", "plan.add > 5", infrav1.RuleDeny)}, Default},
		{"auto", []infrav1.ApprovalRule{rule("x", "true", infrav1.RuleAutoApprove)}, AutoApprove},
		{"require beats auto", []infrav1.ApprovalRule{rule("a", "true", infrav1.RuleAutoApprove), rule("r", "plan.destroy > 0", infrav1.RuleRequire)}, Require},
		{"deny beats all", []infrav1.ApprovalRule{rule("a", "true", infrav1.RuleAutoApprove), rule("r", "true", infrav1.RuleRequire), rule("d", "'delete' in plan.resourceChanges[0].actions", infrav1.RuleDeny)}, Deny},
		{"an error denies", []infrav1.ApprovalRule{rule("a", "true", infrav1.RuleAutoApprove), rule("oops", "plan.resourceChanges[3].address == ''", infrav1.RuleAutoApprove)}, Deny},
	} {
		pol, err := Compile(tc.rules)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if o := pol.Evaluate(context.Background(), plan, Run{}); o.Decision != tc.want {
			t.Errorf("%s: %s, want %s (%+v)", tc.name, o.Decision, tc.want, o)
		}
	}
}

func TestBadRulesAreNamed(t *testing.T) {
	for _, tc := range []struct {
		cond, want string
	}{
		{"plan.destroyed > 0", "undefined field 'destroyed'"},
		{"plan.resourceChanges.exists(r, r.kind == 'x')", "undefined field 'kind'"},
		{"plan.add", "a condition must be a bool"},
		{"plan.add >", "Syntax error"},
		{"run.trigger == 1", "no matching overload"},
	} {
		_, err := Compile([]infrav1.ApprovalRule{rule("fine", "true", infrav1.RuleDeny), rule("broken", tc.cond, infrav1.RuleDeny)})
		if err == nil || !strings.Contains(err.Error(), "spec.approval.rules[1] (broken)") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one naming spec.approval.rules[1] (broken) and %q", tc.cond, err, tc.want)
		}
	}
}

// A condition too costly to evaluate stops at its time limit and denies.
func TestEvalTimeoutDenies(t *testing.T) {
	defer func(d time.Duration) { EvalTimeout = d }(EvalTimeout)
	EvalTimeout = 200 * time.Millisecond
	var plan Plan
	for i := range 1000 {
		plan.ResourceChanges = append(plan.ResourceChanges, ResourceChange{Address: fmt.Sprint("r", i), Actions: []string{"create"}})
	}
	pol, err := Compile([]infrav1.ApprovalRule{rule("costly",
		"plan.resourceChanges.all(a, plan.resourceChanges.all(b, plan.resourceChanges.all(c, a.address != '' || b.address != c.address)))", infrav1.RuleAutoApprove)})
	if err != nil {
		t.Fatal(err)
	}
	o := pol.Evaluate(context.Background(), plan, Run{})
	if o.Decision != Deny || o.Deny.Err == nil || !strings.Contains(o.DenyMessage(), "it ran past 200ms") {
		t.Fatalf("%+v (%s), want Deny: the time limit", o, o.DenyMessage())
	}
}

// TestDocRulesOnRealPlans: the rules of docs/policies.md, as
// docs/examples/plan-rules.yaml holds them, against plans real terraform
// made (terraform_data needs no provider). The page shows each condition
// exactly as the file does. The IAM and the state bucket examples name
// provider resource types terraform cannot plan here without their
// providers: they run on a plan as terraform prints it for those types;
// make e2e's TestPlanRules runs rules on the real kubernetes provider.
func TestDocRulesOnRealPlans(t *testing.T) {
	b, err := os.ReadFile("../../docs/examples/plan-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	var run infrav1.TerraformRun
	if err := json.Unmarshal(j, &run); err != nil {
		t.Fatal(err)
	}
	rules := run.Spec.Approval.Rules
	doc, err := os.ReadFile("../../docs/policies.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if !strings.Contains(string(doc), "name: "+r.Name+"\n") || !strings.Contains(string(doc), fmt.Sprintf("condition: %q", r.Condition)) {
			t.Errorf("docs/policies.md does not show rule %s with its condition %q as docs/examples/plan-rules.yaml has it", r.Name, r.Condition)
		}
	}
	pol, err := Compile(rules)
	if err != nil {
		t.Fatal(err)
	}
	addOnly, replace, destroy, update := terraformPlans(t)
	read := func(b []byte) Plan {
		p, err := FromJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	const iamJSON = `{"resource_changes":[{"address":"aws_iam_role_policy.ci","mode":"managed","type":"aws_iam_role_policy","name":"ci","provider_name":"registry.terraform.io/hashicorp/aws","change":{"actions":["update"]}}]}`
	const stateJSON = `{"resource_changes":[{"address":"aws_s3_bucket.state","mode":"managed","type":"aws_s3_bucket","name":"state","provider_name":"registry.terraform.io/hashicorp/aws","change":{"actions":["delete"]}}]}`
	apply := Run{Type: "Apply", Trigger: "SpecChange"}
	drift := Run{Type: "Apply", Trigger: "Drift"}
	for _, tc := range []struct {
		what    string
		plan    []byte
		run     Run
		want    Decision
		matched string
	}{
		{"an add-only plan auto-approves", addOnly, apply, AutoApprove, "add-only"},
		{"a replacement needs two", replace, apply, Require, "destroys-need-two"},
		{"a destroy (deleting the run) needs two", destroy, Run{Type: "Destroy", Trigger: "Deletion"}, Require, "destroys-need-two"},
		{"an in-place change goes to the run's default", update, apply, Default, ""},
		{"a drift repair that only updates applies by itself", update, drift, AutoApprove, "drift-repair-safe"},
		{"a drift repair that replaces needs two, and sre", replace, drift, Require, "destroys-need-two,drift-repair-destructive"},
		{"an IAM change needs security", []byte(iamJSON), apply, Require, "iam-needs-security"},
		{"the state bucket is never destroyed", []byte(stateJSON), apply, Deny, "destroys-need-two,protected-resources"},
	} {
		o := pol.Evaluate(context.Background(), read(tc.plan), tc.run)
		var got []string
		for _, m := range o.Matched {
			if m.Err != nil {
				t.Errorf("%s: rule %s failed: %v", tc.what, m.Rule.Name, m.Err)
			}
			got = append(got, m.Rule.Name)
		}
		if o.Decision != tc.want || strings.Join(got, ",") != tc.matched {
			t.Errorf("%s: %s, matched %v; want %s, matched %s", tc.what, o.Decision, got, tc.want, tc.matched)
		}
	}
}

// realPlan applies first (when given), then plans second, with real
// terraform, and returns the plan as terraform show -json prints it.
func realPlan(t *testing.T, first, second string) []byte {
	t.Helper()
	dir, run := terraformIn(t)
	write := func(src string) {
		if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if first != "" {
		write(first)
		run("init", "-input=false", "-no-color")
		run("apply", "-input=false", "-no-color", "-auto-approve")
	}
	write(second)
	run("init", "-input=false", "-no-color")
	run("plan", "-input=false", "-no-color", "-out=p")
	return run("show", "-json", "p")
}

// What a plan does beyond add, change and destroy, in plans real
// terraform made (moves, forgets, provisioners) and, for what
// terraform_data cannot show (imports need an importable resource; action
// invocations need Terraform 1.14), in the JSON format terraform documents
// (developer.hashicorp.com/terraform/internals/json-format: "importing",
// "action_invocations"). Each was invisible to the rules before: an
// import-only or move-only plan read as "+0 ~0 -0, no changes", a forget
// as nothing, a local-exec on a new resource as a plain add.
func TestPlanShowsWhatCountsMiss(t *testing.T) {
	const two = `
resource "terraform_data" "a" { input = "a" }
resource "terraform_data" "b" { input = "b" }
`
	moved := realPlan(t, two, `
resource "terraform_data" "a" { input = "a" }
resource "terraform_data" "renamed" { input = "b" }
moved {
  from = terraform_data.b
  to   = terraform_data.renamed
}
`)
	forgot := realPlan(t, two, `
resource "terraform_data" "a" { input = "a" }
removed {
  from = terraform_data.b
  lifecycle { destroy = false }
}
`)
	provisioned := realPlan(t, "", `
resource "terraform_data" "run" {
  count = 2
  input = "x"
  provisioner "local-exec" { command = "id" }
}
resource "terraform_data" "quiet" {
  input = "y"
  provisioner "local-exec" { command = "true" }
}
`)
	external := []byte(`{"configuration":{"root_module":{"module_calls":{"net":{"module":{"resources":[{"address":"data.external.probe","mode":"data","type":"external","name":"probe"}]}}}}}}`)
	imported := []byte(`{"resource_changes":[{"address":"aws_s3_bucket.logs","mode":"managed","type":"aws_s3_bucket","name":"logs","provider_name":"registry.terraform.io/hashicorp/aws","change":{"actions":["no-op"],"importing":{"id":"team-a-logs"}}}]}`)
	actions := []byte(`{"resource_changes":[],"action_invocations":[{"address":"action.aws_lambda_invoke.notify","type":"aws_lambda_invoke","name":"notify","provider_name":"registry.terraform.io/hashicorp/aws","lifecycle_action_trigger":{"triggering_resource_address":"aws_s3_bucket.logs","action_trigger_event":"after_create","action_trigger_block_index":0,"actions_list_index":0}}]}`)
	for _, tc := range []struct {
		what string
		plan []byte
		want string
	}{
		{"a moved block", moved, "+0 ~0 -0 imports 0 forgets 0 moves 1 actions 0 hasChanges true runsCode []"},
		{"a removed block with destroy = false", forgot, "+0 ~0 -0 imports 0 forgets 1 moves 0 actions 0 hasChanges true runsCode []"},
		{"new resources with provisioners", provisioned, "+3 ~0 -0 imports 0 forgets 0 moves 0 actions 0 hasChanges true runsCode [provisioner local-exec terraform_data.quiet provisioner local-exec terraform_data.run[0] provisioner local-exec terraform_data.run[1]]"},
		{"an external data source in a module", external, "+0 ~0 -0 imports 0 forgets 0 moves 0 actions 0 hasChanges false runsCode [data-source external module.net.data.external.probe]"},
		{"an import block", imported, "+0 ~0 -0 imports 1 forgets 0 moves 0 actions 0 hasChanges true runsCode []"},
		{"an action invocation", actions, "+0 ~0 -0 imports 0 forgets 0 moves 0 actions 1 hasChanges true runsCode []"},
	} {
		p, err := FromJSON(tc.plan)
		if err != nil {
			t.Fatal(err)
		}
		var code []string
		for _, c := range p.RunsCode {
			code = append(code, c.Kind+" "+c.Type+" "+c.Address)
		}
		slices.Sort(code)
		got := fmt.Sprintf("+%d ~%d -%d imports %d forgets %d moves %d actions %d hasChanges %v runsCode [%s]",
			p.Add, p.Change, p.Destroy, p.Imports, p.Forgets, p.Moves, p.ActionInvocations, p.HasChanges, strings.Join(code, " "))
		if got != tc.want {
			t.Errorf("%s: %s\nwant %s", tc.what, got, tc.want)
		}
	}
	// The rules read them, and the docs' add-only rule approves none of
	// these plans.
	pol := docPolicy(t)
	for name, plan := range map[string][]byte{"moved": moved, "forgot": forgot, "provisioned": provisioned, "external": external, "imported": imported, "actions": actions} {
		p, _ := FromJSON(plan)
		o := pol.Evaluate(context.Background(), p, Run{Type: "Apply", Trigger: "SpecChange"})
		if o.Decision == AutoApprove {
			t.Errorf("the docs' rules auto-approve the %s plan (by %s)", name, o.AutoApprove.Name)
		}
	}
	if _, err := Compile([]infrav1.ApprovalRule{rule("reads", "plan.imports + plan.forgets + plan.moves + plan.actionInvocations > 0 || plan.runsCode.exists(c, c.kind == 'provisioner' && c.type == 'local-exec') || plan.resourceChanges.exists(r, r.importing && r.importId != '' || r.previousAddress != '')", infrav1.RuleDeny)}); err != nil {
		t.Fatalf("a rule over the new fields does not compile: %v", err)
	}
}
