package plugin_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/records"
)

// TestKeptState: kubectl tfrun kept-state prints a state a run kept because
// its backend did not take it, whole (over 1 MiB: in several Secrets), the
// oldest by default or the one --run names; one the TerraformRun does not
// own is never printed.
func TestKeptState(t *testing.T) {
	ns := seed(t)
	ctx := context.Background()
	owner := get(t, ns, "waiting")
	steps := records.NewRouter(cs, &metav1.OwnerReference{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: owner.Name, UID: owner.UID})
	if _, _, err := tfrun(ns, "kept-state", "waiting"); err == nil || !strings.Contains(err.Error(), "keeps no state") {
		t.Fatalf("kept-state with none kept: %v", err)
	}
	var big bytes.Buffer
	big.WriteString(`{"version":4,"serial":3,"outputs":{"blob":{"value":"`)
	for i := 0; big.Len() < 3<<19; i++ {
		big.WriteString(strings.Repeat("x", 7) + string(rune('a'+i%26)))
	}
	big.WriteString(`"}}}`)
	planted := records.NewRouter(cs, &metav1.OwnerReference{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: owner.Name, UID: "someone-else"})
	for _, p := range []struct {
		store records.Store
		runID string
		data  []byte
	}{{planted, "waiting-abc-0", []byte(`{"planted":true}`)}, {steps, "waiting-abc-1", big.Bytes()}, {steps, "waiting-abc-2", []byte(`{"serial":4}`)}} {
		if err := p.store.Put(ctx, records.Key{Namespace: ns, Run: "waiting", RunID: p.runID, Step: "apply", Kind: records.KindErroredState}, p.data); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, err := tfrun(ns, "kept-state", "waiting")
	if err != nil || out != big.String() || !strings.Contains(errOut, "the state run waiting-abc-1 of waiting kept") || !strings.Contains(errOut, "2 kept in all") {
		t.Fatalf("kept-state: %d bytes, %q, %v; want the oldest the TerraformRun owns, whole (%d bytes)", len(out), errOut, err, big.Len())
	}
	if out, _, err := tfrun(ns, "kept-state", "waiting", "--run", "waiting-abc-2"); err != nil || out != `{"serial":4}` {
		t.Fatalf("kept-state --run waiting-abc-2: %q, %v", out, err)
	}
	if _, _, err := tfrun(ns, "kept-state", "waiting", "--run", "waiting-abc-0"); err == nil {
		t.Fatal("kept-state printed a state the TerraformRun does not own")
	}
}
