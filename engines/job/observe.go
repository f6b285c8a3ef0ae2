package job

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/results"
)

var _ engine.RelatedLister = Engine{}

// RelatedTypes implements engine.RelatedLister: the child's step Jobs and
// the pods of all its Jobs, which carry the run's labels.
func (Engine) RelatedTypes() []client.Object { return []client.Object{&batchv1.Job{}, &corev1.Pod{}} }

// Related implements engine.RelatedLister.
func (Engine) Related(ctx context.Context, c client.Reader, child client.Object) ([]client.Object, error) {
	sel := client.MatchingLabels{ChildLabel: child.GetName()}
	ns := client.InNamespace(child.GetNamespace())
	var out []client.Object
	jobs := &batchv1.JobList{}
	if err := c.List(ctx, jobs, ns, sel); err != nil {
		return nil, err
	}
	for i := range jobs.Items {
		if jobs.Items[i].Name != child.GetName() {
			out = append(out, &jobs.Items[i])
		}
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, ns, sel); err != nil {
		return nil, err
	}
	for i := range pods.Items {
		out = append(out, &pods.Items[i])
	}
	return out, nil
}

// runView is a child with its Jobs and pods, by step.
type runView struct {
	child *batchv1.Job
	jobs  map[string]*batchv1.Job // by step; the plan step's is the child
	pods  map[string]*corev1.Pod  // the first pod of each step's Job
}

// newView sorts a child's related objects by step. Only Jobs the child
// controls count, and of each Job only the first pod it controls: the Job
// controller makes one (steps are not retried), so another pod that claims
// the step, such as a later one a tenant made with the step's labels, is
// not read.
func newView(child *batchv1.Job, related []client.Object) runView {
	v := runView{child: child, jobs: map[string]*batchv1.Job{childStep(child): child}, pods: map[string]*corev1.Pod{}}
	for _, o := range related {
		if j, ok := o.(*batchv1.Job); ok && j.Labels[ChildLabel] == child.Name && metav1.IsControlledBy(j, child) {
			v.jobs[j.Labels[infrav1.StepLabel]] = j
		}
	}
	for _, o := range related {
		p, ok := o.(*corev1.Pod)
		if !ok || p.Labels[ChildLabel] != child.Name {
			continue
		}
		step := p.Labels[infrav1.StepLabel]
		j := v.jobs[step]
		if j == nil || !metav1.IsControlledBy(p, j) {
			continue
		}
		if old := v.pods[step]; old == nil || p.CreationTimestamp.Before(&old.CreationTimestamp) {
			v.pods[step] = p
		}
	}
	return v
}

// childStep is the step the child's pod runs: restore-state when the run
// has kept states (the plan Job, <child>-plan, comes after it), else the
// plan's (clone, init and plan).
func childStep(child *batchv1.Job) string {
	if child.Labels[infrav1.StepLabel] == names.StepRestoreState {
		return names.StepRestoreState
	}
	return names.StepPlan
}

// restores says whether the child runs restore-state.
func (v runView) restores() bool { return childStep(v.child) == names.StepRestoreState }

// planOnly says whether the run stops after its plan (checks, planOnly runs).
func (v runView) planOnly() bool {
	return pipeline.PlanOnly(infrav1.RunType(v.child.Labels[infrav1.RunTypeLabel]))
}

// checks are the step names of the run's checks, which the child carries.
func (v runView) checks() []string {
	if a := v.child.Annotations[annoChecks]; a != "" {
		// By name, as every engine reports them.
		return slices.Sorted(slices.Values(strings.Split(a, ",")))
	}
	return nil
}

// checksPassed says whether every check succeeded.
func (v runView) checksPassed(steps []infrav1.StepStatus) bool {
	for _, c := range v.checks() {
		if stepPhase(steps, c) != infrav1.StepSucceeded {
			return false
		}
	}
	return true
}

// checkSteps reads the checks: from the checks Job's pod, or Skipped when
// the plan had no changes or the run ended before them.
func (v runView) checkSteps(prog engine.Progress) []infrav1.StepStatus {
	if prog.Plan == nil && v.jobs[names.StepCleanup] == nil {
		return nil
	}
	var out []infrav1.StepStatus
	for _, c := range v.checks() {
		switch {
		case v.jobs[stepChecks] != nil:
			st, _ := v.step(stepChecks, c)
			out = append(out, st)
		case (prog.Plan != nil && !prog.Plan.HasChanges) || v.jobs[names.StepCleanup] != nil:
			out = append(out, infrav1.StepStatus{Name: c, Phase: infrav1.StepSkipped})
		}
	}
	return out
}

// container returns the state of one container of a step's pod.
func (v runView) container(step, name string) (corev1.ContainerStatus, bool) {
	pod := v.pods[step]
	if pod == nil {
		return corev1.ContainerStatus{}, false
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if cs.Name == name {
			return cs, true
		}
	}
	return corev1.ContainerStatus{}, false
}

// Observe implements engine.Engine.
func (Engine) Observe(obj client.Object, related []client.Object, now time.Time) (engine.Progress, error) {
	child, ok := obj.(*batchv1.Job)
	if !ok {
		return engine.Progress{}, fmt.Errorf("job: expected a Job, got %T", obj)
	}
	v := newView(child, related)
	prog := engine.Progress{StartedAt: child.Status.StartTime}
	add := func(st infrav1.StepStatus) { prog.Steps = append(prog.Steps, st) }
	// A Job's steps show once its pod exists (or the Job failed without
	// one), as an Argo node shows once it is scheduled.
	if _, failed := jobFailed(child); v.restores() && (v.pods[names.StepRestoreState] != nil || failed) {
		st, _ := v.step(names.StepRestoreState, names.StepRestoreState)
		add(st)
	}
	_, failedEarly := jobFailed(v.jobs[names.StepPlan])
	for _, s := range []string{names.StepClone, names.StepInit, names.StepPlan} {
		if v.pods[names.StepPlan] == nil && !failedEarly {
			break
		}
		st, res := v.step(names.StepPlan, s)
		add(st)
		if err := v.readResults(&prog, s, st, res); err != nil {
			return engine.Progress{}, err
		}
	}
	for _, st := range v.checkSteps(prog) {
		add(st)
	}
	if prog.Plan == nil || !prog.Plan.HasChanges || v.checksPassed(prog.Steps) {
		prog.Gate = v.gate(prog.Plan)
	}
	if gs, ok := gateStep(prog.Gate); ok {
		add(gs)
	}
	for _, s := range stepJobs {
		if v.planOnly() && s.step != names.StepCleanup {
			continue
		}
		if st, ok := v.laterStep(s.step, prog); ok {
			add(st)
		}
	}
	prog.Applied = stepPhase(prog.Steps, names.StepApply) == infrav1.StepSucceeded
	prog.OutputsExported = stepPhase(prog.Steps, names.StepExport) == infrav1.StepSucceeded
	v.phase(&prog)
	if step := v.unread(now); step != "" && prog.Finished {
		// Not finished until every step's pod has been read: a result
		// taken now would lack that step's (no apply, no outputs).
		prog.Finished, prog.FinishedAt, prog.Phase = false, nil, infrav1.RunRunning
		prog.Message = "waiting to read the pod of step " + step
	}
	return prog, nil
}

// readResults reads a step's results into the progress.
func (v runView) readResults(prog *engine.Progress, step string, st infrav1.StepStatus, res map[string]string) error {
	if st.Phase != infrav1.StepSucceeded {
		return nil
	}
	switch step {
	case names.StepClone:
		prog.Commit = res[results.Commit]
	case names.StepPlan:
		plan, err := results.ParsePlan(func(n string) string { return res[n] })
		if err != nil {
			return err
		}
		prog.Plan = plan
	}
	return nil
}

// step reads one container of a step Job's pod: its phase, times and, once
// it has finished, its results or its failure summary.
func (v runView) step(job, name string) (infrav1.StepStatus, map[string]string) {
	st := infrav1.StepStatus{Name: name, Phase: infrav1.StepPending}
	cs, ok := v.container(job, name)
	switch {
	case ok && cs.State.Terminated != nil:
		t := cs.State.Terminated
		st.StartedAt, st.FinishedAt = engine.TimeOrNil(t.StartedAt), engine.TimeOrNil(t.FinishedAt)
		if t.ExitCode == 0 {
			st.Phase = infrav1.StepSucceeded
			res := map[string]string{}
			_ = json.Unmarshal([]byte(t.Message), &res)
			return st, res
		}
		st.Phase, st.Message = infrav1.StepFailed, strings.TrimSpace(t.Message)
		if st.Message == "" {
			st.Message = fmt.Sprintf("%s (exit code %d)", t.Reason, t.ExitCode)
		}
	case ok && cs.State.Running != nil:
		st.Phase, st.StartedAt = infrav1.StepRunning, engine.TimeOrNil(cs.State.Running.StartedAt)
	}
	if st.Phase != infrav1.StepSucceeded && st.Phase != infrav1.StepFailed {
		if msg, done := jobFailed(v.jobs[job]); done {
			st.Phase, st.Message = infrav1.StepFailed, msg
			if v.earlierFailed(job, name) {
				st.Phase, st.Message = infrav1.StepSkipped, ""
			}
		}
	}
	return st, nil
}

// earlierFailed says whether a container before name in the step Job's pod
// failed (so name never ran).
func (v runView) earlierFailed(job, name string) bool {
	pod := v.pods[job]
	if pod == nil {
		return false
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		if cs.Name == name {
			return false
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return true
		}
	}
	return false
}

// jobFailed says whether a Job has failed or was stopped, and why.
func jobFailed(j *batchv1.Job) (string, bool) {
	if j == nil {
		return "", false
	}
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobFailed:
			return strings.TrimSpace(c.Reason + ": " + c.Message), true
		case batchv1.JobSuspended:
			return engine.Stopped(j.Annotations[annoCancelled]), true
		}
	}
	return "", false
}

// jobDone says whether a Job finished, either way.
// jobFinishedAt is when a finished Job finished: its completion time, or
// for a failed Job (which has none) when its Failed condition was set; nil
// when neither is known (the reconciler then records when it saw it).
func jobFinishedAt(j *batchv1.Job) *metav1.Time {
	if j.Status.CompletionTime != nil {
		return j.Status.CompletionTime
	}
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobFailed || c.Type == batchv1.JobComplete) && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			t := c.LastTransitionTime
			return &t
		}
	}
	return nil
}

// unread names a step Job that completed while its pod's end is not in the
// view yet (the cache of pods lags the one of Jobs, for seconds after an
// API server restart): what the step made (the plan, the apply, the
// outputs) is in that pod's termination message, so the run's next step
// and result wait for it, for up to engine.CacheLagGrace after the Job completed
// (a pod deleted since is not waited for longer).
func (v runView) unread(now time.Time) string {
	for step, j := range v.jobs {
		if _, failed := jobFailed(j); failed || !jobDone(j) || step == names.StepCleanup {
			continue // cleanup's pod holds nothing the result needs
		}
		if at := jobFinishedAt(j); at != nil && now.Sub(at.Time) > engine.CacheLagGrace {
			continue
		}
		if !podEnded(v.pods[step]) {
			return step
		}
	}
	return ""
}

// podEnded says whether a pod's end is known: its phase, or every
// container terminated.
func podEnded(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	if len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Terminated == nil {
			return false
		}
	}
	return true
}

func jobDone(j *batchv1.Job) bool {
	if j == nil {
		return false
	}
	if _, failed := jobFailed(j); failed {
		return true
	}
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// gate reads the approval gate: the decision recorded in the child's
// annotations, once a plan with changes waits in a run with Manual approval.
func (v runView) gate(plan *engine.PlanResult) engine.Gate {
	a := v.child.Annotations
	if a[annoApproval] != approvalManual || plan == nil {
		return engine.Gate{}
	}
	if !plan.HasChanges {
		return engine.Gate{State: engine.GateSkipped}
	}
	g := engine.Gate{State: engine.GatePending, Digest: a[annoDigest], By: a[annoDecidedBy], Message: a[annoGateMessage]}
	if cs, ok := v.container(names.StepPlan, names.StepPlan); ok && cs.State.Terminated != nil {
		g.Since = engine.TimeOrNil(cs.State.Terminated.FinishedAt)
	}
	if t, err := time.Parse(time.RFC3339, a[annoDecidedAt]); err == nil {
		g.DecidedAt = &metav1.Time{Time: t}
	}
	switch {
	case a[annoDecision] == decisionApprove:
		g.State = engine.GateApproved
	case a[annoDecision] == decisionReject:
		g.State = engine.GateRejected
	case a[annoCancelled] != "":
		// Stopped while it waited: no one decided (engine.Canceller).
		g.State = engine.GateSkipped
	}
	return g
}

func gateStep(g engine.Gate) (infrav1.StepStatus, bool) {
	st := infrav1.StepStatus{Name: names.StepApprove, StartedAt: g.Since, FinishedAt: g.DecidedAt, Message: g.Message}
	switch g.State {
	case engine.GatePending:
		st.Phase = infrav1.StepRunning
	case engine.GateApproved:
		st.Phase = infrav1.StepSucceeded
	case engine.GateRejected:
		st.Phase = infrav1.StepFailed
	case engine.GateSkipped:
		st.Phase = infrav1.StepSkipped
	default:
		return st, false
	}
	return st, true
}

// laterStep reads apply, export-outputs or cleanup: from its Job's pod, or
// Skipped when the run will never create its Job.
func (v runView) laterStep(step string, prog engine.Progress) (infrav1.StepStatus, bool) {
	if key := v.holderKey(step); key != "" {
		st, _ := v.step(key, step)
		return st, true
	}
	switch {
	case step == names.StepApply && prog.Plan != nil && !prog.Plan.HasChanges:
		return infrav1.StepStatus{Name: step, Phase: infrav1.StepSkipped}, true
	case step != names.StepCleanup && v.jobs[names.StepCleanup] != nil:
		return infrav1.StepStatus{Name: step, Phase: infrav1.StepSkipped}, true
	}
	return infrav1.StepStatus{}, false
}

// holderKey is the step (the key of v.jobs) of the Job that runs a later
// step: its own Job when there is one (cleanup's, made when no other pod
// ran it, is the one that counts), else the Job that carries it
// (infra.opr8r.io/carries), else "".
func (v runView) holderKey(step string) string {
	if v.jobs[step] != nil {
		return step
	}
	for key, j := range v.jobs {
		if key != names.StepPlan && key != stepChecks && slices.Contains(strings.Split(j.Annotations[annoCarries], ","), step) {
			return key
		}
	}
	return ""
}

// holder is the Job that runs a later step (holderKey), or nil.
func (v runView) holder(step string) *batchv1.Job {
	if key := v.holderKey(step); key != "" {
		return v.jobs[key]
	}
	return nil
}

// cleanedUp says whether the run's cleanup has run to its end: its own
// Job ended, or the Job that carried it ended and cleanup's container in
// it succeeded. A carrier whose pod failed before cleanup, or whose
// cleanup failed, leaves it undone, and the driver makes a Job of cleanup
// alone.
func (v runView) cleanedUp(steps []infrav1.StepStatus) bool {
	key := v.holderKey(names.StepCleanup)
	if key == "" || !jobDone(v.jobs[key]) {
		return false
	}
	return key == names.StepCleanup || stepPhase(steps, names.StepCleanup) == infrav1.StepSucceeded
}

func stepPhase(steps []infrav1.StepStatus, name string) infrav1.StepPhase {
	for _, s := range steps {
		if s.Name == name {
			return s.Phase
		}
	}
	return ""
}

// phase derives the run's phase: finished once cleanup has; Rejected when
// the gate was, Failed when a step failed or the run was stopped.
func (v runView) phase(prog *engine.Progress) {
	prog.Finished = v.cleanedUp(prog.Steps)
	if prog.Finished {
		prog.FinishedAt = jobFinishedAt(v.holder(names.StepCleanup))
	}
	cancelled := v.child.Annotations[annoCancelled]
	failed := engine.FirstFailure(prog.Steps)
	switch {
	case prog.Gate.State == engine.GateRejected:
		prog.Phase, prog.Message = infrav1.RunRejected, "plan rejected: "+prog.Gate.Message
	case failed != "":
		prog.Phase, prog.Message = infrav1.RunFailed, failed
	case cancelled != "":
		prog.Phase, prog.Message = infrav1.RunFailed, engine.Stopped(cancelled)
	case prog.Gate.State == engine.GatePending:
		prog.Phase = infrav1.RunAwaitingApproval
	case prog.Finished:
		prog.Phase = infrav1.RunSucceeded
	case prog.StartedAt != nil || len(prog.Steps) > 0:
		prog.Phase = infrav1.RunRunning
	default:
		prog.Phase = infrav1.RunPending
	}
	if !prog.Finished && (prog.Phase == infrav1.RunRejected || prog.Phase == infrav1.RunFailed) {
		// Decided, but cleanup has yet to finish: the run still runs, as an
		// Argo Workflow does while its exit handler runs.
		prog.Phase = infrav1.RunRunning
	}
	sort.SliceStable(prog.Steps, func(i, j int) bool { return order(prog.Steps[i].Name) < order(prog.Steps[j].Name) })
}

// order is a step's place in the pipeline; checks come after plan.
func order(step string) int {
	if names.IsCheck(step) {
		return 2*indexOfStep(names.StepPlan) + 1
	}
	return 2 * indexOfStep(step)
}

// stepOrder is the order the Job engine's steps are reported in.
var stepOrder = []string{names.StepRestoreState, names.StepClone, names.StepInit, names.StepPlan, names.StepApprove,
	names.StepApply, names.StepExport, names.StepCleanup}

func indexOfStep(step string) int {
	if i := slices.Index(stepOrder, step); i >= 0 {
		return i
	}
	return 99
}
