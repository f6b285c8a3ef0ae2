package controller

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// fakeEngine is an engine whose children are plain Jobs and whose progress
// the test sets per child: the sub-reconcilers' unit tests need no engine.
type fakeEngine struct {
	progress  map[string]engine.Progress
	approved  []engine.Decision
	rejected  []engine.Decision
	cancelled []string
	hint      string
	gateGone  bool
	// later is a child's progress from its second look on: a child that
	// moves between two looks in one pass.
	later map[string]engine.Progress
	looks map[string]int
	// built are the requests Build was given.
	built []engine.Request
}

var (
	_ engine.Engine    = &fakeEngine{}
	_ engine.Approver  = &fakeEngine{}
	_ engine.Canceller = &fakeEngine{}
)

const fakeName infrav1.EngineName = "argo" // any name the API enum allows

func (f *fakeEngine) Name() infrav1.EngineName { return fakeName }
func (f *fakeEngine) ChildGVK() schema.GroupVersionKind {
	return batchv1.SchemeGroupVersion.WithKind("Job")
}
func (f *fakeEngine) NewChild() client.Object         { return &batchv1.Job{} }
func (f *fakeEngine) NewChildList() client.ObjectList { return &batchv1.JobList{} }
func (f *fakeEngine) Build(req engine.Request) (client.Object, error) {
	f.built = append(f.built, req)
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{
		Name: req.Name, Namespace: req.Run.Namespace,
		Labels:          pipeline.ChildLabels(req.Run, req.Type, req.SpecHash, req.Number),
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(req.Run, infrav1.GroupVersion.WithKind("TerraformRun"))},
	}}, nil
}
func (f *fakeEngine) Observe(child client.Object, _ []client.Object, _ time.Time) (engine.Progress, error) {
	if f.looks == nil {
		f.looks = map[string]int{}
	}
	f.looks[child.GetName()]++
	if prog, ok := f.later[child.GetName()]; ok && f.looks[child.GetName()] > 1 {
		return prog, nil
	}
	if prog, ok := f.progress[child.GetName()]; ok {
		return prog, nil
	}
	return engine.Progress{Phase: infrav1.RunPending}, nil
}
func (f *fakeEngine) Approve(_ context.Context, _ client.Client, _ client.Object, d engine.Decision) error {
	if f.gateGone {
		return engine.ErrGateNotPending
	}
	f.approved = append(f.approved, d)
	return nil
}
func (f *fakeEngine) Reject(_ context.Context, _ client.Client, _ client.Object, d engine.Decision) error {
	f.rejected = append(f.rejected, d)
	return nil
}
func (f *fakeEngine) Cancel(_ context.Context, _ client.Client, child client.Object, _ string) error {
	f.cancelled = append(f.cancelled, child.GetName())
	return nil
}

// hinter is a fakeEngine that also has its own way to approve.
type hinter struct{ *fakeEngine }

func (h hinter) ApprovalHint(ns, child string) string { return "fake approve " + child }
func (h hinter) ApprovalRights() string               { return "limit who may use fake approve" }

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := infrav1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// newReconciler returns a reconciler of one fake engine over a fake client
// holding objs, at clock t0.
func newReconciler(t *testing.T, e engine.Engine, objs ...client.Object) (*TerraformRunReconciler, client.Client) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithStatusSubresource(&infrav1.TerraformRun{}).WithObjects(objs...).
		WithIndex(&infrav1.TerraformRunApproval{}, ApprovalRunIndex, approvalRun).
		WithIndex(&infrav1.TerraformRun{}, DependsOnIndex, dependsOnKeys).Build()
	reg, err := engine.NewRegistry(e)
	if err != nil {
		t.Fatal(err)
	}
	avail := engine.NewAvailability()
	avail.MarkChecked()
	avail.Set(e.Name(), true)
	return &TerraformRunReconciler{
		Client: c, APIReader: c, Engines: reg, Available: avail, DefaultEngine: e.Name(),
		Config: testutil.Config, DestroyTimeout: time.Hour, ProgressTimeout: time.Hour,
		Now: func() time.Time { return t0 }, Seals: engine.Seals{Key: []byte("the controller tests' seal key......")},
	}, c
}

// aRun is a TerraformRun as stored: with a uid and the finalizer.
func aRun(name string) *infrav1.TerraformRun {
	run := testutil.MakeRun(name, "ns").Obj()
	run.UID = types.UID("uid-" + name)
	run.Generation = 1
	run.Finalizers = []string{infrav1.Finalizer}
	return run
}

// withRun gives a run a current run of the given number, phase and type,
// for the spec it has.
func withRun(r *TerraformRunReconciler, run *infrav1.TerraformRun, n int64, phase infrav1.RunPhase, t infrav1.RunType) *infrav1.TerraformRun {
	st := r.newPassState(run)
	start := metav1.NewTime(t0.Add(-time.Minute))
	run.Status.LastRunNumber = n
	run.Status.Run = &infrav1.RunStatus{
		ID: names.ChildName(run.Name, t, n), Number: n, Type: t, Engine: fakeName, SpecHash: st.hash, Attempt: 1,
		Child: infrav1.ChildReference{APIVersion: "batch/v1", Kind: "Job", Name: names.ChildName(run.Name, t, n)},
		Phase: phase, StartedAt: &start,
	}
	return run
}

// childOf builds the child of run number n, as the fake engine would.
func childOf(t *testing.T, run *infrav1.TerraformRun, typ infrav1.RunType, n int64, hash string) *batchv1.Job {
	t.Helper()
	obj, err := (&fakeEngine{}).Build(engine.Request{Run: run, Type: typ, Name: names.ChildName(run.Name, typ, n), Number: n, SpecHash: hash})
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*batchv1.Job)
}

// runSub runs one sub-reconciler on a fresh pass.
func runSub(r *TerraformRunReconciler, run *infrav1.TerraformRun, sub subReconciler) (*passState, ctrl.Result, error) {
	st := r.newPassState(run)
	res, err := sub(context.Background(), run, st)
	// As Reconcile does: the pass's outcome and error become conditions.
	_, _ = r.summarize(run, st, res, err)
	return st, res, err
}

func condOf(run *infrav1.TerraformRun, typ string) string {
	for _, c := range run.Status.Conditions {
		if c.Type == typ {
			return string(c.Status) + "/" + c.Reason
		}
	}
	return ""
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func ctx() context.Context { return context.Background() }

func findCond(run *infrav1.TerraformRun, typ string) *metav1.Condition {
	for i := range run.Status.Conditions {
		if run.Status.Conditions[i].Type == typ {
			return &run.Status.Conditions[i]
		}
	}
	return nil
}

func ctrlResult() ctrl.Result { return ctrl.Result{} }

func contains(s, sub string) bool { return strings.Contains(s, sub) }
