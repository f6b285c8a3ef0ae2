package controller

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// reconcileSchedule runs the scheduled checks of spec.interval. A check is
// a plan-only child of the run's engine; it is not recorded in status while
// it runs (a check that finds nothing costs one status write: its record).
// When it finishes, its result is recorded in status.history and
// status.drift, and it is judged: a moved source (new revision or inputs)
// asks for an apply run (SourceChange); a plan with changes for an
// unchanged source is drift: Drifted True, an Event, a metric, and with
// driftRemediation Apply an apply run (Drift); no changes clear Drifted.
// A check is started when none runs, no run is active, the spec asks for
// no new run, and the interval (plus the TerraformRun's own jitter) has
// passed since the last run or check. Sets Drifted, and Ready False
// (DriftDetected) while drift stands.
func (r *TerraformRunReconciler) reconcileSchedule(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	e, ok := r.Engines.Get(st.eff.Spec.Engine)
	if !ok || !r.Available.IsAvailable(e.Name()) || (run.Spec.Interval == nil && run.Status.Drift == nil && !r.mayHaveChecks(run)) {
		return ctrl.Result{}, nil
	}
	ce, check, prog, err := r.unrecordedCheckOfAnyEngine(ctx, run, e)
	if err != nil {
		return ctrl.Result{}, err
	}
	if d, ok := ce.(engine.Driver); ok && check != nil {
		if err := r.drive(ctx, d, ce, check, prog, nil); err != nil {
			return ctrl.Result{}, err
		}
	}
	if check != nil && !prog.Finished {
		r.Limiter.Hold(client.ObjectKeyFromObject(run), check.GetName())
		return r.supersedeCheck(ctx, run, st, ce, check)
	}
	if check != nil {
		r.finishCheck(run, st, check, prog)
	}
	if run.Spec.Interval == nil || run.Spec.Suspend || st.active || st.requested != nil || !st.deps.ready() {
		return ctrl.Result{}, nil
	}
	if _, _, want := r.wantRun(run, st); want || !r.checkable(run, st) {
		return ctrl.Result{}, nil
	}
	if left := r.nextCheck(run).Sub(r.now()); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	return r.startCheck(ctx, run, st, e)
}

// supersedeCheck stops a running check when a new run is wanted, and ends
// the pass: the run starts once the check has stopped and is recorded under
// its number, so that it never takes a later number than the run (whose
// start would hide the check's record). The check's state is read once per
// pass, here: the start never judges it again.
func (r *TerraformRunReconciler) supersedeCheck(ctx context.Context, run *infrav1.TerraformRun, st *passState, e engine.Engine, check client.Object) (ctrl.Result, error) {
	if _, _, want := r.wantRun(run, st); !want && st.requested == nil {
		return ctrl.Result{}, nil
	}
	if c, ok := e.(engine.Canceller); ok {
		if err := c.Cancel(ctx, r.Client, check, "superseded by a new run"); err != nil {
			return ctrl.Result{}, generic("SupersedeCheck", err, "stopping check %s", check.GetName())
		}
	}
	st.report(progressing, infrav1.ReasonProgressing, fmt.Sprintf("waiting for check %s to stop before a new run starts", check.GetName()))
	st.stop = true
	return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
}

// mayHaveChecks says whether a check child may exist without spec.interval
// (it was just removed): the latest run number is ahead of the records.
func (r *TerraformRunReconciler) mayHaveChecks(run *infrav1.TerraformRun) bool {
	return run.Status.LastRunNumber > 0 && (len(run.Status.History) == 0 || run.Status.History[0].Type == infrav1.RunDrift)
}

// checkable says whether the run is in a state a check can judge: its
// latest run for the current spec has finished (Ready or not: a check still
// notices a source that moved after a failure).
func (r *TerraformRunReconciler) checkable(run *infrav1.TerraformRun, st *passState) bool {
	cur := run.Status.Run
	return cur != nil && isTerminal(cur.Phase) && cur.SpecHash == st.hash && (cur.Type == infrav1.RunApply || cur.Type == infrav1.RunPlan)
}

// unrecordedCheck returns the check child that status does not record yet
// (numbered past status.lastRunNumber), with its progress.
func (r *TerraformRunReconciler) unrecordedCheck(ctx context.Context, run *infrav1.TerraformRun, e engine.Engine) (client.Object, engine.Progress, error) {
	children, err := r.listChildren(ctx, run, e)
	if err != nil {
		return nil, engine.Progress{}, err
	}
	for _, c := range children {
		if c.GetLabels()[infrav1.RunTypeLabel] != string(infrav1.RunDrift) || childNumber(c) <= run.Status.LastRunNumber {
			continue
		}
		prog, err := r.observe(ctx, e, c)
		return c, prog, err
	}
	return nil, engine.Progress{}, nil
}

// unrecordedCheckOfAnyEngine is unrecordedCheck in the run's engine, then
// in the others: spec.engine may have changed while a check of the old
// engine ran. It returns the engine the check is in.
func (r *TerraformRunReconciler) unrecordedCheckOfAnyEngine(ctx context.Context, run *infrav1.TerraformRun, e engine.Engine) (engine.Engine, client.Object, engine.Progress, error) {
	check, prog, err := r.unrecordedCheck(ctx, run, e)
	if err != nil || check != nil {
		return e, check, prog, err
	}
	for _, other := range r.availableEngines() {
		if other.Name() == e.Name() {
			continue
		}
		if check, prog, err := r.unrecordedCheck(ctx, run, other); err != nil || check != nil {
			return other, check, prog, err
		}
	}
	return e, nil, engine.Progress{}, nil
}

// nextCheck is when the run's next check is due (see NextCheck).
func (r *TerraformRunReconciler) nextCheck(run *infrav1.TerraformRun) time.Time {
	return NextCheck(run, r.MinCheckInterval)
}

// NextCheck is when a run's next scheduled check is due: the interval (at
// least minInterval), plus a jitter of up to a tenth of it that is the
// TerraformRun's own (from its uid), after the last run or check finished.
// The bench computes checks' waits with it.
func NextCheck(run *infrav1.TerraformRun, minInterval time.Duration) time.Time {
	interval := run.Spec.Interval.Duration
	if interval < minInterval {
		interval = minInterval
	}
	var last time.Time
	if cur := run.Status.Run; cur != nil && cur.FinishedAt != nil {
		last = cur.FinishedAt.Time
	}
	if d := run.Status.Drift; d != nil && d.LastCheckedAt.After(last) {
		last = d.LastCheckedAt.Time
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(run.UID))
	jitter := time.Duration(h.Sum32()%1000) * interval / 10 / 1000
	return last.Add(interval + jitter)
}

// startCheck creates a check child under the next run number, without a
// status write; it waits for a slot of --max-active-runs behind the runs
// people asked for.
func (r *TerraformRunReconciler) startCheck(ctx context.Context, run *infrav1.TerraformRun, st *passState, e engine.Engine) (ctrl.Result, error) {
	number, child, err := r.claimChild(ctx, run, st, e, infrav1.RunDrift)
	if err != nil {
		return ctrl.Result{}, err
	}
	name := names.ChildName(run.Name, infrav1.RunDrift, number)
	if ok, pos, total := r.Limiter.Acquire(client.ObjectKeyFromObject(run), name, prioCheck); !ok {
		ctrl.LoggerFrom(ctx).V(1).Info("check queued", "position", pos, "waiting", total, "active", r.Limiter.Active())
		return ctrl.Result{RequeueAfter: queueRetry}, nil
	}
	if child == nil {
		if child, err = r.createChild(ctx, run, st, e, infrav1.RunDrift, name, number); err != nil {
			r.Limiter.Release(run.Namespace, name)
			return ctrl.Result{}, err
		}
	}
	runsStarted.WithLabelValues(string(e.Name()), string(infrav1.RunDrift)).Inc()
	return ctrl.Result{}, r.createInputs(ctx, st.eff, child)
}

// judgeCheck decides what a finished check found, from its plan alone (not
// from Ready, which a rerun or a rejected repair may have just changed),
// sets Drifted and asks for the run the finding calls for. A check opr8r
// stopped for a new run, or planned for an older spec, is superseded, not
// judged. A planOnly TerraformRun compares with its latest preview: a new
// source asks for a new preview, and changes the preview shows too are not
// drift (nothing was applied), so they never start an apply.
func (r *TerraformRunReconciler) judgeCheck(run *infrav1.TerraformRun, st *passState, check client.Object, prog engine.Progress, rec infrav1.RunRecord) string {
	switch {
	case rec.SpecHash != st.hash || check.GetAnnotations()[engine.CancelledAnnotation] != "":
		return infrav1.CheckSuperseded
	case prog.Phase != infrav1.RunSucceeded || prog.Plan == nil:
		return infrav1.CheckFailed
	case sourceMoved(checkBaseline(run), rec):
		setStatus(run, infrav1.DriftedCondition, metav1False, infrav1.ReasonSourceChanged, fmt.Sprintf("check %s found a new source revision %s; %s plans it", check.GetName(), shortRev(rec.Revision, rec.Inputs), runNoun(run)))
		st.requested = &newRun{typ: desiredType(run), trigger: infrav1.TriggerSourceChange, detail: "check " + check.GetName() + " saw " + shortRev(rec.Revision, rec.Inputs)}
		return infrav1.CheckSourceChanged
	case prog.Plan.HasChanges && run.Spec.PlanOnly:
		r.transition(run, infrav1.DriftedCondition, metav1False, infrav1.ReasonNotApplied,
			fmt.Sprintf("check %s planned %s: the changes are not applied, by design (spec.planOnly)", check.GetName(), prog.Plan.Short()))
		return infrav1.CheckNotApplied
	case prog.Plan.HasChanges:
		r.reportDrift(run, st, check.GetName(), prog.Plan)
		return infrav1.CheckDrifted
	}
	// Ready follows from Drifted (summarize).
	r.transition(run, infrav1.DriftedCondition, metav1False, infrav1.ReasonNoDrift, fmt.Sprintf("check %s found no drift", check.GetName()))
	return infrav1.CheckNoDrift
}

// checkBaseline is what a check's source is compared with: the last
// successful apply, or, for a planOnly TerraformRun, its latest preview.
func checkBaseline(run *infrav1.TerraformRun) *infrav1.AppliedRevision {
	if !run.Spec.PlanOnly {
		return run.Status.LastApplied
	}
	if cur := run.Status.Run; cur != nil && cur.Type == infrav1.RunPlan {
		return &infrav1.AppliedRevision{Revision: cur.Commit, Inputs: cur.Inputs, RunID: cur.ID}
	}
	return nil
}

// runNoun names the run a changed source calls for.
func runNoun(run *infrav1.TerraformRun) string {
	if run.Spec.PlanOnly {
		return "a new preview (planOnly)"
	}
	return "an apply run"
}

// reportDrift sets Drifted (and so Ready False, summarize), emits the
// event, counts it and, with driftRemediation Apply, asks for an apply run.
func (r *TerraformRunReconciler) reportDrift(run *infrav1.TerraformRun, st *passState, check string, p *engine.PlanResult) {
	msg := fmt.Sprintf("check %s found drift: applying the spec again would change %s (plan %s)", check, p.Short(), p.Digest)
	if st.eff.Spec.DriftRemediation == infrav1.DriftApply {
		st.requested = &newRun{typ: infrav1.RunApply, trigger: infrav1.TriggerDrift, detail: "check " + check + " found " + p.Short()}
		msg += "; an apply run repairs it (driftRemediation Apply)"
	} else {
		msg += fmt.Sprintf("; repair it with kubectl tfrun rerun %s, or set spec.driftRemediation: Apply", run.Name)
	}
	r.transition(run, infrav1.DriftedCondition, metav1True, infrav1.ReasonDriftDetected, msg)
	driftDetected.WithLabelValues(run.Namespace, run.Name).Inc()
}

// sourceMoved says whether a check saw another source revision or other
// inputs than the last successful apply.
func sourceMoved(last *infrav1.AppliedRevision, rec infrav1.RunRecord) bool {
	if last == nil {
		return false
	}
	return (rec.Revision != "" && last.Revision != "" && rec.Revision != last.Revision) ||
		(rec.Inputs != "" && last.Inputs != "" && rec.Inputs != last.Inputs)
}

func shortRev(rev, inputs string) string {
	if len(rev) > 19 {
		rev = rev[:19]
	}
	if len(inputs) > 19 {
		inputs = inputs[:19]
	}
	return "revision " + rev + ", inputs " + inputs
}

func findCondition(run *infrav1.TerraformRun, t string) *metav1.Condition {
	for i := range run.Status.Conditions {
		if run.Status.Conditions[i].Type == t {
			return &run.Status.Conditions[i]
		}
	}
	return nil
}
