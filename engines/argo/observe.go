package argo

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	"github.com/argoproj/argo-workflows/v3/workflow/packer"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/results"
)

// stepOrder is the order steps are reported in.
var stepOrder = []string{
	names.StepRestoreState, names.StepClone, names.StepInit, names.StepPlan, names.StepApprove,
	names.StepApply, names.StepExport, names.StepCleanup,
}

// checkNames are the names of the check steps the Workflow has scheduled,
// in order: the cached Workflow has no spec, so they come from its nodes.
func checkNames(ns wfv1.Nodes) []string {
	checks := map[string]bool{}
	for _, n := range ns {
		if names.IsCheck(n.DisplayName) {
			checks[n.DisplayName] = true
		}
	}
	return slices.Sorted(maps.Keys(checks))
}

// withChecks places check steps after plan in a step order.
func withChecks(order, checks []string) []string {
	if len(checks) == 0 {
		return order
	}
	out := make([]string, 0, len(order)+len(checks))
	for _, s := range order {
		out = append(out, s)
		if s == names.StepPlan {
			out = append(out, checks...)
		}
	}
	return out
}

// nodes returns the Workflow's nodes, decompressed. Offloaded node status
// lives in Argo's database, which opr8r cannot read: that is refused clearly.
func nodes(wf *wfv1.Workflow) (wfv1.Nodes, error) {
	if wf.Status.IsOffloadNodeStatus() {
		return nil, fmt.Errorf("workflow %s has its node status offloaded to Argo's database (nodeStatusOffLoad); opr8r needs it in the object: disable offloading for opr8r's namespace", wf.Name)
	}
	if wf.Status.CompressedNodes == "" {
		return wf.Status.Nodes, nil
	}
	c := wf.DeepCopy()
	if err := packer.DecompressWorkflow(c); err != nil {
		return nil, fmt.Errorf("decompressing nodes of workflow %s: %w", wf.Name, err)
	}
	return c.Status.Nodes, nil
}

// stepNode finds a step's node by display name, never by id. A step that
// runs in a containerSet is a Container node named after it, preferred over
// a task of the same name (the pod that runs it, or the task that skipped
// it before any pod); a retried step has a Retry parent with the task's
// display name, preferred over its pods. The exit handler's display name
// is "<workflow>.onExit".
func stepNode(wf *wfv1.Workflow, ns wfv1.Nodes, step string) (wfv1.NodeStatus, bool) {
	display := step
	if step == names.StepCleanup {
		display = wf.Name + ".onExit"
	}
	rank := func(n wfv1.NodeStatus) int {
		switch n.Type {
		case wfv1.NodeTypeContainer:
			return 2
		case wfv1.NodeTypeRetry:
			return 1
		}
		return 0
	}
	var found wfv1.NodeStatus
	ok := false
	for _, n := range ns {
		match := n.DisplayName == display || (step == names.StepCleanup && n.TemplateName == names.StepCleanup) ||
			(n.Type == wfv1.NodeTypeContainer && n.DisplayName == ContainerName(step))
		if !match {
			continue
		}
		if !ok || rank(n) > rank(found) {
			found, ok = n, true
		}
	}
	return found, ok
}

// resultsNode is the node whose outputs hold a step's results: a
// container's pod (Argo reads a containerSet's outputs once its pod ends),
// else the step's own node.
func resultsNode(ns wfv1.Nodes, n wfv1.NodeStatus) wfv1.NodeStatus {
	if n.Type != wfv1.NodeTypeContainer {
		return n
	}
	pod := strings.TrimSuffix(n.Name, "."+n.DisplayName)
	for _, p := range ns {
		if p.Name == pod && p.Type == wfv1.NodeTypePod {
			return p
		}
	}
	return wfv1.NodeStatus{}
}

// containerExit is how Argo prefixes a container node's message with the
// container's end: "<name>: Error (exit code 1): <termination message>".
var containerExit = regexp.MustCompile(`^[a-z0-9-]+: [A-Za-z]+ \(exit code \d+\): `)

// stepMessage is a step node's message: of a container, its termination
// message (what opr8r-step wrote) when it has one.
func stepMessage(n wfv1.NodeStatus) string {
	if n.Type == wfv1.NodeTypeContainer {
		if rest := containerExit.ReplaceAllString(n.Message, ""); rest != n.Message && strings.TrimSpace(rest) != "" {
			return rest
		}
	}
	return n.Message
}

func stepPhase(p wfv1.NodePhase) infrav1.StepPhase {
	switch p {
	case wfv1.NodeRunning:
		return infrav1.StepRunning
	case wfv1.NodeSucceeded:
		return infrav1.StepSucceeded
	case wfv1.NodeSkipped, wfv1.NodeOmitted:
		return infrav1.StepSkipped
	case wfv1.NodeFailed, wfv1.NodeError:
		return infrav1.StepFailed
	default:
		return infrav1.StepPending
	}
}

func outputParam(n wfv1.NodeStatus, name string) string {
	if n.Outputs == nil {
		return ""
	}
	for _, p := range n.Outputs.Parameters {
		if p.Name == name && p.Value != nil {
			return p.Value.String()
		}
	}
	return ""
}

// resultsSynced says whether a pod node's outputs can be trusted.
func resultsSynced(n wfv1.NodeStatus) bool {
	return n.TaskResultSynced == nil || *n.TaskResultSynced
}

// Observe implements engine.Engine.
func (Engine) Observe(obj client.Object, _ []client.Object, _ time.Time) (engine.Progress, error) {
	wf, ok := obj.(*wfv1.Workflow)
	if !ok {
		return engine.Progress{}, fmt.Errorf("argo: expected a Workflow, got %T", obj)
	}
	ns, err := nodes(wf)
	if err != nil {
		return engine.Progress{}, err
	}
	prog := engine.Progress{
		StartedAt:  engine.TimeOrNil(wf.Status.StartedAt),
		FinishedAt: engine.TimeOrNil(wf.Status.FinishedAt),
		Message:    wf.Status.Message,
	}
	// failedIn names, per containerSet pod, the step that failed in it: the
	// containers after it end too (Argo's emissary ends a container whose
	// dependency failed, exit code 64), which is not their failure.
	failedIn := map[string]string{}
	for _, name := range withChecks(stepOrder, checkNames(ns)) {
		n, found := stepNode(wf, ns, name)
		if !found {
			continue
		}
		rn := resultsNode(ns, n)
		st := infrav1.StepStatus{
			Name:       name,
			Phase:      stepPhase(n.Phase),
			StartedAt:  engine.TimeOrNil(n.StartedAt),
			FinishedAt: engine.TimeOrNil(n.FinishedAt),
			Message:    stepMessage(n),
		}
		if n.Type == wfv1.NodeTypeContainer {
			if earlier := failedIn[rn.Name]; earlier != "" && st.Phase == infrav1.StepFailed {
				st.Phase, st.Message = infrav1.StepSkipped, "not run: step "+earlier+" failed before it in its pod"
			} else if st.Phase == infrav1.StepFailed {
				failedIn[rn.Name] = name
			}
		}
		prog.Steps = append(prog.Steps, st)
		if err := readNode(&prog, wf, name, n, rn); err != nil {
			return engine.Progress{}, err
		}
	}
	prog.Phase, prog.Finished = runPhase(wf.Status.Phase, prog.Gate.State)
	prog.Conclude(wf.Spec.Shutdown != "", stopReason(wf))
	return prog, nil
}

// readNode reads what a step's node reports beyond its phase: the commit,
// the plan, the gate, whether apply and export succeeded.
// A containerSet's results come from its pod's node (rn), once the pod
// has succeeded.
func readNode(prog *engine.Progress, wf *wfv1.Workflow, step string, n, rn wfv1.NodeStatus) error {
	switch step {
	case names.StepClone:
		if n.Phase == wfv1.NodeSucceeded && rn.Phase == wfv1.NodeSucceeded && resultsSynced(rn) {
			prog.Commit = outputParam(rn, pipeline.ResultCommit)
		}
	case names.StepPlan:
		if n.Phase == wfv1.NodeSucceeded && rn.Phase == wfv1.NodeSucceeded && resultsSynced(rn) {
			plan, err := planResult(rn)
			if err != nil {
				return err
			}
			prog.Plan = plan
		}
	case names.StepApprove:
		prog.Gate = gate(wf, n)
	case names.StepApply:
		prog.Applied = n.Phase == wfv1.NodeSucceeded
	case names.StepExport:
		prog.OutputsExported = n.Phase == wfv1.NodeSucceeded
	}
	return nil
}

// stopReason is why a Workflow was stopped: the reason opr8r gave
// (engine.CancelledAnnotation), or the shutdown someone else set.
func stopReason(wf *wfv1.Workflow) string {
	if r := wf.Annotations[engine.CancelledAnnotation]; r != "" {
		return r
	}
	return "the Workflow's spec.shutdown is " + string(wf.Spec.Shutdown)
}

func runPhase(p wfv1.WorkflowPhase, g engine.GateState) (infrav1.RunPhase, bool) {
	switch {
	case p.Completed() && g == engine.GateRejected:
		return infrav1.RunRejected, true
	case p == wfv1.WorkflowSucceeded:
		return infrav1.RunSucceeded, true
	case p == wfv1.WorkflowFailed || p == wfv1.WorkflowError:
		return infrav1.RunFailed, true
	case p == wfv1.WorkflowRunning && g == engine.GatePending:
		return infrav1.RunAwaitingApproval, false
	case p == wfv1.WorkflowRunning:
		return infrav1.RunRunning, false
	default:
		return infrav1.RunPending, false
	}
}

func planResult(n wfv1.NodeStatus) (*engine.PlanResult, error) {
	return results.ParsePlan(func(name string) string { return outputParam(n, name) })
}

// gate reads the approval gate. A suspend node that Succeeded with the
// decision "reject" (the Argo UI's dropdown) is a rejection too.
func gate(wf *wfv1.Workflow, n wfv1.NodeStatus) engine.Gate {
	g := engine.Gate{Since: engine.TimeOrNil(n.StartedAt), DecidedAt: engine.TimeOrNil(n.FinishedAt), Message: n.Message}
	switch n.Phase {
	case wfv1.NodeRunning, wfv1.NodePending:
		g.State = engine.GatePending
	case wfv1.NodeSkipped, wfv1.NodeOmitted:
		g.State = engine.GateSkipped
	case wfv1.NodeFailed, wfv1.NodeError:
		if wf.Spec.Shutdown != "" && outputParam(n, paramDecision) != decisionReject {
			// The Workflow was stopped (spec.shutdown fails a waiting
			// suspend node, "Stopped with strategy 'Stop'"): no one
			// decided. opr8r's rejection supplies the decision reject.
			g.State = engine.GateSkipped
			break
		}
		g.State = engine.GateRejected
		g.By, g.ByGroups, g.Stamped = resumedBy(wf, n.Message), stampedGroups(wf), wf.Annotations[AnnoGateDecidedBy] != ""
	case wfv1.NodeSucceeded:
		g.Digest = outputParam(n, paramApprovedDigest)
		g.By, g.ByGroups, g.Stamped = resumedBy(wf, n.Message), stampedGroups(wf), wf.Annotations[AnnoGateDecidedBy] != ""
		if outputParam(n, paramDecision) == decisionReject {
			g.State = engine.GateRejected
			if g.Message == "" {
				g.Message = "the decision \"reject\" was chosen"
			}
		} else {
			g.State = engine.GateApproved
		}
	}
	return g
}

// stampedGroups are the groups of the person whose resume the API server
// stamped.
func stampedGroups(wf *wfv1.Workflow) []string {
	if wf.Annotations[AnnoGateDecidedBy] == "" || wf.Annotations[AnnoGateGroupsOf] == "" {
		return nil
	}
	return strings.Split(wf.Annotations[AnnoGateGroupsOf], "\n")
}

// resumedBy says who decided: the user the API server stamped at admission
// (opr8r-argo-resume, on a person's resume), else Argo's actor label when
// the Argo Server did it, else the "Resumed by:" part of the node message.
// opr8r's own decisions label the actor "opr8r" (a label value cannot say
// more) and name which of them in the message ("opr8r (timeout)",
// "opr8r (alice, bob)"): that name is who decided.
func resumedBy(wf *wfv1.Workflow, msg string) string {
	if u := wf.Annotations[AnnoGateDecidedBy]; u != "" {
		return u
	}
	named := ""
	if i := strings.Index(msg, "Resumed by: "); i >= 0 {
		named = strings.TrimSpace(msg[i+len("Resumed by: "):])
	}
	if a := wf.Labels[actorLabel]; a != "" {
		if a == engine.ActorName && strings.HasPrefix(named, engine.ActorName+" (") {
			return named
		}
		return a
	}
	return named
}
