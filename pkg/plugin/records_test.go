package plugin_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/opr8r/opr8r/pkg/records"
)

// kubectl tfrun plan and logs read what the steps kept, after the run's
// pods and engine objects are gone: a 5 MB plan whole, and a step's log of
// an older run in the history (--run).
func TestPluginReadsKeptRecords(t *testing.T) {
	ns := seed(t)
	ctx := context.Background()
	store := &records.SecretStore{Client: cs}
	var plan bytes.Buffer
	for i := 0; plan.Len() < 5<<20; i++ {
		fmt.Fprintf(&plan, "  # terraform_data.item[%d] will be created\n  + resource \"terraform_data\" \"item\" { input = \"%x\" }\n", i, i*7919)
	}
	plan.WriteString("Plan: 1 to add, 0 to change, 0 to destroy. [the end]\n")
	put := func(runID, step string, kind records.Kind, b []byte) {
		t.Helper()
		if err := store.Put(ctx, records.Key{Namespace: ns, Run: "waiting", RunID: runID, Step: step, Kind: kind}, b); err != nil {
			t.Fatal(err)
		}
	}
	put("waiting-abc-1", "plan", records.KindPlanText, plan.Bytes())
	put("waiting-abc-1", "plan", records.KindPlanJSON, []byte(`{"format_version":"1.2","resource_changes":[]}`))
	if err := store.Put(ctx, records.Key{Namespace: ns, Run: "done", RunID: "done-1", Step: "plan", Kind: records.KindLog}, []byte("opr8r-step: plan: +0 ~0 -0 of done-1\n")); err != nil {
		t.Fatal(err)
	}

	out, _, err := tfrun(ns, "plan", "waiting")
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 5<<20 || !strings.HasSuffix(out, "[the end]\n") || !strings.HasPrefix(out, "# plan "+digest) {
		t.Fatalf("kubectl tfrun plan printed %d bytes, ending %q: want the whole 5 MB plan", len(out), out[max(0, len(out)-60):])
	}
	js, _, err := tfrun(ns, "plan", "waiting", "--json")
	if err != nil || !strings.Contains(js, `"format_version":"1.2"`) {
		t.Fatalf("plan --json = %q, %v", js, err)
	}

	logs, _, err := tfrun(ns, "logs", "done", "--run", "done-1", "--step", "plan")
	if err != nil || logs != "opr8r-step: plan: +0 ~0 -0 of done-1\n" {
		t.Fatalf("logs --run done-1 = %q, %v", logs, err)
	}
	_, _, err = tfrun(ns, "logs", "done", "--run", "done-2", "--step", "apply")
	if err == nil || !strings.Contains(err.Error(), "no log of step apply of run done-2 is kept") {
		t.Fatalf("a log never kept: err = %v", err)
	}
	if got := get(t, ns, "done").Annotations["infra.opr8r.io/records-request"]; !strings.HasPrefix(got, "done-2@") {
		t.Fatalf("the manager was not asked to bring run done-2's records back from an object store: annotation %q", got)
	}
	_, _, err = tfrun(ns, "plan", "done", "--run", "done-9")
	if err == nil || !strings.Contains(err.Error(), "has no run done-9 in its history") {
		t.Fatalf("a run not in the history: err = %v", err)
	}
	out, _, err = tfrun(ns, "plan", "done", "--run", "done-2")
	if err == nil || !strings.Contains(err.Error(), "the readable plan of run done-2 is gone") {
		t.Fatalf("a plan that was not kept: %q, err = %v", out, err)
	}
}
