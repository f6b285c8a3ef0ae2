// Package jobtest is the Job engine's kit for the shared test suites: the
// API server's own validation of Jobs (dry-run), and a simulator of the Job
// controller and the kubelet: it creates each Job's pod as the Job
// controller does, moves its containers through their states with their
// termination messages, and marks the Job Complete or Failed.
package jobtest

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/opr8r/opr8r/pkg/names"

	. "github.com/onsi/gomega" //nolint:revive // test support
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opr8r/opr8r/engines/job"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/engine/enginetest"
	"github.com/opr8r/opr8r/pkg/results"
)

// Kit returns the Job engine's test kit. Offline, a Job is checked for what
// the Job engine relies on; the API server's validation of it runs where an
// API server is (the integration suite dry-runs every child it creates).
func Kit() enginetest.Kit {
	return enginetest.Kit{
		Engine:      job.New(),
		Validate:    Validate,
		StartWrites: map[string]int{"create PersistentVolumeClaim": 1},
		NewSim:      func(env enginetest.Env, key client.ObjectKey) enginetest.Sim { return Sim{key: key, env: env} },
		StepObjects: func() []client.ObjectList {
			return []client.ObjectList{&batchv1.JobList{}, &corev1.PodList{}}
		},
	}
}

// Validate checks a child Job offline: one pod, never restarted, never
// retried, every container named, with an image and its termination message
// read from the file the step writes.
func Validate(obj client.Object) error {
	j, ok := obj.(*batchv1.Job)
	if !ok {
		return fmt.Errorf("jobtest: expected a Job, got %T", obj)
	}
	spec := j.Spec.Template.Spec
	switch {
	case j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit != 0:
		return fmt.Errorf("job %s: backoffLimit must be 0 (steps are not retried)", j.Name)
	case spec.RestartPolicy != corev1.RestartPolicyNever:
		return fmt.Errorf("job %s: restartPolicy must be Never", j.Name)
	case len(spec.Containers) != 1:
		return fmt.Errorf("job %s: want one container, got %d", j.Name, len(spec.Containers))
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		if c.Name == "" || c.Image == "" {
			return fmt.Errorf("job %s: a container without a name or image", j.Name)
		}
	}
	return nil
}

// Sim plays the Job controller and the kubelet for one run's Jobs.
type Sim struct {
	key client.ObjectKey
	env enginetest.Env
}

var _ enginetest.Sim = Sim{}

// Key implements enginetest.Sim.
func (s Sim) Key() client.ObjectKey { return s.key }

// Object implements enginetest.Sim.
func (s Sim) Object() client.Object { return s.job(s.key.Name) }

// Validate implements enginetest.Sim, and dry-runs the child's pod.
func (s Sim) Validate() error {
	j := s.job(s.key.Name)
	if err := Validate(j); err != nil {
		return err
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: j.Name + "-dryrun", Namespace: j.Namespace}, Spec: j.Spec.Template.Spec}
	return s.env.Client.Create(context.Background(), pod, client.DryRunAll)
}

// CancelRequested implements enginetest.Sim.
func (s Sim) CancelRequested() bool {
	return s.job(s.key.Name).Annotations[engine.CancelledAnnotation] != ""
}

func (s Sim) job(name string) *batchv1.Job {
	j := &batchv1.Job{}
	Expect(s.env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.key.Namespace, Name: name}, j)).To(Succeed())
	return j
}

// stepJob waits for the driver to create a step's Job and returns its name.
func (s Sim) stepJob(suffix string) string {
	name := s.key.Name + "-" + suffix
	Eventually(func() error {
		return s.env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.key.Namespace, Name: name}, &batchv1.Job{})
	}, s.env.Timeout, s.env.Interval).Should(Succeed(), "the driver creates Job %s", name)
	return name
}

// Start implements enginetest.Sim: the plan Job's pod ran install, clone
// and init; plan runs.
func (s Sim) Start() { s.StartAt(enginetest.DefaultCommit) }

// StartAt implements enginetest.Sim.
func (s Sim) StartAt(rev string) {
	commit, _ := json.Marshal(map[string]string{results.Commit: rev})
	s.runPod(s.key.Name, map[string]corev1.ContainerState{
		"install-opr8r-step": enginetest.Terminated(0, ""), names.StepClone: enginetest.Terminated(0, string(commit)),
		names.StepInit: enginetest.Terminated(0, ""), names.StepPlan: enginetest.Running(),
	})
}

// Plan implements enginetest.Sim: plan ends with its results in its
// termination message, and the plan Job completes.
func (s Sim) Plan(add, change, destroy int, digest string) {
	s.PlanResult(enginetest.PlanOf(add, change, destroy, digest))
}

// PlanResult implements enginetest.Sim.
func (s Sim) PlanResult(p results.Plan) {
	res, _ := json.Marshal(p.Values())
	s.runPod(s.key.Name, map[string]corev1.ContainerState{names.StepPlan: enginetest.Terminated(0, string(res))})
	s.finishJob(s.key.Name, true, "")
}

// Complete implements enginetest.Sim: the driver creates cleanup after a
// plan-only run's plan, and it runs.
func (s Sim) Complete() { s.CompleteAfterGate() }

// Suspend implements enginetest.Sim: the Job engine's gate is opr8r
// waiting; the simulator only waits for opr8r to see it.
func (s Sim) Suspend(string) {
	Eventually(func() string { st, _, _ := s.Gate(); return st }, s.env.Timeout, s.env.Interval).Should(Equal("Pending"))
}

// SkipGate implements enginetest.Sim: a plan without changes skips the gate
// by itself.
func (s Sim) SkipGate() {}

// Gate implements enginetest.Sim, from the decision in the child's
// annotations.
func (s Sim) Gate() (string, string, string) {
	a := s.job(s.key.Name).Annotations
	state := "Pending"
	switch a["infra.opr8r.io/gate-decision"] {
	case "approve":
		state = "Approved"
	case "reject":
		state = "Rejected"
	}
	return state, a["infra.opr8r.io/gate-message"], a["infra.opr8r.io/gate-digest"]
}

// FinishApply implements enginetest.Sim: apply (when the plan had
// changes), export-outputs and cleanup run, one after another in the pod of
// the Job the driver creates (apply's, or export-outputs' after a plan
// without changes).
func (s Sim) FinishApply(outputsJSON string) {
	suffix, steps := "export", []string{names.StepExport, names.StepCleanup}
	if s.planHasChanges() {
		suffix, steps = "apply", []string{names.StepApply, names.StepExport, names.StepCleanup}
	}
	name := s.stepJob(suffix)
	if outputsJSON != "" {
		enginetest.WriteRawOutputs(s.env, s.job(s.key.Name), outputsJSON)
	}
	s.succeed(name, steps...)
}

// Fail implements enginetest.Sim: the step's container exits 1 with its
// summary as termination message, its Job fails (apply's pod never gets to
// the cleanup it carries), and the Job of cleanup alone runs.
func (s Sim) Fail(step, msg string) {
	name := s.key.Name
	if step == names.StepApply {
		name = s.stepJob("apply")
	}
	states := map[string]corev1.ContainerState{"install-opr8r-step": enginetest.Terminated(0, "")}
	for _, before := range []string{names.StepClone, names.StepInit, names.StepPlan} {
		if before == step || name != s.key.Name {
			break
		}
		states[before] = enginetest.Terminated(0, "")
	}
	states[step] = enginetest.Terminated(1, msg)
	s.runPod(name, states)
	s.finishJob(name, false, "BackoffLimitExceeded")
	s.CompleteAfterGate()
}

// CompleteAfterGate implements enginetest.Sim: a plan Job the driver
// suspended (the run was stopped) is suspended as the Job controller does,
// then cleanup runs.
func (s Sim) CompleteAfterGate() {
	j := s.job(s.key.Name)
	if j.Annotations[engine.CancelledAnnotation] != "" && !finished(j) {
		// Cancel marks the run; the driver suspends its running plan Job
		// on its next pass, which the Job controller then acts on.
		Eventually(func() bool {
			j = s.job(s.key.Name)
			return j.Spec.Suspend != nil && *j.Spec.Suspend
		}, s.env.Timeout, s.env.Interval).Should(BeTrue(), "the driver suspends the cancelled plan Job %s", j.Name)
	}
	if j.Spec.Suspend != nil && *j.Spec.Suspend {
		s.suspendJob(j)
	}
	s.succeed(s.stepJob("cleanup"), names.StepCleanup)
}

// finished says whether the Job controller has ended a Job.
func finished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// suspendJob plays the Job controller on a suspended Job: its running pod
// is stopped and the Job gets the Suspended condition.
func (s Sim) suspendJob(j *batchv1.Job) {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobSuspended {
			return
		}
	}
	s.runPod(j.Name, map[string]corev1.ContainerState{names.StepPlan: enginetest.Terminated(143, "")})
	s.updateJob(j.Name, func(j *batchv1.Job) {
		now := enginetest.Now()
		j.Status.Active, j.Status.StartTime = 0, nil
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobSuspended, Status: corev1.ConditionTrue,
			Reason: "JobSuspended", Message: "Job suspended", LastTransitionTime: now})
	})
}

// SucceedDestroy implements enginetest.Sim.
func (s Sim) SucceedDestroy() {
	s.Start()
	s.Plan(0, 0, 1, enginetest.Digest("destroy"))
	s.FinishDestroy()
}

// FinishDestroy implements enginetest.Sim: apply and cleanup succeed, in
// the apply Job's pod.
func (s Sim) FinishDestroy() {
	s.succeed(s.stepJob("apply"), names.StepApply, names.StepCleanup)
}

func (s Sim) planHasChanges() bool {
	pod := &corev1.Pod{}
	Expect(s.env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.key.Namespace, Name: s.key.Name + "-pod"}, pod)).To(Succeed())
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == names.StepPlan && cs.State.Terminated != nil {
			res := map[string]string{}
			_ = json.Unmarshal([]byte(cs.State.Terminated.Message), &res)
			return res[results.HasChanges] == "true"
		}
	}
	return false
}

// succeed runs a step Job's pod (install, then its steps) to success.
func (s Sim) succeed(name string, steps ...string) {
	states := map[string]corev1.ContainerState{"install-opr8r-step": enginetest.Terminated(0, "")}
	for _, step := range steps {
		states[step] = enginetest.Terminated(0, "")
	}
	s.runPod(name, states)
	s.finishJob(name, true, "")
}

// runPod creates a Job's pod as the Job controller does, unless it exists,
// and sets the given containers' states as the kubelet reports them.
func (s Sim) runPod(jobName string, states map[string]corev1.ContainerState) {
	ctx := context.Background()
	j := s.job(jobName)
	key := client.ObjectKey{Namespace: j.Namespace, Name: jobName + "-pod"}
	pod := &corev1.Pod{}
	if err := s.env.Client.Get(ctx, key, pod); apierrors.IsNotFound(err) {
		labels := map[string]string{batchv1.ControllerUidLabel: string(j.UID), batchv1.JobNameLabel: j.Name}
		for k, v := range j.Spec.Template.Labels {
			labels[k] = v
		}
		pod = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: labels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(j, batchv1.SchemeGroupVersion.WithKind("Job"))}},
			Spec: j.Spec.Template.Spec,
		}
		Expect(s.env.Client.Create(ctx, pod)).To(Succeed())
		s.env.Writes.Add(1)
		s.updateJob(jobName, func(j *batchv1.Job) {
			now := enginetest.Now()
			j.Status.StartTime, j.Status.Active = &now, 1
		})
	} else {
		Expect(err).NotTo(HaveOccurred())
	}
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.env.Client.Get(ctx, key, pod); err != nil {
			return err
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.InitContainerStatuses = merge(pod.Spec.InitContainers, pod.Status.InitContainerStatuses, states)
		pod.Status.ContainerStatuses = merge(pod.Spec.Containers, pod.Status.ContainerStatuses, states)
		return s.env.Client.Status().Update(ctx, pod)
	})).To(Succeed())
	s.env.Writes.Add(1)
}

// merge sets the given states on a pod's container statuses.
func merge(specs []corev1.Container, have []corev1.ContainerStatus, states map[string]corev1.ContainerState) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, len(specs))
	for i, c := range specs {
		out[i] = corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}
		for _, h := range have {
			if h.Name == c.Name {
				out[i] = h
			}
		}
		if st, ok := states[c.Name]; ok {
			out[i].State = st
		}
	}
	return out
}

// finishJob marks a Job Complete or Failed the way the Job controller does:
// the success or failure target condition first, then the final one.
func (s Sim) finishJob(name string, ok bool, reason string) {
	s.updateJob(name, func(j *batchv1.Job) {
		now := enginetest.Now()
		if j.Status.StartTime == nil {
			j.Status.StartTime = &now
		}
		j.Status.Active = 0
		if ok {
			j.Status.Succeeded, j.Status.CompletionTime = 1, &now
			j.Status.Conditions = append(j.Status.Conditions,
				batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastTransitionTime: now},
				batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, LastTransitionTime: now})
			return
		}
		j.Status.Failed = 1
		j.Status.Conditions = append(j.Status.Conditions,
			batchv1.JobCondition{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: reason, Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
			batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason, Message: "Job has reached the specified backoff limit", LastTransitionTime: now})
	})
}

func (s Sim) updateJob(name string, fn func(*batchv1.Job)) {
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		j := s.job(name)
		fn(j)
		return s.env.Client.Status().Update(context.Background(), j)
	})).To(Succeed())
	s.env.Writes.Add(1)
}

// PassChecks implements enginetest.Sim: the driver creates the checks Job,
// each check's container exits 0 and the Job completes.
func (s Sim) PassChecks(checks ...string) {
	name := s.stepJob("checks")
	states := map[string]corev1.ContainerState{"install-opr8r-step": enginetest.Terminated(0, "")}
	for _, c := range checks {
		states[c] = enginetest.Terminated(0, "")
	}
	s.runPod(name, states)
	s.finishJob(name, true, "")
}

// FailCheck implements enginetest.Sim: in the checks Job's pod the passed
// checks exit 0 and the check exits 1 with its summary as termination
// message; the Job fails and cleanup runs.
func (s Sim) FailCheck(check, msg string, passed ...string) {
	name := s.stepJob("checks")
	states := map[string]corev1.ContainerState{"install-opr8r-step": enginetest.Terminated(0, "")}
	for _, c := range passed {
		states[c] = enginetest.Terminated(0, "")
	}
	states[check] = enginetest.Terminated(1, msg)
	s.runPod(name, states)
	s.finishJob(name, false, "BackoffLimitExceeded")
	s.CompleteAfterGate()
}
