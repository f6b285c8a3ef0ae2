package step_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/pkg/step"
)

// bigModule plans about 5 MB of readable plan: a few resources whose
// inputs are long multi-line strings, which terraform prints line by line.
const bigModule = `
variable "secret" {
  type = string
}
variable "n" {
  type = number
}
resource "terraform_data" "big" {
  count = var.n
  input = join("\n", flatten([for i in range(1000) : [for j in range(22) : "line ${i}-${j} of resource ${count.index}: the quick brown fox"]]))
}
resource "terraform_data" "leaky" {
  input = "not marked sensitive: ${var.secret}"
}
`

// The plan step keeps the readable plan whole (not truncated like the plan
// Secret) and the plan as JSON, and every step keeps its redacted log, as
// records of the TerraformRun that outlive the run's pods; with real
// terraform and OpenTofu. Through records.Router, as opr8r-step keeps them:
// the log, the readable plan and the masked JSON plan in
// TerraformRunRecords, the JSON plan in clear in a Secret.
func TestPlanKeepsRecords(t *testing.T) {
	needKube(t)
	for name, bin := range binaries(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ns := namespace(t)
			var out bytes.Buffer
			capture := &step.LogCapture{}
			r := newRunner(t, bin, ns, &out)
			r.Out = &teeBuf{&out, capture}
			owner := &metav1.OwnerReference{APIVersion: "infra.opr8r.io/v1alpha1", Kind: "TerraformRun", Name: "big", UID: "uid-big"}
			store := records.NewRouter(kube, owner)
			store.Warn = func(msg string) { t.Errorf("a record fell back: %s", msg) }
			r.Records, r.RecordKey = store, records.Key{Namespace: ns, Run: "big", RunID: "big-1", Step: "plan"}
			from := t.TempDir()
			write(t, filepath.Join(from, "main.tf"), bigModule)
			dir := filepath.Join(t.TempDir(), "src")
			if err := r.Clone(ctx, step.CloneOptions{Source: "dir", From: from, Dest: dir}); err != nil {
				t.Fatal(err)
			}
			mod := step.Module{Dir: dir, Workspace: "default"}
			if err := r.Init(ctx, mod, step.Backend{Type: "kubernetes", Namespace: ns, SecretSuffix: "big"}); err != nil {
				t.Fatalf("init: %v\n%s", err, out.String())
			}
			// 5 MB with terraform; OpenTofu plans the same module at 2 MB
			// (the test's time goes into terraform printing the plan).
			n := map[string]int{"terraform": 5, "tofu": 2}[name]
			vars := filepath.Join(t.TempDir(), "vars.json")
			write(t, vars, fmt.Sprintf(`{"n": %d}`, n))
			sum, err := r.Plan(ctx, mod, withSecretVars(t, step.PlanOptions{PlanFile: filepath.Join(filepath.Dir(dir), "tfplan"), VarsFile: vars, PlanSecret: "big-1-plan"}))
			if err != nil {
				t.Fatalf("plan: %v", err)
			}
			if err := r.KeepRecord(ctx, records.KindLog, capture.Bytes()); err != nil {
				t.Fatal(err)
			}
			text, err := store.Get(ctx, records.Key{Namespace: ns, Run: "big", RunID: "big-1", Step: "plan", Kind: records.KindPlanText})
			if err != nil {
				t.Fatal(err)
			}
			if len(text) < n<<20*4/5 || !strings.Contains(string(text), fmt.Sprintf("line 999-21 of resource %d", n-1)) || strings.Contains(string(text), "plan truncated") {
				t.Fatalf("the kept readable plan is %d bytes and lacks the last line of the last resource: not whole", len(text))
			}
			t.Logf("%s: the readable plan (+%d) is %d bytes, kept whole", name, sum.Add, len(text))
			sec, err := kube.CoreV1().Secrets(ns).Get(ctx, "big-1-plan", metav1.GetOptions{})
			if err != nil || !strings.Contains(string(sec.Data["plan.txt"]), "plan truncated") {
				t.Fatalf("the plan Secret (1 MiB at most) should be truncated: %v", err)
			}
			js, err := store.Get(ctx, records.Key{Namespace: ns, Run: "big", RunID: "big-1", Step: "plan", Kind: records.KindPlanJSON})
			if err != nil || !bytes.HasPrefix(js, []byte("{")) || !bytes.Contains(js, []byte(`"resource_changes"`)) {
				t.Fatalf("the kept JSON plan (%d bytes, %v) is not terraform's", len(js), err)
			}
			log, err := store.Get(ctx, records.Key{Namespace: ns, Run: "big", RunID: "big-1", Step: "plan", Kind: records.KindLog})
			if err != nil || !strings.Contains(string(log), fmt.Sprintf("opr8r-step: plan: +%d ~0 -0", n+1)) {
				t.Fatalf("the kept log lacks the plan's summary line: %v", err)
			}
			for what, b := range map[string][]byte{"log": log, "readable plan": text} {
				if bytes.Contains(b, []byte(sensitiveOut)) {
					t.Fatalf("the kept %s holds the varsFrom secret in clear", what)
				}
			}
			if !bytes.Contains(text, []byte("not marked sensitive: ***")) {
				t.Fatal("the kept readable plan is not redacted like the log")
			}
			// Where each kind is kept.
			inResources, err := (&records.ResourceStore{Client: kube}).List(ctx, ns, "big")
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, rec := range inResources {
				kinds = append(kinds, string(rec.Kind))
			}
			if strings.Join(kinds, ",") != "log,plan.json,plan.txt" {
				t.Fatalf("in TerraformRunRecords: %v; want log, plan.json, plan.txt", kinds)
			}
			inSecrets, err := (&records.SecretStore{Client: kube}).List(ctx, ns, "big")
			if err != nil || len(inSecrets) != 1 || inSecrets[0].Kind != records.KindPlanJSONSensitive {
				t.Fatalf("in Secrets: %+v, %v; want plan-sensitive.json only", inSecrets, err)
			}
			clear, err := store.Get(ctx, records.Key{Namespace: ns, Run: "big", RunID: "big-1", Step: "plan", Kind: records.KindPlanJSONSensitive})
			if err != nil || !bytes.Contains(clear, []byte(`"resource_changes"`)) {
				t.Fatalf("the kept JSON plan in clear (%d bytes, %v) is not terraform's", len(clear), err)
			}
		})
	}
}

type teeBuf struct {
	a *bytes.Buffer
	b *step.LogCapture
}

func (t *teeBuf) Write(p []byte) (int, error) { t.a.Write(p); return t.b.Write(p) }
