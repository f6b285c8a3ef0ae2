package enginestest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/engine/enginetest"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// Run is the offline engine contract suite: what every engine must do, in
// plain go test, with no API server. An in-memory client holds the child
// and its step objects; the kit's simulator plays the engine's controller
// and, where the engine has them, the suite plays opr8r's own side: its
// controllers (Kit.Tick) and its driver (engine.Driver). The envtest
// conformance suite (test/integration) is the layer above, with the real
// manager and API server; make e2e the one above that, with the real
// engines.
func Run(t *testing.T, kit enginetest.Kit) {
	t.Run("Build is deterministic and valid", func(t *testing.T) { buildContract(t, kit) })
	t.Run("each step runs as its own service account", func(t *testing.T) { accountsContract(t, kit) })
	t.Run("kept states are restored first, as the runner", func(t *testing.T) { keptStatesContract(t, kit) })
	t.Run("a stopped child reads as stopped, its gate skipped", func(t *testing.T) { stoppedContract(t, kit) })
	t.Run("a slimmed cache copy observes the same", func(t *testing.T) { slimContract(t, kit) })
	t.Run("a plan without changes skips the gate", func(t *testing.T) { noChangesContract(t, kit) })
	t.Run("checks come out in order", func(t *testing.T) { checksContract(t, kit) })
	t.Run("the simulator plays what the real engine recorded", func(t *testing.T) { recordedContract(t, kit) })
}

// buildContract builds every golden case twice: the same object each time,
// accepted by the engine's own validation.
func buildContract(t *testing.T, kit enginetest.Kit) {
	for name, tc := range testutil.GoldenCases() {
		req := request(kit, tc.Run.Obj(), tc.Type, 1)
		req.Dependencies = testutil.GoldenDeps(name)
		first, err := kit.Engine.Build(req)
		if err != nil {
			t.Fatalf("%s: Build: %v", name, err)
		}
		second, err := kit.Engine.Build(req)
		if err != nil {
			t.Fatalf("%s: Build again: %v", name, err)
		}
		if diff := cmp.Diff(first, second); diff != "" {
			t.Errorf("%s: Build is not deterministic (-first +second):\n%s", name, diff)
		}
		if err := kit.Validate(first); err != nil {
			t.Errorf("%s: the engine's own validation refuses the child: %v", name, err)
		}
	}
}

// accountsContract builds every golden case with a plan service account
// of its own: the engine's validation accepts the child, and the plan's
// account (never the runner's) appears in it, as the check's does.
func accountsContract(t *testing.T, kit enginetest.Kit) {
	for name, tc := range testutil.GoldenCases() {
		req := request(kit, tc.Run.Obj(), tc.Type, 1)
		req.Dependencies = testutil.GoldenDeps(name)
		req.Config.PlanServiceAccount = "opr8r-planner"
		req.Run = pipeline.Defaults(tc.Run.Obj(), kit.Engine.Name(), req.Config)
		child, err := kit.Engine.Build(req)
		if err != nil {
			t.Fatalf("%s: Build: %v", name, err)
		}
		if err := kit.Validate(child); err != nil {
			t.Errorf("%s: the engine's own validation refuses the child with a plan account: %v", name, err)
		}
		b, err := json.Marshal(child)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"opr8r-planner"`) {
			t.Errorf("%s: the plan's service account appears nowhere in the child", name)
		}
	}
}

// keptStatesContract builds every golden case as a run whose TerraformRun
// has kept states (engine.Request.KeptStates), with a plan service account
// of its own: the engine's validation accepts the child, which runs
// restore-state, as the runner; without kept states, no child has it.
func keptStatesContract(t *testing.T, kit enginetest.Kit) {
	for name, tc := range testutil.GoldenCases() {
		for _, kept := range []bool{false, true} {
			req := request(kit, tc.Run.Obj(), tc.Type, 1)
			req.Dependencies = testutil.GoldenDeps(name)
			req.Config.PlanServiceAccount = "opr8r-planner"
			req.Run = pipeline.Defaults(tc.Run.Obj(), kit.Engine.Name(), req.Config)
			req.KeptStates = kept
			child, err := kit.Engine.Build(req)
			if err != nil {
				t.Fatalf("%s: Build: %v", name, err)
			}
			if err := kit.Validate(child); err != nil {
				t.Errorf("%s (kept states: %v): the engine's own validation refuses the child: %v", name, kept, err)
			}
			b, err := json.Marshal(child)
			if err != nil {
				t.Fatal(err)
			}
			if has := strings.Contains(string(b), `"`+names.StepRestoreState+`"`); has != kept {
				t.Errorf("%s: the child runs %s: %v; want %v (kept states: %v)", name, names.StepRestoreState, has, kept, kept)
			}
		}
	}
}

// stoppedContract stops a child whose plan waits for approval: the engine
// ends it with its cleanup, and it reads as Failed, "stopped: <reason>",
// its gate skipped, never as a rejection.
func stoppedContract(t *testing.T, kit enginetest.Kit) {
	c, ok := kit.Engine.(engine.Canceller)
	if !ok {
		t.Fatalf("engine %s cannot stop a child (engine.Canceller): the reconciler stops superseded plans and applies before a destroy", kit.Engine.Name())
	}
	h := newHarness(t, kit)
	sim := h.start(testutil.MakeRun("stopped", "ns"), infrav1.RunApply)
	digest := enginetest.Digest("stopped")
	sim.Start()
	sim.Plan(1, 0, 0, digest)
	sim.Suspend(digest)
	if p := h.observe(); p.Gate.State != engine.GatePending {
		t.Fatalf("the gate is %q before the stop, want Pending", p.Gate.State)
	}
	const reason = "superseded by a spec change"
	if err := c.Cancel(context.Background(), h.c, h.child(), reason); err != nil {
		t.Fatal(err)
	}
	sim.CompleteAfterGate()
	p := h.observe()
	want := struct {
		Finished bool
		Phase    infrav1.RunPhase
		Message  string
		Gate     engine.GateState
	}{true, infrav1.RunFailed, engine.Stopped(reason), engine.GateSkipped}
	got := want
	got.Finished, got.Phase, got.Message, got.Gate = p.Finished, p.Phase, p.Message, p.Gate.State
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the stopped child reads (-want +got):\n%s", diff)
	}
}

// slimContract observes, at every state of an approved apply, the child
// and its step objects as the manager's cache keeps them (CacheSlimmer):
// the same progress as from the whole objects.
func slimContract(t *testing.T, kit enginetest.Kit) {
	slimmer, ok := kit.Engine.(engine.CacheSlimmer)
	if !ok {
		t.Logf("engine %s keeps its objects whole in the cache: nothing to compare", kit.Engine.Name())
		return
	}
	h := newHarness(t, kit)
	sim := h.start(testutil.MakeRun("slim", "ns"), infrav1.RunApply)
	digest := enginetest.Digest("slim")
	check := func(state string) {
		t.Helper()
		child, related := h.objects()
		full, err := kit.Engine.Observe(child, related, time.Now())
		if err != nil {
			t.Fatalf("%s: %v", state, err)
		}
		slimChild := child.DeepCopyObject().(client.Object)
		slimmer.SlimForCache(slimChild)
		var slimRelated []client.Object
		for _, o := range related {
			s := o.DeepCopyObject().(client.Object)
			slimmer.SlimForCache(s)
			slimRelated = append(slimRelated, s)
		}
		slim, err := kit.Engine.Observe(slimChild, slimRelated, time.Now())
		if err != nil {
			t.Fatalf("%s: the slimmed copy: %v", state, err)
		}
		if diff := cmp.Diff(full, slim); diff != "" {
			t.Errorf("%s: the slimmed copy observes otherwise (-whole +slimmed):\n%s", state, diff)
		}
	}
	sim.Start()
	check("started")
	sim.Plan(1, 0, 0, digest)
	check("planned")
	sim.Suspend(digest)
	check("waiting for approval")
	h.approve(digest)
	sim.FinishApply(`{"id":{"sensitive":false,"value":"x"}}`)
	check("applied")
}

// noChangesContract: a plan without changes never waits at the gate; the
// run succeeds with nothing applied and its outputs exported.
func noChangesContract(t *testing.T, kit enginetest.Kit) {
	h := newHarness(t, kit)
	sim := h.start(testutil.MakeRun("same", "ns"), infrav1.RunApply)
	sim.Start()
	sim.Plan(0, 0, 0, enginetest.Digest("same"))
	sim.SkipGate()
	if p := h.observe(); p.Gate.State == engine.GatePending {
		t.Fatalf("a plan without changes waits at the gate: %+v", p.Gate)
	}
	sim.FinishApply(`{}`)
	p := h.observe()
	if !p.Finished || p.Phase != infrav1.RunSucceeded || p.Gate.State == engine.GatePending || p.Gate.State == engine.GateApproved || p.Applied || !p.OutputsExported {
		t.Errorf("a plan without changes ends %s (finished %v), gate %q, applied %v, outputs exported %v; want Succeeded, the gate skipped, nothing applied, outputs exported",
			p.Phase, p.Finished, p.Gate.State, p.Applied, p.OutputsExported)
	}
	for _, s := range p.Steps {
		if (s.Name == names.StepApprove || s.Name == names.StepApply) && s.Phase != infrav1.StepSkipped {
			t.Errorf("step %s is %s, want Skipped", s.Name, s.Phase)
		}
	}
}

// checksContract: a run's checks are steps right after plan and before
// the gate, each once, by name, whatever their order in the spec.
func checksContract(t *testing.T, kit enginetest.Kit) {
	h := newHarness(t, kit)
	run := testutil.MakeRun("checked", "ns").
		Check("zeta", "registry.example.com/zeta:1", "", "true").
		Check("alpha", "registry.example.com/alpha:1", "", "true")
	sim := h.start(run, infrav1.RunApply)
	digest := enginetest.Digest("checked")
	sim.Start()
	sim.Plan(1, 0, 0, digest)
	sim.PassChecks(names.CheckStep("zeta"), names.CheckStep("alpha"))
	sim.Suspend(digest)
	var order []string
	for _, s := range h.observe().Steps {
		order = append(order, s.Name)
	}
	want := []string{names.StepClone, names.StepInit, names.StepPlan, names.CheckStep("alpha"), names.CheckStep("zeta"), names.StepApprove}
	if diff := cmp.Diff(want, order); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
}

// request is the request the manager makes for a run's child.
func request(kit enginetest.Kit, run *infrav1.TerraformRun, typ infrav1.RunType, number int64) engine.Request {
	eff := pipeline.Defaults(run, kit.Engine.Name(), testutil.Config)
	return engine.Request{Run: eff, Type: typ, Name: names.ChildName(run.Name, typ, number), Number: number,
		SpecHash: pipeline.SpecHash(eff), Config: testutil.Config}
}

// harness holds one child in an in-memory client, with the kit's
// simulator and, in the background, opr8r's own side of the engine.
type harness struct {
	t    *testing.T
	kit  enginetest.Kit
	c    client.Client
	key  client.ObjectKey
	mu   sync.Mutex
	errs []error
	// in is what the reconciler keeps of the run for a Driver: the seal
	// of the child as built, the decision recorded.
	in engine.DriveInput
}

func newHarness(t *testing.T, kit enginetest.Kit) *harness {
	t.Helper()
	gomega.RegisterTestingT(t)
	scheme, err := engine.Scheme([]engine.Engine{kit.Engine})
	if err != nil {
		t.Fatal(err)
	}
	statusTypes, err := statusSubresources(kit, scheme)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, kit: kit, c: fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(statusTypes...).Build()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go h.loop(ctx, done)
	t.Cleanup(func() {
		cancel()
		<-done
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, err := range h.errs {
			t.Errorf("opr8r's side of the engine: %v", err)
		}
	})
	return h
}

// statusSubresources are the kinds whose status is written apart from
// their spec: those of the engine's CRDs that have a status subresource,
// and the built-in kinds engines use.
func statusSubresources(kit enginetest.Kit, scheme *runtime.Scheme) ([]client.Object, error) {
	out := []client.Object{&batchv1.Job{}, &corev1.Pod{}, &corev1.PersistentVolumeClaim{}}
	if kit.CRDs == nil {
		return out, nil
	}
	crds, err := kit.CRDs()
	if err != nil {
		return nil, err
	}
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if v.Subresources == nil || v.Subresources.Status == nil {
				continue
			}
			obj, err := scheme.New(schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind})
			if err != nil {
				continue // a kind of the engine's that opr8r never reads
			}
			out = append(out, obj.(client.Object))
		}
	}
	return out, nil
}

// start builds and creates the child of a run, as the manager does, and
// returns its simulator.
func (h *harness) start(run *testutil.RunWrapper, typ infrav1.RunType) enginetest.Sim {
	h.t.Helper()
	r := run.Obj()
	r.Spec.Engine = h.kit.Engine.Name()
	child, err := h.kit.Engine.Build(request(h.kit, r, typ, 1))
	if err != nil {
		h.t.Fatal(err)
	}
	child.SetUID(types.UID("uid-" + child.GetName()))
	seals := engine.Seals{Key: []byte("the offline contract suite's seal key")}
	if err := seals.Seal(h.kit.Engine, child); err != nil {
		h.t.Fatal(err)
	}
	if err := h.c.Create(context.Background(), child); err != nil {
		h.t.Fatal(err)
	}
	h.mu.Lock()
	h.key = client.ObjectKeyFromObject(child)
	h.in.Verify = seals.Verifier(h.kit.Engine)
	h.mu.Unlock()
	env := enginetest.Env{Client: h.c, Writes: &atomic.Int64{}, Timeout: 10 * time.Second, Interval: 5 * time.Millisecond}
	return h.kit.NewSim(env, h.key)
}

// child reads the child.
func (h *harness) child() client.Object {
	h.t.Helper()
	child, _ := h.objects()
	return child
}

// objects reads the child and its step objects (engine.RelatedLister).
func (h *harness) objects() (client.Object, []client.Object) {
	h.t.Helper()
	child, related, err := h.read(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	return child, related
}

func (h *harness) read(ctx context.Context) (client.Object, []client.Object, error) {
	h.mu.Lock()
	key := h.key
	h.mu.Unlock()
	child := h.kit.Engine.NewChild()
	if err := h.c.Get(ctx, key, child); err != nil {
		return nil, nil, err
	}
	var related []client.Object
	if rl, ok := h.kit.Engine.(engine.RelatedLister); ok {
		var err error
		if related, err = rl.Related(ctx, h.c, child); err != nil {
			return nil, nil, err
		}
	}
	return child, related, nil
}

// observe reads the child's progress now.
func (h *harness) observe() engine.Progress {
	h.t.Helper()
	child, related := h.objects()
	p, err := h.kit.Engine.Observe(child, related, time.Now())
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// approve decides the waiting gate for digest, as the reconciler does.
func (h *harness) approve(digest string) {
	h.t.Helper()
	a, ok := h.kit.Engine.(engine.Approver)
	if !ok {
		h.t.Fatalf("engine %s cannot approve (engine.Approver)", h.kit.Engine.Name())
	}
	h.record(&engine.RecordedDecision{Approved: true, Digest: digest})
	if err := a.Approve(context.Background(), h.c, h.child(), engine.Decision{Digest: digest, By: "alice"}); err != nil {
		h.t.Fatal(err)
	}
}

// record keeps a decision as the reconciler records it in status.
func (h *harness) record(d *engine.RecordedDecision) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.in.Decision = d
}

// reject rejects the waiting gate, as the reconciler does.
func (h *harness) reject(reason string) {
	h.t.Helper()
	a, ok := h.kit.Engine.(engine.Approver)
	if !ok {
		h.t.Fatalf("engine %s cannot reject (engine.Approver)", h.kit.Engine.Name())
	}
	h.record(&engine.RecordedDecision{Approved: false})
	if err := a.Reject(context.Background(), h.c, h.child(), engine.Decision{Reason: reason, By: "alice"}); err != nil {
		h.t.Fatal(err)
	}
}

// loop plays opr8r's side of the engine until ctx ends: its controllers
// (Kit.Tick) and, for an engine no controller moves, the driver, with the
// progress observed.
func (h *harness) loop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	d, drives := h.kit.Engine.(engine.Driver)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
		if h.kit.Tick != nil {
			h.note(ctx, h.kit.Tick(ctx, h.c))
		}
		h.mu.Lock()
		started := h.key.Name != ""
		h.mu.Unlock()
		if !drives || !started {
			continue
		}
		child, related, err := h.read(ctx)
		if err != nil {
			h.note(ctx, err)
			continue
		}
		p, err := h.kit.Engine.Observe(child, related, time.Now())
		h.mu.Lock()
		in := h.in
		h.mu.Unlock()
		if err == nil {
			err = d.Drive(ctx, h.c, h.c, child, p, in)
		}
		h.note(ctx, err)
	}
}

// note keeps an error of the loop for the test's end, unless the test is
// over (its context cancelled) or it is a conflict, which the next tick
// retries as the manager's next pass would.
func (h *harness) note(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil || apierrors.IsConflict(err) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, err)
}

// recordedStates are the states the simulators play that make e2e records
// from the real engines (test/e2e/record_test.go), each with how the
// simulator reaches it for a manual apply run.
var recordedStates = map[string]func(h *harness, sim enginetest.Sim){
	"awaiting-approval": func(h *harness, sim enginetest.Sim) {
		d := enginetest.Digest("recorded")
		sim.Start()
		sim.Plan(1, 0, 0, d)
		sim.Suspend(d)
	},
	"applied": func(h *harness, sim enginetest.Sim) {
		d := enginetest.Digest("recorded")
		sim.Start()
		sim.Plan(1, 0, 0, d)
		sim.Suspend(d)
		h.approve(d)
		sim.FinishApply(`{"message":{"sensitive":false,"value":"Hello"}}`)
	},
	"no-changes": func(h *harness, sim enginetest.Sim) {
		sim.Start()
		sim.Plan(0, 0, 0, enginetest.Digest("recorded"))
		sim.SkipGate()
		sim.FinishApply(`{"message":{"sensitive":false,"value":"Hello"}}`)
	},
	"rejected": func(h *harness, sim enginetest.Sim) {
		d := enginetest.Digest("recorded")
		sim.Start()
		sim.Plan(1, 0, 0, d)
		sim.Suspend(d)
		h.reject("not today")
		sim.CompleteAfterGate()
	},
	"stopped": func(h *harness, sim enginetest.Sim) {
		d := enginetest.Digest("recorded")
		sim.Start()
		sim.Plan(1, 0, 0, d)
		sim.Suspend(d)
		if err := h.kit.Engine.(engine.Canceller).Cancel(context.Background(), h.c, h.child(), "superseded by a spec change"); err != nil {
			h.t.Fatal(err)
		}
		sim.CompleteAfterGate()
	},
	"plan-failed": func(h *harness, sim enginetest.Sim) {
		sim.Start()
		sim.Fail(names.StepPlan, "Error: Invalid value for variable")
	},
}

// shape is what opr8r reads of a child, without what differs from one run
// to another (digests, times, terraform's words).
type shape struct {
	Phase                                 infrav1.RunPhase
	Finished                              bool
	Gate                                  engine.GateState
	Steps                                 []string
	Planned, HasChanges, Applied, Outputs bool
	// Message is the message's kind: its words up to the first colon.
	Message string
}

func shapeOf(p engine.Progress) shape {
	s := shape{Phase: p.Phase, Finished: p.Finished, Gate: p.Gate.State, Planned: p.Plan != nil,
		HasChanges: p.Plan != nil && p.Plan.HasChanges, Applied: p.Applied, Outputs: p.OutputsExported}
	for _, st := range p.Steps {
		s.Steps = append(s.Steps, st.Name+"="+string(st.Phase))
	}
	if p.Finished && p.Phase != infrav1.RunSucceeded {
		s.Message, _, _ = strings.Cut(p.Message, ":")
	}
	return s
}

// recordedContract checks the simulator against the real engine: for each
// state make e2e recorded (testdata/recorded/<state>.yaml, in the engine's
// package), the simulator plays the same state, and opr8r must read both
// alike.
func recordedContract(t *testing.T, kit enginetest.Kit) {
	files, err := filepath.Glob(filepath.Join("testdata", "recorded", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("engine %s has no recorded real objects in testdata/recorded: run the e2e scenarios with E2E_RECORD_DIR set (docs/e2e.md) and copy the engine's files there", kit.Engine.Name())
	}
	scheme, err := engine.Scheme([]engine.Engine{kit.Engine})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		state := strings.TrimSuffix(filepath.Base(f), ".yaml")
		play, ok := recordedStates[state]
		if !ok {
			t.Errorf("%s: no simulator script for the recorded state %q", f, state)
			continue
		}
		objs, err := loadRecorded(scheme, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		real, err := kit.Engine.Observe(objs[0], objs[1:], time.Now())
		if err != nil {
			t.Fatalf("%s: observing the real objects: %v", f, err)
		}
		h := newHarness(t, kit)
		play(h, h.start(testutil.MakeRun("recorded", "ns"), infrav1.RunApply))
		if diff := cmp.Diff(shapeOf(real), shapeOf(h.observe())); diff != "" {
			t.Errorf("%s: the simulator's %s reads otherwise than the real engine's (-real +simulated):\n%s", kit.Engine.Name(), state, diff)
		}
	}
}

// loadRecorded reads a recorded List: the child first, then its step
// objects, as typed objects of the scheme.
func loadRecorded(scheme *runtime.Scheme, path string) ([]client.Object, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	list := map[string]any{}
	if err := yaml.Unmarshal(b, &list); err != nil {
		return nil, err
	}
	items, _ := list["items"].([]any)
	var out []client.Object
	for _, it := range items {
		u := &unstructured.Unstructured{Object: it.(map[string]any)}
		obj, err := scheme.New(u.GroupVersionKind())
		if err != nil {
			return nil, err
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
			return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
		out = append(out, obj.(client.Object))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no objects")
	}
	return out, nil
}
