package records_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/pkg/records/s3"
	"github.com/opr8r/opr8r/test/envtestutil"
)

var (
	kube kubernetes.Interface
	// testEnv and restConfig are envtest's, with opr8r's CRDs (the
	// TerraformRunRecord's).
	testEnv    *envtest.Environment
	restConfig *rest.Config
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") != "" {
		testEnv = &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(envtestutil.RepoRoot(), "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
		cfg, err := testEnv.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, "starting envtest:", err)
			return 1
		}
		defer func() { _ = testEnv.Stop() }()
		restConfig = cfg
		kube = kubernetes.NewForConfigOrDie(cfg)
	}
	return m.Run()
}

// startS3 runs versitygw, a real S3-compatible server, on 127.0.0.1.
func startS3(t *testing.T) *envtestutil.S3Server {
	t.Helper()
	srv, err := envtestutil.StartS3(t.TempDir(), "opr8r-records")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

func s3store(t *testing.T, srv *envtestutil.S3Server, key []byte) *s3.Store {
	t.Helper()
	st, err := s3.New(s3.Config{Endpoint: srv.Endpoint, Insecure: true, Bucket: srv.Bucket, Prefix: "opr8r/",
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

func aesKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

var nsN int

func namespace(t *testing.T) string {
	t.Helper()
	if kube == nil {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with make test")
	}
	nsN++
	ns := fmt.Sprintf("rec-%d-%d", time.Now().UnixNano()%100000, nsN)
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// bigPlan is a readable plan of n bytes, like terraform's: many resources
// with distinct attributes, so it does not compress to nothing.
func bigPlan(n int) []byte {
	var b bytes.Buffer
	b.WriteString("Terraform will perform the following actions:\n\n")
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "  # terraform_data.item[%d] will be created\n  + resource \"terraform_data\" \"item\" {\n      + id     = (known after apply)\n      + input  = \"%x-%d\"\n    }\n\n", i, i*7919, i*i)
	}
	b.Truncate(n)
	return b.Bytes()
}

// storeCases runs the same scenarios against both stores.
func storeCases(t *testing.T, newStore func(t *testing.T) (records.Store, string)) {
	ctx := context.Background()
	t.Run("a 5 MB plan, a log and a JSON plan round-trip whole", func(t *testing.T) {
		s, ns := newStore(t)
		plan := bigPlan(5 << 20)
		random := make([]byte, 3<<20) // incompressible: many chunks
		_, _ = rand.Read(random)
		puts := map[records.Key][]byte{
			{Namespace: ns, Run: "big", RunID: "big-1", Step: "plan", Kind: records.KindPlanText}: plan,
			{Namespace: ns, Run: "big", RunID: "big-1", Step: "plan", Kind: records.KindPlanJSON}: random,
			{Namespace: ns, Run: "big", RunID: "big-1", Step: "plan", Kind: records.KindLog}:      []byte("opr8r-step: plan: +1 ~0 -0\n"),
		}
		for k, v := range puts {
			if err := s.Put(ctx, k, v); err != nil {
				t.Fatalf("put %s: %v", k, err)
			}
		}
		for k, v := range puts {
			got, err := s.Get(ctx, k)
			if err != nil {
				t.Fatalf("get %s: %v", k, err)
			}
			if !bytes.Equal(got, v) {
				t.Fatalf("get %s: %d bytes back, want the %d put", k, len(got), len(v))
			}
		}
		recs, err := s.List(ctx, ns, "big")
		if err != nil || len(recs) != 3 || recs[0].Kind != records.KindLog || recs[2].Size != 5<<20 {
			t.Fatalf("list = %+v, %v; want log, plan.json, plan.txt (5 MiB)", recs, err)
		}
	})
	t.Run("a rewrite replaces the record, shorter or longer", func(t *testing.T) {
		s, ns := newStore(t)
		k := records.Key{Namespace: ns, Run: "re", RunID: "re-1", Step: "plan", Kind: records.KindPlanJSON}
		long := make([]byte, 2<<20)
		_, _ = rand.Read(long)
		for _, v := range [][]byte{long, []byte("short"), long[:1<<20]} {
			if err := s.Put(ctx, k, v); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, k)
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("after a rewrite of %d bytes: got %d bytes, %v", len(v), len(got), err)
			}
		}
	})
	t.Run("missing, deleted and pruned records are not found", func(t *testing.T) {
		s, ns := newStore(t)
		for i := 1; i <= 4; i++ {
			for _, step := range []string{"plan", "apply"} {
				k := records.Key{Namespace: ns, Run: "h", RunID: fmt.Sprintf("h-%d", i), Step: step, Kind: records.KindLog}
				if err := s.Put(ctx, k, []byte(k.String())); err != nil {
					t.Fatal(err)
				}
			}
		}
		other := records.Key{Namespace: ns, Run: "other", RunID: "other-1", Step: "plan", Kind: records.KindLog}
		if err := s.Put(ctx, other, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, records.Key{Namespace: ns, Run: "h", RunID: "h-9", Step: "plan", Kind: records.KindLog}); !errors.Is(err, records.ErrNotFound) {
			t.Fatalf("a record never written: err %v, want ErrNotFound", err)
		}
		// h-1 is pinned (the last successful apply, older than checks
		// h-2 and h-3); h-4 runs now, past the newest recorded run.
		gone, err := records.Prune(ctx, s, ns, "h", 3, map[string]bool{"h-1": true, "h-3": true})
		if err != nil || strings.Join(gone, ",") != "h-2" {
			t.Fatalf("prune up to 3, keeping h-1 and h-3, deleted %v (%v), want h-2", gone, err)
		}
		gone, err = records.Prune(ctx, s, ns, "h", 3, map[string]bool{"h-3": true})
		if err != nil || strings.Join(gone, ",") != "h-1" {
			t.Fatalf("prune up to 3, keeping h-3, deleted %v (%v), want h-1", gone, err)
		}
		if err := s.Delete(ctx, ns, "h", "h-4"); err != nil {
			t.Fatal(err)
		}
		recs, _ := s.List(ctx, ns, "h")
		var ids []string
		for _, r := range recs {
			ids = append(ids, r.RunID+"/"+r.Step)
		}
		if strings.Join(ids, ",") != "h-3/apply,h-3/plan" {
			t.Fatalf("left %v, want h-3's two records", ids)
		}
		if err := s.Delete(ctx, ns, "h"); err != nil {
			t.Fatal(err)
		}
		if recs, _ := s.List(ctx, ns, "h"); len(recs) != 0 {
			t.Fatalf("after deleting all: %+v", recs)
		}
		if _, err := s.Get(ctx, other); err != nil {
			t.Fatalf("another TerraformRun's record went too: %v", err)
		}
	})
	t.Run("keys that are not names are refused", func(t *testing.T) {
		s, ns := newStore(t)
		for _, k := range []records.Key{
			{Namespace: ns, Run: "../x", RunID: "x-1", Step: "plan", Kind: records.KindLog},
			{Namespace: ns, Run: "x", RunID: "x-1", Step: "plan", Kind: "secrets"},
			{Namespace: ns, Run: "x", RunID: "X-1", Step: "plan", Kind: records.KindLog},
		} {
			if err := s.Put(ctx, k, []byte("x")); err == nil {
				t.Fatalf("put %s was accepted", k)
			}
		}
	})
}

func TestSecretStore(t *testing.T) {
	storeCases(t, func(t *testing.T) (records.Store, string) {
		return &records.SecretStore{Client: kube}, namespace(t)
	})
}

func TestResourceStore(t *testing.T) {
	storeCases(t, func(t *testing.T) (records.Store, string) {
		return &records.ResourceStore{Client: kube}, namespace(t)
	})
}

func TestRouter(t *testing.T) {
	storeCases(t, func(t *testing.T) (records.Store, string) {
		return records.NewRouter(kube, nil), namespace(t)
	})
}

func TestS3Store(t *testing.T) {
	srv := startS3(t)
	storeCases(t, func(t *testing.T) (records.Store, string) {
		return s3store(t, srv, aesKey(t)), fmt.Sprintf("ns-%d", time.Now().UnixNano()%1000000)
	})
}

// The Secrets of a 5 MB plan: several chunks, each under the API
// server's limit, owned by the TerraformRun, labelled for the run.
func TestSecretStoreChunksAndOwner(t *testing.T) {
	ns := namespace(t)
	owner := &metav1.OwnerReference{APIVersion: "infra.opr8r.io/v1alpha1", Kind: "TerraformRun", Name: "big", UID: "0000-big"}
	s := &records.SecretStore{Client: kube, Owner: owner, ChunkSize: 256 << 10}
	k := records.Key{Namespace: ns, Run: "big", RunID: "big-7", Step: "plan", Kind: records.KindPlanText}
	plan := bigPlan(5 << 20)
	if err := s.Put(context.Background(), k, plan); err != nil {
		t.Fatal(err)
	}
	l, err := kube.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "infra.opr8r.io/component=record,infra.opr8r.io/run-id=big-7"})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) < 2 {
		t.Fatalf("a 5 MB plan is in %d Secret(s); want it chunked", len(l.Items))
	}
	total := 0
	for _, sec := range l.Items {
		total += len(sec.Data["chunk"])
		if len(sec.Data["chunk"]) > 256<<10 || len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != owner.UID {
			t.Fatalf("Secret %s: %d bytes, owners %+v", sec.Name, len(sec.Data["chunk"]), sec.OwnerReferences)
		}
		if bytes.Contains(sec.Data["chunk"], []byte("terraform_data.item[17]")) {
			t.Fatalf("Secret %s holds the plan uncompressed", sec.Name)
		}
	}
	t.Logf("a %d-byte plan is stored gzipped in %d Secrets, %d bytes in all", len(plan), len(l.Items), total)
}

// Objects hold nothing in clear: not the plan's text, and not a sensitive
// value in it; another key cannot read them; Expire enforces retention.
func TestS3StoreEncryptsAndExpires(t *testing.T) {
	srv := startS3(t)
	ctx := context.Background()
	key := aesKey(t)
	s := s3store(t, srv, key)
	const marker = "SENSITIVE-PLAN-VALUE-4e1f"
	k := records.Key{Namespace: "team-a", Run: "db", RunID: "db-1", Step: "plan", Kind: records.KindPlanJSON}
	plan := append(bigPlan(64<<10), []byte(`{"after":{"password":"`+marker+`"}}`)...)
	if err := s.Put(ctx, k, plan); err != nil {
		t.Fatal(err)
	}
	raw, err := s.Raw(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(marker)) || bytes.Contains(raw, []byte("terraform_data")) {
		t.Fatal("the object holds the plan in clear")
	}
	// And on the server's disk.
	_ = filepath.Walk(srv.Dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(marker)) {
				t.Errorf("%s on the server's disk holds the plan in clear", p)
			}
		}
		return nil
	})
	if _, err := s3store(t, srv, aesKey(t)).Get(ctx, k); err == nil || !strings.Contains(err.Error(), "does not decrypt") {
		t.Fatalf("another key read the record: %v", err)
	}
	if err := s.Put(ctx, records.Key{Namespace: "team-a", Run: "gone", RunID: "gone-1", Step: "plan", Kind: records.KindLog}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	n, err := s.Expire(ctx, time.Now().Add(-time.Hour), func(ns, run string) bool { return run == "gone" })
	if err != nil || n != 1 {
		t.Fatalf("expire of a deleted TerraformRun's records: %d, %v; want 1", n, err)
	}
	if _, err := s.Get(ctx, k); err != nil {
		t.Fatalf("a record inside the retention period went: %v", err)
	}
	n, err = s.Expire(ctx, time.Now().Add(time.Minute), nil)
	if err != nil || n != 1 {
		t.Fatalf("expire past the retention period: %d, %v; want 1", n, err)
	}
	if _, err := s.Get(ctx, k); !errors.Is(err, records.ErrNotFound) {
		t.Fatalf("an expired record is still there: %v", err)
	}
}
