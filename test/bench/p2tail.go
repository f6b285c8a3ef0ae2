package main

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// P2's tail, taken apart (issue 33: cache lag, the queue, GC, or the API
// server's own CPU?). Per event the bench times its own status write of
// the child (the API server and etcd, before the manager can know); the
// manager's metrics, scraped before and after the events, give the
// reconciler's queue wait and reconcile time as histograms, and Go's GC
// cycles and longest pause in that window.

// metricsSnapshot holds the samples of a Prometheus text exposition: name
// with its sorted labels, to value.
type metricsSnapshot map[string]float64

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$`)

func scrapeMetrics(addr string) (metricsSnapshot, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	out := metricsSnapshot{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := sampleLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		out[m[1]+m[2]] = v
	}
	return out, sc.Err()
}

// histQuantile is a quantile of a histogram's change between two
// snapshots, as the upper bound of the bucket it falls in (what
// Prometheus' buckets allow), with the number of observations.
func histQuantile(before, after metricsSnapshot, name, labels string, q float64) (float64, float64) {
	type bucket struct{ le, n float64 }
	var bs []bucket
	prefix := name + "_bucket{" + labels
	for k, v := range after {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		i := strings.Index(k, `le="`)
		if i < 0 {
			continue
		}
		leS := k[i+4:]
		leS = leS[:strings.IndexByte(leS, '"')]
		le, err := strconv.ParseFloat(leS, 64)
		if leS == "+Inf" {
			le, err = math.Inf(1), nil
		}
		if err != nil {
			continue
		}
		bs = append(bs, bucket{le, v - before[k]})
	}
	if len(bs) == 0 {
		return -1, 0
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	total := bs[len(bs)-1].n
	if total == 0 {
		return 0, 0
	}
	for _, b := range bs {
		if b.n >= q*total && !math.IsInf(b.le, 1) {
			return b.le, total
		}
	}
	return -1, total // past the last bucket
}

// p2Breakdown is what the bench prints of P2's parts.
type p2Breakdown struct {
	// Write is the bench's own write of each event's child status.
	Write []time.Duration
	// Metrics says whether the manager's metrics were read. Queue and
	// Reconcile: p50 and p99 bucket bounds, seconds (-1: past the last
	// bucket, or no such histogram), and observations.
	Metrics                          bool
	QueueP50, QueueP99, QueueN       float64
	ReconcileP50, ReconcileP99, RecN float64
	GCCycles                         float64
	GCMaxPause                       float64
}

func breakdown(before, after metricsSnapshot, write []time.Duration) p2Breakdown {
	b := p2Breakdown{Write: write, Metrics: true}
	const q = `controller="terraformrun",name="terraformrun",`
	b.QueueP50, b.QueueN = histQuantile(before, after, "workqueue_queue_duration_seconds", q, .5)
	b.QueueP99, _ = histQuantile(before, after, "workqueue_queue_duration_seconds", q, .99)
	const r = `controller="terraformrun",`
	b.ReconcileP50, b.RecN = histQuantile(before, after, "controller_runtime_reconcile_time_seconds", r, .5)
	b.ReconcileP99, _ = histQuantile(before, after, "controller_runtime_reconcile_time_seconds", r, .99)
	b.GCCycles = after["go_gc_duration_seconds_count"] - before["go_gc_duration_seconds_count"]
	b.GCMaxPause = after[`go_gc_duration_seconds{quantile="1"}`]
	return b
}

// tailShare says, of the events slower than limit, how many had the
// bench's own write take at least half of their time.
func tailShare(total, write []time.Duration, limit time.Duration) (slow, writeBound int) {
	for i := range total {
		if total[i] > limit {
			slow++
			if i < len(write) && 2*write[i] >= total[i] {
				writeBound++
			}
		}
	}
	return slow, writeBound
}

func printP2Breakdown(total []time.Duration, b p2Breakdown) {
	if len(b.Write) == 0 {
		return
	}
	rest := make([]time.Duration, len(total))
	for i := range total {
		rest[i] = total[i] - b.Write[i]
	}
	fmt.Printf("P2 parts: the bench's own child status write p50 %dms, p95 %dms, p99 %dms; the rest (the manager's watch, queue, reconcile and status patch, the bench's watch) p50 %dms, p95 %dms, p99 %dms\n",
		pct(b.Write, .5).Milliseconds(), pct(b.Write, .95).Milliseconds(), pct(b.Write, .99).Milliseconds(),
		pct(rest, .5).Milliseconds(), pct(rest, .95).Milliseconds(), pct(rest, .99).Milliseconds())
	slow, wb := tailShare(total, b.Write, 100*time.Millisecond)
	fmt.Printf("P2 tail: %d events over 100ms, %d of them with the bench's own write at least half of their time\n", slow, wb)
	if b.Metrics {
		fmt.Printf("P2 manager (its metrics, bucket bounds): queue wait p50 <= %gs, p99 <= %gs over %.0f items; reconcile p50 <= %gs, p99 <= %gs over %.0f reconciles; %.0f GC cycles, longest recent pause %.1fms\n",
			b.QueueP50, b.QueueP99, b.QueueN, b.ReconcileP50, b.ReconcileP99, b.RecN, b.GCCycles, 1000*b.GCMaxPause)
	}
}
