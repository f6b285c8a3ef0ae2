package controller

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=create;get

// DefaultProviderCacheSize is the provider cache claim's size when
// --provider-cache-size is empty.
const DefaultProviderCacheSize = "2Gi"

// ProviderCacheClaim is the claim the manager makes, in a run's namespace,
// for the namespace's shared plugin cache (engine.Providers.CacheClaim).
// It belongs to no run: it outlives them, and goes with the namespace.
func ProviderCacheClaim(ns string, p engine.Providers) (*corev1.PersistentVolumeClaim, error) {
	size := cmp.Or(p.CacheSize, DefaultProviderCacheSize)
	q, err := resource.ParseQuantity(size)
	if err != nil {
		return nil, fmt.Errorf("--provider-cache-size %q: %w", size, err)
	}
	mode := corev1.PersistentVolumeAccessMode(cmp.Or(p.CacheAccessMode, string(corev1.ReadWriteOnce)))
	if mode != corev1.ReadWriteOnce && mode != corev1.ReadWriteMany {
		// ReadWriteOncePod would hold every other run's steps Pending while
		// one pod mounts it; read-only modes cannot hold a cache.
		return nil, fmt.Errorf("--provider-cache-access-mode %q: give ReadWriteOnce (one node at a time) or ReadWriteMany (a StorageClass whose volumes several nodes mount)", mode)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: p.CacheClaim, Namespace: ns, Labels: map[string]string{"app.kubernetes.io/managed-by": "opr8r"},
			Annotations: map[string]string{"infra.opr8r.io/purpose": "terraform's plugin cache, shared by this namespace's TerraformRuns"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{mode},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q}},
		},
	}
	if p.CacheStorageClass != "" {
		pvc.Spec.StorageClassName = &p.CacheStorageClass
	}
	return pvc, nil
}

// ensureProviderCache makes the namespace's provider cache claim when it
// is missing, before a child whose pods mount it. It reads the claim from
// the API server, not the cache (PersistentVolumeClaims stay out of the
// manager's cache and watches): one read per run started, where a create
// tried every time would go through admission only to be refused. A claim
// a namespace's user made under that name is used as it is: it serves only
// that namespace's runs.
func (r *TerraformRunReconciler) ensureProviderCache(ctx context.Context, ns string) error {
	p := r.Config.Providers
	if p.CacheClaim == "" {
		return nil
	}
	pvc, err := ProviderCacheClaim(ns, p)
	if err != nil { // checked at the manager's start
		return generic("ProviderCacheSize", err, "making the provider cache PersistentVolumeClaim %s", p.CacheClaim)
	}
	existing := &corev1.PersistentVolumeClaim{}
	switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pvc), existing); {
	case apierrors.IsNotFound(err):
		if err := r.Create(ctx, pvc); err != nil && !apierrors.IsAlreadyExists(err) {
			return generic("CreateProviderCache", err, "creating the provider cache PersistentVolumeClaim %s", p.CacheClaim)
		}
		return nil
	case err != nil:
		return generic("GetProviderCache", err, "reading the provider cache PersistentVolumeClaim %s", p.CacheClaim)
	case existing.DeletionTimestamp != nil:
		// One being deleted (someone emptied the cache) would leave the
		// child's pods Pending for good: wait until it is gone, then make
		// it again.
		return waiting(infrav1.ReasonProviderCacheDeleting, providerCacheRetry,
			"the namespace's provider cache PersistentVolumeClaim %s is being deleted (its pods still run); the run starts once it is gone and made again", p.CacheClaim)
	}
	return nil
}

// providerCacheRetry is how soon a run waiting for a provider cache claim
// being deleted looks again.
const providerCacheRetry = 5 * time.Second
