// Package controller holds the TerraformRun reconciler: one thin loop that
// hashes the spec, starts at most one engine child at a time, projects the
// child's progress into status, decides approvals, writes outputs and runs a
// destroy pipeline on deletion. It never imports an engine package; engines
// are reached through pkg/engine.
package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	corev1 "k8s.io/api/core/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
)

// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformruns,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformruns/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Defaults for timings the manager may override by flag.
const (
	DefaultDestroyTimeout     = 30 * time.Minute
	DefaultProgressTimeout    = time.Hour
	DefaultEngineRetryPeriod  = 15 * time.Second
	skipDestroyAnnotationTrue = "true"
)

// TerraformRunReconciler reconciles TerraformRun objects.
type TerraformRunReconciler struct {
	client.Client
	// APIReader reads around the cache, to confirm that a child the cache
	// lacks is really gone before acting on it.
	APIReader client.Reader
	// Recorder emits Events on condition transitions.
	Recorder events.EventRecorder
	// Engines are the enabled engines.
	Engines *engine.Registry
	// Available says which engines' CRDs are served.
	Available *Availability
	// DefaultEngine is used when spec.engine is empty.
	DefaultEngine infrav1.EngineName
	// Config is passed to engines when building children.
	Config engine.Config
	// DestroyTimeout stalls a deletion whose destroy runs longer.
	DestroyTimeout time.Duration
	// ProgressTimeout stalls a run whose steps have not moved for this long
	// (approval waits excluded); 0 disables the check.
	ProgressTimeout time.Duration
	// Now is the clock; tests may replace it.
	Now func() time.Time
}

func (r *TerraformRunReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile gets the run, handles deletion, the finalizer and suspend, then
// the run's pipeline, and writes status once at the end if it changed.
func (r *TerraformRunReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	run := &infrav1.TerraformRun{}
	if err := r.Get(ctx, req.NamespacedName, run); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if run.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(run, infrav1.Finalizer) {
		patch := client.MergeFrom(run.DeepCopy())
		controllerutil.AddFinalizer(run, infrav1.Finalizer)
		if err := r.Patch(ctx, run, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
	}

	base := run.DeepCopy()
	defer func() {
		if errors.Is(retErr, errStaleCache) {
			// A status patch from this copy would be refused (409): look
			// again once the cache has caught up, writing nothing.
			res, retErr = ctrl.Result{RequeueAfter: staleCacheRetry}, nil
			return
		}
		res, retErr = r.reportError(run, res, retErr)
		summarize(run)
		if err := r.patchStatus(ctx, base, run); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()

	eff := pipeline.Defaults(run, r.DefaultEngine, r.Config)
	if !run.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, run, eff)
	}
	return r.reconcileRun(ctx, run, eff)
}

// patchStatus writes the status subresource when it changed, guarded by the
// resourceVersion the reconcile started from, so a stale cache never
// overwrites newer status.
func (r *TerraformRunReconciler) patchStatus(ctx context.Context, base, run *infrav1.TerraformRun) error {
	if statusEqual(base.Status, run.Status) {
		return nil
	}
	err := r.Status().Patch(ctx, run, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("patching status: %w", err)
	}
	return nil
}

// engineFor returns the engine of a run, or a stalling error that says why
// it can't be used. EngineUnavailable is retried, since a CRD installed later
// makes the engine available.
func (r *TerraformRunReconciler) engineFor(name infrav1.EngineName) (engine.Engine, error) {
	e, ok := r.Engines.Get(name)
	if !ok {
		return nil, &stallingError{reason: infrav1.ReasonEngineUnavailable,
			msg: fmt.Sprintf("engine %q is not enabled in this manager (enabled: %v); set spec.engine or start the manager with --engines", name, r.Engines.Names())}
	}
	if !r.Available.IsAvailable(name) {
		gvk := e.ChildGVK()
		return nil, &waitingError{reason: infrav1.ReasonEngineUnavailable, after: DefaultEngineRetryPeriod,
			msg: fmt.Sprintf("engine %q is unavailable: the %s CRD (%s) is not installed in the cluster; install the engine and the run will continue", name, gvk.Kind, gvk.GroupVersion())}
	}
	return e, nil
}

// reconcileDelete runs the destroy pipeline and then removes the finalizer.
// Retain, the skip-destroy annotation and runs that never applied anything
// remove it at once. Sets Stalled when the destroy fails, times out or its
// engine is unavailable, with the escape hatch in the message.
func (r *TerraformRunReconciler) reconcileDelete(ctx context.Context, run, eff *infrav1.TerraformRun) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(run, infrav1.Finalizer) {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx)
	cur := run.Status.Run
	skip := run.Annotations[infrav1.SkipDestroyAnnotation] == skipDestroyAnnotationTrue
	if skip || eff.Spec.DeletionPolicy == infrav1.DeletionRetain || !mayHaveResources(run) {
		if cur != nil && !isTerminal(cur.Phase) {
			if err := r.cancelChild(ctx, run, cur, "the TerraformRun is being deleted"); err != nil {
				log.Info("could not stop the active run before removing the finalizer", "child", cur.ID, "error", err.Error())
			}
		}
		log.Info("removing finalizer without destroy", "policy", eff.Spec.DeletionPolicy, "skipDestroy", skip)
		return ctrl.Result{}, r.removeFinalizer(ctx, run)
	}
	escape := fmt.Sprintf("to delete without destroying, run: kubectl annotate tfrun %s %s=true", run.Name, infrav1.SkipDestroyAnnotation)

	// Let an active apply run finish (or stop it) before destroying.
	if cur != nil && cur.Type == infrav1.RunApply && !isTerminal(cur.Phase) {
		done, err := r.stopActive(ctx, run, cur)
		if err != nil || !done {
			setStatus(run, infrav1.ReconcilingCondition, metav1True, infrav1.ReasonDestroying, "waiting for the active run "+cur.ID+" to stop before destroying")
			return ctrl.Result{RequeueAfter: 5 * time.Second}, err
		}
	}

	engName := eff.Spec.Engine
	e, err := r.engineFor(engName)
	if err != nil {
		return ctrl.Result{}, withMessageSuffix(err, "; "+escape)
	}
	hash := pipeline.SpecHash(eff)
	if cur == nil || cur.Type != infrav1.RunDestroy {
		return r.startRun(ctx, run, eff, e, infrav1.RunDestroy, hash, 1)
	}
	child, pr, err := r.observeChild(ctx, run, e, cur)
	if err != nil {
		return ctrl.Result{}, err
	}
	if child == nil {
		// The destroy child was deleted by hand: start it again.
		return r.startRun(ctx, run, eff, e, infrav1.RunDestroy, hash, cur.Attempt+1)
	}
	if pr.Finished && !isTerminal(cur.Phase) {
		cur.Phase, cur.FinishedAt = pr.Phase, pr.FinishedAt
		runsFinished.WithLabelValues(string(cur.Engine), string(cur.Type), string(cur.Phase)).Inc()
	}
	switch cur.Phase {
	case infrav1.RunSucceeded:
		r.event(run, corev1.EventTypeNormal, "Destroyed", "Destroy", "destroy run "+cur.ID+" succeeded; removing the finalizer")
		return ctrl.Result{}, r.removeFinalizer(ctx, run)
	case infrav1.RunFailed, infrav1.RunRejected:
		return ctrl.Result{}, &stallingError{reason: infrav1.ReasonDestroyFailed,
			msg: fmt.Sprintf("destroy run %s failed: %s; fix the cause and set annotation %s to retry, or %s", cur.ID, pr.Message, infrav1.RunRequestAnnotation, escape)}
	}
	started := cur.StartedAt
	timeout := r.DestroyTimeout
	if timeout == 0 {
		timeout = DefaultDestroyTimeout
	}
	if started != nil && r.now().Sub(started.Time) > timeout {
		return ctrl.Result{}, &stallingError{reason: infrav1.ReasonDestroyTimeout,
			msg: fmt.Sprintf("destroy run %s has run for more than %s; check its steps, or %s", cur.ID, timeout, escape)}
	}
	setStatus(run, infrav1.ReconcilingCondition, metav1True, infrav1.ReasonDestroying, "destroy run "+cur.ID+" is running")
	if started != nil {
		return ctrl.Result{RequeueAfter: timeout - r.now().Sub(started.Time)}, nil
	}
	return ctrl.Result{}, nil
}

// mayHaveResources says whether any apply may have changed infrastructure.
func mayHaveResources(run *infrav1.TerraformRun) bool {
	if run.Status.LastAppliedHash != "" {
		return true
	}
	c := apimeta.FindStatusCondition(run.Status.Conditions, infrav1.AppliedCondition)
	return c != nil && (c.Reason == infrav1.ReasonApplied || c.Reason == infrav1.ReasonProgressing || c.Reason == infrav1.ReasonRunFailed)
}

func (r *TerraformRunReconciler) removeFinalizer(ctx context.Context, run *infrav1.TerraformRun) error {
	patch := client.MergeFrom(run.DeepCopy())
	controllerutil.RemoveFinalizer(run, infrav1.Finalizer)
	if err := r.Patch(ctx, run, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing finalizer: %w", err)
	}
	return nil
}

// SetupWithManager registers the controller. Engine children are watched
// once their CRDs are served (see EngineWatcher); this returns the
// controller so the watcher can add those watches later.
func (r *TerraformRunReconciler) SetupWithManager(mgr ctrl.Manager, maxConcurrent int, wake <-chan event.GenericEvent) (controller.Controller, error) {
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.TerraformRun{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.AnnotationChangedPredicate{},
			deletionPredicate{},
		))).
		Owns(&corev1.Secret{}).
		WatchesRawSource(source.Channel(wake, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrent}).
		Named("terraformrun").
		Build(r)
}

// errors used to steer requeueing (Flux's internal/error, in small).

// errStaleCache says the cached run lags the API server: its status does
// not yet show the child this reconcile's own earlier write recorded.
// Reconcile then writes nothing, not even a status patch, and looks again
// after staleCacheRetry.
var errStaleCache = errors.New("the cached TerraformRun is older than its status on the API server")

const staleCacheRetry = 200 * time.Millisecond

// stallingError is a problem a retry can't fix; it sets Stalled.
type stallingError struct{ reason, msg string }

func (e *stallingError) Error() string { return e.msg }

// waitingError is a problem that may go away; it sets Stalled and requeues.
type waitingError struct {
	reason, msg string
	after       time.Duration
}

func (e *waitingError) Error() string { return e.msg }

// reportError turns stalling and waiting errors into the Stalled condition:
// stalling errors are not retried, waiting errors are retried after their
// delay. Other errors are returned for controller-runtime's backoff.
func (r *TerraformRunReconciler) reportError(run *infrav1.TerraformRun, res ctrl.Result, err error) (ctrl.Result, error) {
	var s *stallingError
	var w *waitingError
	switch {
	case errors.As(err, &s):
		r.setStalled(run, s.reason, s.msg)
		return ctrl.Result{}, nil
	case errors.As(err, &w):
		r.setStalled(run, w.reason, w.msg)
		return ctrl.Result{RequeueAfter: w.after}, nil
	}
	return res, err
}

func withMessageSuffix(err error, suffix string) error {
	var w *waitingError
	if errors.As(err, &w) {
		return &waitingError{reason: w.reason, msg: w.msg + suffix, after: w.after}
	}
	var s *stallingError
	if errors.As(err, &s) {
		return &stallingError{reason: s.reason, msg: s.msg + suffix}
	}
	return err
}
