package controller

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// TestSummarize derives Ready, Reconciling and Stalled from a pass's
// outcome, its error and the conditions that degrade Ready.
func TestSummarize(t *testing.T) {
	readyTrue := metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1True, Reason: infrav1.ReasonSucceeded, Message: "run a-1 succeeded"}
	stalledFailed := []metav1.Condition{
		{Type: infrav1.StalledCondition, Status: metav1True, Reason: infrav1.ReasonRunFailed, Message: "run a-1 failed"},
		{Type: infrav1.ReadyCondition, Status: metav1False, Reason: infrav1.ReasonRunFailed, Message: "run a-1 failed"},
	}
	drifted := metav1.Condition{Type: infrav1.DriftedCondition, Status: metav1True, Reason: infrav1.ReasonDriftDetected, Message: "check a-drift-2 found drift"}
	noDrift := metav1.Condition{Type: infrav1.DriftedCondition, Status: metav1False, Reason: infrav1.ReasonNoDrift, Message: "check a-drift-3 found no drift"}
	readyDrifted := metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1False, Reason: infrav1.ReasonDriftDetected, Message: "check a-drift-2 found drift"}
	cases := map[string]struct {
		before      []metav1.Condition
		outcome     outcome
		err         error
		want        []string // Type=Status/Reason, sorted by type
		wantRequeue time.Duration
		wantErr     bool
		wantMessage map[string]string
	}{
		"a run in progress": {
			before:  []metav1.Condition{readyTrue},
			outcome: outcome{progressing, infrav1.ReasonAwaitingApproval, "run a-2: waiting for approval"},
			want:    []string{"Ready=Unknown/AwaitingApproval", "Reconciling=True/AwaitingApproval"},
		},
		"a run that succeeds after a stall": {
			before:  stalledFailed,
			outcome: outcome{ready, infrav1.ReasonSucceeded, "run a-2 succeeded"},
			want:    []string{"Ready=True/Succeeded"},
		},
		"a stalling error outranks the outcome and is not retried": {
			outcome: outcome{progressing, infrav1.ReasonProgressing, "x"},
			err:     &StallingError{Reason: infrav1.ReasonInvalidSpec, Err: errors.New("spec.x is wrong")},
			want:    []string{"Ready=False/InvalidSpec", "Stalled=True/InvalidSpec"},
		},
		"a waiting error stalls and looks again": {
			err:         &WaitingError{Reason: infrav1.ReasonEngineUnavailable, Err: errors.New("no CRD"), RequeueAfter: time.Minute},
			want:        []string{"Ready=False/EngineUnavailable", "Stalled=True/EngineUnavailable"},
			wantRequeue: time.Minute,
		},
		"a generic error changes nothing and is returned": {
			before:  []metav1.Condition{readyTrue},
			err:     &GenericError{Reason: "CreateChild", Err: errors.New("boom")},
			want:    []string{"Ready=True/Succeeded"},
			wantErr: true,
		},
		"drift makes a Ready run not Ready": {
			before:      []metav1.Condition{readyTrue, drifted},
			want:        []string{"Drifted=True/DriftDetected", "Ready=False/DriftDetected"},
			wantMessage: map[string]string{infrav1.ReadyCondition: "check a-drift-2 found drift"},
		},
		"drift does not hide a run in progress": {
			before:  []metav1.Condition{readyTrue, drifted},
			outcome: outcome{progressing, infrav1.ReasonProgressing, "run a-3: pending"},
			want:    []string{"Drifted=True/DriftDetected", "Ready=Unknown/Progressing", "Reconciling=True/Progressing"},
		},
		"drift does not hide a stall": {
			before: append([]metav1.Condition{drifted}, stalledFailed...),
			want:   []string{"Drifted=True/DriftDetected", "Ready=False/RunFailed", "Stalled=True/RunFailed"},
		},
		"no drift found: Ready again": {
			before:      []metav1.Condition{readyDrifted, noDrift},
			want:        []string{"Drifted=False/NoDrift", "Ready=True/Succeeded"},
			wantMessage: map[string]string{infrav1.ReadyCondition: "check a-drift-3 found no drift"},
		},
		"a destroy under way keeps Ready": {
			before:  []metav1.Condition{readyTrue},
			outcome: outcome{deleting, infrav1.ReasonDestroying, "destroy run a-destroy-2 is running"},
			want:    []string{"Ready=True/Succeeded", "Reconciling=True/Destroying"},
		},
		"suspended": {
			before:  []metav1.Condition{readyTrue},
			outcome: outcome{suspended, infrav1.ReasonSuspended, "spec.suspend is true"},
			want:    []string{"Ready=True/Succeeded", "Reconciling=False/Suspended"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := &TerraformRunReconciler{}
			run := aRun("a")
			run.Status.Conditions = append([]metav1.Condition(nil), tc.before...)
			st := &passState{outcome: tc.outcome}
			res, err := r.summarize(run, st, ctrl.Result{}, tc.err)
			if (err != nil) != tc.wantErr || res.RequeueAfter != tc.wantRequeue {
				t.Fatalf("summarize: %v, %v; want error %v, requeue %s", res, err, tc.wantErr, tc.wantRequeue)
			}
			var got []string
			for _, c := range run.Status.Conditions {
				got = append(got, c.Type+"="+string(c.Status)+"/"+c.Reason)
			}
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			for typ, msg := range tc.wantMessage {
				if c := findCond(run, typ); c == nil || c.Message != msg {
					t.Errorf("%s message %v, want %q", typ, c, msg)
				}
			}
		})
	}
}

// TestEveryConditionIsDeclared checks that each condition type of the API
// (the *Condition constants of api/v1alpha1) is in the conditions table,
// once, with an owner.
func TestEveryConditionIsDeclared(t *testing.T) {
	fs := token.NewFileSet()
	f, err := parser.ParseFile(fs, filepath.Join("..", "..", "api", "v1alpha1", "conditions.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var api []string
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && strings.HasSuffix(vs.Names[0].Name, "Condition") {
			if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
				api = append(api, strings.Trim(lit.Value, `"`))
			}
		}
		return true
	})
	if len(api) < 8 {
		t.Fatalf("read only %v from the API's conditions", api)
	}
	seen := map[string]int{}
	for _, c := range conditions {
		seen[c.Type]++
		if c.Owner == "" {
			t.Errorf("condition %s has no owner", c.Type)
		}
	}
	for _, typ := range api {
		if seen[typ] != 1 {
			t.Errorf("condition %s is declared %d times in the table, want once", typ, seen[typ])
		}
	}
	if len(conditions) != len(api) {
		t.Errorf("the table declares %d conditions, the API %d", len(conditions), len(api))
	}
}
