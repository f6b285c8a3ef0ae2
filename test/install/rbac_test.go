package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/opr8r/opr8r/test/envtestutil"
)

func readRole(t *testing.T, path string) rbacv1.ClusterRole {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), path))
	if err != nil {
		t.Fatal(err)
	}
	var r rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// grants flattens rules into "group/resource:verb" strings, and URLs
// into "url:/path:verb".
func grants(r rbacv1.ClusterRole) []string {
	var out []string
	for _, rule := range r.Rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					out = append(out, fmt.Sprintf("%s/%s:%s", g, res, v))
				}
			}
		}
		for _, u := range rule.NonResourceURLs {
			for _, v := range rule.Verbs {
				out = append(out, fmt.Sprintf("url:%s:%s", u, v))
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestRBACAllowList compares every generated role with the rights each one
// is meant to have: an added right fails here until it is reviewed.
func TestRBACAllowList(t *testing.T) {
	allowed := map[string][]string{
		"config/rbac/role.yaml": {
			// create: inputs too large for the child; get and update: the
			// guard list of active children (pkg/controller/guard.go).
			"/configmaps:create", "/configmaps:get", "/configmaps:update",
			// create: a namespace's provider cache claim, made before a
			// run's child when --provider-cache-claim is set; get: only
			// when it exists, to see whether it is being deleted
			// (pkg/controller/providercache.go).
			"/persistentvolumeclaims:create", "/persistentvolumeclaims:get",
			// delete: the records (step logs and plans) of runs that leave
			// the history or whose TerraformRun is deleted (pkg/controller/records.go).
			"/secrets:create", "/secrets:delete", "/secrets:get", "/secrets:list", "/secrets:patch", "/secrets:update", "/secrets:watch",
			"events.k8s.io/events:create", "events.k8s.io/events:patch",
			"infra.opr8r.io/terraformrunapprovals:get", "infra.opr8r.io/terraformrunapprovals:list", "infra.opr8r.io/terraformrunapprovals:watch",
			// Receivers (their path and Ready) and notifiers (their last
			// delivery and Ready): read, and their status written
			// (pkg/receiver, pkg/notify).
			"infra.opr8r.io/terraformrunnotifiers/status:get", "infra.opr8r.io/terraformrunnotifiers/status:patch", "infra.opr8r.io/terraformrunnotifiers/status:update",
			"infra.opr8r.io/terraformrunnotifiers:get", "infra.opr8r.io/terraformrunnotifiers:list", "infra.opr8r.io/terraformrunnotifiers:watch",
			"infra.opr8r.io/terraformrunreceivers/status:get", "infra.opr8r.io/terraformrunreceivers/status:patch", "infra.opr8r.io/terraformrunreceivers/status:update",
			"infra.opr8r.io/terraformrunreceivers:get", "infra.opr8r.io/terraformrunreceivers:list", "infra.opr8r.io/terraformrunreceivers:watch",
			// The records in TerraformRunRecords, read from the API server
			// (never cached: no watch): list (metadata) and get to prune and
			// move them to the object store, create and update to bring them
			// back, delete to prune them (pkg/controller/retention.go).
			"infra.opr8r.io/terraformrunrecords:create", "infra.opr8r.io/terraformrunrecords:delete", "infra.opr8r.io/terraformrunrecords:get",
			"infra.opr8r.io/terraformrunrecords:list", "infra.opr8r.io/terraformrunrecords:update",
			"infra.opr8r.io/terraformruns/finalizers:update",
			"infra.opr8r.io/terraformruns/status:get", "infra.opr8r.io/terraformruns/status:patch", "infra.opr8r.io/terraformruns/status:update",
			"infra.opr8r.io/terraformruns:get", "infra.opr8r.io/terraformruns:list", "infra.opr8r.io/terraformruns:patch", "infra.opr8r.io/terraformruns:update", "infra.opr8r.io/terraformruns:watch",
			// create and delete: pull-request previews, plan-only copies of
			// a run the namespace's receiver made for each open pull request
			// (pkg/receiver/preview.go).
			"infra.opr8r.io/terraformruns:create", "infra.opr8r.io/terraformruns:delete",
			// The state API: the steps' calls on their run's state lock,
			// made as the manager once decided (pkg/stateapi), and the
			// steps' tokens checked.
			"coordination.k8s.io/leases:create", "coordination.k8s.io/leases:delete", "coordination.k8s.io/leases:get", "coordination.k8s.io/leases:update",
			"authentication.k8s.io/tokenreviews:create",
			// The approval policies that govern the runs (pkg/controller
			// policies.go) and their status (pkg/governance); a
			// namespace's labels, for a cluster policy's namespaceSelector
			// (get by name, around the cache).
			"infra.opr8r.io/terraformrunpolicies:get", "infra.opr8r.io/terraformrunpolicies:list", "infra.opr8r.io/terraformrunpolicies:watch",
			"infra.opr8r.io/terraformrunpolicies/status:get", "infra.opr8r.io/terraformrunpolicies/status:patch", "infra.opr8r.io/terraformrunpolicies/status:update",
			"infra.opr8r.io/clusterterraformrunpolicies:get", "infra.opr8r.io/clusterterraformrunpolicies:list", "infra.opr8r.io/clusterterraformrunpolicies:watch",
			"infra.opr8r.io/clusterterraformrunpolicies/status:get", "infra.opr8r.io/clusterterraformrunpolicies/status:patch", "infra.opr8r.io/clusterterraformrunpolicies/status:update",
			"/namespaces:get",
		},
		// The cluster policies in a namespaced install (a Role cannot
		// grant a cluster-scoped kind): read, and their status.
		"config/components/watch-namespace/cluster-policies.yaml": {
			"infra.opr8r.io/clusterterraformrunpolicies:get", "infra.opr8r.io/clusterterraformrunpolicies:list", "infra.opr8r.io/clusterterraformrunpolicies:watch",
			"infra.opr8r.io/clusterterraformrunpolicies/status:get", "infra.opr8r.io/clusterterraformrunpolicies/status:patch", "infra.opr8r.io/clusterterraformrunpolicies/status:update",
		},
		"config/rbac/argo/role.yaml": {
			"argoproj.io/workflows:create", "argoproj.io/workflows:delete", "argoproj.io/workflows:get", "argoproj.io/workflows:list",
			"argoproj.io/workflows:patch", "argoproj.io/workflows:update", "argoproj.io/workflows:watch",
		},
		"config/rbac/tekton/role.yaml": {
			"tekton.dev/customruns/status:get", "tekton.dev/customruns/status:patch", "tekton.dev/customruns/status:update",
			"tekton.dev/customruns:get", "tekton.dev/customruns:list", "tekton.dev/customruns:patch", "tekton.dev/customruns:watch",
			"tekton.dev/pipelineruns:create", "tekton.dev/pipelineruns:delete", "tekton.dev/pipelineruns:get", "tekton.dev/pipelineruns:list",
			"tekton.dev/pipelineruns:patch", "tekton.dev/pipelineruns:update", "tekton.dev/pipelineruns:watch",
			"tekton.dev/taskruns:get", "tekton.dev/taskruns:list", "tekton.dev/taskruns:patch", "tekton.dev/taskruns:watch",
		},
		"config/rbac/users/approver.yaml": {
			"infra.opr8r.io/terraformrunapprovals:create", "infra.opr8r.io/terraformrunapprovals:get", "infra.opr8r.io/terraformrunapprovals:list", "infra.opr8r.io/terraformrunapprovals:watch",
			// Reading the plans it approves and the steps' logs (kubectl
			// tfrun plan, logs) without the right to read Secrets.
			"infra.opr8r.io/terraformrunrecords:get", "infra.opr8r.io/terraformrunrecords:list", "infra.opr8r.io/terraformrunrecords:watch",
			"infra.opr8r.io/terraformruns:get", "infra.opr8r.io/terraformruns:list", "infra.opr8r.io/terraformruns:watch",
			// The namespace's policies, read (kubectl tfrun policy test).
			"infra.opr8r.io/terraformrunpolicies:get", "infra.opr8r.io/terraformrunpolicies:list", "infra.opr8r.io/terraformrunpolicies:watch",
		},
		"config/rbac/users/editor.yaml": {
			"infra.opr8r.io/terraformrunapprovals:get", "infra.opr8r.io/terraformrunapprovals:list", "infra.opr8r.io/terraformrunapprovals:watch",
			// Reading the plans and the steps' logs, never writing them.
			"infra.opr8r.io/terraformrunrecords:get", "infra.opr8r.io/terraformrunrecords:list", "infra.opr8r.io/terraformrunrecords:watch",
			"infra.opr8r.io/terraformruns:create", "infra.opr8r.io/terraformruns:delete", "infra.opr8r.io/terraformruns:get", "infra.opr8r.io/terraformruns:list",
			"infra.opr8r.io/terraformruns:patch", "infra.opr8r.io/terraformruns:update", "infra.opr8r.io/terraformruns:watch",
			// The namespace's webhook receivers and notifiers: a receiver
			// wakes, and a notifier tells of, only its own namespace's runs
			// (docs/pull-requests.md, docs/notifications.md).
			"infra.opr8r.io/terraformrunnotifiers:create", "infra.opr8r.io/terraformrunnotifiers:delete", "infra.opr8r.io/terraformrunnotifiers:get",
			"infra.opr8r.io/terraformrunnotifiers:list", "infra.opr8r.io/terraformrunnotifiers:patch", "infra.opr8r.io/terraformrunnotifiers:update", "infra.opr8r.io/terraformrunnotifiers:watch",
			"infra.opr8r.io/terraformrunreceivers:create", "infra.opr8r.io/terraformrunreceivers:delete", "infra.opr8r.io/terraformrunreceivers:get",
			"infra.opr8r.io/terraformrunreceivers:list", "infra.opr8r.io/terraformrunreceivers:patch", "infra.opr8r.io/terraformrunreceivers:update", "infra.opr8r.io/terraformrunreceivers:watch",
			// The namespace's policies, read, never written.
			"infra.opr8r.io/terraformrunpolicies:get", "infra.opr8r.io/terraformrunpolicies:list", "infra.opr8r.io/terraformrunpolicies:watch",
		},
		"config/rbac/job/role.yaml": {
			"/persistentvolumeclaims:create", "/persistentvolumeclaims:delete", "/persistentvolumeclaims:get",
			"/pods:get", "/pods:list", "/pods:patch", "/pods:watch",
			"batch/jobs:create", "batch/jobs:delete", "batch/jobs:get", "batch/jobs:list", "batch/jobs:patch", "batch/jobs:update", "batch/jobs:watch",
		},
		// The metrics endpoint's authentication and authorisation, and
		// reading it.
		"config/rbac/metrics_auth_role.yaml":   {"authentication.k8s.io/tokenreviews:create", "authorization.k8s.io/subjectaccessreviews:create"},
		"config/rbac/metrics_reader_role.yaml": {"url:/metrics:get"},
		// No Secret and no Lease: the steps reach their run's own through
		// the manager's state API (pkg/stateapi).
		"config/rbac/runner/role.yaml": {
			"argoproj.io/workflowtaskresults:create", "argoproj.io/workflowtaskresults:patch",
			// The apply step reads opr8r's record of its plan's approval.
			"infra.opr8r.io/terraformruns:get",
			// The steps keep their logs and the plans made for people
			// (pkg/records ResourceStore: create, get and update to write
			// a record again, delete its stale chunks; no list).
			"infra.opr8r.io/terraformrunrecords:create", "infra.opr8r.io/terraformrunrecords:delete", "infra.opr8r.io/terraformrunrecords:get",
			"infra.opr8r.io/terraformrunrecords:update",
		},
		// Loosening a run's approval policy, and writing the policies
		// that govern every run of a namespace or of the namespaces a
		// label picks: platform admins only.
		"config/rbac/users/policy-admin.yaml": {
			"infra.opr8r.io/terraformruns/approvalpolicy:update",
			"infra.opr8r.io/terraformrunpolicies:create", "infra.opr8r.io/terraformrunpolicies:delete", "infra.opr8r.io/terraformrunpolicies:get", "infra.opr8r.io/terraformrunpolicies:list",
			"infra.opr8r.io/terraformrunpolicies:patch", "infra.opr8r.io/terraformrunpolicies:update", "infra.opr8r.io/terraformrunpolicies:watch",
			"infra.opr8r.io/clusterterraformrunpolicies:create", "infra.opr8r.io/clusterterraformrunpolicies:delete", "infra.opr8r.io/clusterterraformrunpolicies:get", "infra.opr8r.io/clusterterraformrunpolicies:list",
			"infra.opr8r.io/clusterterraformrunpolicies:patch", "infra.opr8r.io/clusterterraformrunpolicies:update", "infra.opr8r.io/clusterterraformrunpolicies:watch",
			"infra.opr8r.io/terraformruns:get", "infra.opr8r.io/terraformruns:list", "infra.opr8r.io/terraformruns:patch", "infra.opr8r.io/terraformruns:update", "infra.opr8r.io/terraformruns:watch",
		},
		// The manager's seal key and the state API's certificate, in its
		// own namespace (get and update by name, create).
		"config/rbac/seal_key.yaml": {"/secrets:create", "/secrets:get", "/secrets:get", "/secrets:update"},
	}
	for path, want := range allowed {
		r := readRole(t, path)
		got := grants(r)
		sort.Strings(want)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s grants differ from its allow-list.\ngot:\n  %s\nwant:\n  %s", path, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		for _, g := range got {
			if strings.Contains(g, "*") {
				t.Errorf("%s grants a wildcard: %s", path, g)
			}
		}
	}
	if r := readRole(t, "config/rbac/runner/role.yaml"); r.Kind != "Role" {
		t.Errorf("the runner's role is a %s; it must be a namespaced Role", r.Kind)
	}
}

// TestRunnerRoleWithRealAuthorizer binds a user to the runner Role in one
// namespace and asks envtest's real RBAC authorizer what it may do.
func TestRunnerRoleWithRealAuthorizer(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run make test")
	}
	env, cfg, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cfg)
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "existing"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	role := readRole(t, "config/rbac/runner/role.yaml")
	r := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "opr8r-runner", Namespace: "team-a"}, Rules: role.Rules}
	if _, err := admin.RbacV1().Roles("team-a").Create(ctx, r, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "opr8r-runner", Namespace: "team-a"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "opr8r-runner"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "runner"}}}
	if _, err := admin.RbacV1().RoleBindings("team-a").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "runner"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	ucfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	runner := kubernetes.NewForConfigOrDie(ucfg)

	allowed := map[string]func() error{
		"read its TerraformRun": func() error {
			return runnerReadsRuns(ctx, ucfg)
		},
	}
	// The steps reach Secrets and Leases only through the manager's state
	// API: with the pod's own token, module code reads none.
	denied := map[string]func() error{
		"create a Secret in its namespace": func() error {
			_, err := runner.CoreV1().Secrets("team-a").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tfstate-default-x"}}, metav1.CreateOptions{})
			return err
		},
		"read a Secret in its namespace": func() error {
			_, err := runner.CoreV1().Secrets("team-a").Get(ctx, "existing", metav1.GetOptions{})
			return err
		},
		"list Secrets in its namespace": func() error {
			_, err := runner.CoreV1().Secrets("team-a").List(ctx, metav1.ListOptions{})
			return err
		},
		"list Leases in its namespace": func() error {
			_, err := runner.CoordinationV1().Leases("team-a").List(ctx, metav1.ListOptions{})
			return err
		},
		"read a Secret of another namespace": func() error {
			_, err := runner.CoreV1().Secrets("team-b").Get(ctx, "existing", metav1.GetOptions{})
			return err
		},
		"list Secrets cluster-wide": func() error {
			_, err := runner.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		},
		"list pods": func() error {
			_, err := runner.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{})
			return err
		},
		"create a RoleBinding (escalate)": func() error {
			_, err := runner.RbacV1().RoleBindings("team-a").Create(ctx, rb.DeepCopy(), metav1.CreateOptions{})
			return err
		},
		"delete its namespace": func() error {
			return runner.CoreV1().Namespaces().Delete(ctx, "team-a", metav1.DeleteOptions{})
		},
	}
	for what, call := range allowed {
		if err := call(); err != nil {
			t.Errorf("the runner cannot %s: %v", what, err)
		}
	}
	for what, call := range denied {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("the runner can %s (err = %v), want Forbidden", what, err)
		}
	}
	t.Logf("runner Role: %d allowed and %d denied actions as expected", len(allowed), len(denied))
}

// TestNamespacedInstallWithRealAuthorizer renders the default installs,
// the README's Helm line and config/default (and config/namespaced, which
// builds the same), creates their RBAC in envtest, and asks the real
// authorizer, as the manager's service account, what it may do: Secrets
// and children in its namespace, nothing in another, nothing cluster-wide
// but the metrics endpoint's TokenReviews and SubjectAccessReviews. No
// ClusterRole of theirs grants anything on Secrets.
func TestNamespacedInstallWithRealAuthorizer(t *testing.T) {
	h := tool(t, "OPR8R_HELM")
	k := tool(t, "OPR8R_KUSTOMIZE")
	for name, args := range map[string][]string{
		"helm: the README's line":                              {h, "template", "opr8r", "deploy/opr8r", "-n", "opr8r-system", "--set", "watchNamespaces={team-a}", "--set", "runner.namespaces={team-a}"},
		"kustomize: config/default":                            {k, "build", "config/default"},
		"kustomize: config/namespaced, the default's old name": {k, "build", "config/namespaced"},
	} {
		t.Run(name, func(t *testing.T) {
			objs := objects(t, run(t, args[0], args[1:]...))
			for _, o := range objs {
				if o.GetKind() == "Deployment" {
					if a := strings.Join(convert[appsv1.Deployment](t, o).Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(a, "--watch-namespaces=team-a") {
						t.Errorf("the manager does not watch team-a only: args %s", a)
					}
				}
			}
			for _, r := range secretGrants(t, objs) {
				t.Errorf("a namespaced install's ClusterRole grants Secrets: %s", r)
			}
			clusterBindings(t, objs)
			may := rights(t, objs)
			cases := []access{
				{"team-a", "", "secrets", "get", true},
				{"team-a", "", "secrets", "create", true},
				{"team-a", "argoproj.io", "workflows", "create", true},
				{"team-a", "tekton.dev", "pipelineruns", "create", true},
				{"team-a", "infra.opr8r.io", "terraformruns", "watch", true},
				{"team-b", "", "secrets", "get", false},
				{"team-b", "", "secrets", "create", false},
				{"team-b", "", "secrets", "list", false},
				{"team-b", "argoproj.io", "workflows", "create", false},
				{"team-b", "batch", "jobs", "create", false},
				{"team-b", "infra.opr8r.io", "terraformruns", "list", false},
				{"", "", "secrets", "list", false}, // all namespaces
				{"", "", "secrets", "get", false},
				{"", "infra.opr8r.io", "terraformruns", "list", false},
				{"", "authentication.k8s.io", "tokenreviews", "create", true},
				{"", "authorization.k8s.io", "subjectaccessreviews", "create", true},
				// The approval policies: the namespace's, the cluster's (a
				// manager that cannot list them never syncs its cache), and
				// the watched namespace's labels for their selectors.
				{"team-a", "infra.opr8r.io", "terraformrunpolicies", "watch", true},
				{"", "infra.opr8r.io", "clusterterraformrunpolicies", "list", true},
				{"", "infra.opr8r.io", "clusterterraformrunpolicies", "watch", true},
				{"team-a", "", "namespaces", "get", true},
				{"team-b", "infra.opr8r.io", "terraformrunpolicies", "list", false},
			}
			checkAccess(t, may, cases)
		})
	}
}

// TestClusterWideInstallWithRealAuthorizer: the cluster-wide installs,
// chosen explicitly (Helm's clusterWide=true, config/cluster-wide), give
// the manager every namespace's Secrets, as their docs say.
func TestClusterWideInstallWithRealAuthorizer(t *testing.T) {
	h := tool(t, "OPR8R_HELM")
	k := tool(t, "OPR8R_KUSTOMIZE")
	for name, args := range map[string][]string{
		"helm: clusterWide=true":         {h, "template", "opr8r", "deploy/opr8r", "-n", "opr8r-system", "--set", "clusterWide=true"},
		"kustomize: config/cluster-wide": {k, "build", "config/cluster-wide"},
	} {
		t.Run(name, func(t *testing.T) {
			objs := objects(t, run(t, args[0], args[1:]...))
			if len(secretGrants(t, objs)) == 0 {
				t.Errorf("no ClusterRole grants Secrets: the install is not cluster-wide")
			}
			checkAccess(t, rights(t, objs), []access{
				{"", "", "secrets", "list", true},
				{"team-b", "", "secrets", "get", true},
				{"team-b", "argoproj.io", "workflows", "create", true},
			})
		})
	}
}

// secretGrants lists the ClusterRoles of a rendering that grant anything
// on Secrets, with the rule.
func secretGrants(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	var out []string
	for _, o := range byKind(objs, "ClusterRole") {
		for _, r := range convert[rbacv1.ClusterRole](t, o).Rules {
			if slices.Contains(r.APIGroups, "") && (slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*")) {
				out = append(out, fmt.Sprintf("%s: %+v", o.GetName(), r))
			}
		}
	}
	return out
}

// access is one question to the authorizer and the answer wanted.
type access struct {
	ns, group, resource, verb string
	want                      bool
}

func checkAccess(t *testing.T, may func(ns, group, resource, verb string) bool, cases []access) {
	t.Helper()
	for _, tc := range cases {
		if got := may(tc.ns, tc.group, tc.resource, tc.verb); got != tc.want {
			t.Errorf("%s %s.%s in %q: allowed=%v, want %v", tc.verb, tc.resource, tc.group, tc.ns, got, tc.want)
		}
	}
}

// metricsAuthOnly says whether a rendered ClusterRole grants nothing but
// the metrics endpoint's TokenReviews and SubjectAccessReviews.
func metricsAuthOnly(t *testing.T, objs []*unstructured.Unstructured, name string) bool {
	t.Helper()
	for _, o := range byKind(objs, "ClusterRole") {
		if o.GetName() == name {
			return cmp.Diff([]string{"authentication.k8s.io/tokenreviews:create", "authorization.k8s.io/subjectaccessreviews:create"},
				grants(*convert[rbacv1.ClusterRole](t, o))) == ""
		}
	}
	return false
}

// clusterPoliciesOnly says whether ClusterRole name grants reading
// ClusterTerraformRunPolicies and writing their status, and nothing else:
// what a namespaced install binds cluster-wide for them.
func clusterPoliciesOnly(t *testing.T, objs []*unstructured.Unstructured, name string) bool {
	t.Helper()
	for _, o := range byKind(objs, "ClusterRole") {
		if o.GetName() == name {
			return cmp.Diff([]string{
				"infra.opr8r.io/clusterterraformrunpolicies/status:get", "infra.opr8r.io/clusterterraformrunpolicies/status:patch", "infra.opr8r.io/clusterterraformrunpolicies/status:update",
				"infra.opr8r.io/clusterterraformrunpolicies:get", "infra.opr8r.io/clusterterraformrunpolicies:list", "infra.opr8r.io/clusterterraformrunpolicies:watch",
			}, grants(*convert[rbacv1.ClusterRole](t, o))) == ""
		}
	}
	return false
}

// rights creates a rendering's RBAC in envtest and returns the real
// authorizer's answer, as the manager's service account, to whether it
// may do something.
func rights(t *testing.T, objs []*unstructured.Unstructured) func(ns, group, resource, verb string) bool {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run make test")
	}
	env, cfg, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"opr8r-system", "team-a", "team-b"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
	}
	sa := ""
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			sa = convert[appsv1.Deployment](t, o).Spec.Template.Spec.ServiceAccountName
		}
		if strings.HasPrefix(o.GetAPIVersion(), "rbac.authorization.k8s.io/") {
			if err := c.Create(ctx, o); err != nil {
				t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	if sa == "" {
		t.Fatal("no Deployment service account rendered")
	}
	acfg := rest.CopyConfig(cfg)
	acfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:opr8r-system:" + sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:opr8r-system", "system:authenticated"}}
	manager := kubernetes.NewForConfigOrDie(acfg)
	return func(ns, group, resource, verb string) bool {
		r, err := manager.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Group: group, Resource: resource, Verb: verb},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.Allowed
	}
}

// clusterBindings checks that a namespaced rendering binds its manager's
// service account cluster-wide only to the metrics endpoint's reviews.
func clusterBindings(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range byKind(objs, "ClusterRoleBinding") {
		crb := convert[rbacv1.ClusterRoleBinding](t, o)
		for _, sub := range crb.Subjects {
			if sub.Kind == "ServiceAccount" && !metricsAuthOnly(t, objs, crb.RoleRef.Name) && !clusterPoliciesOnly(t, objs, crb.RoleRef.Name) {
				t.Errorf("a namespaced install binds its service account cluster-wide to %s: ClusterRoleBinding %s", crb.RoleRef.Name, o.GetName())
			}
		}
	}
}

// runnerReadsRuns gets the TerraformRuns of team-a as the runner (the
// apply step reads its run's approval record): the list is refused, the
// get of a missing run is answered NotFound, not Forbidden.
func runnerReadsRuns(ctx context.Context, cfg *rest.Config) error {
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = c.Resource(schema.GroupVersionResource{Group: "infra.opr8r.io", Version: "v1alpha1", Resource: "terraformruns"}).Namespace("team-a").Get(ctx, "none", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
