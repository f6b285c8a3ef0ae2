package job_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
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
	return buildWith(t, testutil.Config, run, typ, deps...)
}

// buildWith builds with an install's configuration of its own.
func buildWith(t *testing.T, cfg engine.Config, run *infrav1.TerraformRun, typ infrav1.RunType, deps ...engine.Dependency) *batchv1.Job {
	t.Helper()
	eff := pipeline.Defaults(run, infrav1.EngineJob, cfg)
	hash := pipeline.SpecHash(eff)
	obj, err := job.New().Build(engine.Request{Run: eff, Type: typ, Name: names.ChildName(run.Name, typ, 1), Number: 1, SpecHash: hash, Config: cfg, Dependencies: deps})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return obj.(*batchv1.Job)
}

func TestGoldenJobs(t *testing.T) {
	for name, tc := range testutil.GoldenCases() {
		t.Run(name, func(t *testing.T) {
			j := buildWith(t, testutil.GoldenConfig(name), tc.Run.Engine(infrav1.EngineJob).Obj(), tc.Type, testutil.GoldenDeps(name)...)
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

// jobUID is the uid of a run's Job in these tests: the child's for the
// plan step, else its step Job's (stepJob).
func jobUID(child, step string) types.UID {
	if step == "plan" {
		return types.UID("uid-" + child)
	}
	return types.UID("uid-" + child + "-" + step)
}

func controlledBy(name string, uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: name, UID: uid, Controller: ptr.To(true)}}
}

func pod(child, step string, states map[string]corev1.ContainerState, init ...string) *corev1.Pod {
	owner := child + "-" + step
	if step == "plan" {
		owner = child
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: child + "-" + step + "-x", Namespace: "ns",
		Labels: map[string]string{job.ChildLabel: child, infrav1.StepLabel: step}, OwnerReferences: controlledBy(owner, jobUID(child, step))}}
	for _, n := range init {
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: n, State: states[n]})
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: step, State: states[step]}}
	return p
}

func stepJob(child, step string, done bool) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: child + "-" + step, Namespace: "ns", UID: jobUID(child, step),
		Labels: map[string]string{job.ChildLabel: child, infrav1.StepLabel: step}, OwnerReferences: controlledBy(child, jobUID(child, "plan"))}}
	if done {
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	}
	return j
}

// carrier is a step Job that carries the steps after it (annotation
// infra.opr8r.io/carries), ended as the Job controller ends it: Complete
// when every container exited 0, else Failed.
func carrier(child, step string, states map[string]corev1.ContainerState, carries ...string) (*batchv1.Job, *corev1.Pod) {
	j := stepJob(child, step, false)
	j.Annotations = map[string]string{"infra.opr8r.io/carries": strings.Join(carries, ",")}
	p := pod(child, step, nil)
	p.Status.InitContainerStatuses, p.Status.ContainerStatuses = nil, nil
	failed := false
	for i, c := range carries {
		st := states[c]
		failed = failed || (st.Terminated != nil && st.Terminated.ExitCode != 0)
		cs := corev1.ContainerStatus{Name: c, State: st}
		if i < len(carries)-1 {
			p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, cs)
		} else {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		}
	}
	end := batchv1.JobComplete
	if failed {
		end = batchv1.JobFailed
	}
	j.Status.Conditions = []batchv1.JobCondition{{Type: end, Status: corev1.ConditionTrue}}
	return j, p
}

func planResults(t *testing.T, has bool) string {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"has-changes": map[bool]string{true: "true", false: "false"}[has], "digest": "sha256:aa", "summary": `{"add":1}`, "inputs": "sha256:in"})
	return string(b)
}

// sealedPlanDone makes child the run r-1's plan Job, completed, and seals
// it as the manager does; it returns the seals that verify it.
func sealedPlanDone(t *testing.T, child *batchv1.Job) engine.Seals {
	t.Helper()
	child.UID = jobUID("r-1", "plan")
	child.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	seals := engine.Seals{Key: []byte("a seal key of at least 32 bytes..")}
	if err := seals.Seal(job.New(), child); err != nil {
		t.Fatal(err)
	}
	return seals
}

func TestObserveAndDrive(t *testing.T) {
	manual := build(t, testutil.MakeRun("r", "ns").Obj(), infrav1.RunApply)
	seals := sealedPlanDone(t, manual)
	approvedPlan := &engine.RecordedDecision{Approved: true, Digest: "sha256:aa"}
	tampered := manual.DeepCopy()
	tampered.Annotations["infra.opr8r.io/approval"] = "auto"
	planned := func(has bool) *corev1.Pod {
		return pod("r-1", "plan", map[string]corev1.ContainerState{"clone": term(0, `{"commit":"abc"}`), "init": term(0, ""), "plan": term(0, planResults(t, has))}, "install-opr8r-step", "clone", "init")
	}
	approved := manual.DeepCopy()
	approved.Annotations["infra.opr8r.io/gate-decision"] = "approve"
	approved.Annotations["infra.opr8r.io/gate-digest"] = "sha256:aa"
	carried := func(step string, states map[string]corev1.ContainerState, carries ...string) []client.Object {
		j, p := carrier("r-1", step, states, carries...)
		return []client.Object{planned(true), j, p}
	}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
	cases := map[string]struct {
		child     *batchv1.Job
		related   []client.Object
		decision  *engine.RecordedDecision // as opr8r recorded it in status
		wantPhase infrav1.RunPhase
		wantGate  engine.GateState
		wantSteps map[string]infrav1.StepPhase
		wantNext  string // the Job the driver creates
		wantRuns  string // the containers of its pod, init containers first
		wantErr   string // the driver's error
	}{
		"approved only in the child's annotations (anyone who may edit the Job can write them): no apply": {
			child: approved, related: []client.Object{planned(true)}, wantPhase: infrav1.RunRunning, wantGate: engine.GateApproved,
			wantSteps: map[string]infrav1.StepPhase{"plan": "Succeeded", "approve": "Succeeded"},
		},
		"approved, but the child's approval mode was changed to auto: no Job, the seal is broken": {
			// What the child says is shown (no gate), but nothing is made of it.
			child: tampered, related: []client.Object{planned(true)}, decision: approvedPlan, wantPhase: infrav1.RunRunning, wantGate: engine.GateAbsent,
			wantSteps: map[string]infrav1.StepPhase{"plan": "Succeeded"}, wantErr: "the child was changed after opr8r built it",
		},
		"approved, and a Job of apply's name that is not the run's exists: refused": {
			child: manual, related: []client.Object{planned(true), &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "r-1-apply", Namespace: "ns"}}}, decision: approvedPlan,
			wantPhase: infrav1.RunAwaitingApproval, wantGate: engine.GatePending, wantSteps: map[string]infrav1.StepPhase{"plan": "Succeeded"},
			wantErr: "job r-1-apply exists and is not run r-1's",
		},
		"a second, newer plan pod (made by someone else) is not read": {
			child: manual, related: []client.Object{planned(true), func() *corev1.Pod {
				p := pod("r-1", "plan", map[string]corev1.ContainerState{"plan": term(0, planResults(t, false))})
				p.Name, p.CreationTimestamp = "r-1-plan-fake", metav1.NewTime(time.Now().Add(time.Hour))
				return p
			}()},
			wantPhase: infrav1.RunAwaitingApproval, wantGate: engine.GatePending, wantSteps: map[string]infrav1.StepPhase{"plan": "Succeeded", "approve": "Running"},
		},
		"plan waiting for approval": {
			child: manual, related: []client.Object{planned(true)},
			wantPhase: infrav1.RunAwaitingApproval, wantGate: engine.GatePending,
			wantSteps: map[string]infrav1.StepPhase{"clone": "Succeeded", "init": "Succeeded", "plan": "Succeeded", "approve": "Running"},
		},
		"approved: apply is created": {
			child: approved, related: []client.Object{planned(true)}, decision: approvedPlan, wantPhase: infrav1.RunRunning, wantGate: engine.GateApproved,
			wantSteps: map[string]infrav1.StepPhase{"plan": "Succeeded", "approve": "Succeeded"}, wantNext: "r-1-apply",
			wantRuns: "install-opr8r-step apply export-outputs cleanup",
		},
		"no changes: gate and apply skipped, export created": {
			child: manual, related: []client.Object{planned(false)}, wantPhase: infrav1.RunRunning, wantGate: engine.GateSkipped,
			wantSteps: map[string]infrav1.StepPhase{"approve": "Skipped", "apply": "Skipped"}, wantNext: "r-1-export",
			wantRuns: "install-opr8r-step export-outputs cleanup",
		},
		"apply failed: cleanup created, the run fails after it": {
			child: approved, related: []client.Object{planned(true), stepJob("r-1", "apply", true), pod("r-1", "apply", map[string]corev1.ContainerState{"apply": term(1, "Error: boom")})},
			wantPhase: infrav1.RunRunning, wantGate: engine.GateApproved, wantSteps: map[string]infrav1.StepPhase{"apply": "Failed"}, wantNext: "r-1-cleanup",
		},
		"apply, export-outputs and cleanup succeeded in apply's pod: Succeeded, no other Job": {
			child: approved, decision: approvedPlan,
			related:   carried("apply", map[string]corev1.ContainerState{"apply": term(0, ""), "export-outputs": term(0, ""), "cleanup": term(0, "")}, "apply", "export-outputs", "cleanup"),
			wantPhase: infrav1.RunSucceeded, wantGate: engine.GateApproved,
			wantSteps: map[string]infrav1.StepPhase{"apply": "Succeeded", "export-outputs": "Succeeded", "cleanup": "Succeeded"},
		},
		"apply failed in its pod: the cleanup it carries never ran, a Job of cleanup alone is made": {
			child: approved, decision: approvedPlan,
			related:   carried("apply", map[string]corev1.ContainerState{"apply": term(1, "Error: boom"), "export-outputs": waiting, "cleanup": waiting}, "apply", "export-outputs", "cleanup"),
			wantPhase: infrav1.RunRunning, wantGate: engine.GateApproved,
			wantSteps: map[string]infrav1.StepPhase{"apply": "Failed", "export-outputs": "Skipped", "cleanup": "Skipped"}, wantNext: "r-1-cleanup",
			wantRuns: "install-opr8r-step cleanup",
		},
		"export-outputs failed in apply's pod: a Job of cleanup alone is made, no Job of export": {
			child: approved, decision: approvedPlan,
			related:   carried("apply", map[string]corev1.ContainerState{"apply": term(0, ""), "export-outputs": term(1, "no outputs Secret"), "cleanup": waiting}, "apply", "export-outputs", "cleanup"),
			wantPhase: infrav1.RunRunning, wantGate: engine.GateApproved,
			wantSteps: map[string]infrav1.StepPhase{"apply": "Succeeded", "export-outputs": "Failed", "cleanup": "Skipped"}, wantNext: "r-1-cleanup",
		},
		"cleanup failed in apply's pod: it is run again in a Job of its own": {
			child: approved, decision: approvedPlan,
			related:   carried("apply", map[string]corev1.ContainerState{"apply": term(0, ""), "export-outputs": term(0, ""), "cleanup": term(1, "lock not released")}, "apply", "export-outputs", "cleanup"),
			wantPhase: infrav1.RunRunning, wantGate: engine.GateApproved,
			wantSteps: map[string]infrav1.StepPhase{"apply": "Succeeded", "export-outputs": "Succeeded", "cleanup": "Failed"}, wantNext: "r-1-cleanup",
		},
		"apply's pod still running export-outputs: nothing created": {
			child: approved, decision: approvedPlan,
			related: func() []client.Object {
				objs := carried("apply", map[string]corev1.ContainerState{"apply": term(0, ""), "export-outputs": {Running: &corev1.ContainerStateRunning{}}, "cleanup": waiting}, "apply", "export-outputs", "cleanup")
				objs[1].(*batchv1.Job).Status.Conditions = nil
				return objs
			}(),
			wantPhase: infrav1.RunRunning, wantGate: engine.GateApproved,
			wantSteps: map[string]infrav1.StepPhase{"apply": "Succeeded", "export-outputs": "Running", "cleanup": "Pending"},
		},
		"the fallback cleanup Job is what counts once it exists": {
			child: approved, decision: approvedPlan,
			related: func() []client.Object {
				objs := carried("apply", map[string]corev1.ContainerState{"apply": term(1, "Error: boom"), "export-outputs": waiting, "cleanup": waiting}, "apply", "export-outputs", "cleanup")
				return append(objs, stepJob("r-1", "cleanup", true), pod("r-1", "cleanup", map[string]corev1.ContainerState{"cleanup": term(0, "")}))
			}(),
			wantPhase: infrav1.RunFailed, wantGate: engine.GateApproved,
			wantSteps: map[string]infrav1.StepPhase{"apply": "Failed", "export-outputs": "Skipped", "cleanup": "Succeeded"},
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
			err = job.New().Drive(context.Background(), c, c, tc.child, prog, engine.DriveInput{Decision: tc.decision, Verify: seals.Verifier(job.New())})
			if (err != nil || tc.wantErr != "") && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Drive: %v, want an error with %q", err, tc.wantErr)
			}
			list := &batchv1.JobList{}
			if err := c.List(context.Background(), list); err != nil {
				t.Fatal(err)
			}
			created, runs := "", ""
			for _, j := range list.Items {
				if j.Name != tc.child.Name && !contains(tc.related, j.Name) {
					created = j.Name
					var cs []string
					for _, c := range append(j.Spec.Template.Spec.InitContainers, j.Spec.Template.Spec.Containers...) {
						cs = append(cs, c.Name)
					}
					runs = strings.Join(cs, " ")
					if carries := j.Annotations["infra.opr8r.io/carries"]; !strings.HasSuffix(runs, strings.ReplaceAll(carries, ",", " ")) {
						t.Errorf("Job %s carries %q (its annotation), its pod runs %q", j.Name, carries, runs)
					}
				}
			}
			if created != tc.wantNext {
				t.Errorf("the driver created %q, want %q", created, tc.wantNext)
			}
			if tc.wantRuns != "" && runs != tc.wantRuns {
				t.Errorf("the pod of Job %s runs %q, want %q", created, runs, tc.wantRuns)
			}
		})
	}
}

// TestDriveReadsOneView: the driver decides from the objects it lists
// itself, not from a progress observed a moment before. Apply's pod ran
// export-outputs and cleanup, and its Job completed between the two reads:
// the earlier progress still has cleanup running, and a cleanup Job made
// from it would run cleanup a second time (seen once in the contract suite,
// CI of 2026-11-30).
func TestDriveReadsOneView(t *testing.T) {
	child := build(t, testutil.MakeRun("r", "ns").Obj(), infrav1.RunApply)
	seals := sealedPlanDone(t, child)
	planned := pod("r-1", "plan", map[string]corev1.ContainerState{"clone": term(0, `{"commit":"abc"}`), "init": term(0, ""), "plan": term(0, planResults(t, true))}, "install-opr8r-step", "clone", "init")
	carries := []string{"apply", "export-outputs", "cleanup"}
	earlierJob, earlierPod := carrier("r-1", "apply", map[string]corev1.ContainerState{"apply": term(0, ""), "export-outputs": term(0, ""), "cleanup": {Running: &corev1.ContainerStateRunning{}}}, carries...)
	earlierJob.Status.Conditions = nil
	prog, err := job.New().Observe(child, []client.Object{planned, earlierJob, earlierPod}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := phaseOf(prog, "cleanup"); got != infrav1.StepRunning {
		t.Fatalf("the earlier view's cleanup is %q, want Running", got)
	}
	nowJob, nowPod := carrier("r-1", "apply", map[string]corev1.ContainerState{"apply": term(0, ""), "export-outputs": term(0, ""), "cleanup": term(0, "")}, carries...)
	c := fakeClient(t, child, planned, nowJob, nowPod)
	in := engine.DriveInput{Decision: &engine.RecordedDecision{Approved: true, Digest: "sha256:aa"}, Verify: seals.Verifier(job.New())}
	if err := job.New().Drive(context.Background(), c, c, child, prog, in); err != nil {
		t.Fatal(err)
	}
	list := &batchv1.JobList{}
	if err := c.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	for _, j := range list.Items {
		if j.Name == "r-1-cleanup" {
			t.Fatalf("the driver made %s: cleanup already succeeded in apply's pod", j.Name)
		}
	}
}

// TestLaterJobsMountTheStepImage: a child built to mount the step image
// (--step-binary=image-volume) has its later Jobs built alike: no
// container installs opr8r-step, and their opr8r-bin volume is the step
// image the child's is.
func TestLaterJobsMountTheStepImage(t *testing.T) {
	cfg := testutil.Config
	cfg.StepBinaryFromImage = true
	child := buildWith(t, cfg, testutil.MakeRun("r", "ns").Auto().Obj(), infrav1.RunApply)
	seals := sealedPlanDone(t, child)
	planned := pod("r-1", "plan", map[string]corev1.ContainerState{"clone": term(0, `{"commit":"abc"}`), "init": term(0, ""), "plan": term(0, planResults(t, true))}, "clone", "init")
	c := fakeClient(t, child, planned)
	prog, err := job.New().Observe(child, []client.Object{planned}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := job.New().Drive(context.Background(), c, c, child, prog, engine.DriveInput{Verify: seals.Verifier(job.New())}); err != nil {
		t.Fatal(err)
	}
	for _, j := range []*batchv1.Job{child, getJob(t, c, "r-1-apply")} {
		spec := j.Spec.Template.Spec
		var cs []string
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			cs = append(cs, c.Name)
		}
		if slices.Contains(cs, "install-opr8r-step") {
			t.Errorf("Job %s's pod installs opr8r-step: %v", j.Name, cs)
		}
		var bin *corev1.Volume
		for i := range spec.Volumes {
			if spec.Volumes[i].Name == pipeline.StepBinVolume {
				bin = &spec.Volumes[i]
			}
		}
		if bin == nil || bin.Image == nil || bin.Image.Reference != cfg.StepImage {
			t.Errorf("Job %s's %s volume is %+v, want the image volume %s", j.Name, pipeline.StepBinVolume, bin, cfg.StepImage)
		}
	}
}

func getJob(t *testing.T, c client.Client, name string) *batchv1.Job {
	t.Helper()
	j := &batchv1.Job{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, j); err != nil {
		t.Fatal(err)
	}
	return j
}

func phaseOf(p engine.Progress, step string) infrav1.StepPhase {
	for _, s := range p.Steps {
		if s.Name == step {
			return s.Phase
		}
	}
	return ""
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

// TestChecksRunAsTheCheckServiceAccount: the Job of a run's checks runs as
// the check service account (no Secret reads, no cloud identity), the
// other step Jobs as the runner.
func TestChecksRunAsTheCheckServiceAccount(t *testing.T) {
	child := build(t, testutil.MakeRun("r", "ns").Check("policy", "conftest:1", "", "conftest", "test").Obj(), infrav1.RunApply)
	seals := sealedPlanDone(t, child)
	planned := pod("r-1", "plan", map[string]corev1.ContainerState{"clone": term(0, `{"commit":"abc"}`), "init": term(0, ""), "plan": term(0, planResults(t, true))}, "install-opr8r-step", "clone", "init")
	prog, err := job.New().Observe(child, []client.Object{planned}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := fakeClient(t, child, planned)
	if err := job.New().Drive(context.Background(), c, c, child, prog, engine.DriveInput{Verify: seals.Verifier(job.New())}); err != nil {
		t.Fatal(err)
	}
	list := &batchv1.JobList{}
	if err := c.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, j := range list.Items {
		if j.Name == child.Name {
			continue
		}
		found = true
		if sa := j.Spec.Template.Spec.ServiceAccountName; sa != testutil.Config.CheckServiceAccount {
			t.Errorf("Job %s (the checks) runs as %q, want %q", j.Name, sa, testutil.Config.CheckServiceAccount)
		}
	}
	if !found {
		t.Fatal("the driver created no checks Job after the plan")
	}
	if sa := child.Spec.Template.Spec.ServiceAccountName; sa != testutil.Config.RunnerServiceAccount {
		t.Errorf("the plan runs as %q, want the runner %q", sa, testutil.Config.RunnerServiceAccount)
	}
}

// TestStepLogs: kubectl tfrun logs looks for a step in every Job that may
// run it, in the step's container.
func TestStepLogs(t *testing.T) {
	for step, want := range map[string]string{
		"clone":          "plan",
		"plan":           "plan",
		"check-policy":   "checks",
		"restore-state":  "restore-state",
		"apply":          "apply",
		"export-outputs": "apply,export-outputs",
		"cleanup":        "apply,export-outputs,cleanup",
	} {
		sel, container := job.New().StepLogs("r-1", step)
		if wantSel := "infra.opr8r.io/child=r-1,infra.opr8r.io/step in (" + want + ")"; sel != wantSel || container != step {
			t.Errorf("StepLogs(%s) = %q, %q, want %q, %q", step, sel, container, wantSel, step)
		}
		if _, err := labels.Parse(sel); err != nil {
			t.Errorf("StepLogs(%s): %q is no label selector: %v", step, sel, err)
		}
	}
}

// TestRestoreStateRunsFirstAsTheRunner: a run whose TerraformRun has kept
// states makes the child run restore-state alone, as the runner; once it
// succeeded the driver makes the plan Job (<child>-plan: clone, init and
// plan, as the plan's account); when it failed, no plan: cleanup, and the
// run fails with restore-state's message.
func TestRestoreStateRunsFirstAsTheRunner(t *testing.T) {
	cfg := testutil.Config
	cfg.PlanServiceAccount = "opr8r-planner"
	run := pipeline.Defaults(testutil.MakeRun("r", "ns").Obj(), infrav1.EngineJob, cfg)
	obj, err := job.New().Build(engine.Request{Run: run, Type: infrav1.RunApply, Name: "r-1", Number: 1, SpecHash: pipeline.SpecHash(run), Config: cfg, KeptStates: true})
	if err != nil {
		t.Fatal(err)
	}
	child := obj.(*batchv1.Job)
	spec := child.Spec.Template.Spec
	if sa := spec.ServiceAccountName; sa != cfg.RunnerServiceAccount {
		t.Errorf("the child runs as %q, want the runner %q", sa, cfg.RunnerServiceAccount)
	}
	if got := spec.Containers[0].Name; got != names.StepRestoreState || len(spec.InitContainers) != 1 {
		t.Errorf("the child runs %q after %d init containers, want restore-state alone", got, len(spec.InitContainers))
	}
	seals := sealedPlanDone(t, child)
	restorePod := func(code int32, msg string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "r-1-x", Namespace: "ns",
			Labels: map[string]string{job.ChildLabel: "r-1", infrav1.StepLabel: names.StepRestoreState}, OwnerReferences: controlledBy("r-1", child.UID)}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: names.StepRestoreState, State: term(code, msg)}}
		return p
	}
	failed := child.DeepCopy()
	failed.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"}}
	planJob := stepJob("r-1", "plan", true)
	planJob.OwnerReferences = controlledBy("r-1", child.UID)
	planPod := pod("r-1", "plan", map[string]corev1.ContainerState{"clone": term(0, `{"commit":"abc"}`), "init": term(0, ""), "plan": term(0, planResults(t, true))}, "install-opr8r-step", "clone", "init")
	planPod.OwnerReferences = controlledBy("r-1-plan", planJob.UID)
	const refused = "the state an earlier run kept in the Secrets ns/r-0-rec-… could not be pushed"
	cases := map[string]struct {
		child     *batchv1.Job
		related   []client.Object
		wantPhase infrav1.RunPhase
		wantSteps map[string]infrav1.StepPhase
		wantNext  string
		wantSA    string
		wantRuns  string
	}{
		"restored: the plan Job, as the plan's account": {
			child: child, related: []client.Object{restorePod(0, "")},
			wantPhase: infrav1.RunRunning, wantSteps: map[string]infrav1.StepPhase{names.StepRestoreState: "Succeeded"},
			wantNext: "r-1-plan", wantSA: "opr8r-planner", wantRuns: "clone install-opr8r-step init plan",
		},
		"planned after it: the gate waits": {
			child: child, related: []client.Object{restorePod(0, ""), planJob, planPod},
			wantPhase: infrav1.RunAwaitingApproval, wantSteps: map[string]infrav1.StepPhase{names.StepRestoreState: "Succeeded", names.StepPlan: "Succeeded", names.StepApprove: "Running"},
		},
		"refused: no plan, cleanup": {
			child: failed, related: []client.Object{restorePod(1, refused)},
			wantPhase: infrav1.RunRunning, wantSteps: map[string]infrav1.StepPhase{names.StepRestoreState: "Failed"},
			wantNext: "r-1-cleanup", wantSA: cfg.RunnerServiceAccount, wantRuns: "install-opr8r-step cleanup",
		},
		"refused, cleaned up: Failed, with its message": {
			child: failed, related: []client.Object{restorePod(1, refused), stepJob("r-1", "cleanup", true)},
			wantPhase: infrav1.RunFailed, wantSteps: map[string]infrav1.StepPhase{names.StepRestoreState: "Failed", names.StepApply: "Skipped"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			prog, err := job.New().Observe(tc.child, tc.related, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]infrav1.StepPhase{}
			var order []string
			for _, s := range prog.Steps {
				order = append(order, s.Name)
				if _, ok := tc.wantSteps[s.Name]; ok {
					got[s.Name] = s.Phase
				}
			}
			if prog.Phase != tc.wantPhase {
				t.Errorf("phase %s, want %s (%+v)", prog.Phase, tc.wantPhase, prog)
			}
			if diff := cmp.Diff(tc.wantSteps, got); diff != "" {
				t.Errorf("steps (-want +got):\n%s", diff)
			}
			if order[0] != names.StepRestoreState {
				t.Errorf("steps in order %v; want restore-state first", order)
			}
			if tc.wantPhase == infrav1.RunFailed && !strings.Contains(prog.Message, "step restore-state failed: "+refused) {
				t.Errorf("message %q", prog.Message)
			}
			c := fakeClient(t, append([]client.Object{tc.child}, tc.related...)...)
			if err := job.New().Drive(context.Background(), c, c, tc.child, prog, engine.DriveInput{Verify: seals.Verifier(job.New())}); err != nil {
				t.Fatalf("Drive: %v", err)
			}
			list := &batchv1.JobList{}
			if err := c.List(context.Background(), list); err != nil {
				t.Fatal(err)
			}
			created := ""
			for _, j := range list.Items {
				if j.Name == tc.child.Name || contains(tc.related, j.Name) {
					continue
				}
				created = j.Name
				var cs []string
				for _, c := range append(j.Spec.Template.Spec.InitContainers, j.Spec.Template.Spec.Containers...) {
					cs = append(cs, c.Name)
				}
				if runs := strings.Join(cs, " "); runs != tc.wantRuns {
					t.Errorf("Job %s runs %q, want %q", j.Name, runs, tc.wantRuns)
				}
				if sa := j.Spec.Template.Spec.ServiceAccountName; sa != tc.wantSA {
					t.Errorf("Job %s runs as %q, want %q", j.Name, sa, tc.wantSA)
				}
				if !metav1.IsControlledBy(&j, tc.child) || j.Labels[infrav1.StepLabel] == "" {
					t.Errorf("Job %s is not the child's: %+v", j.Name, j.ObjectMeta)
				}
			}
			if created != tc.wantNext {
				t.Errorf("the driver created %q, want %q", created, tc.wantNext)
			}
		})
	}
}
