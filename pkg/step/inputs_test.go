package step_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opr8r/opr8r/pkg/inputs"
	"github.com/opr8r/opr8r/pkg/step"
)

// TestInputsCarriedInTheChild: inputs that travel in the clone step's
// environment (small ones, no ConfigMap) give the checkout and vars.json
// that the mounted ConfigMap gave: the same revision for the same files,
// the same inputs digest, and a plan by real Terraform and OpenTofu that
// reads the variables.
func TestInputsCarriedInTheChild(t *testing.T) {
	needKube(t)
	vars, _ := json.Marshal(map[string]json.RawMessage{"name": json.RawMessage(`"from-the-child"`)})
	enc, err := inputs.Encode(inputs.Inputs{Vars: string(vars), Files: map[string]string{"main.tf": module}})
	if err != nil {
		t.Fatal(err)
	}
	for name, bin := range binaries(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ns := namespace(t)
			var out bytes.Buffer
			r := newRunner(t, bin, ns, &out)
			ws := t.TempDir()
			varsOut := filepath.Join(ws, ".opr8r", "vars.json")
			dest := filepath.Join(ws, "src")
			if err := r.Clone(ctx, step.CloneOptions{Source: "inline", Inputs: enc, VarsOut: varsOut, Dest: dest}); err != nil {
				t.Fatalf("clone: %v\n%s", err, out.String())
			}
			inline := result(t, r, "commit")

			t.Log("the same files from a mounted ConfigMap: the same revision")
			from := t.TempDir()
			write(t, filepath.Join(from, "main.tf"), module)
			if err := r.Clone(ctx, step.CloneOptions{Source: "dir", From: from, Dest: filepath.Join(t.TempDir(), "src")}); err != nil {
				t.Fatal(err)
			}
			if dir := result(t, r, "commit"); dir != inline || !strings.HasPrefix(inline, "sha256:") {
				t.Fatalf("revision of the inline files %q, of the same files from a directory %q: want one", inline, dir)
			}

			t.Log("vars.json is the ConfigMap's bytes: the same inputs digest")
			cmVars := filepath.Join(t.TempDir(), "vars.json")
			write(t, cmVars, string(vars))
			a, err := step.InputsDigest(step.PlanOptions{VarsFile: varsOut, InputsSalt: "uid"})
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := step.InputsDigest(step.PlanOptions{VarsFile: cmVars, InputsSalt: "uid"}); a != b {
				t.Fatalf("inputs digest from the child %s, from the ConfigMap %s", a, b)
			}

			t.Log("a real plan reads the variables the clone step wrote")
			mod := step.Module{Dir: dest, Workspace: "default"}
			be := step.Backend{Type: "kubernetes", Namespace: ns, SecretSuffix: "inputs"}
			if err := r.Init(ctx, mod, be); err != nil {
				t.Fatalf("init: %v\n%s", err, out.String())
			}
			planFile := filepath.Join(ws, "tfplan")
			sum, err := r.Plan(ctx, mod, withSecretVars(t, step.PlanOptions{PlanFile: planFile, VarsFile: varsOut, PlanSecret: "inputs-1-plan"}))
			if err != nil {
				t.Fatalf("plan: %v\n%s", err, out.String())
			}
			if sum.Add != 1 {
				t.Fatalf("plan summary = %+v, want +1", sum)
			}
			if !strings.Contains(out.String(), `"from-the-child"`) {
				t.Errorf("the plan does not show the variable from the child:\n%s", out.String())
			}
		})
	}
}

// TestCloneInlineRefusals: an inline source without its inputs, and inputs
// that are not what the manager encodes, fail with a message that says so.
func TestCloneInlineRefusals(t *testing.T) {
	ws := t.TempDir()
	for name, tc := range map[string]struct {
		o    step.CloneOptions
		want string
	}{
		"no inputs":      {step.CloneOptions{Source: "inline"}, "--source=inline needs the inputs"},
		"not base64":     {step.CloneOptions{Source: "inline", Inputs: "%%%"}, "not base64"},
		"not gzip":       {step.CloneOptions{Source: "inline", Inputs: "aGVsbG8="}, "not gzip"},
		"no vars target": {step.CloneOptions{Source: "inline", Inputs: mustEncode(t, inputs.Inputs{Vars: "{}", Files: map[string]string{"a.tf": ""}})}, "--vars-out is not set"},
		"bad file name":  {step.CloneOptions{Source: "inline", VarsOut: filepath.Join(ws, "v.json"), Inputs: mustEncode(t, inputs.Inputs{Vars: "{}", Files: map[string]string{"../a.tf": ""}})}, "not a plain file name"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.o.Dest = filepath.Join(t.TempDir(), "src")
			r := &step.Runner{Out: &bytes.Buffer{}, ResultsDir: t.TempDir()}
			err := r.Clone(context.Background(), tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(tc.o.Dest), "a.tf")); err == nil {
				t.Fatal("a file escaped the checkout")
			}
		})
	}
}

func mustEncode(t *testing.T, in inputs.Inputs) string {
	t.Helper()
	s, err := inputs.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
