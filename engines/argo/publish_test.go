package argo

import (
	"context"
	"strings"
	"testing"

	"github.com/opr8r/opr8r/pkg/names"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// A waiting gate node gets a message with the plan's summary and digest and
// how to decide (the Argo UI shows it first); a second publish writes nothing.
func TestPublishGateWritesTheGateNodeMessage(t *testing.T) {
	wf := &wfv1.Workflow{
		ObjectMeta: metav1.ObjectMeta{Name: "net-1", Namespace: "team-a", Labels: map[string]string{infrav1.RunNameLabel: "net"}},
		Status: wfv1.WorkflowStatus{Nodes: wfv1.Nodes{
			"net-1-1": {ID: "net-1-1", Name: "net-1.plan", DisplayName: names.StepPlan, Type: wfv1.NodeTypePod, Phase: wfv1.NodeSucceeded},
			"net-1-2": {ID: "net-1-2", Name: "net-1.approve", DisplayName: names.StepApprove, Type: wfv1.NodeTypeSuspend, Phase: wfv1.NodeRunning,
				Inputs: &wfv1.Inputs{Parameters: []wfv1.Parameter{
					{Name: paramDigest, Value: wfv1.AnyStringPtr("sha256:ab")},
					{Name: paramSummary, Value: wfv1.AnyStringPtr(`{"add":1,"change":0,"destroy":0,"replace":0}`)},
				}}},
		}},
	}
	s := runtime.NewScheme()
	if err := wfv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	writes := 0
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(wf).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writes++
			return c.Patch(ctx, obj, patch, opts...)
		},
	}).Build()
	ctx := context.Background()
	policy := engine.GatePolicy{Digest: "sha256:ab", Needed: 1}
	if err := (Engine{}).PublishGate(ctx, c, wf.DeepCopy(), policy); err != nil {
		t.Fatal(err)
	}
	got := &wfv1.Workflow{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(wf), got); err != nil {
		t.Fatal(err)
	}
	msg := got.Status.Nodes["net-1-2"].Message
	for _, want := range []string{"Plan +1 ~0 -0 (sha256:ab) waits for approval", "RESUME this step with decision approve",
		"kubectl tfrun approve net -n team-a --plan sha256:ab", "kubectl tfrun reject net -n team-a"} {
		if !strings.Contains(msg, want) {
			t.Errorf("gate node message lacks %q: %q", want, msg)
		}
	}
	if got.Annotations[AnnoGateDigest] != "sha256:ab" {
		t.Errorf("gate annotations not published: %v", got.Annotations)
	}
	if m := got.Status.Nodes["net-1-1"].Message; m != "" {
		t.Errorf("the plan node's message changed: %q", m)
	}
	if err := (Engine{}).PublishGate(ctx, c, got, policy); err != nil {
		t.Fatal(err)
	}
	if writes != 1 {
		t.Errorf("%d writes, want 1 (the second publish finds everything in place)", writes)
	}
}
