package tekton_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines/tekton"
	"github.com/opr8r/opr8r/engines/tekton/tektontest"
	"github.com/opr8r/opr8r/pkg/results"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// TestSlimStatusObservesTheSame: the PipelineRun and TaskRuns that Tekton
// leaves for a finished run (every status field it writes), an applied run
// and a failed plan: observing the slimmed copies the cache keeps gives
// exactly what observing the whole objects gives, and the slimmed copies
// are a small part of the whole.
func TestSlimStatusObservesTheSame(t *testing.T) {
	at := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	plan := results.Plan{HasChanges: true, Add: 1, Digest: "sha256:ab12", Inputs: "sha256:in"}.Values()
	plan["commit"] = "0123456789abcdef0123456789abcdef01234567"
	cases := map[string]struct {
		exit    map[string]int32
		tasks   []string
		skipped []string
	}{
		"applied":     {tasks: []string{"plan", "apply", "export-outputs", "cleanup"}},
		"no changes":  {tasks: []string{"plan", "cleanup"}, skipped: []string{"apply", "export-outputs"}},
		"plan failed": {tasks: []string{"plan", "cleanup"}, exit: map[string]int32{"plan": 1}, skipped: []string{"apply", "export-outputs"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pr := build(t, testutil.MakeRun("net", "ns").Engine(infrav1.EngineTekton).Auto().Obj(), infrav1.RunApply)
			var trs []*tektonv1.TaskRun
			for _, task := range tc.tasks {
				res := map[string]string{}
				if task == "plan" {
					res = plan
				}
				trs = append(trs, tektontest.FinishedTaskRun(pr, task, at, tc.exit, res))
			}
			pr.Status = tektontest.FinishedStatus(pr, at, trs, tc.skipped...)
			whole := observe(t, pr, trs)

			slimPR := pr.DeepCopy()
			if !tekton.New().SlimForCache(slimPR) {
				t.Fatal("a PipelineRun is the Tekton engine's to slim")
			}
			var slimTRs []*tektonv1.TaskRun
			before, after := size(t, pr.Status), size(t, slimPR.Status)
			for _, tr := range trs {
				s := tr.DeepCopy()
				tekton.New().SlimForCache(s)
				slimTRs = append(slimTRs, s)
				before, after = before+size(t, tr.Status), after+size(t, s.Status)
			}
			if diff := cmp.Diff(whole, observe(t, slimPR, slimTRs)); diff != "" {
				t.Errorf("observing the slimmed objects differs (-whole +slim):\n%s", diff)
			}
			if after*5 > before {
				t.Errorf("slimmed statuses are %d of %d bytes; want under a fifth", after, before)
			}
			t.Logf("statuses: %d bytes whole, %d slimmed", before, after)
		})
	}
}

func observe(t *testing.T, pr *tektonv1.PipelineRun, trs []*tektonv1.TaskRun) any {
	t.Helper()
	var related []client.Object
	for _, tr := range trs {
		related = append(related, tr)
	}
	p, err := tekton.New().Observe(pr, related, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func size(t *testing.T, v any) int {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}
