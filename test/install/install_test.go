// Package install checks what users install: the kustomize overlays and the
// Helm chart render, carry exactly the generated CRD, follow the security
// rules, and are accepted by a real API server (server-side dry run).
package install

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opr8r/opr8r/engines"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/opr8r/opr8r/test/envtestutil"
)

func tool(t *testing.T, env string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		t.Fatalf("%s is not set: run the tests with make test, which builds helm and kustomize", env)
	}
	return p
}

func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = envtestutil.RepoRoot()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(bin), args, err, errb.String())
	}
	return out.String()
}

// objects parses a multi-document YAML stream.
func objects(t *testing.T, s string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(s), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("parsing rendered YAML: %v", err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out
}

func byKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func convert[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// generatedCRDs are config/crd/bases' CRDs by name.
func generatedCRDs(t *testing.T) map[string]*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(envtestutil.RepoRoot(), "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated CRDs: %v", err)
	}
	out := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(b, crd); err != nil {
			t.Fatal(err)
		}
		out[crd.Name] = crd
	}
	return out
}

// allEngines are the names of every engine opr8r ships.
func allEngines() []string {
	var out []string
	for _, e := range engines.All() {
		out = append(out, string(e.Name()))
	}
	return out
}

// wantPolicies counts the admission policies of a kind that an install
// with the given engines has: opr8r's own (config/policy) and each
// engine's (config/policy/engine-<name>.yaml, from its package).
func wantPolicies(t *testing.T, kind string, enabled []string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(envtestutil.RepoRoot(), "config", "policy", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		b := filepath.Base(f)
		if e, ok := strings.CutPrefix(strings.TrimSuffix(b, ".yaml"), "engine-"); b == "kustomization.yaml" || ok && !slices.Contains(enabled, e) {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n += len(byKind(objects(t, string(data)), kind))
	}
	return n
}

// checkCommon checks what both install paths must get right, for an
// install with the given engines enabled.
func checkCommon(t *testing.T, objs []*unstructured.Unstructured, enabled []string) {
	t.Helper()
	crds, want := byKind(objs, "CustomResourceDefinition"), generatedCRDs(t)
	if len(crds) != len(want) {
		t.Fatalf("want %d CRDs, got %d", len(want), len(crds))
	}
	for _, u := range crds {
		gen, ok := want[u.GetName()]
		if !ok {
			t.Fatalf("CRD %s is not one that controller-gen generated", u.GetName())
		}
		if diff := cmp.Diff(gen.Spec, convert[apiextensionsv1.CustomResourceDefinition](t, u).Spec); diff != "" {
			t.Errorf("the installed CRD %s differs from the generated one (-generated +installed):\n%s", u.GetName(), diff)
		}
	}
	for _, kind := range []string{"MutatingAdmissionPolicy", "ValidatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicyBinding"} {
		if n, want := len(byKind(objs, kind)), wantPolicies(t, kind, enabled); n != want {
			t.Errorf("want %d %ss (opr8r's and engines %v's), got %d", want, kind, enabled, n)
		}
	}
	if n := len(byKind(objs, "ValidatingAdmissionPolicy")); n < 6 {
		t.Errorf("want at least opr8r's own 6 ValidatingAdmissionPolicies, got %d", n)
	}
	// The manager's, each engine's, the approver's and the editor's.
	wantRoles := 3 + len(enabled)
	roles := byKind(objs, "ClusterRole")
	if len(roles) != wantRoles {
		t.Errorf("want %d ClusterRoles, got %d", wantRoles, len(roles))
	}
	for _, u := range append(roles, byKind(objs, "Role")...) {
		for _, r := range convert[rbacv1.ClusterRole](t, u).Rules {
			for _, s := range append(append(r.Verbs, r.Resources...), r.APIGroups...) {
				if s == "*" {
					t.Errorf("%s %s grants a wildcard: %+v", u.GetKind(), u.GetName(), r)
				}
			}
		}
	}
	deps := byKind(objs, "Deployment")
	if len(deps) != 1 {
		t.Fatalf("want 1 Deployment, got %d", len(deps))
	}
	d := convert[appsv1.Deployment](t, deps[0])
	ps := d.Spec.Template.Spec
	c := ps.Containers[0]
	if ps.SecurityContext == nil || !*ps.SecurityContext.RunAsNonRoot || ps.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context is not hardened: %+v", ps.SecurityContext)
	}
	if c.SecurityContext == nil || *c.SecurityContext.AllowPrivilegeEscalation || !*c.SecurityContext.ReadOnlyRootFilesystem || c.SecurityContext.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container security context is not hardened: %+v", c.SecurityContext)
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("manager lacks probes or limits")
	}
	if !strings.Contains(strings.Join(c.Args, " "), "--leader-elect") {
		t.Errorf("manager args %v lack --leader-elect", c.Args)
	}
}

func TestKustomizeDefault(t *testing.T) {
	k := tool(t, "OPR8R_KUSTOMIZE")
	objs := objects(t, run(t, k, "build", "config/default"))
	checkCommon(t, objs, allEngines())

	for _, dir := range []string{"config/rbac/runner", "config/samples", "config/crd"} {
		if len(objects(t, run(t, k, "build", dir))) == 0 {
			t.Errorf("kustomize build %s rendered nothing", dir)
		}
	}
	dryRun(t, objs)
}

// TestCrossNamespaceDependencies: spec.dependsOn across namespaces is off
// unless the installer turns it on, with the kustomize component or the
// Helm value.
func TestCrossNamespaceDependencies(t *testing.T) {
	const flag = "--allow-cross-namespace-dependencies"
	managerArgs := func(objs []*unstructured.Unstructured) string {
		return strings.Join(convert[appsv1.Deployment](t, byKind(objs, "Deployment")[0]).Spec.Template.Spec.Containers[0].Args, " ")
	}
	k := tool(t, "OPR8R_KUSTOMIZE")
	if args := managerArgs(objects(t, run(t, k, "build", "config/default"))); strings.Contains(args, flag) {
		t.Errorf("config/default allows cross-namespace dependencies: %s", args)
	}
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, envtestutil.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%s/config/default]\ncomponents: [%s/config/components/cross-namespace-dependencies]\n", rel, rel)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	if args := managerArgs(objects(t, run(t, k, "build", overlay))); !strings.Contains(args, flag) {
		t.Errorf("the component does not add %s: %s", flag, args)
	}
	h := tool(t, "OPR8R_HELM")
	if args := managerArgs(objects(t, run(t, h, "template", "opr8r", "deploy/opr8r"))); strings.Contains(args, flag) {
		t.Errorf("the chart allows cross-namespace dependencies by default: %s", args)
	}
	if args := managerArgs(objects(t, run(t, h, "template", "opr8r", "deploy/opr8r", "--set", "allowCrossNamespaceDependencies=true"))); !strings.Contains(args, flag) {
		t.Errorf("allowCrossNamespaceDependencies=true does not add %s: %s", flag, args)
	}
}

func TestHelmChart(t *testing.T) {
	h := tool(t, "OPR8R_HELM")
	t.Run("defaults", func(t *testing.T) {
		objs := objects(t, run(t, h, "template", "opr8r", "deploy/opr8r", "-n", "opr8r-system", "--include-crds"))
		checkCommon(t, objs, allEngines())
		dryRun(t, objs)
	})
	t.Run("one engine: rights and flags for that engine only", func(t *testing.T) {
		// Each engine alone: only its rights, its policies and its flag.
		for _, keep := range allEngines() {
			setArgs := []string{"template", "opr8r", "deploy/opr8r", "--include-crds"}
			for _, e := range allEngines() {
				if e != keep {
					setArgs = append(setArgs, "--set", "engines."+e+".enabled=false")
				}
			}
			objs := objects(t, run(t, h, setArgs...))
			checkCommon(t, objs, []string{keep})
			for _, r := range byKind(objs, "ClusterRole") {
				for _, e := range allEngines() {
					if e != keep && strings.HasSuffix(r.GetName(), "-"+e) {
						t.Errorf("rights of a disabled engine rendered: %s", r.GetName())
					}
				}
			}
			args := strings.Join(convert[appsv1.Deployment](t, byKind(objs, "Deployment")[0]).Spec.Template.Spec.Containers[0].Args, " ")
			if !strings.Contains(args, "--engines="+keep+" ") && !strings.HasSuffix(args, "--engines="+keep) {
				t.Errorf("args %q, want --engines=%s", args, keep)
			}
		}
	})
	t.Run("a cluster without admission policies: none rendered, and the manager trusts no stamp", func(t *testing.T) {
		objs := objects(t, run(t, h, "template", "opr8r", "deploy/opr8r", "--set", "admissionPolicies.enabled=false"))
		for _, k := range []string{"MutatingAdmissionPolicy", "ValidatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicyBinding"} {
			if n := len(byKind(objs, k)); n != 0 {
				t.Errorf("%d %s rendered", n, k)
			}
		}
		args := strings.Join(convert[appsv1.Deployment](t, byKind(objs, "Deployment")[0]).Spec.Template.Spec.Containers[0].Args, " ")
		if !strings.Contains(args, "--admission-policies=false") {
			t.Errorf("args %q, want --admission-policies=false", args)
		}
	})
	t.Run("ServiceMonitor, watched namespaces and runner namespaces", func(t *testing.T) {
		objs := objects(t, run(t, h, "template", "opr8r", "deploy/opr8r", "--set", "metrics.serviceMonitor.enabled=true",
			"--set", "watchNamespaces={team-a,team-b}", "--set", "runner.namespaces={team-a}"))
		if len(byKind(objs, "ServiceMonitor")) != 1 {
			t.Error("no ServiceMonitor")
		}
		args := strings.Join(convert[appsv1.Deployment](t, byKind(objs, "Deployment")[0]).Spec.Template.Spec.Containers[0].Args, " ")
		if !strings.Contains(args, "--watch-namespaces=team-a,team-b") {
			t.Errorf("args %q lack the watched namespaces", args)
		}
		var runnerRole *unstructured.Unstructured
		for _, r := range byKind(objs, "Role") {
			if r.GetName() == "opr8r-runner" && r.GetNamespace() == "team-a" {
				runnerRole = r
			}
		}
		if runnerRole == nil {
			t.Fatal("no runner Role in team-a")
		}
	})
	t.Run("sharding: a manager per shard, each with its own selector and leader election", func(t *testing.T) {
		objs := objects(t, run(t, h, "template", "opr8r", "deploy/opr8r", "-n", "opr8r-system", "--set", "sharding.shards={s1,s2}"))
		deps := byKind(objs, "Deployment")
		want := map[string]string{"opr8r": "--unsharded-only", "opr8r-shard-s1": "--shard=s1", "opr8r-shard-s2": "--shard=s2"}
		if len(deps) != len(want) {
			t.Fatalf("want %d Deployments, got %d", len(want), len(deps))
		}
		selectors := map[string]bool{}
		for _, u := range deps {
			d := convert[appsv1.Deployment](t, u)
			flag, ok := want[d.Name]
			if !ok {
				t.Errorf("unexpected Deployment %s", d.Name)
				continue
			}
			args := d.Spec.Template.Spec.Containers[0].Args
			if !slices.Contains(args, flag) || !slices.Contains(args, "--leader-elect") {
				t.Errorf("%s args %v, want %s and --leader-elect", d.Name, args, flag)
			}
			sel := metav1.FormatLabelSelector(d.Spec.Selector)
			if selectors[sel] {
				t.Errorf("%s shares its selector %s with another Deployment", d.Name, sel)
			}
			selectors[sel] = true
			for _, o := range deps {
				od := convert[appsv1.Deployment](t, o)
				s, _ := metav1.LabelSelectorAsSelector(d.Spec.Selector)
				if od.Name != d.Name && s.Matches(labels.Set(od.Spec.Template.Labels)) {
					t.Errorf("%s's selector %s matches %s's pods", d.Name, sel, od.Name)
				}
			}
		}
		if n := len(byKind(objs, "Service")); n != 2 {
			t.Errorf("want the metrics Services of the default manager and of the shards, got %d", n)
		}
		dryRun(t, objs)
	})
	t.Run("the records' object store: flags, and its credentials mounted into the manager only", func(t *testing.T) {
		objs := objects(t, run(t, h, "template", "opr8r", "deploy/opr8r", "-n", "opr8r-system", "--set", "records.objectStore.endpoint=s3.example.com",
			"--set", "records.objectStore.bucket=opr8r-records", "--set", "records.objectStore.credentialsSecret=records-s3", "--set", "records.objectStore.retention=168h"))
		spec := convert[appsv1.Deployment](t, byKind(objs, "Deployment")[0]).Spec.Template.Spec
		args := strings.Join(spec.Containers[0].Args, " ")
		for _, want := range []string{"--records-object-store-endpoint=s3.example.com", "--records-object-store-bucket=opr8r-records", "--records-retention=168h",
			"--records-object-store-credentials-dir=/etc/opr8r/records-object-store"} {
			if !strings.Contains(args, want) {
				t.Errorf("args %q lack %s", args, want)
			}
		}
		if len(spec.Volumes) != 1 || spec.Volumes[0].Secret == nil || spec.Volumes[0].Secret.SecretName != "records-s3" || len(spec.Containers[0].VolumeMounts) != 1 {
			t.Errorf("volumes %+v, mounts %+v: want the credentials Secret mounted", spec.Volumes, spec.Containers[0].VolumeMounts)
		}
		dryRun(t, objs)
		cmd := exec.Command(h, "template", "x", "deploy/opr8r", "--set", "records.objectStore.endpoint=s3.example.com", "--set", "records.objectStore.bucket=b")
		cmd.Dir = envtestutil.RepoRoot()
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "records.objectStore.credentialsSecret is required") {
			t.Errorf("an object store without credentials: err %v, output %s", err, out)
		}
	})
	t.Run("invalid values fail clearly", func(t *testing.T) {
		args := []string{"template", "x", "deploy/opr8r"}
		for _, e := range allEngines() {
			args = append(args, "--set", "engines."+e+".enabled=false")
		}
		cmd := exec.Command(h, args...)
		cmd.Dir = envtestutil.RepoRoot()
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "enable at least one engine") {
			t.Errorf("err %v, output %s", err, out)
		}
	})
}

// dryRun creates every rendered object in a real API server with
// server-side dry run (the CRD for real, so later objects can be checked).
func dryRun(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run make test")
	}
	env, cfg, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, o := range objs {
		if o.GetKind() == "Namespace" || o.GetKind() == "CustomResourceDefinition" {
			continue // created by envtest or already there
		}
		if ns := o.GetNamespace(); ns != "" {
			_ = c.Create(ctx, &corev1.Namespace{ObjectMeta: metaName(ns)})
		}
		// Server-side apply, dry run: works whether or not the object exists.
		if err := c.Patch(ctx, o, client.Apply, client.DryRunAll, client.FieldOwner("opr8r-install-test"), client.ForceOwnership); err != nil { //nolint:staticcheck

			t.Errorf("the API server rejects %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	fmt.Fprintf(os.Stderr, "dry-run created %d objects\n", len(objs))
}

func metaName(n string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: n} }
