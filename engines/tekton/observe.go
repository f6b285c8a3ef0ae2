package tekton

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	tektonv1beta1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	corev1 "k8s.io/api/core/v1"
	"knative.dev/pkg/apis"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/results"
)

// Labels Tekton puts on the TaskRuns and CustomRuns of a PipelineRun.
const (
	PipelineRunLabel  = "tekton.dev/pipelineRun"
	PipelineTaskLabel = "tekton.dev/pipelineTask"
)

// Related implements engine.RelatedLister: the PipelineRun's TaskRuns and
// CustomRuns, found by Tekton's pipelineRun label (they are owned by the
// PipelineRun, not by the TerraformRun).
func (Engine) Related(ctx context.Context, c client.Reader, child client.Object) ([]client.Object, error) {
	sel := client.MatchingLabels{PipelineRunLabel: child.GetName()}
	ns := client.InNamespace(child.GetNamespace())
	var out []client.Object
	trs := &tektonv1.TaskRunList{}
	if err := c.List(ctx, trs, ns, sel); err != nil {
		return nil, err
	}
	for i := range trs.Items {
		out = append(out, &trs.Items[i])
	}
	crs := &tektonv1beta1.CustomRunList{}
	if err := c.List(ctx, crs, ns, sel); err != nil {
		return nil, err
	}
	for i := range crs.Items {
		out = append(out, &crs.Items[i])
	}
	return out, nil
}

// view is a PipelineRun with the TaskRuns and the gate CustomRun of its
// tasks, and the tasks Tekton skipped.
type view struct {
	pr       *tektonv1.PipelineRun
	taskRuns map[string]*tektonv1.TaskRun
	gate     *tektonv1beta1.CustomRun
	skipped  map[string]bool
}

// newView takes of the related objects only those the PipelineRun's own
// status names as its children (status.childReferences, which only
// Tekton's controller writes), under the pipeline task it names: a TaskRun
// or CustomRun that merely carries the PipelineRun's labels and owner, as
// anyone who may create them can make one, is not read.
func newView(pr *tektonv1.PipelineRun, related []client.Object) view {
	v := view{pr: pr, taskRuns: map[string]*tektonv1.TaskRun{}, skipped: map[string]bool{}}
	for _, o := range related {
		task, ok := childTask(pr, o)
		if !ok {
			continue
		}
		switch r := o.(type) {
		case *tektonv1.TaskRun:
			v.taskRuns[task] = r
		case *tektonv1beta1.CustomRun:
			if task == taskApprove {
				v.gate = r
			}
		}
	}
	for _, s := range pr.Status.SkippedTasks {
		v.skipped[s.Name] = true
	}
	return v
}

// childTask is the pipeline task of a TaskRun or CustomRun that the
// PipelineRun's status names as its child, and whether it does.
func childTask(pr *tektonv1.PipelineRun, o client.Object) (string, bool) {
	kind := "TaskRun"
	if _, ok := o.(*tektonv1beta1.CustomRun); ok {
		kind = "CustomRun"
	}
	for _, ref := range pr.Status.ChildReferences {
		if ref.Kind == kind && ref.Name == o.GetName() {
			return ref.PipelineTaskName, true
		}
	}
	return "", false
}

// Observe implements engine.Engine.
func (Engine) Observe(obj client.Object, related []client.Object, now time.Time) (engine.Progress, error) {
	pr, ok := obj.(*tektonv1.PipelineRun)
	if !ok {
		return engine.Progress{}, fmt.Errorf("tekton: expected a PipelineRun, got %T", obj)
	}
	v := newView(pr, related)
	out := engine.Progress{StartedAt: pr.Status.StartTime, FinishedAt: pr.Status.CompletionTime}
	if err := v.planSteps(&out); err != nil {
		return engine.Progress{}, err
	}
	v.checkSteps(&out)
	v.gateStep(&out)
	v.laterSteps(&out)
	c := pr.Status.GetCondition(apis.ConditionSucceeded)
	if c != nil {
		out.Message = c.Message
	}
	out.Phase, out.Finished = runPhase(c, out.Gate.State)
	out.Conclude(pr.Spec.Status != "", stopReason(pr))
	if tr := unreadTaskRun(pr, v.taskRuns, now); tr != "" && out.Finished {
		// The TaskRuns are cached apart from the PipelineRun and may lag
		// it (seconds after an API server restart): a result taken now
		// would lack that task's (no apply, no outputs: seen in make
		// chaos). Not finished until every TaskRun the PipelineRun names
		// has been read, for up to engine.CacheLagGrace after it completed.
		out.Finished, out.FinishedAt, out.Phase = false, nil, infrav1.RunRunning
		out.Message = "waiting to read TaskRun " + tr
	}
	return out, nil
}

// planSteps reads restore-state, when the run has it, then clone, init
// and plan, the steps of the plan task, and
// the commit and plan it reports once it succeeded.
func (v view) planSteps(out *engine.Progress) error {
	if tr := v.taskRuns[taskRestore]; tr != nil {
		out.Steps = append(out.Steps, stepStatus(tr, names.StepRestoreState, names.StepRestoreState))
	}
	tr := v.taskRuns[taskPlan]
	if tr == nil {
		return nil
	}
	for _, name := range []string{names.StepClone, names.StepInit, names.StepPlan} {
		out.Steps = append(out.Steps, stepStatus(tr, name, name))
	}
	if !succeeded(tr.Status.GetCondition(apis.ConditionSucceeded)) {
		return nil
	}
	res := taskResults(tr)
	out.Commit = res[pipeline.ResultCommit]
	plan, err := planResult(res)
	out.Plan = plan
	return err
}

// checkSteps reads the checks, from their TaskRuns and the skipped tasks
// (the cached PipelineRun has no spec), in order of name.
func (v view) checkSteps(out *engine.Progress) {
	checks := map[string]bool{}
	for task := range v.taskRuns {
		checks[task] = names.IsCheck(task)
	}
	for task := range v.skipped {
		checks[task] = checks[task] || names.IsCheck(task)
	}
	for _, task := range slices.Sorted(maps.Keys(checks)) {
		switch tr := v.taskRuns[task]; {
		case !checks[task]:
		case tr != nil:
			out.Steps = append(out.Steps, stepStatus(tr, task, task))
		default:
			out.Steps = append(out.Steps, infrav1.StepStatus{Name: task, Phase: infrav1.StepSkipped})
		}
	}
}

// gateStep reads the approval gate: its CustomRun, or the task Tekton
// skipped for a plan without changes.
func (v view) gateStep(out *engine.Progress) {
	switch {
	case v.gate != nil:
		out.Gate = gateState(v.gate)
		out.Steps = append(out.Steps, gateStep(v.gate, out.Gate))
	case v.skipped[taskApprove]:
		out.Gate.State = engine.GateSkipped
		out.Steps = append(out.Steps, infrav1.StepStatus{Name: names.StepApprove, Phase: infrav1.StepSkipped})
	}
}

// laterSteps reads apply, export-outputs and cleanup. The apply task's
// pod runs all three (a destroy: apply and cleanup); after a plan without
// changes the export task's pod runs export-outputs and cleanup. The
// finally task cleanup runs only when neither carrier succeeded, and once
// it runs it is the cleanup that counts. A carrier that ended without
// success leaves cleanup pending until the finally task reports it.
func (v view) laterSteps(out *engine.Progress) {
	apply, export := v.taskRuns[taskApply], v.taskRuns[taskExport]
	carrier := cmp.Or(apply, export)
	switch {
	case apply != nil:
		st := stepStatus(apply, names.StepApply, names.StepApply)
		out.Applied = st.Phase == infrav1.StepSucceeded
		out.Steps = append(out.Steps, st)
	case v.skipped[taskApply]:
		out.Steps = append(out.Steps, infrav1.StepStatus{Name: names.StepApply, Phase: infrav1.StepSkipped})
	}
	switch {
	case export != nil:
		out.Steps = append(out.Steps, stepStatus(export, names.StepExport, names.StepExport))
	case apply != nil && v.pr.Labels[infrav1.RunTypeLabel] == string(infrav1.RunApply):
		out.Steps = append(out.Steps, stepStatus(apply, names.StepExport, names.StepExport))
	case v.skipped[taskExport] && v.skipped[taskApply]:
		out.Steps = append(out.Steps, infrav1.StepStatus{Name: names.StepExport, Phase: infrav1.StepSkipped})
		// Tekton skips the export task as soon as the plan shows changes;
		// export-outputs is then apply's to run, and shows with apply.
	}
	out.OutputsExported = slices.ContainsFunc(out.Steps, func(s infrav1.StepStatus) bool {
		return s.Name == names.StepExport && s.Phase == infrav1.StepSucceeded
	})
	switch cleanup := v.taskRuns[taskCleanup]; {
	case cleanup != nil:
		out.Steps = append(out.Steps, stepStatus(cleanup, names.StepCleanup, names.StepCleanup))
	case carrier != nil && done(carrier) && !succeeded(carrier.Status.GetCondition(apis.ConditionSucceeded)):
		// The fallback is due; Tekton has not started it yet.
		out.Steps = append(out.Steps, infrav1.StepStatus{Name: names.StepCleanup, Phase: infrav1.StepPending})
	case carrier != nil:
		out.Steps = append(out.Steps, stepStatus(carrier, names.StepCleanup, names.StepCleanup))
	case v.skipped[taskCleanup]:
		out.Steps = append(out.Steps, infrav1.StepStatus{Name: names.StepCleanup, Phase: infrav1.StepSkipped})
	}
}

// unreadTaskRun names a TaskRun of the PipelineRun's childReferences that
// is not in the view, or, of a PipelineRun that succeeded, not yet done
// there.
func unreadTaskRun(pr *tektonv1.PipelineRun, taskRuns map[string]*tektonv1.TaskRun, now time.Time) string {
	if ct := pr.Status.CompletionTime; ct != nil && now.Sub(ct.Time) > engine.CacheLagGrace {
		return ""
	}
	for _, ref := range pr.Status.ChildReferences {
		if ref.Kind != "TaskRun" {
			continue
		}
		tr := taskRuns[ref.PipelineTaskName]
		if tr == nil || tr.Name != ref.Name {
			return ref.Name
		}
		// A PipelineRun succeeds once all its TaskRuns are done: one that
		// is not, in the view, is an older copy.
		if succeeded(pr.Status.GetCondition(apis.ConditionSucceeded)) && !done(tr) {
			return ref.Name
		}
	}
	return ""
}

func succeeded(c *apis.Condition) bool { return c != nil && c.Status == corev1.ConditionTrue }

// done says whether a TaskRun has ended.
func done(tr *tektonv1.TaskRun) bool {
	c := tr.Status.GetCondition(apis.ConditionSucceeded)
	return c != nil && c.Status != corev1.ConditionUnknown
}

// stopReason is why a PipelineRun was cancelled: the reason opr8r gave
// (engine.CancelledAnnotation), or the spec.status someone else set.
func stopReason(pr *tektonv1.PipelineRun) string {
	if r := pr.Annotations[engine.CancelledAnnotation]; r != "" {
		return r
	}
	return "the PipelineRun's spec.status is " + string(pr.Spec.Status)
}

func runPhase(c *apis.Condition, g engine.GateState) (infrav1.RunPhase, bool) {
	switch {
	case c == nil:
		return infrav1.RunPending, false
	case c.Status == corev1.ConditionUnknown && g == engine.GatePending:
		return infrav1.RunAwaitingApproval, false
	case c.Status == corev1.ConditionUnknown && c.Reason == tektonv1.PipelineRunReasonPending.String():
		return infrav1.RunPending, false
	case c.Status == corev1.ConditionUnknown:
		return infrav1.RunRunning, false
	case g == engine.GateRejected:
		return infrav1.RunRejected, true
	case c.Status == corev1.ConditionTrue:
		return infrav1.RunSucceeded, true
	default:
		return infrav1.RunFailed, true
	}
}

func taskResults(tr *tektonv1.TaskRun) map[string]string {
	out := map[string]string{}
	for _, r := range tr.Status.Results {
		out[r.Name] = r.Value.StringVal
	}
	return out
}

// stepStatus reads one step of a TaskRun. A failed step's message is the
// task's error result (opr8r-step's one-line summary) when it wrote one.
func stepStatus(tr *tektonv1.TaskRun, stepName, name string) infrav1.StepStatus {
	st := infrav1.StepStatus{Name: name, Phase: infrav1.StepPending}
	// Tekton starts every step's container at once and reports each as
	// running; a step's entrypoint waits until the steps before it ended
	// (as the Tekton Dashboard shows it, "waiting"). A step runs once
	// every earlier one terminated: before, export-outputs and cleanup
	// showed Running while apply ran in their pod.
	earlierDone := true
	for _, s := range tr.Status.Steps {
		if s.Name != stepName {
			earlierDone = earlierDone && s.Terminated != nil
			continue
		}
		switch {
		case s.Terminated != nil:
			st.StartedAt = engine.TimeOrNil(s.Terminated.StartedAt)
			st.FinishedAt = engine.TimeOrNil(s.Terminated.FinishedAt)
			if s.Terminated.ExitCode == 0 {
				st.Phase = infrav1.StepSucceeded
			} else {
				st.Phase = infrav1.StepFailed
				st.Message = fmt.Sprintf("%s (exit code %d)", s.Terminated.Reason, s.Terminated.ExitCode)
				if msg := taskResults(tr)[pipeline.ResultError]; msg != "" {
					st.Message = msg
				}
			}
		case s.Running != nil && earlierDone:
			st.Phase = infrav1.StepRunning
			st.StartedAt = engine.TimeOrNil(s.Running.StartedAt)
		}
		return st
	}
	// No state for this step. In a failed TaskRun it was skipped when
	// another step failed; otherwise the pod failed before any step ran,
	// and the TaskRun's condition says why.
	if c := tr.Status.GetCondition(apis.ConditionSucceeded); c != nil && c.Status == corev1.ConditionFalse {
		st.Phase = infrav1.StepFailed
		st.Message = c.Message
		for _, s := range tr.Status.Steps {
			if s.Terminated != nil && s.Terminated.ExitCode != 0 {
				st.Phase, st.Message = infrav1.StepSkipped, ""
			}
		}
	}
	return st
}

func planResult(res map[string]string) (*engine.PlanResult, error) {
	return results.ParsePlan(func(name string) string { return res[name] })
}

func gateState(cr *tektonv1beta1.CustomRun) engine.Gate {
	g := engine.Gate{Since: cr.Status.StartTime, DecidedAt: cr.Status.CompletionTime}
	c := cr.Status.GetCondition(apis.ConditionSucceeded)
	if c != nil {
		g.Message = c.Message
	}
	for _, r := range cr.Status.Results {
		if r.Name == resultApprovedDigest {
			g.Digest = r.Value
		}
	}
	switch {
	case c == nil || c.Status == corev1.ConditionUnknown:
		g.State = engine.GatePending
	case c.Status == corev1.ConditionTrue:
		g.State = engine.GateApproved
		g.By = decidedBy(c.Message)
	case c.Reason == ReasonCustomRunCancelled:
		// Tekton cancels the CustomRun of a cancelled PipelineRun: the run
		// was stopped, no one decided.
		g.State = engine.GateSkipped
	default:
		g.State = engine.GateRejected
		g.By = decidedBy(c.Message)
	}
	return g
}

func gateStep(cr *tektonv1beta1.CustomRun, g engine.Gate) infrav1.StepStatus {
	st := infrav1.StepStatus{Name: names.StepApprove, StartedAt: cr.Status.StartTime, FinishedAt: cr.Status.CompletionTime, Message: g.Message}
	switch g.State {
	case engine.GatePending:
		st.Phase = infrav1.StepRunning
	case engine.GateApproved:
		st.Phase = infrav1.StepSucceeded
	default:
		st.Phase = infrav1.StepFailed
	}
	return st
}

// decidedBy reads "by <who>" from the gate's message, as the approval
// controller writes it.
func decidedBy(msg string) string {
	if i := strings.LastIndex(msg, " by "); i >= 0 {
		return strings.TrimSuffix(strings.TrimSpace(msg[i+len(" by "):]), ".")
	}
	return ""
}
