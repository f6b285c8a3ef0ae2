package argo_test

import (
	"strings"
	"testing"

	"github.com/opr8r/opr8r/pkg/names"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	"github.com/argoproj/argo-workflows/v3/workflow/validate"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines/argo"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// BuildGolden builds the Workflow of a golden case.
func buildGolden(t *testing.T, run *infrav1.TerraformRun, typ infrav1.RunType, deps ...engine.Dependency) *wfv1.Workflow {
	t.Helper()
	return buildGoldenWith(t, testutil.Config, run, typ, deps...)
}

// buildGoldenWith builds with an install's configuration of its own.
func buildGoldenWith(t *testing.T, cfg engine.Config, run *infrav1.TerraformRun, typ infrav1.RunType, deps ...engine.Dependency) *wfv1.Workflow {
	t.Helper()
	eff := pipeline.Defaults(run, infrav1.EngineArgo, cfg)
	hash := pipeline.SpecHash(eff)
	obj, err := argo.New().Build(engine.Request{Run: eff, Type: typ, Name: names.ChildName(run.Name, typ, 1), Number: 1, SpecHash: hash, Config: cfg, Dependencies: deps})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return obj.(*wfv1.Workflow)
}

func TestGoldenWorkflows(t *testing.T) {
	for name, tc := range testutil.GoldenCases() {
		t.Run(name, func(t *testing.T) {
			wf := buildGoldenWith(t, testutil.GoldenConfig(name), tc.Run.Obj(), tc.Type, testutil.GoldenDeps(name)...)
			got, err := yaml.Marshal(wf)
			if err != nil {
				t.Fatal(err)
			}
			// ValidateWorkflow fills in defaults, so it gets a copy.
			if err := validate.ValidateWorkflow(nil, nil, wf.DeepCopy(), nil, validate.ValidateOpts{}); err != nil {
				t.Fatalf("Argo's ValidateWorkflow rejects the %s Workflow: %v", name, err)
			}
			for _, tmpl := range wf.Spec.Templates {
				if tmpl.ContainerSet != nil {
					checkPodOf(t, tmpl)
				}
			}
			testutil.Golden(t, name, got)
		})
	}
}

// TestWorkflowShape checks the properties the goldens are meant to show, so a
// careless -update cannot silently drop them.
func TestWorkflowShape(t *testing.T) {
	cases := map[string]struct {
		run          *infrav1.TerraformRun
		typ          infrav1.RunType
		wantTasks    []string
		wantSets     map[string][]string // containerSet template → its containers
		wantGate     bool
		wantArgsHave map[string][]string
	}{
		"manual apply": {
			run: testutil.MakeRun("a", "ns").Obj(), typ: infrav1.RunApply,
			wantTasks: []string{"plan", "approve", "apply", "export-outputs"}, wantGate: true,
			wantSets: map[string][]string{"plan": {"clone", "terraform-init", "plan", "main"}, "apply": {"apply", "export-outputs"}, "export-outputs": {"export-outputs"}},
			wantArgsHave: map[string][]string{
				"apply":          {"apply", "--plan-file=/workspace/tfplan", "--approved-digest={{inputs.parameters.approved-digest}}"},
				"plan":           {"plan", "--results-dir=/tmp/opr8r-results", "--owner-uid={{workflow.uid}}"},
				"export-outputs": {"export-outputs"},
			},
		},
		"auto apply": {
			run: testutil.MakeRun("a", "ns").Auto().Obj(), typ: infrav1.RunApply,
			wantTasks: []string{"plan", "apply", "export-outputs"},
		},
		"destroy of a Manual run: plan, wait for approval, apply": {
			run: testutil.MakeRun("a", "ns").Obj(), typ: infrav1.RunDestroy,
			wantTasks: []string{"plan", "approve", "apply"}, wantGate: true,
			wantSets:     map[string][]string{"plan": {"clone", "terraform-init", "plan", "main"}, "apply": {"apply"}},
			wantArgsHave: map[string][]string{"plan": {"--destroy"}},
		},
		"destroy a platform admin let go without approval": {
			run: testutil.MakeRun("a", "ns").Annotate(infrav1.DestroyWithoutApprovalAnnotation, "true").Obj(), typ: infrav1.RunDestroy,
			wantTasks:    []string{"plan", "apply"},
			wantArgsHave: map[string][]string{"plan": {"--destroy"}},
		},
		"destroy of an Auto run": {
			run: testutil.MakeRun("a", "ns").Auto().Obj(), typ: infrav1.RunDestroy,
			wantTasks: []string{"plan", "apply"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			wf := buildGolden(t, tc.run, tc.typ)
			var gotTasks []string
			for _, tmpl := range wf.Spec.Templates {
				if tmpl.DAG != nil {
					for _, task := range tmpl.DAG.Tasks {
						gotTasks = append(gotTasks, task.Name)
					}
				}
			}
			if diff := cmp.Diff(tc.wantTasks, gotTasks); diff != "" {
				t.Errorf("DAG tasks (-want +got):\n%s", diff)
			}
			if wf.Spec.OnExit != "cleanup" {
				t.Errorf("onExit = %q, want cleanup", wf.Spec.OnExit)
			}
			if len(wf.OwnerReferences) != 1 || wf.OwnerReferences[0].Kind != "TerraformRun" || !*wf.OwnerReferences[0].Controller {
				t.Errorf("owner references = %+v, want the TerraformRun as controller", wf.OwnerReferences)
			}
			gate := false
			for _, tmpl := range wf.Spec.Templates {
				if tmpl.Suspend != nil {
					gate = true
					if tmpl.Suspend.Duration != "" {
						t.Errorf("the gate has suspend.duration %q, which would auto-approve", tmpl.Suspend.Duration)
					}
				}
				var containers []corev1.Container
				if tmpl.Container != nil {
					containers = append(containers, *tmpl.Container)
				}
				if cs := tmpl.ContainerSet; cs != nil {
					var got []string
					requested := resource.Quantity{}
					checkPodOf(t, tmpl)
					for i, n := range cs.Containers {
						got = append(got, n.Name)
						containers = append(containers, n.Container)
						requested.Add(*n.Resources.Requests.Memory())
						if i > 0 && (len(n.Dependencies) != 1 || n.Dependencies[0] != cs.Containers[i-1].Name) {
							t.Errorf("template %s: container %s depends on %v, want the one before it", tmpl.Name, n.Name, n.Dependencies)
						}
					}
					if want, ok := tc.wantSets[tmpl.Name]; ok {
						if diff := cmp.Diff(want, got); diff != "" {
							t.Errorf("template %s's containers (-want +got):\n%s", tmpl.Name, diff)
						}
					}
					// They run one at a time: the pod requests what one step does.
					if want := pipeline.DefaultResources().Requests[corev1.ResourceMemory]; requested.Cmp(want) != 0 {
						t.Errorf("template %s: its containers request %s of memory in all, want one step's %s", tmpl.Name, requested.String(), want.String())
					}
				}
				for _, c := range containers {
					sc := c.SecurityContext
					if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || len(sc.Capabilities.Drop) != 1 {
						t.Errorf("template %s: container security context is not hardened: %+v", tmpl.Name, sc)
					}
					if c.Resources.Limits.Memory().IsZero() || (tmpl.Container != nil && c.Resources.Requests.Cpu().IsZero()) {
						t.Errorf("template %s has no requests/limits", tmpl.Name)
					}
					step := c.Name // a containerSet's container is named after its step
					if tmpl.Container != nil {
						step = tmpl.Name
					}
					for _, want := range tc.wantArgsHave[step] {
						if !contains(c.Args, want) {
							t.Errorf("template %s container %s: args %v lack %q", tmpl.Name, c.Name, c.Args, want)
						}
					}
				}
			}
			if gate != tc.wantGate {
				t.Errorf("gate present = %v, want %v", gate, tc.wantGate)
			}
			if wf.Spec.VolumeClaimGC == nil || wf.Spec.VolumeClaimGC.Strategy != wfv1.VolumeClaimGCOnCompletion || len(wf.Spec.VolumeClaimTemplates) != 1 {
				t.Errorf("workspace PVC: templates %d, gc %+v", len(wf.Spec.VolumeClaimTemplates), wf.Spec.VolumeClaimGC)
			}
			if sc := wf.Spec.SecurityContext; sc == nil || !*sc.RunAsNonRoot || sc.SeccompProfile.Type != "RuntimeDefault" {
				t.Errorf("pod security context is not hardened: %+v", sc)
			}
		})
	}
}

// checkPodOf checks that Argo can make a containerSet template's pod: it
// adds to the pod the template's volumes and those of the Workflow that the
// set's own volumeMounts name, nothing else (a container's mount of a
// Workflow volume is refused by the API server, "Not found"); and it names
// its own containers of every pod init and wait.
func checkPodOf(t *testing.T, tmpl wfv1.Template) {
	t.Helper()
	cs := tmpl.ContainerSet
	own := map[string]bool{}
	for _, v := range tmpl.Volumes {
		own[v.Name] = true
	}
	for _, m := range cs.VolumeMounts {
		if m.Name != pipeline.WorkspaceVolume {
			t.Errorf("template %s mounts %s set-wide; only the workspace claim is meant to be", tmpl.Name, m.Name)
		}
	}
	for _, n := range cs.Containers {
		if n.Name == "init" || n.Name == "wait" {
			t.Errorf("template %s: container %s has the name of an Argo container of every pod", tmpl.Name, n.Name)
		}
		for _, m := range n.VolumeMounts {
			if !own[m.Name] {
				t.Errorf("template %s: container %s mounts %s, which is not the template's: Argo would not add it to the pod", tmpl.Name, n.Name, m.Name)
			}
		}
	}
}

func contains(args []string, want string) bool {
	for _, a := range args {
		if a == want || strings.HasPrefix(a, want+"=") {
			return true
		}
	}
	return false
}

// TestRestoreStateRunsFirstAsTheRunner: a run whose TerraformRun has kept
// states runs restore-state in a pod of its own, as the runner (not the
// plan's account), and the plan's pod only after it succeeded; Argo's own
// validation accepts the Workflow.
func TestRestoreStateRunsFirstAsTheRunner(t *testing.T) {
	cfg := testutil.Config
	cfg.PlanServiceAccount = "opr8r-planner"
	run := pipeline.Defaults(testutil.MakeRun("a", "ns").Obj(), infrav1.EngineArgo, cfg)
	obj, err := argo.New().Build(engine.Request{Run: run, Type: infrav1.RunApply, Name: "a-1", Number: 1, SpecHash: pipeline.SpecHash(run), Config: cfg, KeptStates: true})
	if err != nil {
		t.Fatal(err)
	}
	wf := obj.(*wfv1.Workflow)
	accounts := map[string]string{}
	var dag *wfv1.DAGTemplate
	for _, tpl := range wf.Spec.Templates {
		accounts[tpl.Name] = tpl.ServiceAccountName
		if tpl.DAG != nil {
			dag = tpl.DAG
		}
	}
	if got, want := accounts[names.StepRestoreState], cfg.RunnerServiceAccount; got != want {
		t.Errorf("restore-state runs as %q, want the runner %q", got, want)
	}
	if got := accounts[names.StepPlan]; got != "opr8r-planner" {
		t.Errorf("the plan's pod runs as %q, want opr8r-planner", got)
	}
	var tasks []string
	for _, task := range dag.Tasks {
		tasks = append(tasks, task.Name)
		if task.Name == names.StepPlan && task.Depends != names.StepRestoreState {
			t.Errorf("the plan task depends on %q, want %q", task.Depends, names.StepRestoreState)
		}
	}
	if tasks[0] != names.StepRestoreState {
		t.Errorf("tasks %v; want restore-state first", tasks)
	}
	if err := validate.ValidateWorkflow(nil, nil, wf.DeepCopy(), nil, validate.ValidateOpts{}); err != nil {
		t.Errorf("Argo's validation refuses the Workflow: %v", err)
	}
}
