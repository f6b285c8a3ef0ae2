package stateapi_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/stateapi"
	"github.com/opr8r/opr8r/pkg/step"
	"github.com/opr8r/opr8r/test/envtestutil"
)

var (
	cfg   *rest.Config
	admin kubernetes.Interface
	runs  client.Client
)

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		os.Exit(m.Run()) // the tests that need it say so
	}
	env, c, err := envtestutil.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		os.Exit(1)
	}
	cfg = c
	admin = kubernetes.NewForConfigOrDie(cfg)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = infrav1.AddToScheme(scheme)
	runs, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		panic(err)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// world is a namespace with two runs, a preview of the first, a tenant's
// Secret, and the state API in front of the API server.
type world struct {
	t            *testing.T
	ns           string
	app, preview *infrav1.TerraformRun
	url          string
	ca           string
}

// The runner and planner of these tests are not the install's
// (opr8r-identities): its policy lets nobody but the kubelet mint a
// runner's token, and these tests mint theirs.
const (
	runnerSA  = "step-runner"
	plannerSA = "step-planner"
)

func newWorld(t *testing.T) *world {
	t.Helper()
	if cfg == nil {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with make test")
	}
	ctx := context.Background()
	ns := fmt.Sprintf("state-%d", time.Now().UnixNano()%1000000)
	must(t, runs.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	for _, sa := range []string{runnerSA, plannerSA, "tenant-app"} {
		must(t, runs.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}))
	}
	must(t, runs.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-password", Namespace: ns}, StringData: map[string]string{"password": "hunter2"}}))
	w := &world{t: t, ns: ns}
	w.app = &infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns}, Spec: infrav1.TerraformRunSpec{
		Source: infrav1.Source{Inline: &infrav1.InlineSource{Files: map[string]infrav1.FileContent{"main.tf": "# empty\n"}}}}}
	must(t, runs.Create(ctx, w.app))
	// The preview plans against the tracked run's state.
	w.preview = &infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Name: "app-pr7", Namespace: ns}, Spec: infrav1.TerraformRunSpec{
		PlanOnly: true,
		Backend:  &infrav1.BackendSpec{Kubernetes: &infrav1.KubernetesBackend{SecretSuffix: "app"}},
		Source:   infrav1.Source{Inline: &infrav1.InlineSource{Files: map[string]infrav1.FileContent{"main.tf": "# empty\n"}}}}}
	must(t, runs.Create(ctx, w.preview))

	s := &stateapi.Server{
		Auth: &stateapi.TokenReviewer{Client: admin.AuthenticationV1().TokenReviews()},
		Grants: &stateapi.Grants{
			Runs:     runs,
			IsRunner: func(a string) bool { return a == runnerSA || a == plannerSA },
		},
		Upstream: cfg,
	}
	srv := httptest.NewUnstartedServer(s)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	w.url = srv.URL
	w.ca = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	return w
}

// token is a token of account, bound to a new pod named pod, with the
// state audience of run's child and the role the manager gives the step
// (aud overrides it when set).
func (w *world) token(account, pod string, run *infrav1.TerraformRun, child, role, aud string) string {
	w.t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: w.ns}, Spec: corev1.PodSpec{ServiceAccountName: account,
		Containers: []corev1.Container{{Name: "step", Image: "terraform"}}}}
	must(w.t, runs.Create(ctx, p))
	if aud == "" {
		aud = names.StateAudience(w.ns, run.Name, string(run.UID), child, role)
	}
	tr, err := admin.CoreV1().ServiceAccounts(w.ns).CreateToken(ctx, account, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{aud}, ExpirationSeconds: ptr.To[int64](600),
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
	must(w.t, err)
	return tr.Status.Token
}

// client is a step's view: a kubeconfig of the state API with the token,
// as opr8r-step writes it.
func (w *world) client(token string) (kubernetes.Interface, string) {
	w.t.Helper()
	dir := w.t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	must(w.t, os.WriteFile(tokenFile, []byte(token), 0o600))
	kc := filepath.Join(dir, "kubeconfig")
	must(w.t, step.WriteStateKubeconfig(kc, w.url, w.ca, tokenFile))
	c, err := clientcmd.BuildConfigFromFlags("", kc)
	must(w.t, err)
	step.StateAPIConfig(c)
	return kubernetes.NewForConfigOrDie(c), kc
}

// TestRealTerraformThroughTheStateAPI runs real terraform's kubernetes
// backend through the state API, as the runner, the planner and a
// preview, and makes the calls a module's code could make with the same
// token: only the run's own state and objects answer.
func TestRealTerraformThroughTheStateAPI(t *testing.T) {
	tf, err := exec.LookPath("terraform")
	if err != nil {
		t.Fatal("terraform is not on PATH; this test runs real terraform")
	}
	w := newWorld(t)
	ctx := context.Background()

	runnerTok := w.token(runnerSA, "app-1-apply-x1", w.app, "app-1", "runner", "")
	runner, runnerKC := w.client(runnerTok)
	mod := module(t, `resource "terraform_data" "x" { input = "hello" }`)
	be := step.Backend{Namespace: w.ns, SecretSuffix: "app", Kubeconfig: runnerKC}
	out := terraform(t, tf, mod, be, "apply", "-auto-approve", "-input=false", "-lock-timeout=10s")
	if !strings.Contains(out, "1 added") {
		t.Fatalf("apply as the runner:\n%s", out)
	}
	st, err := admin.CoreV1().Secrets(w.ns).Get(ctx, "tfstate-default-app", metav1.GetOptions{})
	if err != nil || len(st.Data["tfstate"]) == 0 {
		t.Fatalf("the state Secret after the runner's apply: %v", err)
	}
	t.Log("runner: terraform apply through the state API wrote tfstate-default-app")

	// What a module's code could do with the runner's token.
	if _, err := runner.CoreV1().Secrets(w.ns).Get(ctx, "db-password", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the runner read a tenant's Secret: %v", err)
	}
	l, err := runner.CoreV1().Secrets(w.ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	if len(l.Items) != 1 || l.Items[0].Name != "tfstate-default-app" {
		t.Fatalf("the runner's list: %v", secretNames(l.Items))
	}
	if _, err := runner.CoreV1().Secrets(w.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-1-evil"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the runner made a Secret owned by nothing: %v", err)
	}
	own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-1-plan", OwnerReferences: []metav1.OwnerReference{{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: "app", UID: w.app.UID}}},
		StringData: map[string]string{"plan.txt": "plan"}}
	if _, err := runner.CoreV1().Secrets(w.ns).Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the runner could not write its own plan Secret: %v", err)
	}
	if _, err := runner.CoreV1().Secrets(w.ns).Get(ctx, "app-1-plan", metav1.GetOptions{}); err != nil {
		t.Fatalf("the runner could not read its own plan Secret back: %v", err)
	}
	if _, err := runner.CoreV1().Secrets(w.ns).Patch(ctx, "tfstate-default-app", "application/merge-patch+json", []byte(`{"data":null}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a patch went through: %v", err)
	}
	if _, err := runner.CoreV1().ConfigMaps(w.ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the state API served ConfigMaps: %v", err)
	}

	// The planner reads the state and takes the lock; it changes no state.
	planner, plannerKC := w.client(w.token(plannerSA, "app-2-x1", w.app, "app-2", "planner", ""))
	// Each pod writes the kubeconfig at the same path (names.StateKubeconfig);
	// here each identity has its own, so its own module directory.
	mod = module(t, `resource "terraform_data" "x" { input = "hello" }`)
	out = terraform(t, tf, mod, step.Backend{Namespace: w.ns, SecretSuffix: "app", Kubeconfig: plannerKC}, "plan", "-input=false", "-lock-timeout=10s", "-detailed-exitcode")
	if !strings.Contains(out, "No changes") {
		t.Fatalf("plan as the planner:\n%s", out)
	}
	st, err = planner.CoreV1().Secrets(w.ns).Get(ctx, "tfstate-default-app", metav1.GetOptions{})
	must(t, err)
	if _, err := planner.CoreV1().Secrets(w.ns).Update(ctx, st, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the planner changed the state: %v", err)
	}
	if err := planner.CoreV1().Secrets(w.ns).Delete(ctx, "tfstate-default-app", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the planner deleted the state: %v", err)
	}
	t.Log("planner: plans with the lock; update and delete of the state refused")

	// A preview plans without the lock, and can neither lock nor write.
	pv, pvKC := w.client(w.token(runnerSA, "app-pr7-plan-1-x1", w.preview, "app-pr7-plan-1", "preview", ""))
	mod = module(t, `resource "terraform_data" "x" { input = "hello" }`)
	pvBackend := step.Backend{Namespace: w.ns, SecretSuffix: "app", Kubeconfig: pvKC}
	out = terraform(t, tf, mod, pvBackend, "plan", "-input=false", "-lock=false", "-detailed-exitcode")
	if !strings.Contains(out, "No changes") {
		t.Fatalf("a preview's plan without the lock:\n%s", out)
	}
	out, err = terraformErr(tf, mod, pvBackend, "plan", "-input=false", "-lock-timeout=1s")
	if err == nil || !strings.Contains(out, "lock") {
		t.Fatalf("a preview took the state lock:\n%s", out)
	}
	if _, err := pv.CoordinationV1().Leases(w.ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "lock-tfstate-default-app"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("a preview made the lock: %v", err)
	}
	st, err = pv.CoreV1().Secrets(w.ns).Get(ctx, "tfstate-default-app", metav1.GetOptions{})
	must(t, err)
	st.Data["tfstate"] = []byte("not a state")
	if _, err := pv.CoreV1().Secrets(w.ns).Update(ctx, st, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a preview wrote the tracked run's state: %v", err)
	}
	if _, err := pv.CoreV1().Secrets(w.ns).Get(ctx, "db-password", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a preview read a tenant's Secret: %v", err)
	}
	if _, err := pv.CoreV1().Secrets(w.ns).Get(ctx, "app-1-plan", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a preview read the tracked run's plan Secret: %v", err)
	}
	t.Log("preview: plans with -lock=false; the lock, the state's update and others' Secrets refused")
}

// TestStateAPIRefusesTokens: a token meant for another audience, one
// bound to a pod of another child, one of an account that is not a
// runner, and one for a run that was deleted and made again.
func TestStateAPIRefusesTokens(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	get := func(tok string) error {
		c, _ := w.client(tok)
		_, err := c.CoreV1().Secrets(w.ns).Get(ctx, "tfstate-default-app", metav1.GetOptions{})
		return err
	}
	if err := get(w.token(runnerSA, "app-1-a", w.app, "app-1", "runner", "https://kubernetes.default.svc")); !apierrors.IsUnauthorized(err) {
		t.Fatalf("the API server's audience: %v", err)
	}
	if err := get(w.token(runnerSA, "app-9-b", w.app, "app-1", "runner", "")); !apierrors.IsForbidden(err) {
		t.Fatalf("a pod of another child: %v", err)
	}
	if err := get(w.token("tenant-app", "app-1-c", w.app, "app-1", "runner", "")); !apierrors.IsForbidden(err) {
		t.Fatalf("a tenant's account: %v", err)
	}
	stale := w.app.DeepCopy()
	stale.UID = "0e0e0e0e-0000-0000-0000-000000000000"
	if err := get(w.token(runnerSA, "app-1-d", stale, "app-1", "runner", "")); !apierrors.IsForbidden(err) {
		t.Fatalf("a token for another TerraformRun of that name: %v", err)
	}
	if err := get("not-a-jwt"); !apierrors.IsUnauthorized(err) {
		t.Fatalf("a token that is not a JWT: %v", err)
	}
	if err := get(w.token(runnerSA, "app-1-e", w.app, "app-1", "runner", "")); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("the child's own token: %v", err)
	}
}

func module(t *testing.T, body string) string {
	t.Helper()
	d := t.TempDir()
	must(t, os.WriteFile(filepath.Join(d, "main.tf"), []byte(body+"\n"), 0o644))
	return d
}

// terraform inits the module with the backend (step.Runner.Init, which
// writes the backend override) and runs args.
func terraform(t *testing.T, bin, dir string, be step.Backend, args ...string) string {
	t.Helper()
	out, err := terraformErr(bin, dir, be, args...)
	if err != nil {
		t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func terraformErr(bin, dir string, be step.Backend, args ...string) (string, error) {
	var buf bytes.Buffer
	cli := filepath.Join(dir, ".terraformrc")
	_ = os.WriteFile(cli, []byte("disable_checkpoint = true\n"), 0o644)
	env := map[string]string{"TF_CLI_CONFIG_FILE": cli, "CHECKPOINT_DISABLE": "1", "KUBE_CONFIG_PATH": ""}
	r := &step.Runner{Terraform: bin, Out: &buf, ResultsDir: dir, Env: env, NoStateLock: slicesContains(args, "-lock=false")}
	if err := r.Init(context.Background(), step.Module{Dir: dir}, be); err != nil {
		return buf.String(), err
	}
	cmd := exec.Command(bin, append(args, "-no-color")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+cli, "CHECKPOINT_DISABLE=1", "KUBE_CONFIG_PATH=")
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 2 && slicesContains(args, "-detailed-exitcode") {
		err = nil
	}
	return buf.String(), err
}

func slicesContains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func secretNames(l []corev1.Secret) []string {
	var out []string
	for _, s := range l {
		out = append(out, s.Name)
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
