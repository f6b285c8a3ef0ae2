// Package controller holds the TerraformRun reconciler: one thin loop of
// small sub-reconcilers that follow the active run's engine child, decide
// its approval gate, record its result, start the next run and prune old
// children; and a destroy flow on deletion. It never imports an engine
// package; engines are reached through pkg/engine.
//
// Status is written in one place: Reconcile's deferred patchStatus, once per
// pass, when it changed.
package controller

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/gate"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/queue"
	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/pkg/tenancy"
)

// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformruns,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformruns/finalizers,verbs=update
// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformrunapprovals,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Defaults for timings the manager may override by flag.
const (
	DefaultDestroyTimeout    = 30 * time.Minute
	DefaultProgressTimeout   = time.Hour
	DefaultEngineRetryPeriod = 15 * time.Second
)

// TerraformRunReconciler reconciles TerraformRun objects.
type TerraformRunReconciler struct {
	client.Client
	// APIReader reads around the cache, to confirm that a child the cache
	// lacks is really gone before acting on it.
	APIReader client.Reader
	// Settled reads the metadata of the settled children: those whose
	// result status records (labelled infra.opr8r.io/settled), which the cache behind
	// Client no longer holds; nil reads them from APIReader, and so does a
	// cache whose informer for the kind has not synced (settledReader).
	Settled client.Reader
	// Recorder emits Events on condition transitions.
	Recorder events.EventRecorder
	// Notifier, when set, is told of the Events people act on (notify.go).
	Notifier Notifier
	// Engines are the enabled engines.
	Engines *engine.Registry
	// Available says which engines' CRDs are served.
	Available *engine.Availability
	// DefaultEngine is used when spec.engine is empty.
	DefaultEngine infrav1.EngineName
	// Config is passed to engines when building children.
	Config engine.Config
	// DestroyTimeout stalls a deletion whose destroy runs longer.
	DestroyTimeout time.Duration
	// ProgressTimeout stalls a run whose steps have not moved for this long
	// (approval waits excluded); 0 disables the check.
	ProgressTimeout time.Duration
	// Limiter caps the children active at once (--max-active-runs); nil
	// means no cap.
	Limiter *queue.Limiter
	// MinCheckInterval is the shortest spec.interval honoured.
	MinCheckInterval time.Duration
	// AllowCrossNamespaceDependencies lets spec.dependsOn name TerraformRuns
	// in other namespaces (--allow-cross-namespace-dependencies).
	AllowCrossNamespaceDependencies bool
	// WatchNamespaces are the namespaces the manager watches (empty: all),
	// for messages about dependencies it cannot see.
	WatchNamespaces []string
	// UntrustedIdentity: opr8r's admission policies are not installed, so
	// the users stamped on decisions and specs are not trusted.
	UntrustedIdentity bool
	// Records is where the steps keep their logs and plans; the reconciler
	// prunes them with the history and deletes them with the TerraformRun
	// (records.go). Nil: none are pruned.
	Records records.Store
	// ObjectStore, when set, is where finished runs' records move from the
	// Secrets the steps wrote (an S3-compatible store); records.go.
	ObjectStore records.Store
	// RestoreTTL is how long records brought back from the object store
	// stay (DefaultRestoreTTL when 0).
	RestoreTTL time.Duration
	// recordsPruned remembers, per TerraformRun uid, the oldest run number
	// its records were last pruned to; recordsMoved the newest run whose
	// records moved to the object store; recordsRestores its requests.
	recordsPruned, recordsMoved, recordsRestores sync.Map
	// writes are the manager's own last writes of each TerraformRun: a
	// pass waits for the cache to show them (ownwrites.go).
	writes ownWrites
	// guards writes the guard lists (tenancy.Guard: this manager's
	// passes write a namespace's list one at a time, each write carrying
	// every edit that waited for it), made at first use (guard.go).
	guards    *tenancy.Guard
	guardOnce sync.Once
	// rules keeps compiled spec.approval.rules and the plans they read
	// (rules.go).
	rules ruleCache
	// Seals seals the children of engines whose driver reads back from them
	// (engine.Sealer), under a key only the manager holds.
	Seals engine.Seals
	// DefaultApprovalTimeout rejects a plan that waited this long for
	// approval when the run sets no spec.approval.timeout (0: no limit), so
	// that a forgotten plan does not hold a slot of its namespace's share
	// and a workspace volume for ever.
	DefaultApprovalTimeout time.Duration
	// IsPreview says whether a run is a preview the manager made
	// (receiver.IsManagersPreview): its child plans without the state
	// lock.
	IsPreview func(*infrav1.TerraformRun) bool
	// Now is the clock; tests may replace it.
	Now func() time.Time
}

func (r *TerraformRunReconciler) now() time.Time { return engine.Now(r.Now) }

// finishedAt is t, or now when the engine did not say when it finished.
func (r *TerraformRunReconciler) finishedAt(t *metav1.Time) *metav1.Time {
	if t != nil {
		return t
	}
	now := metav1.NewTime(r.now())
	return &now
}

// subReconciler is one step of a reconcile pass. It reads and changes the
// run's status (written once, at the end of the pass) and the pass state.
// A non-nil error stops the pass; the shortest requeue of those that ran wins.
type subReconciler func(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error)

// applyFlow is the pass of a TerraformRun that is not being deleted.
func (r *TerraformRunReconciler) applyFlow() []subReconciler {
	return []subReconciler{
		r.reconcilePolicies,
		r.reconcileActive,
		r.reconcileUngated,
		r.reconcileDrive,
		r.reconcileDependencies,
		r.reconcileSupersede,
		r.reconcileApproval,
		r.reconcileGateLabel,
		r.reconcileProgress,
		r.reconcileOutputs,
		r.reconcileSchedule,
		r.reconcileStart,
		r.reconcileChildren,
		r.reconcileRetention,
	}
}

// deleteFlow is the pass of a TerraformRun being deleted.
func (r *TerraformRunReconciler) deleteFlow() []subReconciler {
	return []subReconciler{
		r.reconcilePolicies,
		r.reconcileRelease,
		r.reconcileActive,
		r.reconcileDrive,
		r.reconcileApproval,
		r.reconcileGateLabel,
		r.reconcileDependents,
		r.reconcileDelete,
	}
}

// Reconcile gets the run, adds the finalizer, runs the pass's
// sub-reconcilers and writes status once at the end if it changed.
func (r *TerraformRunReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	run := &infrav1.TerraformRun{}
	if err := r.Get(ctx, req.NamespacedName, run); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone without our finalizer's pass (it was removed by hand):
			// what it held would never be released.
			r.Limiter.ReleaseRun(req.NamespacedName)
			r.writes.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.writes.behind(run, time.Now()) {
		ownWriteWaits.Inc()
		return ctrl.Result{RequeueAfter: staleCacheRetry}, nil
	}
	if err := r.ensureFinalizer(ctx, run); err != nil {
		return ctrl.Result{}, err
	}
	base := run.DeepCopy()
	st := r.newPassState(run)
	defer func() {
		if errors.Is(retErr, errStaleCache) || errors.Is(retErr, errEnginesUnknown) {
			res, retErr = ctrl.Result{RequeueAfter: staleCacheRetry}, nil
			return
		}
		res, retErr = r.summarize(run, st, res, retErr)
		if err := r.patchStatus(ctx, base, run); err != nil {
			if apierrors.IsConflict(err) && retErr == nil {
				// The cache lags the API server (after an API server
				// restart it may lag for seconds). The update that brings
				// it level changes only status, which the watch's
				// predicates drop, so it wakes nothing: look again soon,
				// at a steady pace, rather than in controller-runtime's
				// exponential backoff, which a burst of conflicts grows to
				// many minutes (seen in make chaos).
				res, retErr = ctrl.Result{RequeueAfter: conflictRetry}, nil
				return
			}
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()
	flow := r.applyFlow()
	if !run.DeletionTimestamp.IsZero() {
		flow = r.deleteFlow()
	}
	return runFlow(ctx, run, st, flow)
}

// runFlow runs sub-reconcilers in order until one fails or asks to stop the
// pass; it keeps the shortest requeue.
func runFlow(ctx context.Context, run *infrav1.TerraformRun, st *passState, flow []subReconciler) (ctrl.Result, error) {
	var res ctrl.Result
	for _, sub := range flow {
		r, err := sub(ctx, run, st)
		res = lowestRequeue(res, r)
		if err != nil || st.stop {
			return res, err
		}
	}
	return res, nil
}

// lowestRequeue keeps the earlier of two requeues; a zero RequeueAfter
// means none.
func lowestRequeue(a, b ctrl.Result) ctrl.Result {
	if b.RequeueAfter > 0 && (a.RequeueAfter == 0 || b.RequeueAfter < a.RequeueAfter) {
		a.RequeueAfter = b.RequeueAfter
	}
	return a
}

// ensureFinalizer adds the finalizer that guards the destroy pipeline to a
// run that is not being deleted and lacks it.
func (r *TerraformRunReconciler) ensureFinalizer(ctx context.Context, run *infrav1.TerraformRun) error {
	if !run.DeletionTimestamp.IsZero() || controllerutil.ContainsFinalizer(run, infrav1.Finalizer) {
		return nil
	}
	patch := client.MergeFrom(run.DeepCopy())
	controllerutil.AddFinalizer(run, infrav1.Finalizer)
	if err := r.Patch(ctx, run, patch); err != nil {
		return generic("AddFinalizer", err, "adding finalizer")
	}
	r.writes.wrote(run, time.Now())
	return nil
}

// patchStatus is the one place status is written: a merge patch of what
// changed, guarded by the resourceVersion the pass started from, so a stale
// cache never overwrites newer status.
func (r *TerraformRunReconciler) patchStatus(ctx context.Context, base, run *infrav1.TerraformRun) error {
	if statusEqual(base.Status, run.Status) {
		return nil
	}
	err := r.Status().Patch(ctx, run, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		r.writes.wrote(run, time.Now())
	}
	return generic("PatchStatus", err, "patching status")
}

// engineFor returns an engine, or an error that says why it can't be used.
// EngineUnavailable is a waiting error: a CRD installed later makes the
// engine available.
func (r *TerraformRunReconciler) engineFor(name infrav1.EngineName) (engine.Engine, error) {
	e, ok := r.Engines.Get(name)
	if !ok {
		return nil, stalling(infrav1.ReasonEngineUnavailable,
			"engine %q is not enabled in this manager (enabled: %v); set spec.engine or start the manager with --engines", name, r.Engines.Names())
	}
	if !r.Available.IsAvailable(name) {
		if !r.Available.Checked() {
			return nil, errEnginesUnknown
		}
		gvk := e.ChildGVK()
		return nil, waiting(infrav1.ReasonEngineUnavailable, DefaultEngineRetryPeriod,
			"engine %q is unavailable: the %s CRD (%s) is not installed in the cluster; install the engine and the run will continue", name, gvk.Kind, gvk.GroupVersion())
	}
	return e, nil
}

// SetupWithManager registers the controller. Engine children are watched
// once their CRDs are served (see EngineWatcher); this returns the
// controller so the watcher can add those watches later.
func (r *TerraformRunReconciler) SetupWithManager(mgr ctrl.Manager, maxConcurrent int, wake ...<-chan event.GenericEvent) (controller.Controller, error) {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &infrav1.TerraformRunApproval{}, ApprovalRunIndex, approvalRun); err != nil {
		return nil, err
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &infrav1.TerraformRun{}, DependsOnIndex, dependsOnKeys); err != nil {
		return nil, err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.TerraformRun{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.AnnotationChangedPredicate{},
			deletionPredicate{},
		))).
		Owns(&corev1.Secret{}).
		Watches(&infrav1.TerraformRunApproval{}, handler.EnqueueRequestsFromMapFunc(approvalRequests)).
		Watches(&infrav1.TerraformRunPolicy{}, handler.EnqueueRequestsFromMapFunc(r.policyRuns), builder.WithPredicates(policyChanged)).
		Watches(&infrav1.ClusterTerraformRunPolicy{}, handler.EnqueueRequestsFromMapFunc(r.policyRuns), builder.WithPredicates(policyChanged)).
		Watches(&infrav1.TerraformRun{}, handler.EnqueueRequestsFromMapFunc(r.relatedRuns), builder.WithPredicates(dependencyPredicate{}))
	for _, w := range wake {
		b = b.WatchesRawSource(source.Channel(w, &handler.EnqueueRequestForObject{}))
	}
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrent}).
		Named("terraformrun").
		Build(r)
}

// approvalRun is the index value of a TerraformRunApproval: its run's name.
func approvalRun(o client.Object) []string {
	if a, ok := o.(*infrav1.TerraformRunApproval); ok {
		return []string{a.Spec.RunName}
	}
	return nil
}

// approvalRequests wakes the run a TerraformRunApproval decides on.
func approvalRequests(_ context.Context, o client.Object) []reconcile.Request {
	a, ok := o.(*infrav1.TerraformRunApproval)
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: a.Namespace, Name: a.Spec.RunName}}}
}

// passState is what one reconcile pass learns as it goes.
type passState struct {
	// eff is the run with every default applied, and its spec.approval
	// combined with the policies that govern it (reconcilePolicies).
	eff *infrav1.TerraformRun
	// gov is that combination: the policies, and each one's windows.
	gov gate.Governed
	// hash is the hash of what the current spec runs.
	hash string
	// active is true while the current run (status.run) has not finished.
	active bool
	// engine, child and progress are the active run's, once observed.
	engine   engine.Engine
	child    client.Object
	progress engine.Progress
	// finished is true when the run (or a check) finished in this pass;
	// childGone when the run did because its child was deleted.
	finished, childGone bool
	// requested is a run a finished check asks for (a moved source, drift
	// to repair).
	requested *newRun
	// deps is what reconcileDependencies learned of spec.dependsOn.
	deps depState
	// persisted is the status as stored when the pass began: what a
	// deletion may rely on having been recorded.
	persisted infrav1.TerraformRunStatus
	// stop ends the pass after the current sub-reconciler.
	stop bool
	// outcome is what the pass found of the run as a whole (report), which
	// summarize turns into Ready, Reconciling and Stalled.
	outcome outcome
}

func (r *TerraformRunReconciler) newPassState(run *infrav1.TerraformRun) *passState {
	eff := pipeline.Defaults(run, r.DefaultEngine, r.Config)
	cur := run.Status.Run
	return &passState{eff: eff, hash: pipeline.SpecHash(eff), active: cur != nil && !isTerminal(cur.Phase), persisted: *run.Status.DeepCopy()}
}

func isTerminal(p infrav1.RunPhase) bool {
	return p == infrav1.RunSucceeded || p == infrav1.RunFailed || p == infrav1.RunRejected
}
