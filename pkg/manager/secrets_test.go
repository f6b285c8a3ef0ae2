package manager

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines/job"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/testutil"
	"github.com/opr8r/opr8r/test/envtestutil"
)

// startEnvtest starts a real API server for one test.
func startEnvtest(t *testing.T) *rest.Config {
	t.Helper()
	env, cfg, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return cfg
}

// informerLog records the informers a cache makes: the Go type and kind
// each holds, and the informers themselves.
type informerLog struct {
	mu   sync.Mutex
	made map[string]toolscache.SharedIndexInformer
}

// wrap returns a NewInformer that records what next makes.
func (l *informerLog) wrap(next func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer) func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer {
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
		i := next(lw, obj, resync, idx)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.made[fmt.Sprintf("%T %s", obj, obj.GetObjectKind().GroupVersionKind().Kind)] = i
		return i
	}
}

func (l *informerLog) get(kind string) (toolscache.SharedIndexInformer, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var all []string
	for k := range l.made {
		all = append(all, k)
	}
	return l.made[kind], all
}

// TestSecretsCachedAsMetadataOnly runs the manager's setup on a real API
// server: a large Secret labelled as opr8r's outputs (anyone may set the
// labels) enters the cache as a few hundred bytes of metadata, never as a
// whole Secret; the reconciler still reads its data, from the API server;
// and a Secret that is not opr8r's is NotFound to it, as before.
func TestSecretsCachedAsMetadataOnly(t *testing.T) {
	cfg := startEnvtest(t)
	engines := []engine.Engine{job.New()}
	scheme, err := engine.Scheme(engines)
	if err != nil {
		t.Fatal(err)
	}
	o := CacheOptions(nil, engines)
	log := &informerLog{made: map[string]toolscache.SharedIndexInformer{}}
	o.NewInformer = log.wrap(o.NewInformer)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Cache: o, Client: ClientOptions(), Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Setup(mgr, Options{Engines: engines, DefaultEngine: infrav1.EngineJob, SealKey: testutil.SealKey})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	big, notOurs := bigOutputsSecret("ns-a"), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "not-ours", Namespace: "ns-a"}, Data: map[string][]byte{"k": []byte("v")}}
	for _, obj := range []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns-a"}}, big.DeepCopy(), notOurs} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	key := types.NamespacedName{Namespace: "ns-a", Name: big.Name}
	var cached any
	deadline := time.Now().Add(30 * time.Second)
	for cached == nil && time.Now().Before(deadline) {
		if i, _ := log.get("*v1.PartialObjectMetadata Secret"); i != nil {
			cached, _, _ = i.GetStore().GetByKey(key.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, all := log.get(""); cached == nil {
		t.Fatalf("the Secret never entered the metadata cache; informers made: %v", all)
	}
	if whole, all := log.get("*v1.Secret "); whole != nil {
		t.Errorf("an informer of whole Secrets was made (informers: %v)", all)
	}
	want := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: big.Name, Namespace: "ns-a", Labels: map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue, infrav1.ComponentLabel: infrav1.ComponentOutputs},
		OwnerReferences: big.OwnerReferences[:1],
	}}
	got := cached.(*metav1.PartialObjectMetadata)
	ignored := []string{"UID", "ResourceVersion", "CreationTimestamp", "Generation"}
	if diff := cmp.Diff(want.ObjectMeta, got.ObjectMeta, cmpopts.IgnoreFields(metav1.ObjectMeta{}, ignored...)); diff != "" {
		t.Errorf("the cached Secret keeps more than the watch reads (-want +got):\n%s", diff)
	}

	read := &corev1.Secret{}
	if err := r.Get(ctx, key, read); err != nil || len(read.Data["outputs.json"]) != len(big.Data["outputs.json"]) {
		t.Errorf("the reconciler's read of the Secret: %v, %d bytes of data, want the %d bytes in the API server", err, len(read.Data["outputs.json"]), len(big.Data["outputs.json"]))
	}
	if err := r.Get(ctx, client.ObjectKeyFromObject(notOurs), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the reconciler's read of a Secret that is not opr8r's: %v, want NotFound (the reconciler asks the API server itself when it must)", err)
	}
	if err := (metadataSecrets{mgr.GetCache()}).Get(ctx, key, &corev1.Secret{}); err == nil || !strings.Contains(err.Error(), "no whole Secrets") {
		t.Errorf("reading a whole Secret from the controller's cache: %v, want it refused", err)
	}
}

// bigOutputsSecret is a 700 KB Secret in ns labelled as opr8r's outputs,
// with what a tenant could add to grow its metadata: many labels, a large
// annotation, owner references besides its controller's.
func bigOutputsSecret(ns string) *corev1.Secret {
	labels := map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue, infrav1.ComponentLabel: infrav1.ComponentOutputs}
	for i := range 50 {
		labels[fmt.Sprintf("tenant.example.com/l%d", i)] = strings.Repeat("x", 60)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: "hello-outputs", Namespace: ns, Labels: labels,
			Annotations: map[string]string{"tenant.example.com/big": strings.Repeat("a", 200<<10)},
			OwnerReferences: []metav1.OwnerReference{
				{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: "hello", UID: "uid-hello", Controller: ptr.To(true)},
				{APIVersion: "v1", Kind: "ConfigMap", Name: "other", UID: "uid-other"},
			},
		},
		Data: map[string][]byte{"outputs.json": []byte(strings.Repeat("z", 700<<10))},
	}
}
