package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// DependsOnIndex indexes TerraformRuns by the dependencies they name in
// spec.dependsOn, as namespace/name: the dependents of a TerraformRun are
// found with it.
const DependsOnIndex = "spec.dependsOn"

// maxDependencyDepth bounds the walk that looks for cycles.
const maxDependencyDepth = 100

// depKey is a dependency's namespace/name.
func depKey(ns, name string) string { return ns + "/" + name }

// dependencyNamespace is where a dependency of run lives.
func dependencyNamespace(run *infrav1.TerraformRun, d infrav1.Dependency) string {
	if d.Namespace != "" {
		return d.Namespace
	}
	return run.Namespace
}

// dependsOnKeys is the index value of a TerraformRun: its dependencies.
func dependsOnKeys(o client.Object) []string {
	run, ok := o.(*infrav1.TerraformRun)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(run.Spec.DependsOn))
	for _, d := range run.Spec.DependsOn {
		out = append(out, depKey(dependencyNamespace(run, d), d.Name))
	}
	return out
}

// depDisplay names a dependency for messages: its name, or namespace/name
// when it is in another namespace than from.
func depDisplay(fromNS, ns, name string) string {
	if ns == fromNS {
		return name
	}
	return ns + "/" + name
}

// depState is what a pass learned of the run's dependencies.
type depState struct {
	// blocked is why a run may not start: a waiting or stalling error; or,
	// for a dependency that is only not Ready yet, wait says which. Both
	// empty: every dependency exists and is Ready for its current spec (the
	// zero value, a run without dependencies).
	blocked error
	wait    string
	// resolved are the dependencies whose outputs a run takes, for Build.
	resolved []engine.Dependency
	// used are the digests of those outputs, recorded in status.run.
	used []infrav1.DependencyRun
	// change is the run a Ready dependency's changed outputs ask for.
	change *newRun
}

// reconcileDependencies resolves spec.dependsOn from the cache: each
// dependency must exist, be allowed (another namespace needs
// --allow-cross-namespace-dependencies and the dependency's consent, its
// spec.allowDependentsFrom naming this run's namespace), lead to no cycle
// and be Ready for its current spec; the outputs taken from it must be in
// its status. It records what a new run would use (st.deps) and asks for a
// run (DependencyChange) when a Ready dependency's outputs digest differs
// from the one the latest run used. Sets DependenciesReady; reconcileStart
// reports a dependency that blocks a wanted run in Reconciling or Stalled.
func (r *TerraformRunReconciler) reconcileDependencies(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	if len(run.Spec.DependsOn) == 0 {
		st.deps = depState{}
		apimeta.RemoveStatusCondition(&run.Status.Conditions, infrav1.DependenciesReadyCondition)
		return ctrl.Result{}, nil
	}
	ds, err := r.resolveDependencies(ctx, run, false)
	if err != nil {
		return ctrl.Result{}, err
	}
	st.deps = ds
	switch {
	case ds.ready():
		r.transition(run, infrav1.DependenciesReadyCondition, metav1True, infrav1.ReasonDependenciesReady, readyMessage(run))
	case ds.blocked != nil:
		r.transition(run, infrav1.DependenciesReadyCondition, metav1False, reasonOf(ds.blocked), ds.blocked.Error())
	default:
		setStatus(run, infrav1.DependenciesReadyCondition, metav1False, infrav1.ReasonDependencyNotReady, ds.wait)
	}
	return ctrl.Result{}, nil
}

func readyMessage(run *infrav1.TerraformRun) string {
	names := make([]string, 0, len(run.Spec.DependsOn))
	for _, d := range run.Spec.DependsOn {
		names = append(names, depDisplay(run.Namespace, dependencyNamespace(run, d), d.Name))
	}
	return "every dependency is Ready: " + strings.Join(names, ", ")
}

// reasonOf is the condition reason of a stalling or waiting error.
func reasonOf(err error) string {
	switch e := err.(type) {
	case *StallingError:
		return e.Reason
	case *WaitingError:
		return e.Reason
	}
	return infrav1.ReasonDependencyNotReady
}

// resolveDependencies looks at every dependency. lenient is for a destroy:
// dependencies that are gone, not Ready or refused are left out instead of
// blocking, since deleting never waits for dependencies.
func (r *TerraformRunReconciler) resolveDependencies(ctx context.Context, run *infrav1.TerraformRun, lenient bool) (depState, error) {
	ds := depState{}
	if !lenient {
		if cycle, err := r.findCycle(ctx, run); err != nil {
			return ds, err
		} else if cycle != "" {
			ds.block(stalling(infrav1.ReasonDependencyCycle, "spec.dependsOn makes a cycle: %s; remove one of these dependencies", cycle))
			return ds, nil
		}
	}
	givenBy := map[string]string{}
	for i, d := range run.Spec.DependsOn {
		ns := dependencyNamespace(run, d)
		name := depDisplay(run.Namespace, ns, d.Name)
		dep, err := r.getDependency(ctx, run, i, d)
		if err != nil {
			var s *StallingError
			var w *WaitingError
			if !errors.As(err, &s) && !errors.As(err, &w) {
				return ds, err
			}
			ds.block(err)
			continue
		}
		if !lenient {
			if why := notReady(dep, ns == run.Namespace); why != "" {
				if ds.wait == "" {
					ds.wait = fmt.Sprintf("waiting for dependency %s: %s", name, why)
				}
				continue
			}
		}
		if d.Outputs == nil {
			continue
		}
		res, err := takenOutputs(dep, d, name)
		if err == nil {
			err = checkGivenOnce(givenBy, res, name)
		}
		if err != nil {
			if !lenient {
				ds.block(err)
			}
			continue
		}
		ds.resolved = append(ds.resolved, res)
		ds.used = append(ds.used, infrav1.DependencyRun{Name: d.Name, Namespace: d.Namespace, OutputsDigest: dep.Status.OutputsDigest, RunID: lastAppliedRun(dep)})
		if !lenient && ds.change == nil {
			ds.change = dependencyChange(run, d, name, dep)
		}
	}
	if !ds.ready() {
		ds.change = nil
	}
	return ds, nil
}

// getDependency reads spec.dependsOn[i] of run from the cache. It fails
// stalling (CrossNamespaceDependency) for a dependency in another namespace
// unless the manager allows such dependencies and the dependency consents
// (its spec.allowDependentsFrom lists run's namespace); one that does not
// exist there fails alike, so that no tenant learns what another
// namespace holds. A missing dependency in run's own namespace fails
// waiting (DependencyNotFound); other errors are generic.
func (r *TerraformRunReconciler) getDependency(ctx context.Context, run *infrav1.TerraformRun, i int, d infrav1.Dependency) (*infrav1.TerraformRun, error) {
	ns := dependencyNamespace(run, d)
	name := depDisplay(run.Namespace, ns, d.Name)
	if ns != run.Namespace && !r.AllowCrossNamespaceDependencies {
		return nil, stalling(infrav1.ReasonCrossNamespaceDependency,
			"spec.dependsOn[%d] names TerraformRun %s in another namespace, which this manager does not allow: start it with --allow-cross-namespace-dependencies (Helm value allowCrossNamespaceDependencies), or depend on a TerraformRun in namespace %s", i, name, run.Namespace)
	}
	dep := &infrav1.TerraformRun{}
	err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: d.Name}, dep)
	switch {
	case err != nil && !apierrors.IsNotFound(err):
		return nil, generic("GetDependency", err, "reading dependency %s", name)
	case ns != run.Namespace && (err != nil || !consents(dep, run.Namespace)):
		return nil, stalling(infrav1.ReasonCrossNamespaceDependency,
			"spec.dependsOn[%d] names TerraformRun %s, which does not exist%s or does not let TerraformRuns of namespace %s depend on it: its owners must list %s in its spec.allowDependentsFrom, or depend on a TerraformRun in namespace %s",
			i, name, r.watchHint(ns), run.Namespace, run.Namespace, run.Namespace)
	case err != nil:
		return nil, waiting(infrav1.ReasonDependencyNotFound, dependencyRecheck,
			"dependency %s (spec.dependsOn[%d]) does not exist%s; no run starts until it does", name, i, r.watchHint(ns))
	}
	return dep, nil
}

// consents says whether dep lets TerraformRuns of namespace ns depend on
// it: its own namespace's always, another's only when listed in
// spec.allowDependentsFrom, by name (no wildcard: the API refuses "*").
func consents(dep *infrav1.TerraformRun, ns string) bool {
	return dep.Namespace == ns || slices.Contains(dep.Spec.AllowDependentsFrom, ns)
}

// crossNamespaceAllowed says whether a dependency edge from namespace ns
// to target counts: always within a namespace, across namespaces only on a
// manager that allows them and with target's consent (nil: it does not
// exist).
func (r *TerraformRunReconciler) crossNamespaceAllowed(ns string, target *infrav1.TerraformRun) bool {
	if target == nil {
		return false
	}
	return target.Namespace == ns || (r.AllowCrossNamespaceDependencies && consents(target, ns))
}

// dependencyRecheck is how often a missing dependency is looked for again,
// besides the watch that sees it created.
const dependencyRecheck = 5 * time.Minute

// ready says whether every dependency exists and is Ready for its current
// spec.
func (ds *depState) ready() bool { return ds.blocked == nil && ds.wait == "" }

// block records the first reason a run may not start.
func (ds *depState) block(err error) {
	if ds.blocked == nil {
		ds.blocked = err
	}
}

func (r *TerraformRunReconciler) watchHint(ns string) string {
	if len(r.WatchNamespaces) == 0 {
		return ""
	}
	for _, w := range r.WatchNamespaces {
		if w == ns {
			return ""
		}
	}
	return fmt.Sprintf(" in the namespaces this manager watches (%s)", strings.Join(r.WatchNamespaces, ", "))
}

// notReady says why a dependency is not Ready for its current spec, or ""
// when it is: Ready (drift a check reported still counts: its outputs are
// those of its current spec), every generation handled, no run active, not
// being deleted, and not planOnly (which never applies). The Ready
// condition's message (terraform's error text, for a failed run) is quoted
// only with detail, for a dependency in the same namespace: another
// namespace's tenant sees its reason only.
func notReady(dep *infrav1.TerraformRun, detail bool) string {
	cur := dep.Status.Run
	ready := findCondition(dep, infrav1.ReadyCondition)
	switch {
	case !dep.DeletionTimestamp.IsZero():
		return "it is being deleted"
	case dep.Spec.PlanOnly:
		return "it is planOnly, so it never applies"
	case cur != nil && !isTerminal(cur.Phase):
		return fmt.Sprintf("its run %s is %s", cur.ID, cur.Phase)
	case dep.Status.ObservedGeneration != dep.Generation:
		return "it has not run its current spec yet"
	case ready == nil:
		return "it has not finished a run yet"
	case ready.Status != metav1True && ready.Reason != infrav1.ReasonDriftDetected && detail:
		return fmt.Sprintf("it is not Ready (%s: %s)", ready.Reason, truncate(ready.Message, 300))
	case ready.Status != metav1True && ready.Reason != infrav1.ReasonDriftDetected:
		return fmt.Sprintf("it is not Ready (%s)", ready.Reason)
	case cur == nil || cur.Type != infrav1.RunApply:
		return "it has not applied yet"
	}
	return ""
}

// takenOutputs are the outputs a dependency gives the run: all of its
// status.outputs, or the selected ones, which must be among them.
func takenOutputs(dep *infrav1.TerraformRun, d infrav1.Dependency, name string) (engine.Dependency, error) {
	res := engine.Dependency{Name: dep.Name, Namespace: dep.Namespace, SecretName: dep.Status.OutputsSecretName}
	have := map[string]bool{}
	for _, o := range dep.Status.Outputs {
		have[o] = true
	}
	sensitive := map[string]bool{}
	for _, o := range dep.Status.SensitiveOutputs {
		sensitive[o] = true
	}
	if d.Outputs.All {
		for _, o := range dep.Status.Outputs {
			res.Vars = append(res.Vars, engine.DependencyVar{Output: o, Variable: o, Sensitive: sensitive[o]})
		}
		return res, nil
	}
	for _, sel := range d.Outputs.Select {
		if !have[sel.Output] {
			return res, waiting(infrav1.ReasonDependencyOutputs, dependencyRecheck,
				"dependency %s has no output %q (it has: %s); spec.dependsOn selects it", name, sel.Output, listOrNone(dep.Status.Outputs))
		}
		v := sel.As
		if v == "" {
			v = sel.Output
		}
		res.Vars = append(res.Vars, engine.DependencyVar{Output: sel.Output, Variable: v, Sensitive: sensitive[sel.Output]})
	}
	return res, nil
}

// checkGivenOnce refuses two dependencies that give the same variable.
func checkGivenOnce(givenBy map[string]string, res engine.Dependency, name string) error {
	for _, v := range res.Vars {
		if other, dup := givenBy[v.Variable]; dup && other == name {
			return stalling(infrav1.ReasonDependencyOutputs,
				"dependency %s: two selected outputs are given as variable %s; give each its own as", name, v.Variable)
		} else if dup {
			return stalling(infrav1.ReasonDependencyOutputs,
				"variable %s is given by two dependencies, %s and %s; select outputs with outputs.select and name one with as", v.Variable, other, name)
		}
		givenBy[v.Variable] = name
	}
	return nil
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// lastAppliedRun is the run that wrote a dependency's current outputs.
func lastAppliedRun(dep *infrav1.TerraformRun) string {
	if la := dep.Status.LastApplied; la != nil {
		return la.RunID
	}
	return ""
}

// dependencyChange asks for a run when a Ready dependency's outputs digest
// differs from the one the latest run took (none taken counts as
// different: the dependency gave no outputs then).
func dependencyChange(run *infrav1.TerraformRun, d infrav1.Dependency, name string, dep *infrav1.TerraformRun) *newRun {
	cur := run.Status.Run
	if cur == nil || cur.Type == infrav1.RunDestroy || dep.Status.OutputsDigest == "" {
		return nil
	}
	for _, u := range cur.Dependencies {
		if u.Name == d.Name && u.Namespace == d.Namespace {
			if u.OutputsDigest == dep.Status.OutputsDigest {
				return nil
			}
			break
		}
	}
	return &newRun{typ: desiredType(run), trigger: infrav1.TriggerDependencyChange,
		detail: fmt.Sprintf("dependency %s: run %s changed its outputs", name, lastAppliedRun(dep))}
}

// findCycle walks spec.dependsOn from run in the cache and returns the
// cycle that leads back to run, as "a -> b -> a", or "". Only edges that
// count are walked: one into another namespace needs the target's consent
// (crossNamespaceAllowed), so the walk reads nothing of a namespace that
// did not consent. Cycles further down that do not include run are the
// business of their own members (run then waits on one of them, which is
// Stalled).
func (r *TerraformRunReconciler) findCycle(ctx context.Context, run *infrav1.TerraformRun) (string, error) {
	w := &cycleWalk{r: r, start: run, seen: map[string]bool{}}
	found, err := w.walk(ctx, run.Namespace, run.Spec.DependsOn, 0)
	if err != nil || !found {
		return "", err
	}
	return strings.Join(append([]string{run.Name}, w.path...), " -> "), nil
}

// cycleWalk is findCycle's depth-first walk: the runs seen, and the path
// from the start.
type cycleWalk struct {
	r     *TerraformRunReconciler
	start *infrav1.TerraformRun
	seen  map[string]bool
	path  []string
}

// walk follows deps, the dependencies of a run in namespace ns, and
// reports whether one leads back to the start.
func (w *cycleWalk) walk(ctx context.Context, ns string, deps []infrav1.Dependency, depth int) (bool, error) {
	if depth > maxDependencyDepth {
		return false, nil
	}
	start := depKey(w.start.Namespace, w.start.Name)
	for _, d := range deps {
		dns := d.Namespace
		if dns == "" {
			dns = ns
		}
		k := depKey(dns, d.Name)
		if w.seen[k] {
			continue
		}
		next, err := w.get(ctx, k, dns, d.Name)
		if err != nil {
			return false, err
		}
		if dns != ns && !w.r.crossNamespaceAllowed(ns, next) {
			continue
		}
		w.path = append(w.path, depDisplay(w.start.Namespace, dns, d.Name))
		if k == start {
			return true, nil
		}
		w.seen[k] = true
		if next != nil {
			if found, err := w.walk(ctx, dns, next.Spec.DependsOn, depth+1); found || err != nil {
				return found, err
			}
		}
		w.path = w.path[:len(w.path)-1]
	}
	return false, nil
}

// get reads a run of the walk from the cache (the start as it is); nil
// when it does not exist.
func (w *cycleWalk) get(ctx context.Context, k, ns, name string) (*infrav1.TerraformRun, error) {
	if k == depKey(w.start.Namespace, w.start.Name) {
		return w.start, nil
	}
	next := &infrav1.TerraformRun{}
	if err := w.r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, next); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, generic("GetDependency", err, "reading dependency %s", k)
	}
	return next, nil
}

// reconcileDependents makes the deletion of a TerraformRun that others in
// its namespace depend on wait, before its destroy starts, until those
// dependents are gone: they may still need its infrastructure, and their
// own destroy its outputs. A dependent in another namespace never holds a
// destroy back (a tenant could otherwise keep another's infrastructure
// alive): it is named in the message when local ones are waited for, and
// in a DependentsIgnored Event when the destroy goes on. The annotation
// infra.opr8r.io/ignore-dependents=true destroys at once. Deletions that
// destroy nothing (Retain, planOnly, skip-destroy, nothing applied) never
// wait, and a dependency never waits for its dependents' dependencies.
// Sets Reconciling (DependentsExist) while all the dependents are being
// deleted, Stalled (DependentsExist) while one is not; ends the pass while
// it waits.
func (r *TerraformRunReconciler) reconcileDependents(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	cur := run.Status.Run
	switch {
	case run.Annotations[infrav1.IgnoreDependentsAnnotation] == "true",
		st.active, !mayHaveResources(run),
		cur != nil && cur.Type == infrav1.RunDestroy:
		return ctrl.Result{}, nil
	}
	ds, err := r.dependents(ctx, run)
	if err != nil {
		return ctrl.Result{}, err
	}
	ignored := ""
	if len(ds.foreign) > 0 {
		ignored = fmt.Sprintf("; TerraformRuns of other namespaces that depend on this one never hold back its destroy: %s", strings.Join(ds.foreign, ", "))
	}
	if len(ds.local) == 0 {
		if ignored != "" {
			r.event(run, "Normal", "DependentsIgnored", "Destroy", "destroying"+ignored)
		}
		return ctrl.Result{}, nil
	}
	st.stop = true
	hatch := fmt.Sprintf("to destroy now, run: kubectl annotate tfrun %s %s=true", run.Name, infrav1.IgnoreDependentsAnnotation)
	if ds.deleting == len(ds.local) {
		st.report(deleting, infrav1.ReasonDependentsExist,
			fmt.Sprintf("waiting for the TerraformRuns that depend on this one to be deleted before destroying: %s; %s%s", strings.Join(ds.local, ", "), hatch, ignored))
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, stalling(infrav1.ReasonDependentsExist,
		"TerraformRuns depend on this one: %s; delete them first (their destroy may need this one's infrastructure and outputs), or %s%s", strings.Join(ds.local, ", "), hatch, ignored)
}

// dependentsOf are the TerraformRuns that name a run in spec.dependsOn:
// those of its namespace (local), how many of them are being deleted, and
// those of other namespaces (foreign, as namespace/name).
type dependentsOf struct {
	local, foreign []string
	deleting       int
}

// dependents lists the TerraformRuns that name run in spec.dependsOn.
func (r *TerraformRunReconciler) dependents(ctx context.Context, run *infrav1.TerraformRun) (dependentsOf, error) {
	var out dependentsOf
	list := &infrav1.TerraformRunList{}
	if err := r.List(ctx, list, client.MatchingFields{DependsOnIndex: depKey(run.Namespace, run.Name)}); err != nil {
		return out, generic("ListDependents", err, "listing the dependents of %s", run.Name)
	}
	for i := range list.Items {
		d := &list.Items[i]
		switch {
		case d.UID == run.UID:
		case d.Namespace != run.Namespace:
			out.foreign = append(out.foreign, depDisplay(run.Namespace, d.Namespace, d.Name))
		default:
			out.local = append(out.local, d.Name)
			if !d.DeletionTimestamp.IsZero() {
				out.deleting++
			}
		}
	}
	sort.Strings(out.local)
	sort.Strings(out.foreign)
	return out, nil
}

// relatedRuns maps a TerraformRun's event to the runs it concerns: its
// dependents (it became Ready, changed its outputs, appeared or went away)
// and its dependencies (it went away or stopped naming one, which a
// dependency's deletion may be waiting for).
func (r *TerraformRunReconciler) relatedRuns(ctx context.Context, o client.Object) []reconcile.Request {
	run, ok := o.(*infrav1.TerraformRun)
	if !ok {
		return nil
	}
	var out []reconcile.Request
	list := &infrav1.TerraformRunList{}
	if err := r.List(ctx, list, client.MatchingFields{DependsOnIndex: depKey(run.Namespace, run.Name)}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the dependents of a TerraformRun", "run", client.ObjectKeyFromObject(run))
	}
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	for _, d := range run.Spec.DependsOn {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: dependencyNamespace(run, d), Name: d.Name}})
	}
	return out
}

// dependencyPredicate passes the TerraformRun events that matter to the
// runs related by spec.dependsOn: creation, deletion, a spec change, the
// start of deletion, and a change of what readiness and outputs are read
// from. A resync, or a change of anything else in status, passes nothing.
type dependencyPredicate struct{ predicate.Funcs }

// Update passes changes of generation, deletion, readiness or outputs.
func (dependencyPredicate) Update(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*infrav1.TerraformRun)
	n, ok2 := e.ObjectNew.(*infrav1.TerraformRun)
	if !ok1 || !ok2 {
		return false
	}
	return o.Generation != n.Generation || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
		readinessOf(o) != readinessOf(n) || o.Status.OutputsDigest != n.Status.OutputsDigest
}

// readinessOf is what notReady reads, as one comparable string.
func readinessOf(run *infrav1.TerraformRun) string {
	s := fmt.Sprint(run.Status.ObservedGeneration, "/", run.Generation)
	if c := findCondition(run, infrav1.ReadyCondition); c != nil {
		s += "/" + string(c.Status) + "/" + c.Reason
	}
	if cur := run.Status.Run; cur != nil {
		s += "/" + cur.ID + "/" + string(cur.Phase)
	}
	return s
}
