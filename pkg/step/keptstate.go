package step

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
)

// StateKeeper keeps a state its backend did not take where it outlives
// the run's pods and workspace: a Secret of the TerraformRun, which the
// next run's init pushes to the backend before it plans.
type StateKeeper struct {
	Kube *Kube
	// Run is the TerraformRun; Owner, its reference, owns the Secret (it
	// goes with the TerraformRun, not with the run's engine object).
	Run   string
	Owner *metav1.OwnerReference
	// Child is the run's child, which names the Secret.
	Child string
}

// keep saves the errored state file in the run's Secret and returns the
// Secret's name.
func (k *StateKeeper) keep(ctx context.Context, file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	name := names.ErroredStateSecretName(k.Child)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: k.Kube.Namespace,
			Labels: map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue, infrav1.ComponentLabel: "errored-state", names.ErroredStateLabel: k.Run},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{names.ErroredStateKey: b},
	}
	if k.Owner != nil {
		s.OwnerReferences = []metav1.OwnerReference{*k.Owner}
	}
	if k.Kube.Shard != "" {
		s.Labels[infrav1.ShardLabel] = k.Kube.Shard
	}
	if _, err := k.Kube.stateClient().CoreV1().Secrets(k.Kube.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("keeping the state in Secret %s/%s: %w", k.Kube.Namespace, name, err)
	}
	return name, nil
}

// pushKept pushes to the backend, oldest first, the states earlier runs of
// the TerraformRun kept because their backend did not take them, and
// deletes each Secret once its state is in the backend. terraform state
// push takes the lock, and refuses a state older than the backend's (a
// lower serial, another lineage): then the step fails, naming the Secret,
// and a person decides.
func (r *Runner) pushKept(ctx context.Context, m Module) error {
	k := r.KeptStates
	if k == nil || k.Kube == nil || k.Run == "" {
		return nil
	}
	secrets := k.Kube.stateClient().CoreV1().Secrets(k.Kube.Namespace)
	list, err := secrets.List(ctx, metav1.ListOptions{LabelSelector: names.ErroredStateLabel + "=" + k.Run})
	if err != nil {
		return fmt.Errorf("looking for states earlier runs kept (Secrets labelled %s=%s): %w", names.ErroredStateLabel, k.Run, err)
	}
	items := list.Items
	sort.Slice(items, func(i, j int) bool {
		if !items[i].CreationTimestamp.Equal(&items[j].CreationTimestamp) {
			return items[i].CreationTimestamp.Before(&items[j].CreationTimestamp)
		}
		return items[i].Name < items[j].Name
	})
	for _, s := range items {
		if k.Owner != nil && !ownedBy(s.OwnerReferences, k.Owner.UID) {
			r.logf("warning: Secret %s/%s is labelled as a state of %s that an earlier run kept, but that TerraformRun does not own it: not pushed", k.Kube.Namespace, s.Name, k.Run)
			continue
		}
		file := filepath.Join(m.Dir, ErroredStateFile)
		if err := os.WriteFile(file, s.Data[names.ErroredStateKey], 0o600); err != nil {
			return err
		}
		_, _, err := r.tf(ctx, m.Dir, true, nil, "state", "push", r.lockTimeoutArg(), file)
		_ = os.Remove(file)
		if err != nil {
			return fmt.Errorf("the state an earlier run kept in Secret %s/%s, because its backend did not take it, could not be pushed: %w; if the backend holds it already, delete the Secret; if not, push it with terraform state push (-force if it is older than the backend's)", k.Kube.Namespace, s.Name, err)
		}
		if err := secrets.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("the state kept in Secret %s/%s is pushed, but the Secret could not be deleted: %w", k.Kube.Namespace, s.Name, err)
		}
		r.logf("pushed the state an earlier run kept in Secret %s/%s to the backend, and deleted the Secret", k.Kube.Namespace, s.Name)
	}
	return nil
}

func ownedBy(refs []metav1.OwnerReference, uid types.UID) bool {
	for _, o := range refs {
		if o.UID == uid {
			return true
		}
	}
	return false
}
