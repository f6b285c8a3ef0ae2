//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// TestSupersede: a spec change while a plan waits for approval stops that
// run on the real engine (Argo's shutdown Stop, Tekton's
// CancelledRunFinally, the Job driver's stop), whose cleanup still runs;
// the stopped child says superseded; the changed spec is planned, approved
// and applied, and the superseded plan never is. The envtest simulators
// play each engine's stop; this is where the engines themselves do.
func TestSupersede(t *testing.T) {
	// The scenario tests run side by side (make e2e runs the faults of
	// TestChaos apart, after them).
	t.Parallel()
	e := setup(t)
	for _, engine := range allEngines() {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			supersede(t, e, engine)
		})
	}
}

func supersede(t *testing.T, e *env, engine string) {
	name := "super-" + engine
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), &infrav1.TerraformRun{ObjectMeta: objMeta(name)}) })
	e.sh(t, manifest(name, engine, "First"), e.kubectl, "apply", "-f", "-")
	run := e.waitFor(t, name, "a plan awaiting approval", 5*time.Minute, awaiting(""))
	old := *run.Status.Run

	e.sh(t, manifest(name, engine, "Second"), e.kubectl, "apply", "-f", "-")
	run = e.waitFor(t, name, "the changed spec's plan awaiting approval", 6*time.Minute, awaiting(old.Child.Name))
	if run.Status.Run.Number <= old.Number || run.Status.Run.Trigger != infrav1.TriggerSpecChange {
		t.Fatalf("the new run is %s (number %d, trigger %s), want a later number than %d, trigger SpecChange", run.Status.Run.ID, run.Status.Run.Number, run.Status.Run.Trigger, old.Number)
	}

	// The superseded run is recorded, not as a success.
	var rec *infrav1.RunRecord
	for i := range run.Status.History {
		if run.Status.History[i].ID == old.ID {
			rec = &run.Status.History[i]
		}
	}
	if rec == nil {
		t.Fatalf("the superseded run %s is not in status.history: %+v", old.ID, run.Status.History)
	}
	if rec.Result == infrav1.RunSucceeded || (rec.Approval != nil && rec.Approval.Approved) {
		t.Fatalf("the superseded run is recorded as %s, approval %+v", rec.Result, rec.Approval)
	}
	r, _ := json.Marshal(rec)
	t.Logf("%s: the superseded run's record: %s", name, r)

	// Its child on the engine says so, for the dashboards' lists.
	gv := strings.Split(old.Child.APIVersion, "/")
	resource := strings.ToLower(old.Child.Kind)
	if len(gv) == 2 {
		resource += "." + gv[0]
	}
	label := e.sh(t, "", e.kubectl, "get", resource, old.Child.Name, "-n", ns,
		"-o", `jsonpath={.metadata.labels.infra\.opr8r\.io/approval}`)
	if strings.TrimSpace(label) != infrav1.ApprovalLabelSuperseded {
		t.Fatalf("the superseded %s %s is labelled %s=%q, want %q", old.Child.Kind, old.Child.Name, infrav1.ApprovalLabel, label, infrav1.ApprovalLabelSuperseded)
	}

	// The engine stopped it with its cleanup, and its apply never ran.
	steps := func(step string) []corev1.Pod {
		pods := &corev1.PodList{}
		if err := e.c.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{
			infrav1.RunNameLabel: name, infrav1.StepLabel: step, infrav1.RunNumberLabel: strconv.FormatInt(old.Number, 10),
		}); err != nil {
			t.Fatal(err)
		}
		return pods.Items
	}
	cleaned := false
	for _, p := range steps("cleanup") {
		t.Logf("%s: run %d's cleanup pod %s: %s", name, old.Number, p.Name, p.Status.Phase)
		cleaned = cleaned || p.Status.Phase == corev1.PodSucceeded
	}
	if !cleaned {
		t.Fatalf("run %d was stopped without its cleanup succeeding (cleanup pods: %d)", old.Number, len(steps("cleanup")))
	}
	if n := len(steps("apply")); n != 0 {
		t.Fatalf("run %d's apply made %d pods: the superseded plan was applied", old.Number, n)
	}
	switch err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "tfstate-default-" + name}, &corev1.Secret{}); {
	case err == nil:
		if _, resources := e.state(t, name); resources != 0 {
			t.Fatalf("the state holds %d resources before any approval", resources)
		}
	case !apierrors.IsNotFound(err):
		t.Fatal(err)
	}
	if n := e.locks(t, name); n != 0 {
		t.Fatalf("the superseded run left the state locked")
	}
	e.recordChild(t, old.Engine, old.Child.Name, "stopped")

	// The changed spec's plan goes through as any other.
	e.sh(t, "", e.tfrun, "approve", name, "-n", ns, "--plan", run.Status.Plan.Digest)
	e.waitFor(t, name, "the changed spec applied", 5*time.Minute, ready)
	e.checkOutputs(t, name, "Second")
}
