// Command provisioner is the e2e cluster's local volume provisioner. It runs
// on the node, as root, and gives every PersistentVolumeClaim of its
// StorageClass a hostPath PersistentVolume in a fresh directory under -root,
// world-writable because the runs' pods are non-root and fsGroup does not
// apply to hostPath. When a claim is deleted the volume is Released; the
// provisioner then removes the directory and the volume.
//
// It does what rancher's local-path-provisioner does for one node, without
// a helper pod image.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	provisionerName = "opr8r.io/e2e-local-path"
	pathAnnotation  = "opr8r.io/e2e-local-path"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	root := flag.String("root", "", "directory that holds the volumes")
	class := flag.String("storage-class", "local-path", "StorageClass served")
	node := flag.String("node", "", "node name the volumes are pinned to")
	flag.Parse()
	if *kubeconfig == "" || *root == "" || *node == "" {
		log.Fatal("provisioner: -kubeconfig, -root and -node are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	p := &prov{cs: cs, root: *root, class: *class, node: *node}
	if err := p.ensureClass(ctx); err != nil {
		log.Fatal(err)
	}
	log.Printf("provisioner: serving StorageClass %s from %s", *class, *root)
	for {
		if err := p.pass(ctx); err != nil && ctx.Err() == nil {
			log.Printf("provisioner: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// selectedNodeAnnotation is where the scheduler writes the node it picked
// for a pod whose WaitForFirstConsumer claim is not bound yet.
const selectedNodeAnnotation = "volume.kubernetes.io/selected-node"

type prov struct {
	cs                *kubernetes.Clientset
	root, class, node string
}

func (p *prov) ensureClass(ctx context.Context) error {
	sc := map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
	del := corev1.PersistentVolumeReclaimDelete
	want := newClass(p.class, sc, del, storageBinding)
	have, err := p.cs.StorageV1().StorageClasses().Get(ctx, p.class, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil {
		if have.VolumeBindingMode != nil && *have.VolumeBindingMode == storageBinding {
			return nil
		}
		// a kept cluster's class from before: the mode cannot be changed in
		// place; bound volumes keep their class by name
		if err := p.cs.StorageV1().StorageClasses().Delete(ctx, p.class, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	_, err = p.cs.StorageV1().StorageClasses().Create(ctx, want, metav1.CreateOptions{})
	return err
}

// pass provisions pending claims and reclaims released volumes.
func (p *prov) pass(ctx context.Context) error {
	pvcs, err := p.cs.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range pvcs.Items {
		c := &pvcs.Items[i]
		if c.Status.Phase != corev1.ClaimPending || c.Spec.VolumeName != "" || c.DeletionTimestamp != nil {
			continue
		}
		if c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != p.class {
			continue
		}
		// WaitForFirstConsumer: provision once the scheduler has picked the
		// claim's node for a pod (external-provisioner's rule). A volume
		// made before that is one the scheduler finds and binds itself in
		// its PreBind, racing the PV controller's binding of it: the pod was
		// refused ("the object has been modified") and retried after a
		// backoff, 16 times in one make e2e.
		if c.Annotations[selectedNodeAnnotation] == "" {
			continue
		}
		if err := p.provision(ctx, c); err != nil {
			log.Printf("provisioner: claim %s/%s: %v", c.Namespace, c.Name, err)
		}
	}
	pvs, err := p.cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range pvs.Items {
		v := &pvs.Items[i]
		dir := v.Annotations[pathAnnotation]
		if dir == "" || v.Status.Phase != corev1.VolumeReleased {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Printf("provisioner: removing %s: %v", dir, err)
			continue
		}
		if err := p.cs.CoreV1().PersistentVolumes().Delete(ctx, v.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			log.Printf("provisioner: deleting volume %s: %v", v.Name, err)
			continue
		}
		log.Printf("provisioner: reclaimed %s", v.Name)
	}
	return nil
}

func (p *prov) provision(ctx context.Context, c *corev1.PersistentVolumeClaim) error {
	name := "pvc-" + string(c.UID)
	dir := filepath.Join(p.root, fmt.Sprintf("%s_%s_%s", c.Namespace, c.Name, c.UID))
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o777); err != nil { // umask-proof
		return err
	}
	size, ok := c.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return fmt.Errorf("no storage request")
	}
	hostType := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{pathAnnotation: dir, "pv.kubernetes.io/provisioned-by": provisionerName},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   c.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              p.class,
			VolumeMode:                    c.Spec.VolumeMode,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: c.Namespace, Name: c.Name, UID: c.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostType}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{p.node}}},
			}}}},
		},
	}
	_, err := p.cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err == nil {
		log.Printf("provisioner: %s/%s -> %s (%s)", c.Namespace, c.Name, name, dir)
	}
	return err
}
