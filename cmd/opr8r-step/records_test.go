package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/opr8r/opr8r/pkg/records"
)

// TestStepsKeepLogsWithoutSecrets is the leak scan of the records: every
// step run through this binary's entry point, with real terraform, keeps
// its log, and no secret the step knows (a terraform.env value, a
// varsFrom value that a resource prints without marking it sensitive) is
// in any kept log, readable plan or JSON plan (masked), although
// terraform saw them: only the plan as JSON in clear, a record of its own
// kept in a Secret, holds the varsFrom value. The logs and the plans made
// for people are TerraformRunRecords owned by the TerraformRun; the plan
// in clear is the only record in a Secret.
func TestStepsKeepLogsWithoutSecrets(t *testing.T) {
	const ns = "leak"
	kubeconfig, cs := startAPIServer(t, ns)
	ctx := context.Background()
	installRecordCRD(t, kubeconfig)
	dir := t.TempDir()

	const envMarker, varMarker = "ENV-SECRET-MARKER-7a1c", "VARSFROM-SECRET-MARKER-3e9d"
	rc := filepath.Join(dir, "terraformrc")
	mustWrite(t, rc, "")
	t.Setenv("TF_CLI_CONFIG_FILE", rc)
	src := filepath.Join(dir, "source")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(src, "main.tf"), `
variable "db_password" { type = string }
resource "terraform_data" "leaky" { input = "password is ${var.db_password}" }
output "env_seen" { value = length(var.db_password) }
`)
	mustWrite(t, filepath.Join(dir, "backend.hcl"), `path = "`+filepath.Join(dir, "state.tfstate")+`"`+"\n")
	mustWrite(t, filepath.Join(dir, "env-secret"), envMarker+"\n")
	varsDir := filepath.Join(dir, "vars")
	if err := os.MkdirAll(varsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(varsDir, "db_password"), varMarker)
	mod := filepath.Join(dir, "src")
	recordFlags := []string{"--records-run=leaky", "--records-run-uid=uid-leaky", "--records-run-id=leaky-1", "--namespace=" + ns, "--kubeconfig=" + kubeconfig,
		"--termination-log=" + filepath.Join(dir, "termlog")}
	tf := []string{"--module-dir=" + mod, "--backend=local", "--backend-config-file=" + filepath.Join(dir, "backend.hcl"), "--env-file=TF_VAR_unused=" + filepath.Join(dir, "env-secret")}
	planFile := filepath.Join(dir, "tfplan")
	steps := [][]string{
		{"clone", "--source=dir", "--from=" + src, "--dest=" + mod, "--results-dir=" + filepath.Join(dir, "r")},
		append([]string{"init"}, tf...),
		append([]string{"plan", "--plan-file=" + planFile, "--secret-vars-dir=" + varsDir, "--results-dir=" + filepath.Join(dir, "r")}, tf...),
	}
	var out bytes.Buffer
	for _, args := range steps {
		if code := run(append(args, recordFlags...), &out); code != 0 {
			t.Fatalf("%s exited %d:\n%s", args[0], code, out.String())
		}
	}
	digest, err := os.ReadFile(filepath.Join(dir, "r", "digest"))
	if err != nil {
		t.Fatal(err)
	}
	if code := run(append(append([]string{"apply", "--plan-file=" + planFile, "--approved-digest=" + string(digest)}, tf...), recordFlags...), &out); code != 0 {
		t.Fatalf("apply exited %d:\n%s", code, out.String())
	}
	// A step that fails keeps its log too, with its failure line.
	if code := run(append(append([]string{"apply", "--plan-file=" + planFile, "--approved-digest=" + string(digest)}, tf...), append(recordFlags[:2:2], "--records-run-id=leaky-2", recordFlags[3], recordFlags[4], recordFlags[5])...), &out); code == 0 {
		t.Fatal("a second apply of one plan succeeded")
	}

	if strings.Contains(out.String(), "kept in a Secret") {
		t.Errorf("a record fell back to a Secret:\n%s", out.String())
	}
	store := records.NewRouter(cs, nil)
	recs, err := store.List(ctx, ns, "leaky")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	leaks := 0
	for _, r := range recs {
		got = append(got, r.RunID+"/"+r.Step+"/"+string(r.Kind))
		b, err := store.Get(ctx, r.Key)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case r.Kind == records.KindPlanJSONSensitive:
			if !bytes.Contains(b, []byte(varMarker)) {
				t.Errorf("the JSON plan in clear does not hold the varsFrom value: the scan would prove nothing")
			}
		case bytes.Contains(b, []byte(envMarker)) || bytes.Contains(b, []byte(varMarker)):
			leaks++
			t.Errorf("a secret is in clear in the kept %s", r.Key)
		}
	}
	want := "leaky-1/apply/log,leaky-1/clone/log,leaky-1/init/log,leaky-1/plan/log,leaky-1/plan/plan-sensitive.json,leaky-1/plan/plan.json,leaky-1/plan/plan.txt,leaky-2/apply/log"
	if strings.Join(got, ",") != want {
		t.Fatalf("records kept: %s\nwant: %s", strings.Join(got, ","), want)
	}
	// Where each kind is: the plan in clear in a Secret only, the rest
	// in TerraformRunRecords owned by the TerraformRun.
	inSecrets, err := (&records.SecretStore{Client: cs}).List(ctx, ns, "leaky")
	if err != nil || len(inSecrets) != 1 || inSecrets[0].Kind != records.KindPlanJSONSensitive {
		t.Errorf("records in Secrets: %+v, %v; want plan-sensitive.json only", inSecrets, err)
	}
	inResources, err := (&records.ResourceStore{Client: cs}).List(ctx, ns, "leaky")
	if err != nil || len(inResources) != len(recs)-1 {
		t.Errorf("records in TerraformRunRecords: %+v, %v; want all but plan-sensitive.json", inResources, err)
	}
	for _, r := range inResources {
		if !records.InResource(r.Kind) {
			t.Errorf("%s is in a TerraformRunRecord", r.Key)
		}
	}
	objs, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/infra.opr8r.io/v1alpha1/namespaces", ns, "terraformrunrecords").DoRaw(ctx)
	if err != nil || !strings.Contains(string(objs), `"ownerReferences":[{"apiVersion":"infra.opr8r.io/v1alpha1","kind":"TerraformRun","name":"leaky","uid":"uid-leaky"}]`) {
		t.Errorf("the TerraformRunRecords are not owned by the TerraformRun: %v", err)
	}
	failed, _ := store.Get(ctx, records.Key{Namespace: ns, Run: "leaky", RunID: "leaky-2", Step: "apply", Kind: records.KindLog})
	if !strings.Contains(string(failed), "opr8r-step: apply failed: ") {
		t.Errorf("the failed step's kept log lacks its failure line:\n%s", failed)
	}
	plan, _ := store.Get(ctx, records.Key{Namespace: ns, Run: "leaky", RunID: "leaky-1", Step: "plan", Kind: records.KindLog})
	if !strings.Contains(string(plan), `password is ***`) {
		t.Errorf("the plan step's kept log does not show the redacted value:\n%s", plan)
	}
	t.Logf("%d records kept, %d leaks", len(recs), leaks)
}

// installRecordCRD installs the TerraformRunRecord CRD, which the steps
// keep their records in, in the API server of kubeconfig.
func installRecordCRD(t *testing.T, kubeconfig string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join("..", "..", "config", "crd", "bases", "infra.opr8r.io_terraformrunrecords.yaml")}, ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatal(err)
	}
}
