package manager

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// What the Go runtime reports of its heap (runtime/metrics).
const (
	heapFree    = "/memory/classes/heap/free:bytes"    // free, still mapped: counts in RSS
	heapObjects = "/memory/classes/heap/objects:bytes" // objects, live or not yet swept
)

// MemoryReleaser returns the Go heap's free pages to the system after a
// burst. Go keeps the pages a burst freed mapped (a restart that lists
// every run, thousands of runs started at once) and gives them back slowly,
// a little at a time, down to about its next collection's goal: a manager
// at rest with 5,000 finished runs held twice its live heap and more in RSS
// (docs/performance.md, P4).
//
// Every Interval it reads the runtime's figures (no collection) and, when
// the free pages are at least MinFree and at least a quarter of the heap's
// objects, calls debug.FreeOSMemory: one collection and the free pages
// returned. A busy manager reuses its free pages at once, so this happens
// after bursts, not under steady work; each release is counted in
// opr8r_memory_releases_total.
type MemoryReleaser struct {
	Interval time.Duration
	MinFree  uint64

	// release is debug.FreeOSMemory (tests count it).
	release func()
	// isDue replaces due in tests.
	isDue func() (free, objects uint64, ok bool)
}

var memoryReleases = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "opr8r_memory_releases_total",
	Help: "Times the manager returned its heap's free pages to the system after a burst (--memory-release-interval).",
})

func init() { crmetrics.Registry.MustRegister(memoryReleases) }

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica releases its own memory.
func (MemoryReleaser) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable.
func (r MemoryReleaser) Start(ctx context.Context) error {
	if r.Interval <= 0 {
		return nil
	}
	log := ctrl.Log.WithName("memory")
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if free, objects, ok := r.tick(); ok {
				log.V(1).Info("returned the heap's free pages to the system", "freeMiB", free>>20, "objectsMiB", objects>>20)
			}
		}
	}
}

// due reads the heap's free and object bytes and says whether to release.
// tick returns the heap's free pages when that is due, and says so.
func (r MemoryReleaser) tick() (free, objects uint64, released bool) {
	due := r.due
	if r.isDue != nil {
		due = r.isDue
	}
	free, objects, ok := due()
	if ok {
		r.releaseNow()
		memoryReleases.Inc()
	}
	return free, objects, ok
}

func (r MemoryReleaser) due() (free, objects uint64, ok bool) {
	s := []metrics.Sample{{Name: heapFree}, {Name: heapObjects}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return 0, 0, false // a runtime without these figures
	}
	free, objects = s[0].Value.Uint64(), s[1].Value.Uint64()
	return free, objects, r.worthIt(free, objects)
}

// worthIt says whether free pages beside a heap of objects are worth a
// collection to return: at least MinFree, and a quarter of the objects.
func (r MemoryReleaser) worthIt(free, objects uint64) bool {
	return free >= r.MinFree && free >= objects/4
}

func (r MemoryReleaser) releaseNow() {
	if r.release != nil {
		r.release()
		return
	}
	debug.FreeOSMemory()
}
