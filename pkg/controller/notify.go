package controller

import (
	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// Notifier is told of the happenings people act on (pkg/notify sends them
// to the namespace's TerraformRunNotifiers). Notify must not block: a
// destination never holds up a pass.
type Notifier interface {
	Notify(run *infrav1.TerraformRun, ev infrav1.NotifyEvent, msg string)
}

// notifyEvents maps the reasons of the Events a pass emits to the
// happenings notifiers send: a plan waiting (each run starts without the
// Approved condition, so each run's gate transitions), drift found (once
// while it stands), the destroy's end. A run's end (applied, failed,
// rejected) is told by the finish* functions, since the condition of a
// second success or failure in a row does not transition. The notifier
// sends each happening of a run once (a pass repeated after a conflict).
var notifyEvents = map[string]infrav1.NotifyEvent{
	infrav1.ReasonAwaitingApproval: infrav1.NotifyApprovalRequired,
	infrav1.ReasonDestroyFailed:    infrav1.NotifyFailed,
	infrav1.ReasonDestroyTimeout:   infrav1.NotifyFailed,
	infrav1.ReasonDriftDetected:    infrav1.NotifyDriftDetected,
	reasonDestroyed:                infrav1.NotifyDestroyed,
}

// reasonDestroyed is the Event of a finished destroy.
const reasonDestroyed = "Destroyed"

func (r *TerraformRunReconciler) notify(run *infrav1.TerraformRun, reason, msg string) {
	if ev, ok := notifyEvents[reason]; ok {
		r.notifyOf(run, ev, msg)
	}
}

func (r *TerraformRunReconciler) notifyOf(run *infrav1.TerraformRun, ev infrav1.NotifyEvent, msg string) {
	if r.Notifier != nil {
		r.Notifier.Notify(run, ev, msg)
	}
}

// notifyEnd tells of a run's end, unless opr8r itself stopped it for a
// newer run (superseded): nobody acts on that.
func (r *TerraformRunReconciler) notifyEnd(run *infrav1.TerraformRun, st *passState, ev infrav1.NotifyEvent, msg string) {
	if ev == infrav1.NotifyFailed && st.child != nil && st.child.GetAnnotations()[engine.CancelledAnnotation] != "" {
		return
	}
	r.notifyOf(run, ev, msg)
}
