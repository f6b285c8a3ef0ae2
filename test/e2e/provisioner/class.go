package main

import (
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const storageBindingImmediate = storagev1.VolumeBindingImmediate

func newClass(name string, annotations map[string]string, reclaim corev1.PersistentVolumeReclaimPolicy, mode storagev1.VolumeBindingMode) *storagev1.StorageClass {
	return &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name, Annotations: annotations},
		Provisioner:       provisionerName,
		ReclaimPolicy:     &reclaim,
		VolumeBindingMode: &mode,
	}
}
