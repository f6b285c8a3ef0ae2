package controller

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// A finished child whose result the TerraformRun's stored status records
// is labelled infra.opr8r.io/settled, with the step objects its engine
// made for it. The manager's cache selects objects without the label, so
// finished runs cost no memory for their children's status; a second
// cache, of metadata only, holds the settled children for pruning
// (spec.history). The labels cost one patch per object at the end of a
// run, never at its start.

// settledPatch adds the settled label.
var settledPatch = client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+infrav1.SettledLabel+`":"true"}}}`))

// isSettled says whether an object carries the settled label.
func isSettled(o client.Object) bool { return o.GetLabels()[infrav1.SettledLabel] == "true" }

// markSettled labels a finished child settled: its related objects
// first, then the child, so a pass cut short leaves the child in the cache
// and the next pass finishes the job.
func (r *TerraformRunReconciler) markSettled(ctx context.Context, e engine.Engine, child client.Object) error {
	if rl, ok := e.(engine.RelatedLister); ok {
		related, err := rl.Related(ctx, r.Client, child)
		if err != nil {
			return generic("ListSteps", err, "listing the steps of %s", child.GetName())
		}
		for _, o := range related {
			if err := r.labelSettled(ctx, o); err != nil {
				return err
			}
		}
	}
	return r.labelSettled(ctx, child)
}

// labelSettled patches the settled label onto one object, as metadata:
// the answer is the object's metadata, not a whole Workflow.
func (r *TerraformRunReconciler) labelSettled(ctx context.Context, o client.Object) error {
	if isSettled(o) {
		return nil
	}
	if m, err := r.patchMetadata(ctx, o, settledPatch); err != nil && !apierrors.IsNotFound(err) {
		return generic("LabelSettled", err, "labelling %s %s settled", kindOf(m), o.GetName())
	}
	// The pass goes on with o (a copy): it is settled now, and so known
	// to have finished, though the cache may lack its step objects already.
	setLabel(o, infrav1.SettledLabel, "true")
	return nil
}

// setLabel sets a label on the pass's copy of an object, after a patch
// wrote it on the API server.
func setLabel(o client.Object, key, value string) {
	l := o.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[key] = value
	o.SetLabels(l)
}

// patchMetadata patches o's metadata through the metadata API: the answer
// is the object's metadata, not a whole Workflow. It returns that metadata
// (nil when o's kind is not in the scheme).
func (r *TerraformRunReconciler) patchMetadata(ctx context.Context, o client.Object, patch client.Patch) (*metav1.PartialObjectMetadata, error) {
	gvk, err := apiutil.GVKForObject(o, r.Scheme())
	if err != nil {
		return nil, err
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	m.SetNamespace(o.GetNamespace())
	m.SetName(o.GetName())
	return m, r.Patch(ctx, m, patch)
}

// settledReader is where settled children of a kind are read: the
// settled cache once its informer for the kind has synced, the API server
// until then. The cache starts an informer on its first read of a kind and
// would hold that read, and the worker running the pass, until the
// informer syncs, with no limit but the manager's stop: a pass that starts
// a run or prunes its history must not wait on it.
func (r *TerraformRunReconciler) settledReader(ctx context.Context, gvk schema.GroupVersionKind) client.Reader {
	if r.Settled == nil {
		return r.APIReader
	}
	ic, ok := r.Settled.(informerGetter)
	if !ok {
		return r.Settled
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	inf, err := ic.GetInformer(ctx, m, cache.BlockUntilSynced(false))
	if err != nil || !inf.HasSynced() {
		return r.APIReader
	}
	return r.Settled
}

// informerGetter is the part of a cache that settledReader asks whether
// its informer for a kind has synced (and that starts it).
type informerGetter interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
}

// listSettled lists the metadata of this TerraformRun's settled children.
func (r *TerraformRunReconciler) listSettled(ctx context.Context, run *infrav1.TerraformRun, e engine.Engine) ([]client.Object, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(e.ChildGVK().GroupVersion().WithKind(e.ChildGVK().Kind + "List"))
	sel := client.MatchingLabels{infrav1.RunNameLabel: run.Name, infrav1.SettledLabel: "true"}
	if err := r.settledReader(ctx, e.ChildGVK()).List(ctx, list, client.InNamespace(run.Namespace), sel); err != nil {
		if apimeta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, generic("ListChildren", err, "listing settled children")
	}
	var out []client.Object
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], run) {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// settledChild says whether a settled child holds a name: a run number
// that a new run must skip (the children of an earlier TerraformRun of
// the same name, orphaned by its deletion, may hold the next numbers).
func (r *TerraformRunReconciler) settledChild(ctx context.Context, ns string, e engine.Engine, name string) (bool, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(e.ChildGVK())
	err := r.settledReader(ctx, e.ChildGVK()).Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, m)
	switch {
	case apierrors.IsNotFound(err), apimeta.IsNoMatchError(err):
		return false, nil
	case err != nil:
		return false, generic("GetChild", err, "getting %s", name)
	}
	return isSettled(m), nil
}

// kindOf is the kind of patched metadata, for messages.
func kindOf(m *metav1.PartialObjectMetadata) string {
	if m == nil {
		return "object"
	}
	return m.Kind
}
