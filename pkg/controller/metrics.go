package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	runsStarted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opr8r_runs_started_total",
		Help: "Pipeline runs started, by engine and type (apply, destroy).",
	}, []string{"engine", "type"})
	runsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opr8r_runs_finished_total",
		Help: "Pipeline runs finished, by engine, type and phase.",
	}, []string{"engine", "type", "phase"})
	approvalWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "opr8r_approval_wait_seconds",
		Help:    "Time plans waited at the approval gate before opr8r approved them.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 10),
	})
	checksFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opr8r_checks_total",
		Help: "Scheduled checks finished, by result (NoDrift, Drifted, SourceChanged, NotApplied, Superseded, Failed).",
	}, []string{"result"})
	driftDetected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opr8r_drift_detected_total",
		Help: "Checks that found drift, by namespace and TerraformRun (the series goes with the TerraformRun).",
	}, []string{"namespace", "name"})
	ownWriteWaits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "opr8r_stale_cache_waits_total",
		Help: "Passes put off because the cached TerraformRun was older than the manager's own last write of it (a pass from it would be refused with 409).",
	})
)

// RegisterMetrics adds opr8r's metrics to controller-runtime's registry,
// which the manager serves on its metrics endpoint.
func RegisterMetrics() {
	ctrlmetrics.Registry.MustRegister(runsStarted, runsFinished, approvalWait, checksFinished, driftDetected, ownWriteWaits)
}
