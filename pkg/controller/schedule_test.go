package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

func TestReconcileScheduleJudgesAFinishedCheck(t *testing.T) {
	const rev, inputs = "rev-1", "sha256:in"
	cases := map[string]struct {
		remediation infrav1.DriftRemediation
		checkRev    string
		checkInputs string
		plan        engine.PlanResult
		phase       infrav1.RunPhase
		otherSpec   bool
		planOnly    bool   // the TerraformRun previews only; its latest preview saw rev and inputs
		ready       string // Ready's status when the check finishes ("": True)
		cancelled   bool   // opr8r stopped the check for a new run
		want        string
		wantDrifted string
		wantReady   string
		wantRun     infrav1.RunTrigger // the run the check asks for
	}{
		"no changes: no drift": {
			checkRev: rev, checkInputs: inputs, plan: engine.PlanResult{}, phase: infrav1.RunSucceeded,
			want: infrav1.CheckNoDrift, wantDrifted: "False/NoDrift", wantReady: "True/Succeeded",
		},
		"changes, same source: drift reported": {
			checkRev: rev, checkInputs: inputs, plan: engine.PlanResult{Change: 1, HasChanges: true, Digest: "sha256:d"}, phase: infrav1.RunSucceeded,
			want: infrav1.CheckDrifted, wantDrifted: "True/DriftDetected", wantReady: "False/DriftDetected",
		},
		"changes, same source, Apply: drift repaired by a run": {
			remediation: infrav1.DriftApply, checkRev: rev, checkInputs: inputs, plan: engine.PlanResult{Change: 1, HasChanges: true, Digest: "sha256:d"}, phase: infrav1.RunSucceeded,
			want: infrav1.CheckDrifted, wantDrifted: "True/DriftDetected", wantReady: "False/DriftDetected", wantRun: infrav1.TriggerDrift,
		},
		"a new commit: the source moved": {
			checkRev: "rev-2", checkInputs: inputs, plan: engine.PlanResult{Change: 1, HasChanges: true}, phase: infrav1.RunSucceeded,
			want: infrav1.CheckSourceChanged, wantDrifted: "False/SourceChanged", wantReady: "True/Succeeded", wantRun: infrav1.TriggerSourceChange,
		},
		"other inputs: the source moved": {
			checkRev: rev, checkInputs: "sha256:other", plan: engine.PlanResult{}, phase: infrav1.RunSucceeded,
			want: infrav1.CheckSourceChanged, wantDrifted: "False/SourceChanged", wantReady: "True/Succeeded", wantRun: infrav1.TriggerSourceChange,
		},
		"the check failed": {
			checkRev: rev, phase: infrav1.RunFailed, want: infrav1.CheckFailed, wantReady: "True/Succeeded",
		},
		"changes while Ready is Unknown (a rerun has just superseded): still drift": {
			checkRev: rev, checkInputs: inputs, plan: engine.PlanResult{Change: 1, HasChanges: true, Digest: "sha256:d"}, phase: infrav1.RunSucceeded, ready: "Unknown",
			want: infrav1.CheckDrifted, wantDrifted: "True/DriftDetected", wantReady: "Unknown/Progressing",
		},
		"changes after a rejected repair (Ready False): still drift": {
			checkRev: rev, checkInputs: inputs, plan: engine.PlanResult{Change: 1, HasChanges: true, Digest: "sha256:d"}, phase: infrav1.RunSucceeded, ready: "False",
			want: infrav1.CheckDrifted, wantDrifted: "True/DriftDetected", wantReady: "False/Rejected",
		},
		"stopped by opr8r for a new run: superseded, not judged": {
			checkRev: rev, checkInputs: inputs, phase: infrav1.RunFailed, cancelled: true,
			want: infrav1.CheckSuperseded, wantReady: "True/Succeeded",
		},
		"planOnly, the preview's changes again: not applied, not drift": {
			planOnly: true, checkRev: rev, checkInputs: inputs, plan: engine.PlanResult{Add: 1, HasChanges: true, Digest: "sha256:d"}, phase: infrav1.RunSucceeded,
			want: infrav1.CheckNotApplied, wantDrifted: "False/NotApplied", wantReady: "True/Succeeded",
		},
		"planOnly with driftRemediation Apply: never an apply run": {
			planOnly: true, remediation: infrav1.DriftApply, checkRev: rev, checkInputs: inputs, plan: engine.PlanResult{Add: 1, HasChanges: true, Digest: "sha256:d"}, phase: infrav1.RunSucceeded,
			want: infrav1.CheckNotApplied, wantDrifted: "False/NotApplied", wantReady: "True/Succeeded",
		},
		"planOnly, a new commit: a new preview, not drift": {
			planOnly: true, checkRev: "rev-2", checkInputs: inputs, plan: engine.PlanResult{Add: 2, HasChanges: true}, phase: infrav1.RunSucceeded,
			want: infrav1.CheckSourceChanged, wantDrifted: "False/SourceChanged", wantReady: "True/Succeeded", wantRun: infrav1.TriggerSourceChange,
		},
		"the spec changed while it ran: superseded": {
			checkRev: rev, checkInputs: inputs, plan: engine.PlanResult{Change: 1, HasChanges: true}, phase: infrav1.RunSucceeded, otherSpec: true,
			want: infrav1.CheckSuperseded, wantReady: "True/Succeeded",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeEngine{progress: map[string]engine.Progress{}}
			run := aRun("a")
			run.Spec.Interval = &metav1.Duration{Duration: time.Hour}
			run.Spec.DriftRemediation = tc.remediation
			run.Spec.PlanOnly = tc.planOnly
			r, _ := newReconciler(t, f)
			if tc.planOnly {
				run = withRun(r, run, 1, infrav1.RunSucceeded, infrav1.RunPlan)
				run.Status.Run.Commit, run.Status.Run.Inputs = rev, inputs
			} else {
				run = withRun(r, run, 1, infrav1.RunSucceeded, infrav1.RunApply)
				run.Status.LastApplied = &infrav1.AppliedRevision{Revision: rev, Inputs: inputs, RunID: "a-1"}
			}
			setStatus(run, infrav1.ReadyCondition, metav1True, infrav1.ReasonSucceeded, "run a-1 succeeded")
			switch tc.ready {
			case "Unknown":
				setStatus(run, infrav1.ReadyCondition, metav1.ConditionUnknown, infrav1.ReasonProgressing, "a rerun supersedes the check")
			case "False":
				setStatus(run, infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.ReasonRejected, "the repair's plan was rejected")
			}
			hash := run.Status.Run.SpecHash
			if tc.otherSpec {
				hash = "0000000000000000"
			}
			check := childOf(t, run, infrav1.RunDrift, 2, hash)
			if tc.cancelled {
				check.Annotations = map[string]string{engine.CancelledAnnotation: "superseded by a new run"}
			}
			plan := tc.plan
			plan.Inputs = tc.checkInputs
			done := metav1.NewTime(t0)
			f.progress[check.Name] = engine.Progress{Phase: tc.phase, Finished: true, FinishedAt: &done, Commit: tc.checkRev, Plan: &plan}
			if tc.phase != infrav1.RunSucceeded {
				f.progress[check.Name] = engine.Progress{Phase: tc.phase, Finished: true, FinishedAt: &done, Message: "step plan failed: x"}
			}
			r, _ = newReconciler(t, f, check, run.DeepCopy())
			st, _, err := runSub(r, run, r.reconcileSchedule)
			if err != nil {
				t.Fatal(err)
			}
			if run.Status.Drift == nil || run.Status.Drift.Result != tc.want || run.Status.Drift.LastCheckID != "a-drift-2" {
				t.Fatalf("status.drift = %+v, want result %s", run.Status.Drift, tc.want)
			}
			if got := condOf(run, infrav1.DriftedCondition); got != tc.wantDrifted {
				t.Errorf("Drifted = %q, want %q", got, tc.wantDrifted)
			}
			if got := condOf(run, infrav1.ReadyCondition); got != tc.wantReady {
				t.Errorf("Ready = %q, want %q", got, tc.wantReady)
			}
			var asked infrav1.RunTrigger
			if st.requested != nil {
				asked = st.requested.trigger
			}
			if asked != tc.wantRun {
				t.Errorf("asked for a run triggered by %q, want %q", asked, tc.wantRun)
			}
			drift := testutil.ToFloat64(driftDetected.WithLabelValues(run.Namespace, run.Name))
			if want := map[bool]float64{true: 1}[tc.want == infrav1.CheckDrifted]; drift != want {
				t.Errorf("opr8r_drift_detected_total{%s,%s} = %v, want %v", run.Namespace, run.Name, drift, want)
			}
			driftDetected.DeleteLabelValues(run.Namespace, run.Name)
			if h := run.Status.History; len(h) != 1 || h[0].ID != "a-drift-2" || h[0].Type != infrav1.RunDrift || h[0].Trigger != infrav1.TriggerSchedule || run.Status.LastRunNumber != 2 {
				t.Errorf("history %+v, lastRunNumber %d", h, run.Status.LastRunNumber)
			}
		})
	}
}

func TestReconcileScheduleStartsChecksWhenDue(t *testing.T) {
	cases := map[string]struct {
		finishedAgo time.Duration
		phase       infrav1.RunPhase
		suspend     bool
		change      bool
		wantCheck   bool
		wantRequeue bool
	}{
		"due: a check starts":             {finishedAgo: 2 * time.Hour, phase: infrav1.RunSucceeded, wantCheck: true},
		"not due: looked at when it is":   {finishedAgo: time.Minute, phase: infrav1.RunSucceeded, wantRequeue: true},
		"a run is active: no check":       {finishedAgo: 2 * time.Hour, phase: infrav1.RunRunning},
		"suspended: no check":             {finishedAgo: 2 * time.Hour, phase: infrav1.RunSucceeded, suspend: true},
		"the spec asks for a run instead": {finishedAgo: 2 * time.Hour, phase: infrav1.RunSucceeded, change: true},
		"after a failed run, still":       {finishedAgo: 2 * time.Hour, phase: infrav1.RunFailed, wantCheck: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeEngine{progress: map[string]engine.Progress{"a-1": {Phase: tc.phase, Finished: isTerminal(tc.phase)}}}
			run := aRun("a")
			run.Spec.Interval = &metav1.Duration{Duration: time.Hour}
			run.Spec.Suspend = tc.suspend
			r, _ := newReconciler(t, f)
			run = withRun(r, run, 1, tc.phase, infrav1.RunApply)
			at := metav1.NewTime(t0.Add(-tc.finishedAgo))
			run.Status.Run.FinishedAt = &at
			if tc.change {
				run.Spec.Terraform.Workspace = "other"
			}
			r, c := newReconciler(t, f, childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash), run.DeepCopy())
			summarizeColumns(run) // as the pass that recorded the run left them
			before := run.Status.DeepCopy()
			_, res, err := runSub(r, run, r.reconcileSchedule)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Get(ctx(), client.ObjectKey{Namespace: "ns", Name: "a-drift-2"}, childOf(t, run, infrav1.RunDrift, 2, ""))
			if started := err == nil; started != tc.wantCheck {
				t.Fatalf("check started: %v, want %v", started, tc.wantCheck)
			}
			if tc.wantCheck && !statusEqual(*before, run.Status) {
				t.Error("starting a check changed status: it must cost no status write")
			}
			if (res.RequeueAfter > 0) != tc.wantRequeue {
				t.Errorf("requeue after %s, want one: %v", res.RequeueAfter, tc.wantRequeue)
			}
		})
	}
}

func TestNextCheckIsSpreadPerRun(t *testing.T) {
	r := &TerraformRunReconciler{MinCheckInterval: time.Minute}
	seen := map[time.Time]bool{}
	for _, uid := range []string{"a", "b", "c", "d", "e"} {
		run := aRun(uid)
		run.UID = types.UID("3f1c9a" + uid + "-7e2d-4b1a-9c0e-5a8b2d4f6e10")
		run.Spec.Interval = &metav1.Duration{Duration: 10 * time.Minute}
		at := metav1.NewTime(t0)
		run.Status.Run = &infrav1.RunStatus{FinishedAt: &at}
		next := r.nextCheck(run)
		if d := next.Sub(t0); d < 10*time.Minute || d > 11*time.Minute {
			t.Fatalf("next check after %s, want 10m plus up to a tenth", d)
		}
		seen[next] = true
	}
	if len(seen) < 4 {
		t.Fatalf("5 runs of the same interval get %d distinct check times; want them spread", len(seen))
	}
	short := aRun("s")
	short.Spec.Interval = &metav1.Duration{Duration: time.Second}
	at := metav1.NewTime(t0)
	short.Status.Run = &infrav1.RunStatus{FinishedAt: &at}
	if d := r.nextCheck(short).Sub(t0); d < time.Minute {
		t.Fatalf("an interval under --min-check-interval gives %s", d)
	}
}

// A check that ends between two looks of one pass (seen on a loaded CI
// machine): the new run of a changed spec must not take a number past the
// check's before the check is recorded, or the check is never recorded.
// The run waits for the check, which is stopped, recorded, then the run
// takes the next number.
func TestANewRunWaitsForARunningCheck(t *testing.T) {
	done := metav1.NewTime(t0)
	f := &fakeEngine{
		progress: map[string]engine.Progress{"a-1": {Phase: infrav1.RunSucceeded, Finished: true}, "a-drift-2": {Phase: infrav1.RunRunning}},
		later:    map[string]engine.Progress{"a-drift-2": {Phase: infrav1.RunSucceeded, Finished: true, FinishedAt: &done, Plan: &engine.PlanResult{}}},
	}
	run := aRun("a")
	run.Spec.Interval = &metav1.Duration{Duration: time.Hour}
	r, _ := newReconciler(t, f)
	run = withRun(r, run, 1, infrav1.RunSucceeded, infrav1.RunApply)
	apply := childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash)
	check := childOf(t, run, infrav1.RunDrift, 2, run.Status.Run.SpecHash)
	run.Spec.Terraform.Workspace = "b" // the spec changes while the check runs
	r, c := newReconciler(t, f, apply, check, run.DeepCopy())

	res, err := runFlow(ctx(), run, r.newPassState(run), r.applyFlow())
	if err != nil || res.RequeueAfter == 0 {
		t.Fatalf("first pass: %v, %v; want to wait for the check and look again", res, err)
	}
	if run.Status.Run.ID != "a-1" || run.Status.LastRunNumber != 1 {
		t.Fatalf("first pass started %s (last number %d) while check a-drift-2 ran", run.Status.Run.ID, run.Status.LastRunNumber)
	}
	if len(f.cancelled) != 1 || f.cancelled[0] != "a-drift-2" {
		t.Errorf("stopped %v, want the check a-drift-2", f.cancelled)
	}

	if _, err := runFlow(ctx(), run, r.newPassState(run), r.applyFlow()); err != nil {
		t.Fatal(err)
	}
	if h := run.Status.History; len(h) == 0 || h[0].ID != "a-drift-2" || !strings.HasPrefix(h[0].Message, infrav1.CheckSuperseded) {
		t.Fatalf("history %+v, want the check recorded as superseded", h)
	}
	if run.Status.Run.ID != "a-3" || run.Status.LastRunNumber != 3 {
		t.Fatalf("second pass: run %s, last number %d; want a-3, 3", run.Status.Run.ID, run.Status.LastRunNumber)
	}
	if err := c.Get(ctx(), client.ObjectKey{Namespace: "ns", Name: "a-3"}, childOf(t, run, infrav1.RunApply, 3, "")); err != nil {
		t.Fatalf("the new run's child: %v", err)
	}
}
