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

// Scopes of an install: a manager of some namespaces, with its rights
// there (a Role and a RoleBinding in each), or of every namespace, with
// its rights cluster-wide.
const (
	namespaced  = "namespaced"
	clusterWide = "cluster-wide"
)

// checkCommon checks what both install paths must get right, for an
// install with the given engines enabled, of the given scope.
func checkCommon(t *testing.T, objs []*unstructured.Unstructured, enabled []string, scope string) {
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
	// The roles for people (config/rbac/users), the metrics endpoint's
	// reviews and its reader; cluster-wide, the manager's and each
	// engine's too.
	wantRoles := userRoles(t) + 2
	if scope == clusterWide {
		wantRoles += 1 + len(enabled)
	} else {
		// The cluster policies' reader: a Role cannot grant a
		// cluster-scoped kind.
		wantRoles++
	}
	roles := byKind(objs, "ClusterRole")
	if len(roles) != wantRoles {
		t.Errorf("want %d ClusterRoles (%s), got %d", wantRoles, scope, len(roles))
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
	checkManager(t, objs)
	checkMetrics(t, objs)
}

// userRoles counts the ClusterRoles for people in config/rbac/users
// (approver, editor, ...), which every install has.
func userRoles(t *testing.T) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(envtestutil.RepoRoot(), "config", "rbac", "users", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n += len(byKind(objects(t, string(data)), "ClusterRole"))
	}
	return n
}

// checkManager checks the manager's Deployment: one, hardened, with
// probes, limits and leader election.
func checkManager(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
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

// checkMetrics checks the secure metrics endpoint: the manager serves
// HTTPS on 8443 (--metrics-secure is on by default), its Service exposes
// 8443, the manager may create the reviews its filter asks for (the rules
// of config/rbac/metrics_auth_role.yaml, bound cluster-wide), and scrapers
// get a reader ClusterRole for /metrics.
func checkMetrics(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	d := convert[appsv1.Deployment](t, byKind(objs, "Deployment")[0])
	c := d.Spec.Template.Spec.Containers[0]
	if args := strings.Join(c.Args, " "); !strings.Contains(args, "--metrics-bind-address=:8443") || strings.Contains(args, "--metrics-secure=false") {
		t.Errorf("the manager does not serve secure metrics on 8443: args %s", args)
	}
	if p := c.Ports[0]; p.Name != "metrics" || p.ContainerPort != 8443 {
		t.Errorf("container port %+v, want metrics 8443", p)
	}
	webhooks, states := 0, 0
	for _, u := range byKind(objs, "Service") {
		if strings.HasSuffix(u.GetName(), "-webhook") {
			// The receivers' webhook server (docs/pull-requests.md):
			// port 80 to the manager's webhook port, 9292.
			webhooks++
			if p := convert[corev1.Service](t, u).Spec.Ports[0]; p.Port != 80 || p.TargetPort.String() != "webhook" {
				t.Errorf("Service %s port %+v, want 80 to webhook", u.GetName(), p)
			}
			if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "webhook" && p.ContainerPort == 9292 }) {
				t.Errorf("container ports %+v, want webhook 9292", c.Ports)
			}
			continue
		}
		if strings.HasSuffix(u.GetName(), "-state") {
			// The state API (pkg/stateapi): 9444 to the manager's
			// state-api port, which --state-api-bind-address serves.
			states++
			if p := convert[corev1.Service](t, u).Spec.Ports[0]; p.Port != 9444 || p.TargetPort.String() != "state-api" {
				t.Errorf("Service %s port %+v, want 9444 to state-api", u.GetName(), p)
			}
			if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "state-api" && p.ContainerPort == 9444 }) {
				t.Errorf("container ports %+v, want state-api 9444", c.Ports)
			}
			continue
		}
		if p := convert[corev1.Service](t, u).Spec.Ports[0]; p.Port != 8443 || p.TargetPort.String() != "metrics" {
			t.Errorf("Service %s port %+v, want 8443 to metrics", u.GetName(), p)
		}
	}
	if states != 1 {
		t.Errorf("%d state API Services, want 1: the steps reach their Secrets only through it", states)
	}
	want := readRole(t, "config/rbac/metrics_auth_role.yaml")
	var auth, reader *rbacv1.ClusterRole
	for _, u := range byKind(objs, "ClusterRole") {
		r := convert[rbacv1.ClusterRole](t, u)
		switch {
		case strings.HasSuffix(r.Name, "-metrics-auth"):
			auth = r
		case strings.HasSuffix(r.Name, "-metrics-reader"):
			reader = r
		}
	}
	if auth == nil || cmp.Diff(grants(want), grants(*auth)) != "" {
		t.Errorf("metrics-auth ClusterRole %+v, want the rules of config/rbac/metrics_auth_role.yaml", auth)
	}
	if reader == nil || cmp.Diff([]string{"url:/metrics:get"}, grants(*reader)) != "" {
		t.Errorf("metrics-reader ClusterRole %+v, want get on /metrics", reader)
	}
	bound := false
	for _, u := range byKind(objs, "ClusterRoleBinding") {
		b := convert[rbacv1.ClusterRoleBinding](t, u)
		bound = bound || auth != nil && b.RoleRef.Name == auth.Name && len(b.Subjects) == 1 && b.Subjects[0].Name == d.Spec.Template.Spec.ServiceAccountName
	}
	if !bound {
		t.Errorf("the metrics-auth ClusterRole is not bound to the manager's service account")
	}
}

// TestKustomizeDefault: config/default is the namespaced install (a
// manager of team-a, its rights there), config/cluster-wide the explicit
// one of every namespace; both render and are accepted by a real API
// server.
func TestKustomizeDefault(t *testing.T) {
	k := tool(t, "OPR8R_KUSTOMIZE")
	for dir, scope := range map[string]string{"config/default": namespaced, "config/cluster-wide": clusterWide} {
		t.Run(dir, func(t *testing.T) {
			objs := objects(t, run(t, k, "build", dir))
			checkCommon(t, objs, allEngines(), scope)
			args := strings.Join(convert[appsv1.Deployment](t, byKind(objs, "Deployment")[0]).Spec.Template.Spec.Containers[0].Args, " ")
			if watches := strings.Contains(args, "--watch-namespaces=team-a"); watches != (scope == namespaced) {
				t.Errorf("%s: args %s; want --watch-namespaces=team-a only when namespaced", dir, args)
			}
			if !strings.Contains(args, "--max-active-runs-per-namespace=25") {
				t.Errorf("%s: args %s lack the namespace share of --max-active-runs", dir, args)
			}
			for _, o := range byKind(objs, "ConfigMap") {
				if o.GetName() == "opr8r-watch-namespace" {
					t.Errorf("%s installs ConfigMap %s, which is local to kustomize", dir, o.GetName())
				}
			}
			dryRun(t, objs)
		})
	}
	for _, dir := range []string{"config/rbac/runner", "config/samples", "config/crd"} {
		if len(objects(t, run(t, k, "build", dir))) == 0 {
			t.Errorf("kustomize build %s rendered nothing", dir)
		}
	}
}

// TestKustomizeWatchNamespaceComponent: an overlay of config/cluster-wide
// with its own namespace and the component watches that namespace, with
// its rights there.
func TestKustomizeWatchNamespaceComponent(t *testing.T) {
	k := tool(t, "OPR8R_KUSTOMIZE")
	overlay := t.TempDir()
	rel, err := filepath.Rel(overlay, envtestutil.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"kustomization.yaml": fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%s/config/cluster-wide, ns.yaml]\ncomponents: [%s/config/components/watch-namespace]\n", rel, rel),
		"ns.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: opr8r-watch-namespace\n  annotations: {config.kubernetes.io/local-config: \"true\"}\ndata: {namespace: payments}\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(overlay, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	objs := objects(t, run(t, k, "build", overlay))
	args := strings.Join(convert[appsv1.Deployment](t, byKind(objs, "Deployment")[0]).Spec.Template.Spec.Containers[0].Args, " ")
	if !strings.Contains(args, "--watch-namespaces=payments") {
		t.Errorf("args %s, want --watch-namespaces=payments", args)
	}
	got := map[string]int{}
	for _, kind := range []string{"Role", "RoleBinding"} {
		for _, o := range byKind(objs, kind) {
			got[kind+"/"+o.GetNamespace()]++
		}
	}
	// The manager's and each engine's grants in payments; leader election
	// and the seal key in opr8r's own namespace.
	want := map[string]int{"Role/payments": 1 + len(allEngines()), "RoleBinding/payments": 1 + len(allEngines()), "Role/opr8r-system": 2, "RoleBinding/opr8r-system": 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Roles and RoleBindings by namespace (-want +got):\n%s", diff)
	}
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
	if args := managerArgs(objects(t, run(t, h, "template", "opr8r", "deploy/opr8r", "--set", "watchNamespaces={team-a}"))); strings.Contains(args, flag) {
		t.Errorf("the chart allows cross-namespace dependencies by default: %s", args)
	}
	if args := managerArgs(objects(t, run(t, h, "template", "opr8r", "deploy/opr8r", "--set", "watchNamespaces={team-a}", "--set", "allowCrossNamespaceDependencies=true"))); !strings.Contains(args, flag) {
		t.Errorf("allowCrossNamespaceDependencies=true does not add %s: %s", flag, args)
	}
}

// helmFails renders the chart with args and checks that it fails with a
// message that has want.
func helmFails(t *testing.T, h, want string, args ...string) {
	t.Helper()
	cmd := exec.Command(h, append([]string{"template", "x", "deploy/opr8r"}, args...)...)
	cmd.Dir = envtestutil.RepoRoot()
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), want) {
		t.Errorf("helm template %v: err %v, output %s; want a failure saying %q", args, err, out, want)
	}
}

func TestHelmChart(t *testing.T) {
	h := tool(t, "OPR8R_HELM")
	t.Run("the README's install line: a manager of team-a, its rights there", func(t *testing.T) {
		objs := objects(t, run(t, h, "template", "opr8r", "deploy/opr8r", "-n", "opr8r-system", "--include-crds", "--set", "watchNamespaces={team-a}", "--set", "runner.namespaces={team-a}"))
		checkCommon(t, objs, allEngines(), namespaced)
		args := strings.Join(convert[appsv1.Deployment](t, byKind(objs, "Deployment")[0]).Spec.Template.Spec.Containers[0].Args, " ")
		if strings.Contains(args, "--max-active-runs-per-namespace") {
			t.Errorf("args %s: by default the manager takes a quarter of --max-active-runs as a namespace's share", args)
		}
		dryRun(t, objs)
	})
	t.Run("cluster-wide, chosen explicitly", func(t *testing.T) {
		objs := objects(t, run(t, h, "template", "opr8r", "deploy/opr8r", "-n", "opr8r-system", "--include-crds", "--set", "clusterWide=true"))
		checkCommon(t, objs, allEngines(), clusterWide)
		if args := strings.Join(convert[appsv1.Deployment](t, byKind(objs, "Deployment")[0]).Spec.Template.Spec.Containers[0].Args, " "); strings.Contains(args, "--watch-namespaces") {
			t.Errorf("a cluster-wide manager watches some namespaces: %s", args)
		}
		dryRun(t, objs)
	})
	t.Run("no scope, or both: a failure naming the values", func(t *testing.T) {
		helmFails(t, h, "watchNamespaces is required")
		helmFails(t, h, "needs clusterWide=true set explicitly")
		helmFails(t, h, "set either watchNamespaces", "--set", "watchNamespaces={team-a}", "--set", "clusterWide=true")
	})
	t.Run("values of the wrong kind: refused by values.schema.json, naming the value", func(t *testing.T) {
		ns := []string{"--set", "watchNamespaces={team-a}"}
		for value, want := range map[string]string{
			"records.objectStore.retention=banana": "at '/records/objectStore/retention': 'banana' does not match pattern",
			"applyTimeout=forever":                 "at '/applyTimeout': 'forever' does not match pattern",
			"planTimeout=0s":                       "at '/planTimeout': '0s' does not match pattern",
			"maxActiveRuns=-1":                     "at '/maxActiveRuns'",
			"image.pullPolicy=Sometimes":           "at '/image/pullPolicy'",
			"memoryLimitRatio=2":                   "at '/memoryLimitRatio'",
			"memoryReleaseInterval=often":          "at '/memoryReleaseInterval': 'often' does not match pattern",
			"leaderElection=maybe":                 "at '/leaderElection'",
			"providers.mirror.url=http://mirror/":  "at '/providers/mirror/url': 'http://mirror/' does not match pattern",
			"providers.cache.size=lots":            "at '/providers/cache/size': 'lots' does not match pattern",
			"providers.cache.claim=Cache_1":        "at '/providers/cache/claim'",
		} {
			helmFails(t, h, want, append(ns, "--set", value)...)
		}
		// The chart's own values, and durations in every form, pass.
		run(t, h, "template", "opr8r", "deploy/opr8r", "--set", "watchNamespaces={team-a}", "--set", "applyTimeout=1h30m", "--set", "records.objectStore.retention=72h", "--set", "logLevel=2")
	})
	t.Run("a namespace's share of the active runs", func(t *testing.T) {
		for value, want := range map[string]string{"0": "--max-active-runs-per-namespace=0", "7": "--max-active-runs-per-namespace=7"} {
			objs := objects(t, run(t, h, "template", "opr8r", "deploy/opr8r", "--set", "watchNamespaces={team-a}", "--set", "maxActiveRunsPerNamespace="+value))
			if args := convert[appsv1.Deployment](t, byKind(objs, "Deployment")[0]).Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, want) {
				t.Errorf("maxActiveRunsPerNamespace=%s: args %v, want %s", value, args, want)
			}
		}
	})
	t.Run("metrics: a ServiceMonitor over HTTPS with a token; plain HTTP only when asked", metricsRenders(h))
	t.Run("one engine: rights and flags for that engine only", func(t *testing.T) {
		// Each engine alone: only its rights, its policies and its flag.
		for _, keep := range allEngines() {
			setArgs := []string{"template", "opr8r", "deploy/opr8r", "--include-crds", "--set", "watchNamespaces={team-a}"}
			for _, e := range allEngines() {
				if e != keep {
					setArgs = append(setArgs, "--set", "engines."+e+".enabled=false")
				}
			}
			objs := objects(t, run(t, h, setArgs...))
			checkCommon(t, objs, []string{keep}, namespaced)
			for _, r := range byKind(objs, "Role") {
				for _, e := range allEngines() {
					if e != keep && strings.HasSuffix(r.GetName(), "-"+e) {
						t.Errorf("rights of a disabled engine rendered: %s", r.GetName())
					}
				}
			}
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
		objs := objects(t, run(t, h, "template", "opr8r", "deploy/opr8r", "--set", "watchNamespaces={team-a}", "--set", "admissionPolicies.enabled=false"))
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
		objs := objects(t, run(t, h, "template", "opr8r", "deploy/opr8r", "-n", "opr8r-system", "--set", "watchNamespaces={team-a}", "--set", "sharding.shards={s1,s2}"))
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
		if n := len(byKind(objs, "Service")); n != 4 {
			t.Errorf("want the metrics Services of the default manager and of the shards, the webhook Service and the state API's (one, every shard's steps use it), got %d", n)
		}
		dryRun(t, objs)
	})
	t.Run("the records' object store: flags, and its credentials mounted into the manager only", func(t *testing.T) {
		objs := objects(t, run(t, h, "template", "opr8r", "deploy/opr8r", "-n", "opr8r-system", "--set", "watchNamespaces={team-a}", "--set", "records.objectStore.endpoint=s3.example.com",
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
		cmd := exec.Command(h, "template", "x", "deploy/opr8r", "--set", "watchNamespaces={team-a}", "--set", "records.objectStore.endpoint=s3.example.com", "--set", "records.objectStore.bucket=b")
		cmd.Dir = envtestutil.RepoRoot()
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "records.objectStore.credentialsSecret is required") {
			t.Errorf("an object store without credentials: err %v, output %s", err, out)
		}
	})
	t.Run("invalid values fail clearly", func(t *testing.T) {
		args := []string{"template", "x", "deploy/opr8r", "--set", "watchNamespaces={team-a}"}
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

// metricsCase is a rendering of the chart's metrics values (set) and what
// it must hold: the ServiceMonitor's endpoint, the manager's args (and
// args it must not have), the certificate's volume, the reader bound, and
// whether the metrics-auth ClusterRole is bound.
type metricsCase struct {
	set                              []string
	wantEndpoint                     map[string]any
	wantArgs, wantNoArgs, wantVolume string
	wantReader                       string
	wantAuth                         bool
}

// metricsRenders checks the chart's metrics values: the ServiceMonitor
// scrapes over HTTPS with Prometheus's token, verifying a mounted
// certificate's CA (metrics.certSecret) or skipping verification of the
// self-signed one; readers get a ClusterRoleBinding; metrics.secure=false
// is plain HTTP with no reviews granted.
func metricsRenders(h string) func(t *testing.T) {
	return func(t *testing.T) {
		cases := map[string]metricsCase{
			"secure, self-signed": {
				wantEndpoint: map[string]any{"port": "metrics", "path": "/metrics", "interval": "30s", "scheme": "https",
					"bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token", "tlsConfig": map[string]any{"insecureSkipVerify": true}},
				wantArgs: "--metrics-secure=true", wantNoArgs: "--metrics-cert-dir", wantAuth: true,
			},
			"secure, a cert-manager certificate": {
				set: []string{"--set", "metrics.certSecret=opr8r-metrics-tls"},
				wantEndpoint: map[string]any{"port": "metrics", "path": "/metrics", "interval": "30s", "scheme": "https",
					"bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
					"tlsConfig":       map[string]any{"serverName": "opr8r-metrics.opr8r-system.svc", "ca": map[string]any{"secret": map[string]any{"name": "opr8r-metrics-tls", "key": "ca.crt"}}}},
				wantArgs: "--metrics-cert-dir=/etc/opr8r/metrics-certs", wantVolume: "opr8r-metrics-tls", wantAuth: true,
			},
			"a reader bound": {
				set:          []string{"--set", "metrics.readerServiceAccounts[0].name=prometheus-k8s", "--set", "metrics.readerServiceAccounts[0].namespace=monitoring"},
				wantEndpoint: map[string]any{"port": "metrics", "path": "/metrics", "interval": "30s", "scheme": "https", "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token", "tlsConfig": map[string]any{"insecureSkipVerify": true}},
				wantReader:   "monitoring/prometheus-k8s", wantAuth: true,
			},
			"insecure, for development": {
				set:          []string{"--set", "metrics.secure=false"},
				wantEndpoint: map[string]any{"port": "metrics", "path": "/metrics", "interval": "30s", "scheme": "http"},
				wantArgs:     "--metrics-secure=false",
			},
		}
		for name, tc := range cases {
			t.Run(name, func(t *testing.T) {
				args := append([]string{"template", "opr8r", "deploy/opr8r", "-n", "opr8r-system", "--set", "watchNamespaces={team-a}", "--set", "metrics.serviceMonitor.enabled=true"}, tc.set...)
				checkMetricsRender(t, objects(t, run(t, h, args...)), tc)
			})
		}
	}
}

// checkMetricsRender checks one rendering of metricsRenders.
func checkMetricsRender(t *testing.T, objs []*unstructured.Unstructured, tc metricsCase) {
	t.Helper()
	sms := byKind(objs, "ServiceMonitor")
	if len(sms) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(sms))
	}
	eps, _, _ := unstructured.NestedSlice(sms[0].Object, "spec", "endpoints")
	if diff := cmp.Diff([]any{tc.wantEndpoint}, eps); diff != "" {
		t.Errorf("ServiceMonitor endpoints (-want +got):\n%s", diff)
	}
	spec := convert[appsv1.Deployment](t, byKind(objs, "Deployment")[0]).Spec.Template.Spec
	margs := strings.Join(spec.Containers[0].Args, " ")
	if !strings.Contains(margs, tc.wantArgs) || (tc.wantNoArgs != "" && strings.Contains(margs, tc.wantNoArgs)) {
		t.Errorf("args %s, want %q and not %q", margs, tc.wantArgs, tc.wantNoArgs)
	}
	volume := ""
	for _, v := range spec.Volumes {
		if v.Name == "metrics-certs" {
			volume = v.Secret.SecretName
		}
	}
	if volume != tc.wantVolume {
		t.Errorf("metrics certificate volume %q, want %q", volume, tc.wantVolume)
	}
	auth, reader := false, ""
	for _, u := range byKind(objs, "ClusterRoleBinding") {
		b := convert[rbacv1.ClusterRoleBinding](t, u)
		switch b.RoleRef.Name {
		case "opr8r-metrics-auth":
			auth = true
		case "opr8r-metrics-reader":
			reader = b.Subjects[0].Namespace + "/" + b.Subjects[0].Name
		}
	}
	if auth != tc.wantAuth || reader != tc.wantReader {
		t.Errorf("metrics-auth bound %v, reader bound to %q; want %v, %q", auth, reader, tc.wantAuth, tc.wantReader)
	}
}

// TestHelmProviders: the chart's providers values reach the manager as its
// --provider-* flags, with the mirror's CA ConfigMap mounted where the
// flag reads it, and the cache claim's name reaches opr8r-identities
// (providerCacheClaim), which opr8r-provider-cache reads; without them, no
// flag, no volume and an empty name.
func TestHelmProviders(t *testing.T) {
	h := tool(t, "OPR8R_HELM")
	deploy := func(set ...string) *appsv1.Deployment {
		args := append([]string{"template", "opr8r", "deploy/opr8r", "--set", "watchNamespaces={team-a}"}, set...)
		return convert[appsv1.Deployment](t, byKind(objects(t, run(t, h, args...)), "Deployment")[0])
	}
	d := deploy("--set", "providers.mirror.url=https://mirror.example/", "--set", "providers.mirror.caConfigMap=mirror-ca",
		"--set", "providers.cache.claim=provider-cache", "--set", "providers.cache.size=3Gi", "--set", "providers.cache.storageClass=fast",
		"--set", "providers.cache.accessMode=ReadWriteMany")
	args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
	for _, want := range []string{"--provider-mirror-url=https://mirror.example/", "--provider-mirror-ca-file=/etc/opr8r/provider-mirror/ca.crt",
		"--provider-cache-claim=provider-cache", "--provider-cache-size=3Gi", "--provider-cache-storage-class=fast", "--provider-cache-access-mode=ReadWriteMany"} {
		if !strings.Contains(args, want) {
			t.Errorf("manager args lack %s: %s", want, args)
		}
	}
	mounted := false
	for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounted = mounted || (m.Name == "provider-mirror-ca" && m.MountPath == "/etc/opr8r/provider-mirror")
	}
	fromCM := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		fromCM = fromCM || (v.Name == "provider-mirror-ca" && v.ConfigMap != nil && v.ConfigMap.Name == "mirror-ca")
	}
	if !mounted || !fromCM {
		t.Errorf("the mirror's CA ConfigMap is not mounted where --provider-mirror-ca-file reads it: mount %v, volume %v", mounted, fromCM)
	}
	if args := strings.Join(deploy().Spec.Template.Spec.Containers[0].Args, " "); strings.Contains(args, "--provider-") {
		t.Errorf("provider flags without providers values: %s", args)
	}
	claim := func(set ...string) string {
		args := append([]string{"template", "opr8r", "deploy/opr8r", "--set", "watchNamespaces={team-a}"}, set...)
		for _, u := range byKind(objects(t, run(t, h, args...)), "ConfigMap") {
			if u.GetName() == "opr8r-identities" {
				v, ok, _ := unstructured.NestedString(u.Object, "data", "providerCacheClaim")
				if !ok {
					t.Fatal("opr8r-identities has no providerCacheClaim")
				}
				return v
			}
		}
		t.Fatal("no opr8r-identities")
		return ""
	}
	if got := claim("--set", "providers.cache.claim=provider-cache"); got != "provider-cache" {
		t.Errorf("opr8r-identities providerCacheClaim = %q, want provider-cache", got)
	}
	if got := claim(); got != "" {
		t.Errorf("opr8r-identities providerCacheClaim = %q without a cache, want empty", got)
	}
}
