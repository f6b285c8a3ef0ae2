package step

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Kube is the step's access to the API server, with the pod's service
// account (or a kubeconfig outside a cluster).
type Kube struct {
	// Client reaches the API server as the pod's service account.
	Client kubernetes.Interface
	// State reaches Secrets and Leases: the manager's state API when the
	// step has one (the service account holds no right on them), else
	// Client.
	State     kubernetes.Interface
	Namespace string
	// Owner is the child (Workflow or PipelineRun) that owns the Secrets the
	// steps write, so they are deleted with it.
	Owner *metav1.OwnerReference
	// Shard is the run's shard (see infrav1.ShardLabel), put on the
	// Secrets the steps write so only that shard's manager caches them.
	Shard string
}

// NewKube connects with the in-cluster config, or with kubeconfig when set.
func NewKube(kubeconfig, namespace string, owner *metav1.OwnerReference) (*Kube, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Kube{Client: c, State: c, Namespace: namespace, Owner: owner}, nil
}

// UseStateAPI makes k reach Secrets and Leases through the state API's
// kubeconfig.
func (k *Kube) UseStateAPI(kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("the state API's kubeconfig: %w", err)
	}
	StateAPIConfig(cfg)
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	k.State = c
	return nil
}

// StateAPIConfig makes cfg speak JSON, the only encoding the state API
// reads (it checks what a step writes).
func StateAPIConfig(cfg *rest.Config) {
	cfg.ContentType = "application/json"
	cfg.AcceptContentTypes = "application/json"
}

// stateClient is where the step's Secrets and Leases are.
func (k *Kube) stateClient() kubernetes.Interface {
	if k.State != nil {
		return k.State
	}
	return k.Client
}

// OwnerRef builds the owner reference of the child from its kind, name and uid.
func OwnerRef(apiVersion, kind, name, uid string) *metav1.OwnerReference {
	if name == "" || uid == "" {
		return nil
	}
	return &metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid)}
}

// WriteSecret creates or replaces a Secret owned by the child, labelled so
// the manager's cache sees it.
func (k *Kube) WriteSecret(ctx context.Context, name, component string, data map[string][]byte) error {
	return k.writeSecret(ctx, name, component, data, true)
}

// CreateSecret is WriteSecret for a step whose service account may create
// Secrets and not read or change them (checks, as opr8r-check): a Secret of
// that name that exists, from an earlier attempt, is kept and reported.
func (k *Kube) CreateSecret(ctx context.Context, name, component string, data map[string][]byte) error {
	return k.writeSecret(ctx, name, component, data, false)
}

func (k *Kube) writeSecret(ctx context.Context, name, component string, data map[string][]byte, replace bool) error {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: k.Namespace,
			Labels: map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue, infrav1.ComponentLabel: component},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	if k.Shard != "" {
		s.Labels[infrav1.ShardLabel] = k.Shard
	}
	if k.Owner != nil {
		s.OwnerReferences = []metav1.OwnerReference{*k.Owner}
	}
	secrets := k.stateClient().CoreV1().Secrets(k.Namespace)
	_, err := secrets.Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) && !replace {
		return fmt.Errorf("writing Secret %s/%s: an earlier attempt wrote it, and this step may not replace it: %w", k.Namespace, name, err)
	}
	if apierrors.IsAlreadyExists(err) {
		// A retried step replaces what an earlier attempt wrote.
		old, gerr := secrets.Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		s.ResourceVersion = old.ResourceVersion
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("writing Secret %s/%s: %w", k.Namespace, name, err)
	}
	return nil
}

// WriteStateKubeconfig writes, at path, the kubeconfig of the manager's
// state API at url (server certificate caPEM, when https), authenticated by
// the projected token at tokenFile (none when empty: the step's loopback
// StateProxy adds it), which client-go reads again as the kubelet renews
// it.
func WriteStateKubeconfig(path, url, caPEM, tokenFile string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["state"] = &clientcmdapi.Cluster{Server: url}
	if caPEM != "" {
		cfg.Clusters["state"].CertificateAuthorityData = []byte(caPEM)
	}
	cfg.AuthInfos["step"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	cfg.Contexts["state"] = &clientcmdapi.Context{Cluster: "state", AuthInfo: "step"}
	cfg.CurrentContext = "state"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}
