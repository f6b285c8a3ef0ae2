package step_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/pkg/step"
)

// maskModule has a sensitive variable, a sensitive output, a resource
// whose input holds the sensitive variable (a sensitive attribute in
// before and after, and an unmarked copy of it in its computed output),
// and a resource whose input is not sensitive but equals a registered
// secret (api_key, from a varsFrom Secret).
const maskModule = `
variable "secret_in" {
  type      = string
  sensitive = true
}
variable "api_key" {
  type = string
}
variable "note" {
  type = string
}
resource "terraform_data" "s" {
  input = { token = var.secret_in, label = var.note }
}
resource "terraform_data" "p" {
  input = var.api_key
}
output "secret_out" {
  value     = "out-${var.secret_in}"
  sensitive = true
}
output "note" {
  value = var.note
}
`

// The values of the masking journey: none but note may be seen in the
// masked plan; all are in the plan in clear.
const (
	firstSecret  = "FIRST-SENSITIVE-INPUT-a41"
	secondSecret = "SECOND-SENSITIVE-INPUT-b52"
	apiKey       = "REGISTERED-API-KEY-c63"
	noteValue    = "visible-note-value"
)

// maskedPlanView is what TestPlanJSONIsMasked reads of the masked plan.
type maskedPlanView struct {
	Variables map[string]struct {
		Value any `json:"value"`
	} `json:"variables"`
	ResourceChanges []struct {
		Address string `json:"address"`
		Change  struct {
			Before map[string]any `json:"before"`
			After  map[string]any `json:"after"`
		} `json:"change"`
	} `json:"resource_changes"`
	OutputChanges map[string]struct {
		Before any `json:"before"`
		After  any `json:"after"`
	} `json:"output_changes"`
}

// TestPlanJSONIsMasked plans for real (Terraform and OpenTofu) a change of
// a sensitive value and checks what people and checks read: the plan as
// JSON kept in the records and given to checks is masked (terraform's
// marks, the registered secrets, and the unmarked copies of marked
// values), still valid JSON of the same shape with the other values
// intact; the plan in clear is only in its own record; the readable plan
// is redacted; the reported digests are those of the bytes kept.
func TestPlanJSONIsMasked(t *testing.T) {
	needKube(t)
	for name, bin := range binaries(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ns := namespace(t)
			store := &records.SecretStore{Client: kube}
			mod := maskWorkdir(t, bin, ns)
			planAndApply(t, bin, ns, mod, firstSecret)

			var out bytes.Buffer
			r := newRunner(t, bin, ns, &out)
			r.Records, r.RecordKey = store, records.Key{Namespace: ns, Run: "mask", RunID: "mask-2", Step: "plan"}
			checkDir := filepath.Join(t.TempDir(), "plan")
			if _, err := r.Plan(ctx, mod, maskPlanOptions(t, mod, secondSecret, checkDir)); err != nil {
				t.Fatalf("plan: %v\n%s", err, out.String())
			}
			get := func(kind records.Kind) []byte {
				k := r.RecordKey
				k.Kind = kind
				b, err := store.Get(ctx, k)
				if err != nil {
					t.Fatalf("record %s: %v", kind, err)
				}
				return b
			}
			masked, clear, text := get(records.KindPlanJSON), get(records.KindPlanJSONSensitive), get(records.KindPlanText)
			checkJSON, _ := os.ReadFile(filepath.Join(checkDir, "plan.json"))
			checkText, _ := os.ReadFile(filepath.Join(checkDir, "plan.txt"))

			for _, s := range []string{firstSecret, secondSecret, apiKey} {
				if !bytes.Contains(clear, []byte(s)) {
					t.Errorf("the plan in clear lacks %s: the test proves nothing", s)
				}
				for what, b := range map[string][]byte{"masked JSON record": masked, "checks' plan.json": checkJSON, "readable plan record": text, "checks' plan.txt": checkText} {
					if bytes.Contains(b, []byte(s)) {
						t.Errorf("the %s holds %s", what, s)
					}
				}
			}
			if !bytes.Equal(checkJSON, masked) || !bytes.Equal(checkText, text) {
				t.Error("the checks read other bytes than the records keep")
			}
			checkMaskedShape(t, masked)
			if got, want := result(t, r, "plan-json-digest"), step.BytesDigest(masked); got != want {
				t.Errorf("plan-json-digest = %s, the kept masked JSON's is %s", got, want)
			}
			if got, want := result(t, r, "plan-text-digest"), step.BytesDigest(text); got != want {
				t.Errorf("plan-text-digest = %s, the kept readable plan's is %s", got, want)
			}
		})
	}
}

// checkMaskedShape reads the masked plan: valid JSON, sensitive values
// masked in place, objects kept, the other values intact.
func checkMaskedShape(t *testing.T, masked []byte) {
	t.Helper()
	var p maskedPlanView
	if err := json.Unmarshal(masked, &p); err != nil {
		t.Fatalf("the masked plan is not valid JSON: %v", err)
	}
	sv := step.SensitiveValue
	got := map[string]any{
		"var secret_in": p.Variables["secret_in"].Value, "var api_key": p.Variables["api_key"].Value, "var note": p.Variables["note"].Value,
		"output secret_out": []any{p.OutputChanges["secret_out"].Before, p.OutputChanges["secret_out"].After},
		"output note":       []any{p.OutputChanges["note"].Before, p.OutputChanges["note"].After},
	}
	for _, rc := range p.ResourceChanges {
		switch rc.Address {
		case "terraform_data.s":
			got["s before input"], got["s before output"], got["s after input"] = rc.Change.Before["input"], rc.Change.Before["output"], rc.Change.After["input"]
		case "terraform_data.p":
			got["p after input"] = rc.Change.After["input"]
		}
	}
	want := map[string]any{
		"var secret_in": sv, "var api_key": sv, "var note": noteValue,
		"output secret_out": []any{sv, sv},
		"output note":       []any{noteValue, noteValue},
		"s before input":    map[string]any{"token": sv, "label": noteValue},
		// Terraform does not mark this copy; the masker finds it by value.
		"s before output": map[string]any{"token": sv, "label": noteValue},
		"s after input":   map[string]any{"token": sv, "label": noteValue},
		"p after input":   sv,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("masked plan (-want +got):\n%s", diff)
	}
}

// maskWorkdir materialises maskModule and initialises it with the
// kubernetes backend.
func maskWorkdir(t *testing.T, bin, ns string) step.Module {
	t.Helper()
	var out bytes.Buffer
	r := newRunner(t, bin, ns, &out)
	from := t.TempDir()
	write(t, filepath.Join(from, "main.tf"), maskModule)
	dir := filepath.Join(t.TempDir(), "src")
	if err := r.Clone(context.Background(), step.CloneOptions{Source: "dir", From: from, Dest: dir}); err != nil {
		t.Fatal(err)
	}
	mod := step.Module{Dir: dir, Workspace: "default"}
	be := step.Backend{Type: "kubernetes", Namespace: ns, SecretSuffix: "mask"}
	if err := r.Init(context.Background(), mod, be); err != nil {
		t.Fatalf("init: %v\n%s", err, out.String())
	}
	return mod
}

// maskPlanOptions give the plan secret_in and note from the vars file (not
// secrets: only terraform's marks hide secret_in) and api_key from a
// varsFrom Secret.
func maskPlanOptions(t *testing.T, mod step.Module, secretIn, checkDir string) step.PlanOptions {
	t.Helper()
	vars := filepath.Join(t.TempDir(), "vars.json")
	b, _ := json.Marshal(map[string]string{"secret_in": secretIn, "note": noteValue})
	write(t, vars, string(b))
	secretDir := t.TempDir()
	write(t, filepath.Join(secretDir, "api_key"), apiKey+"\n")
	return step.PlanOptions{PlanFile: filepath.Join(filepath.Dir(mod.Dir), "tfplan"), VarsFile: vars, CheckInputDir: checkDir,
		VarsDirs: []string{secretDir}, SecretVarsDirs: []string{secretDir}}
}

// planAndApply plans and applies maskModule with secret_in, so the next
// plan changes it.
func planAndApply(t *testing.T, bin, ns string, mod step.Module, secretIn string) {
	t.Helper()
	var out bytes.Buffer
	r := newRunner(t, bin, ns, &out)
	o := maskPlanOptions(t, mod, secretIn, "")
	sum, err := r.Plan(context.Background(), mod, o)
	if err != nil {
		t.Fatalf("first plan: %v\n%s", err, out.String())
	}
	if err := r.Apply(context.Background(), mod, o.PlanFile, sum.Digest); err != nil {
		t.Fatalf("apply: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), apiKey) {
		t.Errorf("the step's log holds the varsFrom Secret's value")
	}
}
