// Package manager wires the TerraformRun controller into a controller-runtime
// manager. cmd/manager and the integration tests share it, so the tests run
// the same setup as production.
package manager

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/controller"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/governance"
	"github.com/opr8r/opr8r/pkg/notify"
	"github.com/opr8r/opr8r/pkg/queue"
	"github.com/opr8r/opr8r/pkg/receiver"
	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/pkg/records/s3"
	"github.com/opr8r/opr8r/pkg/stateapi"
)

// Options configures the controller.
type Options struct {
	// Engines are the enabled engines (see SelectEngines).
	Engines []engine.Engine
	// DefaultEngine is used when spec.engine is empty.
	DefaultEngine infrav1.EngineName
	// Engine is the configuration passed to engines.
	Engine engine.Config
	// MaxConcurrentReconciles of the TerraformRun controller.
	MaxConcurrentReconciles int
	// DestroyTimeout stalls deletions whose destroy runs longer.
	DestroyTimeout time.Duration
	// ProgressTimeout stalls runs whose steps have not moved for this long.
	ProgressTimeout time.Duration
	// MaxActiveRuns caps the children active at once; 0 means no cap.
	MaxActiveRuns int
	// MaxActiveRunsPerNamespace caps those of one namespace, its share of
	// MaxActiveRuns; 0 means no share (the flag's default is
	// queue.DefaultNamespaceShare of MaxActiveRuns).
	MaxActiveRunsPerNamespace int
	// MinCheckInterval is the shortest spec.interval honoured.
	MinCheckInterval time.Duration
	// EnginePollPeriod is how often missing engine CRDs are looked for.
	EnginePollPeriod time.Duration
	// AllowCrossNamespaceDependencies lets spec.dependsOn name TerraformRuns
	// in other namespaces.
	AllowCrossNamespaceDependencies bool
	// WatchNamespaces are the namespaces the manager watches (empty: all),
	// as given to CacheOptions.
	WatchNamespaces []string
	// NoAdmissionPolicies says opr8r's admission policies are not installed:
	// no user stamp on a decision or a spec can be trusted.
	NoAdmissionPolicies bool
	// ObjectStore, when set, keeps the records of finished runs (step
	// logs, plans) instead of the Secrets the steps write them to.
	ObjectStore *s3.Store
	// RecordsRetention is how long the object store keeps a record
	// (DefaultRecordsRetention when 0); RecordsExpiryPeriod how often it
	// is enforced (hourly when 0).
	RecordsRetention, RecordsExpiryPeriod time.Duration
	// RestoreTTL is how long records brought back from the object store
	// stay as Secrets.
	RestoreTTL time.Duration
	// Shard is the shard the manager handles, as given to ShardCacheOptions.
	Shard Shard
	// SealKey seals the children of engines whose driver reads back from
	// them (the Job engine's; engine.Seals): at least 32 bytes, the same
	// for every replica and restart (LoadSealKey).
	SealKey []byte
	// DefaultApprovalTimeout rejects a plan that waited this long for
	// approval when its TerraformRun sets no spec.approval.timeout (0: wait
	// without limit).
	DefaultApprovalTimeout time.Duration
	// Receiver, when set with an address, is the webhook server of the
	// TerraformRunReceivers (pkg/receiver).
	Receiver *receiver.Server
	// Notify, when set, sends the runs' happenings to the
	// TerraformRunNotifiers of their namespaces (pkg/notify).
	Notify *notify.Dispatcher
	// StateAPI, when set, serves the steps' Secrets and Leases
	// (pkg/stateapi); Setup fills in its grants and authenticator.
	StateAPI *stateapi.Server
}

// CacheOptions restricts the manager's caches to objects opr8r made
// (labelled managed-by=opr8r), except TerraformRuns themselves, so the
// manager's memory does not grow with other tenants' Workflows or Secrets.
// Of opr8r's Secrets only the ones the manager reads are cached, outputs
// and raw-outputs, not the readable plans the plan step writes, and only
// their metadata (secrets.go): a label anyone may set cannot grow the
// manager's memory by a Secret's data. ConfigMaps are only ever created,
// never read, so they are not cached.
// Engine kinds get the restriction from the default selector
// rather than a ByObject entry: a ByObject entry makes the manager resolve
// the kind at start, which fails when the engine's CRD is not installed.
// Engines that need a kind every cluster has (the Job engine's pods) add
// their own entries, restricted to their objects (engine.CacheConfigurer).
func CacheOptions(namespaces []string, engines []engine.Engine) cache.Options {
	return ShardCacheOptions(namespaces, engines, Shard{})
}

// Shard selects the TerraformRuns one manager handles, by their
// sharding.opr8r.io/key label (infrav1.ShardLabel), as Flux's controllers
// shard by sharding.fluxcd.io/key: each shard is a manager of its own, with
// its own leader election, and caches only its runs and what they own.
type Shard struct {
	// Name handles only the runs labelled with it.
	Name string
	// UnshardedOnly handles only the runs without the label: the default
	// shard of a sharded install.
	UnshardedOnly bool
}

// Requirement is the label requirement of the shard's objects; nil for a
// manager that handles every run.
func (s Shard) Requirement() *labels.Requirement {
	var r *labels.Requirement
	var err error
	switch {
	case s.Name != "":
		r, err = labels.NewRequirement(infrav1.ShardLabel, selection.Equals, []string{s.Name})
	case s.UnshardedOnly:
		r, err = labels.NewRequirement(infrav1.ShardLabel, selection.DoesNotExist, nil)
	default:
		return nil
	}
	if err != nil {
		panic(err) // a shard name is checked by Validate first
	}
	return r
}

// Validate checks the shard's settings.
func (s Shard) Validate() error {
	if s.Name != "" && s.UnshardedOnly {
		return fmt.Errorf("--shard and --unsharded-only exclude each other: a manager handles one shard")
	}
	if s.Name != "" {
		if errs := validation.IsValidLabelValue(s.Name); len(errs) > 0 {
			return fmt.Errorf("--shard=%q is not a label value: %s", s.Name, strings.Join(errs, "; "))
		}
	}
	return nil
}

// String names the shard in logs and leader election.
func (s Shard) String() string {
	switch {
	case s.Name != "":
		return s.Name
	case s.UnshardedOnly:
		return "(unsharded)"
	}
	return ""
}

// LeaderElectionID is the shard's own leader election lease: each shard
// elects its leader apart from the others.
func (s Shard) LeaderElectionID() string {
	if s.Name != "" {
		return "opr8r-shard-" + s.Name + ".infra.opr8r.io"
	}
	return "opr8r.infra.opr8r.io"
}

// withShard adds the shard's requirement to a selector.
func withShard(sel labels.Selector, s Shard) labels.Selector {
	if r := s.Requirement(); r != nil {
		return sel.Add(*r)
	}
	return sel
}

// notSettled leaves out the children (and their steps) whose result the
// run's status records (infra.opr8r.io/settled): finished runs cost the
// cache nothing but their children's metadata, in the settled cache.
func notSettled(sel labels.Selector) labels.Selector {
	r, err := labels.NewRequirement(infrav1.SettledLabel, selection.DoesNotExist, nil)
	if err != nil {
		panic(err)
	}
	return sel.Add(*r)
}

// SettledSelector selects the settled children of the shard's runs: the
// settled cache holds their metadata, for pruning (spec.history).
func SettledSelector(shard Shard) labels.Selector {
	r, err := labels.NewRequirement(infrav1.SettledLabel, selection.Equals, []string{"true"})
	if err != nil {
		panic(err)
	}
	return withShard(labels.SelectorFromSet(labels.Set{infrav1.ManagedByLabel: infrav1.ManagedByValue}), shard).Add(*r)
}

// ShardCacheOptions is CacheOptions for one shard: the TerraformRuns and
// every object of opr8r's it caches (children, their steps, Secrets, the
// Job engine's pods) carry the shard's label, which the run's children and
// Secrets copy from the run; TerraformRunApprovals, small and unlabelled,
// are cached whole (an approval of another shard's run wakes nothing here).
// Engine objects labelled settled are left out (see SettledSelector).
func ShardCacheOptions(namespaces []string, engines []engine.Engine, shard Shard) cache.Options {
	ours := notSettled(withShard(labels.SelectorFromSet(labels.Set{infrav1.ManagedByLabel: infrav1.ManagedByValue}), shard))
	slim := slimmer(engines)
	o := cache.Options{
		DefaultTransform:     slim,
		DefaultLabelSelector: ours,
		NewInformer:          newSlimInformer(slim),
		ByObject: map[client.Object]cache.ByObject{
			&infrav1.TerraformRun{}:         {Label: withShard(labels.Everything(), shard)},
			&infrav1.TerraformRunApproval{}: {Label: labels.Everything()},
			&infrav1.TerraformRunReceiver{}: {Label: labels.Everything()},
			&infrav1.TerraformRunNotifier{}: {Label: labels.Everything()},
			// Policies govern every run in their scope, whatever their
			// labels (a policy admin's, not opr8r's).
			&infrav1.TerraformRunPolicy{}:        {Label: labels.Everything()},
			&infrav1.ClusterTerraformRunPolicy{}: {Label: labels.Everything()},
			&corev1.Secret{}:                     {Label: withShard(SecretSelector(), shard), Transform: slimSecret},
		},
	}
	for _, e := range engines {
		if cc, ok := e.(engine.CacheConfigurer); ok {
			for obj, by := range cc.CacheByObject() {
				if by.Label != nil {
					by.Label = notSettled(withShard(by.Label, shard))
				}
				o.ByObject[obj] = by
			}
		}
	}
	o.DefaultNamespaces = namespaceConfigs(namespaces)
	return o
}

func namespaceConfigs(namespaces []string) map[string]cache.Config {
	if len(namespaces) == 0 {
		return nil
	}
	out := map[string]cache.Config{}
	for _, ns := range namespaces {
		out[ns] = cache.Config{}
	}
	return out
}

// newSettledCache is the cache of settled children's metadata: names,
// labels and owners, with no annotations (the Job engine keeps its later
// steps there). Its informers start on first use, one per engine kind,
// once the reconciler prunes that engine's children.
func newSettledCache(mgr ctrl.Manager, o Options) (cache.Cache, error) {
	return cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient:           mgr.GetHTTPClient(),
		Scheme:               mgr.GetScheme(),
		Mapper:               mgr.GetRESTMapper(),
		DefaultLabelSelector: SettledSelector(o.Shard),
		DefaultNamespaces:    namespaceConfigs(o.WatchNamespaces),
		DefaultTransform: func(obj any) (any, error) {
			if m, ok := obj.(metav1.Object); ok {
				m.SetManagedFields(nil)
				m.SetAnnotations(nil)
			}
			return obj, nil
		},
	})
}

// CachedSecretComponents are the kinds of opr8r Secret the manager reads.
var CachedSecretComponents = []string{infrav1.ComponentOutputs, infrav1.ComponentRawOutputs}

// SecretSelector selects the Secrets the manager caches.
func SecretSelector() labels.Selector {
	managed, err := labels.NewRequirement(infrav1.ManagedByLabel, selection.Equals, []string{infrav1.ManagedByValue})
	if err != nil {
		panic(err)
	}
	component, err := labels.NewRequirement(infrav1.ComponentLabel, selection.In, CachedSecretComponents)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*managed, *component)
}

// slimmer returns the cache transform: it drops what the manager never
// reads from cached objects, so its memory stays small with thousands of
// runs: managed fields everywhere, kubectl's last-applied copy of a
// TerraformRun (inline modules included), and of engine objects whatever
// the engine says it does not read (engine.CacheSlimmer). Writes never send
// a cached object whole: they are patches, or status updates of small
// objects.
func slimmer(engines []engine.Engine) toolscache.TransformFunc {
	var slimmers []engine.CacheSlimmer
	for _, e := range engines {
		if s, ok := e.(engine.CacheSlimmer); ok {
			slimmers = append(slimmers, s)
		}
	}
	return func(obj any) (any, error) {
		if m, ok := obj.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		if run, ok := obj.(*infrav1.TerraformRun); ok {
			dropAnnotation(run, lastAppliedAnnotation)
			return obj, nil
		}
		for _, s := range slimmers {
			if s.SlimForCache(obj) {
				break
			}
		}
		return obj, nil
	}
}

const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

func dropAnnotation(o metav1.Object, key string) {
	a := o.GetAnnotations()
	if _, ok := a[key]; !ok {
		return
	}
	delete(a, key)
	if len(a) == 0 {
		a = nil
	}
	o.SetAnnotations(a)
}

// listPageSize is how many objects an informer's list reads at a time.
const listPageSize = 100

// newSlimInformer returns client-go's informer with a list that reads
// pages of listPageSize objects and slims each page before reading the
// next. The reflector's own list gathers every object whole before the
// transform runs: with thousands of children that is one large Workflow
// list, specs and all, held at once at every start (about 1 GiB of RSS at
// 5000 runs, which the Go runtime then keeps).
func newSlimInformer(slim toolscache.TransformFunc) func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer {
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		return toolscache.NewSharedIndexInformer(&slimListWatch{inner: toolscache.ToListerWatcherWithContext(lw), raw: lw, slim: slim}, obj, resync, indexers)
	}
}

type slimListWatch struct {
	inner toolscache.ListerWatcherWithContext
	raw   toolscache.ListerWatcher
	slim  toolscache.TransformFunc
}

var _ toolscache.ListerWatcherWithContext = &slimListWatch{}

// ListWithContext lists in pages, always at the latest resourceVersion
// (resourceVersion "0" would be served whole from the watch cache), and
// returns one list of slimmed objects.
func (l *slimListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if opts.Continue != "" {
		return l.inner.ListWithContext(ctx, opts)
	}
	opts.ResourceVersion, opts.ResourceVersionMatch, opts.Limit = "", "", listPageSize
	var first runtime.Object
	var items []runtime.Object
	for {
		page, err := l.inner.ListWithContext(ctx, opts)
		if err != nil {
			return nil, err
		}
		objs, err := apimeta.ExtractList(page)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			slim, err := l.slim(o)
			if err != nil {
				return nil, err
			}
			items = append(items, slim.(runtime.Object))
		}
		if first == nil {
			first = page
		}
		lm, err := apimeta.ListAccessor(page)
		if err != nil {
			return nil, err
		}
		if opts.Continue = lm.GetContinue(); opts.Continue == "" {
			break
		}
	}
	if err := apimeta.SetList(first, items); err != nil {
		return nil, err
	}
	lm, err := apimeta.ListAccessor(first)
	if err != nil {
		return nil, err
	}
	lm.SetContinue("")
	lm.SetRemainingItemCount(nil)
	return first, nil
}

// List implements toolscache.Lister.
func (l *slimListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

// WatchWithContext implements toolscache.WatcherWithContext.
func (l *slimListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return l.inner.WatchWithContext(ctx, opts)
}

// Watch implements toolscache.Watcher.
func (l *slimListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.inner.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported passes on what the wrapped ListerWatcher
// says about streaming lists (client-go asks).
func (l *slimListWatch) IsWatchListSemanticsUnSupported() bool {
	u, ok := l.raw.(interface{ IsWatchListSemanticsUnSupported() bool })
	return ok && u.IsWatchListSemanticsUnSupported()
}

// Setup adds the TerraformRun controller and the engine watcher to mgr.
func Setup(mgr ctrl.Manager, o Options) (*controller.TerraformRunReconciler, error) {
	r, err := newReconciler(mgr, o)
	if err != nil {
		return nil, err
	}
	if err := addRecords(mgr, r, o); err != nil {
		return nil, err
	}
	seals := engine.Seals{Key: o.SealKey}
	r.IsPreview = func(run *infrav1.TerraformRun) bool { return receiver.IsManagersPreview(seals, run) }
	if err := addStateAPI(mgr, o); err != nil {
		return nil, err
	}
	if o.Receiver != nil && len(o.Receiver.Seals.Key) == 0 {
		// The previews it makes are sealed under the manager's own key.
		o.Receiver.Seals = engine.Seals{Key: o.SealKey}
	}
	if err := addBeside(mgr, r, o); err != nil {
		return nil, err
	}
	maxConc := o.MaxConcurrentReconciles
	if maxConc == 0 {
		maxConc = 4
	}
	wake := make(chan event.GenericEvent)
	// The limiter wakes runs whose slot came free; it never blocks on this
	// channel, so it is buffered.
	freed := make(chan event.GenericEvent, 1024)
	r.Limiter = queue.NewLimiter(o.MaxActiveRuns, o.MaxActiveRunsPerNamespace, freed)
	c, err := r.SetupWithManager(metadataSecretsManager{Manager: mgr, cache: metadataSecrets{mgr.GetCache()}}, maxConc, wake, freed)
	if err != nil {
		return nil, err
	}
	w := &engine.Watcher{
		Manager: mgr, Cache: mgr.GetCache(), Mapper: mgr.GetRESTMapper(), Client: mgr.GetClient(),
		Controller: c, Engines: r.Engines, Available: r.Available, Period: o.EnginePollPeriod, Wake: wake,
	}
	if err := mgr.Add(w); err != nil {
		return nil, err
	}
	if err := mgr.Add(&controller.LimiterWarmer{Reconciler: r, Cache: mgr.GetCache()}); err != nil {
		return nil, err
	}
	return r, nil
}

// addBeside adds what runs beside the reconciler: the webhook receiver and
// its previews, the policies' status, and the notifier.
func addBeside(mgr ctrl.Manager, r *controller.TerraformRunReconciler, o Options) error {
	if err := receiver.Setup(mgr, o.Receiver); err != nil {
		return err
	}
	if err := governance.Setup(mgr); err != nil {
		return err
	}
	if o.Receiver != nil && o.Receiver.Addr != "" && o.Receiver.Addr != "0" {
		if err := receiver.SetupPreviews(mgr, r.Records, o.Receiver.HTTP, o.Receiver.Seals); err != nil {
			return err
		}
	}
	if d := o.Notify; d != nil {
		d.Cache, d.API, d.Client = mgr.GetCache(), mgr.GetAPIReader(), mgr.GetClient()
		if d.Recorder == nil {
			d.Recorder = mgr.GetEventRecorder("opr8r-notifier")
		}
		r.Notifier = d
		if err := mgr.Add(d); err != nil {
			return err
		}
	}
	return nil
}

// newReconciler is the TerraformRun reconciler of o's engines, with the
// settled children's cache added to mgr.
func newReconciler(mgr ctrl.Manager, o Options) (*controller.TerraformRunReconciler, error) {
	reg, err := engine.NewRegistry(o.Engines...)
	if err != nil {
		return nil, err
	}
	if _, ok := reg.Get(o.DefaultEngine); !ok {
		return nil, fmt.Errorf("default engine %q is not enabled (enabled: %v)", o.DefaultEngine, reg.Names())
	}
	for _, e := range o.Engines {
		if _, seals := e.(engine.Sealer); seals && len(o.SealKey) < 32 {
			return nil, fmt.Errorf("engine %s drives its children from what it built into them, which the manager seals: give a seal key of at least 32 bytes (Options.SealKey, LoadSealKey)", e.Name())
		}
	}
	settled, err := newSettledCache(mgr, o)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(settled); err != nil {
		return nil, err
	}
	r := &controller.TerraformRunReconciler{
		Client:                          secretClient{Client: mgr.GetClient(), meta: mgr.GetCache(), api: mgr.GetAPIReader()},
		APIReader:                       mgr.GetAPIReader(),
		Settled:                         settled,
		Recorder:                        mgr.GetEventRecorder("opr8r"),
		Engines:                         reg,
		Available:                       engine.NewAvailability(),
		DefaultEngine:                   o.DefaultEngine,
		Config:                          o.Engine,
		DestroyTimeout:                  o.DestroyTimeout,
		ProgressTimeout:                 o.ProgressTimeout,
		MinCheckInterval:                o.MinCheckInterval,
		UntrustedIdentity:               o.NoAdmissionPolicies,
		AllowCrossNamespaceDependencies: o.AllowCrossNamespaceDependencies,
		WatchNamespaces:                 o.WatchNamespaces,
		Seals:                           engine.Seals{Key: o.SealKey},
		DefaultApprovalTimeout:          o.DefaultApprovalTimeout,
	}
	if r.MinCheckInterval == 0 {
		r.MinCheckInterval = controller.DefaultMinCheckInterval
	}
	return r, nil
}

// addRecords gives the reconciler the records' stores: those the steps
// write (TerraformRunRecords and Secrets, each kind in its own:
// records.Router), and the object store finished runs' records move to,
// whose expirer it adds to mgr. They read from the API server, never the
// manager's cache: no record sits in the manager's memory but the one it
// is moving.
func addRecords(mgr ctrl.Manager, r *controller.TerraformRunReconciler, o Options) error {
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	r.Records = records.NewRouter(cs, nil)
	if o.ObjectStore == nil {
		return nil
	}
	r.ObjectStore, r.RestoreTTL = o.ObjectStore, o.RestoreTTL
	retention := o.RecordsRetention
	if retention == 0 {
		retention = DefaultRecordsRetention
	}
	return mgr.Add(&RecordsExpirer{Store: o.ObjectStore, Client: mgr.GetClient(), Retention: retention, Period: o.RecordsExpiryPeriod})
}

// SelectEngines returns the engines of known (the engines this build has,
// engines.All from cmd/, in order of preference) whose names are listed, in
// known's order, so the first is the default engine whatever order the
// names come in.
func SelectEngines(known []engine.Engine, names []infrav1.EngineName) ([]engine.Engine, error) {
	var all []string
	for _, e := range known {
		all = append(all, string(e.Name()))
	}
	for _, n := range names {
		if !slices.Contains(all, string(n)) {
			return nil, fmt.Errorf("unknown engine %q (known: %s)", n, strings.Join(all, ", "))
		}
	}
	// In the order of known, which is the order of preference.
	var out []engine.Engine
	for _, e := range known {
		if slices.Contains(names, e.Name()) {
			out = append(out, e)
		}
	}
	return out, nil
}
