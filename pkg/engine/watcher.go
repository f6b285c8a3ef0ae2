package engine

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Availability records which engines' CRDs are served. The reconciler reads
// it; the Watcher writes it.
type Availability struct {
	mu      sync.RWMutex
	avail   map[infrav1.EngineName]bool
	checked bool
}

// Checked says whether the Watcher has looked for every engine's CRD
// once since the manager started; until then an engine not yet available
// is not known to be missing.
func (a *Availability) Checked() bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.checked
}

// MarkChecked records that every engine's CRD has been looked for once.
func (a *Availability) MarkChecked() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.checked = true
}

// NewAvailability returns an Availability with no engine available.
func NewAvailability() *Availability {
	return &Availability{avail: map[infrav1.EngineName]bool{}}
}

// IsAvailable says whether the engine's CRD is served and watched.
func (a *Availability) IsAvailable(n infrav1.EngineName) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.avail[n]
}

// Set records an engine's availability.
func (a *Availability) Set(n infrav1.EngineName, v bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.avail[n] = v
}

// Watcher is a manager runnable that waits for each enabled engine's
// CRD to be served, then watches the engine's children (only opr8r's, by
// label, through the manager's cache) and marks the engine available. An
// engine whose CRD is missing leaves its runs Stalled with reason
// EngineUnavailable instead of crashing the manager; installing the CRD
// later makes them continue. (Kueue's jobframework waits for APIs the same
// way.)
type Watcher struct {
	Manager    ctrl.Manager
	Cache      cache.Cache
	Mapper     meta.RESTMapper
	Client     client.Client
	Controller controller.Controller
	Engines    *Registry
	Available  *Availability
	Period     time.Duration
	// Wake receives every TerraformRun when an engine becomes available, so
	// runs stalled on it continue at once instead of at their next retry.
	Wake chan<- event.GenericEvent
}

// Start implements manager.Runnable.
func (w *Watcher) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("engine-watcher")
	period := w.Period
	if period == 0 {
		period = 5 * time.Second
	}
	watched := map[infrav1.EngineName]bool{}
	for {
		for _, e := range w.Engines.All() {
			if watched[e.Name()] {
				continue
			}
			gvk := e.ChildGVK()
			if _, err := w.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				if !meta.IsNoMatchError(err) {
					log.Error(err, "checking engine CRD", "engine", e.Name())
				}
				continue
			}
			src := source.Kind(w.Cache, e.NewChild(),
				handler.EnqueueRequestForOwner(w.Client.Scheme(), w.Mapper, &infrav1.TerraformRun{}, handler.OnlyControllerOwner()),
				predicate.ResourceVersionChangedPredicate{})
			if err := w.Controller.Watch(src); err != nil {
				log.Error(err, "watching engine children", "engine", e.Name())
				continue
			}
			if err := w.watchRelated(e); err != nil {
				log.Error(err, "watching engine step objects", "engine", e.Name())
				continue
			}
			if cp, ok := e.(ControllerProvider); ok && w.Manager != nil {
				if err := cp.SetupControllers(w.Manager); err != nil {
					log.Error(err, "starting engine controllers", "engine", e.Name())
					continue
				}
			}
			watched[e.Name()] = true
			w.Available.Set(e.Name(), true)
			log.Info("engine available", "engine", e.Name(), "kind", gvk.Kind)
			w.wakeRuns(ctx)
		}
		w.Available.MarkChecked()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(period):
		}
	}
}

// watchRelated watches an engine's related objects (Tekton TaskRuns and
// CustomRuns) and maps each to its TerraformRun by the run label they carry.
func (w *Watcher) watchRelated(e Engine) error {
	rl, ok := e.(RelatedLister)
	if !ok {
		return nil
	}
	for _, obj := range rl.RelatedTypes() {
		gvk, err := apiutil.GVKForObject(obj, w.Client.Scheme())
		if err != nil {
			return err
		}
		if _, err := w.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return err
		}
		src := source.Kind(w.Cache, obj, handler.EnqueueRequestsFromMapFunc(RunFromLabel), predicate.ResourceVersionChangedPredicate{})
		if err := w.Controller.Watch(src); err != nil {
			return err
		}
	}
	return nil
}

// RunFromLabel maps an object labelled with a run's name to that run.
func RunFromLabel(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[infrav1.RunNameLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}

func (w *Watcher) wakeRuns(ctx context.Context) {
	if w.Wake == nil {
		return
	}
	runs := &infrav1.TerraformRunList{}
	if err := w.Client.List(ctx, runs); err != nil {
		return
	}
	for i := range runs.Items {
		select {
		case w.Wake <- event.GenericEvent{Object: &runs.Items[i]}:
		case <-ctx.Done():
			return
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica's controller needs the watches.
func (w *Watcher) NeedLeaderElection() bool { return false }
