package argo

import (
	"context"
	"testing"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// A gate opr8r decides reads back as decided by the one it names: Argo's
// actor label can only say "opr8r", so its timeout and the approvals it
// counts are told apart by the node's message, as on the other engines by
// who decided. A person's resume keeps the name Argo or the API server gave.
func TestGateReadsBackWhoDecided(t *testing.T) {
	s := runtime.NewScheme()
	if err := wfv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	waiting := func() *wfv1.Workflow {
		return &wfv1.Workflow{
			ObjectMeta: metav1.ObjectMeta{Name: "net-1", Namespace: "team-a", ResourceVersion: "1"},
			Status: wfv1.WorkflowStatus{Nodes: wfv1.Nodes{
				"net-1-2": {ID: "net-1-2", Name: "net-1.approve", DisplayName: names.StepApprove, Type: wfv1.NodeTypeSuspend, Phase: wfv1.NodeRunning,
					Outputs: &wfv1.Outputs{Parameters: []wfv1.Parameter{{Name: paramDecision}, {Name: paramApprovedDigest}}}},
			}},
		}
	}
	ctx := context.Background()
	decided := func(t *testing.T, decide func(client.Client, *wfv1.Workflow) error) engine.Gate {
		t.Helper()
		wf := waiting()
		c := fake.NewClientBuilder().WithScheme(s).WithObjects(wf).Build()
		if err := c.Get(ctx, client.ObjectKeyFromObject(wf), wf); err != nil {
			t.Fatal(err)
		}
		if err := decide(c, wf); err != nil {
			t.Fatal(err)
		}
		got := &wfv1.Workflow{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(wf), got); err != nil {
			t.Fatal(err)
		}
		return gate(got, got.Status.Nodes["net-1-2"])
	}

	g := decided(t, func(c client.Client, wf *wfv1.Workflow) error {
		return Engine{}.Reject(ctx, c, wf, engine.Decision{By: "timeout", Reason: "approval timed out after 5m0s"})
	})
	if g.State != engine.GateRejected || g.By != "opr8r (timeout)" {
		t.Errorf("opr8r's timeout reads back as %s by %q (%q), want rejected by %q", g.State, g.By, g.Message, "opr8r (timeout)")
	}
	g = decided(t, func(c client.Client, wf *wfv1.Workflow) error {
		return Engine{}.Approve(ctx, c, wf, engine.Decision{By: "alice, bob", Digest: "sha256:ab"})
	})
	if g.State != engine.GateApproved || g.By != "opr8r (alice, bob)" || g.Digest != "sha256:ab" {
		t.Errorf("opr8r's approval reads back as %s by %q of %q, want approved by %q of sha256:ab", g.State, g.By, g.Digest, "opr8r (alice, bob)")
	}
	g = decided(t, func(c client.Client, wf *wfv1.Workflow) error {
		return Engine{}.Reject(ctx, c, wf, engine.Decision{Reason: "no"})
	})
	if g.By != "opr8r" {
		t.Errorf("opr8r's rejection with no one named reads back by %q, want opr8r", g.By)
	}

	// The Argo Server's resume (its actor label) and one the API server
	// stamped keep their names, whatever the message says.
	wf := waiting()
	n := wf.Status.Nodes["net-1-2"]
	n.Phase, n.Message = wfv1.NodeFailed, "Resumed by: opr8r (timeout)"
	wf.Labels = map[string]string{actorLabel: "alice"}
	if got := gate(wf, n).By; got != "alice" {
		t.Errorf("the Argo Server's reject by alice reads back by %q", got)
	}
	wf.Labels[actorLabel] = engine.ActorName
	wf.Annotations = map[string]string{AnnoGateDecidedBy: "carol"}
	if got := gate(wf, n).By; got != "carol" {
		t.Errorf("a resume the API server stamped for carol reads back by %q", got)
	}
}

// Cancel stops the Workflow (shutdown Stop) and says why; Argo then fails
// the waiting suspend node ("Stopped with strategy 'Stop'"). No one
// decided: the gate reads as skipped and the run as stopped, for that
// reason, not as a rejection. A gate opr8r rejected before the stop stays
// a rejection.
func TestACancelledWorkflowIsStoppedNotRejected(t *testing.T) {
	s := runtime.NewScheme()
	if err := wfv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stopped := func(t *testing.T, reject bool) engine.Progress {
		t.Helper()
		wf := &wfv1.Workflow{
			ObjectMeta: metav1.ObjectMeta{Name: "net-1", Namespace: "team-a"},
			Status: wfv1.WorkflowStatus{Phase: wfv1.WorkflowRunning, Nodes: wfv1.Nodes{
				"net-1-2": {ID: "net-1-2", Name: "net-1.approve", DisplayName: names.StepApprove, Type: wfv1.NodeTypeSuspend, Phase: wfv1.NodeRunning,
					Outputs: &wfv1.Outputs{Parameters: []wfv1.Parameter{{Name: paramDecision}, {Name: paramApprovedDigest}}}},
			}},
		}
		c := fake.NewClientBuilder().WithScheme(s).WithObjects(wf).Build()
		if err := c.Get(ctx, client.ObjectKeyFromObject(wf), wf); err != nil {
			t.Fatal(err)
		}
		if reject {
			if err := (Engine{}).Reject(ctx, c, wf, engine.Decision{Reason: "no"}); err != nil {
				t.Fatal(err)
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(wf), wf); err != nil {
				t.Fatal(err)
			}
		}
		if err := (Engine{}).Cancel(ctx, c, wf, "superseded by a spec change"); err != nil {
			t.Fatal(err)
		}
		got := &wfv1.Workflow{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(wf), got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.Shutdown != wfv1.ShutdownStrategyStop {
			t.Fatalf("Cancel left spec.shutdown %q", got.Spec.Shutdown)
		}
		// What Argo does next.
		n := got.Status.Nodes["net-1-2"]
		if n.Phase == wfv1.NodeRunning {
			n.Phase, n.Message = wfv1.NodeFailed, "Stopped with strategy 'Stop'"
			got.Status.Nodes["net-1-2"] = n
		}
		got.Status.Phase = wfv1.WorkflowFailed
		got.Status.FinishedAt = metav1.Now()
		if !(Engine{}).SlimForCache(got) {
			t.Fatal("not slimmed")
		}
		prog, err := Engine{}.Observe(got, nil, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return prog
	}

	prog := stopped(t, false)
	if prog.Gate.State != engine.GateSkipped || prog.Phase != infrav1.RunFailed || !prog.Finished || prog.Message != "stopped: superseded by a spec change" {
		t.Errorf("stopped while waiting: gate %s, phase %s, finished %v, message %q; want Skipped, Failed, finished, stopped: superseded by a spec change (read through the cache's slim copy)", prog.Gate.State, prog.Phase, prog.Finished, prog.Message)
	}
	prog = stopped(t, true)
	if prog.Gate.State != engine.GateRejected || prog.Phase != infrav1.RunRejected {
		t.Errorf("rejected, then stopped: gate %s, phase %s; want Rejected", prog.Gate.State, prog.Phase)
	}
}
