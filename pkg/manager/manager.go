// Package manager wires the TerraformRun controller into a controller-runtime
// manager. cmd/manager and the integration tests share it, so the tests run
// the same setup as production.
package manager

import (
	"context"
	"fmt"
	"strings"
	"time"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	tektonv1beta1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pipelines"
	"github.com/opr8r/opr8r/pkg/controller"
	"github.com/opr8r/opr8r/pkg/engine"
)

// Defaults shared by the manager's flags and `kubectl tfrun render`, so a
// rendered run is what the manager would create.
const (
	DefaultStepImage      = "ghcr.io/opr8r/opr8r:latest"
	DefaultTerraformImage = "docker.io/hashicorp/terraform:1.11"
	DefaultRunnerSA       = "opr8r-runner"
	DefaultEngine         = infrav1.EngineArgo
)

// Options configures the controller.
type Options struct {
	// Engines lists the enabled engines by name.
	Engines []infrav1.EngineName
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
	// EnginePollPeriod is how often missing engine CRDs are looked for.
	EnginePollPeriod time.Duration
}

// Scheme returns a scheme with every type the manager reads or writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, infrav1.AddToScheme, wfv1.AddToScheme, tektonv1.AddToScheme, tektonv1beta1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// CacheOptions restricts the manager's caches to objects opr8r made
// (labelled managed-by=opr8r), except TerraformRuns themselves, so the
// manager's memory does not grow with other tenants' Workflows or Secrets.
// Of opr8r's Secrets only the ones the manager reads are cached: outputs
// and raw-outputs, not the readable plans the plan step writes (up to
// 1 MiB each, one per run). ConfigMaps are only ever created, never read,
// so they are not cached.
// Engine kinds get the restriction from the default selector
// rather than a ByObject entry: a ByObject entry makes the manager resolve
// the kind at start, which fails when the engine's CRD is not installed.
func CacheOptions(namespaces []string) cache.Options {
	ours := labels.SelectorFromSet(labels.Set{infrav1.ManagedByLabel: infrav1.ManagedByValue})
	o := cache.Options{
		DefaultTransform:     slimForCache,
		DefaultLabelSelector: ours,
		NewInformer:          newSlimInformer,
		ByObject: map[client.Object]cache.ByObject{
			&infrav1.TerraformRun{}: {Label: labels.Everything()},
			&corev1.Secret{}:        {Label: SecretSelector()},
		},
	}
	if len(namespaces) > 0 {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			o.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return o
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

// slimForCache drops what the manager never reads from cached objects, so
// its memory stays small with thousands of runs: managed fields everywhere,
// kubectl's last-applied copy of a TerraformRun, and the specs and
// annotations of engine objects (observation reads status and labels;
// cancelling reads only spec.shutdown / spec.status), and the parts of
// Argo's status that observation doesn't read (slimWorkflowStatus). Writes never send a cached object whole:
// they are patches, or status updates of small objects.
func slimForCache(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *infrav1.TerraformRun:
		// kubectl apply's copy of the whole spec (inline modules included).
		dropAnnotation(o, lastAppliedAnnotation)
	case *wfv1.Workflow:
		o.Spec = wfv1.WorkflowSpec{Shutdown: o.Spec.Shutdown}
		o.Status = slimWorkflowStatus(o.Status)
		o.Annotations = nil
	case *tektonv1.PipelineRun:
		o.Spec = tektonv1.PipelineRunSpec{Status: o.Spec.Status}
		o.Status.PipelineSpec = nil
		o.Status.Provenance = nil
		o.Annotations = nil
	case *tektonv1.TaskRun:
		o.Spec = tektonv1.TaskRunSpec{Status: o.Spec.Status}
		o.Status.TaskSpec = nil
		o.Status.Provenance = nil
		o.Annotations = nil
	}
	return obj, nil
}

// slimWorkflowStatus keeps what the Argo backend reads (pipelines/argo
// observe.go and approve.go): the phase, times and message, the compressed
// or offloaded node status as it is, and of each node its identity, type,
// template, phase, message, times, output parameter values and whether its
// task results are synced. Argo also writes each node's boundary, children,
// host, progress, resource durations, inputs and exit code, and the
// workflow's conditions, progress and artifact repository: about half a real
// Workflow's status. Suspend nodes stay whole: approving writes the gate
// node back (a merge patch of the node), and its outputs carry the
// supplied-value markers Argo resumes by.
func slimWorkflowStatus(s wfv1.WorkflowStatus) wfv1.WorkflowStatus {
	out := wfv1.WorkflowStatus{Phase: s.Phase, StartedAt: s.StartedAt, FinishedAt: s.FinishedAt, Message: s.Message,
		CompressedNodes: s.CompressedNodes, OffloadNodeStatusVersion: s.OffloadNodeStatusVersion}
	if s.Nodes != nil {
		out.Nodes = make(wfv1.Nodes, len(s.Nodes))
	}
	for id, n := range s.Nodes {
		if n.Type != wfv1.NodeTypeSuspend {
			n = slimNode(n)
		}
		out.Nodes[id] = n
	}
	return out
}

func slimNode(n wfv1.NodeStatus) wfv1.NodeStatus {
	s := wfv1.NodeStatus{ID: n.ID, Name: n.Name, DisplayName: n.DisplayName, Type: n.Type, TemplateName: n.TemplateName,
		Phase: n.Phase, Message: n.Message, StartedAt: n.StartedAt, FinishedAt: n.FinishedAt, TaskResultSynced: n.TaskResultSynced}
	if n.Outputs != nil && len(n.Outputs.Parameters) > 0 {
		params := make([]wfv1.Parameter, len(n.Outputs.Parameters))
		for i, p := range n.Outputs.Parameters {
			params[i] = wfv1.Parameter{Name: p.Name, Value: p.Value}
		}
		s.Outputs = &wfv1.Outputs{Parameters: params}
	}
	return s
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

// newSlimInformer is client-go's informer with a list that reads pages of
// listPageSize objects and slims each page (slimForCache) before reading
// the next. The reflector's own list gathers every object whole before the
// transform runs: with thousands of children that is one large Workflow
// list, specs and all, held at once at every start (about 1 GiB of RSS at
// 5000 runs, which the Go runtime then keeps).
func newSlimInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	return toolscache.NewSharedIndexInformer(&slimListWatch{inner: toolscache.ToListerWatcherWithContext(lw), raw: lw}, obj, resync, indexers)
}

type slimListWatch struct {
	inner toolscache.ListerWatcherWithContext
	raw   toolscache.ListerWatcher
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
			slim, err := slimForCache(o)
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
	var enabled []engine.Engine
	known := map[infrav1.EngineName]engine.Engine{}
	for _, e := range pipelines.All() {
		known[e.Name()] = e
	}
	for _, n := range o.Engines {
		e, ok := known[n]
		if !ok {
			return nil, fmt.Errorf("unknown engine %q (known: %s)", n, knownNames(known))
		}
		enabled = append(enabled, e)
	}
	reg, err := engine.NewRegistry(enabled...)
	if err != nil {
		return nil, err
	}
	if _, ok := reg.Get(o.DefaultEngine); !ok {
		return nil, fmt.Errorf("default engine %q is not enabled (enabled: %v)", o.DefaultEngine, reg.Names())
	}
	avail := controller.NewAvailability()
	r := &controller.TerraformRunReconciler{
		Client:          mgr.GetClient(),
		APIReader:       mgr.GetAPIReader(),
		Recorder:        mgr.GetEventRecorder("opr8r"),
		Engines:         reg,
		Available:       avail,
		DefaultEngine:   o.DefaultEngine,
		Config:          o.Engine,
		DestroyTimeout:  o.DestroyTimeout,
		ProgressTimeout: o.ProgressTimeout,
	}
	maxConc := o.MaxConcurrentReconciles
	if maxConc == 0 {
		maxConc = 4
	}
	wake := make(chan event.GenericEvent)
	c, err := r.SetupWithManager(mgr, maxConc, wake)
	if err != nil {
		return nil, err
	}
	w := &controller.EngineWatcher{
		Manager: mgr, Cache: mgr.GetCache(), Mapper: mgr.GetRESTMapper(), Client: mgr.GetClient(),
		Controller: c, Engines: reg, Available: avail, Period: o.EnginePollPeriod, Wake: wake,
	}
	if err := mgr.Add(w); err != nil {
		return nil, err
	}
	return r, nil
}

func knownNames(m map[infrav1.EngineName]engine.Engine) string {
	var out []string
	for n := range m {
		out = append(out, string(n))
	}
	return strings.Join(out, ", ")
}
