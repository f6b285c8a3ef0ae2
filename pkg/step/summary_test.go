package step_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/opr8r/opr8r/pkg/step"
)

func TestDiagnosticSummary(t *testing.T) {
	cases := map[string]struct {
		out  string
		want string
	}{
		"boxed (colour mode)": {
			out:  "╷\n│ Error: Invalid value for variable\n│ \n│   on main.tf line 2:\n│    2: variable \"name\" {\n│     ├────────────────\n│     │ var.name is \"NotLower\"\n│ \n│ name must be lowercase.\n│ \n│ This was checked by the validation rule at main.tf:4,5-14.\n╵\n",
			want: "Error: Invalid value for variable: name must be lowercase.",
		},
		"plain (-no-color)": {
			out:  "\nError: error acquiring the state lock\n\nLock Info:\n  ID: 1234\n",
			want: "Error: error acquiring the state lock: Lock Info:",
		},
		"the first of several errors": {
			out:  "Error: Missing required argument\n\nThe argument \"x\" is required.\n\nError: Second\n\nmore",
			want: "Error: Missing required argument: The argument \"x\" is required.",
		},
		"no diagnostic": {out: "Terraform has been successfully initialized!", want: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, step.DiagnosticSummary(tc.out)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestTruncatePlan(t *testing.T) {
	small := []byte("short plan")
	if got := step.TruncatePlan(small, 100); !bytes.Equal(got, small) {
		t.Errorf("a small plan changed: %q", got)
	}
	big := bytes.Repeat([]byte("x"), 5000)
	got := step.TruncatePlan(big, 1000)
	if len(got) != 1000 {
		t.Errorf("truncated length = %d, want 1000", len(got))
	}
	if !strings.Contains(string(got), "[opr8r: plan truncated: 1000 of 5000 bytes shown") {
		t.Errorf("no truncation marker in %q", got[900:])
	}
}

func TestRedact(t *testing.T) {
	r := &step.Runner{}
	r.AddSecret("hunter2-long")
	r.AddSecret("hunter2-long-and-longer")
	r.AddSecret("ab") // too short to redact safely
	got := r.Redact("a hunter2-long-and-longer b hunter2-long c ab")
	if want := "a *** b *** c ab"; got != want {
		t.Errorf("Redact = %q, want %q", got, want)
	}
}
