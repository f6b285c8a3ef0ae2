package main

import (
	"testing"
	"time"
)

func TestHistQuantile(t *testing.T) {
	const l = `controller="terraformrun",name="terraformrun",`
	before := metricsSnapshot{
		`workqueue_queue_duration_seconds_bucket{` + l + `le="0.001"}`: 10,
		`workqueue_queue_duration_seconds_bucket{` + l + `le="0.01"}`:  10,
		`workqueue_queue_duration_seconds_bucket{` + l + `le="0.1"}`:   10,
		`workqueue_queue_duration_seconds_bucket{` + l + `le="+Inf"}`:  10,
	}
	// 100 items in the window: 90 under 1 ms, 8 under 10 ms, 1 under
	// 100 ms, 1 beyond.
	after := metricsSnapshot{
		`workqueue_queue_duration_seconds_bucket{` + l + `le="0.001"}`:                        100,
		`workqueue_queue_duration_seconds_bucket{` + l + `le="0.01"}`:                         108,
		`workqueue_queue_duration_seconds_bucket{` + l + `le="0.1"}`:                          109,
		`workqueue_queue_duration_seconds_bucket{` + l + `le="+Inf"}`:                         110,
		`workqueue_queue_duration_seconds_bucket{controller="other",name="other",le="0.001"}`: 5000,
	}
	for _, tc := range []struct {
		q     float64
		want  float64
		wantN float64
	}{{.5, 0.001, 100}, {.9, 0.001, 100}, {.95, 0.01, 100}, {.99, 0.1, 100}, {1, -1, 100}} {
		got, n := histQuantile(before, after, "workqueue_queue_duration_seconds", l, tc.q)
		if got != tc.want || n != tc.wantN {
			t.Errorf("q%.2f: %g over %g, want %g over %g", tc.q, got, n, tc.want, tc.wantN)
		}
	}
	if got, n := histQuantile(before, after, "controller_runtime_reconcile_time_seconds", `controller="terraformrun",`, .99); got != -1 || n != 0 {
		t.Errorf("a histogram the manager does not serve: %g over %g, want -1 over 0", got, n)
	}
}

func TestTailShare(t *testing.T) {
	ms := time.Millisecond
	total := []time.Duration{20 * ms, 150 * ms, 300 * ms, 120 * ms}
	write := []time.Duration{5 * ms, 100 * ms, 10 * ms, 60 * ms}
	if slow, wb := tailShare(total, write, 100*ms); slow != 3 || wb != 2 {
		t.Errorf("slow %d, write-bound %d; want 3, 2", slow, wb)
	}
}
