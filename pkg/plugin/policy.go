package plugin

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/gate"
	"github.com/opr8r/opr8r/pkg/governance"
	"github.com/opr8r/opr8r/pkg/planpolicy"
)

// policyTest are the flags of kubectl tfrun policy test.
type policyTest struct {
	rulesFile, planFile, runName string
	run                          planpolicy.Run
}

func newPolicyCommand(o *Options) *cobra.Command {
	var p policyTest
	test := &cobra.Command{
		Use:   "test",
		Short: "Evaluate spec.approval.rules against a saved plan (terraform show -json), offline, and print what each rule decided",
		Long: `Evaluate spec.approval.rules against a saved plan, as the manager would at the
approval gate, and print what each rule decided and what they decide together.

The rules come from a file (-f: a TerraformRun manifest, or a YAML or JSON
list of rules) or, with --run, from a TerraformRun in the cluster. The plan
is terraform show -json of a saved plan, or what kubectl tfrun plan NAME
--json shows.

  terraform plan -out=p && terraform show -json p > plan.json
  kubectl tfrun policy test -f run.yaml --plan plan.json --trigger Drift`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.policyTest(cmd.Context(), p) },
	}
	test.Flags().StringVarP(&p.rulesFile, "filename", "f", "", "A TerraformRun manifest, or a list of rules, holding spec.approval.rules")
	test.Flags().StringVar(&p.runName, "run", "", "Read the rules from this TerraformRun in the cluster instead")
	test.Flags().StringVar(&p.planFile, "plan", "", "The plan as JSON (terraform show -json)")
	test.Flags().StringVar(&p.run.Type, "type", string(infrav1.RunApply), "The run's type the rules see (run.type): Apply or Destroy")
	test.Flags().StringVar(&p.run.Trigger, "trigger", string(infrav1.TriggerSpecChange), "Why the run started (run.trigger): Created, SpecChange, RerunRequest, Deletion, Schedule, SourceChange, Drift or DependencyChange")
	test.Flags().StringVar(&p.run.Author, "author", "", "The author of the change (run.author; run.authors holds it too)")
	_ = test.MarkFlagRequired("plan")
	policy := &cobra.Command{Use: "policy", Short: "Work with spec.approval.rules"}
	policy.AddCommand(test)
	return policy
}

func (o *Options) policyTest(ctx context.Context, p policyTest) error {
	gov, err := o.policyRules(ctx, p)
	if err != nil {
		return err
	}
	rules := gov.Approval.Rules
	b, err := os.ReadFile(p.planFile)
	if err != nil {
		return fmt.Errorf("--plan: %w", err)
	}
	plan, err := planpolicy.FromJSON(b)
	if err != nil {
		return fmt.Errorf("--plan %s: %w (give terraform show -json of a saved plan)", p.planFile, err)
	}
	pol, err := planpolicy.Compile(rules)
	if err != nil {
		return err
	}
	run := p.run
	if run.Author != "" {
		run.Authors = []string{run.Author}
	}
	out := pol.Evaluate(ctx, plan, run)
	// What the gate does with the plan before anyone decides: the same
	// call the manager makes (gate.Decide), with no votes yet.
	d := gate.Decide(gate.Input{Policy: gov, Digest: "(offline)", Authors: run.Authors, Rules: &out, Now: time.Now()})
	verdict := gateText(d)
	if done, err := o.print(map[string]any{"plan": plan, "rules": out.Describe(rules), "decision": out.Decision, "message": decisionText(out),
		"gate": map[string]any{"effect": d.Effect, "required": d.Tally.Required, "needed": d.Tally.Needed, "message": verdict}}); done {
		return err
	}
	fmt.Fprintf(o.Out, "plan: +%d ~%d -%d (%d replaced), %d imported, %d forgotten, %d moved, %d actions invoked, %d programs run, %d resource changes, %d output changes; run: type %s, trigger %s, author %q\n",
		plan.Add, plan.Change, plan.Destroy, plan.Replace, plan.Imports, plan.Forgets, plan.Moves, plan.ActionInvocations, len(plan.RunsCode),
		len(plan.ResourceChanges), len(plan.OutputChanges), run.Type, run.Trigger, run.Author)
	for _, c := range plan.RunsCode {
		fmt.Fprintf(o.Out, "  runs: %s %s of %s\n", c.Kind, c.Type, c.Address)
	}
	for _, line := range out.Describe(rules) {
		fmt.Fprintln(o.Out, "  "+line)
	}
	fmt.Fprintf(o.Out, "decision: %s\n", decisionText(out))
	fmt.Fprintf(o.Out, "gate: %s\n", verdict)
	return nil
}

// gateText says what the gate does with a plan nobody has decided yet.
func gateText(d gate.Decision) string {
	switch d.Effect {
	case gate.Wait:
		return "Wait: " + d.Why
	case gate.Approve:
		return "Approve: " + cmp.Or(d.How, "approved")
	case gate.HoldWindow:
		return "HoldWindow: approved (" + d.Why + "), and held now: " + d.Window.Message
	}
	return string(d.Effect) + ": " + d.Why
}

// decisionText says what the rules decide together.
func decisionText(o planpolicy.Outcome) string {
	switch o.Decision {
	case planpolicy.Deny:
		return "Deny: " + o.DenyMessage()
	case planpolicy.Require:
		var names []string
		for _, r := range o.Require {
			names = append(names, fmt.Sprintf("%s (%d)", r.Name, r.Require.Approvals))
		}
		return "Require: approvals that meet every one of " + strings.Join(names, ", ") + ", and at least requiredApprovals (mode Manual)"
	case planpolicy.AutoApprove:
		return "AutoApprove, by rule " + o.AutoApprove.Name
	}
	return "Default: no rule matched; the rest of spec.approval decides (mode, requiredApprovals, approvers)"
}

// policyRules reads the rules to test.
func (o *Options) policyRules(ctx context.Context, p policyTest) (gate.Governed, error) {
	switch {
	case p.runName != "" && p.rulesFile != "":
		return gate.Governed{}, fmt.Errorf("give the rules with -f or --run, not both")
	case p.runName != "":
		c, _, ns, err := o.clients()
		if err != nil {
			return gate.Governed{}, err
		}
		run := &infrav1.TerraformRun{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: p.runName}, run); err != nil {
			return gate.Governed{}, err
		}
		ps, err := o.governing(ctx, c, ns)
		if err != nil {
			return gate.Governed{}, err
		}
		gov := gate.Combine(run.Spec.Approval, ps)
		if len(gov.Approval.Rules) == 0 {
			return gate.Governed{}, fmt.Errorf("TerraformRun %s/%s has no spec.approval.rules, and no policy that governs it has rules", ns, p.runName)
		}
		return gov, nil
	case p.rulesFile == "":
		return gate.Governed{}, fmt.Errorf("give the rules with -f FILE (a TerraformRun manifest or a list of rules) or --run NAME")
	}
	b, err := os.ReadFile(p.rulesFile)
	if err != nil {
		return gate.Governed{}, fmt.Errorf("-f: %w", err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return gate.Governed{}, fmt.Errorf("-f %s: %w", p.rulesFile, err)
	}
	var rules []infrav1.ApprovalRule
	var ap infrav1.ApprovalSpec
	if strings.HasPrefix(strings.TrimSpace(string(j)), "[") {
		err = json.Unmarshal(j, &rules)
	} else {
		run := &infrav1.TerraformRun{}
		err = json.Unmarshal(j, run)
		ap = run.Spec.Approval
		rules = ap.Rules
	}
	if err != nil {
		return gate.Governed{}, fmt.Errorf("-f %s: %w", p.rulesFile, err)
	}
	if len(rules) == 0 {
		return gate.Governed{}, fmt.Errorf("-f %s holds no rules (spec.approval.rules of a TerraformRun, or a list of rules)", p.rulesFile)
	}
	for i, r := range rules {
		if r.Name == "" || r.Condition == "" {
			return gate.Governed{}, fmt.Errorf("-f %s: rule %d needs a name and a condition", p.rulesFile, i)
		}
		if r.Effect == infrav1.RuleRequire && r.Require == nil {
			return gate.Governed{}, fmt.Errorf("-f %s: rule %s: effect Require needs require.approvals", p.rulesFile, r.Name)
		}
	}
	ap.Rules = rules
	return gate.Combine(ap, nil), nil
}

// governing reads the policies that govern the runs of namespace ns, as
// the manager does (governance.Governing). The namespace's
// TerraformRunPolicies must be readable; cluster policies and the
// namespace's labels are read when the user may, and a warning says what
// could not be (without the labels every cluster policy is tested, which
// can only add rules).
func (o *Options) governing(ctx context.Context, c client.Client, ns string) ([]gate.Policy, error) {
	return governance.Governing(ctx, governance.Readers{Policies: c, Namespaces: c, Missing: func(what, without string, err error) {
		fmt.Fprintf(o.ErrOut, "warning: cannot read %s (%v): testing %s\n", what, err, without)
	}}, ns)
}
