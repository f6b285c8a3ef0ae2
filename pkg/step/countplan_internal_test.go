package step

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/opr8r/opr8r/pkg/planpolicy"
	"github.com/opr8r/opr8r/pkg/results"
)

// TestCountPlanCountsWhatTheRulesCount: the plan step's summary (status,
// kubectl get, the pull-request comment, notifications) counts moves,
// forgets and imports as the rules do, on plans real terraform 1.11 and
// OpenTofu 1.12 make (a moved block, a removed block with destroy =
// false, an import of a terraform_data: OpenTofu imports it, terraform
// 1.11 refuses to), and action invocations in the JSON format Terraform
// 1.14 documents. An import-only or move-only plan read "+0 ~0 -0" before.
func TestCountPlanCountsWhatTheRulesCount(t *testing.T) {
	bins := map[string]string{}
	if tf, err := exec.LookPath("terraform"); err == nil {
		bins["terraform"] = tf
	} else {
		t.Fatal("terraform is not on PATH; this test runs real terraform")
	}
	if tofu := os.Getenv("OPR8R_TOFU"); tofu != "" {
		bins["tofu"] = tofu
	} else {
		t.Fatal("OPR8R_TOFU is not set: run the tests with make test, which builds OpenTofu (hack/opentofu.sh)")
	}
	const two = `
resource "terraform_data" "a" { input = "a" }
resource "terraform_data" "b" { input = "b" }
`
	cases := []struct {
		what, first, second, want string
		only                      string
	}{
		{what: "a moved block", first: two, second: `
resource "terraform_data" "a" { input = "a" }
resource "terraform_data" "renamed" { input = "b" }
moved {
  from = terraform_data.b
  to   = terraform_data.renamed
}
`, want: "+0 ~0 -0, 1 moved"},
		{what: "a removed block that keeps the resource", first: two, second: `
resource "terraform_data" "a" { input = "a" }
removed {
  from = terraform_data.b
  lifecycle { destroy = false }
}
`, want: "+0 ~0 -0, 1 forgotten"},
		{what: "a move and an add", first: two, second: `
resource "terraform_data" "a" { input = "a" }
resource "terraform_data" "c" { input = "b" }
resource "terraform_data" "new" { input = "n" }
moved {
  from = terraform_data.b
  to   = terraform_data.c
}
`, want: "+1 ~0 -0, 1 moved"},
	}
	for name, bin := range bins {
		for _, tc := range cases {
			t.Run(name+"/"+tc.what, func(t *testing.T) {
				out := realPlanJSON(t, bin, tc.first, tc.second)
				s, _, err := countPlan(out)
				if err != nil {
					t.Fatal(err)
				}
				got := results.Plan{Add: int32(s.Add), Change: int32(s.Change), Destroy: int32(s.Destroy), Import: int32(s.Import), Forget: int32(s.Forget), Move: int32(s.Move), Actions: int32(s.Actions)}.Short()
				if got != tc.want {
					t.Fatalf("summary %q, want %q", got, tc.want)
				}
				p, err := planpolicy.FromJSON(out)
				if err != nil {
					t.Fatal(err)
				}
				if int64(s.Import) != p.Imports || int64(s.Forget) != p.Forgets || int64(s.Move) != p.Moves || int64(s.Add) != p.Add || int64(s.Destroy) != p.Destroy {
					t.Fatalf("the summary (%+v) and the rules' plan (imports %d forgets %d moves %d +%d -%d) count differently", s, p.Imports, p.Forgets, p.Moves, p.Add, p.Destroy)
				}
			})
		}
	}
	// OpenTofu imports a terraform_data by an import block.
	t.Run("tofu/an import block", func(t *testing.T) {
		out := realPlanJSON(t, bins["tofu"], "", `
import {
  to = terraform_data.imported
  id = "x"
}
resource "terraform_data" "imported" {}
`)
		s, _, err := countPlan(out)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := planpolicy.FromJSON(out)
		if s.Import != 1 || p.Imports != 1 {
			t.Fatalf("imports: summary %d, rules %d; want 1 (plan %s)", s.Import, p.Imports, out)
		}
	})
	// Terraform 1.14's action invocations, in its documented JSON format
	// (no provider with actions builds here).
	doc := []byte(`{"resource_changes":[],"action_invocations":[{"address":"action.aws_lambda_invoke.notify","type":"aws_lambda_invoke","name":"notify"}]}`)
	s, _, err := countPlan(doc)
	if err != nil || s.Actions != 1 {
		t.Fatalf("action invocations: %+v, %v; want 1", s, err)
	}
	if got := (results.Plan{Actions: 1}).Short(); got != "+0 ~0 -0, 1 action(s) invoked" {
		t.Fatalf("summary %q", got)
	}
}

// realPlanJSON applies first (when given) and plans second with bin, in a
// directory of its own with the local backend, and returns terraform show
// -json of the plan.
func realPlanJSON(t *testing.T, bin, first, second string) []byte {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "tf.rc")
	if err := os.WriteFile(cfg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []byte {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+cfg, "TF_IN_AUTOMATION=1")
		out, err := cmd.Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("%s %v: %v\n%s%s", bin, args, err, out, stderr)
		}
		return out
	}
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
