package step_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/opr8r/opr8r/pkg/results"
	"github.com/opr8r/opr8r/pkg/step"
)

const depSecret = "DEPENDENCY-SENSITIVE-MARKER-4e2d"

// consumerModule takes a network's vpc id and a database password from
// its dependencies; password is declared sensitive unless loose.
func consumerModule(loose bool) string {
	sensitive := "\n  sensitive = true"
	if loose {
		sensitive = ""
	}
	return `
variable "vpc_id" { type = string }
variable "db_password" {
  type = string` + sensitive + `
}
variable "name" {
  type    = string
  default = "app"
}
resource "terraform_data" "app" {
  input = "${var.vpc_id}/${var.name}/${length(var.db_password)}"
}
output "app" { value = terraform_data.app.output }
`
}

// consumerDir materialises the consumer module in a fresh workspace.
func consumerDir(t *testing.T, r *step.Runner, loose bool) string {
	t.Helper()
	from := t.TempDir()
	write(t, filepath.Join(from, "main.tf"), consumerModule(loose))
	dest := filepath.Join(t.TempDir(), "src")
	if err := r.Clone(context.Background(), step.CloneOptions{Source: "dir", From: from, Dest: dest}); err != nil {
		t.Fatal(err)
	}
	return dest
}

// dependencies are a network in the run's namespace (its outputs Secret
// mounted: a directory of files named after the variables) and a database
// in another namespace (read through the API), whose password is
// sensitive.
func dependencies(t *testing.T, vpc, dbNS string) []results.DependencyVar {
	t.Helper()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "vpc_id"), vpc)
	return []results.DependencyVar{
		{Variable: "vpc_id", Run: "network", Output: "vpc_id", File: filepath.Join(dir, "vpc_id")},
		{Variable: "db_password", Run: dbNS + "/db", Output: "password", Secret: dbNS + "/db-outputs", Sensitive: true},
	}
}

func outputsSecret(t *testing.T, ns, name string, data map[string]string) {
	t.Helper()
	if _, err := kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: data}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestDependencyOutputsAsVariables(t *testing.T) {
	needKube(t)
	for name, bin := range binaries(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ns, dbNS := namespace(t), namespace(t)
			outputsSecret(t, dbNS, "db-outputs", map[string]string{"password": depSecret})
			var out bytes.Buffer
			r := newRunner(t, bin, ns, &out)
			mod := step.Module{Dir: consumerDir(t, r, false), Workspace: "default"}
			if err := r.Init(ctx, mod, step.Backend{Type: "kubernetes", Namespace: ns, SecretSuffix: "app"}); err != nil {
				t.Fatalf("init: %v\n%s", err, out.String())
			}
			planFile := filepath.Join(filepath.Dir(mod.Dir), "tfplan")
			opts := step.PlanOptions{PlanFile: planFile, VarsFile: varsFile(t, "web"), DependencyVars: dependencies(t, "vpc-0a1b", dbNS), PlanSecret: "app-1-plan", InputsSalt: "uid-app"}

			t.Log("a mounted output and one read through the API become variables, beside vars")
			sum, err := r.Plan(ctx, mod, opts)
			if err != nil {
				t.Fatalf("plan: %v\n%s", err, out.String())
			}
			if err := r.Apply(ctx, mod, planFile, sum.Digest); err != nil {
				t.Fatalf("apply: %v\n%s", err, out.String())
			}
			got, _, err := tfOutput(ctx, r, mod)
			if err != nil {
				t.Fatal(err)
			}
			if want := `"vpc-0a1b/web/` + strconv.Itoa(len(depSecret)) + `"`; string(got["app"]) != want {
				t.Errorf("output app = %s, want %s", got["app"], want)
			}
			if !strings.Contains(out.String(), "terraform_data.app will be created") {
				t.Errorf("the plan was not printed once its sensitive variables were checked:\n%s", out.String())
			}
			if strings.Contains(out.String(), depSecret) {
				t.Errorf("the step's output contains the sensitive dependency output:\n%s", out.String())
			}
			plan, err := kube.CoreV1().Secrets(ns).Get(ctx, "app-1-plan", metav1.GetOptions{})
			if err != nil || strings.Contains(string(plan.Data["plan.txt"]), depSecret) {
				t.Errorf("readable plan: %v, or it shows the sensitive value:\n%s", err, plan.Data["plan.txt"])
			}

			t.Log("a changed dependency output changes the inputs digest")
			first := result(t, r, "inputs")
			opts.DependencyVars = dependencies(t, "vpc-ffff", dbNS)
			if _, err := r.Plan(ctx, mod, opts); err != nil {
				t.Fatalf("re-plan: %v\n%s", err, out.String())
			}
			if second := result(t, r, "inputs"); second == first || !strings.HasPrefix(second, "sha256:") {
				t.Errorf("inputs digest %s after the output changed, was %s", second, first)
			}
		})
	}
}

func TestVarsWinOverDependencyOutputs(t *testing.T) {
	needKube(t)
	ctx := context.Background()
	ns, dbNS := namespace(t), namespace(t)
	outputsSecret(t, dbNS, "db-outputs", map[string]string{"password": depSecret})
	var out bytes.Buffer
	r := newRunner(t, binaries(t)["terraform"], ns, &out)
	mod := step.Module{Dir: consumerDir(t, r, false), Workspace: "default"}
	if err := r.Init(ctx, mod, step.Backend{Type: "kubernetes", Namespace: ns, SecretSuffix: "app"}); err != nil {
		t.Fatalf("init: %v\n%s", err, out.String())
	}
	vars := filepath.Join(t.TempDir(), "vars.json")
	write(t, vars, `{"vpc_id":"pinned-by-vars"}`)
	planFile := filepath.Join(filepath.Dir(mod.Dir), "tfplan")
	sum, err := r.Plan(ctx, mod, step.PlanOptions{PlanFile: planFile, VarsFile: vars, DependencyVars: dependencies(t, "vpc-0a1b", dbNS)})
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, out.String())
	}
	if err := r.Apply(ctx, mod, planFile, sum.Digest); err != nil {
		t.Fatalf("apply: %v\n%s", err, out.String())
	}
	got, _, err := tfOutput(ctx, r, mod)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"pinned-by-vars/app/` + strconv.Itoa(len(depSecret)) + `"`; string(got["app"]) != want {
		t.Errorf("output app = %s, want %s: spec.terraform.vars win over a dependency's output", got["app"], want)
	}
}

func TestDependencyOutputRefusals(t *testing.T) {
	needKube(t)
	bin := binaries(t)["terraform"]
	ctx := context.Background()
	cases := map[string]struct {
		loose   bool
		destroy bool
		deps    func(t *testing.T, dbNS string) []results.DependencyVar
		wantErr error
		wantMsg string
	}{
		"a sensitive output into a variable not declared sensitive": {
			loose: true, deps: func(t *testing.T, dbNS string) []results.DependencyVar { return dependencies(t, "vpc-1", dbNS) },
			wantErr: step.ErrSensitiveVariable, wantMsg: `declare sensitive = true on variable db_password (output "password" of `,
		},
		"an output gone from the dependency": {
			deps: func(t *testing.T, dbNS string) []results.DependencyVar {
				d := dependencies(t, "vpc-1", dbNS)
				d[0].File += "-gone"
				return d
			},
			wantErr: step.ErrDependencyOutput, wantMsg: `dependency network has no output "vpc_id" (for variable vpc_id)`,
		},
		"a destroy whose dependency is gone: terraform's error, and the way out": {
			destroy: true,
			deps: func(t *testing.T, dbNS string) []results.DependencyVar {
				d := dependencies(t, "vpc-1", dbNS)
				d[1].Secret = dbNS + "/gone-outputs"
				return d
			},
			wantMsg: "the destroy ran without db_password (from ",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ns, dbNS := namespace(t), namespace(t)
			outputsSecret(t, dbNS, "db-outputs", map[string]string{"password": depSecret})
			var out bytes.Buffer
			r := newRunner(t, bin, ns, &out)
			mod := step.Module{Dir: consumerDir(t, r, tc.loose), Workspace: "default"}
			if err := r.Init(ctx, mod, step.Backend{Type: "kubernetes", Namespace: ns, SecretSuffix: "app"}); err != nil {
				t.Fatalf("init: %v\n%s", err, out.String())
			}
			opts := step.PlanOptions{PlanFile: filepath.Join(filepath.Dir(mod.Dir), "tfplan"), DependencyVars: tc.deps(t, dbNS), Destroy: tc.destroy, PlanSecret: "app-1-plan"}
			_, err := r.Plan(ctx, mod, opts)
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("plan: err = %v, want %v %q\n%s", err, tc.wantErr, tc.wantMsg, out.String())
			}
			if tc.destroy && !strings.Contains(err.Error(), "infra.opr8r.io/skip-destroy=true") {
				t.Errorf("the destroy's error does not name the way out: %v", err)
			}
			if strings.Contains(out.String()+err.Error(), depSecret) {
				t.Errorf("the sensitive value leaked:\n%s\n%v", out.String(), err)
			}
			if tc.wantErr == step.ErrSensitiveVariable {
				if _, gerr := kube.CoreV1().Secrets(ns).Get(ctx, "app-1-plan", metav1.GetOptions{}); gerr == nil {
					t.Error("the refused plan was kept in its Secret")
				}
				if strings.Contains(out.String(), "terraform_data.app will be created") {
					t.Errorf("the refused plan was printed:\n%s", out.String())
				}
			}
		})
	}
}

// TestCrossNamespaceOutputsNeedARoleBinding runs the step as a user with no
// rights, as the runner's service account is in a namespace that grants it
// nothing: the read is refused with a message that says what to grant, and
// the documented Role and RoleBinding are enough.
func TestCrossNamespaceOutputsNeedARoleBinding(t *testing.T) {
	needKube(t)
	ctx := context.Background()
	ns, dbNS := namespace(t), namespace(t)
	outputsSecret(t, dbNS, "db-outputs", map[string]string{"password": depSecret})
	user, err := testEnv.ControlPlane.AddUser(envtest.User{Name: "runner-" + ns}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	write(t, path, string(kc))
	k, err := step.NewKube(path, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r := &step.Runner{Terraform: binaries(t)["terraform"], Out: &out, Kube: k}
	mod := step.Module{Dir: consumerDir(t, r, false)}
	opts := step.PlanOptions{PlanFile: filepath.Join(filepath.Dir(mod.Dir), "tfplan"), DependencyVars: dependencies(t, "vpc-1", dbNS)}
	_, err = r.Plan(ctx, mod, opts)
	if !errors.Is(err, step.ErrDependencyOutput) || !strings.Contains(err.Error(), "may not read Secret "+dbNS+"/db-outputs") {
		t.Fatalf("plan as a runner without rights there: err = %v", err)
	}

	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "db-outputs-reader", Namespace: dbNS},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"db-outputs"}}}}
	if _, err := kube.RbacV1().Roles(dbNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "app-reads-db-outputs", Namespace: dbNS},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "db-outputs-reader"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "runner-" + ns}}}
	if _, err := kube.RbacV1().RoleBindings(dbNS).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Local state: the user has no rights in its own namespace either, and
	// needs none for this.
	cfg := filepath.Join(t.TempDir(), "backend.hcl")
	write(t, cfg, "path = \""+filepath.Join(t.TempDir(), "terraform.tfstate")+"\"\n")
	if err := r.Init(ctx, mod, step.Backend{Type: "local", ConfigFile: cfg}); err != nil {
		t.Fatalf("init: %v\n%s", err, out.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err = r.Plan(ctx, mod, opts); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // RBAC takes a moment to apply
	}
	if err != nil {
		t.Fatalf("plan with the documented Role and RoleBinding: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), depSecret) {
		t.Errorf("the sensitive value leaked:\n%s", out.String())
	}
}

// tfOutput reads `terraform output -json` of a module.
func tfOutput(ctx context.Context, r *step.Runner, mod step.Module) (map[string]json.RawMessage, []byte, error) {
	names, err := r.ExportOutputs(ctx, mod, "outputs-"+filepath.Base(filepath.Dir(mod.Dir)))
	if err != nil {
		return nil, nil, err
	}
	raw, err := kube.CoreV1().Secrets(r.Kube.Namespace).Get(ctx, "outputs-"+filepath.Base(filepath.Dir(mod.Dir)), metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	var outs map[string]struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw.Data["outputs.json"], &outs); err != nil {
		return nil, nil, err
	}
	got := map[string]json.RawMessage{}
	for _, n := range names {
		got[n] = outs[n].Value
	}
	return got, raw.Data["outputs.json"], nil
}
