package controller

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/opr8r/opr8r/pkg/results"

	"github.com/opr8r/opr8r/pkg/names"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// drivenEngine is a fake engine that no controller drives: it records the
// reconciler's Drive calls.
type drivenEngine struct {
	fakeEngine
	driven []string
	seen   []engine.Progress
	inputs []engine.DriveInput
	err    error
}

var _ engine.Driver = &drivenEngine{}

func (d *drivenEngine) Drive(_ context.Context, _ client.Client, _ client.Reader, child client.Object, prog engine.Progress, in engine.DriveInput) error {
	d.driven = append(d.driven, child.GetName())
	d.seen = append(d.seen, prog)
	d.inputs = append(d.inputs, in)
	return d.err
}

func TestReconcileDrive(t *testing.T) {
	boom := errors.New("boom")
	approvedAA := &infrav1.ApprovalStatus{Digest: "sha256:aa", Approved: true}
	cases := map[string]struct {
		driver       bool
		child        bool
		err          error
		approval     *infrav1.ApprovalStatus // status.approval; the plan waiting is sha256:aa
		wantDrive    bool
		wantDecision *engine.RecordedDecision
		wantStalled  bool
	}{
		"an engine with a controller of its own": {child: true},
		"a driven engine, no child":              {driver: true},
		"a driven engine's child":                {driver: true, child: true, wantDrive: true},
		"a Drive that fails":                     {driver: true, child: true, err: boom, wantDrive: true},
		"the approval status records is the driver's decision": {driver: true, child: true, approval: approvedAA, wantDrive: true,
			wantDecision: &engine.RecordedDecision{Approved: true, Digest: "sha256:aa"}},
		"an approval of another plan is no decision": {driver: true, child: true, approval: &infrav1.ApprovalStatus{Digest: "sha256:bb", Approved: true}, wantDrive: true},
		"a broken seal stalls the run":               {driver: true, child: true, err: engine.ErrSealBroken, wantDrive: true, wantStalled: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := &drivenEngine{err: tc.err}
			var e engine.Engine = &d.fakeEngine
			if tc.driver {
				e = d
			}
			r, _ := newReconciler(t, e)
			run := withRun(r, aRun("a"), 1, infrav1.RunRunning, infrav1.RunApply)
			st := r.newPassState(run)
			st.engine = e
			st.progress = engine.Progress{Phase: infrav1.RunRunning, Message: "planning"}
			run.Status.Plan = &infrav1.PlanStatus{Digest: "sha256:aa", HasChanges: true}
			run.Status.Approval = tc.approval
			if tc.child {
				st.child = childOf(t, run, infrav1.RunApply, 1, st.hash)
			}
			res, err := r.reconcileDrive(ctx(), run, st)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			var ge *GenericError
			var se *StallingError
			switch {
			case tc.wantStalled && (!errors.As(err, &se) || se.Reason != infrav1.ReasonRunFailed):
				t.Fatalf("err = %#v, want a StallingError (RunFailed) that keeps its cause", err)
			case !tc.wantStalled && tc.err != nil && (!errors.As(err, &ge) || ge.Reason != "Drive"):
				t.Fatalf("err = %#v, want a GenericError with reason Drive that keeps its cause", err)
			}
			if tc.wantDrive {
				if diff := cmp.Diff(tc.wantDecision, d.inputs[0].Decision); diff != "" {
					t.Errorf("the driver's decision (-want +got):\n%s", diff)
				}
			}
			if res != ctrlResult() {
				t.Fatalf("result = %+v, want none", res)
			}
			if got := len(d.driven) > 0; got != tc.wantDrive {
				t.Fatalf("driven %v, want %v", d.driven, tc.wantDrive)
			}
			if tc.wantDrive && (d.driven[0] != "a-1" || d.seen[0].Message != "planning") {
				t.Fatalf("drove %v with %+v, want a-1 with the pass's progress", d.driven, d.seen)
			}
			if len(run.Status.Conditions) != 0 {
				t.Fatalf("reconcileDrive set conditions: %+v", run.Status.Conditions)
			}
		})
	}
}

func TestReconcileOutputs(t *testing.T) {
	const outputsJSON = `{"id":{"sensitive":false,"value":"abc"},"secret":{"sensitive":true,"value":"s3"}}`
	rawOf := func(child string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names.RawOutputsSecretName(child), Namespace: "ns"},
			Data: map[string][]byte{results.RawOutputsKey: []byte(outputsJSON)}}
	}
	cases := map[string]struct {
		phase      infrav1.RunPhase
		raw        bool
		secret     map[string]string // the outputs Secret as found; nil: absent
		specChange bool
		want       map[string]string // the outputs Secret after; nil: absent
	}{
		"deleted by a person, raw outputs kept": {phase: infrav1.RunSucceeded, raw: true, want: map[string]string{"id": "abc", "secret": "s3"}},
		"edited by a person":                    {phase: infrav1.RunSucceeded, raw: true, secret: map[string]string{"id": "tampered"}, want: map[string]string{"id": "abc", "secret": "s3"}},
		"intact":                                {phase: infrav1.RunSucceeded, raw: true, secret: map[string]string{"id": "abc", "secret": "s3"}, want: map[string]string{"id": "abc", "secret": "s3"}},
		"raw outputs pruned with their child":   {phase: infrav1.RunSucceeded},
		"the run is still active":               {phase: infrav1.RunRunning, raw: true},
		"the run failed":                        {phase: infrav1.RunFailed, raw: true},
		"a new run is due (spec changed)":       {phase: infrav1.RunSucceeded, raw: true, specChange: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var objs []client.Object
			if tc.raw {
				objs = append(objs, rawOf("a-1"))
			}
			run := aRun("a")
			if tc.secret != nil {
				s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "a-outputs", Namespace: "ns",
					OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(run, infrav1.GroupVersion.WithKind("TerraformRun"))}},
					Data: map[string][]byte{}}
				for k, v := range tc.secret {
					s.Data[k] = []byte(v)
				}
				objs = append(objs, s)
			}
			r, c := newReconciler(t, &fakeEngine{}, objs...)
			run = withRun(r, run, 1, tc.phase, infrav1.RunApply)
			run.Status.OutputsSecretName = "a-outputs"
			if tc.specChange {
				run.Spec.Terraform.Vars = append(run.Spec.Terraform.Vars, infrav1.Variable{Name: "name", Value: apiextensionsv1.JSON{Raw: []byte(`"changed"`)}})
			}
			_, _, err := runSub(r, run, r.reconcileOutputs)
			if err != nil {
				t.Fatal(err)
			}
			got := &corev1.Secret{}
			err = c.Get(ctx(), client.ObjectKey{Namespace: "ns", Name: "a-outputs"}, got)
			if tc.want == nil {
				if tc.secret == nil && !apierrors.IsNotFound(err) {
					t.Fatalf("an outputs Secret was written: %v %+v", err, got.Data)
				}
				if tc.secret != nil && string(got.Data["id"]) != tc.secret["id"] {
					t.Fatalf("the outputs Secret was rewritten: %+v", got.Data)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Data) != len(tc.want) {
				t.Fatalf("outputs = %q, want %q", got.Data, tc.want)
			}
			for k, v := range tc.want {
				if string(got.Data[k]) != v {
					t.Fatalf("outputs[%s] = %q, want %q", k, got.Data[k], v)
				}
			}
			if !metav1.IsControlledBy(got, run) {
				t.Fatalf("the outputs Secret is not owned by the run: %+v", got.OwnerReferences)
			}
			if len(run.Status.Outputs) != 2 || run.Status.Outputs[0] != "id" {
				t.Fatalf("status.outputs = %v, want the keys", run.Status.Outputs)
			}
		})
	}
}

// TestWriteOutputsSecretThatIsNotOurs: a Secret of the outputs' name that
// the run does not own is never overwritten, whether the cache shows it or
// not (a Secret without opr8r's label is not in the manager's cache: its
// create fails AlreadyExists and the Secret is read past the cache); the
// run stalls naming the Secret and the fix. An API error names the Secret.
func TestWriteOutputsSecretThatIsNotOurs(t *testing.T) {
	theirs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "a-outputs", Namespace: "ns"}, Data: map[string][]byte{"x": []byte("theirs")}}
	for name, cached := range map[string]bool{"in the cache": true, "not in the cache": false} {
		t.Run(name, func(t *testing.T) {
			r, c := newReconciler(t, &fakeEngine{}, theirs.DeepCopy())
			if !cached {
				r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
					Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
						if _, ok := obj.(*corev1.Secret); ok {
							return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
						}
						return cl.Get(ctx, key, obj, opts...)
					},
				})
			}
			_, err := r.writeOutputsSecret(ctx(), aRun("a"), "a-outputs", map[string][]byte{"id": []byte("abc")})
			var s *StallingError
			if !errors.As(err, &s) || s.Reason != infrav1.ReasonOutputsFailed || !contains(err.Error(), "spec.outputs.secretName") {
				t.Fatalf("err = %v, want OutputsFailed naming spec.outputs.secretName", err)
			}
			got := &corev1.Secret{}
			if err := c.Get(ctx(), client.ObjectKeyFromObject(theirs), got); err != nil || string(got.Data["x"]) != "theirs" || len(got.Data) != 1 {
				t.Fatalf("their Secret was changed: %+v, %v", got.Data, err)
			}
		})
	}
	t.Run("an API error names the Secret", func(t *testing.T) {
		r, c := newReconciler(t, &fakeEngine{})
		r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
			Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
				return apierrors.NewServiceUnavailable("etcd is away")
			},
		})
		_, err := r.writeOutputsSecret(ctx(), aRun("a"), "a-outputs", map[string][]byte{"id": []byte("abc")})
		var g *GenericError
		if !errors.As(err, &g) || !contains(err.Error(), "creating Secret a-outputs") || !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("err = %v, want a GenericError naming Secret a-outputs that keeps its cause", err)
		}
	})
}
