package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/queue"
)

func TestDeleteFlow(t *testing.T) {
	cases := map[string]struct {
		annotations   map[string]string
		retain        bool
		planOnly      bool
		run           infrav1.RunType // the current run's type; "" for none
		phase         infrav1.RunPhase
		mayExist      bool
		progress      engine.Progress // of the current run's child
		childGone     bool
		wantFinalizer bool
		wantRun       string // status.run.id after the pass
		wantStalled   string
		wantCancel    bool
		manual        bool   // the current run was started with a gate
		wantMessage   string // in Reconciling's message
	}{
		"never ran: finalizer removed": {
			wantFinalizer: false,
		},
		"Retain: finalizer removed without destroy": {
			retain: true, run: infrav1.RunApply, phase: infrav1.RunSucceeded, mayExist: true, wantRun: "a-1",
		},
		"skip-destroy while a run is active: stopped, finalizer removed": {
			annotations: map[string]string{infrav1.SkipDestroyAnnotation: "true"}, run: infrav1.RunApply, phase: infrav1.RunRunning, mayExist: true,
			progress: engine.Progress{Phase: infrav1.RunRunning}, wantRun: "a-1", wantCancel: true,
		},
		"planOnly, a preview running, nothing ever applied: stopped, finalizer removed": {
			planOnly: true, run: infrav1.RunPlan, phase: infrav1.RunRunning, wantRun: "a-plan-1",
			progress: engine.Progress{Phase: infrav1.RunRunning, Steps: steps("plan", "Running")}, wantCancel: true,
		},
		"planOnly, a preview waiting for nothing, never applied: finalizer removed": {
			planOnly: true, run: infrav1.RunPlan, phase: infrav1.RunSucceeded, wantRun: "a-plan-1",
		},
		"switched to planOnly after an apply: its resources are destroyed": {
			planOnly: true, run: infrav1.RunApply, phase: infrav1.RunSucceeded, mayExist: true, wantFinalizer: true, wantRun: "a-destroy-2",
		},
		"applied before: the destroy run starts": {
			run: infrav1.RunApply, phase: infrav1.RunSucceeded, mayExist: true, wantFinalizer: true, wantRun: "a-destroy-2",
		},
		"nothing applied, plan failed: finalizer removed": {
			run: infrav1.RunApply, phase: infrav1.RunFailed, wantRun: "a-1",
		},
		"active apply run before its apply step, nothing applied: stopped, finalizer removed": {
			run: infrav1.RunApply, phase: infrav1.RunAwaitingApproval, progress: engine.Progress{Phase: infrav1.RunAwaitingApproval, Steps: steps("plan", "Succeeded", "approve", "Running")},
			wantRun: "a-1", wantCancel: true,
		},
		"active apply run applying: stopped and waited for": {
			run: infrav1.RunApply, phase: infrav1.RunRunning, progress: engine.Progress{Phase: infrav1.RunRunning, Steps: steps("plan", "Succeeded", "apply", "Running")},
			wantFinalizer: true, wantRun: "a-1", wantCancel: true,
		},
		"apply finished unseen: recorded, then destroyed": {
			run: infrav1.RunApply, phase: infrav1.RunPending, progress: engine.Progress{Phase: infrav1.RunSucceeded, Finished: true, Applied: true, Steps: steps("plan", "Succeeded", "apply", "Succeeded")},
			wantFinalizer: true, wantRun: "a-destroy-2",
		},
		"destroy succeeded: finalizer removed": {
			run: infrav1.RunDestroy, phase: infrav1.RunSucceeded, mayExist: true, wantRun: "a-destroy-1",
		},
		"destroy failed: Stalled with both ways out": {
			run: infrav1.RunDestroy, phase: infrav1.RunFailed, mayExist: true, wantFinalizer: true, wantRun: "a-destroy-1", wantStalled: "True/DestroyFailed",
		},
		"destroy failed, a rerun requested: destroyed again": {
			annotations: map[string]string{infrav1.RunRequestAnnotation: "retry"}, run: infrav1.RunDestroy, phase: infrav1.RunFailed, mayExist: true,
			wantFinalizer: true, wantRun: "a-destroy-2",
		},
		"a Manual destroy waits at its gate, without a destroy timeout: says how to approve": {
			run: infrav1.RunDestroy, phase: infrav1.RunAwaitingApproval, mayExist: true, manual: true, wantFinalizer: true, wantRun: "a-destroy-1",
			progress:    engine.Progress{Phase: infrav1.RunAwaitingApproval, Gate: engine.Gate{State: engine.GatePending}, Plan: &engine.PlanResult{Digest: "sha256:aa", HasChanges: true}},
			wantMessage: "destroy run a-destroy-1 waits for approval of its plan",
		},
		"destroy-without-approval set while the destroy waits at its gate: stopped": {
			annotations: map[string]string{infrav1.DestroyWithoutApprovalAnnotation: "true"},
			run:         infrav1.RunDestroy, phase: infrav1.RunAwaitingApproval, mayExist: true, manual: true, wantFinalizer: true, wantRun: "a-destroy-1", wantCancel: true,
			progress:    engine.Progress{Phase: infrav1.RunAwaitingApproval, Gate: engine.Gate{State: engine.GatePending}, Plan: &engine.PlanResult{Digest: "sha256:aa", HasChanges: true}},
			wantMessage: "a destroy without approval follows",
		},
		"a gated destroy stopped after destroy-without-approval was set: one without the gate starts": {
			annotations: map[string]string{infrav1.DestroyWithoutApprovalAnnotation: "true"},
			run:         infrav1.RunDestroy, phase: infrav1.RunFailed, mayExist: true, manual: true, wantFinalizer: true, wantRun: "a-destroy-2",
		},
		"destroy child deleted by hand: destroyed again": {
			run: infrav1.RunDestroy, phase: infrav1.RunRunning, mayExist: true, childGone: true, wantFinalizer: true, wantRun: "a-destroy-2",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeEngine{progress: map[string]engine.Progress{}}
			run := aRun("a")
			run.Annotations = tc.annotations
			if tc.retain {
				run.Spec.DeletionPolicy = infrav1.DeletionRetain
			}
			run.Spec.PlanOnly = tc.planOnly
			r, _ := newReconciler(t, f)
			var objs []client.Object
			if tc.run != "" {
				run = withRun(r, run, 1, tc.phase, tc.run)
				if tc.manual {
					run.Status.Run.ApprovalMode = infrav1.ApprovalManual
				}
				if !tc.childGone {
					c := childOf(t, run, tc.run, 1, run.Status.Run.SpecHash)
					objs = append(objs, c)
					f.progress[c.Name] = tc.progress
					if isTerminal(tc.phase) {
						f.progress[c.Name] = engine.Progress{Finished: true, Phase: tc.phase}
					}
				}
			}
			run.Status.ResourcesMayExist = tc.mayExist
			now := metav1.NewTime(t0)
			run.DeletionTimestamp = &now
			r, c := newReconciler(t, f, append(objs, run.DeepCopy())...)
			r.Limiter = queue.NewLimiter(1, 0, nil)
			r.Limiter.Warm()
			if tc.run != "" && !isTerminal(tc.phase) {
				r.Limiter.Hold(client.ObjectKeyFromObject(run), run.Status.Run.ID)
			}
			driftDetected.WithLabelValues(run.Namespace, run.Name).Inc()
			st := r.newPassState(run)
			res, err := runFlow(ctx(), run, st, r.deleteFlow())
			if _, err := r.summarize(run, st, res, err); err != nil {
				t.Fatal(err)
			}
			stored := &infrav1.TerraformRun{}
			err = c.Get(ctx(), client.ObjectKeyFromObject(run), stored)
			hasFinalizer := err == nil && len(stored.Finalizers) > 0
			if hasFinalizer != tc.wantFinalizer {
				t.Errorf("finalizer kept: %v, want %v", hasFinalizer, tc.wantFinalizer)
			}
			// Whatever the run left behind (a plan waiting for approval, a
			// child stopped on the way out), its slot is free once the
			// finalizer is gone: nothing else would ever release it.
			if !hasFinalizer && r.Limiter.Active() != 0 {
				t.Errorf("the finalizer is gone but the run still holds %d of --max-active-runs", r.Limiter.Active())
			}
			if gone := !driftDetected.DeleteLabelValues(run.Namespace, run.Name); gone == hasFinalizer {
				t.Errorf("opr8r_drift_detected_total{%s,%s} deleted: %v, want it to go with the finalizer", run.Namespace, run.Name, gone)
			}
			id := ""
			if run.Status.Run != nil {
				id = run.Status.Run.ID
			}
			if id != tc.wantRun {
				t.Errorf("status.run.id = %q, want %q", id, tc.wantRun)
			}
			if got := condOf(run, infrav1.StalledCondition); got != tc.wantStalled {
				t.Errorf("Stalled = %q, want %q", got, tc.wantStalled)
			}
			if got := len(f.cancelled) > 0; got != tc.wantCancel {
				t.Errorf("cancelled %v, want a cancel: %v", f.cancelled, tc.wantCancel)
			}
			if c := findCond(run, infrav1.ReconcilingCondition); tc.wantMessage != "" && (c == nil || !contains(c.Message, tc.wantMessage)) {
				t.Errorf("Reconciling = %+v, want a message with %q", c, tc.wantMessage)
			}
			if tc.wantStalled != "" {
				msg := findCond(run, infrav1.StalledCondition).Message
				for _, want := range []string{"kubectl tfrun rerun a", infrav1.SkipDestroyAnnotation} {
					if !contains(msg, want) {
						t.Errorf("Stalled message %q lacks %q", msg, want)
					}
				}
			}
			if tc.wantRun == "a-destroy-2" {
				if err := c.Get(ctx(), client.ObjectKey{Namespace: "ns", Name: "a-destroy-2"}, &batchv1.Job{}); err != nil {
					t.Errorf("destroy child: %v", err)
				}
			}
		})
	}
}

// A destroy is stalled (DestroyTimeout) only once its own steps could no
// longer be running: a long destroy within spec.timeouts is not stuck.
func TestDestroyTimesOut(t *testing.T) {
	for name, tc := range map[string]struct {
		timeouts    *infrav1.Timeouts
		wantStalled string
	}{
		"short timeouts, running for 2h: stalled": {
			timeouts:    &infrav1.Timeouts{Plan: &metav1.Duration{Duration: time.Minute}, Destroy: &metav1.Duration{Duration: 10 * time.Minute}},
			wantStalled: "True/DestroyTimeout",
		},
		"the default timeouts (a 24h destroy), running for 2h: still destroying": {},
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeEngine{progress: map[string]engine.Progress{"a-destroy-1": {Phase: infrav1.RunRunning}}}
			run := aRun("a")
			run.Spec.Timeouts = tc.timeouts
			r, _ := newReconciler(t, f)
			run = withRun(r, run, 1, infrav1.RunRunning, infrav1.RunDestroy)
			run.Status.Run.StartedAt = &metav1.Time{Time: t0.Add(-2 * time.Hour)}
			now := metav1.NewTime(t0)
			run.DeletionTimestamp = &now
			r, _ = newReconciler(t, f, childOf(t, run, infrav1.RunDestroy, 1, run.Status.Run.SpecHash), run.DeepCopy())
			st := r.newPassState(run)
			res, err := runFlow(ctx(), run, st, r.deleteFlow())
			_, _ = r.summarize(run, st, res, err)
			if got := condOf(run, infrav1.StalledCondition); got != tc.wantStalled {
				t.Fatalf("Stalled = %q, want %q", got, tc.wantStalled)
			}
		})
	}
}

// A TerraformRun whose namespace is being deleted cannot start its destroy
// (the API server refuses new objects there): it lets its finalizer go,
// with a Warning that says what may remain, rather than holding the
// namespace in Terminating for ever.
func TestDeletionInADeletedNamespace(t *testing.T) {
	f := &fakeEngine{progress: map[string]engine.Progress{"a-1": {Finished: true, Phase: infrav1.RunSucceeded}}}
	run := aRun("a")
	r, _ := newReconciler(t, f)
	run = withRun(r, run, 1, infrav1.RunSucceeded, infrav1.RunApply)
	run.Status.ResourcesMayExist = true
	now := metav1.NewTime(t0)
	run.DeletionTimestamp = &now
	r, c := newReconciler(t, f, childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash), run.DeepCopy())
	terminating := apierrors.NewForbidden(batchv1.Resource("jobs"), "a-destroy-2", errors.New("unable to create new content in namespace ns because it is being terminated"))
	terminating.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Message: "namespace ns is being terminated", Field: "metadata.namespace"}}
	r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return terminating
		},
	})
	rec := events.NewFakeRecorder(4)
	r.Recorder = rec
	st := r.newPassState(run)
	res, err := runFlow(ctx(), run, st, r.deleteFlow())
	if _, err := r.summarize(run, st, res, err); err != nil {
		t.Fatal(err)
	}
	stored := &infrav1.TerraformRun{}
	if err := c.Get(ctx(), client.ObjectKeyFromObject(run), stored); err == nil && len(stored.Finalizers) > 0 {
		t.Fatal("the finalizer holds a TerraformRun whose namespace is being deleted")
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, "Warning") || !strings.Contains(e, "namespace ns is being deleted") || !strings.Contains(e, "may remain") {
			t.Fatalf("event %q, want a Warning saying the namespace is being deleted and what may remain", e)
		}
	default:
		t.Fatal("no event says why nothing was destroyed")
	}
}
