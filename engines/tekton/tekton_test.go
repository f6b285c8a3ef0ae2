package tekton_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/opr8r/opr8r/pkg/names"

	"github.com/google/go-cmp/cmp"
	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines/tekton"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
)

func build(t *testing.T, run *infrav1.TerraformRun, typ infrav1.RunType, deps ...engine.Dependency) *tektonv1.PipelineRun {
	t.Helper()
	return buildWith(t, testutil.Config, run, typ, deps...)
}

// buildWith builds with an install's configuration of its own.
func buildWith(t *testing.T, cfg engine.Config, run *infrav1.TerraformRun, typ infrav1.RunType, deps ...engine.Dependency) *tektonv1.PipelineRun {
	t.Helper()
	eff := pipeline.Defaults(run, infrav1.EngineTekton, cfg)
	hash := pipeline.SpecHash(eff)
	obj, err := tekton.New().Build(engine.Request{Run: eff, Type: typ, Name: names.ChildName(run.Name, typ, 1), Number: 1, SpecHash: hash, Config: cfg, Dependencies: deps})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return obj.(*tektonv1.PipelineRun)
}

// validate runs Tekton's own defaulting and validation, as its admission
// webhook would.
func validate(pr *tektonv1.PipelineRun) error {
	c := pr.DeepCopy()
	ctx := context.Background()
	c.SetDefaults(ctx)
	if err := c.Validate(ctx); err != nil {
		return err
	}
	return nil
}

func TestGoldenPipelineRuns(t *testing.T) {
	for name, tc := range testutil.GoldenCases() {
		t.Run(name, func(t *testing.T) {
			pr := buildWith(t, testutil.GoldenConfig(name), tc.Run.Engine(infrav1.EngineTekton).Obj(), tc.Type, testutil.GoldenDeps(name)...)
			got, err := yaml.Marshal(pr)
			if err != nil {
				t.Fatal(err)
			}
			if err := validate(pr); err != nil {
				t.Fatalf("Tekton's Validate rejects the %s PipelineRun: %v", name, err)
			}
			testutil.Golden(t, name, got)
		})
	}
}

// TestValidatorIsLive shows the validation above can fail: a result
// reference to a task that does not exist is rejected.
func TestValidatorIsLive(t *testing.T) {
	pr := build(t, testutil.MakeRun("x", "ns").Engine(infrav1.EngineTekton).Obj(), infrav1.RunApply)
	pr.Spec.PipelineSpec.Tasks[1].Params[1].Value = *tektonv1.NewStructuredValues("$(tasks.nope.results.digest)")
	if err := validate(pr); err == nil {
		t.Fatal("Tekton's Validate accepted a reference to a missing task; the golden validation proves nothing")
	}
}

func TestPipelineRunShape(t *testing.T) {
	pr := build(t, testutil.MakeRun("x", "ns").Engine(infrav1.EngineTekton).Obj(), infrav1.RunApply)
	var names []string
	for _, pt := range pr.Spec.PipelineSpec.Tasks {
		names = append(names, pt.Name)
	}
	if diff := cmp.Diff([]string{"plan", "approve", "apply", "export-outputs"}, names); diff != "" {
		t.Errorf("tasks (-want +got):\n%s", diff)
	}
	plan := pr.Spec.PipelineSpec.Tasks[0].TaskSpec
	var steps []string
	for _, s := range plan.Steps {
		steps = append(steps, s.Name)
	}
	if diff := cmp.Diff([]string{"install-opr8r-step", "clone", "init", "plan"}, steps); diff != "" {
		t.Errorf("plan task steps, one pod (-want +got):\n%s", diff)
	}
	gate := pr.Spec.PipelineSpec.Tasks[1]
	if gate.TaskRef == nil || gate.TaskRef.APIVersion != "infra.opr8r.io/v1alpha1" || gate.TaskRef.Kind != "Approval" || len(gate.When) != 1 {
		t.Errorf("gate = %+v, want the Approval custom task guarded by has-changes", gate)
	}
	stepsOf := func(pt tektonv1.PipelineTask) []string {
		var out []string
		for _, s := range pt.TaskSpec.Steps {
			out = append(out, s.Name)
		}
		return out
	}
	// apply's pod exports and cleans up; after a plan without changes the
	// export task does both.
	if diff := cmp.Diff([]string{"install-opr8r-step", "apply", "export-outputs", "cleanup"}, stepsOf(pr.Spec.PipelineSpec.Tasks[2])); diff != "" {
		t.Errorf("apply task steps, one pod (-want +got):\n%s", diff)
	}
	export := pr.Spec.PipelineSpec.Tasks[3]
	if diff := cmp.Diff([]string{"install-opr8r-step", "export-outputs", "cleanup"}, stepsOf(export)); diff != "" {
		t.Errorf("export task steps (-want +got):\n%s", diff)
	}
	if len(export.When) != 1 || export.When[0].Input != "$(tasks.plan.results.has-changes)" || export.When[0].Operator != "notin" || len(export.RunAfter) != 1 || export.RunAfter[0] != "plan" {
		t.Errorf("export task runs after %v when %+v, want after plan for a plan without changes", export.RunAfter, export.When)
	}
	if len(pr.Spec.PipelineSpec.Finally) != 1 || pr.Spec.PipelineSpec.Finally[0].Name != "cleanup" {
		t.Fatalf("finally = %+v, want cleanup", pr.Spec.PipelineSpec.Finally)
	}
	// The fallback runs unless a carrier succeeded, so cleanup runs on
	// every path: failure, stop, rejection, timeout.
	var when []string
	for _, w := range pr.Spec.PipelineSpec.Finally[0].When {
		when = append(when, w.Input+" "+string(w.Operator)+" "+strings.Join(w.Values, ","))
	}
	if diff := cmp.Diff([]string{"$(tasks.apply.status) notin Succeeded", "$(tasks.export-outputs.status) notin Succeeded"}, when); diff != "" {
		t.Errorf("finally cleanup's when (-want +got):\n%s", diff)
	}
	destroy := build(t, testutil.MakeRun("x", "ns").Engine(infrav1.EngineTekton).Obj(), infrav1.RunDestroy)
	last := destroy.Spec.PipelineSpec.Tasks[len(destroy.Spec.PipelineSpec.Tasks)-1]
	if diff := cmp.Diff([]string{"install-opr8r-step", "apply", "cleanup"}, stepsOf(last)); last.Name != "apply" || diff != "" {
		t.Errorf("a destroy's last task %s (-want +got):\n%s", last.Name, diff)
	}
	planOnly := build(t, testutil.MakeRun("x", "ns").Engine(infrav1.EngineTekton).Obj(), infrav1.RunPlan)
	if f := planOnly.Spec.PipelineSpec.Finally; len(f) != 1 || len(f[0].When) != 0 {
		t.Errorf("a plan-only run's finally = %+v, want cleanup always", f)
	}
	if pr.Spec.Timeouts == nil || pr.Spec.Timeouts.Pipeline == nil || pr.Spec.Timeouts.Pipeline.Duration != 0 {
		t.Errorf("pipeline timeout = %+v, want 0 (no limit: approval waits are opr8r's to time out)", pr.Spec.Timeouts)
	}
	for _, pt := range pr.Spec.PipelineSpec.Tasks {
		if pt.TaskSpec == nil {
			continue
		}
		for _, s := range pt.TaskSpec.Steps {
			for _, a := range s.Args {
				if a == "--results-dir=/tekton/results" || a == "--termination-log=/tekton/results/error" {
					goto ok
				}
			}
			if s.Name != "install-opr8r-step" {
				t.Errorf("step %s writes no Tekton result: %v", s.Name, s.Args)
			}
		ok:
		}
	}
}

// TestStepPodsAreHardened checks every step container and the pod template.
func TestStepPodsAreHardened(t *testing.T) {
	for name, tc := range testutil.GoldenCases() {
		pr := buildWith(t, testutil.GoldenConfig(name), tc.Run.Engine(infrav1.EngineTekton).Obj(), tc.Type, testutil.GoldenDeps(name)...)
		pod := pr.Spec.TaskRunTemplate.PodTemplate
		if pod == nil || pod.SecurityContext == nil || !*pod.SecurityContext.RunAsNonRoot || pod.SecurityContext.SeccompProfile.Type != "RuntimeDefault" {
			t.Errorf("%s: pod security context is not hardened: %+v", name, pod)
		}
		for _, pt := range append(pr.Spec.PipelineSpec.Tasks, pr.Spec.PipelineSpec.Finally...) {
			if pt.TaskSpec == nil {
				continue
			}
			for _, s := range pt.TaskSpec.Steps {
				sc := s.SecurityContext
				if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
					sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || sc.SeccompProfile == nil {
					t.Errorf("%s task %s step %s: security context is not hardened: %+v", name, pt.Name, s.Name, sc)
				}
				if s.ComputeResources.Limits.Memory().IsZero() || s.ComputeResources.Requests.Cpu().IsZero() {
					t.Errorf("%s task %s step %s has no requests/limits", name, pt.Name, s.Name)
				}
			}
		}
	}
}

// A task's pod requests what one step requests, however many steps it has
// (Kubernetes sums a pod's containers' requests; Tekton runs them one after
// another), and every step keeps the whole limit; a limit without a request
// counts as the request, as Kubernetes would default it.
func TestTaskPodsRequestOneStep(t *testing.T) {
	cases := map[string]struct {
		res              *corev1.ResourceRequirements
		wantCPU, wantMem string // the pod's summed requests
		limitCPU         string
	}{
		"defaults": {nil, "100m", "256Mi", "2"},
		"requests": {&corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("4Gi")},
		}, "1", "1Gi", "3"},
		"limits-only": {&corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
		}, "500m", "512Mi", "500m"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run := testutil.MakeRun("res", "team-a").Var("name", `"x"`).Engine(infrav1.EngineTekton).Obj()
			run.Spec.Runner.Resources = tc.res
			pr := build(t, run, infrav1.RunApply)
			if err := validate(pr); err != nil {
				t.Fatal(err)
			}
			multi := 0
			for _, pt := range append(pr.Spec.PipelineSpec.Tasks, pr.Spec.PipelineSpec.Finally...) {
				if pt.TaskSpec == nil || len(pt.TaskSpec.Steps) == 0 {
					continue
				}
				if len(pt.TaskSpec.Steps) > 1 {
					multi++
				}
				var cpu, mem resource.Quantity
				for _, s := range pt.TaskSpec.Steps {
					cpu.Add(*s.ComputeResources.Requests.Cpu())
					mem.Add(*s.ComputeResources.Requests.Memory())
					if got := s.ComputeResources.Limits.Cpu(); got.Cmp(resource.MustParse(tc.limitCPU)) != 0 {
						t.Errorf("task %s step %s: cpu limit %s, want %s", pt.Name, s.Name, got, tc.limitCPU)
					}
				}
				// Shares are rounded down: within a step's rounding of the request.
				n := int64(len(pt.TaskSpec.Steps))
				wantCPU, wantMem := resource.MustParse(tc.wantCPU), resource.MustParse(tc.wantMem)
				if d := wantCPU.MilliValue() - cpu.MilliValue(); d < 0 || d >= n {
					t.Errorf("task %s (%d steps) requests %s CPU, want %s", pt.Name, n, cpu.String(), tc.wantCPU)
				}
				if d := wantMem.Value() - mem.Value(); d < 0 || d >= n {
					t.Errorf("task %s (%d steps) requests %s memory, want %s", pt.Name, n, mem.String(), tc.wantMem)
				}
			}
			if multi == 0 {
				t.Fatal("no task with several steps: the test proves nothing")
			}
		})
	}
}

// Only the step pods run as a runner account: the PipelineRun names none
// for the run as a whole, which Tekton's affinity assistant pod would take
// (and opr8r-runner-pods refuses a runner pod its engine did not make);
// every task that runs a pod names its own, checks theirs.
func TestOnlyStepPodsRunAsTheRunner(t *testing.T) {
	run := testutil.MakeRun("acct", "team-a").Obj()
	run.Spec.Checks = []infrav1.Check{{Name: "policy", Image: "conftest", Command: []string{"conftest"}}}
	pr := build(t, run, infrav1.RunApply)
	if sa := pr.Spec.TaskRunTemplate.ServiceAccountName; sa != "" {
		t.Fatalf("the PipelineRun's taskRunTemplate names service account %q, which the affinity assistant would run as", sa)
	}
	got := map[string]string{}
	for _, s := range pr.Spec.TaskRunSpecs {
		got[s.PipelineTaskName] = s.ServiceAccountName
	}
	for _, task := range append(append([]tektonv1.PipelineTask{}, pr.Spec.PipelineSpec.Tasks...), pr.Spec.PipelineSpec.Finally...) {
		if task.TaskSpec == nil || task.TaskSpec.IsCustomTask() {
			continue
		}
		want := testutil.Config.RunnerServiceAccount
		if strings.HasPrefix(task.Name, "check-") {
			want = testutil.Config.CheckServiceAccount
		}
		if got[task.Name] != want {
			t.Errorf("task %s runs as %q, want %q", task.Name, got[task.Name], want)
		}
	}
}

// TestStepLogs: kubectl tfrun logs looks for a step in every task's pod
// that may run it, in the step's container.
func TestStepLogs(t *testing.T) {
	for step, want := range map[string]string{
		"clone":          "plan",
		"plan":           "plan",
		"check-policy":   "check-policy",
		"apply":          "apply",
		"export-outputs": "apply,export-outputs",
		"cleanup":        "apply,export-outputs,cleanup",
	} {
		sel, container := tekton.New().StepLogs("r-1", step)
		if wantSel := "tekton.dev/pipelineRun=r-1,tekton.dev/pipelineTask in (" + want + ")"; sel != wantSel || container != "step-"+step {
			t.Errorf("StepLogs(%s) = %q, %q, want %q, %q", step, sel, container, wantSel, "step-"+step)
		}
		if _, err := labels.Parse(sel); err != nil {
			t.Errorf("StepLogs(%s): %q is no label selector: %v", step, sel, err)
		}
	}
}

// TestRestoreStateRunsFirstAsTheRunner: a run whose TerraformRun has kept
// states runs restore-state in a task (a pod) of its own, as the runner
// (not the plan's account), and the plan task after it.
func TestRestoreStateRunsFirstAsTheRunner(t *testing.T) {
	cfg := testutil.Config
	cfg.PlanServiceAccount = "opr8r-planner"
	run := pipeline.Defaults(testutil.MakeRun("a", "ns").Obj(), infrav1.EngineTekton, cfg)
	obj, err := tekton.New().Build(engine.Request{Run: run, Type: infrav1.RunApply, Name: "a-1", Number: 1, SpecHash: pipeline.SpecHash(run), Config: cfg, KeptStates: true})
	if err != nil {
		t.Fatal(err)
	}
	pr := obj.(*tektonv1.PipelineRun)
	accounts := map[string]string{}
	for _, s := range pr.Spec.TaskRunSpecs {
		accounts[s.PipelineTaskName] = s.ServiceAccountName
	}
	if got, want := accounts[names.StepRestoreState], cfg.RunnerServiceAccount; got != want {
		t.Errorf("restore-state runs as %q, want the runner %q", got, want)
	}
	if got := accounts["plan"]; got != "opr8r-planner" {
		t.Errorf("the plan task runs as %q, want opr8r-planner", got)
	}
	tasks := pr.Spec.PipelineSpec.Tasks
	if tasks[0].Name != names.StepRestoreState || tasks[1].Name != "plan" || !slices.Equal(tasks[1].RunAfter, []string{names.StepRestoreState}) {
		t.Errorf("tasks %s, %s (after %v); want restore-state, then plan after it", tasks[0].Name, tasks[1].Name, tasks[1].RunAfter)
	}
	if err := validate(pr); err != nil {
		t.Errorf("Tekton's validation refuses the PipelineRun: %v", err)
	}
}
