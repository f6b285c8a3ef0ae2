package pipeline_test

import (
	"slices"
	"testing"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// TestCarriedSteps pins which steps one pod runs on the engines that fold
// the steps after apply into its pod, and that every name is a step of the
// pipeline (cleanup included).
func TestCarriedSteps(t *testing.T) {
	for _, tc := range []struct {
		typ  infrav1.RunType
		step string
		want []string
	}{
		{infrav1.RunApply, "apply", []string{"apply", "export-outputs", "cleanup"}},
		{infrav1.RunDestroy, "apply", []string{"apply", "cleanup"}},
		{infrav1.RunApply, "export-outputs", []string{"export-outputs", "cleanup"}},
		{infrav1.RunApply, "cleanup", []string{"cleanup"}},
		{infrav1.RunApply, "plan", []string{"plan"}},
	} {
		if got := pipeline.Carried(tc.step, tc.typ); !slices.Equal(got, tc.want) {
			t.Errorf("Carried(%s, %s) = %v, want %v", tc.step, tc.typ, got, tc.want)
		}
		cfg := testutil.Config
		p, err := pipeline.Build(engine.Request{Run: pipeline.Defaults(testutil.MakeRun("db", "team-a").Obj(), infrav1.EngineTekton, cfg), Config: cfg, Type: tc.typ, Name: "db-1-1"})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range p.CarriedSteps(tc.step) {
			got = append(got, s.Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("CarriedSteps(%s) of a %s = %v, want %v", tc.step, tc.typ, got, tc.want)
		}
	}
}
