package plugin_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/opr8r/opr8r/engines"
	"github.com/opr8r/opr8r/pkg/plugin"
)

// offline runs kubectl tfrun with no cluster at all.
func offline(args ...string) (string, error) {
	var out bytes.Buffer
	o := &plugin.Options{IOStreams: genericiooptions.IOStreams{Out: &out, ErrOut: &out}, Flags: genericclioptions.NewConfigFlags(false), Engines: engines.All()}
	cmd := plugin.NewCommand(o)
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// kubectl tfrun policy test evaluates the rules of docs/policies.md against
// a saved plan, offline, and prints what each rule decided.
func TestPolicyTest(t *testing.T) {
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(plan, []byte(`{"resource_changes":[
	  {"address":"aws_s3_bucket.state","mode":"managed","type":"aws_s3_bucket","name":"state","provider_name":"registry.terraform.io/hashicorp/aws","change":{"actions":["delete"]}},
	  {"address":"aws_s3_bucket.logs","mode":"managed","type":"aws_s3_bucket","name":"logs","provider_name":"registry.terraform.io/hashicorp/aws","change":{"actions":["no-op"]}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := offline("policy", "test", "-f", "../../docs/examples/plan-rules.yaml", "--plan", plan)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		"plan: +0 ~0 -1 (0 replaced), 0 imported, 0 forgotten, 0 moved, 0 actions invoked, 0 programs run, 1 resource changes",
		"  add-only: no match\n",
		"  destroys-need-two: matched, Require 2 approvals\n",
		"  protected-resources: matched, Deny: protected resources are removed by hand, after a backup\n",
		"decision: Deny: denied by rule protected-resources",
		"gate: Deny: denied by rule protected-resources: protected resources are removed by hand",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl tfrun policy test printed\n%s\nwant it to contain %q", out, want)
		}
	}
	out, err = offline("policy", "test", "-f", "../../docs/examples/plan-rules.yaml", "--plan", plan, "-o", "json")
	if err != nil || !strings.Contains(out, `"decision": "Deny"`) || !strings.Contains(out, `"address": "aws_s3_bucket.state"`) || !strings.Contains(out, `"effect": "Deny"`) {
		t.Errorf("-o json: %v\n%s", err, out)
	}

	// What the gate does with the plan (gate.Decide, as the manager):
	// an add-only plan goes through by rule, unless the Friday freeze
	// of the same file holds it now; a destroy waits for two approvals.
	add := filepath.Join(dir, "add.json")
	if err := os.WriteFile(add, []byte(`{"resource_changes":[
	  {"address":"aws_s3_bucket.new","mode":"managed","type":"aws_s3_bucket","name":"new","provider_name":"registry.terraform.io/hashicorp/aws","change":{"actions":["create"]}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = offline("policy", "test", "-f", "../../docs/examples/plan-rules.yaml", "--plan", add)
	if err != nil || !strings.Contains(out, "gate: Approve: approved automatically by rule add-only") && !strings.Contains(out, "gate: HoldWindow: approved (approved automatically by rule add-only)") {
		t.Errorf("an add-only plan: %v\n%s\nwant the gate to approve it by rule add-only", err, out)
	}
	del := filepath.Join(dir, "del.json")
	if err := os.WriteFile(del, []byte(`{"resource_changes":[
	  {"address":"aws_s3_bucket.old","mode":"managed","type":"aws_s3_bucket","name":"old","provider_name":"registry.terraform.io/hashicorp/aws","change":{"actions":["delete"]}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = offline("policy", "test", "-f", "../../docs/examples/plan-rules.yaml", "--plan", del)
	if err != nil || !strings.Contains(out, "gate: Wait: 0/2 approvals, 2 more needed (rule destroys-need-two: 0/2)") {
		t.Errorf("a destroy: %v\n%s\nwant the gate to wait for two approvals", err, out)
	}

	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte("- name: typo\n  condition: plan.destroyed > 0\n  effect: Deny\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = offline("policy", "test", "-f", rules, "--plan", plan)
	if err == nil || !strings.Contains(err.Error(), "spec.approval.rules[0] (typo)") || !strings.Contains(err.Error(), "undefined field 'destroyed'") {
		t.Errorf("a rule that does not compile: %v\n%s; want an error naming it, with the compiler's message", err, out)
	}
}
