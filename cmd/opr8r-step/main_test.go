package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opr8r/opr8r/pkg/inputs"
)

// TestFailureSummaryGoesToTerminationLog runs the real binary's entry point
// with real terraform on a failing module (a custom, local backend, so no
// API server is needed) and checks the summary Argo and Tekton will show.
func TestFailureSummaryGoesToTerminationLog(t *testing.T) {
	dir := t.TempDir()
	rc := filepath.Join(dir, "terraformrc")
	if err := os.WriteFile(rc, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TF_CLI_CONFIG_FILE", rc)
	mod := filepath.Join(dir, "src")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(mod, "main.tf"), `variable "n" { type = number }`+"\n")
	mustWrite(t, filepath.Join(dir, "backend.hcl"), `path = "`+filepath.Join(dir, "state.tfstate")+`"`+"\n")
	mustWrite(t, filepath.Join(dir, "vars.json"), `{"n": "not a number"}`)
	envSecret := filepath.Join(dir, "aws-secret")
	mustWrite(t, envSecret, "AWS-SECRET-MARKER-0c8e\n")
	termLog := filepath.Join(dir, "termination-log")

	var out bytes.Buffer
	common := []string{"--module-dir=" + mod, "--backend=local", "--backend-config-file=" + filepath.Join(dir, "backend.hcl"), "--termination-log=" + termLog, "--env-file=AWS_SECRET_ACCESS_KEY=" + envSecret}
	if code := run(append([]string{"init"}, common...), &out); code != 0 {
		t.Fatalf("init exited %d:\n%s", code, out.String())
	}
	code := run(append([]string{"plan", "--plan-file=" + filepath.Join(dir, "p"), "--vars-file=" + filepath.Join(dir, "vars.json"), "--results-dir=" + filepath.Join(dir, "results")}, common...), &out)
	if code != 1 {
		t.Fatalf("plan exited %d, want 1:\n%s", code, out.String())
	}
	msg, err := os.ReadFile(termLog)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(msg), "Error: Invalid value for input variable") {
		t.Errorf("termination log = %q, want terraform's diagnostic", msg)
	}
	if strings.Contains(out.String()+string(msg), "AWS-SECRET-MARKER") {
		t.Errorf("the env-file secret leaked into the output")
	}
}

func mustWrite(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSecretsNamespace: without --namespace or a backend namespace the step
// writes Secrets to its pod's namespace, read from the service account
// mount. (The e2e cluster found this path misspelt: Tekton's plan step then
// wrote its plan Secret with no namespace and was refused.)
func TestSecretsNamespace(t *testing.T) {
	f := filepath.Join(t.TempDir(), "namespace")
	mustWrite(t, f, "team-a\n")
	old := serviceAccountNamespaceFile
	serviceAccountNamespaceFile = f
	t.Cleanup(func() { serviceAccountNamespaceFile = old })
	for _, c := range []struct{ flag, backend, want string }{
		{"", "", "team-a"},
		{"", "state-ns", "state-ns"},
		{"explicit", "state-ns", "explicit"},
	} {
		if got := secretsNamespace(c.flag, c.backend); got != c.want {
			t.Errorf("secretsNamespace(%q, %q) = %q, want %q", c.flag, c.backend, got, c.want)
		}
	}
	if want := "/var/run/secrets/kubernetes.io/serviceaccount/namespace"; old != want {
		t.Errorf("service account namespace file = %q, want %q", old, want)
	}
}

// TestPluginCacheDirIsCreated: the translators point TF_PLUGIN_CACHE_DIR at
// the (initially empty) workspace volume; terraform must not warn about it.
func TestPluginCacheDirIsCreated(t *testing.T) {
	dir := t.TempDir()
	rc := filepath.Join(dir, "terraformrc")
	mustWrite(t, rc, "")
	t.Setenv("TF_CLI_CONFIG_FILE", rc)
	cache := filepath.Join(dir, "workspace", ".plugin-cache")
	t.Setenv("TF_PLUGIN_CACHE_DIR", cache)
	mod := filepath.Join(dir, "src")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(mod, "main.tf"), `output "x" { value = 1 }`+"\n")
	mustWrite(t, filepath.Join(dir, "backend.hcl"), `path = "`+filepath.Join(dir, "state.tfstate")+`"`+"\n")
	var out bytes.Buffer
	if code := run([]string{"init", "--module-dir=" + mod, "--backend=local", "--backend-config-file=" + filepath.Join(dir, "backend.hcl")}, &out); code != 0 {
		t.Fatalf("init exited %d:\n%s", code, out.String())
	}
	if st, err := os.Stat(cache); err != nil || !st.IsDir() {
		t.Fatalf("plugin cache dir not created: %v", err)
	}
	if strings.Contains(out.String(), "plugin cache dir") {
		t.Fatalf("terraform warned about the plugin cache:\n%s", out.String())
	}
}

// TestDestroySubcommandDestroys runs `opr8r-step destroy` for real: apply a
// module with a local backend, then destroy it; the state holds nothing
// after. (The subcommand was matched as "o.destroy" and could never run.)
func TestDestroySubcommandDestroys(t *testing.T) {
	dir := t.TempDir()
	rc := filepath.Join(dir, "terraformrc")
	mustWrite(t, rc, "")
	t.Setenv("TF_CLI_CONFIG_FILE", rc)
	mod := filepath.Join(dir, "src")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(mod, "main.tf"), `resource "terraform_data" "x" { input = "v" }`+"\n")
	state := filepath.Join(dir, "state.tfstate")
	mustWrite(t, filepath.Join(dir, "backend.hcl"), `path = "`+state+`"`+"\n")
	var out bytes.Buffer
	common := []string{"--module-dir=" + mod, "--backend=local", "--backend-config-file=" + filepath.Join(dir, "backend.hcl"), "--termination-log=" + filepath.Join(dir, "tl")}
	plan := filepath.Join(dir, "p")
	results := filepath.Join(dir, "results")
	for _, args := range [][]string{
		append([]string{"init"}, common...),
		append([]string{"plan", "--plan-file=" + plan, "--results-dir=" + results}, common...),
	} {
		if code := run(args, &out); code != 0 {
			t.Fatalf("%s exited %d:\n%s", args[0], code, out.String())
		}
	}
	digest, err := os.ReadFile(filepath.Join(results, "digest"))
	if err != nil {
		t.Fatal(err)
	}
	if code := run(append([]string{"apply", "--plan-file=" + plan, "--approved-digest=" + string(digest)}, common...), &out); code != 0 {
		t.Fatalf("apply exited %d:\n%s", code, out.String())
	}
	if b, _ := os.ReadFile(state); !strings.Contains(string(b), "terraform_data") {
		t.Fatalf("apply left no resource in the state:\n%s", b)
	}
	out.Reset()
	if code := run(append([]string{"destroy", "--plan-file=" + plan}, common...), &out); code != 0 {
		t.Fatalf("destroy exited %d:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "Resources: 0 added, 0 changed, 1 destroyed.") {
		t.Fatalf("destroy output:\n%s", out.String())
	}
	if b, _ := os.ReadFile(state); strings.Contains(string(b), `"type": "terraform_data"`) {
		t.Fatalf("the state still holds the resource:\n%s", b)
	}
}

// TestResultsFileHoldsEveryResult: --results-file (a Job's termination log)
// gets the step's results as one JSON object.
func TestResultsFileHoldsEveryResult(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "source")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(src, "main.tf"), "output \"x\" { value = 1 }\n")
	tl := filepath.Join(dir, "termination-log")
	mustWrite(t, tl, "") // the kubelet's empty file
	var out bytes.Buffer
	if code := run([]string{"clone", "--source=dir", "--from=" + src, "--dest=" + filepath.Join(dir, "src"), "--results-file=" + tl, "--termination-log=" + tl}, &out); code != 0 {
		t.Fatalf("clone exited %d:\n%s", code, out.String())
	}
	b, err := os.ReadFile(tl)
	if err != nil {
		t.Fatal(err)
	}
	var res map[string]string
	if err := json.Unmarshal(b, &res); err != nil || !strings.HasPrefix(res["commit"], "sha256:") || len(res) != 1 {
		t.Fatalf("results file = %q (%v), want the source's digest as the commit result, as JSON", b, err)
	}
}

// TestCloneReadsInputsFromTheNamedVariable: --inputs-env names the variable
// that carries the run's inputs; clone writes the files and vars.json.
func TestCloneReadsInputsFromTheNamedVariable(t *testing.T) {
	dir := t.TempDir()
	enc, err := inputs.Encode(inputs.Inputs{Vars: `{"n":1}`, Files: map[string]string{"main.tf": "output \"x\" { value = 1 }\n"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPR8R_INPUTS_TEST", enc)
	varsOut := filepath.Join(dir, ".opr8r", "vars.json")
	var out bytes.Buffer
	if code := run([]string{"clone", "--source=inline", "--inputs-env=OPR8R_INPUTS_TEST", "--vars-out=" + varsOut, "--dest=" + filepath.Join(dir, "src"),
		"--results-dir=" + filepath.Join(dir, "results"), "--termination-log=" + filepath.Join(dir, "tl")}, &out); code != 0 {
		t.Fatalf("clone exited %d:\n%s", code, out.String())
	}
	if b, err := os.ReadFile(varsOut); err != nil || string(b) != `{"n":1}` {
		t.Fatalf("vars.json = %q (%v)", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "src", "main.tf")); err != nil {
		t.Fatal(err)
	}
}

// TestInstallSaysWhatItDid: install copies the binary and prints a line,
// the log a dashboard shows first of a pod (the Tekton Dashboard selects
// the first step, this one, when a PipelineRun opens).
func TestInstallSaysWhatItDid(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "bin")
	var out bytes.Buffer
	if code := run([]string{"install", "--dest=" + dest}, &out); code != 0 {
		t.Fatalf("install exited %d:\n%s", code, out.String())
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(self)
	got, err := os.ReadFile(filepath.Join(dest, "opr8r-step"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("install did not copy the binary whole (%d of %d bytes): %v", len(got), len(want), err)
	}
	if line := out.String(); !strings.HasPrefix(line, "opr8r-step: installed "+filepath.Join(dest, "opr8r-step")+" (") {
		t.Errorf("install printed %q", line)
	}
}
