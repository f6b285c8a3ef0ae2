package main

import (
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// storageBinding is WaitForFirstConsumer, as rancher's local-path
// provisioner and most clouds' default classes have it: the scheduler
// places a pod whose claim is not bound yet and waits in its PreBind for
// the binding (the provisioner serves every claim at once, so it is
// quick). With Immediate, the scheduler refused such a pod ("pod has
// unbound immediate PersistentVolumeClaims") and parked it until an event
// about the claim requeued it; TestTektonDashboard's plan pod once waited
// out the scheduler's 5-minute flush of parked pods after such a refusal,
// and the test's 5-minute wait with it.
const storageBinding = storagev1.VolumeBindingWaitForFirstConsumer

func newClass(name string, annotations map[string]string, reclaim corev1.PersistentVolumeReclaimPolicy, mode storagev1.VolumeBindingMode) *storagev1.StorageClass {
	return &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name, Annotations: annotations},
		Provisioner:       provisionerName,
		ReclaimPolicy:     &reclaim,
		VolumeBindingMode: &mode,
	}
}
