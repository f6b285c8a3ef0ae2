package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/planpolicy"
	"github.com/opr8r/opr8r/pkg/records"
)

// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformruns,verbs=create;delete

// Preview is what a preview TerraformRun reports to (its
// infra.opr8r.io/preview annotation). The forge's address is not in it:
// it is the receiver's spec.previews.apiURL.
type Preview struct {
	Receiver string `json:"receiver"`
	Type     string `json:"type"`
	Owner    string `json:"owner"`
	Repo     string `json:"repo"`
	Number   int64  `json:"number"`
	Head     string `json:"head"`
	URL      string `json:"url,omitempty"`
}

// PreviewName is the preview TerraformRun of a run and a pull request:
// <run>-pr<number>, the run's name cut to keep it within 40 characters.
func PreviewName(run string, number int64) string {
	suffix := fmt.Sprintf("-pr%d", number)
	if len(run)+len(suffix) > 40 {
		run = strings.TrimRight(run[:40-len(suffix)], "-")
	}
	return run + suffix
}

// previewSpec is a preview's spec: the tracked run's, planning the pull
// request's head commit and never applying (planOnly), against the run's
// own state (the same backend and state Secret: a preview shows what the
// pull request would change), without approval policy, schedule or
// destroy.
func previewSpec(run *infrav1.TerraformRun, head string) infrav1.TerraformRunSpec {
	s := *run.Spec.DeepCopy()
	s.PlanOnly = true
	s.Source.Git.Ref = head
	s.Interval = nil
	s.DriftRemediation = ""
	s.Suspend = false
	s.DeletionPolicy = infrav1.DeletionRetain
	s.Approval = infrav1.ApprovalSpec{}
	if s.Backend == nil || (s.Backend.Kubernetes == nil && s.Backend.ConfigSecretRef == nil) {
		s.Backend = &infrav1.BackendSpec{Kubernetes: &infrav1.KubernetesBackend{SecretSuffix: names.StateSecretSuffix(run.Name)}}
	} else if s.Backend.Kubernetes != nil && s.Backend.Kubernetes.SecretSuffix == "" {
		s.Backend.Kubernetes.SecretSuffix = names.StateSecretSuffix(run.Name)
	}
	return s
}

// previews acts on a pull request event for the runs that track its base
// branch: a preview of the head commit made or moved to it, or, when the
// pull request closed, its preview's comment marked closed and the
// preview deleted. A pull request from another repository (a fork) is not
// previewed: its code would run with the run's credentials.
func (s *Server) previews(ctx context.Context, rcv *infrav1.TerraformRunReceiver, ev Event) ([]string, error) {
	runs, err := s.tracking(ctx, rcv, ev)
	if err != nil {
		return nil, err
	}
	pr := ev.PR
	// A head repository the event does not name (GitHub's head.repo is null
	// once a fork is deleted) counts as a fork: fail closed.
	fork := len(pr.HeadRepos) == 0 || RepoKey(pr.HeadRepos[0]) != RepoKey(ev.Repos[0])
	var done []string
	for _, run := range runs {
		if run.Labels[infrav1.PreviewOfLabel] != "" {
			continue // a preview tracks a commit, never a branch
		}
		name := PreviewName(run.Name, pr.Number)
		switch {
		case pr.Action == PRClosed:
			if err := s.closePreview(ctx, rcv, run, name); err != nil {
				return done, err
			}
		case fork:
			s.event(rcv, corev1.EventTypeNormal, "PreviewSkipped", fmt.Sprintf("pull request #%d comes from another repository: not previewed (its code would plan with %s's credentials)", pr.Number, run.Name))
			continue
		default:
			err := s.openPreview(ctx, rcv, run, name, ev)
			var skip *skipError
			if errors.As(err, &skip) {
				ctrl.LoggerFrom(ctx).Info("preview skipped", "run", run.Name, "pullRequest", pr.Number, "reason", skip.reason)
				s.event(rcv, corev1.EventTypeWarning, skip.event, fmt.Sprintf("pull request #%d: %s", pr.Number, skip.reason))
				continue
			}
			if err != nil {
				return done, err
			}
		}
		done = append(done, name)
	}
	return done, nil
}

// skipError is a pull request not previewed for one tracked run, which
// leaves the others' previews and the webhook's answer alone: a
// TerraformRun of the preview's name that is not the run's preview, or a
// cap reached.
type skipError struct{ event, reason string }

func (e *skipError) Error() string { return e.reason }

// openPreview makes run's preview of the pull request's head, or moves
// it there, seals it, and sets its pending status on the forge. A
// TerraformRun of that name that is not run's preview, or a cap reached,
// is a skipError.
func (s *Server) openPreview(ctx context.Context, rcv *infrav1.TerraformRunReceiver, run *infrav1.TerraformRun, name string, ev Event) error {
	pr := ev.PR
	pv := Preview{Receiver: rcv.Name, Type: string(rcv.Spec.Type), Owner: pr.Owner, Repo: pr.Repo, Number: pr.Number, Head: pr.HeadSHA, URL: pr.URL}
	var cur infrav1.TerraformRun
	err := s.API.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: name}, &cur)
	switch {
	case apierrors.IsNotFound(err):
		if err := s.checkCaps(ctx, rcv, run, name, pv); err != nil {
			return err
		}
		p := newPreview(run, name, pv)
		if err := s.Writer.Create(ctx, p); err != nil {
			return fmt.Errorf("creating preview %s: %w", name, err)
		}
		cur = *p
	case err != nil:
		return err
	case cur.Labels[infrav1.PreviewOfLabel] != run.Name || !ownedBy(&cur, run):
		return &skipError{event: "PreviewSkipped", reason: fmt.Sprintf("TerraformRun %s exists and is not %s's preview: not previewed", name, run.Name)}
	default:
		if err := s.movePreview(ctx, &cur, run, pv); err != nil {
			return err
		}
	}
	if err := s.seal(ctx, &cur, pv); err != nil {
		return err
	}
	// Pending at once, on the commit the forge shows.
	if rep, err := s.reporter(ctx, rcv); err == nil {
		_ = setStatus(ctx, rep, pv, statusContext(run.Namespace, name), "pending", "opr8r is planning "+short(pr.HeadSHA), "")
	}
	return nil
}

// newPreview is run's preview of a pull request, as the manager makes it.
func newPreview(run *infrav1.TerraformRun, name string, pv Preview) *infrav1.TerraformRun {
	meta, _ := json.Marshal(pv)
	p := &infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: run.Namespace,
		Labels:          map[string]string{infrav1.PreviewOfLabel: run.Name, infrav1.PullRequestLabel: strconv.FormatInt(pv.Number, 10)},
		Annotations:     map[string]string{infrav1.PreviewAnnotation: string(meta)},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: run.Name, UID: run.UID}},
		Finalizers:      []string{infrav1.PreviewFinalizer},
	}, Spec: previewSpec(run, pv.Head)}
	if k, ok := run.Labels[infrav1.ShardLabel]; ok {
		p.Labels[infrav1.ShardLabel] = k
	}
	return p
}

// movePreview moves run's preview cur to the pull request's new head: its
// spec made again from run's (whatever else someone wrote into it), its
// labels and annotation the manager's.
func (s *Server) movePreview(ctx context.Context, cur, run *infrav1.TerraformRun, pv Preview) error {
	want := newPreview(run, cur.Name, pv)
	orig := cur.DeepCopy()
	cur.Spec = want.Spec
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	maps.Copy(cur.Labels, want.Labels)
	maps.Copy(cur.Annotations, want.Annotations)
	if err := s.Writer.Patch(ctx, cur, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("moving preview %s to %s: %w", cur.Name, short(pv.Head), err)
	}
	return nil
}

func (s *Server) closePreview(ctx context.Context, rcv *infrav1.TerraformRunReceiver, run *infrav1.TerraformRun, name string) error {
	namespace := run.Namespace
	var cur infrav1.TerraformRun
	if err := s.API.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &cur); err != nil {
		return client.IgnoreNotFound(err)
	}
	if cur.Labels[infrav1.PreviewOfLabel] != run.Name || !ownedBy(&cur, run) {
		// Not this run's preview: a TerraformRun of that name that someone
		// else made is never deleted by a webhook.
		return nil
	}
	if IsManagersPreview(s.Seals, &cur) {
		if rep, err := s.reporter(ctx, rcv); err == nil {
			pv, _ := previewOf(&cur)
			_ = reportClosed(ctx, rep, s.Seals, &cur, pv, "The pull request closed")
		}
	}
	if err := s.Writer.Delete(ctx, &cur, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting preview %s: %w", name, err)
	}
	return nil
}

// tracking lists the TerraformRuns of the receiver's namespace (that it
// may wake) that track the event's repository and ref (trackingRuns).
func (s *Server) tracking(ctx context.Context, rcv *infrav1.TerraformRunReceiver, ev Event) ([]*infrav1.TerraformRun, error) {
	return trackingRuns(ctx, s.API, rcv, ev)
}

// ownedBy says whether o has an owner reference to run (by UID).
func ownedBy(o metav1.Object, run *infrav1.TerraformRun) bool {
	for _, r := range o.GetOwnerReferences() {
		if r.UID == run.UID {
			return true
		}
	}
	return false
}

func statusContext(namespace, name string) string { return "opr8r/" + namespace + "/" + name }

// dashboardLink is the link to a preview's run in its engine's dashboard
// (spec.previews.dashboardURLs), or "".
func dashboardLink(rcv *infrav1.TerraformRunReceiver, run *infrav1.TerraformRun) string {
	cur := run.Status.Run
	if rcv.Spec.Previews == nil || cur == nil {
		return ""
	}
	tmpl := rcv.Spec.Previews.DashboardURLs[string(cur.Engine)]
	if tmpl == "" {
		return ""
	}
	return strings.NewReplacer("{namespace}", url.PathEscape(run.Namespace), "{child}", url.PathEscape(cur.Child.Name)).Replace(tmpl)
}

// marker starts each preview comment, so that people (and opr8r) see whose
// it is.
func marker(namespace, run string) string {
	return fmt.Sprintf("<!-- opr8r-preview %s/%s -->", namespace, run)
}

// reporter is the forge client of a receiver's previews.
func (s *Server) reporter(ctx context.Context, rcv *infrav1.TerraformRunReceiver) (Reporter, error) {
	return reporterFor(ctx, s.API, rcv, s.HTTP)
}

// setStatus sets a preview's commit status, its description made plain
// text.
func setStatus(ctx context.Context, rep Reporter, pv Preview, context, state, desc, link string) error {
	return rep.Status(ctx, pv.Owner, pv.Repo, pv.Head, context, state, StatusText(desc), link)
}

// reportClosed edits a preview's comment (if it has one) to say that the
// preview is gone, and why.
func reportClosed(ctx context.Context, rep Reporter, seals engine.Seals, run *infrav1.TerraformRun, pv Preview, why string) error {
	tracked := run.Labels[infrav1.PreviewOfLabel]
	id := commentID(seals, run)
	if id == 0 {
		var err error
		if id, err = rep.FindComment(ctx, pv.Owner, pv.Repo, pv.Number, marker(run.Namespace, tracked)); err != nil || id == 0 {
			return err
		}
	}
	_, err := rep.Comment(ctx, pv.Owner, pv.Repo, pv.Number, id, fmt.Sprintf("%s\n### opr8r preview of %s: closed\n\n%s; its preview (TerraformRun %s, its runs and their records) was removed.\n",
		marker(run.Namespace, tracked), CodeSpan(run.Namespace+"/"+tracked, 300), why, CodeSpan(run.Name, 100)))
	return err
}

// PreviewReporter reports preview TerraformRuns on their forge as their
// runs move: a commit status on the head commit (pending, success with the
// plan's summary, failure with terraform's error) and one comment on the
// pull request, made once and edited in place. It runs on the leader.
type PreviewReporter struct {
	Client client.Client
	// API reads the receivers' token Secrets.
	API client.Reader
	// Records reads the plan as JSON (masked) the plan step kept.
	Records records.Store
	// HTTP reaches the forges (nil: egress.Client).
	HTTP *http.Client
	// Seals verifies that a preview is one the manager made (and seals the
	// comment's id it records).
	Seals engine.Seals
}

// SetupPreviews adds the preview reporter to mgr.
func SetupPreviews(mgr ctrl.Manager, rec records.Store, hc *http.Client, seals engine.Seals) error {
	req, _ := labels.NewRequirement(infrav1.PreviewOfLabel, selection.Exists, nil)
	isPreview := predicate.NewPredicateFuncs(func(o client.Object) bool { return req.Matches(labels.Set(o.GetLabels())) })
	return ctrl.NewControllerManagedBy(mgr).Named("preview").
		For(&infrav1.TerraformRun{}, builder.WithPredicates(isPreview, predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool { return true },
		})).
		Complete(&PreviewReporter{Client: mgr.GetClient(), API: mgr.GetAPIReader(), Records: rec, HTTP: hc, Seals: seals})
}

// Reconcile reports a preview's latest run once per run and phase, only
// for a preview the manager made (its seal verifies), to the forge at its
// receiver's address. It reads the preview from the API server: the cache
// may not show yet the comment it recorded a moment ago.
func (p *PreviewReporter) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var run infrav1.TerraformRun
	if err := p.API.Get(ctx, req.NamespacedName, &run); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if run.DeletionTimestamp != nil {
		return p.finalize(ctx, &run)
	}
	cur := run.Status.Run
	if cur == nil || run.Labels[infrav1.PreviewOfLabel] == "" {
		return ctrl.Result{}, nil
	}
	key := cur.ID + "/" + string(cur.Phase)
	if run.Annotations[infrav1.PreviewReportedAnnotation] == key {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx)
	if !IsManagersPreview(p.Seals, &run) {
		log.Info("not reported: a TerraformRun labelled as a preview whose seal does not verify (not made by the manager, or changed since)")
		return ctrl.Result{}, nil
	}
	pv, _ := previewOf(&run)
	var rcv infrav1.TerraformRunReceiver
	if err := p.Client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: pv.Receiver}, &rcv); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	rep, err := reporterFor(ctx, p.API, &rcv, p.HTTP)
	if err != nil {
		log.Info("preview not reported", "error", err.Error())
		return ctrl.Result{RequeueAfter: time.Minute}, nil
	}
	id, err := p.report(ctx, rep, &rcv, &run, pv)
	if wait, ok := retryAfter(err); ok {
		log.Info("preview not reported yet: the forge asks to wait", "after", wait, "error", err.Error())
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		infrav1.PreviewReportedAnnotation: key, infrav1.PreviewCommentAnnotation: commentRef(p.Seals, &run, id),
	}}})
	return ctrl.Result{}, p.Client.Patch(ctx, &run, client.RawPatch(types.MergePatchType, patch))
}

// PreviewCloseAttempts bounds the tries to tell the forge that a deleted
// preview's tracked run was deleted; then the finalizer goes anyway.
const PreviewCloseAttempts = 3

// finalize tells the forge, when a preview goes because its tracked run was
// deleted, that the preview closed (its comment edited, its commit status
// set to error), then removes PreviewFinalizer. A preview that goes while
// its tracked run stays (its pull request closed, which the webhook
// reported, or someone deleted it) is only let go. The forge is tried at
// most PreviewCloseAttempts times, a few seconds apart: a forge that is
// down, a receiver or Secret already deleted (a namespace going) never
// holds the deletion.
func (p *PreviewReporter) finalize(ctx context.Context, run *infrav1.TerraformRun) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(run, infrav1.PreviewFinalizer) {
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx)
	tracked, gone, err := p.trackedGone(ctx, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	tries := closeAttempts(run)
	if gone && IsManagersPreview(p.Seals, run) && tries < PreviewCloseAttempts {
		err := p.reportDeleted(ctx, run, tracked)
		if err != nil && !errors.Is(err, errNoReporter) {
			tries++
			log.Info("could not tell the forge the preview closed", "try", tries, "of", PreviewCloseAttempts, "error", err.Error())
			if tries < PreviewCloseAttempts {
				patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{infrav1.PreviewCloseAttemptsAnnotation: strconv.Itoa(tries)}}})
				if err := p.Client.Patch(ctx, run, client.RawPatch(types.MergePatchType, patch)); err != nil {
					return ctrl.Result{}, client.IgnoreNotFound(err)
				}
				return ctrl.Result{RequeueAfter: time.Duration(tries) * 5 * time.Second}, nil
			}
			log.Info("gave up telling the forge the preview closed; letting it go")
		}
	}
	orig := run.DeepCopy()
	controllerutil.RemoveFinalizer(run, infrav1.PreviewFinalizer)
	return ctrl.Result{}, client.IgnoreNotFound(p.Client.Patch(ctx, run, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})))
}

// closeAttempts is how many tries to tell the forge the preview closed
// were made: 0 without the annotation (or empty). Only the manager writes it
// (opr8r-previews), but a value it could not have written (not a number,
// negative, above PreviewCloseAttempts) counts as every try made: the
// preview is let go, never held nor retried without end.
func closeAttempts(run *infrav1.TerraformRun) int {
	v := run.Annotations[infrav1.PreviewCloseAttemptsAnnotation]
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > PreviewCloseAttempts {
		return PreviewCloseAttempts
	}
	return n
}

// trackedGone says whether the preview's tracked run is deleted or being
// deleted (or is another run of that name now), and its name.
func (p *PreviewReporter) trackedGone(ctx context.Context, run *infrav1.TerraformRun) (string, bool, error) {
	name := run.Labels[infrav1.PreviewOfLabel]
	var tracked infrav1.TerraformRun
	err := p.API.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: name}, &tracked)
	if apierrors.IsNotFound(err) {
		return name, true, nil
	}
	if err != nil {
		return name, false, err
	}
	return name, tracked.DeletionTimestamp != nil || !ownedBy(run, &tracked), nil
}

// errNoReporter: the preview's receiver, its previews or its credentials
// are gone; nothing can be told.
var errNoReporter = errors.New("no reporter")

// reportDeleted edits the preview's comment to say its tracked run was
// deleted and sets its commit status to error.
func (p *PreviewReporter) reportDeleted(ctx context.Context, run *infrav1.TerraformRun, tracked string) error {
	pv, _ := previewOf(run)
	var rcv infrav1.TerraformRunReceiver
	if err := p.Client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: pv.Receiver}, &rcv); err != nil {
		if apierrors.IsNotFound(err) {
			return errNoReporter
		}
		return err
	}
	rep, err := reporterFor(ctx, p.API, &rcv, p.HTTP)
	if err != nil {
		return errors.Join(errNoReporter, err)
	}
	why := "The tracked TerraformRun " + CodeSpan(tracked, 300) + " was deleted"
	if err := setStatus(ctx, rep, pv, statusContext(run.Namespace, run.Name), "error", "closed: the tracked run "+tracked+" was deleted", ""); err != nil {
		return fmt.Errorf("commit status on %s: %w", short(pv.Head), err)
	}
	return reportClosed(ctx, rep, p.Seals, run, pv, why)
}

// report sets the preview's commit status and its comment, and returns the
// comment's id.
func (p *PreviewReporter) report(ctx context.Context, rep Reporter, rcv *infrav1.TerraformRunReceiver, run *infrav1.TerraformRun, pv Preview) (int64, error) {
	cur := run.Status.Run
	commit := cur.Commit
	if commit == "" {
		commit = run.Spec.Source.Git.Ref
	}
	pv.Head = commit
	state, desc := "pending", "opr8r is planning "+short(commit)
	switch {
	case cur.Phase == infrav1.RunSucceeded && run.Status.Plan != nil:
		state, desc = "success", "plan "+run.Status.Plan.Summary
	case isEnded(cur.Phase) && strings.HasPrefix(cur.Message, "stopped: superseded"):
		// opr8r stopped it for a newer commit: that commit has its own.
		state, desc = "error", "superseded: a newer commit is planned"
	case isEnded(cur.Phase):
		state, desc = "failure", firstLine(cur.Message)
	}
	tracked := run.Labels[infrav1.PreviewOfLabel]
	link := dashboardLink(rcv, run)
	if err := setStatus(ctx, rep, pv, statusContext(run.Namespace, run.Name), state, desc, link); err != nil {
		return 0, fmt.Errorf("commit status on %s: %w", short(commit), err)
	}
	id := commentID(p.Seals, run)
	if id == 0 {
		var err error
		if id, err = rep.FindComment(ctx, pv.Owner, pv.Repo, pv.Number, marker(run.Namespace, tracked)); err != nil {
			return 0, fmt.Errorf("comments of #%d: %w", pv.Number, err)
		}
	}
	id, err := rep.Comment(ctx, pv.Owner, pv.Repo, pv.Number, id, p.body(ctx, run, tracked, commit, state, link))
	if err != nil {
		return 0, fmt.Errorf("comment on #%d: %w", pv.Number, err)
	}
	return id, nil
}

// retryAfter is how long the forge asked to wait, when err says so.
func retryAfter(err error) (time.Duration, bool) {
	var rl *RateLimitedError
	if errors.As(err, &rl) {
		return rl.After, true
	}
	return 0, false
}

func isEnded(p infrav1.RunPhase) bool {
	switch p {
	case infrav1.RunSucceeded, infrav1.RunFailed, infrav1.RunRejected:
		return true
	}
	return false
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// body is the preview's comment: the plan's summary and the resources it
// changes (addresses and actions, from the verified plan as JSON, which
// masks sensitive values; no value is shown), or terraform's error, and
// how to see the whole plan.
func (p *PreviewReporter) body(ctx context.Context, run *infrav1.TerraformRun, tracked, commit, state, link string) string {
	var b strings.Builder
	cur := run.Status.Run
	id, eng := CodeSpan(cur.ID, 100), Word(strings.ToLower(string(cur.Engine)))
	fmt.Fprintf(&b, "%s\n### opr8r preview of %s at %s\n\n", marker(run.Namespace, tracked), CodeSpan(run.Namespace+"/"+tracked, 300), CodeSpan(short(commit), 20))
	switch state {
	case "pending":
		fmt.Fprintf(&b, "Planning… (run %s, engine %s)\n", id, eng)
	case "error":
		fmt.Fprintf(&b, "Run %s was stopped for a newer commit; its plan follows.\n", id)
	case "failure":
		fmt.Fprintf(&b, "**The plan failed** (run %s, engine %s):\n\n%s", id, eng, CodeBlock(cur.Message, MaxErrorRunes))
	default:
		pl := run.Status.Plan
		fmt.Fprintf(&b, "**Plan: %d to add, %d to change, %d to destroy%s** (run %s, engine %s, plan %s)\n\n", pl.Add, pl.Change, pl.Destroy, planExtras(pl), id, eng, CodeSpan(short(strings.TrimPrefix(pl.Digest, "sha256:")), 20))
		b.WriteString(changesTable(p.changes(ctx, run)))
	}
	if link != "" {
		fmt.Fprintf(&b, "\n[The run in the %s dashboard](<%s>).", eng, strings.NewReplacer("<", "%3C", ">", "%3E").Replace(link))
	}
	fmt.Fprintf(&b, "\nThe whole plan: `kubectl tfrun plan %s -n %s`; logs: `kubectl tfrun logs %s -n %s`. Merging applies through %s's approval policy.\n",
		run.Name, run.Namespace, run.Name, run.Namespace, CodeSpan(tracked, 100))
	return b.String()
}

// changesTable is the markdown table of the resources a plan changes:
// actions as terraform's words only, addresses as code spans they cannot
// leave.
func changesTable(changes []planpolicy.ResourceChange) string {
	if len(changes) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| action | resource |\n| --- | --- |\n")
	for _, c := range changes {
		actions := make([]string, len(c.Actions))
		for i, a := range c.Actions {
			actions[i] = Word(a)
		}
		fmt.Fprintf(&b, "| %s | %s |\n", strings.Join(actions, ", "), CodeSpan(c.Address, 300))
	}
	b.WriteString("\n")
	return b.String()
}

// changes are the resources the plan changes, read from the plan as JSON
// (masked) only when its digest is the one the plan step recorded.
func (p *PreviewReporter) changes(ctx context.Context, run *infrav1.TerraformRun) []planpolicy.ResourceChange {
	pl := run.Status.Plan
	if p.Records == nil || pl == nil || pl.JSONDigest == "" {
		return nil
	}
	b, err := p.Records.Get(ctx, records.Key{Namespace: run.Namespace, Run: run.Name, RunID: run.Status.Run.ID, Step: names.StepPlan, Kind: records.KindPlanJSON})
	if err != nil || records.Digest(b) != pl.JSONDigest {
		return nil
	}
	plan, err := planpolicy.FromJSON(b)
	if err != nil {
		return nil
	}
	var out []planpolicy.ResourceChange
	for _, c := range plan.ResourceChanges {
		if c.Mode == "managed" && !(len(c.Actions) == 1 && c.Actions[0] == "no-op") {
			out = append(out, c)
		}
	}
	if len(out) > 50 {
		out = out[:50]
	}
	return out
}

// planExtras is what else a plan does to what is managed, as terraform
// says it ("Plan: 0 to add, 0 to change, 0 to destroy, 2 to import"):
// imports, removals from the state, moves, action invocations.
func planExtras(pl *infrav1.PlanStatus) string {
	var s string
	for _, c := range []struct {
		n    int32
		what string
	}{{pl.Import, "to import"}, {pl.Forget, "to forget"}, {pl.Move, "to move"}, {pl.Actions, "action(s) to invoke"}} {
		if c.n > 0 {
			s += fmt.Sprintf(", %d %s", c.n, c.what)
		}
	}
	return s
}
