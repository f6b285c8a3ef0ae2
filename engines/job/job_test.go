package job_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines/job"
	"github.com/opr8r/opr8r/engines/job/jobtest"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
)

func build(t *testing.T, run *infrav1.TerraformRun, typ infrav1.RunType, deps ...engine.Dependency) *batchv1.Job {
	t.Helper()
	eff := pipeline.Defaults(run, infrav1.EngineJob, testutil.Config)
	hash := pipeline.SpecHash(eff)
	obj, err := job.New().Build(engine.Request{Run: eff, Type: typ, Name: names.ChildName(run.Name, typ, 1), Number: 1, SpecHash: hash, Config: testutil.Config, Dependencies: deps})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return obj.(*batchv1.Job)
}

func TestGoldenJobs(t *testing.T) {
	for name, tc := range testutil.GoldenCases() {
		t.Run(name, func(t *testing.T) {
			j := build(t, tc.Run.Engine(infrav1.EngineJob).Obj(), tc.Type, testutil.GoldenDeps(name)...)
			if err := jobtest.Validate(j); err != nil {
				t.Fatalf("the %s Job is not valid: %v", name, err)
			}
			got, err := yaml.Marshal(j)
			if err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, name, got)
		})
	}
}

// jobs is a child with its related objects, as the cache holds them.
type jobs struct {
	child   *batchv1.Job
	related []client.Object
}

func term(code int32, msg string) corev1.ContainerState {
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Message: msg, FinishedAt: metav1.Now()}}
}

func pod(child, step string, states map[string]corev1.ContainerState, init ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: child + "-" + step + "-x", Namespace: "ns",
		Labels: map[string]string{job.ChildLabel: child, infrav1.StepLabel: step}}}
	for _, n := range init {
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: n, State: states[n]})
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: step, State: states[step]}}
	return p
}

func stepJob(child, step string, done bool) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: child + "-" + step, Namespace: "ns",
		Labels: map[string]string{job.ChildLabel: child, infrav1.StepLabel: step}}}
	if done {
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	}
	return j
}

func planResults(t *testing.T, has bool) string {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"has-changes": map[bool]string{true: "true", false: "false"}[has], "digest": "sha256:aa", "summary": `{"add":1}`, "inputs": "sha256:in"})
	return string(b)
}

func TestObserveAndDrive(t *testing.T) {
	manual := build(t, testutil.MakeRun("r", "ns").Obj(), infrav1.RunApply)
	manual.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	planned := func(has bool) *corev1.Pod {
		return pod("r-1", "plan", map[string]corev1.ContainerState{"clone": term(0, `{"commit":"abc"}`), "init": term(0, ""), "plan": term(0, planResults(t, has))}, "install-opr8r-step", "clone", "init")
	}
	approved := manual.DeepCopy()
	approved.Annotations["infra.opr8r.io/gate-decision"] = "approve"
	approved.Annotations["infra.opr8r.io/gate-digest"] = "sha256:aa"
	cases := map[string]struct {
		child     *batchv1.Job
		related   []client.Object
		wantPhase infrav1.RunPhase
		wantGate  engine.GateState
		wantSteps map[string]infrav1.StepPhase
		wantNext  string // the Job the driver creates
	}{
		"plan waiting for approval": {
			child: manual, related: []client.Object{planned(true)},
			wantPhase: infrav1.RunAwaitingApproval, wantGate: engine.GatePending,
			wantSteps: map[string]infrav1.StepPhase{"clone": "Succeeded", "init": "Succeeded", "plan": "Succeeded", "approve": "Running"},
		},
		"approved: apply is created": {
			child: approved, related: []client.Object{planned(true)}, wantPhase: infrav1.RunRunning, wantGate: engine.GateApproved,
			wantSteps: map[string]infrav1.StepPhase{"plan": "Succeeded", "approve": "Succeeded"}, wantNext: "r-1-apply",
		},
		"no changes: gate and apply skipped, export created": {
			child: manual, related: []client.Object{planned(false)}, wantPhase: infrav1.RunRunning, wantGate: engine.GateSkipped,
			wantSteps: map[string]infrav1.StepPhase{"approve": "Skipped", "apply": "Skipped"}, wantNext: "r-1-export",
		},
		"apply failed: cleanup created, the run fails after it": {
			child: approved, related: []client.Object{planned(true), stepJob("r-1", "apply", true), pod("r-1", "apply", map[string]corev1.ContainerState{"apply": term(1, "Error: boom")})},
			wantPhase: infrav1.RunRunning, wantGate: engine.GateApproved, wantSteps: map[string]infrav1.StepPhase{"apply": "Failed"}, wantNext: "r-1-cleanup",
		},
		// The cache of pods lags the one of Jobs (seconds after an API
		// server restart): a completed apply Job whose pod is not seen yet
		// is not a failed or skipped apply. The driver waits (no cleanup
		// before export), and the run is not finished without its outputs.
		"apply Job complete, its pod not seen yet: nothing created": {
			child: approved, related: []client.Object{planned(true), stepJob("r-1", "apply", true)},
			wantPhase: infrav1.RunRunning, wantGate: engine.GateApproved, wantSteps: map[string]infrav1.StepPhase{"apply": "Pending"},
		},
		"export Job complete, its pod not seen yet, cleanup done: still running": {
			child: approved, related: []client.Object{planned(true), stepJob("r-1", "apply", true), pod("r-1", "apply", map[string]corev1.ContainerState{"apply": term(0, "")}),
				stepJob("r-1", "export-outputs", true), stepJob("r-1", "cleanup", true)},
			wantPhase: infrav1.RunRunning, wantGate: engine.GateApproved, wantSteps: map[string]infrav1.StepPhase{"apply": "Succeeded", "export-outputs": "Pending"},
		},
		"cleanup done after a failed apply: Failed, terraform's text": {
			child: approved, related: []client.Object{planned(true), stepJob("r-1", "apply", true), pod("r-1", "apply", map[string]corev1.ContainerState{"apply": term(1, "Error: boom")}), stepJob("r-1", "cleanup", true)},
			wantPhase: infrav1.RunFailed, wantGate: engine.GateApproved, wantSteps: map[string]infrav1.StepPhase{"apply": "Failed", "export-outputs": "Skipped"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			prog, err := job.New().Observe(tc.child, tc.related, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if prog.Phase != tc.wantPhase || prog.Gate.State != tc.wantGate {
				t.Fatalf("phase %s gate %s, want %s %s (%+v)", prog.Phase, prog.Gate.State, tc.wantPhase, tc.wantGate, prog)
			}
			got := map[string]infrav1.StepPhase{}
			for _, s := range prog.Steps {
				if _, ok := tc.wantSteps[s.Name]; ok {
					got[s.Name] = s.Phase
				}
			}
			if diff := cmp.Diff(tc.wantSteps, got); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			if tc.wantPhase == infrav1.RunFailed && prog.Message != "step apply failed: Error: boom" {
				t.Errorf("message %q", prog.Message)
			}
			c := fakeClient(t, append([]client.Object{tc.child}, tc.related...)...)
			if err := job.New().Drive(context.Background(), c, c, tc.child, prog); err != nil {
				t.Fatal(err)
			}
			list := &batchv1.JobList{}
			if err := c.List(context.Background(), list); err != nil {
				t.Fatal(err)
			}
			created := ""
			for _, j := range list.Items {
				if j.Name != tc.child.Name && !contains(tc.related, j.Name) {
					created = j.Name
				}
			}
			if created != tc.wantNext {
				t.Errorf("the driver created %q, want %q", created, tc.wantNext)
			}
		})
	}
}

func contains(objs []client.Object, name string) bool {
	for _, o := range objs {
		if o.GetName() == name {
			return true
		}
	}
	return false
}

func fakeClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
}
