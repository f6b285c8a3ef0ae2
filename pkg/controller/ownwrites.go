package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ownWrites remembers the resourceVersion of the manager's own last write
// of each TerraformRun, so that a pass does not start from a cached copy
// older than it. Such a pass would decide on what the manager has already
// changed, and its status patch, guarded by the stale resourceVersion, would
// be refused with 409 (6% of the status patches in make bench-checks, where
// a check's child finishing wakes the run before the cache has the status
// that started it). The update that brings the cache level changes only
// status, which the watch's predicates drop, so the pass looks again
// shortly (staleCacheRetry).
//
// resourceVersions are compared as Kubernetes 1.35 made them comparable
// (resourceversion.CompareResourceVersion). A write the cache has not shown
// within ownWriteWait is forgotten: the pass then goes on as before (an
// API server whose resourceVersions went back, an etcd restored from a
// backup, must not stop the run for ever).
type ownWrites struct {
	m sync.Map // types.NamespacedName → ownWrite
}

type ownWrite struct {
	rv string
	at time.Time
}

// ownWriteWait is how long a pass waits for the cache to show the
// manager's own write before it goes on from the cached copy anyway.
const ownWriteWait = 10 * time.Second

// wrote records the manager's write of obj, which holds the
// resourceVersion the API server returned.
func (w *ownWrites) wrote(obj client.Object, now time.Time) {
	if rv := obj.GetResourceVersion(); rv != "" {
		w.m.Store(client.ObjectKeyFromObject(obj), ownWrite{rv: rv, at: now})
	}
}

// behind says whether the cached obj is older than the manager's own last
// write of it (and for how long the write has waited to show); once the
// cache shows it, or after ownWriteWait, the write is forgotten.
func (w *ownWrites) behind(obj client.Object, now time.Time) bool {
	key := client.ObjectKeyFromObject(obj)
	v, ok := w.m.Load(key)
	if !ok {
		return false
	}
	last := v.(ownWrite)
	c, err := resourceversion.CompareResourceVersion(obj.GetResourceVersion(), last.rv)
	if err != nil || c >= 0 || now.Sub(last.at) > ownWriteWait {
		w.m.CompareAndDelete(key, v)
		return false
	}
	return true
}

// forget drops what is known of a TerraformRun that is gone.
func (w *ownWrites) forget(key types.NamespacedName) { w.m.Delete(key) }
