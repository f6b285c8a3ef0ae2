package controller

import (
	"errors"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// TestProviderCacheClaimBeforeTheChild: with --provider-cache-claim, a run
// that starts makes its namespace's claim (the child's pods mount it) at
// the size and class the install set; a claim already there, the
// namespace's own, is used as it is; one being deleted holds the run back
// until it is gone (its pods would wait for good); without the flag no
// claim is made.
func TestProviderCacheClaimBeforeTheChild(t *testing.T) {
	providers := engine.Providers{CacheClaim: "opr8r-provider-cache", CacheSize: "3Gi", CacheStorageClass: "fast"}
	for name, tc := range map[string]struct {
		providers engine.Providers
		existing  []client.Object
		wantSize  string // "" for no claim
		wantWait  bool
	}{
		"made when missing": {providers: providers, wantSize: "3Gi"},
		"the namespace's own is kept": {providers: providers, wantSize: "1Gi", existing: []client.Object{&corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "opr8r-provider-cache"},
			Spec:       corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}}},
		"none without the flag": {},
		"one being deleted: the run waits, nothing is made": {providers: providers, wantWait: true, existing: []client.Object{&corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "opr8r-provider-cache", DeletionTimestamp: &metav1.Time{Time: t0}, Finalizers: []string{"kubernetes.io/pvc-protection"}},
		}}},
	} {
		t.Run(name, func(t *testing.T) {
			run := aRun("a")
			r, c := newReconciler(t, &fakeEngine{}, append(tc.existing, run.DeepCopy())...)
			r.Config.Providers = tc.providers
			_, _, err := runSub(r, run, r.reconcileStart)
			if tc.wantWait {
				var we *WaitingError
				if !errors.As(err, &we) || we.Reason != infrav1.ReasonProviderCacheDeleting || !contains(err.Error(), "opr8r-provider-cache is being deleted") {
					t.Fatalf("err = %v, want a wait for the claim", err)
				}
				jobs := &batchv1.JobList{}
				if err := c.List(ctx(), jobs); err != nil || len(jobs.Items) != 0 {
					t.Fatalf("a child was made while its cache claim is being deleted: %v %d", err, len(jobs.Items))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if run.Status.Run == nil || run.Status.Run.ID != "a-1" {
				t.Fatalf("the run did not start: %+v", run.Status.Run)
			}
			pvc := &corev1.PersistentVolumeClaim{}
			err = c.Get(ctx(), client.ObjectKey{Namespace: "ns", Name: "opr8r-provider-cache"}, pvc)
			if tc.wantSize == "" {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("a claim without --provider-cache-claim: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != tc.wantSize {
				t.Errorf("claim size %s, want %s", got.String(), tc.wantSize)
			}
			if tc.existing == nil && (pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "fast" || len(pvc.OwnerReferences) != 0) {
				t.Errorf("claim %+v: want class fast and no owner (it outlives runs)", pvc)
			}
		})
	}
}

// TestProviderCacheClaimSettings: a size that is not a quantity and an
// access mode that cannot hold a shared cache are refused when the manager
// starts, naming the flag; the defaults are 2Gi, the cluster's default
// class, ReadWriteOnce; ReadWriteMany is the install's choice.
func TestProviderCacheClaimSettings(t *testing.T) {
	for name, tc := range map[string]struct {
		p        engine.Providers
		wantErr  string
		wantMode corev1.PersistentVolumeAccessMode
	}{
		"defaults":           {p: engine.Providers{CacheClaim: "c"}, wantMode: corev1.ReadWriteOnce},
		"ReadWriteMany":      {p: engine.Providers{CacheClaim: "c", CacheAccessMode: "ReadWriteMany"}, wantMode: corev1.ReadWriteMany},
		"not a size":         {p: engine.Providers{CacheClaim: "c", CacheSize: "lots"}, wantErr: "--provider-cache-size"},
		"ReadWriteOncePod":   {p: engine.Providers{CacheClaim: "c", CacheAccessMode: "ReadWriteOncePod"}, wantErr: "--provider-cache-access-mode"},
		"ReadOnlyMany":       {p: engine.Providers{CacheClaim: "c", CacheAccessMode: "ReadOnlyMany"}, wantErr: "--provider-cache-access-mode"},
		"lower case, a typo": {p: engine.Providers{CacheClaim: "c", CacheAccessMode: "readwritemany"}, wantErr: "give ReadWriteOnce"},
	} {
		t.Run(name, func(t *testing.T) {
			pvc, err := ProviderCacheClaim("ns", tc.p)
			if tc.wantErr != "" {
				if err == nil || !contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || pvc.Spec.Resources.Requests.Storage().String() != DefaultProviderCacheSize || pvc.Spec.StorageClassName != nil ||
				len(pvc.Spec.AccessModes) != 1 || pvc.Spec.AccessModes[0] != tc.wantMode {
				t.Fatalf("claim %+v, %v; want 2Gi, no class, %s", pvc.Spec, err, tc.wantMode)
			}
		})
	}
}
