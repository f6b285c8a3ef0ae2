package argo_test

import (
	"testing"
	"time"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines/argo"
	"github.com/opr8r/opr8r/engines/argo/argotest"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// observe builds a Workflow, lets set write its nodes as Argo would, and
// observes it.
func observe(t *testing.T, set func(wf *wfv1.Workflow)) engine.Progress {
	t.Helper()
	wf := buildGolden(t, testutil.MakeRun("a", "ns").Auto().Obj(), infrav1.RunApply)
	wf.Status.Phase, wf.Status.Nodes = wfv1.WorkflowRunning, wfv1.Nodes{}
	set(wf)
	p, err := argo.New().Observe(wf, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func phases(p engine.Progress) map[string]infrav1.StepPhase {
	out := map[string]infrav1.StepPhase{}
	for _, s := range p.Steps {
		out[s.Name] = s.Phase
	}
	return out
}

func step(p engine.Progress, name string) infrav1.StepStatus {
	for _, s := range p.Steps {
		if s.Name == name {
			return s
		}
	}
	return infrav1.StepStatus{}
}

const planDigest = "sha256:0000000000000000000000000000000000000000000000000000000000000001"

// The steps of a containerSet are its Container nodes; the results are on
// the pod's node and are read only once the pod has ended.
func TestObserveContainerSetSteps(t *testing.T) {
	running := observe(t, func(wf *wfv1.Workflow) {
		argotest.SetNode(wf, "plan", wfv1.NodeTypePod, wfv1.NodeRunning)
		argotest.SetContainer(wf, "plan", "clone", wfv1.NodeSucceeded)
		argotest.SetContainer(wf, "plan", "terraform-init", wfv1.NodeSucceeded)
		argotest.SetContainer(wf, "plan", "plan", wfv1.NodeRunning)
		argotest.SetContainer(wf, "plan", "main", wfv1.NodePending)
	})
	want := map[string]infrav1.StepPhase{"clone": infrav1.StepSucceeded, "init": infrav1.StepSucceeded, "plan": infrav1.StepRunning}
	if got := phases(running); len(got) != len(want) || got["clone"] != want["clone"] || got["init"] != want["init"] || got["plan"] != want["plan"] {
		t.Errorf("steps while the plan's pod runs = %v, want %v", got, want)
	}
	if running.Commit != "" || running.Plan != nil {
		t.Errorf("results read before the pod ended: commit %q, plan %+v", running.Commit, running.Plan)
	}

	planned := observe(t, func(wf *wfv1.Workflow) {
		for _, c := range []string{"clone", "terraform-init", "plan", "main"} {
			argotest.SetContainer(wf, "plan", c, wfv1.NodeSucceeded)
		}
		argotest.SetNode(wf, "plan", wfv1.NodeTypePod, wfv1.NodeSucceeded, func(n *wfv1.NodeStatus) {
			n.Outputs = argotest.Params("commit", "abc123", "has-changes", "true", "digest", planDigest,
				"summary", `{"add":1,"change":0,"destroy":0}`)
			n.TaskResultSynced = ptr.To(true)
		})
	})
	if planned.Commit != "abc123" {
		t.Errorf("commit = %q, want the plan pod's output abc123", planned.Commit)
	}
	if planned.Plan == nil || planned.Plan.Digest != planDigest || planned.Plan.Add != 1 {
		t.Errorf("plan = %+v, want the plan pod's outputs (1 to add, %s)", planned.Plan, planDigest)
	}
}

// A failed container keeps opr8r-step's termination message without
// Argo's prefix; the containers after it, which Argo's emissary ends with
// exit code 64, read as skipped, not failed.
func TestObserveContainerSetFailure(t *testing.T) {
	p := observe(t, func(wf *wfv1.Workflow) {
		argotest.SetNode(wf, "plan", wfv1.NodeTypePod, wfv1.NodeFailed)
		argotest.SetContainer(wf, "plan", "clone", wfv1.NodeSucceeded)
		argotest.SetContainer(wf, "plan", "terraform-init", wfv1.NodeFailed, func(n *wfv1.NodeStatus) {
			n.Message = "terraform-init: Error (exit code 1): Error: Failed to query available provider packages"
		})
		argotest.SetContainer(wf, "plan", "plan", wfv1.NodeError, func(n *wfv1.NodeStatus) { n.Message = "plan: Error (exit code 64): " })
		argotest.SetContainer(wf, "plan", "main", wfv1.NodeError, func(n *wfv1.NodeStatus) { n.Message = "main: Error (exit code 64): " })
	})
	if s := step(p, "init"); s.Phase != infrav1.StepFailed || s.Message != "Error: Failed to query available provider packages" {
		t.Errorf("init = %s %q, want Failed with opr8r-step's message alone", s.Phase, s.Message)
	}
	if s := step(p, "plan"); s.Phase != infrav1.StepSkipped || s.Message != "not run: step init failed before it in its pod" {
		t.Errorf("plan = %s %q, want Skipped after init failed", s.Phase, s.Message)
	}
	if p.Plan != nil {
		t.Errorf("a failed pod's plan was read: %+v", p.Plan)
	}
}

// export-outputs runs in apply's pod; its own task (a plan without changes)
// is skipped: the step is the container.
func TestObserveExportInApplysPod(t *testing.T) {
	p := observe(t, func(wf *wfv1.Workflow) {
		argotest.SetNode(wf, "export-outputs", wfv1.NodeTypeSkipped, wfv1.NodeSkipped)
		argotest.SetNode(wf, "apply", wfv1.NodeTypePod, wfv1.NodeSucceeded)
		argotest.SetContainer(wf, "apply", "apply", wfv1.NodeSucceeded)
		argotest.SetContainer(wf, "apply", "export-outputs", wfv1.NodeSucceeded)
	})
	if s := step(p, "export-outputs"); s.Phase != infrav1.StepSucceeded || !p.OutputsExported || !p.Applied {
		t.Errorf("export-outputs = %s (exported %v, applied %v), want Succeeded in apply's pod", s.Phase, p.OutputsExported, p.Applied)
	}
}

// Where kubectl tfrun logs --step reads each step.
func TestStepLogs(t *testing.T) {
	for step, want := range map[string][2]string{
		"clone":          {"workflows.argoproj.io/workflow=a-1,infra.opr8r.io/step=plan", "clone"},
		"init":           {"workflows.argoproj.io/workflow=a-1,infra.opr8r.io/step=plan", "terraform-init"},
		"plan":           {"workflows.argoproj.io/workflow=a-1,infra.opr8r.io/step=plan", "plan"},
		"apply":          {"workflows.argoproj.io/workflow=a-1,infra.opr8r.io/step=apply", "apply"},
		"export-outputs": {"workflows.argoproj.io/workflow=a-1,infra.opr8r.io/step in (apply,export-outputs)", "export-outputs"},
		"cleanup":        {"workflows.argoproj.io/workflow=a-1,infra.opr8r.io/step=cleanup", "main"},
		"check-tflint":   {"workflows.argoproj.io/workflow=a-1,infra.opr8r.io/step=check-tflint", "main"},
	} {
		sel, c := argo.New().StepLogs("a-1", step)
		if sel != want[0] || c != want[1] {
			t.Errorf("StepLogs(%s) = %q, %q; want %q, %q", step, sel, c, want[0], want[1])
		}
	}
}
