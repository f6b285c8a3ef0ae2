package records_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/test/envtestutil"
)

// crClient is a client of opr8r's kinds, to look at and tamper with
// TerraformRunRecords as someone who may write them could.
func crClient(t *testing.T) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func recordObjects(t *testing.T, ns, runID string) []infrav1.TerraformRunRecord {
	t.Helper()
	l := &infrav1.TerraformRunRecordList{}
	if err := crClient(t).List(context.Background(), l, client.InNamespace(ns), client.MatchingLabels{records.RunIDLabel: runID}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func recordSecrets(t *testing.T, ns string) []corev1.Secret {
	t.Helper()
	l, err := kube.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "infra.opr8r.io/component=record"})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// asUser is a client of a user bound in ns to a Role of the given rules
// (nil: bound to nothing), impersonated by envtest's admin.
func asUser(t *testing.T, ns, user string, rules []rbacv1.PolicyRule) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	if rules != nil {
		if _, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		envtestutil.AwaitGrant(t, kube, ns, user, nil, rules)
	}
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return kubernetes.NewForConfigOrDie(cfg)
}

var (
	secretRights = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}
	recordReader = rbacv1.PolicyRule{APIGroups: []string{infrav1.GroupVersion.Group}, Resources: []string{"terraformrunrecords"}, Verbs: []string{"get", "list", "watch"}}
	recordWriter = rbacv1.PolicyRule{APIGroups: []string{infrav1.GroupVersion.Group}, Resources: []string{"terraformrunrecords"}, Verbs: []string{"create", "get", "update", "delete"}}
)

// The TerraformRunRecords of a 5 MB plan: several chunks, each under the
// chunk size, owned by the TerraformRun, labelled and described for the
// run, nothing in clear; a shorter rewrite leaves no stale chunk.
func TestResourceStoreChunksAndOwner(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	owner := &metav1.OwnerReference{APIVersion: "infra.opr8r.io/v1alpha1", Kind: "TerraformRun", Name: "big", UID: "0000-big"}
	s := &records.ResourceStore{Client: kube, Owner: owner, ChunkSize: 256 << 10}
	k := records.Key{Namespace: ns, Run: "big", RunID: "big-7", Step: "plan", Kind: records.KindPlanText}
	plan := bigPlan(5 << 20)
	if err := s.Put(ctx, k, plan); err != nil {
		t.Fatal(err)
	}
	items := recordObjects(t, ns, "big-7")
	if len(items) < 2 {
		t.Fatalf("a 5 MB plan is in %d TerraformRunRecord(s); want it chunked", len(items))
	}
	total := 0
	for _, it := range items {
		sp := it.Spec
		total += len(sp.Data)
		if len(sp.Data) > 256<<10 || len(it.OwnerReferences) != 1 || it.OwnerReferences[0].UID != owner.UID {
			t.Fatalf("TerraformRunRecord %s: %d bytes, owners %+v", it.Name, len(sp.Data), it.OwnerReferences)
		}
		if sp.Run != "big" || sp.RunID != "big-7" || sp.Step != "plan" || sp.Kind != infrav1.RecordKindPlanText || sp.Chunks != int32(len(items)) || sp.Size != 5<<20 {
			t.Fatalf("TerraformRunRecord %s describes %+v", it.Name, sp)
		}
		if it.Labels["infra.opr8r.io/component"] != "record" || it.Labels["infra.opr8r.io/run"] != "big" || it.Labels["infra.opr8r.io/record-kind"] != "plan.txt" {
			t.Fatalf("TerraformRunRecord %s is labelled %v", it.Name, it.Labels)
		}
		if bytes.Contains(sp.Data, []byte("terraform_data.item[17]")) {
			t.Fatalf("TerraformRunRecord %s holds the plan uncompressed", it.Name)
		}
	}
	t.Logf("a %d-byte plan is stored gzipped in %d TerraformRunRecords, %d bytes in all", len(plan), len(items), total)
	if err := s.Put(ctx, k, []byte("short")); err != nil {
		t.Fatal(err)
	}
	if items := recordObjects(t, ns, "big-7"); len(items) != 1 {
		t.Fatalf("after a one-chunk rewrite, %d TerraformRunRecords are left", len(items))
	}
	if got, err := s.Get(ctx, k); err != nil || string(got) != "short" {
		t.Fatalf("get after the rewrite: %q, %v", got, err)
	}
}

// The plan as JSON in clear is never a TerraformRunRecord: the store
// refuses it, and so does the API server (the CRD's enum), whoever writes.
func TestResourceStoreRefusesTheSensitivePlan(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	s := &records.ResourceStore{Client: kube}
	k := records.Key{Namespace: ns, Run: "db", RunID: "db-1", Step: "plan", Kind: records.KindPlanJSONSensitive}
	if err := s.Put(ctx, k, []byte(`{"password":"hunter2"}`)); err == nil || !strings.Contains(err.Error(), "kept in Secrets only") {
		t.Fatalf("put of %s: %v; want it refused", k, err)
	}
	if _, err := s.Get(ctx, k); err == nil || !strings.Contains(err.Error(), "kept in Secrets only") {
		t.Fatalf("get of %s: %v; want it refused", k, err)
	}
	rec := &infrav1.TerraformRunRecord{ObjectMeta: metav1.ObjectMeta{Name: "db-1-sensitive", Namespace: ns},
		Spec: infrav1.TerraformRunRecordSpec{Run: "db", RunID: "db-1", Step: "plan", Kind: "plan-sensitive.json", Chunks: 1,
			SHA256: strings.Repeat("0", 64), Data: []byte("x")}}
	if err := crClient(t).Create(ctx, rec); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.kind") {
		t.Fatalf("the API server took a TerraformRunRecord of kind plan-sensitive.json: %v", err)
	}
}

// TestResourceStoreBoundsReads: a record's chunks are objects the runner
// service account (and so anyone who may impersonate it) can write;
// reading one holds no more than a gzipped record of its declared size
// can be, inflates no more than that size, and never mixes writes.
func TestResourceStoreBoundsReads(t *testing.T) {
	honest := []byte(strings.Repeat("terraform says hello\n", 100))
	zipped := func(b []byte) []byte {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, _ = zw.Write(b)
		_ = zw.Close()
		return z.Bytes()
	}
	cases := map[string]struct {
		tamper  func(first *infrav1.TerraformRunRecord)
		wantErr string
	}{
		"as a step wrote it": {},
		"more than it declares": {
			tamper: func(r *infrav1.TerraformRunRecord) {
				r.Spec.Data = zipped(append(append([]byte{}, honest...), "and more"...))
			},
			wantErr: "inflates past its declared size (2100 bytes)",
		},
		"a bomb that declares a small size": {
			tamper:  func(r *infrav1.TerraformRunRecord) { r.Spec.Data = zipped(make([]byte, 1<<20)) },
			wantErr: "inflates past its declared size (2100 bytes)",
		},
		"a bigger bomb, refused before it is inflated": {
			tamper:  func(r *infrav1.TerraformRunRecord) { r.Spec.Data = zipped(make([]byte, 200<<20)) },
			wantErr: "hold more than a gzipped record of 2100 bytes can",
		},
		"a bomb that declares more than the most": {
			tamper: func(r *infrav1.TerraformRunRecord) {
				r.Spec.Data, r.Spec.Size = zipped(make([]byte, records.MaxRecordSize+1)), records.MaxRecordSize+10
			},
			wantErr: "inflates past 64 MiB",
		},
		"more gzipped bytes than a record of its size can have": {
			tamper: func(r *infrav1.TerraformRunRecord) {
				r.Spec.Data = make([]byte, 700<<10)
			},
			wantErr: "hold more than a gzipped record of 2100 bytes can",
		},
		"chunks of two writes": {
			tamper:  func(r *infrav1.TerraformRunRecord) { r.Spec.SHA256 = strings.Repeat("a", 64) },
			wantErr: "does not match its checksum",
		},
		"a chunk that is not there": {
			tamper:  func(r *infrav1.TerraformRunRecord) { r.Spec.Chunks = 3 },
			wantErr: "chunk 1 of 3 is not there",
		},
		"another record under its name": {
			tamper:  func(r *infrav1.TerraformRunRecord) { r.Spec.Step = "apply" },
			wantErr: "holds another record",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ns := namespace(t)
			ctx := context.Background()
			s := &records.ResourceStore{Client: kube}
			k := records.Key{Namespace: ns, Run: "hello", RunID: "hello-1", Step: "plan", Kind: records.KindLog}
			if err := s.Put(ctx, k, honest); err != nil {
				t.Fatal(err)
			}
			if tc.tamper != nil {
				c := crClient(t)
				rec := &infrav1.TerraformRunRecord{}
				if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: records.SecretName(k, 0)}, rec); err != nil {
					t.Fatal(err)
				}
				tc.tamper(rec)
				if err := c.Update(ctx, rec); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.Get(ctx, k)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Get() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !bytes.Equal(got, honest) {
				t.Fatalf("Get() = %d bytes, %v", len(got), err)
			}
		})
	}
}

// The Router keeps the log, the readable plan and the masked JSON plan in
// TerraformRunRecords, and the JSON plan in clear in a Secret; it reads
// records kept in Secrets before TerraformRunRecords; it lists, restores,
// expires and deletes in both stores.
func TestRouterKeepsEachKindInItsStore(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	owner := &metav1.OwnerReference{APIVersion: "infra.opr8r.io/v1alpha1", Kind: "TerraformRun", Name: "r", UID: "0000-r"}
	r := records.NewRouter(kube, owner)
	key := func(runID, step string, kind records.Kind) records.Key {
		return records.Key{Namespace: ns, Run: "r", RunID: runID, Step: step, Kind: kind}
	}
	for _, kind := range records.Kinds {
		if err := r.Put(ctx, key("r-2", "plan", kind), []byte("r-2 "+string(kind))); err != nil {
			t.Fatal(err)
		}
	}
	var inResources []string
	for _, it := range recordObjects(t, ns, "r-2") {
		inResources = append(inResources, string(it.Spec.Kind))
		if len(it.OwnerReferences) != 1 || it.OwnerReferences[0].UID != owner.UID {
			t.Fatalf("TerraformRunRecord %s is owned by %+v", it.Name, it.OwnerReferences)
		}
	}
	var inSecrets []string
	for _, sec := range recordSecrets(t, ns) {
		inSecrets = append(inSecrets, sec.Labels[records.KindLabel])
	}
	sort.Strings(inResources)
	if strings.Join(inResources, ",") != "log,plan.json,plan.txt" {
		t.Fatalf("in TerraformRunRecords: %v; want log, plan.txt, plan.json", inResources)
	}
	if strings.Join(inSecrets, ",") != "plan-sensitive.json" {
		t.Fatalf("in Secrets: %v; want plan-sensitive.json only", inSecrets)
	}
	for _, kind := range records.Kinds {
		if b, err := r.Get(ctx, key("r-2", "plan", kind)); err != nil || string(b) != "r-2 "+string(kind) {
			t.Fatalf("get %s: %q, %v", kind, b, err)
		}
	}

	// A run recorded before TerraformRunRecords: every kind in Secrets.
	old := &records.SecretStore{Client: kube, Owner: owner}
	for _, kind := range records.Kinds {
		if err := old.Put(ctx, key("r-1", "plan", kind), []byte("r-1 "+string(kind))); err != nil {
			t.Fatal(err)
		}
	}
	for _, kind := range records.Kinds {
		if b, err := r.Get(ctx, key("r-1", "plan", kind)); err != nil || string(b) != "r-1 "+string(kind) {
			t.Fatalf("get %s kept in a Secret before TerraformRunRecords: %q, %v", kind, b, err)
		}
	}
	if _, err := r.Get(ctx, key("r-3", "plan", records.KindLog)); !errors.Is(err, records.ErrNotFound) {
		t.Fatalf("a record never kept: %v; want ErrNotFound", err)
	}
	recs, err := r.List(ctx, ns, "r")
	if err != nil || len(recs) != 8 {
		t.Fatalf("list = %+v, %v; want the 4 records of r-1 and of r-2", recs, err)
	}

	// Brought back from the object store: each kind into its store, as a
	// copy that expires.
	restoring := r.Restoring(owner)
	for _, kind := range records.Kinds {
		if err := restoring.Put(ctx, key("r-0", "apply", kind), []byte("r-0 "+string(kind))); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(recordObjects(t, ns, "r-0")); n != 3 {
		t.Fatalf("%d restored TerraformRunRecords; want 3 (log, plan.txt, plan.json)", n)
	}
	for _, it := range recordObjects(t, ns, "r-0") {
		if it.Labels[records.RestoredLabel] != "true" {
			t.Fatalf("restored TerraformRunRecord %s is not labelled restored", it.Name)
		}
	}
	if n, err := r.ExpireRestored(ctx, ns, "r", time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("expire of copies younger than their time: %d, %v", n, err)
	}
	if n, err := r.ExpireRestored(ctx, ns, "r", time.Now().Add(time.Minute)); err != nil || n != 4 {
		t.Fatalf("expire: %d objects, %v; want the 3 restored TerraformRunRecords and the restored Secret", n, err)
	}
	if recs, _ := r.List(ctx, ns, "r"); len(recs) != 8 {
		t.Fatalf("after expiry: %d records; want the 8 not restored", len(recs))
	}

	if gone, err := records.Prune(ctx, r, ns, "r", 2, map[string]bool{"r-2": true}); err != nil || strings.Join(gone, ",") != "r-1" {
		t.Fatalf("prune below 2: %v, %v", gone, err)
	}
	if len(recordSecrets(t, ns)) != 1 {
		t.Fatalf("r-1's Secrets were not pruned")
	}
	if err := r.Delete(ctx, ns, "r"); err != nil {
		t.Fatal(err)
	}
	if len(recordObjects(t, ns, "r-2")) != 0 || len(recordSecrets(t, ns)) != 0 {
		t.Fatal("delete left records")
	}
}

// notServed is a cluster without the TerraformRunRecord CRD.
type notServed struct{ records.Store }

func (notServed) Put(context.Context, records.Key, []byte) error {
	return fmt.Errorf("storing: %w: the server could not find the requested resource", records.ErrNotServed)
}

// A step whose cluster does not serve TerraformRunRecords yet, or whose
// runner Role predates them, keeps its records in Secrets, and says so;
// they are read back through the Router.
func TestRouterFallsBackToSecrets(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	k := records.Key{Namespace: ns, Run: "f", RunID: "f-1", Step: "plan", Kind: records.KindLog}
	oldRunner := asUser(t, ns, "old-runner", []rbacv1.PolicyRule{secretRights})
	var warned []string
	r := records.NewRouter(oldRunner, nil)
	r.Warn = func(msg string) { warned = append(warned, msg) }
	if err := r.Put(ctx, k, []byte("kept anyway")); err != nil {
		t.Fatal(err)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "kept in a Secret") || !strings.Contains(warned[0], "forbidden") {
		t.Fatalf("warnings: %q", warned)
	}
	if b, err := records.NewRouter(kube, nil).Get(ctx, k); err != nil || string(b) != "kept anyway" {
		t.Fatalf("get: %q, %v", b, err)
	}
	k.RunID = "f-2"
	warned = nil
	r.Resources = notServed{}
	if err := r.Put(ctx, k, []byte("not served")); err != nil || len(warned) != 1 {
		t.Fatalf("put without the CRD: %v, warnings %q", err, warned)
	}
	if b, err := records.NewRouter(kube, nil).Get(ctx, k); err != nil || string(b) != "not served" {
		t.Fatalf("get: %q, %v", b, err)
	}
}

// Who may read TerraformRunRecords but not Secrets reads the log and the
// plans made for them, never the plan in clear, and a record kept in
// Secrets is not found for them, with why.
func TestRouterReaderWithoutSecretRights(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	key := func(runID string, kind records.Kind) records.Key {
		return records.Key{Namespace: ns, Run: "a", RunID: runID, Step: "plan", Kind: kind}
	}
	runner := records.NewRouter(asUser(t, ns, "runner", []rbacv1.PolicyRule{secretRights, recordWriter}), nil)
	var warned []string
	runner.Warn = func(msg string) { warned = append(warned, msg) }
	for _, kind := range records.Kinds {
		if err := runner.Put(ctx, key("a-2", kind), []byte(string(kind))); err != nil {
			t.Fatal(err)
		}
	}
	if len(warned) != 0 {
		t.Fatalf("the runner's records fell back to Secrets: %q", warned)
	}
	if err := (&records.SecretStore{Client: kube}).Put(ctx, key("a-1", records.KindLog), []byte("old")); err != nil {
		t.Fatal(err)
	}
	reader := records.NewRouter(asUser(t, ns, "reader", []rbacv1.PolicyRule{recordReader}), nil)
	for _, kind := range records.ResourceKinds {
		if b, err := reader.Get(ctx, key("a-2", kind)); err != nil || string(b) != string(kind) {
			t.Fatalf("the reader's get of %s: %q, %v", kind, b, err)
		}
	}
	if _, err := reader.Get(ctx, key("a-2", records.KindPlanJSONSensitive)); !apierrors.IsForbidden(err) {
		t.Fatalf("the reader's get of the plan in clear: %v; want forbidden", err)
	}
	_, err := reader.Get(ctx, key("a-1", records.KindLog))
	if !errors.Is(err, records.ErrNotFound) || !strings.Contains(err.Error(), "records kept in Secrets, by runs before TerraformRunRecords, could not be read") {
		t.Fatalf("the reader's get of a log kept in a Secret: %v", err)
	}
}

// A check step, as opr8r-check with the rights config/rbac/runner/check-rules.yaml
// ships (no Secret reads, no deletes), keeps its log as a
// TerraformRunRecord, and a retried check replaces it, without falling back
// to Secrets.
func TestRouterWithACheckRights(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "rbac", "runner", "check-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules []rbacv1.PolicyRule
	if err := yaml.Unmarshal(b, &rules); err != nil || len(rules) == 0 {
		t.Fatalf("check-rules.yaml: %d rules, %v", len(rules), err)
	}
	check := records.NewRouter(asUser(t, ns, "check", rules), nil)
	var warned []string
	check.Warn = func(msg string) { warned = append(warned, msg) }
	k := records.Key{Namespace: ns, Run: "c", RunID: "c-1", Step: "check-scan", Kind: records.KindLog}
	for _, log := range []string{"first attempt, a longer log than the second", "second"} {
		if err := check.Put(ctx, k, []byte(log)); err != nil {
			t.Fatal(err)
		}
		if got, err := records.NewRouter(kube, nil).Get(ctx, k); err != nil || string(got) != log {
			t.Fatalf("get: %q, %v; want %q", got, err, log)
		}
	}
	if len(warned) != 0 {
		t.Fatalf("the check's records fell back to Secrets: %q", warned)
	}
	if len(recordSecrets(t, ns)) != 0 {
		t.Fatal("the check's log went to a Secret")
	}
}
