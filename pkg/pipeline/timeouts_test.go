package pipeline_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// TestStateRetryReachesTheApplyOnly: the manager's --state-retry is passed
// to the apply step (of an apply and of a destroy), the one step that saves
// a state, and to no other; unset, no step gets it (the step's default).
func TestStateRetryReachesTheApplyOnly(t *testing.T) {
	for _, typ := range []infrav1.RunType{infrav1.RunApply, infrav1.RunDestroy} {
		for _, retry := range []time.Duration{0, 90 * time.Second} {
			cfg := testutil.Config
			cfg.StateRetry = retry
			run := testutil.MakeRun("db-1", "team-a").Obj()
			p, err := pipeline.Build(engine.Request{Run: pipeline.Defaults(run, infrav1.EngineArgo, cfg), Config: cfg, Type: typ, Name: "db-1-1"})
			if err != nil {
				t.Fatal(err)
			}
			applies := 0
			for _, s := range append(slices.Clone(p.Steps), p.Cleanup) {
				got := slices.ContainsFunc(s.Args, func(a string) bool { return strings.HasPrefix(a, "--state-retry") })
				want := retry > 0 && s.Name == names.StepApply
				if s.Name == names.StepApply {
					applies++
				}
				if got != want {
					t.Errorf("%s run, --state-retry %s: step %s has it %v, want %v: %v", typ, retry, s.Name, got, want, s.Args)
				}
				if want && !slices.Contains(s.Args, "--state-retry=1m30s") {
					t.Errorf("%s run: the apply's args %v lack --state-retry=1m30s", typ, s.Args)
				}
			}
			if applies != 1 {
				t.Fatalf("%s run has %d apply steps, want 1", typ, applies)
			}
		}
	}
}
