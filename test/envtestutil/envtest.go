// Package envtestutil starts a real kube-apiserver and etcd (envtest) with
// opr8r's CRDs, and installs the engines' CRDs, which their test kits take
// from the module cache at the versions pinned in go.mod.
package envtestutil

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/opr8r/opr8r/pkg/engine/enginetest"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// RepoRoot is the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Start starts envtest with opr8r's CRD installed. KUBEBUILDER_ASSETS must
// point at the binaries from make envtest-assets.
func Start() (*envtest.Environment, *rest.Config, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run the tests with make test (it builds kube-apiserver and etcd into bin/)")
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, err
	}
	if err := InstallPolicies(cfg); err != nil {
		_ = env.Stop()
		return nil, nil, err
	}
	return env, cfg, nil
}

// InstallPolicies creates opr8r's admission policies from config/policy, as
// kustomize and the Helm chart install them: first the namespaces of the
// objects there (opr8r-system, of the ConfigMap opr8r-identities that the
// guards' bindings read, failing closed without it), then those objects,
// then the policies, then their bindings.
func InstallPolicies(cfg *rest.Config) error {
	files, err := filepath.Glob(filepath.Join(RepoRoot(), "config", "policy", "*.yaml"))
	if err != nil {
		return err
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if len(u.Object) > 0 {
				objs = append(objs, u)
			}
		}
	}
	rank := func(u *unstructured.Unstructured) int {
		switch {
		case strings.HasSuffix(u.GetKind(), "PolicyBinding"):
			return 2
		case strings.HasSuffix(u.GetKind(), "Policy"):
			return 1
		}
		return 0
	}
	sort.SliceStable(objs, func(i, j int) bool { return rank(objs[i]) < rank(objs[j]) })
	s := kruntime.NewScheme()
	if err := admissionregistrationv1.AddToScheme(s); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	ctx := context.Background()
	runner := ""
	for _, u := range objs {
		if u.GetKind() == "ConfigMap" && u.GetName() == "opr8r-identities" {
			runners, _, _ := unstructured.NestedString(u.Object, "data", "runnerServiceAccounts")
			runner, _, _ = strings.Cut(strings.TrimSpace(runners), "\n")
		}
		if ns := u.GetNamespace(); ns != "" {
			n := &unstructured.Unstructured{}
			n.SetAPIVersion("v1")
			n.SetKind("Namespace")
			n.SetName(ns)
			if err := c.Create(ctx, n); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating namespace %s: %w", ns, err)
			}
		}
	}
	for _, u := range objs {
		if err := c.Create(ctx, u); err != nil {
			return fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return waitForPolicies(c, runner)
}

// waitForPolicies waits until the admission policies act: the API server
// loads them, and the schemas of the CRDs they match, a moment after they
// are created. A dry-run TerraformRun must be admitted with its author
// stamped and its finalizer added, and a dry-run TerraformRunApproval with
// its user; the guards must refuse a dry-run token Secret of the runner
// service account (they read opr8r-identities) and admit a ConfigMap (their
// parameters, opr8r-guard, are listed).
func waitForPolicies(c client.Client, runner string) error {
	run := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "infra.opr8r.io/v1alpha1", "kind": "TerraformRun",
		"metadata": map[string]any{"name": "policy-probe", "namespace": "default"},
		"spec":     map[string]any{"source": map[string]any{"inline": map[string]any{"files": map[string]any{"main.tf": "\n"}}}},
	}}
	approval := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "infra.opr8r.io/v1alpha1", "kind": "TerraformRunApproval",
		"metadata": map[string]any{"name": "policy-probe", "namespace": "default"},
		"spec":     map[string]any{"runName": "policy-probe", "planDigest": "sha256:" + strings.Repeat("0", 64)},
	}}
	token := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
		"metadata": map[string]any{"name": "policy-probe", "namespace": "default",
			"annotations": map[string]any{"kubernetes.io/service-account.name": runner}},
	}}
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "policy-probe", "namespace": "default"},
	}}
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200_000_000, 60_000_000_000, true, func(ctx context.Context) (bool, error) {
		r, a := run.DeepCopy(), approval.DeepCopy()
		if last = c.Create(ctx, r, client.DryRunAll); last != nil {
			return false, nil
		}
		if last = c.Create(ctx, a, client.DryRunAll); last != nil {
			return false, nil
		}
		author := r.GetAnnotations()["infra.opr8r.io/spec-author"]
		user, _, _ := unstructured.NestedString(a.Object, "spec", "user")
		if author == "" || user == "" || len(r.GetFinalizers()) == 0 {
			last = fmt.Errorf("not stamped yet: author %q, user %q, finalizers %v", author, user, r.GetFinalizers())
			return false, nil
		}
		if runner != "" {
			if err := c.Create(ctx, token.DeepCopy(), client.DryRunAll); err == nil || !strings.Contains(err.Error(), "a token of runner service account") {
				last = fmt.Errorf("a runner's token Secret not refused by opr8r-runner-credentials yet: %v", err)
				return false, nil
			}
		}
		if last = c.Create(ctx, cm.DeepCopy(), client.DryRunAll); last != nil {
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("opr8r's admission policies did not take effect within a minute: %v", last)
	}
	return nil
}

// ModuleDir returns the directory of a module pinned in go.mod.
func ModuleDir(module string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = RepoRoot()
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go list -m %s: %v: %s", module, err, stderr.String())
	}
	dir := strings.TrimSpace(out.String())
	if dir == "" {
		return "", fmt.Errorf("module %s is not in the module cache: run go mod download", module)
	}
	return dir, nil
}

// ModuleCRDs reads the CRDs that match glob (a path inside the module)
// from a module at the version go.mod pins: an engine's test kit names its
// own (enginetest.Kit.CRDs).
func ModuleCRDs(module, glob string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	dir, err := ModuleDir(module)
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, glob))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no CRDs at %s/%s: %v", dir, glob, err)
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(b, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// InstallKitCRDs installs the CRDs of every kit's engine (an engine
// without CRDs has none).
func InstallKitCRDs(ctx context.Context, cfg *rest.Config, kits []enginetest.Kit) error {
	for _, k := range kits {
		if k.CRDs == nil {
			continue
		}
		crds, err := k.CRDs()
		if err != nil {
			return fmt.Errorf("the %s engine's CRDs: %w", k.Engine.Name(), err)
		}
		if err := InstallCRDs(ctx, cfg, crds); err != nil {
			return err
		}
	}
	return nil
}

// InstallCRDs server-side applies CRDs (an engine's may be too large for a
// client-side apply) and waits until they are established.
func InstallCRDs(ctx context.Context, cfg *rest.Config, crds []*apiextensionsv1.CustomResourceDefinition) error {
	s := kruntime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	for _, crd := range crds {
		crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
		crd.ResourceVersion = ""
		if err := c.Patch(ctx, crd, client.Apply, client.FieldOwner("opr8r-tests"), client.ForceOwnership); err != nil { //nolint:staticcheck
			return fmt.Errorf("applying CRD %s: %w", crd.Name, err)
		}
	}
	return wait.PollUntilContextTimeout(ctx, 100_000_000, 60_000_000_000, true, func(ctx context.Context) (bool, error) {
		for _, crd := range crds {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: crd.Name}, got); err != nil {
				if apierrors.IsNotFound(err) {
					return false, nil
				}
				return false, err
			}
			established := false
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					established = true
				}
			}
			if !established {
				return false, nil
			}
		}
		return true, nil
	})
}
