package manager

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// DefaultSealKeySecret is the Secret, in the manager's own namespace, that
// holds the key the manager seals the children it drives itself with
// (engine.Seals): tenants cannot read or write it there.
const DefaultSealKeySecret = "opr8r-seal-key"

// sealKeyName is the key of the seal key in its Secret.
const sealKeyName = "key"

// LoadSealKey reads the manager's seal key from Secret name in namespace ns,
// or creates it, with 32 random bytes, when it does not exist yet: every
// replica and restart then uses the same key. c must read past any cache.
func LoadSealKey(ctx context.Context, c client.Client, ns, name string) ([]byte, error) {
	for range 2 {
		s := &corev1.Secret{}
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)
		if err == nil {
			key := s.Data[sealKeyName]
			if len(key) < 32 {
				return nil, fmt.Errorf("Secret %s/%s holds a seal key of %d bytes, want at least 32 under %q: delete it and the manager makes a new one (runs on the Job engine that are active then stop)", ns, name, len(key), sealKeyName)
			}
			return key, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading the seal key Secret %s/%s: %w", ns, name, err)
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue}},
			Data:       map[string][]byte{sealKeyName: key},
		}
		err = c.Create(ctx, s)
		if err == nil {
			return key, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating the seal key Secret %s/%s: %w", ns, name, err)
		}
		// Another replica made it first: read theirs.
	}
	return nil, fmt.Errorf("the seal key Secret %s/%s could not be read or made", ns, name)
}

// OwnNamespace is the namespace the manager runs in: POD_NAMESPACE, else
// its service account's, else def.
func OwnNamespace(def string) string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b))
	}
	return def
}
