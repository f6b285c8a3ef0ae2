package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/records"
)

// maxNumberSkips bounds how many run numbers a start may skip because other
// objects hold their names.
const maxNumberSkips = 100

// reconcileStart starts a new apply run when none is active and the spec
// changed, a rerun was requested, or the TerraformRun is new. Sets
// Reconciling (Progressing; Suspended with spec.suspend), Planned Unknown
// for the new run, and observedGeneration when nothing is left to do.
func (r *TerraformRunReconciler) reconcileStart(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	if st.active {
		return ctrl.Result{}, nil
	}
	trigger, detail, want := r.wantRun(run, st)
	n := newRun{typ: desiredType(run), trigger: trigger, detail: detail}
	if !want && st.requested != nil {
		n, want = *st.requested, true
	}
	if !want {
		run.Status.ObservedGeneration = run.Generation
		// A push of the commit the latest run used is handled without a run.
		if push := run.Annotations[infrav1.SourcePushAnnotation]; push != "" && !pushPending(run) && run.Spec.Source.Git != nil {
			if why, ok := pushSkipped(run); ok && run.Status.LastHandledPush != push {
				run.Status.LastSkippedPush = &infrav1.SkippedPush{Commit: push, Reason: infrav1.ReasonNoPathMatched, Message: why, At: metav1.NewTime(r.now())}
			}
			run.Status.LastHandledPush = push
		}
		return ctrl.Result{}, nil
	}
	if run.Spec.Suspend {
		st.report(suspended, infrav1.ReasonSuspended, "spec.suspend is true: no new run starts")
		return ctrl.Result{}, nil
	}
	if st.deps.blocked != nil {
		return ctrl.Result{}, st.deps.blocked
	}
	if !st.deps.ready() {
		st.report(progressing, infrav1.ReasonDependencyNotReady, fmt.Sprintf("run not started (%s): %s", n.trigger, st.deps.wait))
		return ctrl.Result{}, nil
	}
	e, err := r.engineFor(st.eff.Spec.Engine)
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.startRun(ctx, run, st, e, n)
}

// runPriority is a run's place in the queue of --max-active-runs: a
// pull request's preview waits behind the runs people asked for, as a
// scheduled check does.
func runPriority(run *infrav1.TerraformRun) int {
	if run.Labels[infrav1.PreviewOfLabel] != "" {
		return prioCheck
	}
	return prioRun
}

// desiredType is the type of the runs the spec asks for: plan with
// spec.planOnly, apply otherwise.
func desiredType(run *infrav1.TerraformRun) infrav1.RunType {
	if run.Spec.PlanOnly {
		return infrav1.RunPlan
	}
	return infrav1.RunApply
}

// wantRun says whether the spec asks for a new apply run, and why.
func (r *TerraformRunReconciler) wantRun(run *infrav1.TerraformRun, st *passState) (infrav1.RunTrigger, string, bool) {
	cur := run.Status.Run
	request := run.Annotations[infrav1.RunRequestAnnotation]
	switch {
	case cur == nil:
		return infrav1.TriggerCreated, "", true
	case cur.Type != desiredType(run) || cur.SpecHash != st.hash:
		return infrav1.TriggerSpecChange, fmt.Sprintf("spec hash %s -> %s", cur.SpecHash, st.hash), true
	case request != "" && request != run.Status.LastHandledRunRequest:
		return infrav1.TriggerRerunRequest, request, true
	case st.deps.change != nil:
		return st.deps.change.trigger, st.deps.change.detail, true
	case pushPending(run):
		return infrav1.TriggerSourceChange, "a push moved " + run.Spec.Source.Git.Ref + " to " + shortSHA(run.Annotations[infrav1.SourcePushAnnotation]), true
	}
	return "", "", false
}

// pushPending says whether a receiver marked the TerraformRun with a pushed
// commit (infra.opr8r.io/source-push) that no run has covered: not the
// commit of the latest run (or the last apply), and not handled before. A
// push of the commit already used starts nothing.
func pushPending(run *infrav1.TerraformRun) bool {
	push := run.Annotations[infrav1.SourcePushAnnotation]
	if push == "" || push == run.Status.LastHandledPush || run.Spec.Source.Git == nil {
		return false
	}
	if _, ok := pushSkipped(run); ok {
		return false
	}
	if cur := run.Status.Run; cur != nil && cur.Commit == push {
		return false
	}
	if last := run.Status.LastApplied; last != nil && last.Revision == push {
		return false
	}
	return true
}

// pushSkipped says whether the receiver marked the run's push to be taken
// without a plan (infra.opr8r.io/source-push-skipped names its commit: no
// file of spec.source.git.paths changed), and why.
func pushSkipped(run *infrav1.TerraformRun) (string, bool) {
	push := run.Annotations[infrav1.SourcePushAnnotation]
	sha, why, _ := strings.Cut(run.Annotations[infrav1.SourcePushSkippedAnnotation], " ")
	if push == "" || sha != push || len(run.Spec.Source.Git.Paths) == 0 {
		return "", false
	}
	return why, true
}

func shortSHA(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// newRun describes a run to start.
type newRun struct {
	typ     infrav1.RunType
	trigger infrav1.RunTrigger
	detail  string
}

// startRun creates the child of a new run under the next unused run number
// and records it in status.run. A racing or restarted reconcile that finds
// the child of that number, made by this TerraformRun for this run, adopts
// it instead of creating a second one.
func (r *TerraformRunReconciler) startRun(ctx context.Context, run *infrav1.TerraformRun, st *passState, e engine.Engine, n newRun) (ctrl.Result, error) {
	number, child, err := r.claimChild(ctx, run, st, e, n.typ)
	if err != nil {
		return ctrl.Result{}, err
	}
	name := names.ChildName(run.Name, n.typ, number)
	if other, err := r.otherActiveChild(ctx, run, e, name, number); err != nil {
		return ctrl.Result{}, err
	} else if other != "" {
		st.report(progressing, infrav1.ReasonProgressing, fmt.Sprintf("waiting for %s %s to finish before starting %s", e.ChildGVK().Kind, other, name))
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	if child == nil {
		if ok, wait := r.Limiter.Claim(client.ObjectKeyFromObject(run), name, runPriority(run)); !ok {
			st.report(progressing, infrav1.ReasonQueued, fmt.Sprintf("run %s is queued: %s", name, wait))
			return ctrl.Result{RequeueAfter: queueRetry}, nil
		}
		if child, err = r.createChild(ctx, run, st, e, n.typ, name, number); err != nil {
			r.Limiter.Release(run.Namespace, name)
			return ctrl.Result{}, err
		}
	} else {
		r.Limiter.Hold(client.ObjectKeyFromObject(run), name)
	}
	if err := r.createInputs(ctx, st.eff, child); err != nil {
		return ctrl.Result{}, err
	}
	r.setRunStarted(run, st, e, n, name, number)
	return ctrl.Result{}, nil
}

// setRunStarted records a started run in status.run and sets the conditions
// of a run in progress.
func (r *TerraformRunReconciler) setRunStarted(run *infrav1.TerraformRun, st *passState, e engine.Engine, n newRun, name string, number int64) {
	now := metav1.NewTime(r.now())
	gvk := e.ChildGVK()
	attempt := int32(1)
	if prev := run.Status.Run; prev != nil && prev.Type == n.typ && prev.SpecHash == st.hash {
		attempt = prev.Attempt + 1
	}
	run.Status.Run = &infrav1.RunStatus{
		ID: name, Number: number, Trigger: n.trigger, TriggerDetail: n.detail, Type: n.typ, Engine: e.Name(), SpecHash: st.hash, Attempt: attempt,
		Child:        infrav1.ChildReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: name},
		Phase:        infrav1.RunPending,
		StartedAt:    &now,
		Author:       author(run, st.hash),
		Authors:      runAuthors(run, n.trigger),
		Generation:   run.Generation,
		Dependencies: st.deps.used,
		ApprovalMode: approvalMode(st.eff, n.typ),
	}
	run.Status.LastRunNumber = number
	if n.trigger == infrav1.TriggerRerunRequest {
		run.Status.LastHandledRunRequest = run.Annotations[infrav1.RunRequestAnnotation]
	}
	if push := run.Annotations[infrav1.SourcePushAnnotation]; push != "" && n.typ != infrav1.RunDestroy {
		// Every run clones the ref's head, which a push already reached.
		run.Status.LastHandledPush = push
	}
	st.active = true
	reason := infrav1.ReasonProgressing
	if n.typ == infrav1.RunApply || n.typ == infrav1.RunDestroy {
		// A destroy plans and waits for approval like an apply.
		run.Status.Plan = nil
		run.Status.Approval = nil
		run.Status.Approvals = nil
		apimeta.RemoveStatusCondition(&run.Status.Conditions, infrav1.ApprovedCondition)
	}
	if n.typ == infrav1.RunApply {
		setStatus(run, infrav1.PlannedCondition, metav1Unknown, infrav1.ReasonProgressing, "run "+name+" is planning")
	} else {
		reason = infrav1.ReasonDestroying
		// A destroy, rare and the start of removing infrastructure, gets an
		// Event; an apply run's start is in status only (one write fewer).
		r.event(run, "Normal", "RunStarted", string(n.typ), fmt.Sprintf("started %s run %s as %s %s", n.typ, name, gvk.Kind, name))
	}
	// The message project() writes for a child that has not started, so the
	// reconcile that the child's creation triggers writes nothing.
	st.report(progressing, reason, fmt.Sprintf("run %s: %s", name, describeSteps(nil)))
	runsStarted.WithLabelValues(string(e.Name()), string(n.typ)).Inc()
}

// approvalMode is the approval a run of a type is started under: Manual
// when its pipeline has a gate.
func approvalMode(eff *infrav1.TerraformRun, t infrav1.RunType) infrav1.ApprovalMode {
	if pipeline.HasGate(eff, t) {
		return infrav1.ApprovalManual
	}
	return infrav1.ApprovalAuto
}

// claimChild returns the next run number whose child name is free or holds
// this run's own child (then returned, to adopt). Children of an earlier
// TerraformRun of the same name, and unsettled children this one made for
// another spec, keep their names: their numbers are skipped.
func (r *TerraformRunReconciler) claimChild(ctx context.Context, run *infrav1.TerraformRun, st *passState, e engine.Engine, t infrav1.RunType) (int64, client.Object, error) {
	first := run.Status.LastRunNumber + 1
	for n := first; n < first+maxNumberSkips; n++ {
		name := names.ChildName(run.Name, t, n)
		existing, err := r.cachedChild(ctx, run.Namespace, e, name)
		if err != nil {
			return 0, nil, err
		}
		if existing == nil {
			// A settled child is not cached whole: it is finished, so never
			// this run's to adopt, and its number is taken.
			if taken, err := r.settledChild(ctx, run.Namespace, e, name); err != nil || taken {
				if err != nil {
					return 0, nil, err
				}
				continue
			}
			return n, nil, nil
		}
		adopt, err := r.mayAdopt(ctx, run, st, existing, t)
		if err != nil || adopt {
			return n, existing, err
		}
	}
	return 0, nil, stalling(infrav1.ReasonInvalidSpec, "run numbers %d to %d all name objects that are not this TerraformRun's next run (%s); delete them", first, first+maxNumberSkips-1, names.ChildName(run.Name, t, first))
}

// cachedChild reads a child from the cache; nil when the cache lacks it.
func (r *TerraformRunReconciler) cachedChild(ctx context.Context, ns string, e engine.Engine, name string) (client.Object, error) {
	obj := e.NewChild()
	err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, generic("GetChild", err, "getting %s", name)
	}
	return obj, nil
}

// mayAdopt says whether an existing child is the one this run needs: made
// by this TerraformRun for the same type and spec. If the run's status on
// the API server already records it, the cache lags: errStaleCache.
func (r *TerraformRunReconciler) mayAdopt(ctx context.Context, run *infrav1.TerraformRun, st *passState, child client.Object, t infrav1.RunType) (bool, error) {
	l := child.GetLabels()
	if !metav1.IsControlledBy(child, run) || l[infrav1.RunTypeLabel] != string(t) || l[infrav1.SpecHashLabel] != st.hash {
		return false, nil
	}
	fresh := &infrav1.TerraformRun{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(run), fresh); err != nil {
		return false, generic("GetRun", err, "reading TerraformRun %s", run.Name)
	}
	if n, _ := strconv.ParseInt(l[infrav1.RunNumberLabel], 10, 64); n <= fresh.Status.LastRunNumber {
		return false, errStaleCache
	}
	return true, nil
}

// hasKeptStates says whether the TerraformRun has states earlier runs kept
// because their backend did not take them (records of kind
// errored.tfstate that it owns): the run it starts then pushes them first,
// as the runner (the restore-state step). It lists those records' Secrets
// only, once per run started.
func (r *TerraformRunReconciler) hasKeptStates(ctx context.Context, run *infrav1.TerraformRun) (bool, error) {
	if r.Records == nil {
		return false, nil
	}
	recs, err := records.ListKind(ctx, r.Records, run.Namespace, run.Name, records.KindErroredState)
	if err != nil {
		return false, generic("ListKeptStates", err, "looking for states earlier runs of %s kept", run.Name)
	}
	return len(records.KeptStates(recs, run.UID)) > 0, nil
}

// createChild builds and creates a run's child. A child that appeared since
// the cache was read is adopted if it is this run's, and skipped otherwise
// (the next pass claims the next number).
func (r *TerraformRunReconciler) createChild(ctx context.Context, run *infrav1.TerraformRun, st *passState, e engine.Engine, t infrav1.RunType, name string, number int64) (client.Object, error) {
	deps := st.deps.resolved
	if t == infrav1.RunDestroy {
		ds, err := r.resolveDependencies(ctx, run, true)
		if err != nil {
			return nil, err
		}
		deps = ds.resolved
	}
	if err := r.checkRules(st.eff); err != nil {
		return nil, err
	}
	// The stored run, not the defaulted copy: a preview's seal covers the
	// spec as stored (make e2e: every preview stalled when it was asked of
	// the copy).
	if err := r.checkSharedState(ctx, run); err != nil {
		return nil, err
	}
	kept, err := r.hasKeptStates(ctx, run)
	if err != nil {
		return nil, err
	}
	obj, err := e.Build(engine.Request{Run: st.eff, Type: t, Name: name, Number: number, SpecHash: st.hash, Config: r.Config, Dependencies: deps, KeptStates: kept,
		Preview: r.IsPreview != nil && r.IsPreview(run)})
	if err != nil {
		return nil, stalling(infrav1.ReasonInvalidSpec, "cannot build the pipeline: %w", err)
	}
	if err := r.Seals.Seal(e, obj); err != nil {
		return nil, generic("SealChild", err, "sealing %s %s", e.ChildGVK().Kind, name)
	}
	if err := r.checkRunnerAccounts(st.eff); err != nil {
		return nil, err
	}
	if err := r.guardChild(ctx, run.Namespace, name, st.eff.Spec.Runner.ServiceAccountName, st.eff.Spec.Runner.PlanServiceAccountName); err != nil {
		return nil, err
	}
	if err := r.ensureProviderCache(ctx, run.Namespace); err != nil {
		return nil, err
	}
	err = r.Create(ctx, obj)
	switch {
	case err == nil:
		return obj, nil
	case apimeta.IsNoMatchError(err):
		r.Available.Set(e.Name(), false)
		return nil, waiting(infrav1.ReasonEngineUnavailable, DefaultEngineRetryPeriod, "engine %q is unavailable: %w", e.Name(), err)
	case !apierrors.IsAlreadyExists(err):
		return nil, generic("CreateChild", err, "creating %s %s", e.ChildGVK().Kind, name)
	}
	existing := e.NewChild()
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
		return nil, generic("GetChild", err, "adopting %s %s", e.ChildGVK().Kind, name)
	}
	if adopt, err := r.mayAdopt(ctx, run, st, existing, t); err != nil || !adopt {
		return nil, generic("ClaimChild", fmt.Errorf("%s %s appeared and is not this run's", e.ChildGVK().Kind, name), "starting run %d", number)
	}
	return existing, nil
}

// createInputs creates the ConfigMap the child mounts, owned by the child,
// when the inputs are too large to travel in the child
// (pipeline.EmbeddedInputs); small ones cost no write here.
func (r *TerraformRunReconciler) createInputs(ctx context.Context, eff *infrav1.TerraformRun, child client.Object) error {
	cms, err := pipeline.InputObjects(eff, child.GetName())
	if err != nil {
		return &StallingError{Reason: infrav1.ReasonInvalidSpec, Err: err}
	}
	for _, cm := range cms {
		if err := controllerutil.SetControllerReference(child, cm, r.Scheme()); err != nil {
			return generic("OwnInputs", err, "owning ConfigMap %s", cm.Name)
		}
		// Created without looking first: it is new, except when a child is
		// adopted, and then AlreadyExists is success. Never reading
		// ConfigMaps keeps them out of the manager's cache and watches.
		err := r.Create(ctx, cm)
		switch {
		case err == nil, apierrors.IsAlreadyExists(err):
		case apierrors.IsInvalid(err):
			// Too large (vars and inline files share one ConfigMap, at most
			// 1 MiB): no retry fixes that.
			return stalling(infrav1.ReasonInvalidSpec, "the inputs ConfigMap %s is refused: %w; keep inline files and vars under 1 MiB together, or use a git or configMapRef source", cm.Name, err)
		default:
			return generic("CreateInputs", err, "creating ConfigMap %s", cm.Name)
		}
	}
	return nil
}

// otherActiveChild returns the name of an unfinished child of this
// TerraformRun other than name, if any. An unfinished child that status
// does not record (left by a crash, or a check) is asked to stop. The list
// is read from the API server, not the cache: a check created a moment ago
// may not be cached yet, and a run must never start beside it. The first
// run of a TerraformRun (number 1) has no other child: checks come after a
// run, and claimChild adopts an unrecorded child of number 1 or skips its
// number. So starting new TerraformRuns in bulk lists nothing.
func (r *TerraformRunReconciler) otherActiveChild(ctx context.Context, run *infrav1.TerraformRun, e engine.Engine, name string, number int64) (string, error) {
	if number == 1 {
		return "", nil
	}
	if other, err := r.activeChildIn(ctx, run, e, name); err != nil || other != "" || !r.mayCheck(run) {
		return other, err
	}
	// The other engines' too, for a run with checks: spec.engine may have
	// changed while a check of the old engine runs (admission holds it only
	// while status.run is active). Each is a read past the cache, so runs
	// without checks, most starts, skip them.
	for _, o := range r.availableEngines() {
		if o.Name() == e.Name() {
			continue
		}
		if other, err := r.activeChildIn(ctx, run, o, name); err != nil || other != "" {
			return other, err
		}
	}
	return "", nil
}

// mayCheck says whether a run has or may have had scheduled checks.
func (r *TerraformRunReconciler) mayCheck(run *infrav1.TerraformRun) bool {
	return run.Spec.Interval != nil || run.Status.Drift != nil || r.mayHaveChecks(run)
}

// availableEngines are the registered engines whose CRDs the cluster serves.
func (r *TerraformRunReconciler) availableEngines() []engine.Engine {
	var out []engine.Engine
	for _, e := range r.Engines.All() {
		if r.Available.IsAvailable(e.Name()) {
			out = append(out, e)
		}
	}
	return out
}

// activeChildIn is otherActiveChild within one engine.
func (r *TerraformRunReconciler) activeChildIn(ctx context.Context, run *infrav1.TerraformRun, e engine.Engine, name string) (string, error) {
	children, err := r.listChildrenFrom(ctx, r.APIReader, run, e)
	if err != nil {
		return "", err
	}
	for _, obj := range children {
		if obj.GetName() == name || isSettled(obj) {
			// A settled child finished (it was seen so when labelled), and
			// its step objects have left the cache that observe reads.
			continue
		}
		observe := r.observe
		if storedIn(obj, run.Status) {
			observe = r.observeSettled
		}
		prog, err := observe(ctx, e, obj)
		if err != nil || prog.Finished {
			continue
		}
		if c, ok := e.(engine.Canceller); ok && (run.Status.Run == nil || run.Status.Run.ID != obj.GetName()) {
			if err := c.Cancel(ctx, r.Client, obj, "not recorded as this TerraformRun's run"); err != nil {
				return "", generic("CancelOrphan", err, "stopping %s", obj.GetName())
			}
		}
		return obj.GetName(), nil
	}
	return "", nil
}

// listChildren lists the children this TerraformRun controls, from the
// cache.
func (r *TerraformRunReconciler) listChildren(ctx context.Context, run *infrav1.TerraformRun, e engine.Engine) ([]client.Object, error) {
	return r.listChildrenFrom(ctx, r.Client, run, e)
}

// listChildrenFrom lists the children this TerraformRun controls with rd.
func (r *TerraformRunReconciler) listChildrenFrom(ctx context.Context, rd client.Reader, run *infrav1.TerraformRun, e engine.Engine) ([]client.Object, error) {
	list := e.NewChildList()
	if err := rd.List(ctx, list, client.InNamespace(run.Namespace), client.MatchingLabels{infrav1.RunNameLabel: run.Name}); err != nil {
		if apimeta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, generic("ListChildren", err, "listing children")
	}
	items, err := apimeta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	var out []client.Object
	for _, it := range items {
		if obj, ok := it.(client.Object); ok && metav1.IsControlledBy(obj, run) {
			out = append(out, obj)
		}
	}
	return out, nil
}

// author is the author of a run of the spec with this hash: the author of
// the previous run when it ran the same spec (a rerun, a moved source),
// else the user who last changed the spec (stamped at admission). So a
// later write that leaves the hash alone (an approval decision in the spec,
// a timeout) does not make its writer the author of someone else's change.
// authors are the users who changed a hashed field of the spec since the
// last applied run (SpecAuthorsAnnotation), sorted; without that stamp (a
// cluster without opr8r's admission policies), the last author alone.
func authors(run *infrav1.TerraformRun) []string {
	lines, ok := run.Annotations[infrav1.SpecAuthorsAnnotation]
	if !ok {
		if a := run.Annotations[infrav1.SpecAuthorAnnotation]; a != "" {
			return []string{a}
		}
		return nil
	}
	var users []string
	for _, l := range strings.Split(lines, "\n") {
		gen, user, ok := strings.Cut(l, " ")
		g, err := strconv.ParseInt(gen, 10, 64)
		if !ok || err != nil || user == "" || g <= run.Status.LastAppliedGeneration || slices.Contains(users, user) {
			continue
		}
		users = append(users, user)
	}
	slices.Sort(users)
	return users
}

// runAuthors are the authors of a run started by trigger: those of the
// spec (authors), and, for a run someone asked for (kubectl tfrun rerun),
// who asked (RunRequestedByAnnotation, stamped at admission): the rerun
// re-reads what the run takes from ConfigMaps and Secrets, which they may
// have changed.
func runAuthors(run *infrav1.TerraformRun, trigger infrav1.RunTrigger) []string {
	out := authors(run)
	if by := run.Annotations[infrav1.RunRequestedByAnnotation]; trigger == infrav1.TriggerRerunRequest && by != "" && !slices.Contains(out, by) {
		out = append(out, by)
		slices.Sort(out)
	}
	return out
}

func author(run *infrav1.TerraformRun, hash string) string {
	if prev := run.Status.Run; prev != nil && prev.SpecHash == hash && prev.Author != "" {
		return prev.Author
	}
	return run.Annotations[infrav1.SpecAuthorAnnotation]
}

// checkRunnerAccounts stalls a run whose steps would run as a service
// account the install does not list as a runner: the admission policies
// (opr8r-identities) guard only the install's runners, and the guard list
// names only them, so a name a TerraformRun chose never widens who may
// write a run's Secrets or a kept state (issue 49).
func (r *TerraformRunReconciler) checkRunnerAccounts(run *infrav1.TerraformRun) error {
	for _, f := range []struct{ field, sa string }{
		{"spec.runner.serviceAccountName", run.Spec.Runner.ServiceAccountName},
		{"spec.runner.planServiceAccountName", run.Spec.Runner.PlanServiceAccountName},
	} {
		if f.sa != "" && !r.Config.IsRunnerAccount(f.sa) {
			return stalling(infrav1.ReasonInvalidSpec, "%s: %s is not one of this install's runner service accounts (%s); "+
				"the installer lists the accounts steps may run as (the manager's --runner-service-accounts, the chart's identities.runnerServiceAccounts, "+
				"and ConfigMap opr8r-identities' runnerServiceAccounts, which the admission policies read): ask them to add it, or leave the field unset for %s",
				f.field, f.sa, strings.Join(r.runnerAccounts(), ", "), r.Config.RunnerServiceAccount)
		}
	}
	return nil
}

// runnerAccounts lists the install's runner service accounts.
func (r *TerraformRunReconciler) runnerAccounts() []string {
	var out []string
	for _, sa := range append([]string{r.Config.RunnerServiceAccount, r.Config.PlanServiceAccount, r.Config.CheckServiceAccount, r.Config.PreviewServiceAccount}, r.Config.RunnerServiceAccounts...) {
		if sa != "" && !slices.Contains(out, sa) {
			out = append(out, sa)
		}
	}
	return out
}
