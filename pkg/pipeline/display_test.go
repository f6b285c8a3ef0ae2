package pipeline

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
)

func TestDisplay(t *testing.T) {
	p := &Pipeline{Type: infrav1.RunApply, Namespace: "team-a", ManualApproval: true,
		Labels: map[string]string{infrav1.RunNameLabel: "net", infrav1.RunNumberLabel: "3"}}
	if got, want := Title(p), "TerraformRun team-a/net: apply #3"; got != want {
		t.Errorf("Title = %q, want %q", got, want)
	}
	want := "Plans, waits for a person to approve the plan, applies exactly that plan and exports the outputs. " +
		"Approve: RESUME, or kubectl tfrun approve net -n team-a. " +
		"Status and history: kubectl tfrun list net -n team-a; all runs of it carry the label infra.opr8r.io/run=net."
	if diff := cmp.Diff(want, Description(p, "RESUME")); diff != "" {
		t.Errorf("Description (-want +got):\n%s", diff)
	}
	for step, want := range map[string]string{names.StepApprove: "Waits for a person", "check-policy": "Plan check policy"} {
		if got := StepDescription(step); len(got) < len(want) || got[:len(want)] != want {
			t.Errorf("StepDescription(%s) = %q, want it to start with %q", step, got, want)
		}
	}
}

func TestGateMessage(t *testing.T) {
	cases := map[string]struct {
		summary, resume, want string
	}{
		"argo": {
			summary: `{"add":1,"change":2,"destroy":0,"replace":0}`, resume: "RESUME",
			want: "Plan +1 ~2 -0 (sha256:ab) waits for approval. Approve: RESUME, or kubectl tfrun approve net -n team-a --plan sha256:ab. " +
				"Reject: kubectl tfrun reject net -n team-a --reason '…'. See the plan: kubectl tfrun plan net -n team-a.",
		},
		"no summary": {
			want: "Plan with changes (sha256:ab) waits for approval. Approve: kubectl tfrun approve net -n team-a --plan sha256:ab. " +
				"Reject: kubectl tfrun reject net -n team-a --reason '…'. See the plan: kubectl tfrun plan net -n team-a.",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, GateMessage("net", "team-a", tc.summary, "sha256:ab", tc.resume)); diff != "" {
				t.Errorf("GateMessage (-want +got):\n%s", diff)
			}
		})
	}
}
