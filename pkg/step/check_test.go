package step_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opr8r/opr8r/pkg/step"
)

// TestChecksReadARealPlan plans for real (terraform and OpenTofu) with the
// checks' input directory, then runs real commands as checks: one that
// reads plan.json and plan.txt and passes, one that fails with a verdict,
// one whose command does not exist.
func TestChecksReadARealPlan(t *testing.T) {
	needKube(t)
	for name, bin := range binaries(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ns := namespace(t)
			var out bytes.Buffer
			r := newRunner(t, bin, ns, &out)
			mod := step.Module{Dir: workdir(t, r), Workspace: "default"}
			if err := r.Init(ctx, mod, step.Backend{Type: "kubernetes", Namespace: ns, SecretSuffix: "checks"}); err != nil {
				t.Fatalf("init: %v\n%s", err, out.String())
			}
			checkDir := filepath.Join(t.TempDir(), "plan")
			planFile := filepath.Join(filepath.Dir(mod.Dir), "tfplan")
			if _, err := r.Plan(ctx, mod, withSecretVars(t, step.PlanOptions{PlanFile: planFile, VarsFile: varsFile(t, "demo"), CheckInputDir: checkDir})); err != nil {
				t.Fatalf("plan: %v\n%s", err, out.String())
			}
			planJSON := filepath.Join(checkDir, "plan.json")
			b, err := os.ReadFile(planJSON)
			if err != nil {
				t.Fatal(err)
			}
			var plan struct {
				ResourceChanges []struct {
					Address string `json:"address"`
					Change  struct {
						Actions []string `json:"actions"`
					} `json:"change"`
				} `json:"resource_changes"`
			}
			if err := json.Unmarshal(b, &plan); err != nil {
				t.Fatalf("plan.json is not terraform's JSON plan: %v", err)
			}
			if len(plan.ResourceChanges) != 1 || plan.ResourceChanges[0].Address != "terraform_data.thing" || plan.ResourceChanges[0].Change.Actions[0] != "create" {
				t.Fatalf("plan.json resource_changes = %+v, want terraform_data.thing create", plan.ResourceChanges)
			}
			text, _ := os.ReadFile(filepath.Join(checkDir, "plan.txt"))
			if !strings.Contains(string(text), "terraform_data.thing will be created") {
				t.Fatalf("plan.txt lacks the readable plan:\n%s", text)
			}

			t.Log("a check that reads both files and passes")
			pass := step.CheckOptions{Name: "reads", Dir: mod.Dir, PlanJSON: planJSON, OutputSecret: "run-1-check-reads", Command: []string{"sh", "-c",
				`grep -q '"actions":\["create"\]' "$1" && grep -q 'will be created' "$2" && echo "reads: 1 create, ok"`, "sh", planJSON, filepath.Join(checkDir, "plan.txt")}}
			if err := r.Check(ctx, pass); err != nil {
				t.Fatalf("passing check: %v\n%s", err, out.String())
			}
			sec, err := kube.CoreV1().Secrets(ns).Get(ctx, "run-1-check-reads", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("the check's output Secret: %v", err)
			}
			if string(sec.Data["result"]) != "passed" || string(sec.Data["exit-code"]) != "0" || !strings.Contains(string(sec.Data["output.txt"]), "reads: 1 create, ok") {
				t.Errorf("passed check's Secret = %v", sec.Data)
			}
			if sec.Labels["infra.opr8r.io/component"] != "check" {
				t.Errorf("check Secret labels = %v", sec.Labels)
			}

			t.Log("a check that fails: its last line and exit code are the error, its output is kept")
			fail := step.CheckOptions{Name: "deny", Dir: mod.Dir, PlanJSON: planJSON, OutputSecret: "run-1-check-deny", Command: []string{"sh", "-c",
				`echo "checking $(basename "$PWD")"; echo "deny: terraform_data.thing may not be created here" >&2; echo; exit 3`}}
			err = r.Check(ctx, fail)
			if err == nil || err.Error() != "deny: terraform_data.thing may not be created here (exit code 3)" {
				t.Fatalf("failing check: err = %v", err)
			}
			sec, err = kube.CoreV1().Secrets(ns).Get(ctx, "run-1-check-deny", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if string(sec.Data["result"]) != "failed" || string(sec.Data["exit-code"]) != "3" ||
				!strings.Contains(string(sec.Data["output.txt"]), "checking src") || !strings.Contains(string(sec.Data["output.txt"]), "may not be created") {
				t.Errorf("failed check's Secret = %q", sec.Data)
			}
			if !strings.Contains(out.String(), "deny: terraform_data.thing may not be created here") {
				t.Errorf("the check's output is not in the step log:\n%s", out.String())
			}

			t.Log("a command that does not exist")
			err = r.Check(ctx, step.CheckOptions{Name: "missing", Dir: mod.Dir, PlanJSON: planJSON, Command: []string{"no-such-policy-tool"}})
			if err == nil || !strings.Contains(err.Error(), "the command did not start") {
				t.Fatalf("missing command: err = %v", err)
			}

			t.Log("no plan.json: the check does not start")
			err = r.Check(ctx, step.CheckOptions{Name: "early", PlanJSON: filepath.Join(t.TempDir(), "plan.json"), Command: []string{"true"}})
			if err == nil || !strings.Contains(err.Error(), "wrote no") {
				t.Fatalf("missing plan: err = %v", err)
			}
		})
	}
}

func TestLastLine(t *testing.T) {
	for in, want := range map[string]string{
		"":                              "",
		"a\nb\n\n  \n":                  "b",
		"\x1b[31mFAIL\x1b[0m - x\n":     "FAIL - x",
		"2 tests, 1 passed, 1 failure ": "2 tests, 1 passed, 1 failure",
	} {
		if got := step.LastLine(in); got != want {
			t.Errorf("LastLine(%q) = %q, want %q", in, got, want)
		}
	}
}
