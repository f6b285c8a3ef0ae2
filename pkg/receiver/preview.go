package receiver

import (
	"context"
	"encoding/json"
	"fmt"
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
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/planpolicy"
	"github.com/opr8r/opr8r/pkg/records"
)

// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformruns,verbs=create;delete

// Preview is what a preview TerraformRun reports to (its
// infra.opr8r.io/preview annotation).
type Preview struct {
	Receiver string `json:"receiver"`
	Type     string `json:"type"`
	API      string `json:"api"`
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
	fork := len(pr.HeadRepos) > 0 && RepoKey(pr.HeadRepos[0]) != RepoKey(ev.Repos[0])
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
			if err := s.openPreview(ctx, rcv, run, name, ev); err != nil {
				return done, err
			}
		}
		done = append(done, name)
	}
	return done, nil
}

func (s *Server) openPreview(ctx context.Context, rcv *infrav1.TerraformRunReceiver, run *infrav1.TerraformRun, name string, ev Event) error {
	pr := ev.PR
	meta, _ := json.Marshal(Preview{Receiver: rcv.Name, Type: string(rcv.Spec.Type), API: pr.API, Owner: pr.Owner, Repo: pr.Repo, Number: pr.Number, Head: pr.HeadSHA, URL: pr.URL})
	var cur infrav1.TerraformRun
	err := s.API.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: name}, &cur)
	switch {
	case apierrors.IsNotFound(err):
		p := &infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: run.Namespace,
			Labels:          map[string]string{infrav1.PreviewOfLabel: run.Name, infrav1.PullRequestLabel: strconv.FormatInt(pr.Number, 10)},
			Annotations:     map[string]string{infrav1.PreviewAnnotation: string(meta)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: run.Name, UID: run.UID}},
		}, Spec: previewSpec(run, pr.HeadSHA)}
		if k, ok := run.Labels[infrav1.ShardLabel]; ok {
			p.Labels[infrav1.ShardLabel] = k
		}
		if err := s.Writer.Create(ctx, p); err != nil {
			return fmt.Errorf("creating preview %s: %w", name, err)
		}
	case err != nil:
		return err
	case cur.Labels[infrav1.PreviewOfLabel] != run.Name || !ownedBy(&cur, run):
		return fmt.Errorf("TerraformRun %s exists and is not %s's preview", name, run.Name)
	default:
		patch := map[string]any{
			"metadata": map[string]any{"annotations": map[string]string{infrav1.PreviewAnnotation: string(meta)}},
			"spec":     map[string]any{"source": map[string]any{"git": map[string]any{"ref": pr.HeadSHA}}},
		}
		b, _ := json.Marshal(patch)
		if err := s.Writer.Patch(ctx, &cur, client.RawPatch(types.MergePatchType, b)); err != nil {
			return fmt.Errorf("moving preview %s to %s: %w", name, short(pr.HeadSHA), err)
		}
	}
	// Pending at once, on the commit the forge shows.
	if rep, err := s.reporter(ctx, rcv, pr.API); err == nil {
		_ = rep.Status(ctx, pr.Owner, pr.Repo, pr.HeadSHA, statusContext(run.Namespace, name), "pending", "opr8r is planning "+short(pr.HeadSHA), "")
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
	var p Preview
	_ = json.Unmarshal([]byte(cur.Annotations[infrav1.PreviewAnnotation]), &p)
	if rep, err := s.reporter(ctx, rcv, p.API); err == nil {
		id, _ := strconv.ParseInt(cur.Annotations[infrav1.PreviewCommentAnnotation], 10, 64)
		if id == 0 {
			id, _ = rep.FindComment(ctx, p.Owner, p.Repo, p.Number, marker(namespace, cur.Labels[infrav1.PreviewOfLabel]))
		}
		if id > 0 {
			_, _ = rep.Comment(ctx, p.Owner, p.Repo, p.Number, id, fmt.Sprintf("%s\n### opr8r preview of `%s/%s`: closed\n\nThe pull request closed; its preview (TerraformRun `%s`, its runs and their records) was removed.\n",
				marker(namespace, cur.Labels[infrav1.PreviewOfLabel]), namespace, cur.Labels[infrav1.PreviewOfLabel], name))
		}
	}
	if err := s.Writer.Delete(ctx, &cur, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting preview %s: %w", name, err)
	}
	return nil
}

// tracking lists the TerraformRuns of the receiver's namespace (that it
// may wake) that track the event's repository and ref, from the API
// server, a page at a time.
func (s *Server) tracking(ctx context.Context, rcv *infrav1.TerraformRunReceiver, ev Event) ([]*infrav1.TerraformRun, error) {
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
		if err := s.API.List(ctx, &runs, append(opts, client.Continue(cont))...); err != nil {
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
func (s *Server) reporter(ctx context.Context, rcv *infrav1.TerraformRunReceiver, api string) (Reporter, error) {
	return reporterFor(ctx, s.API, rcv, api, s.HTTP)
}

func reporterFor(ctx context.Context, c client.Reader, rcv *infrav1.TerraformRunReceiver, api string, hc *http.Client) (Reporter, error) {
	if rcv.Spec.Previews == nil {
		return nil, fmt.Errorf("receiver %s has no spec.previews", rcv.Name)
	}
	var sec corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: rcv.Namespace, Name: rcv.Spec.Previews.TokenSecretRef.Name}, &sec); err != nil {
		return nil, fmt.Errorf("spec.previews.tokenSecretRef: %w", err)
	}
	tok := strings.TrimSpace(string(sec.Data[TokenKey]))
	if tok == "" {
		return nil, fmt.Errorf("spec.previews.tokenSecretRef: Secret %s has no key %q", sec.Name, TokenKey)
	}
	return NewReporter(rcv.Spec.Type, api, tok, hc)
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
}

// SetupPreviews adds the preview reporter to mgr.
func SetupPreviews(mgr ctrl.Manager, rec records.Store, hc *http.Client) error {
	req, _ := labels.NewRequirement(infrav1.PreviewOfLabel, selection.Exists, nil)
	isPreview := predicate.NewPredicateFuncs(func(o client.Object) bool { return req.Matches(labels.Set(o.GetLabels())) })
	return ctrl.NewControllerManagedBy(mgr).Named("preview").
		For(&infrav1.TerraformRun{}, builder.WithPredicates(isPreview, predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool { return true },
		})).
		Complete(&PreviewReporter{Client: mgr.GetClient(), API: mgr.GetAPIReader(), Records: rec, HTTP: hc})
}

// Reconcile reports a preview's latest run once per run and phase. It
// reads the preview from the API server: the cache may not show yet the
// comment it recorded a moment ago.
func (p *PreviewReporter) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var run infrav1.TerraformRun
	if err := p.API.Get(ctx, req.NamespacedName, &run); err != nil || run.DeletionTimestamp != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cur := run.Status.Run
	if cur == nil || run.Labels[infrav1.PreviewOfLabel] == "" {
		return ctrl.Result{}, nil
	}
	key := cur.ID + "/" + string(cur.Phase)
	if run.Annotations[infrav1.PreviewReportedAnnotation] == key {
		return ctrl.Result{}, nil
	}
	var pv Preview
	if err := json.Unmarshal([]byte(run.Annotations[infrav1.PreviewAnnotation]), &pv); err != nil {
		return ctrl.Result{}, nil
	}
	var rcv infrav1.TerraformRunReceiver
	if err := p.Client.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: pv.Receiver}, &rcv); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	rep, err := reporterFor(ctx, p.API, &rcv, pv.API, p.HTTP)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("preview not reported", "error", err.Error())
		return ctrl.Result{RequeueAfter: time.Minute}, nil
	}
	commit := cur.Commit
	if commit == "" {
		commit = run.Spec.Source.Git.Ref
	}
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
	link := dashboardLink(&rcv, &run)
	if err := rep.Status(ctx, pv.Owner, pv.Repo, commit, statusContext(run.Namespace, run.Name), state, desc, link); err != nil {
		return ctrl.Result{}, fmt.Errorf("commit status on %s: %w", short(commit), err)
	}
	id, _ := strconv.ParseInt(run.Annotations[infrav1.PreviewCommentAnnotation], 10, 64)
	if id == 0 {
		if id, err = rep.FindComment(ctx, pv.Owner, pv.Repo, pv.Number, marker(run.Namespace, tracked)); err != nil {
			return ctrl.Result{}, fmt.Errorf("comments of #%d: %w", pv.Number, err)
		}
	}
	if id, err = rep.Comment(ctx, pv.Owner, pv.Repo, pv.Number, id, p.body(ctx, &run, tracked, commit, state, link)); err != nil {
		return ctrl.Result{}, fmt.Errorf("comment on #%d: %w", pv.Number, err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		infrav1.PreviewReportedAnnotation: key, infrav1.PreviewCommentAnnotation: strconv.FormatInt(id, 10),
	}}})
	return ctrl.Result{}, p.Client.Patch(ctx, &run, client.RawPatch(types.MergePatchType, patch))
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
	if len(s) > 130 {
		s = s[:130] + "…"
	}
	return s
}

// body is the preview's comment: the plan's summary and the resources it
// changes (addresses and actions, from the verified plan as JSON, which
// masks sensitive values; no value is shown), or terraform's error, and
// how to see the whole plan.
func (p *PreviewReporter) body(ctx context.Context, run *infrav1.TerraformRun, tracked, commit, state, link string) string {
	var b strings.Builder
	cur := run.Status.Run
	fmt.Fprintf(&b, "%s\n### opr8r preview of `%s/%s` at `%s`\n\n", marker(run.Namespace, tracked), run.Namespace, tracked, short(commit))
	switch state {
	case "pending":
		fmt.Fprintf(&b, "Planning… (run `%s`, engine %s)\n", cur.ID, cur.Engine)
	case "error":
		fmt.Fprintf(&b, "Run `%s` was stopped for a newer commit; its plan follows.\n", cur.ID)
	case "failure":
		fmt.Fprintf(&b, "**The plan failed** (run `%s`, engine %s):\n\n```\n%s\n```\n", cur.ID, cur.Engine, truncate(cur.Message, 2000))
	default:
		pl := run.Status.Plan
		fmt.Fprintf(&b, "**Plan: %d to add, %d to change, %d to destroy** (run `%s`, engine %s, plan `%s`)\n\n", pl.Add, pl.Change, pl.Destroy, cur.ID, cur.Engine, short(strings.TrimPrefix(pl.Digest, "sha256:")))
		if changes := p.changes(ctx, run); len(changes) > 0 {
			b.WriteString("| action | resource |\n| --- | --- |\n")
			for _, c := range changes {
				fmt.Fprintf(&b, "| %s | `%s` |\n", strings.Join(c.Actions, ", "), c.Address)
			}
			b.WriteString("\n")
		}
	}
	if link != "" {
		fmt.Fprintf(&b, "\n[The run in the %s dashboard](%s).", cur.Engine, link)
	}
	fmt.Fprintf(&b, "\nThe whole plan: `kubectl tfrun plan %s -n %s`; logs: `kubectl tfrun logs %s -n %s`. Merging applies through `%s`'s approval policy.\n",
		run.Name, run.Namespace, run.Name, run.Namespace, tracked)
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
