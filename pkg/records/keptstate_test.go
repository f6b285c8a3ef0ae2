package records_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/records"
)

// bigState is a terraform state of about size bytes: one resource whose
// attribute is random text, which gzip does not shrink much.
func bigState(t *testing.T, size int) []byte {
	t.Helper()
	raw := make([]byte, size*3/4)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	st := map[string]any{
		"version": 4, "terraform_version": "1.12.6", "serial": 7, "lineage": "0b7c6f5e-1d2a-4c3b-9e8f-000000000001",
		"outputs":   map[string]any{"blob": map[string]any{"value": base64.StdEncoding.EncodeToString(raw), "type": "string"}},
		"resources": []any{},
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestKeptStateRoundTrips: a kept state of 1.5 MiB (over the API server's
// 1 MiB limit on one Secret) is kept gzipped and chunked in Secrets owned
// by the TerraformRun, named after the child that kept it and labelled
// with the run and the kind; it reads back whole, survives the pruning
// and moving of its run's history records, and goes with DeleteRecord.
func TestKeptStateRoundTrips(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	owner := &metav1.OwnerReference{APIVersion: "infra.opr8r.io/v1alpha1", Kind: "TerraformRun", Name: "net", UID: "uid-net"}
	// The fake clientset serves no TerraformRunRecords: the log goes to a
	// Secret too.
	sec := &records.SecretStore{Client: cs, Owner: owner}
	r := &records.Router{Resources: sec, Secrets: sec}
	state := bigState(t, 3<<19)
	if len(state) < 3<<19 {
		t.Fatalf("the state is %d bytes, want over 1.5 MiB", len(state))
	}
	k := records.Key{Namespace: "team-a", Run: "net", RunID: "net-4", Step: "apply", Kind: records.KindErroredState}
	if err := r.Put(ctx, k, state); err != nil {
		t.Fatal(err)
	}
	if err := r.Put(ctx, records.Key{Namespace: "team-a", Run: "net", RunID: "net-4", Step: "apply", Kind: records.KindLog}, []byte("log")); err != nil {
		t.Fatal(err)
	}

	secrets, err := cs.CoreV1().Secrets("team-a").List(ctx, metav1.ListOptions{LabelSelector: records.KindLabel + "=errored.tfstate"})
	t.Logf("a state of %d bytes kept in %d Secrets", len(state), len(secrets.Items))
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) < 2 {
		t.Fatalf("%d Secrets; want the state in several chunks", len(secrets.Items))
	}
	for i, s := range secrets.Items {
		if !strings.HasPrefix(s.Name, "net-4-rec-") || s.Name != records.SecretName(k, i) {
			t.Errorf("Secret %s: want %s, named after the child that kept it", s.Name, records.SecretName(k, i))
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != owner.UID {
			t.Errorf("Secret %s is owned by %+v; want the TerraformRun", s.Name, s.OwnerReferences)
		}
		want := map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue, infrav1.ComponentLabel: records.ComponentRecord, infrav1.RunNameLabel: "net",
			records.RunIDLabel: "net-4", infrav1.StepLabel: "apply", records.KindLabel: "errored.tfstate"}
		if diff := cmp.Diff(want, s.Labels); diff != "" {
			t.Errorf("Secret %s's labels (-want +got):\n%s", s.Name, diff)
		}
		if n := len(s.Data["chunk"]); n > records.DefaultChunkSize {
			t.Errorf("Secret %s holds %d bytes", s.Name, n)
		}
	}

	got, err := r.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(state) {
		t.Fatalf("read back %d bytes, not the %d kept", len(got), len(state))
	}

	// The history's retention deletes the run's records, not its kept state.
	if gone, err := records.Prune(ctx, r, "team-a", "net", 9, nil); err != nil || len(gone) != 1 {
		t.Fatalf("Prune = %v, %v; want net-4's records pruned", gone, err)
	}
	recs, err := r.List(ctx, "team-a", "net")
	if err != nil {
		t.Fatal(err)
	}
	kept := records.KeptStates(recs, "")
	if len(recs) != 1 || len(kept) != 1 || kept[0].Key != k || kept[0].Size != int64(len(state)) {
		t.Fatalf("after pruning: %+v; want the kept state only", recs)
	}
	if diff := cmp.Diff([]types.UID{"uid-net"}, kept[0].Owners); diff != "" {
		t.Errorf("owners (-want +got):\n%s", diff)
	}

	if err := r.DeleteRecord(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx, k); !errors.Is(err, records.ErrNotFound) {
		t.Fatalf("after DeleteRecord: %v; want ErrNotFound", err)
	}
	left, _ := cs.CoreV1().Secrets("team-a").List(ctx, metav1.ListOptions{})
	if len(left.Items) != 0 {
		t.Errorf("%d Secrets left", len(left.Items))
	}
}

// TestKeptStateNeverInARecordResource: a state holds secrets, so it is
// never kept in a TerraformRunRecord, which editors and approvers read.
func TestKeptStateNeverInARecordResource(t *testing.T) {
	if records.InResource(records.KindErroredState) || records.History(records.KindErroredState) {
		t.Fatal("a kept state would go to TerraformRunRecords or leave with the history")
	}
	s := &records.ResourceStore{Client: fake.NewClientset()}
	err := s.Put(context.Background(), records.Key{Namespace: "ns", Run: "a", RunID: "a-1", Step: "apply", Kind: records.KindErroredState}, []byte("{}"))
	if err == nil || !strings.Contains(err.Error(), "kept in Secrets only") {
		t.Fatalf("Put = %v; want refused", err)
	}
}

// TestKeptStatesOrder: kept states come oldest first, and only they.
func TestKeptStatesOrder(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	rec := func(runID, step string, kind records.Kind, at time.Time) records.Record {
		return records.Record{Key: records.Key{Namespace: "ns", Run: "a", RunID: runID, Step: step, Kind: kind}, Stored: at}
	}
	cases := map[string]struct {
		in   []records.Record
		want []string
	}{
		"none":                 {in: []records.Record{rec("a-1", "apply", records.KindLog, t0)}},
		"by time":              {in: []records.Record{rec("a-9", "apply", records.KindErroredState, t0), rec("a-10", "destroy", records.KindErroredState, t0.Add(-time.Second))}, want: []string{"a-10", "a-9"}},
		"same time: by number": {in: []records.Record{rec("a-10", "apply", records.KindErroredState, t0), rec("a-9", "apply", records.KindErroredState, t0), rec("a-9", "apply", records.KindLog, t0)}, want: []string{"a-9", "a-10"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, r := range records.KeptStates(tc.in, "") {
				got = append(got, r.RunID)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("KeptStates (-want +got):\n%s", diff)
			}
		})
	}
}
