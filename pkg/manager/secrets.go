package manager

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Secrets are never cached whole. The Secrets the manager reads (outputs
// and raw outputs) are selected by labels, and anyone who may write a
// Secret may set those labels: sixty 700 KB Secrets labelled so took a
// manager's heap from 27 to 105 MB when they were cached whole. The cache
// holds their metadata only (PartialObjectMetadata, listed and watched as
// metadata, so their data never reaches the manager's informers), slimmed
// to what the watch of owned Secrets reads (slimSecret); the reconciler
// reads a Secret's data from the API server, and only for a Secret the
// metadata cache holds (secretClient), so a pass costs API reads only for
// the Secrets of opr8r's that exist.

// secretGVK is the kind of core Secrets.
var secretGVK = corev1.SchemeGroupVersion.WithKind("Secret")

// secretMetadata is an empty Secret metadata object: the kind the cache
// keeps Secrets as.
func secretMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(secretGVK)
	return m
}

// ClientOptions are the options of the manager's client (ctrl.Options'
// Client): reads of Secrets go to the API server, never to the cache,
// which would cache them whole.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
}

// secretLabels are the labels a cached Secret keeps.
var secretLabels = []string{infrav1.ManagedByLabel, infrav1.ComponentLabel, infrav1.RunNameLabel, infrav1.ShardLabel}

// slimSecret is the cache transform of Secrets: it keeps the metadata the
// watch of owned Secrets reads (names, uid, versions, deletion, opr8r's
// labels and the controller reference), and drops what a tenant could
// grow (other labels, annotations, other owner references, managed
// fields, and any data of a whole Secret). A cached Secret costs a few
// hundred bytes, however large the one in the API server.
func slimSecret(obj any) (any, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return obj, nil
	}
	keep := metav1.ObjectMeta{
		Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(),
		ResourceVersion: m.GetResourceVersion(), Generation: m.GetGeneration(),
		CreationTimestamp: m.GetCreationTimestamp(), DeletionTimestamp: m.GetDeletionTimestamp(),
	}
	for _, k := range secretLabels {
		if v, ok := m.GetLabels()[k]; ok {
			if keep.Labels == nil {
				keep.Labels = map[string]string{}
			}
			keep.Labels[k] = v
		}
	}
	if c := metav1.GetControllerOfNoCopy(m); c != nil {
		keep.OwnerReferences = []metav1.OwnerReference{*c}
	}
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		return &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: keep}, nil
	case *corev1.Secret:
		return &corev1.Secret{TypeMeta: o.TypeMeta, ObjectMeta: keep, Type: o.Type}, nil
	}
	return obj, nil
}

// isSecret says whether gvk is the Secret kind.
func isSecret(gvk schema.GroupVersionKind) bool { return gvk == secretGVK }

// errWholeSecret refuses a read of whole Secrets from the cache.
var errWholeSecret = fmt.Errorf("the manager's cache holds no whole Secrets, only their metadata: read Secrets with the API reader")

// metadataSecrets is the cache the controller's watches are made on: an
// informer asked for Secrets is the informer of their metadata (the Owns
// watch reads only owner references), and a read of whole Secrets from it
// is refused rather than starting an informer that would cache them.
type metadataSecrets struct{ cache.Cache }

// GetInformer returns the metadata informer for Secrets, the cache's
// informer otherwise.
func (c metadataSecrets) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	if _, ok := obj.(*corev1.Secret); ok {
		return c.Cache.GetInformer(ctx, secretMetadata(), opts...)
	}
	return c.Cache.GetInformer(ctx, obj, opts...)
}

// GetInformerForKind returns the metadata informer for the Secret kind,
// the cache's informer otherwise.
func (c metadataSecrets) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	if isSecret(gvk) {
		return c.Cache.GetInformer(ctx, secretMetadata(), opts...)
	}
	return c.Cache.GetInformerForKind(ctx, gvk, opts...)
}

// Get refuses whole Secrets.
func (c metadataSecrets) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		return errWholeSecret
	}
	return c.Cache.Get(ctx, key, obj, opts...)
}

// List refuses whole Secrets.
func (c metadataSecrets) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*corev1.SecretList); ok {
		return errWholeSecret
	}
	return c.Cache.List(ctx, list, opts...)
}

// metadataSecretsManager is the manager the controller is built with:
// its cache is metadataSecrets, so Owns(&corev1.Secret{}) watches the
// Secrets' metadata.
type metadataSecretsManager struct {
	ctrl.Manager
	cache cache.Cache
}

// GetCache returns the cache of Secrets' metadata.
func (m metadataSecretsManager) GetCache() cache.Cache { return m.cache }

// secretClient is the reconciler's client: a Secret is read from the API
// server, and only when the metadata cache holds it, so a Secret that is
// not opr8r's (not labelled so), or not there yet, is NotFound, as it was
// when the cache held Secrets whole (the reconciler reads the API server
// itself when it must tell which); a list of Secrets is the API server's.
// Everything else is the manager's client.
type secretClient struct {
	client.Client
	meta client.Reader
	api  client.Reader
}

// Get reads a Secret the metadata cache holds from the API server, other
// objects from the manager's client.
func (c secretClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); !ok {
		return c.Client.Get(ctx, key, obj, opts...)
	}
	if err := c.meta.Get(ctx, key, secretMetadata()); err != nil {
		return err
	}
	return c.api.Get(ctx, key, obj, opts...)
}

// List lists Secrets from the API server, other objects with the
// manager's client.
func (c secretClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*corev1.SecretList); ok {
		return c.api.List(ctx, list, opts...)
	}
	return c.Client.List(ctx, list, opts...)
}
