package job

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
)

// Drive implements engine.Driver: it keeps the workspace volume while the
// run lives, stops what a cancellation stops, and creates the next step's
// Job when the previous one is done: apply once opr8r recorded the plan's
// approval (in.Decision; or at once with Auto approval), with export-outputs
// and cleanup after it in its pod; export-outputs and cleanup after a plan
// without changes; a Job of cleanup alone when no Job's pod ran it. What it
// creates comes from the child only while the child matches the seal opr8r
// kept (in.Verify). Creating is idempotent: a Job of the run that exists is
// left as it is; one of that name that is not the run's is refused.
func (e Engine) Drive(ctx context.Context, c client.Client, api client.Reader, obj client.Object, prog engine.Progress, in engine.DriveInput) error {
	child, ok := obj.(*batchv1.Job)
	if !ok {
		return fmt.Errorf("job: expected a Job, got %T", obj)
	}
	if prog.Finished {
		return deleteWorkspace(ctx, c, child)
	}
	if err := e.ensureWorkspace(ctx, c, api, child, in.Verify); err != nil {
		return err
	}
	related, err := e.Related(ctx, c, child)
	if err != nil {
		return err
	}
	// What is due is read from this one view: prog was observed from an
	// earlier read, and a step Job that ended between the two would read
	// as done with its pod's steps still running (a cleanup it carried
	// would be taken for undone, and made again).
	if prog, err = e.Observe(child, related, time.Now()); err != nil {
		return err
	}
	v := newView(child, related)
	if child.Annotations[annoCancelled] != "" {
		if err := stopActive(ctx, c, v); err != nil {
			return err
		}
	}
	next, digest := nextStep(v, prog, in.Decision)
	if next == "" {
		return nil
	}
	full, err := verified(ctx, api, child, in.Verify)
	if err != nil {
		return err
	}
	return createStepJob(ctx, c, api, full, next, digest)
}

// nextStep is the step whose Job should exist now and does not, with the
// plan digest apply is bound to ("" when no Job is due).
func nextStep(v runView, prog engine.Progress, d *engine.RecordedDecision) (string, string) {
	step, digest := dueStep(v, prog, d)
	if step == "" || v.jobs[step] != nil || (step == names.StepCleanup && anyActive(v)) {
		return "", ""
	}
	return step, digest
}

// dueStep is the step the run has reached: the plan Job first, then apply
// once opr8r recorded the approval of this plan (d), export-outputs (apply
// runs), and cleanup after everything else, or as soon as the run was
// stopped, rejected or failed. A decision read from the child's own
// annotations never counts: tenants may write them.
func dueStep(v runView, prog engine.Progress, d *engine.RecordedDecision) (string, string) {
	if !jobDone(v.child) || v.unread(time.Now()) != "" {
		return "", ""
	}
	rejected := d != nil && !d.Approved
	stopped := v.child.Annotations[annoCancelled] != "" || rejected
	if v.restores() {
		if step, decided := restoreStep(v, prog, stopped); decided {
			return step, ""
		}
	}
	if stopped || prog.Plan == nil || stepPhase(prog.Steps, names.StepPlan) != infrav1.StepSucceeded {
		return names.StepCleanup, ""
	}
	if len(v.checks()) > 0 && prog.Plan.HasChanges {
		checks := v.jobs[stepChecks]
		switch {
		case checks == nil:
			return stepChecks, ""
		case !jobDone(checks):
			return "", ""
		case !v.checksPassed(prog.Steps):
			return names.StepCleanup, ""
		}
	}
	if v.planOnly() {
		return names.StepCleanup, ""
	}
	if prog.Plan.HasChanges {
		apply := v.jobs[names.StepApply]
		switch {
		case apply == nil && v.child.Annotations[annoApproval] != approvalManual:
			return names.StepApply, prog.Plan.Digest
		case apply == nil && d != nil && d.Approved && d.Digest == prog.Plan.Digest:
			return names.StepApply, d.Digest
		case apply == nil || !jobDone(apply):
			return "", ""
		case stepPhase(prog.Steps, names.StepApply) != infrav1.StepSucceeded:
			return names.StepCleanup, ""
		}
	}
	if v.child.Labels[infrav1.RunTypeLabel] == string(infrav1.RunApply) {
		switch export := v.holder(names.StepExport); {
		case export == nil:
			return names.StepExport, ""
		case !jobDone(export):
			return "", ""
		}
	}
	if v.cleanedUp(prog.Steps) {
		return "", ""
	}
	return names.StepCleanup, ""
}

// restoreStep is the step due in a child that ran restore-state ("" to
// wait), and whether it is decided here: the plan Job comes after the
// restore, and once the plan Job has finished, dueStep goes on.
func restoreStep(v runView, prog engine.Progress, stopped bool) (string, bool) {
	switch plan := v.jobs[names.StepPlan]; {
	case stopped || stepPhase(prog.Steps, names.StepRestoreState) != infrav1.StepSucceeded:
		if plan == nil || jobDone(plan) {
			return names.StepCleanup, true
		}
		return "", true
	case plan == nil:
		return names.StepPlan, true
	case !jobDone(plan):
		return "", true
	}
	return "", false
}

// anyActive says whether any of the run's Jobs still runs.
func anyActive(v runView) bool {
	for step, j := range v.jobs {
		if step != names.StepCleanup && !jobDone(j) {
			return true
		}
	}
	return false
}

// stopActive stops a cancelled run's active Job: the child and the plan
// Job are suspended (the pod is stopped, the Job stays as the run's
// record), a later step's Job is deleted.
func stopActive(ctx context.Context, c client.Client, v runView) error {
	for step, j := range v.jobs {
		if step == names.StepCleanup || jobDone(j) {
			continue
		}
		if step == names.StepPlan || j == v.child {
			if j.Spec.Suspend != nil && *j.Spec.Suspend {
				continue
			}
			patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"suspend":true}}`))
			if err := c.Patch(ctx, j, patch); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			continue
		}
		if err := c.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// ensureWorkspace creates the run's workspace volume claim unless it
// exists. It reads the child past the cache, which keeps no annotations
// the driver alone needs, and only while it matches the seal.
func (Engine) ensureWorkspace(ctx context.Context, c client.Client, api client.Reader, child *batchv1.Job, verify func(client.Object) error) error {
	pvc := &corev1.PersistentVolumeClaim{}
	err := api.Get(ctx, client.ObjectKey{Namespace: child.Namespace, Name: workspaceName(child.Name)}, pvc)
	if !apierrors.IsNotFound(err) {
		return err
	}
	full, err := verified(ctx, api, child, verify)
	if err != nil {
		return err
	}
	claim, err := workspaceClaim(full)
	if err != nil {
		return err
	}
	if err := c.Create(ctx, claim); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the workspace of %s: %w", child.Name, err)
	}
	return nil
}

func deleteWorkspace(ctx context.Context, c client.Client, child *batchv1.Job) error {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: child.Namespace, Name: workspaceName(child.Name)}}
	if err := c.Delete(ctx, pvc); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the workspace of %s: %w", child.Name, err)
	}
	return nil
}

func fullChild(ctx context.Context, api client.Reader, child *batchv1.Job) (*batchv1.Job, error) {
	full := &batchv1.Job{}
	if err := api.Get(ctx, client.ObjectKeyFromObject(child), full); err != nil {
		return nil, fmt.Errorf("reading job %s: %w", child.Name, err)
	}
	return full, nil
}

// createStepJob creates a later step's Job from the steps the child (read
// whole, and sealed) carries, with the child's pod settings, owned by the
// child.
func createStepJob(ctx context.Context, c client.Client, api client.Reader, full *batchv1.Job, step, digest string) error {
	child := full
	var later laterSteps
	if err := json.Unmarshal([]byte(full.Annotations[annoSteps]), &later); err != nil {
		return fmt.Errorf("job %s has no readable %s annotation: %w", child.Name, annoSteps, err)
	}
	var steps []pipeline.Step
	switch step {
	case stepChecks:
		for _, s := range later.Steps {
			if names.IsCheck(s.Name) {
				steps = append(steps, s)
			}
		}
	case names.StepPlan:
		// After restore-state: clone, init and plan in one pod.
		for _, s := range later.Steps {
			if s.Name == names.StepClone || s.Name == names.StepInit || s.Name == names.StepPlan {
				steps = append(steps, s)
			}
		}
	default:
		for _, name := range pipeline.Carried(step, infrav1.RunType(child.Labels[infrav1.RunTypeLabel])) {
			for _, s := range later.Steps {
				if s.Name == name {
					steps = append(steps, s)
				}
			}
		}
	}
	if len(steps) == 0 || (step != stepChecks && step != names.StepPlan && steps[0].Name != step) || (step == names.StepPlan && steps[len(steps)-1].Name != step) {
		return fmt.Errorf("job %s carries no %s step", child.Name, step)
	}
	carries := make([]string, len(steps))
	for i, s := range steps {
		carries[i] = s.Name
	}
	p := pipelineOf(full, later.Volumes)
	tmpl := podTemplate(p, replacer(child.Name), step, installImage(full), steps...)
	setEnv(&tmpl.Spec, corev1.EnvVar{Name: envOwnerUID, Value: string(child.UID)}, corev1.EnvVar{Name: envApprovedDigest, Value: digest})
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: stepJobName(child.Name, step), Namespace: child.Namespace, Labels: jobLabels(p, child.Name, step),
			Annotations:     map[string]string{annoCarries: strings.Join(carries, ",")},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(child, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: jobSpec(tmpl, pipeline.Deadline(steps...)),
	}
	err := c.Create(ctx, j)
	if apierrors.IsAlreadyExists(err) {
		return ownJob(ctx, api, child, j.Name)
	}
	if err != nil {
		return fmt.Errorf("creating job %s: %w", j.Name, err)
	}
	return nil
}

// ownJob checks that an existing Job of a step's name is the run's: made
// for the child and controlled by it. One someone else made first (to have
// opr8r take it for its own) is refused.
func ownJob(ctx context.Context, api client.Reader, child *batchv1.Job, name string) error {
	j := &batchv1.Job{}
	if err := api.Get(ctx, client.ObjectKey{Namespace: child.Namespace, Name: name}, j); err != nil {
		return fmt.Errorf("reading job %s: %w", name, err)
	}
	if j.Labels[ChildLabel] != child.Name || !metav1.IsControlledBy(j, child) {
		return fmt.Errorf("job %s exists and is not run %s's (not made for it and controlled by it): opr8r does not drive it; delete it", name, child.Name)
	}
	return nil
}

// pipelineOf rebuilds the pod-level settings of a run from its child.
func pipelineOf(child *batchv1.Job, volumes []corev1.Volume) *pipeline.Pipeline {
	spec := child.Spec.Template.Spec
	labels := maps.Clone(child.Labels)
	for _, k := range []string{ChildLabel, EngineLabel, infrav1.StepLabel} {
		delete(labels, k)
	}
	p := &pipeline.Pipeline{
		Name: child.Name, Namespace: child.Namespace, Volumes: volumes, Labels: labels,
		ServiceAccountName: spec.ServiceAccountName, PodSecurityContext: spec.SecurityContext,
		NodeSelector: spec.NodeSelector, Tolerations: spec.Tolerations,
	}
	if len(spec.Containers) > 0 {
		p.ImagePullPolicy = spec.Containers[0].ImagePullPolicy
	}
	p.StepBinaryImage = stepBinaryImage(child)
	return p
}

// stepBinaryImage is the step image the child's pod mounts opr8r-step
// from (an image volume), or "" when it installs it (installImage).
func stepBinaryImage(child *batchv1.Job) string {
	for _, v := range child.Spec.Template.Spec.Volumes {
		if v.Name == pipeline.StepBinVolume && v.Image != nil {
			return v.Image.Reference
		}
	}
	return ""
}

// installImage is the step image the child installs opr8r-step from.
func installImage(child *batchv1.Job) string {
	for _, c := range child.Spec.Template.Spec.InitContainers {
		if c.Name == "install-opr8r-step" {
			return c.Image
		}
	}
	return ""
}

// setEnv sets env in every step container (the checks Job runs all but
// the last check as init containers), not in the installer of opr8r-step.
func setEnv(spec *corev1.PodSpec, env ...corev1.EnvVar) {
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name != "install-opr8r-step" {
			spec.InitContainers[i].Env = append(spec.InitContainers[i].Env, env...)
		}
	}
	for i := range spec.Containers {
		spec.Containers[i].Env = append(spec.Containers[i].Env, env...)
	}
}
