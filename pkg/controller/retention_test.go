package controller

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/records"
)

// memStore is a records store in memory, which can write restored copies
// (records.Restorable), stamped with now.
type memStore struct {
	mu       sync.Mutex
	now      func() time.Time
	restored bool
	parent   *memStore
	recs     map[records.Key]memRecord
}

type memRecord struct {
	data     []byte
	stored   time.Time
	restored bool
}

func newMemStore(now func() time.Time) *memStore {
	return &memStore{now: now, recs: map[records.Key]memRecord{}}
}

func (m *memStore) root() *memStore {
	if m.parent != nil {
		return m.parent
	}
	return m
}

func (m *memStore) Put(_ context.Context, k records.Key, data []byte) error {
	s := m.root()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs[k] = memRecord{data: data, stored: s.now(), restored: m.restored}
	return nil
}

func (m *memStore) Get(_ context.Context, k records.Key) ([]byte, error) {
	s := m.root()
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[k]
	if !ok {
		return nil, fmt.Errorf("%s: %w", k, records.ErrNotFound)
	}
	return r.data, nil
}

func (m *memStore) List(_ context.Context, namespace, run string) ([]records.Record, error) {
	s := m.root()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []records.Record
	for k, r := range s.recs {
		if k.Namespace == namespace && k.Run == run {
			out = append(out, records.Record{Key: k, Size: int64(len(r.data)), Stored: r.stored, Restored: r.restored})
		}
	}
	records.SortRecords(out)
	return out, nil
}

func (m *memStore) Delete(_ context.Context, namespace, run string, runIDs ...string) error {
	s := m.root()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.recs {
		if k.Namespace == namespace && k.Run == run && (len(runIDs) == 0 || slices.Contains(runIDs, k.RunID)) {
			delete(s.recs, k)
		}
	}
	return nil
}

func (m *memStore) Restoring(*metav1.OwnerReference) records.Store {
	return &memStore{parent: m.root(), restored: true}
}

func (m *memStore) ExpireRestored(_ context.Context, namespace, run string, before time.Time) (int, error) {
	s := m.root()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, r := range s.recs {
		if k.Namespace == namespace && k.Run == run && r.restored && r.stored.Before(before) {
			delete(s.recs, k)
			n++
		}
	}
	return n, nil
}

// keys lists a store's records as "run id/kind".
func (m *memStore) keys() []string {
	s := m.root()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, r := range s.recs {
		v := k.RunID + "/" + string(k.Kind)
		if r.restored {
			v += " (restored)"
		}
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// historyOf is a run whose history keeps runs numbered from..to, newest
// first, and keeps keep of them.
func historyOf(name string, keep int32, from, to int64) *infrav1.TerraformRun {
	run := aRun(name)
	run.Spec.History.KeepRecords = ptr.To(keep)
	for n := to; n >= from; n-- {
		run.Status.History = append(run.Status.History, infrav1.RunRecord{ID: fmt.Sprintf("%s-%d", name, n), Number: n, Type: infrav1.RunApply})
	}
	return run
}

// putRun keeps every kind of record of run id through the router, as the
// steps do.
func putRun(t *testing.T, s records.Store, run, runID string) {
	t.Helper()
	for _, kind := range records.Kinds {
		if err := s.Put(context.Background(), records.Key{Namespace: "ns", Run: run, RunID: runID, Step: "plan", Kind: kind}, []byte(runID+" "+string(kind))); err != nil {
			t.Fatal(err)
		}
	}
}

// reconcileRetention prunes, in both of the cluster's stores (the
// TerraformRunRecords and the Secrets, behind records.Router), the records
// of the runs that left a full history, and only those.
func TestRetentionPrunesBothStores(t *testing.T) {
	r, _ := newReconciler(t, &fakeEngine{})
	now := func() time.Time { return t0 }
	resources, secrets := newMemStore(now), newMemStore(now)
	r.Records = &records.Router{Resources: resources, Secrets: secrets}
	for n := 1; n <= 4; n++ {
		putRun(t, r.Records, "p", fmt.Sprintf("p-%d", n))
	}
	// p-0's log, kept in a Secret before TerraformRunRecords.
	if err := secrets.Put(context.Background(), records.Key{Namespace: "ns", Run: "p", RunID: "p-0", Step: "plan", Kind: records.KindLog}, []byte("old")); err != nil {
		t.Fatal(err)
	}
	run := historyOf("p", 2, 3, 4)
	if _, err := r.reconcileRetention(context.Background(), run, r.newPassState(run)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(resources.keys(), ","); got != "p-3/log,p-3/plan.json,p-3/plan.txt,p-4/log,p-4/plan.json,p-4/plan.txt" {
		t.Errorf("TerraformRunRecords left: %s", got)
	}
	if got := strings.Join(secrets.keys(), ","); got != "p-3/plan-sensitive.json,p-4/plan-sensitive.json" {
		t.Errorf("Secrets left: %s", got)
	}
}

// With an object store, the records of the runs in the history move there
// from both of the cluster's stores; brought back on request, each comes
// back into the store of its kind, as a copy that goes after RestoreTTL.
func TestRetentionMovesAndRestoresByKind(t *testing.T) {
	r, _ := newReconciler(t, &fakeEngine{})
	clock := t0
	r.Now = func() time.Time { return clock }
	now := func() time.Time { return clock }
	resources, secrets, objects := newMemStore(now), newMemStore(now), newMemStore(now)
	r.Records, r.ObjectStore, r.RestoreTTL = &records.Router{Resources: resources, Secrets: secrets}, objects, time.Minute
	putRun(t, r.Records, "m", "m-1")
	putRun(t, r.Records, "m", "m-2")
	putRun(t, r.Records, "m", "m-3") // running: not in the history yet
	// m-1's log was kept before TerraformRunRecords, in a Secret.
	_ = resources.Delete(context.Background(), "ns", "m", "m-1")
	if err := secrets.Put(context.Background(), records.Key{Namespace: "ns", Run: "m", RunID: "m-1", Step: "plan", Kind: records.KindLog}, []byte("m-1 log")); err != nil {
		t.Fatal(err)
	}
	run := historyOf("m", 10, 1, 2)
	ctx := context.Background()
	if _, err := r.reconcileRetention(ctx, run, r.newPassState(run)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(objects.keys(), ","); got != "m-1/log,m-1/plan-sensitive.json,m-2/log,m-2/plan-sensitive.json,m-2/plan.json,m-2/plan.txt" {
		t.Errorf("in the object store: %s", got)
	}
	if got := strings.Join(append(resources.keys(), secrets.keys()...), ","); got != "m-3/log,m-3/plan.json,m-3/plan.txt,m-3/plan-sensitive.json" {
		t.Errorf("left in the cluster: %s; want only the running m-3's", got)
	}

	run.Annotations = map[string]string{infrav1.RecordsRequestAnnotation: "m-2@" + t0.Format(time.RFC3339)}
	res, err := r.reconcileRetention(ctx, run, r.newPassState(run))
	if err != nil || res.RequeueAfter != time.Minute {
		t.Fatalf("restore: %+v, %v", res, err)
	}
	if got := strings.Join(resources.keys(), ","); got != "m-2/log (restored),m-2/plan.json (restored),m-2/plan.txt (restored),m-3/log,m-3/plan.json,m-3/plan.txt" {
		t.Errorf("TerraformRunRecords after the restore: %s", got)
	}
	if got := strings.Join(secrets.keys(), ","); got != "m-2/plan-sensitive.json (restored),m-3/plan-sensitive.json" {
		t.Errorf("Secrets after the restore: %s", got)
	}
	clock = clock.Add(2 * time.Minute)
	if _, err := r.reconcileRetention(ctx, run, r.newPassState(run)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(append(resources.keys(), secrets.keys()...), ","); got != "m-3/log,m-3/plan.json,m-3/plan.txt,m-3/plan-sensitive.json" {
		t.Errorf("after the restore's time: %s; want the copies gone", got)
	}
}

// Checks are counted apart from runs: a hundred checks after an apply
// leave its history record and its records (log, plans) where they are,
// and the records of the checks that left the history are pruned.
func TestChecksNeverPushTheLastApplyOut(t *testing.T) {
	keep := historyLimits{runs: 2, checks: 3, pinned: "c-1"}
	var h []infrav1.RunRecord
	h = historyWith(h, infrav1.RunRecord{ID: "c-1", Number: 1, Type: infrav1.RunApply, Result: infrav1.RunSucceeded}, keep)
	for n := int64(2); n <= 101; n++ {
		h = historyWith(h, infrav1.RunRecord{ID: fmt.Sprintf("c-drift-%d", n), Number: n, Type: infrav1.RunDrift}, keep)
	}
	var ids []string
	for _, r := range h {
		ids = append(ids, r.ID)
	}
	if got := strings.Join(ids, ","); got != "c-drift-101,c-drift-100,c-drift-99,c-1" {
		t.Fatalf("after 100 checks the history is %s; want the 3 newest checks and the apply", got)
	}
	// Runs are counted apart too; the pinned apply is the newest one again.
	keep.pinned = "c-103"
	for n := int64(102); n <= 103; n++ {
		h = historyWith(h, infrav1.RunRecord{ID: fmt.Sprintf("c-%d", n), Number: n, Type: infrav1.RunApply}, keep)
	}
	ids = nil
	for _, r := range h {
		ids = append(ids, r.ID)
	}
	if got := strings.Join(ids, ","); got != "c-103,c-102,c-drift-101,c-drift-100,c-drift-99" {
		t.Fatalf("after two more applies the history is %s; want 2 applies and 3 checks", got)
	}

	r, _ := newReconciler(t, &fakeEngine{})
	now := func() time.Time { return t0 }
	resources, secrets := newMemStore(now), newMemStore(now)
	r.Records = &records.Router{Resources: resources, Secrets: secrets}
	putRun(t, r.Records, "c", "c-1")
	for n := 2; n <= 5; n++ {
		putRun(t, r.Records, "c", fmt.Sprintf("c-drift-%d", n))
	}
	run := aRun("c")
	run.Spec.History.KeepRecords, run.Spec.History.KeepChecks = ptr.To[int32](2), ptr.To[int32](3)
	run.Status.LastApplied = &infrav1.AppliedRevision{RunID: "c-1"}
	run.Status.History = []infrav1.RunRecord{
		{ID: "c-drift-5", Number: 5, Type: infrav1.RunDrift}, {ID: "c-drift-4", Number: 4, Type: infrav1.RunDrift},
		{ID: "c-drift-3", Number: 3, Type: infrav1.RunDrift}, {ID: "c-1", Number: 1, Type: infrav1.RunApply},
	}
	if _, err := r.reconcileRetention(context.Background(), run, r.newPassState(run)); err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, k := range append(resources.keys(), secrets.keys()...) {
		left[strings.Split(k, "/")[0]] = true
	}
	if !left["c-1"] || left["c-drift-2"] || !left["c-drift-3"] || !left["c-drift-5"] {
		t.Fatalf("records left: %v; want the apply's and the three newest checks', not c-drift-2's", left)
	}
}
