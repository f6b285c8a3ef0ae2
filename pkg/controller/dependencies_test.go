package controller

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// producer is a TerraformRun in namespace ns that applied its current spec
// and wrote the given outputs (the first one sensitive when sensitive).
func producer(name, ns, digest string, sensitive bool, outputs ...string) *infrav1.TerraformRun {
	p := aRun(name)
	p.Namespace = ns
	p.Status = infrav1.TerraformRunStatus{
		ObservedGeneration: 1,
		Conditions:         []metav1.Condition{{Type: infrav1.ReadyCondition, Status: metav1True, Reason: infrav1.ReasonSucceeded}},
		Run:                &infrav1.RunStatus{ID: name + "-4", Type: infrav1.RunApply, Phase: infrav1.RunSucceeded},
		LastApplied:        &infrav1.AppliedRevision{RunID: name + "-4"},
		Outputs:            outputs, OutputsSecretName: name + "-outputs", OutputsDigest: digest,
	}
	if sensitive && len(outputs) > 0 {
		p.Status.SensitiveOutputs = outputs[:1]
	}
	return p
}

// consumer is a TerraformRun that depends on the given runs.
func consumer(name string, deps ...infrav1.Dependency) *infrav1.TerraformRun {
	c := aRun(name)
	c.Spec.DependsOn = deps
	return c
}

// consenting is run letting the TerraformRuns of the given namespaces
// depend on it (spec.allowDependentsFrom).
func consenting(run *infrav1.TerraformRun, namespaces ...string) *infrav1.TerraformRun {
	run.Spec.AllowDependentsFrom = namespaces
	return run
}

func all(name string) infrav1.Dependency {
	return infrav1.Dependency{Name: name, Outputs: &infrav1.DependencyOutputs{All: true}}
}

func TestNotReady(t *testing.T) {
	cases := map[string]struct {
		change func(*infrav1.TerraformRun)
		want   string
	}{
		"applied its current spec": {},
		"drift reported still counts": {change: func(p *infrav1.TerraformRun) {
			p.Status.Conditions[0] = metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1False, Reason: infrav1.ReasonDriftDetected}
		}},
		"a run in progress": {change: func(p *infrav1.TerraformRun) { p.Status.Run.Phase = infrav1.RunAwaitingApproval },
			want: "its run net-4 is AwaitingApproval"},
		"a new generation not handled": {change: func(p *infrav1.TerraformRun) { p.Generation = 2 },
			want: "it has not run its current spec yet"},
		"failed": {change: func(p *infrav1.TerraformRun) {
			p.Status.Conditions[0] = metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1False, Reason: infrav1.ReasonRunFailed, Message: "Error: boom"}
		}, want: "it is not Ready (RunFailed: Error: boom)"},
		"never ran": {change: func(p *infrav1.TerraformRun) { p.Status = infrav1.TerraformRunStatus{ObservedGeneration: 1} },
			want: "it has not finished a run yet"},
		"planOnly": {change: func(p *infrav1.TerraformRun) { p.Spec.PlanOnly = true }, want: "it is planOnly"},
		"being deleted": {change: func(p *infrav1.TerraformRun) { now := metav1.Now(); p.DeletionTimestamp = &now },
			want: "it is being deleted"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := producer("net", "ns", "d1", false, "vpc_id")
			if tc.change != nil {
				tc.change(p)
			}
			got := notReady(p, true)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("notReady = %q, want %q", got, tc.want)
			}
			if other := notReady(p, false); strings.Contains(other, "boom") {
				t.Errorf("another namespace's dependent sees its Ready message: %q", other)
			}
		})
	}
}

func TestReconcileDependencies(t *testing.T) {
	cases := map[string]struct {
		deps        []infrav1.Dependency
		objs        []client.Object
		self        func(*infrav1.TerraformRun)
		crossNS     bool
		wantCond    string
		wantMsg     string
		wantBlocked string
		wantDeps    []engine.Dependency
	}{
		"all outputs of a Ready dependency": {
			deps:     []infrav1.Dependency{all("net")},
			objs:     []client.Object{producer("net", "ns", "d1", true, "password", "vpc_id")},
			wantCond: "True/DependenciesReady", wantMsg: "every dependency is Ready: net",
			wantDeps: []engine.Dependency{{Name: "net", Namespace: "ns", SecretName: "net-outputs", Vars: []engine.DependencyVar{
				{Output: "password", Variable: "password", Sensitive: true}, {Output: "vpc_id", Variable: "vpc_id"}}}},
		},
		"selected and renamed outputs; an ordering-only dependency gives none": {
			deps: []infrav1.Dependency{
				{Name: "net", Outputs: &infrav1.DependencyOutputs{Select: []infrav1.OutputVariable{{Output: "vpc_id", As: "network_id"}}}},
				{Name: "dns"},
			},
			objs:     []client.Object{producer("net", "ns", "d1", false, "vpc_id", "cidr"), producer("dns", "ns", "d9", false, "zone")},
			wantCond: "True/DependenciesReady",
			wantDeps: []engine.Dependency{{Name: "net", Namespace: "ns", SecretName: "net-outputs", Vars: []engine.DependencyVar{{Output: "vpc_id", Variable: "network_id"}}}},
		},
		"a dependency that does not exist": {
			deps: []infrav1.Dependency{all("net")}, wantCond: "False/DependencyNotFound",
			wantBlocked: "dependency net (spec.dependsOn[0]) does not exist",
		},
		"a dependency that is not Ready": {
			deps: []infrav1.Dependency{all("net")},
			objs: []client.Object{func() client.Object {
				p := producer("net", "ns", "d1", false, "vpc_id")
				p.Status.Run.Phase = infrav1.RunRunning
				return p
			}()},
			wantCond: "False/DependencyNotReady", wantMsg: "waiting for dependency net: its run net-4 is Running",
		},
		"another namespace without the flag": {
			deps:     []infrav1.Dependency{{Name: "net", Namespace: "infra"}},
			objs:     []client.Object{producer("net", "infra", "d1", false)},
			wantCond: "False/CrossNamespaceDependency", wantBlocked: "--allow-cross-namespace-dependencies",
		},
		"another namespace with the flag and its consent": {
			deps: []infrav1.Dependency{{Name: "net", Namespace: "infra", Outputs: &infrav1.DependencyOutputs{All: true}}},
			objs: []client.Object{consenting(producer("net", "infra", "d1", false, "vpc_id"), "other", "ns")}, crossNS: true,
			wantCond: "True/DependenciesReady", wantMsg: "every dependency is Ready: infra/net",
			wantDeps: []engine.Dependency{{Name: "net", Namespace: "infra", SecretName: "net-outputs", Vars: []engine.DependencyVar{{Output: "vpc_id", Variable: "vpc_id"}}}},
		},
		"another namespace with the flag, without its consent": {
			deps: []infrav1.Dependency{{Name: "net", Namespace: "infra", Outputs: &infrav1.DependencyOutputs{All: true}}},
			objs: []client.Object{producer("net", "infra", "d1", false, "vpc_id")}, crossNS: true,
			wantCond: "False/CrossNamespaceDependency",
			wantBlocked: "spec.dependsOn[0] names TerraformRun infra/net, which does not exist or does not let TerraformRuns of namespace ns depend on it: " +
				"its owners must list ns in its spec.allowDependentsFrom",
		},
		"another namespace with the flag, consent for another namespace only": {
			deps: []infrav1.Dependency{{Name: "net", Namespace: "infra"}},
			objs: []client.Object{consenting(producer("net", "infra", "d1", false, "vpc_id"), "other")}, crossNS: true,
			wantCond: "False/CrossNamespaceDependency", wantBlocked: "its owners must list ns in its spec.allowDependentsFrom",
		},
		"another namespace with the flag, not there: the same words": {
			deps: []infrav1.Dependency{{Name: "net", Namespace: "infra"}}, crossNS: true,
			wantCond: "False/CrossNamespaceDependency", wantBlocked: "infra/net, which does not exist or does not let",
		},
		"another namespace with its consent, without the flag": {
			deps:     []infrav1.Dependency{{Name: "net", Namespace: "infra"}},
			objs:     []client.Object{consenting(producer("net", "infra", "d1", false, "vpc_id"), "ns")},
			wantCond: "False/CrossNamespaceDependency", wantBlocked: "--allow-cross-namespace-dependencies",
		},
		"a cycle through another namespace that consents": {
			deps: []infrav1.Dependency{{Name: "b", Namespace: "infra"}},
			objs: []client.Object{func() client.Object {
				b := consenting(consumer("b", infrav1.Dependency{Name: "a", Namespace: "ns"}), "ns")
				b.Namespace = "infra"
				return b
			}()},
			self:     func(a *infrav1.TerraformRun) { a.Spec.AllowDependentsFrom = []string{"infra"} },
			crossNS:  true,
			wantCond: "False/DependencyCycle", wantBlocked: "spec.dependsOn makes a cycle: a -> infra/b -> a",
		},
		"no cycle through an edge without consent": {
			deps: []infrav1.Dependency{{Name: "b", Namespace: "infra"}},
			objs: []client.Object{func() client.Object {
				b := consenting(producer("b", "infra", "d1", false), "ns")
				b.Spec.DependsOn = []infrav1.Dependency{{Name: "a", Namespace: "ns"}}
				return b
			}()},
			crossNS: true, wantCond: "True/DependenciesReady",
		},
		"a selected output the dependency does not have": {
			deps:     []infrav1.Dependency{{Name: "net", Outputs: &infrav1.DependencyOutputs{Select: []infrav1.OutputVariable{{Output: "subnet"}}}}},
			objs:     []client.Object{producer("net", "ns", "d1", false, "vpc_id")},
			wantCond: "False/DependencyOutputs", wantBlocked: `dependency net has no output "subnet" (it has: vpc_id)`,
		},
		"two dependencies give one variable": {
			deps:     []infrav1.Dependency{all("net"), all("net2")},
			objs:     []client.Object{producer("net", "ns", "d1", false, "vpc_id"), producer("net2", "ns", "d2", false, "vpc_id")},
			wantCond: "False/DependencyOutputs", wantBlocked: "variable vpc_id is given by two dependencies, net and net2",
		},
		"a cycle": {
			deps:     []infrav1.Dependency{{Name: "b"}},
			objs:     []client.Object{consumer("b", infrav1.Dependency{Name: "c"}), consumer("c", infrav1.Dependency{Name: "a"})},
			wantCond: "False/DependencyCycle", wantBlocked: "spec.dependsOn makes a cycle: a -> b -> c -> a",
		},
		"itself, named with its namespace": {
			deps: []infrav1.Dependency{{Name: "a", Namespace: "ns"}}, wantCond: "False/DependencyCycle", wantBlocked: "a -> a",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run := consumer("a", tc.deps...)
			if tc.self != nil {
				tc.self(run)
			}
			r, _ := newReconciler(t, &fakeEngine{}, append(tc.objs, run.DeepCopy())...)
			r.AllowCrossNamespaceDependencies = tc.crossNS
			st, _, err := runSub(r, run, r.reconcileDependencies)
			if err != nil {
				t.Fatal(err)
			}
			if got := condOf(run, infrav1.DependenciesReadyCondition); got != tc.wantCond {
				t.Errorf("DependenciesReady = %s, want %s (%s)", got, tc.wantCond, findCond(run, infrav1.DependenciesReadyCondition).Message)
			}
			if msg := findCond(run, infrav1.DependenciesReadyCondition).Message; !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("message %q, want %q", msg, tc.wantMsg)
			}
			if tc.wantBlocked == "" && st.deps.blocked != nil {
				t.Errorf("blocked: %v", st.deps.blocked)
			}
			if tc.wantBlocked != "" && (st.deps.blocked == nil || !strings.Contains(st.deps.blocked.Error(), tc.wantBlocked)) {
				t.Errorf("blocked = %v, want %q", st.deps.blocked, tc.wantBlocked)
			}
			if diff := cmp.Diff(tc.wantDeps, st.deps.resolved); tc.wantBlocked == "" && diff != "" {
				t.Errorf("resolved (-want +got):\n%s", diff)
			}
		})
	}
}

// passThrough runs reconcileDependencies and then reconcileStart, as a pass
// does.
func passThrough(t *testing.T, r *TerraformRunReconciler, run *infrav1.TerraformRun) (*passState, error) {
	t.Helper()
	st := r.newPassState(run)
	res, err := runFlow(ctx(), run, st, []subReconciler{r.reconcileDependencies, r.reconcileStart})
	_, _ = r.summarize(run, st, res, err)
	return st, err
}

func TestDependencyChangeStartsARun(t *testing.T) {
	cases := map[string]struct {
		usedDigest  string // the digest the consumer's last run took
		depDigest   string // the producer's digest now
		depRunning  bool
		wantID      string
		wantTrigger infrav1.RunTrigger
		wantDetail  string
	}{
		"outputs changed: a run, naming the dependency and its run": {
			usedDigest: "d1", depDigest: "d2", wantID: "a-2",
			wantTrigger: infrav1.TriggerDependencyChange, wantDetail: "dependency net: run net-4 changed its outputs",
		},
		"an apply that changed no output: nothing": {usedDigest: "d1", depDigest: "d1", wantID: "a-1"},
		"a dependency mid-run: nothing yet":        {usedDigest: "d1", depDigest: "d2", depRunning: true, wantID: "a-1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeEngine{}
			run := consumer("a", all("net"))
			r, _ := newReconciler(t, f)
			run = withRun(r, run, 1, infrav1.RunSucceeded, infrav1.RunApply)
			run.Status.ObservedGeneration = 1
			run.Status.Run.Dependencies = []infrav1.DependencyRun{{Name: "net", OutputsDigest: tc.usedDigest, RunID: "net-3"}}
			p := producer("net", "ns", tc.depDigest, false, "vpc_id")
			if tc.depRunning {
				p.Status.Run.Phase = infrav1.RunRunning
			}
			r, c := newReconciler(t, f, run.DeepCopy(), p)
			if _, err := passThrough(t, r, run); err != nil {
				t.Fatal(err)
			}
			cur := run.Status.Run
			if cur.ID != tc.wantID || cur.Trigger != tc.wantTrigger || cur.TriggerDetail != tc.wantDetail {
				t.Fatalf("run %s trigger %q %q, want %s %q %q", cur.ID, cur.Trigger, cur.TriggerDetail, tc.wantID, tc.wantTrigger, tc.wantDetail)
			}
			if tc.wantTrigger != "" {
				want := []infrav1.DependencyRun{{Name: "net", OutputsDigest: tc.depDigest, RunID: "net-4"}}
				if diff := cmp.Diff(want, cur.Dependencies); diff != "" {
					t.Errorf("status.run.dependencies (-want +got):\n%s", diff)
				}
				if err := c.Get(ctx(), client.ObjectKey{Namespace: "ns", Name: "a-2"}, &batchv1.Job{}); err != nil {
					t.Errorf("child a-2: %v", err)
				}
			}
		})
	}
}

func TestStartWaitsForDependencies(t *testing.T) {
	cases := map[string]struct {
		objs        []client.Object
		wantCond    string // Reconciling or Stalled
		wantErr     string
		wantMessage string
	}{
		"a dependency mid-run: Reconciling, naming it and its state": {
			objs: []client.Object{func() client.Object {
				p := producer("net", "ns", "d1", false, "vpc_id")
				p.Status.Run.Phase = infrav1.RunAwaitingApproval
				return p
			}()},
			wantCond:    "Reconciling=True/DependencyNotReady",
			wantMessage: "run not started (Created): waiting for dependency net: its run net-4 is AwaitingApproval",
		},
		"a missing dependency: reported": {
			wantErr: "dependency net (spec.dependsOn[0]) does not exist",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run := consumer("a", all("net"))
			r, c := newReconciler(t, &fakeEngine{}, append(tc.objs, run.DeepCopy())...)
			_, err := passThrough(t, r, run)
			if tc.wantErr != "" {
				var w *WaitingError
				if !errors.As(err, &w) || w.Reason != infrav1.ReasonDependencyNotFound || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want a DependencyNotFound waiting error %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if tc.wantCond != "" {
				if got := "Reconciling=" + condOf(run, infrav1.ReconcilingCondition); got != tc.wantCond {
					t.Errorf("%s, want %s", got, tc.wantCond)
				}
				if msg := findCond(run, infrav1.ReconcilingCondition).Message; msg != tc.wantMessage {
					t.Errorf("message %q, want %q", msg, tc.wantMessage)
				}
			}
			if run.Status.Run != nil {
				t.Errorf("a run started: %+v", run.Status.Run)
			}
			jobs := &batchv1.JobList{}
			if err := c.List(ctx(), jobs); err != nil || len(jobs.Items) != 0 {
				t.Errorf("children %v, %v; want none", jobs.Items, err)
			}
		})
	}
}

func TestReconcileDependents(t *testing.T) {
	deleting := func(o *infrav1.TerraformRun) *infrav1.TerraformRun {
		now := metav1.Now()
		o.DeletionTimestamp = &now
		return o
	}
	// foreign is a TerraformRun of namespace ns that depends on net in ns.
	foreign := func(name, ns string) client.Object {
		c := consumer(name, infrav1.Dependency{Name: "net", Namespace: "ns"})
		c.Namespace = ns
		return c
	}
	cases := map[string]struct {
		annotate   bool
		dependents []client.Object
		applied    bool
		crossNS    bool
		wantStop   bool
		wantErr    string
		wantMsg    string
		wantCond   string
		wantEvents []string
	}{
		"no dependents: the destroy goes on": {applied: true},
		"a dependent that stays: Stalled, naming it and the hatch": {
			applied: true, dependents: []client.Object{consumer("app", infrav1.Dependency{Name: "net"})}, wantStop: true,
			wantErr: "TerraformRuns depend on this one: app; delete them first",
		},
		"dependents being deleted: Reconciling": {
			applied: true, dependents: []client.Object{func() client.Object {
				c := consumer("app", infrav1.Dependency{Name: "net"})
				c.Finalizers = []string{infrav1.Finalizer}
				return deleting(c)
			}()}, wantStop: true, wantCond: "True/DependentsExist",
		},
		"ignore-dependents: the destroy goes on": {
			applied: true, annotate: true, dependents: []client.Object{consumer("app", infrav1.Dependency{Name: "net"})},
		},
		"nothing to destroy: no wait": {dependents: []client.Object{consumer("app", infrav1.Dependency{Name: "net"})}},
		"a dependent in another namespace: the destroy goes on, and an Event says so": {
			applied: true, crossNS: true, dependents: []client.Object{foreign("edge", "team")},
			wantEvents: []string{"Normal DependentsIgnored destroying; TerraformRuns of other namespaces that depend on this one never hold back its destroy: team/edge"},
		},
		"local and foreign dependents: Stalled for the local one, naming the foreign": {
			applied: true, crossNS: true, wantStop: true,
			dependents: []client.Object{consumer("app", infrav1.Dependency{Name: "net"}), foreign("edge", "team")},
			wantErr:    "TerraformRuns depend on this one: app; delete them first",
			wantMsg:    "; TerraformRuns of other namespaces that depend on this one never hold back its destroy: team/edge",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := producer("net", "ns", "d1", false)
			p.Status.ResourcesMayExist = tc.applied
			if !tc.applied {
				p.Status.Run, p.Status.LastApplied, p.Status.Conditions = nil, nil, nil
			}
			if tc.annotate {
				p.Annotations = map[string]string{infrav1.IgnoreDependentsAnnotation: "true"}
			}
			deleting(p)
			r, _ := newReconciler(t, &fakeEngine{}, append(tc.dependents, p.DeepCopy())...)
			r.AllowCrossNamespaceDependencies = tc.crossNS
			rec := events.NewFakeRecorder(10)
			r.Recorder = rec
			st, _, err := runSub(r, p, r.reconcileDependents)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("err = %v, want %q", err, tc.wantMsg)
			}
			var got []string
			for len(rec.Events) > 0 {
				if e := <-rec.Events; strings.Contains(e, "DependentsIgnored") {
					got = append(got, e)
				}
			}
			if diff := cmp.Diff(tc.wantEvents, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if err != nil && !strings.Contains(err.Error(), infrav1.IgnoreDependentsAnnotation+"=true") {
				t.Errorf("the message does not name the escape hatch: %v", err)
			}
			if st.stop != tc.wantStop {
				t.Errorf("stop = %v, want %v", st.stop, tc.wantStop)
			}
			if got := condOf(p, infrav1.ReconcilingCondition); got != tc.wantCond {
				t.Errorf("Reconciling = %q, want %q", got, tc.wantCond)
			}
		})
	}
}

func TestRelatedRuns(t *testing.T) {
	net := producer("net", "ns", "d1", false)
	app := consumer("app", infrav1.Dependency{Name: "net"})
	web := consumer("web", infrav1.Dependency{Name: "app"}, infrav1.Dependency{Name: "net"})
	r, _ := newReconciler(t, &fakeEngine{}, net, app, web)
	names := func(o client.Object) []string {
		var out []string
		for _, req := range r.relatedRuns(ctx(), o) {
			out = append(out, req.String())
		}
		return out
	}
	if diff := cmp.Diff([]string{"ns/app", "ns/web"}, names(net)); diff != "" {
		t.Errorf("net wakes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ns/web", "ns/net"}, names(app)); diff != "" {
		t.Errorf("app wakes its dependent and its dependency (-want +got):\n%s", diff)
	}
}

func TestOutputsDigest(t *testing.T) {
	data := map[string][]byte{"a": []byte("1"), "b": []byte("2")}
	k1, k2 := []byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")
	same := OutputsDigest(k1, map[string][]byte{"b": []byte("2"), "a": []byte("1")})
	if OutputsDigest(k1, data) != same || !strings.HasPrefix(same, "hmac-sha256:") {
		t.Fatalf("the digest depends on map order or lacks its prefix: %s", same)
	}
	for name, other := range map[string]string{
		"another key":        OutputsDigest(k2, data),
		"another value":      OutputsDigest(k1, map[string][]byte{"a": []byte("1"), "b": []byte("3")}),
		"a value moved keys": OutputsDigest(k1, map[string][]byte{"a": []byte("12"), "b": []byte("")}),
		"one output fewer":   OutputsDigest(k1, map[string][]byte{"a": []byte("1")}),
	} {
		if other == same {
			t.Errorf("%s gives the same digest", name)
		}
	}
}
