package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

func TestReportError(t *testing.T) {
	cause := errors.New("the cause")
	cases := map[string]struct {
		err         error
		wantStalled string
		wantRequeue time.Duration
		wantErr     bool
	}{
		"stalling: Stalled, not retried":           {err: &StallingError{Reason: infrav1.ReasonInvalidSpec, Err: cause}, wantStalled: "True/InvalidSpec"},
		"waiting: Stalled, looked at again":        {err: &WaitingError{Reason: infrav1.ReasonEngineUnavailable, Err: cause, RequeueAfter: time.Minute}, wantStalled: "True/EngineUnavailable", wantRequeue: time.Minute},
		"generic: returned for backoff":            {err: &GenericError{Reason: "CreateChild", Err: cause}, wantErr: true},
		"wrapped stalling error is still stalling": {err: fmt.Errorf("outer: %w", &StallingError{Reason: infrav1.ReasonDestroyFailed, Err: cause}), wantStalled: "True/DestroyFailed"},
		"a suffix keeps the type and the reason":   {err: withSuffix(&StallingError{Reason: infrav1.ReasonDestroyFailed, Err: cause}, "; escape"), wantStalled: "True/DestroyFailed"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := &TerraformRunReconciler{}
			run := aRun("a")
			res, err := r.summarize(run, &passState{}, ctrl.Result{}, tc.err)
			if (err != nil) != tc.wantErr || res.RequeueAfter != tc.wantRequeue || condOf(run, infrav1.StalledCondition) != tc.wantStalled {
				t.Fatalf("got %v, %v, Stalled %q; want err %v, requeue %s, Stalled %q", res, err, condOf(run, infrav1.StalledCondition), tc.wantErr, tc.wantRequeue, tc.wantStalled)
			}
			if !errors.Is(tc.err, cause) {
				t.Fatal("the cause is lost (Unwrap)")
			}
		})
	}
	if got := withSuffix(&StallingError{Reason: "R", Err: cause}, "; escape").Error(); got != "the cause; escape" {
		t.Fatalf("message %q", got)
	}
}

func TestRunFlowStopsAndKeepsTheShortestRequeue(t *testing.T) {
	var ran []string
	sub := func(name string, res ctrl.Result, err error, stop bool) subReconciler {
		return func(_ context.Context, _ *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
			ran = append(ran, name)
			st.stop = stop
			return res, err
		}
	}
	boom := errors.New("boom")
	cases := map[string]struct {
		flow        []subReconciler
		wantRan     []string
		wantRequeue time.Duration
		wantErr     error
	}{
		"all run; the shortest requeue wins": {
			flow:    []subReconciler{sub("a", ctrl.Result{RequeueAfter: time.Minute}, nil, false), sub("b", ctrl.Result{}, nil, false), sub("c", ctrl.Result{RequeueAfter: time.Second}, nil, false)},
			wantRan: []string{"a", "b", "c"}, wantRequeue: time.Second,
		},
		"an error stops the pass": {
			flow:    []subReconciler{sub("a", ctrl.Result{}, boom, false), sub("b", ctrl.Result{}, nil, false)},
			wantRan: []string{"a"}, wantErr: boom,
		},
		"a sub-reconciler may end the pass": {
			flow:    []subReconciler{sub("a", ctrl.Result{RequeueAfter: time.Hour}, nil, true), sub("b", ctrl.Result{}, nil, false)},
			wantRan: []string{"a"}, wantRequeue: time.Hour,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ran = nil
			res, err := runFlow(context.Background(), aRun("a"), &passState{}, tc.flow)
			if !errors.Is(err, tc.wantErr) || res.RequeueAfter != tc.wantRequeue || fmt.Sprint(ran) != fmt.Sprint(tc.wantRan) {
				t.Fatalf("ran %v, got %v, %v; want %v, %s, %v", ran, res, err, tc.wantRan, tc.wantRequeue, tc.wantErr)
			}
		})
	}
}

// TestReconcilePatchesStatusOnce runs whole passes over a fake API server
// that counts writes: status is written once per pass, and not at all when
// nothing changed.
func TestReconcilePatchesStatusOnce(t *testing.T) {
	f := &fakeEngine{progress: map[string]engine.Progress{}}
	run := aRun("a")
	writes := map[string]int{}
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithStatusSubresource(&infrav1.TerraformRun{}).WithObjects(run).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, o ...client.SubResourcePatchOption) error {
				writes["patch/"+sub]++
				return c.SubResource(sub).Patch(ctx, obj, p, o...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, o ...client.PatchOption) error {
				writes["patch"]++
				return c.Patch(ctx, obj, p, o...)
			},
		}).Build()
	r, _ := newReconciler(t, f)
	r.Client, r.APIReader = c, c
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(run)}

	if _, err := r.Reconcile(ctx(), req); err != nil {
		t.Fatal(err)
	}
	if writes["patch/status"] != 1 {
		t.Fatalf("starting a run: %v, want one status patch", writes)
	}
	stored := &infrav1.TerraformRun{}
	if err := c.Get(ctx(), req.NamespacedName, stored); err != nil {
		t.Fatal(err)
	}
	if stored.Status.Run == nil || stored.Status.Run.ID != "a-1" || stored.Status.Phase != string(infrav1.RunPending) {
		t.Fatalf("stored status %+v", stored.Status)
	}

	writes = map[string]int{}
	if _, err := r.Reconcile(ctx(), req); err != nil {
		t.Fatal(err)
	}
	if len(writes) != 0 {
		t.Fatalf("a pass that changes nothing wrote %v", writes)
	}

	finished := metav1.NewTime(t0)
	f.progress["a-1"] = engine.Progress{Phase: infrav1.RunFailed, Finished: true, FinishedAt: &finished, Message: "step plan failed: Error: x", Steps: steps("plan", "Failed")}
	if _, err := r.Reconcile(ctx(), req); err != nil {
		t.Fatal(err)
	}
	if writes["patch/status"] != 1 {
		t.Fatalf("finishing a run: %v, want one status patch", writes)
	}
	if err := c.Get(ctx(), req.NamespacedName, stored); err != nil {
		t.Fatal(err)
	}
	if len(stored.Status.History) != 1 || stored.Status.History[0].Result != infrav1.RunFailed {
		t.Fatalf("history %+v", stored.Status.History)
	}
}

func TestReconcileProgress(t *testing.T) {
	cases := map[string]struct {
		gate        engine.GateState
		idle        time.Duration
		step        string // the last step and its phase
		phase       infrav1.StepPhase
		wantStalled string
	}{
		"steps moved recently":                 {idle: time.Minute, step: "plan", phase: infrav1.StepPending},
		"a step pending for the timeout":       {idle: 2 * time.Hour, step: "plan", phase: infrav1.StepPending, wantStalled: "True/NoProgress"},
		"a step done, the next never started":  {idle: 2 * time.Hour, step: "plan", phase: infrav1.StepSucceeded, wantStalled: "True/NoProgress"},
		"waiting for approval, not idle":       {idle: 2 * time.Hour, step: "plan", phase: infrav1.StepSucceeded, gate: engine.GatePending},
		"a long apply still running: no stall": {idle: 2 * time.Hour, step: "apply", phase: infrav1.StepRunning},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeEngine{}
			run := aRun("a")
			r, _ := newReconciler(t, f)
			run = withRun(r, run, 1, infrav1.RunRunning, infrav1.RunApply)
			at := metav1.NewTime(t0.Add(-tc.idle))
			run.Status.Run.StartedAt = &at
			run.Status.Run.Steps = []infrav1.StepStatus{{Name: tc.step, Phase: tc.phase, StartedAt: &at}}
			st := r.newPassState(run)
			st.engine, st.child = f, childOf(t, run, infrav1.RunApply, 1, st.hash)
			st.progress = engine.Progress{Gate: engine.Gate{State: tc.gate}}
			res, err := r.reconcileProgress(ctx(), run, st)
			if _, err := r.summarize(run, st, res, err); err != nil {
				t.Fatal(err)
			}
			if got := condOf(run, infrav1.StalledCondition); got != tc.wantStalled {
				t.Fatalf("Stalled = %q, want %q", got, tc.wantStalled)
			}
		})
	}
}

// A stalled run's message does not change from one pass to the next, so
// a pass of a run that stays stalled writes no status.
func TestStalledMessageIsTheSameOnEveryPass(t *testing.T) {
	f := &fakeEngine{}
	r, _ := newReconciler(t, f)
	run := withRun(r, aRun("a"), 1, infrav1.RunRunning, infrav1.RunApply)
	at := metav1.NewTime(t0.Add(-2 * time.Hour))
	run.Status.Run.StartedAt = &at
	run.Status.Run.Steps = []infrav1.StepStatus{{Name: "plan", Phase: infrav1.StepPending, StartedAt: &at}}
	var msgs []string
	for _, now := range []time.Time{t0, t0.Add(17 * time.Minute)} {
		r.Now = func() time.Time { return now }
		st := r.newPassState(run)
		st.engine, st.child = f, childOf(t, run, infrav1.RunApply, 1, st.hash)
		res, err := r.reconcileProgress(ctx(), run, st)
		if _, err := r.summarize(run, st, res, err); err != nil {
			t.Fatal(err)
		}
		c := apimeta.FindStatusCondition(run.Status.Conditions, infrav1.StalledCondition)
		if c == nil {
			t.Fatal("not stalled")
		}
		msgs = append(msgs, c.Message)
	}
	if msgs[0] != msgs[1] {
		t.Fatalf("the Stalled message changed between passes:\n%s\n%s", msgs[0], msgs[1])
	}
	if !strings.Contains(msgs[0], "since "+at.UTC().Format(time.RFC3339)) {
		t.Fatalf("the message does not say since when: %s", msgs[0])
	}
}

func TestOutputsOfAnEarlierIncarnationAreAdopted(t *testing.T) {
	run := aRun("a")
	earlier := run.DeepCopy()
	earlier.UID = "earlier"
	stranger := run.DeepCopy()
	stranger.Name, stranger.UID = "b", "other"
	cases := map[string]struct {
		owner   *infrav1.TerraformRun
		labels  map[string]string
		wantErr bool
	}{
		"an earlier TerraformRun of the same name": {owner: earlier, labels: map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue}},
		"another TerraformRun":                     {owner: stranger, labels: map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue}, wantErr: true},
		"nobody's":                                 {wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "a-outputs", Namespace: "ns", Labels: tc.labels}, Data: map[string][]byte{"x": []byte("old")}}
			if tc.owner != nil {
				sec.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(tc.owner, infrav1.GroupVersion.WithKind("TerraformRun"))}
			}
			r, c := newReconciler(t, &fakeEngine{}, sec)
			_, err := r.writeOutputsSecret(ctx(), run, "a-outputs", map[string][]byte{"x": []byte("new")})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want an error: %v", err, tc.wantErr)
			}
			got := &corev1.Secret{}
			if err := c.Get(ctx(), client.ObjectKeyFromObject(sec), got); err != nil {
				t.Fatal(err)
			}
			if adopted := metav1.IsControlledBy(got, run) && string(got.Data["x"]) == "new"; adopted == tc.wantErr {
				t.Fatalf("adopted %v, want %v: %+v", adopted, !tc.wantErr, got)
			}
		})
	}
}

// A status patch refused as a conflict (the cache lags the API server)
// comes back after conflictRetry, not in the rate limiter's exponential
// backoff: the update that brings the cache level changes only status,
// which the watch's predicates drop, so nothing else would wake the run.
func TestReconcileRetriesAConflictAtASteadyPace(t *testing.T) {
	f := &fakeEngine{progress: map[string]engine.Progress{}}
	run := aRun("a")
	conflicts := 0
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithStatusSubresource(&infrav1.TerraformRun{}).WithObjects(run).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, o ...client.SubResourcePatchOption) error {
				if conflicts < 3 {
					conflicts++
					return apierrors.NewConflict(infrav1.GroupVersion.WithResource("terraformruns").GroupResource(), obj.GetName(), errors.New("the object has been modified"))
				}
				return c.SubResource(sub).Patch(ctx, obj, p, o...)
			},
		}).Build()
	r, _ := newReconciler(t, f)
	r.Client, r.APIReader = c, c
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(run)}
	for i := 1; i <= 3; i++ {
		res, err := r.Reconcile(ctx(), req)
		if err != nil || res.RequeueAfter != conflictRetry {
			t.Fatalf("pass %d refused as a conflict: %v, %+v; want no error and RequeueAfter %v", i, err, res, conflictRetry)
		}
	}
	if _, err := r.Reconcile(ctx(), req); err != nil {
		t.Fatal(err)
	}
	stored := &infrav1.TerraformRun{}
	if err := c.Get(ctx(), req.NamespacedName, stored); err != nil {
		t.Fatal(err)
	}
	if stored.Status.Run == nil || stored.Status.Run.ID != "a-1" {
		t.Fatalf("after the conflicts, the status was not written: %+v", stored.Status)
	}
}
