package queue

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	activeRuns = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "opr8r_active_runs",
		Help: "Children holding one of the --max-active-runs slots.",
	})
	queuedRuns = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "opr8r_queued_runs",
		Help: "Runs waiting for a --max-active-runs slot, by kind (run, check).",
	}, []string{"kind"})
	shareHeldRuns = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "opr8r_share_held_runs",
		Help: "Runs waiting because their namespace holds its --max-active-runs-per-namespace share of the slots.",
	})
	queueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "opr8r_queue_wait_seconds",
		Help:    "Time runs waited for a --max-active-runs slot, by kind (run, check).",
		Buckets: prometheus.ExponentialBuckets(0.1, 3, 12),
	}, []string{"kind"})
)

// RegisterMetrics adds the queue's metrics to controller-runtime's
// registry, which the manager serves on its metrics endpoint.
func RegisterMetrics() {
	ctrlmetrics.Registry.MustRegister(activeRuns, queuedRuns, shareHeldRuns, queueWait)
}
