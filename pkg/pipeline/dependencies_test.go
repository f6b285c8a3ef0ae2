package pipeline_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// TestDependencies: the outputs a run takes from its dependencies reach
// only the plan step (apply runs the saved plan), of every run type that
// plans: a dependency in the run's namespace as its outputs Secret's
// selected keys, mounted optionally and named after the variables; one in
// another namespace as a reference the step reads through the API. An
// ordering-only dependency adds nothing.
func TestDependencies(t *testing.T) {
	run := testutil.MakeRun("app", "team-a").Obj()
	deps := []engine.Dependency{
		{Name: "network", Namespace: "team-a", SecretName: "network-outputs", Vars: []engine.DependencyVar{{Output: "vpc_id", Variable: "vpc"}}},
		{Name: "dns", Namespace: "team-a"},
		{Name: "db", Namespace: "platform", SecretName: "db-outputs", Vars: []engine.DependencyVar{{Output: "password", Variable: "db_password", Sensitive: true}}},
	}
	for _, typ := range []infrav1.RunType{infrav1.RunApply, infrav1.RunDestroy, infrav1.RunDrift, infrav1.RunPlan} {
		t.Run(string(typ), func(t *testing.T) {
			p, err := pipeline.Build(engine.Request{Run: pipeline.Defaults(run, infrav1.EngineArgo, testutil.Config), Config: testutil.Config, Type: typ, Name: "app-1", Dependencies: deps})
			if err != nil {
				t.Fatal(err)
			}
			plan, _ := p.StepNamed(names.StepPlan)
			var got []string
			for _, a := range plan.Args {
				if strings.HasPrefix(a, "--dependency-var=") {
					got = append(got, a)
				}
			}
			want := []string{
				"--dependency-var=vpc,run=network,output=vpc_id,file=/opr8r/deps/0/vpc",
				"--dependency-var=db_password,run=platform/db,output=password,secret=platform/db-outputs,sensitive",
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("plan's dependency args (-want +got):\n%s", diff)
			}
			var vols []corev1.Volume
			for _, v := range p.Volumes {
				if strings.HasPrefix(v.Name, "dep-") {
					vols = append(vols, v)
				}
			}
			if len(vols) != 1 || vols[0].Name != "dep-0" || vols[0].Secret.SecretName != "network-outputs" || !*vols[0].Secret.Optional ||
				!slices.Equal(vols[0].Secret.Items, []corev1.KeyToPath{{Key: "vpc_id", Path: "vpc"}}) {
				t.Errorf("dependency volumes = %+v, want only network-outputs' vpc_id as vpc, optional", vols)
			}
			for _, s := range append(p.Steps, p.Cleanup) {
				mounts := slices.ContainsFunc(s.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "dep-0" })
				if mounts != (s.Name == names.StepPlan) {
					t.Errorf("step %s mounts the dependency's outputs: %v", s.Name, mounts)
				}
			}
		})
	}
}
