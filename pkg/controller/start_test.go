package controller

import (
	"errors"
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/queue"
	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/pkg/tenancy"
)

func TestReconcileStart(t *testing.T) {
	cases := map[string]struct {
		prev        infrav1.RunPhase // status.run's phase; "" for none
		change      func(*infrav1.TerraformRun)
		existing    func(run *infrav1.TerraformRun, hash string) []client.Object
		wantID      string
		wantTrigger infrav1.RunTrigger
		wantCreated bool
		wantErr     error
	}{
		"a new TerraformRun: run 1": {
			wantID: "a-1", wantTrigger: infrav1.TriggerCreated, wantCreated: true,
		},
		"unchanged: nothing starts": {
			prev: infrav1.RunSucceeded, wantID: "a-1",
		},
		"spec changed: the next number": {
			prev: infrav1.RunSucceeded, change: func(r *infrav1.TerraformRun) { r.Spec.Terraform.Workspace = "b" },
			wantID: "a-2", wantTrigger: infrav1.TriggerSpecChange, wantCreated: true,
		},
		"rerun requested": {
			prev: infrav1.RunFailed, change: func(r *infrav1.TerraformRun) { r.Annotations = map[string]string{infrav1.RunRequestAnnotation: "now"} },
			wantID: "a-2", wantTrigger: infrav1.TriggerRerunRequest, wantCreated: true,
		},
		"suspended: nothing starts": {
			prev: infrav1.RunSucceeded, change: func(r *infrav1.TerraformRun) { r.Spec.Suspend = true; r.Spec.Terraform.Workspace = "b" },
			wantID: "a-1",
		},
		"a child of an earlier TerraformRun of this name holds number 1: skipped": {
			existing: func(run *infrav1.TerraformRun, hash string) []client.Object {
				old := run.DeepCopy()
				old.UID = types.UID("earlier")
				return []client.Object{childOf(t, old, infrav1.RunApply, 1, hash)}
			},
			wantID: "a-2", wantTrigger: infrav1.TriggerCreated, wantCreated: true,
		},
		"its own unrecorded child for this spec (a crash before the status write): adopted": {
			existing: func(run *infrav1.TerraformRun, hash string) []client.Object {
				return []client.Object{childOf(t, run, infrav1.RunApply, 1, hash)}
			},
			wantID: "a-1", wantTrigger: infrav1.TriggerCreated,
		},
		"its own unrecorded, finished child for another spec: skipped": {
			existing: func(run *infrav1.TerraformRun, _ string) []client.Object {
				return []client.Object{childOf(t, run, infrav1.RunApply, 1, "0000000000000000")}
			},
			wantID: "a-2", wantTrigger: infrav1.TriggerCreated, wantCreated: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeEngine{progress: map[string]engine.Progress{"a-1": {Finished: true, Phase: infrav1.RunSucceeded}}}
			run := aRun("a")
			r, _ := newReconciler(t, f)
			if tc.prev != "" {
				run = withRun(r, run, 1, tc.prev, infrav1.RunApply)
			}
			if tc.change != nil {
				tc.change(run)
			}
			var objs []client.Object
			if tc.existing != nil {
				objs = tc.existing(run, r.newPassState(run).hash)
			}
			r, c := newReconciler(t, f, append(objs, run.DeepCopy())...)
			_, _, err := runSub(r, run, r.reconcileStart)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			id := ""
			if run.Status.Run != nil {
				id = run.Status.Run.ID
			}
			if id != tc.wantID {
				t.Fatalf("status.run.id = %q, want %q", id, tc.wantID)
			}
			if tc.wantTrigger != "" && (run.Status.Run.Trigger != tc.wantTrigger || run.Status.LastRunNumber != run.Status.Run.Number) {
				t.Errorf("run %+v, lastRunNumber %d; want trigger %s", run.Status.Run, run.Status.LastRunNumber, tc.wantTrigger)
			}
			if tc.wantTrigger != "" {
				got := &batchv1.Job{}
				if err := c.Get(ctx(), client.ObjectKey{Namespace: "ns", Name: tc.wantID}, got); err != nil || !metav1.IsControlledBy(got, run) {
					t.Errorf("child %s: %v, controlled by the run: %v", tc.wantID, err, err == nil && metav1.IsControlledBy(got, run))
				}
				guard := &corev1.ConfigMap{}
				if err := c.Get(ctx(), client.ObjectKey{Namespace: "ns", Name: tenancy.GuardConfigMap}, guard); tc.wantCreated && (err != nil || !slices.Contains(tenancy.SplitList(guard.Data[tenancy.GuardChildrenKey]), tc.wantID)) {
					t.Errorf("the new child %s is not in the namespace's guard list (%v): %+v", tc.wantID, err, guard.Data)
				}
			}
			jobs := &batchv1.JobList{}
			if err := c.List(ctx(), jobs); err != nil {
				t.Fatal(err)
			}
			want := len(objs)
			if tc.wantCreated {
				want++
			}
			if len(jobs.Items) != want {
				t.Errorf("%d children exist, want %d", len(jobs.Items), want)
			}
		})
	}
}

func TestStartAdoptsNothingTheAPIServerAlreadyRecorded(t *testing.T) {
	// The cache shows run 0, the API server already records run 1 (this
	// reconciler's own last write has not reached the cache): no second
	// child, no status write.
	f := &fakeEngine{}
	stale := aRun("a")
	r, _ := newReconciler(t, f)
	fresh := withRun(r, stale.DeepCopy(), 1, infrav1.RunPending, infrav1.RunApply)
	child := childOf(t, stale, infrav1.RunApply, 1, r.newPassState(stale).hash)
	r, _ = newReconciler(t, f, child, fresh)
	_, _, err := runSub(r, stale, r.reconcileStart)
	if !errors.Is(err, errStaleCache) {
		t.Fatalf("err = %v, want errStaleCache", err)
	}
}

func TestWaitsForAnotherActiveChild(t *testing.T) {
	f := &fakeEngine{progress: map[string]engine.Progress{"a-1": {Phase: infrav1.RunRunning}}}
	run := aRun("a")
	r, _ := newReconciler(t, f)
	run = withRun(r, run, 1, infrav1.RunFailed, infrav1.RunApply)
	orphan := childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash)
	run.Spec.Terraform.Workspace = "b"
	r, _ = newReconciler(t, f, orphan, run.DeepCopy())
	_, res, err := runSub(r, run, r.reconcileStart)
	if err != nil || res.RequeueAfter == 0 {
		t.Fatalf("got %v, %v; want to wait and look again", res, err)
	}
	if run.Status.Run.ID != "a-1" {
		t.Fatalf("started %s while a-1 still runs", run.Status.Run.ID)
	}
}

// TestPushPending: a receiver's push starts a run only for a commit that
// neither the latest run nor the last apply used, and that no run covered.
func TestPushPending(t *testing.T) {
	const a, b = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"
	mk := func(push, cur, applied, handled string) *infrav1.TerraformRun {
		run := &infrav1.TerraformRun{}
		run.Spec.Source.Git = &infrav1.GitSource{URL: "https://git.example.com/x.git", Ref: "main"}
		if push != "" {
			run.Annotations = map[string]string{infrav1.SourcePushAnnotation: push}
		}
		if cur != "" {
			run.Status.Run = &infrav1.RunStatus{Commit: cur}
		}
		if applied != "" {
			run.Status.LastApplied = &infrav1.AppliedRevision{Revision: applied}
		}
		run.Status.LastHandledPush = handled
		return run
	}
	skip := func(run *infrav1.TerraformRun, commit string, paths bool) *infrav1.TerraformRun {
		run.Annotations[infrav1.SourcePushSkippedAnnotation] = commit + " no path matched: the push changed docs/a.md"
		if paths {
			run.Spec.Source.Git.Paths = []infrav1.PathPattern{"stacks/net/**"}
		}
		return run
	}
	for _, tc := range []struct {
		name string
		run  *infrav1.TerraformRun
		want bool
	}{
		{"no push", mk("", a, a, ""), false},
		{"the latest run's commit", mk(a, a, "", ""), false},
		{"the last apply's commit", mk(a, b, a, ""), false},
		{"handled before", mk(b, a, a, b), false},
		{"a new commit", mk(b, a, a, ""), true},
		{"a new commit, no run yet", mk(b, "", "", ""), true},
		{"a new commit its paths skip", skip(mk(b, a, a, ""), b, true), false},
		{"a new commit, a skip of another", skip(mk(b, a, a, ""), a, true), true},
		{"a new commit, a skip but no paths", skip(mk(b, a, a, ""), b, false), true},
	} {
		if got := pushPending(tc.run); got != tc.want {
			t.Errorf("%s: pushPending = %v, want %v", tc.name, got, tc.want)
		}
	}
	inline := mk(b, a, a, "")
	inline.Spec.Source = infrav1.Source{Inline: &infrav1.InlineSource{}}
	if pushPending(inline) {
		t.Error("a push marks a run without a git source")
	}
}

// TestPreviewsQueueBehindRuns: a pull request's preview waits for a slot
// behind the runs people asked for, as a scheduled check does.
func TestPreviewsQueueBehindRuns(t *testing.T) {
	run := &infrav1.TerraformRun{}
	if runPriority(run) != prioRun {
		t.Error("a run is not queued as a run")
	}
	run.Labels = map[string]string{infrav1.PreviewOfLabel: "net"}
	if runPriority(run) != prioCheck {
		t.Error("a preview is queued with the runs people asked for")
	}
	l := queue.NewLimiter(1, 0, nil)
	l.Warm()
	if ok, _ := l.Claim(client.ObjectKey{Namespace: "a", Name: "busy"}, "busy-1", prioRun); !ok {
		t.Fatal("the first claim of an empty limiter failed")
	}
	if ok, _ := l.Claim(client.ObjectKey{Namespace: "a", Name: "net-pr1"}, "net-pr1-plan-1", runPriority(run)); ok {
		t.Fatal("a preview took a slot of a full limiter")
	}
	if ok, _ := l.Claim(client.ObjectKey{Namespace: "a", Name: "db"}, "db-1", prioRun); ok {
		t.Fatal("a run took a slot of a full limiter")
	}
	l.Release("a", "busy-1")
	if ok, _ := l.Claim(client.ObjectKey{Namespace: "a", Name: "net-pr1"}, "net-pr1-plan-1", runPriority(run)); ok {
		t.Error("the preview took the freed slot before the run that waited")
	}
	if ok, _ := l.Claim(client.ObjectKey{Namespace: "a", Name: "db"}, "db-1", prioRun); !ok {
		t.Error("the waiting run did not get the freed slot")
	}
}

// TestStartWithKeptStates: a run is started with restore-state
// (engine.Request.KeptStates) when the TerraformRun owns a state an
// earlier run kept, and only then.
func TestStartWithKeptStates(t *testing.T) {
	cases := map[string]struct {
		owner string // the kept state's owner's uid; "" : no kept state
		kind  records.Kind
		want  bool
	}{
		"none":                          {},
		"another record of the run":     {owner: "uid-a", kind: records.KindPlanJSONSensitive},
		"one it owns":                   {owner: "uid-a", kind: records.KindErroredState, want: true},
		"one another TerraformRun owns": {owner: "uid-someone-else", kind: records.KindErroredState},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeEngine{}
			run := aRun("a")
			r, _ := newReconciler(t, f, run.DeepCopy())
			store := &records.SecretStore{Client: kubefake.NewClientset()}
			r.Records = &records.Router{Resources: store, Secrets: store}
			if tc.owner != "" {
				own := &records.SecretStore{Client: store.Client, Owner: &metav1.OwnerReference{APIVersion: "infra.opr8r.io/v1alpha1", Kind: "TerraformRun", Name: "a", UID: types.UID(tc.owner)}}
				if err := own.Put(ctx(), records.Key{Namespace: "ns", Run: "a", RunID: "a-0", Step: "apply", Kind: tc.kind}, []byte("{}")); err != nil {
					t.Fatal(err)
				}
			}
			if _, _, err := runSub(r, run, r.reconcileStart); err != nil {
				t.Fatal(err)
			}
			if len(f.built) != 1 || f.built[0].KeptStates != tc.want {
				t.Fatalf("built %+v; want one run with KeptStates %v", f.built, tc.want)
			}
		})
	}
}
