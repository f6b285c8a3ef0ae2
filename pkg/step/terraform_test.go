package step_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/opr8r/opr8r/pkg/step"
	"github.com/opr8r/opr8r/test/envtestutil"
)

var (
	testEnv        *envtest.Environment
	kubeconfigPath string
	kube           kubernetes.Interface
	cliConfig      string
)

// TestMain starts a real API server for the kubernetes backend and for the
// Secrets the steps write, and gives terraform a CLI config of its own.
func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "opr8r-step-test-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(tmp)
	cliConfig = filepath.Join(tmp, "terraformrc")
	if err := os.WriteFile(cliConfig, []byte("disable_checkpoint = true\n"), 0o644); err != nil {
		panic(err)
	}
	os.Setenv("TF_CLI_CONFIG_FILE", cliConfig)
	os.Setenv("CHECKPOINT_DISABLE", "1")

	var env *envtest.Environment
	if os.Getenv("KUBEBUILDER_ASSETS") != "" {
		env, _, err = envtestutil.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, "starting envtest:", err)
			return 1
		}
		defer env.Stop()
		testEnv = env
		user, err := env.ControlPlane.AddUser(envtest.User{Name: "step", Groups: []string{"system:masters"}}, nil)
		if err != nil {
			panic(err)
		}
		kc, err := user.KubeConfig()
		if err != nil {
			panic(err)
		}
		kubeconfigPath = filepath.Join(tmp, "kubeconfig")
		if err := os.WriteFile(kubeconfigPath, kc, 0o600); err != nil {
			panic(err)
		}
		k, err := step.NewKube(kubeconfigPath, "default", nil)
		if err != nil {
			panic(err)
		}
		kube = k.Client
	}
	return m.Run()
}

// binaries are the Terraform and OpenTofu binaries every journey runs with.
func binaries(t *testing.T) map[string]string {
	t.Helper()
	tf, err := exec.LookPath("terraform")
	if err != nil {
		t.Fatal("terraform is not on PATH; these tests run real terraform")
	}
	tofu := os.Getenv("OPR8R_TOFU")
	if tofu == "" {
		t.Fatal("OPR8R_TOFU is not set: run the tests with make test, which builds OpenTofu (hack/opentofu.sh)")
	}
	return map[string]string{"terraform": tf, "tofu": tofu}
}

func needKube(t *testing.T) {
	t.Helper()
	if kube == nil {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with make test")
	}
}

var nsN int

func namespace(t *testing.T) string {
	t.Helper()
	nsN++
	ns := fmt.Sprintf("step-%d-%d", time.Now().UnixNano()%100000, nsN)
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

const sensitiveOut = "SENSITIVE-OUTPUT-MARKER-b71c"

// module uses only built-in terraform_data, variables and outputs.
const module = `
variable "name" {
  type = string
  validation {
    condition     = lower(var.name) == var.name
    error_message = "name must be lowercase."
  }
}
variable "secret" {
  type      = string
  sensitive = true
}
resource "terraform_data" "thing" {
  input = var.name
}
output "id" {
  value = terraform_data.thing.id
}
output "name" {
  value = terraform_data.thing.output
}
output "password" {
  value     = var.secret
  sensitive = true
}
`

// workdir materialises the module (as the clone step does) in a fresh
// workspace, like a new pipeline's volume.
func workdir(t *testing.T, r *step.Runner) string {
	t.Helper()
	from := t.TempDir()
	write(t, filepath.Join(from, "main.tf"), module)
	dest := filepath.Join(t.TempDir(), "src")
	if err := r.Clone(context.Background(), step.CloneOptions{Source: "dir", From: from, Dest: dest}); err != nil {
		t.Fatal(err)
	}
	return dest
}

func varsFile(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vars.json")
	b, _ := json.Marshal(map[string]string{"name": name})
	write(t, p, string(b))
	return p
}

// secretVarsDir is a mounted Secret holding the sensitive variable.
func secretVarsDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	write(t, filepath.Join(d, "secret"), sensitiveOut)
	return d
}

// withSecretVars adds to o a mounted Secret (varsFrom) holding the
// sensitive variable.
func withSecretVars(t *testing.T, o step.PlanOptions) step.PlanOptions {
	t.Helper()
	d := secretVarsDir(t)
	o.VarsDirs = append(o.VarsDirs, d)
	o.SecretVarsDirs = append(o.SecretVarsDirs, d)
	return o
}

func newRunner(t *testing.T, bin, ns string, out *bytes.Buffer) *step.Runner {
	t.Helper()
	k, err := step.NewKube(kubeconfigPath, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &step.Runner{Terraform: bin, Out: out, ResultsDir: t.TempDir(), Env: map[string]string{"KUBE_CONFIG_PATH": kubeconfigPath}, Kube: k}
}

func result(t *testing.T, r *step.Runner, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.ResultsDir, name))
	if err != nil {
		t.Fatalf("result %s: %v", name, err)
	}
	return string(b)
}

func TestTerraformJourneys(t *testing.T) {
	needKube(t)
	for name, bin := range binaries(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ns := namespace(t)
			be := step.Backend{Type: "kubernetes", Namespace: ns, SecretSuffix: "journey"}
			var out bytes.Buffer
			r := newRunner(t, bin, ns, &out)
			mod := step.Module{Dir: workdir(t, r), Workspace: "default"}
			planFile := filepath.Join(filepath.Dir(mod.Dir), "tfplan")
			opts := withSecretVars(t, step.PlanOptions{PlanFile: planFile, VarsFile: varsFile(t, "demo"), PlanSecret: "run-1-plan"})

			if err := r.Init(ctx, mod, be); err != nil {
				t.Fatalf("init: %v\n%s", err, out.String())
			}

			t.Log("plan → apply → export, with a sensitive output")
			sum, err := r.Plan(ctx, mod, opts)
			if err != nil {
				t.Fatalf("plan: %v\n%s", err, out.String())
			}
			if !sum.HasChanges || sum.Add != 1 || sum.Change != 0 || sum.Destroy != 0 {
				t.Fatalf("plan summary = %+v, want +1 with changes", sum)
			}
			digest, _ := step.FileDigest(planFile)
			if sum.Digest != digest || result(t, r, "digest") != digest || result(t, r, "has-changes") != "true" {
				t.Fatalf("digest results disagree: summary %s, file %s, result %s", sum.Digest, digest, result(t, r, "digest"))
			}
			if got := result(t, r, "summary"); got != `{"add":1,"change":0,"destroy":0,"replace":0}` {
				t.Errorf("summary result = %s", got)
			}
			planSecret, err := kube.CoreV1().Secrets(ns).Get(ctx, "run-1-plan", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("readable plan Secret: %v", err)
			}
			meta, _ := json.Marshal(planSecret.ObjectMeta)
			if strings.Contains(string(meta), sensitiveOut) {
				t.Errorf("the readable plan Secret's metadata contains the sensitive value: %s", meta)
			}
			if !strings.Contains(string(planSecret.Data["plan.txt"]), "terraform_data.thing will be created") {
				t.Errorf("readable plan lacks the resource:\n%s", planSecret.Data["plan.txt"])
			}

			t.Log("a tampered or mismatched digest is refused")
			if err := r.Apply(ctx, mod, planFile, "sha256:"+strings.Repeat("0", 64)); !errors.Is(err, step.ErrDigestMismatch) {
				t.Fatalf("apply with a wrong digest: err = %v, want ErrDigestMismatch", err)
			}
			orig, _ := os.ReadFile(planFile)
			if err := os.WriteFile(planFile, append(append([]byte{}, orig...), 0), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := r.Apply(ctx, mod, planFile, digest); !errors.Is(err, step.ErrDigestMismatch) {
				t.Fatalf("apply of a tampered plan file: err = %v, want ErrDigestMismatch", err)
			}
			if err := os.WriteFile(planFile, orig, 0o644); err != nil {
				t.Fatal(err)
			}

			if err := r.Apply(ctx, mod, planFile, digest); err != nil {
				t.Fatalf("apply: %v\n%s", err, out.String())
			}

			t.Log("the apply step started again (a re-created pod, a retry) never applies the plan twice")
			before := strings.Count(out.String(), " apply -input=false")
			err = r.Apply(ctx, mod, planFile, digest)
			if !errors.Is(err, step.ErrApplyStarted) || !strings.Contains(err.Error(), "kubectl tfrun rerun") {
				t.Fatalf("second apply of one plan: err = %v, want ErrApplyStarted", err)
			}
			if after := strings.Count(out.String(), " apply -input=false"); after != before {
				t.Fatalf("terraform apply ran again (%d runs logged, was %d)", after, before)
			}
			names, err := r.ExportOutputs(ctx, mod, "run-1-tfoutputs")
			if err != nil {
				t.Fatalf("export: %v", err)
			}
			if strings.Join(names, ",") != "id,name,password" {
				t.Errorf("exported outputs = %v", names)
			}
			raw, err := kube.CoreV1().Secrets(ns).Get(ctx, "run-1-tfoutputs", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var outs map[string]struct {
				Sensitive bool            `json:"sensitive"`
				Value     json.RawMessage `json:"value"`
			}
			if err := json.Unmarshal(raw.Data["outputs.json"], &outs); err != nil {
				t.Fatal(err)
			}
			if string(outs["password"].Value) != `"`+sensitiveOut+`"` || !outs["password"].Sensitive || string(outs["name"].Value) != `"demo"` {
				t.Errorf("outputs.json = %s", raw.Data["outputs.json"])
			}
			if raw.Labels["app.kubernetes.io/managed-by"] != "opr8r" {
				t.Errorf("raw outputs Secret labels = %v", raw.Labels)
			}
			if _, err := kube.CoreV1().Secrets(ns).Get(ctx, "tfstate-default-journey", metav1.GetOptions{}); err != nil {
				t.Errorf("state Secret: %v", err)
			}
			if strings.Contains(out.String(), sensitiveOut) {
				t.Errorf("the step output contains the sensitive value:\n%s", out.String())
			}
			for _, f := range []string{"has-changes", "digest", "summary"} {
				if strings.Contains(result(t, r, f), sensitiveOut) {
					t.Errorf("result %s contains the sensitive value", f)
				}
			}

			t.Log("a second pipeline sees the state: a no-change re-plan")
			var out2 bytes.Buffer
			r2 := newRunner(t, bin, ns, &out2)
			mod2 := step.Module{Dir: workdir(t, r2), Workspace: "default"}
			if err := r2.Init(ctx, mod2, be); err != nil {
				t.Fatalf("init 2: %v\n%s", err, out2.String())
			}
			opts2 := opts
			opts2.PlanFile = filepath.Join(filepath.Dir(mod2.Dir), "tfplan")
			opts2.PlanSecret = ""
			sum2, err := r2.Plan(ctx, mod2, opts2)
			if err != nil {
				t.Fatalf("re-plan: %v\n%s", err, out2.String())
			}
			if sum2.HasChanges || sum2.Add+sum2.Change+sum2.Destroy != 0 || result(t, r2, "has-changes") != "false" {
				t.Errorf("re-plan = %+v, want no changes", sum2)
			}

			t.Log("destroy empties the state")
			if err := r2.Destroy(ctx, mod2, opts2); err != nil {
				t.Fatalf("destroy: %v\n%s", err, out2.String())
			}
			state, _, err := runTF(bin, mod2.Dir, "state", "list")
			if err != nil {
				t.Fatalf("state list: %v", err)
			}
			if strings.TrimSpace(state) != "" {
				t.Errorf("state after destroy = %q, want empty", state)
			}
		})
	}
}

func runTF(bin, dir string, args ...string) (string, string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBE_CONFIG_PATH="+kubeconfigPath)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	return o.String(), e.String(), err
}

func TestFailingModuleSurfacesTerraformError(t *testing.T) {
	needKube(t)
	for name, bin := range binaries(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ns := namespace(t)
			var out bytes.Buffer
			r := newRunner(t, bin, ns, &out)
			mod := step.Module{Dir: workdir(t, r)}
			if err := r.Init(ctx, mod, step.Backend{Namespace: ns, SecretSuffix: "fails"}); err != nil {
				t.Fatalf("init: %v\n%s", err, out.String())
			}
			_, err := r.Plan(ctx, mod, withSecretVars(t, step.PlanOptions{PlanFile: filepath.Join(t.TempDir(), "p"), VarsFile: varsFile(t, "NotLower")}))
			var tfErr *step.TerraformError
			if !errors.As(err, &tfErr) {
				t.Fatalf("err = %v, want a *TerraformError", err)
			}
			if got := tfErr.Error(); !strings.HasPrefix(got, "Error: Invalid value for variable") || !strings.Contains(got, "name must be lowercase.") {
				t.Errorf("summary = %q, want terraform's diagnostic with its detail", got)
			}
		})
	}
}

func TestCleanupReleasesOnlyThisRunsAbortedLock(t *testing.T) {
	needKube(t)
	bin := binaries(t)["terraform"]
	ctx := context.Background()
	ns := namespace(t)
	var out bytes.Buffer
	r := newRunner(t, bin, ns, &out)
	dir := filepath.Join(t.TempDir(), "src")
	write(t, filepath.Join(dir, "main.tf"), `
resource "terraform_data" "slow" {
  provisioner "local-exec" {
    command = "sleep 60"
  }
}
`)
	mod := step.Module{Dir: dir}
	be := step.Backend{Namespace: ns, SecretSuffix: "locked"}
	if err := r.Init(ctx, mod, be); err != nil {
		t.Fatalf("init: %v\n%s", err, out.String())
	}
	planFile := filepath.Join(t.TempDir(), "p")
	sum, err := r.Plan(ctx, mod, step.PlanOptions{PlanFile: planFile})
	if err != nil {
		t.Fatal(err)
	}

	// Start apply, and kill it (SIGKILL, as when a pod dies at once; a
	// stopped step interrupts terraform, which releases its lock) while it
	// holds the lock.
	r.StopSignal = syscall.SIGKILL
	applyCtx, kill := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Apply(applyCtx, mod, planFile, sum.Digest) }()
	leases := kube.CoordinationV1().Leases(ns)
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := leases.Get(ctx, "lock-tfstate-default-locked", metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("apply never took the state lock")
		}
		time.Sleep(100 * time.Millisecond)
	}
	kill()
	<-done
	r.StopSignal = nil
	if l, _ := leases.Get(ctx, "lock-tfstate-default-locked", metav1.GetOptions{}); l.Spec.HolderIdentity == nil {
		t.Fatal("the killed apply left no lock; the test proves nothing")
	}

	what, err := r.Cleanup(ctx, mod, be, "another-run-")
	if err != nil || !strings.Contains(what, "not by this run; left alone") {
		t.Fatalf("cleanup for another run: %q, %v; want the lock left alone", what, err)
	}
	host, _ := os.Hostname()
	what, err = r.Cleanup(ctx, mod, be, host)
	if err != nil || !strings.HasPrefix(what, "released state lock") {
		t.Fatalf("cleanup: %q, %v; want the lock released", what, err)
	}
	if l, _ := leases.Get(ctx, "lock-tfstate-default-locked", metav1.GetOptions{}); l.Spec.HolderIdentity != nil {
		t.Fatal("the lease is still held")
	}
	if _, err := r.Plan(ctx, mod, step.PlanOptions{PlanFile: filepath.Join(t.TempDir(), "p2")}); err != nil {
		t.Fatalf("plan after cleanup (state should be unlocked): %v", err)
	}
	if what, _ := r.Cleanup(ctx, mod, be, host); what != "the state is not locked" {
		t.Errorf("second cleanup: %q", what)
	}
}

// TestAStepWaitsForALockAnotherHolds: a scheduled check, a preview or a
// colleague's terraform plan holding the state lock makes an apply wait
// for it (-lock-timeout, Runner.LockTimeout), not fail at once with
// "Error acquiring the state lock" (issue 49); the wait is bounded.
func TestAStepWaitsForALockAnotherHolds(t *testing.T) {
	needKube(t)
	for bin, path := range binaries(t) {
		t.Run(bin, func(t *testing.T) {
			ctx := context.Background()
			ns := namespace(t)
			var out bytes.Buffer
			r := newRunner(t, path, ns, &out)
			dir := filepath.Join(t.TempDir(), "src")
			write(t, filepath.Join(dir, "main.tf"), `resource "terraform_data" "x" { input = "v" }`)
			mod := step.Module{Dir: dir}
			be := step.Backend{Namespace: ns, SecretSuffix: "shared"}
			if err := r.Init(ctx, mod, be); err != nil {
				t.Fatalf("init: %v\n%s", err, out.String())
			}
			planFile := filepath.Join(t.TempDir(), "p")
			sum, err := r.Plan(ctx, mod, step.PlanOptions{PlanFile: planFile})
			if err != nil {
				t.Fatalf("plan: %v\n%s", err, out.String())
			}
			leases := kube.CoordinationV1().Leases(ns)
			hold := func() {
				info := `{"ID":"colleague-lock","Operation":"OperationTypePlan","Info":"","Who":"colleague@laptop","Version":"1.11.0","Created":"2026-12-07T00:00:00Z","Path":""}`
				l, err := leases.Get(ctx, "lock-tfstate-default-shared", metav1.GetOptions{})
				if err != nil {
					l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "lock-tfstate-default-shared", Namespace: ns,
						Labels: map[string]string{"tfstate": "true", "tfstateSecretSuffix": "shared", "tfstateWorkspace": "default", "app.kubernetes.io/managed-by": "terraform"}}}
				}
				holder := "colleague-lock"
				l.Spec.HolderIdentity = &holder
				if l.Annotations == nil {
					l.Annotations = map[string]string{}
				}
				l.Annotations["app.terraform.io/lock-info"] = info
				if l.ResourceVersion == "" {
					_, err = leases.Create(ctx, l, metav1.CreateOptions{})
				} else {
					_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			release := func() {
				l, err := leases.Get(ctx, "lock-tfstate-default-shared", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				l.Spec.HolderIdentity = nil
				delete(l.Annotations, "app.terraform.io/lock-info")
				if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}

			// Bounded: held for longer than the wait, the apply fails.
			hold()
			r.LockTimeout = 2 * time.Second
			start := time.Now()
			err = r.Apply(ctx, mod, planFile, sum.Digest)
			if err == nil || !strings.Contains(err.Error()+out.String(), "state lock") {
				t.Fatalf("apply with the lock held past its wait: %v; want terraform's state lock error\n%s", err, out.String())
			}
			if waited := time.Since(start); waited < 2*time.Second {
				t.Fatalf("the apply gave up after %s, before its lock timeout of 2s: it did not wait", waited)
			}

			// Released while it waits, the plan goes on, and its apply applies.
			out.Reset()
			r.LockTimeout = time.Minute
			go func() { time.Sleep(3 * time.Second); release() }()
			next := filepath.Join(t.TempDir(), "p2")
			sum, err = r.Plan(ctx, mod, step.PlanOptions{PlanFile: next})
			if err != nil {
				t.Fatalf("plan with the lock released 3s into its wait: %v\n%s", err, out.String())
			}
			if err := r.Apply(ctx, mod, next, sum.Digest); err != nil {
				t.Fatalf("apply after the wait: %v\n%s", err, out.String())
			}
		})
	}
}
