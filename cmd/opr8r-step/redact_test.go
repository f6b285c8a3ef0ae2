package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/pkg/step"
)

// echoModule fails its plan with an error message that prints var.echo:
// what a module that echoes a value in a precondition or a validation
// prints, without marking it sensitive.
const echoModule = `
variable "echo" {
  type = list(string)
}
variable "db_password" {
  type    = string
  default = ""
}
resource "terraform_data" "echo" {
  lifecycle {
    precondition {
      condition     = length(var.echo) == 0
      error_message = "echo: ${join(" ", var.echo)}"
    }
  }
}
`

// startAPIServer starts a real API server for the steps' records and
// returns a kubeconfig for it and a client.
func startAPIServer(t *testing.T, ns string) (string, kubernetes.Interface) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with make test")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "step", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	mustWrite(t, kubeconfig, string(kc))
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, cs
}

// echoCase is one kind of secret a step can see: where it is put, and the
// step's flags that point at it.
type echoCase struct {
	// setup writes the secret in dir and returns the flags of every step
	// (init and plan) and of the plan step only.
	setup func(t *testing.T, dir, secret string) (all, plan []string)
	// clone echoes the secret in the clone step's error instead.
	clone bool
	// wantClear: the value is not a secret (a ConfigMap's): it must be
	// printed, which shows that the forms do reach the output.
	wantClear bool
}

// echoCases are every kind of secret a step can see.
var echoCases = map[string]echoCase{
	"varsFrom Secret": {setup: func(t *testing.T, dir, secret string) ([]string, []string) {
		mustWrite(t, filepath.Join(dir, "vars", "db_password"), secret+"\n")
		return nil, []string{"--secret-vars-dir=" + filepath.Join(dir, "vars")}
	}},
	"varsFrom ConfigMap (not a secret)": {wantClear: true, setup: func(t *testing.T, dir, secret string) ([]string, []string) {
		mustWrite(t, filepath.Join(dir, "vars", "db_password"), secret+"\n")
		return nil, []string{"--vars-dir=" + filepath.Join(dir, "vars")}
	}},
	"terraform.env": {setup: func(t *testing.T, dir, secret string) ([]string, []string) {
		mustWrite(t, filepath.Join(dir, "env", "token"), secret+"\n")
		return []string{"--env-file=SOME_TOKEN=" + filepath.Join(dir, "env", "token")}, nil
	}},
	"terraform.files": {setup: func(t *testing.T, dir, secret string) ([]string, []string) {
		mustWrite(t, filepath.Join(dir, "files", "credentials"), secret+"\n")
		return []string{"--secret-files=" + filepath.Join(dir, "files")}, nil
	}},
	"backend config": {setup: func(t *testing.T, dir, secret string) ([]string, []string) {
		// The local backend's workspace_dir is only read for workspaces
		// other than default: any string will do.
		mustWrite(t, filepath.Join(dir, "backend.hcl"), `path = "`+filepath.Join(dir, "state.tfstate")+`"`+"\nworkspace_dir = "+strconv.Quote(secret)+"\n")
		return nil, nil
	}},
	"git token": {clone: true, setup: func(t *testing.T, dir, secret string) ([]string, []string) {
		mustWrite(t, filepath.Join(dir, "git", "token"), secret+"\n")
		return []string{"--credentials-dir=" + filepath.Join(dir, "git")}, nil
	}},
}

// echoForms are the forms of a secret the echo prints: base64, URL-safe
// base64, and one of its lines.
func echoForms(t *testing.T, secret string) []string {
	t.Helper()
	std, url := base64.StdEncoding.EncodeToString([]byte(secret)), base64.URLEncoding.EncodeToString([]byte(secret))
	if std == url {
		t.Fatal("the secret's base64 has no + or /: the URL-safe form would prove nothing")
	}
	return []string{std, url, strings.Split(secret, "\n")[1]}
}

// TestEchoedSecretsAreRedacted runs the steps through this binary's entry
// point, with real terraform, for each kind of secret a step can see: a
// module prints the secret's base64, URL-safe base64 and one of its lines
// in its error (the clone step prints them in the URL it fails to fetch),
// each of them first once, as the summary takes the diagnostic's first
// line. None of them is in the failure summary (the termination log, which
// becomes the run's status) or in the step's kept log; the summary is one
// line, bounded, and says where the whole text is. A ConfigMap's values
// are not secrets: they are printed, which shows that the module does
// print the forms where the test looks for them.
func TestEchoedSecretsAreRedacted(t *testing.T) {
	const ns = "echo"
	kubeconfig, cs := startAPIServer(t, ns)
	rc := filepath.Join(t.TempDir(), "terraformrc")
	mustWrite(t, rc, "")
	t.Setenv("TF_CLI_CONFIG_FILE", rc)
	store := &records.SecretStore{Client: cs}
	i := 0
	for name, tc := range echoCases {
		i++
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			secret := ">>>???" + strconv.Itoa(i) + "-tok\nsecond-line-" + strconv.Itoa(i) + "-k7"
			forms := echoForms(t, secret)
			run, stepName := "echo-"+strconv.Itoa(i), "plan"
			if tc.clone {
				stepName = "clone"
			}
			recordFlags := func(id string) []string {
				return []string{"--records-run=" + run, "--records-run-id=" + id, "--namespace=" + ns, "--kubeconfig=" + kubeconfig,
					"--termination-log=" + filepath.Join(dir, "termlog")}
			}
			e := prepareEcho(t, dir, secret, tc, recordFlags(run+"-0"))
			for k := range forms {
				id := run + "-" + strconv.Itoa(k+1)
				out := e.run(t, append(append([]string{}, forms[k:]...), forms[:k]...), recordFlags(id))
				summary, _ := os.ReadFile(filepath.Join(dir, "termlog"))
				log, err := store.Get(context.Background(), records.Key{Namespace: ns, Run: run, RunID: id, Step: stepName, Kind: records.KindLog})
				if err != nil {
					t.Fatalf("the %s step's log record: %v", stepName, err)
				}
				checkSummary(t, string(summary), "kubectl tfrun logs "+run+" --run "+id+" --step "+stepName)
				checkEchoed(t, forms[k], map[string]string{"failure summary": string(summary)}, tc.wantClear)
				checkEchoed(t, strings.Join(forms, " "), map[string]string{"kept log": string(log), "console": out}, tc.wantClear)
			}
		})
	}
}

// checkEchoed: the forms (separated by spaces) are in none of the texts,
// or, for a value that is not a secret, in all of them.
func checkEchoed(t *testing.T, forms string, texts map[string]string, wantClear bool) {
	t.Helper()
	for what, text := range texts {
		for _, f := range strings.Fields(forms) {
			if strings.Contains(text, f) != wantClear {
				t.Errorf("the %s holds %q: %v, want %v:\n%s", what, f, !wantClear, wantClear, text)
			}
		}
		if !wantClear && !strings.Contains(text, step.Redacted) {
			t.Errorf("the %s shows nothing redacted:\n%s", what, text)
		}
	}
}

// echoRun is one case's steps, ready to print the forms.
type echoRun struct {
	dir            string
	clone          bool
	flags          []string // every step's
	planOnly       []string
	moduleDir, tfv string
}

// prepareEcho writes the module and the case's secret, and runs init
// (terraform cases).
func prepareEcho(t *testing.T, dir, secret string, tc echoCase, recordFlags []string) *echoRun {
	t.Helper()
	e := &echoRun{dir: dir, clone: tc.clone, moduleDir: filepath.Join(dir, "src"), tfv: filepath.Join(dir, "vars.json")}
	mustWrite(t, filepath.Join(e.moduleDir, "main.tf"), echoModule)
	mustWrite(t, filepath.Join(dir, "backend.hcl"), `path = "`+filepath.Join(dir, "state.tfstate")+`"`+"\n")
	all, planOnly := tc.setup(t, dir, secret)
	e.planOnly = planOnly
	if tc.clone {
		e.flags = all
		return e
	}
	e.flags = append([]string{"--module-dir=" + e.moduleDir, "--backend=local", "--backend-config-file=" + filepath.Join(dir, "backend.hcl")}, all...)
	var out bytes.Buffer
	if code := run(append(append([]string{"init"}, e.flags...), recordFlags...), &out); code != 0 {
		t.Fatalf("init exited %d:\n%s", code, out.String())
	}
	return e
}

// run runs the step that prints the forms, in that order: clone to a URL
// made of them, or a plan whose error prints them. It returns what the
// step printed.
func (e *echoRun) run(t *testing.T, forms, recordFlags []string) string {
	t.Helper()
	var out bytes.Buffer
	args := []string{"clone", "--source=git", "--url=http://127.0.0.1:1/" + strings.Join(forms, "/"), "--ref=main", "--dest=" + filepath.Join(t.TempDir(), "checkout")}
	if !e.clone {
		echo, _ := json.Marshal(map[string][]string{"echo": forms})
		mustWrite(t, e.tfv, string(echo))
		args = []string{"plan", "--plan-file=" + filepath.Join(e.dir, "tfplan"), "--vars-file=" + e.tfv, "--results-dir=" + filepath.Join(e.dir, "r")}
		args = append(args, e.planOnly...)
	}
	args = append(append(args, e.flags...), recordFlags...)
	if code := run(args, &out); code != 1 {
		t.Fatalf("%s exited %d, want 1:\n%s", args[0], code, out.String())
	}
	return out.String()
}

// checkSummary: one line, at most step.MaxFailureSummary characters,
// saying where the whole text is.
func checkSummary(t *testing.T, summary, where string) {
	t.Helper()
	if n := utf8.RuneCountInString(summary); n == 0 || n > step.MaxFailureSummary || strings.ContainsAny(summary, "\r\n") {
		t.Errorf("the failure summary is not one line of at most %d characters: %q", step.MaxFailureSummary, summary)
	}
	if !strings.HasSuffix(summary, "(whole text: "+where+")") {
		t.Errorf("the failure summary %q does not say where the whole text is (%s)", summary, where)
	}
}
