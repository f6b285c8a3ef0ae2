package argo_test

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
	"time"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	"github.com/argoproj/argo-workflows/v3/util/file"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opr8r/opr8r/engines/argo"
)

// slim is the manager's cache transform for a Workflow.
func slim(wf *wfv1.Workflow) (any, error) {
	argo.New().SlimForCache(wf)
	return wf, nil
}

func TestSlimForCacheKeepsWhatTheManagerReads(t *testing.T) {
	wf := &wfv1.Workflow{
		ObjectMeta: metav1.ObjectMeta{Name: "w", Labels: map[string]string{"app.kubernetes.io/managed-by": "opr8r"}},
		Spec:       wfv1.WorkflowSpec{Entrypoint: "main", Shutdown: wfv1.ShutdownStrategyStop},
		Status:     wfv1.WorkflowStatus{Phase: wfv1.WorkflowFailed, StoredWorkflowSpec: &wfv1.WorkflowSpec{Entrypoint: "main"}},
	}
	if !argo.New().SlimForCache(wf) {
		t.Fatal("a Workflow is the Argo engine's to slim")
	}
	got := wf
	if got.Spec.Shutdown != wfv1.ShutdownStrategyStop || got.Spec.Entrypoint != "" || got.Status.StoredWorkflowSpec != nil {
		t.Fatalf("spec/status = %+v / %+v, want only spec.shutdown and the status", got.Spec, got.Status)
	}
	if got.Labels["app.kubernetes.io/managed-by"] != "opr8r" || got.Status.Phase != wfv1.WorkflowFailed {
		t.Fatalf("labels or phase lost: %+v", got)
	}
}

// A Workflow as Argo 3.7 left it on the e2e cluster (make dev: an apply,
// approved through the gate, with outputs), and variants of it: the gate
// pending, the plan failed, and the nodes compressed. Observing the slimmed
// copy the cache keeps must give exactly what observing the whole object
// gives, and the gate node must stay whole for the approval patch.
func TestSlimWorkflowStatusObservesTheSame(t *testing.T) {
	b, err := os.ReadFile("testdata/argo-3.7-workflow.json")
	if err != nil {
		t.Fatal(err)
	}
	real := &wfv1.Workflow{}
	if err := json.Unmarshal(b, real); err != nil {
		t.Fatal(err)
	}
	node := func(wf *wfv1.Workflow, display string) (string, wfv1.NodeStatus) {
		for id, n := range wf.Status.Nodes {
			if n.DisplayName == display {
				return id, n
			}
		}
		t.Fatalf("fixture has no node %q", display)
		return "", wfv1.NodeStatus{}
	}
	drop := func(wf *wfv1.Workflow, displays ...string) {
		for _, d := range displays {
			id, _ := node(wf, d)
			delete(wf.Status.Nodes, id)
		}
	}
	pending := real.DeepCopy()
	pending.Status.Phase, pending.Status.FinishedAt = wfv1.WorkflowRunning, metav1.Time{}
	drop(pending, "apply", "export-outputs", real.Name+".onExit")
	id, gateNode := node(pending, "approve")
	gateNode.Phase, gateNode.FinishedAt, gateNode.Message, gateNode.Children = wfv1.NodeRunning, metav1.Time{}, "", nil
	for i := range gateNode.Outputs.Parameters {
		gateNode.Outputs.Parameters[i].Value = nil
		gateNode.Outputs.Parameters[i].ValueFrom = &wfv1.ValueFrom{Supplied: &wfv1.SuppliedValueFrom{}}
	}
	pending.Status.Nodes[id] = gateNode
	failed := real.DeepCopy()
	failed.Status.Phase, failed.Status.Message = wfv1.WorkflowFailed, "child 'plan' failed"
	drop(failed, "approve", "apply", "export-outputs")
	id, planNode := node(failed, "plan")
	planNode.Phase, planNode.Message, planNode.Outputs.Parameters = wfv1.NodeFailed, "Error: Invalid value for variable", nil
	failed.Status.Nodes[id] = planNode
	compressed := real.DeepCopy()
	compressed.Status.CompressedNodes, compressed.Status.Nodes = mustCompress(t, real.Status.Nodes), nil

	eng := argo.New()
	for name, wf := range map[string]*wfv1.Workflow{"approved and applied": real, "gate pending": pending, "plan failed": failed, "compressed": compressed} {
		t.Run(name, func(t *testing.T) {
			want, err := eng.Observe(wf.DeepCopy(), nil, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			out, err := slim(wf.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			slim := out.(*wfv1.Workflow)
			got, err := eng.Observe(slim, nil, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("observing the cached copy differs:\n got %+v\nwant %+v", got, want)
			}
			if slim.Status.CompressedNodes != wf.Status.CompressedNodes {
				t.Fatal("compressed nodes changed")
			}
			for id, n := range wf.Status.Nodes {
				if n.Type == wfv1.NodeTypeSuspend && !reflect.DeepEqual(slim.Status.Nodes[id], n) {
					t.Fatalf("gate node not kept whole:\n got %+v\nwant %+v", slim.Status.Nodes[id], n)
				}
			}
		})
	}

	// The slimming is real: what observation doesn't read is gone from
	// every node but the gate, and the cached status is well under the
	// size Argo wrote.
	out, err := slim(real.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	cached := out.(*wfv1.Workflow).Status
	for id, n := range cached.Nodes {
		if n.Type != wfv1.NodeTypeSuspend && (n.Children != nil || n.BoundaryID != "" || n.HostNodeName != "" || n.ResourcesDuration != nil || n.Inputs != nil || (n.Outputs != nil && n.Outputs.ExitCode != nil)) {
			t.Fatalf("node %s keeps fields observation doesn't read: %+v", id, n)
		}
	}
	if cached.Conditions != nil || cached.ResourcesDuration != nil || cached.ArtifactRepositoryRef != nil || cached.Progress != "" {
		t.Fatalf("status keeps fields observation doesn't read: %+v", cached)
	}
	full, _ := json.Marshal(real.Status)
	slim, _ := json.Marshal(cached)
	t.Logf("status JSON: %d bytes as written, %d cached", len(full), len(slim))
	if len(slim)*3 > len(full)*2 {
		t.Fatalf("cached status is %d bytes of %d; want under two thirds", len(slim), len(full))
	}
}

func mustCompress(t *testing.T, n wfv1.Nodes) string {
	t.Helper()
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return file.CompressEncodeString(string(b))
}
