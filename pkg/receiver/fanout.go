package receiver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Wake is what a push does to one TerraformRun that tracks its ref.
type Wake string

const (
	// WakeMark sets the push annotation to the push's commit.
	WakeMark Wake = "mark"
	// WakeAlready: the annotation is the push's commit already.
	WakeAlready Wake = "already"
	// WakeBehind: the push's commit is behind what the run was last
	// marked with, planned or applied; it never moves the run back.
	WakeBehind Wake = "behind"
)

// Decide is what push p does to run, given the receiver's recorded pushes:
// a pure function of the run's annotation and status.
func Decide(pushes []infrav1.ReceivedPush, p infrav1.ReceivedPush, run *infrav1.TerraformRun) Wake {
	marked := run.Annotations[infrav1.SourcePushAnnotation]
	if marked == p.Commit {
		return WakeAlready
	}
	have := []string{marked}
	if cur := run.Status.Run; cur != nil {
		have = append(have, cur.Commit)
	}
	if last := run.Status.LastApplied; last != nil {
		have = append(have, last.Revision)
	}
	for _, h := range have {
		if Behind(pushes, p, h) {
			return WakeBehind
		}
	}
	return WakeMark
}

// reconcilePushes wakes the TerraformRuns that track each pending push, in
// the order taken, and records the push as Done with what it woke (one
// write, with optimistic concurrency: a push the server appended meanwhile
// makes it a conflict and a retry, in which runs marked already are
// skipped). Emits a Normal Event Received for each push.
func (r *Reconciler) reconcilePushes(ctx context.Context, rcv *infrav1.TerraformRunReceiver) (ctrl.Result, error) {
	if !hasPending(rcv) {
		return ctrl.Result{}, nil
	}
	old := rcv.DeepCopy()
	var msgs []string
	for i := range rcv.Status.Pushes {
		p := &rcv.Status.Pushes[i]
		if p.State != infrav1.PushPending {
			continue
		}
		start := time.Now()
		woken, skipped, behind, err := r.wake(ctx, rcv, *p)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("waking the TerraformRuns of the push of %s to %s: %w", p.Ref, short(p.Commit), err)
		}
		p.State, p.Woken, p.Files, p.FilesKnown = infrav1.PushDone, int32(len(woken)), nil, false
		p.Message = truncate(fmt.Sprintf("%s %s moved to %s: %s", p.Event, p.Ref, short(p.Commit), wokeWhom(woken, skipped, behind)), 1000)
		msgs = append(msgs, p.Message)
		ctrl.LoggerFrom(ctx).Info("fanned out a push", "ref", p.Ref, "commit", p.Commit, "delivery", p.Delivery, "woken", len(woken), "skipped", skipped, "behind", behind, "took", time.Since(start).String())
	}
	if err := r.Client.Status().Patch(ctx, rcv, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{}, err
	}
	for _, m := range msgs {
		if r.Recorder != nil {
			r.Recorder.Eventf(rcv, nil, corev1.EventTypeNormal, "Received", "Webhook", "%s", m)
		}
	}
	return ctrl.Result{}, nil
}

// wake marks the runs that track p and are not marked already or ahead of
// it; it returns the runs that track it and are at p (marked now or
// before), how many of those it marked to take p without a plan
// (DecidePaths), and how many it left because p is behind them.
func (r *Reconciler) wake(ctx context.Context, rcv *infrav1.TerraformRunReceiver, p infrav1.ReceivedPush) ([]string, int, int, error) {
	runs, err := trackingRuns(ctx, r.API, rcv, Event{Ref: p.Ref, Repos: p.Repos})
	if err != nil {
		return nil, 0, 0, err
	}
	var woken []string
	skipped, behind := 0, 0
	for _, run := range runs {
		switch Decide(rcv.Status.Pushes, p, run) {
		case WakeBehind:
			behind++
			continue
		case WakeMark:
			v := DecidePaths(p, run)
			if !v.Plan {
				skipped++
			}
			if err := r.Client.Patch(ctx, run, client.RawPatch(types.MergePatchType, markPatch(p.Commit, v))); client.IgnoreNotFound(err) != nil {
				return woken, skipped, behind, fmt.Errorf("marking %s: %w", run.Name, err)
			}
		}
		woken = append(woken, run.Name)
	}
	return woken, skipped, behind, nil
}

// markPatch marks a run with a push's commit and, when its paths take the
// push without a plan, says so (SourcePushSkippedAnnotation); otherwise
// it removes an earlier skip.
func markPatch(commit string, v PathVerdict) []byte {
	skip := []byte("null")
	if !v.Plan {
		skip, _ = json.Marshal(truncate(commit+" "+v.Why, 500))
	}
	return fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q,%q:%s}}}`, infrav1.SourcePushAnnotation, commit, infrav1.SourcePushSkippedAnnotation, skip)
}

// trackingRuns lists the TerraformRuns of the receiver's namespace (that it
// may wake) that track the event's repository and ref, from the API
// server, a page at a time.
func trackingRuns(ctx context.Context, api client.Reader, rcv *infrav1.TerraformRunReceiver, ev Event) ([]*infrav1.TerraformRun, error) {
	sel := labels.Everything()
	if rcv.Spec.RunSelector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(rcv.Spec.RunSelector); err != nil {
			return nil, fmt.Errorf("spec.runSelector: %w", err)
		}
	}
	var out []*infrav1.TerraformRun
	opts := []client.ListOption{client.InNamespace(rcv.Namespace), client.MatchingLabelsSelector{Selector: sel}, client.Limit(500)}
	for cont := ""; ; {
		var runs infrav1.TerraformRunList
		if err := api.List(ctx, &runs, append(opts, client.Continue(cont))...); err != nil {
			return out, err
		}
		for i := range runs.Items {
			if run := &runs.Items[i]; run.DeletionTimestamp == nil && Tracks(run, ev) {
				out = append(out, run)
			}
		}
		if cont = runs.Continue; cont == "" {
			return out, nil
		}
	}
}

// wokeWhom says whom a push woke, naming at most ten runs.
func wokeWhom(runs []string, skipped, behind int) string {
	var b strings.Builder
	switch {
	case len(runs) == 0 && behind == 0:
		b.WriteString("no TerraformRun of this namespace tracks it")
	case len(runs) == 0:
		b.WriteString("woke no TerraformRun")
	case len(runs) <= 10:
		b.WriteString("woke TerraformRuns " + strings.Join(runs, ", "))
	default:
		fmt.Fprintf(&b, "woke %d TerraformRuns (%s, …)", len(runs), strings.Join(runs[:10], ", "))
	}
	if skipped > 0 {
		fmt.Fprintf(&b, "; %d of them without a plan: no file of their spec.source.git.paths changed", skipped)
	}
	if behind > 0 {
		fmt.Fprintf(&b, "; %d left alone: they are ahead of it", behind)
	}
	return b.String()
}

// truncate cuts s to at most n bytes, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
