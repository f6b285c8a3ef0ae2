package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// shardResult is P6: runs spread over three shards and the default one,
// each shard a manager process of its own (its own user in the audit log)
// against one API server.
type shardResult struct {
	N      int
	Engine infrav1.EngineName
	// Shards by name: how many runs each handled (made any request for),
	// its writes, and its RSS once every run is Ready.
	Shards []shardFigures
	// RunsByMoreThanOne is the number of runs that more than one shard
	// made a request for (target 0); RunsByNone, those no shard did.
	RunsByMoreThanOne, RunsByNone int
	// ToReady is how long until every run was Ready.
	ToReady time.Duration
}

type shardFigures struct {
	Name          string
	Runs, Writes  int
	RSS, LiveHeap int64
}

// shards are the managers of P6: three named shards and the default one
// (--unsharded-only), which takes the runs without the label.
var shards = []struct{ name, label, flag string }{
	{"a", "a", "--shard=a"}, {"b", "b", "--shard=b"}, {"c", "c", "--shard=c"}, {"default", "", "--unsharded-only"},
}

// benchShards is P6 (BENCH_SHARDS=1, make bench-shards): n runs, a quarter
// in each shard, reconciled to Ready by four managers; each run's requests
// are attributed to shards by the audit log's user.
func benchShards(n int) (shardResult, error) {
	p, err := benchEngine()
	if err != nil {
		return shardResult{}, err
	}
	res := shardResult{N: n, Engine: p.name}
	tmp, cleanup, err := tempDir("opr8r-bench-shards-")
	if err != nil {
		return res, err
	}
	defer cleanup()
	const ns = "shards"
	pl, err := startPlane(tmp, true, ns)
	if err != nil {
		return res, err
	}
	defer pl.stop()
	env, auditLog, bcfg, c := pl.env, pl.auditLog, pl.cfg, pl.c
	ctx := context.Background()
	var mgrs []*exec.Cmd
	var pprofs []string
	for _, s := range shards {
		user, err := env.ControlPlane.AddUser(envtest.User{Name: "opr8r-shard-" + s.name, Groups: []string{"system:masters"}}, nil)
		if err != nil {
			return res, err
		}
		kc, _ := user.KubeConfig()
		kcPath := filepath.Join(tmp, s.name+".kubeconfig")
		_ = os.WriteFile(kcPath, kc, 0o600)
		m, pprof, err := startManager(kcPath, []string{s.flag})
		if err != nil {
			return res, err
		}
		defer stop(m)
		defer onInterrupt(func() { stop(m) })()
		mgrs, pprofs = append(mgrs, m), append(pprofs, pprof)
	}

	logf("P6 (N=%d, %s): %d runs over shards a, b, c and the default one", n, p.name, n)
	children, err := countChildren(ctx, bcfg, p.gvr, ns, n)
	if err != nil {
		return res, err
	}
	start := time.Now()
	if err := parallel(n, func(i int) error {
		run := p.run(fmt.Sprintf("s%05d", i), ns).Obj()
		run.UID = ""
		if l := shards[i%len(shards)].label; l != "" {
			run.Labels = map[string]string{infrav1.ShardLabel: l}
		}
		return c.Create(ctx, run)
	}); err != nil {
		return res, err
	}
	select {
	case err := <-children:
		if err != nil {
			return res, err
		}
	case <-time.After(10 * time.Minute):
		return res, fmt.Errorf("P6: the children were not all created within 10m")
	}
	if err := parallel(n, func(i int) error {
		run := &infrav1.TerraformRun{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("s%05d", i)}, run); err != nil {
			return err
		}
		return p.Finish(ctx, c, key(ns, run.Status.Run.ID))
	}); err != nil {
		return res, err
	}
	if err := waitFor(10*time.Minute, func() (bool, error) {
		time.Sleep(time.Second)
		l := &infrav1.TerraformRunList{}
		if err := c.List(ctx, l, client.InNamespace(ns)); err != nil {
			return false, err
		}
		ready := 0
		for _, r := range l.Items {
			if r.Status.Phase == string(infrav1.RunSucceeded) {
				ready++
			}
		}
		return ready == n, nil
	}); err != nil {
		return res, fmt.Errorf("P6: %w", err)
	}
	res.ToReady = time.Since(start)
	if err := waitRecorded(ctx, bcfg, p, ns, n); err != nil {
		return res, fmt.Errorf("P6: %w", err)
	}
	time.Sleep(5 * time.Second)
	for i, s := range shards {
		f := shardFigures{Name: s.name, RSS: rss(mgrs[i].Process.Pid)}
		if pprofs[i] != "" {
			if f.LiveHeap, err = liveHeap(pprofs[i]); err != nil {
				return res, err
			}
		}
		res.Shards = append(res.Shards, f)
	}
	settled(auditLog, func(path, _ string) (int, error) { return countWrites(path, "opr8r-shard-a") })
	byRun, writes, err := shardRequests(auditLog, ns)
	if err != nil {
		return res, err
	}
	handled := map[string]int{}
	for i := 0; i < n; i++ {
		users := byRun[fmt.Sprintf("s%05d", i)]
		switch {
		case len(users) == 0:
			res.RunsByNone++
		case len(users) > 1:
			res.RunsByMoreThanOne++
		}
		for u := range users {
			handled[u]++
		}
	}
	for i := range res.Shards {
		u := "opr8r-shard-" + res.Shards[i].Name
		res.Shards[i].Runs, res.Shards[i].Writes = handled[u], writes[u]
	}
	return res, nil
}

// shardRequests reads, from the audit log, which shard users made requests
// naming an object of each run in ns (the run, its children, their steps
// and Secrets, its Events: every name begins with the run's), and each
// shard user's writes in ns.
func shardRequests(path, ns string) (map[string]map[string]bool, map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	byRun, writes := map[string]map[string]bool{}, map[string]int{}
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<24)
	for s.Scan() {
		var e auditEvent
		if json.Unmarshal(s.Bytes(), &e) != nil || e.Stage != "ResponseComplete" || !strings.HasPrefix(e.User.Username, "opr8r-shard-") ||
			e.ObjectRef.Namespace != ns {
			continue
		}
		if isWrite(e.Verb) {
			writes[e.User.Username]++
		}
		if e.ObjectRef.Name == "" {
			continue // a list or watch names no run
		}
		run := e.ObjectRef.Name
		if i := strings.IndexAny(run, "-."); i > 0 {
			run = run[:i]
		}
		if byRun[run] == nil {
			byRun[run] = map[string]bool{}
		}
		byRun[run][e.User.Username] = true
	}
	return byRun, writes, s.Err()
}

func printShards(r shardResult) {
	fmt.Printf("\n== P6: %d runs, engine %s, over shards a, b, c and the default one (one manager process each)\n", r.N, r.Engine)
	fmt.Printf("P6 runs requested by more than one shard: %d (target 0); by none: %d; every run Ready after %.1fs\n", r.RunsByMoreThanOne, r.RunsByNone, r.ToReady.Seconds())
	sort.Slice(r.Shards, func(i, j int) bool { return r.Shards[i].Name < r.Shards[j].Name })
	for _, s := range r.Shards {
		fmt.Printf("P6 shard %-7s runs %5d, writes %6d, RSS %d MiB, live heap %d MiB\n", s.Name, s.Runs, s.Writes, s.RSS>>20, s.LiveHeap>>20)
	}
}
