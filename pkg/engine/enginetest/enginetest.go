// Package enginetest is what the engine-independent test suites (the
// conformance suite, the fuzzer, the write counts) need of each engine: its
// own offline validation, and a simulator that plays its controller in an
// API server where no engine controller runs. Each engine provides a Kit in
// engines/<engine>/<engine>test; engines/enginestest lists them.
package enginetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync/atomic"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	. "github.com/onsi/gomega" //nolint:revive // test support, read as test code
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/results"
)

// Kit is an engine with what the shared test suites need of it.
type Kit struct {
	// Engine is the engine.
	Engine engine.Engine
	// Validate runs the engine's own validation on a child, offline.
	Validate func(child client.Object) error
	// NewSim returns a simulator of the engine's controller for one child.
	NewSim func(env Env, key client.ObjectKey) Sim
	// StartWrites are the API writes, by "verb Kind", that opr8r makes to
	// start a run besides creating the child (the Job engine's driver
	// creates the workspace volume claim).
	StartWrites map[string]int
	// CRDs returns the engine's CRDs at the version go.mod pins, for the
	// API servers of the tests, the benches and the dev tool; nil for an
	// engine whose kinds every cluster serves.
	CRDs func() ([]*apiextensionsv1.CustomResourceDefinition, error)
	// StepObjects are empty lists of every kind the engine makes for a
	// child's steps besides the child (Tekton's TaskRuns and CustomRuns,
	// Argo's task results, the Job engine's Jobs; pods for all), for the
	// suites that look for leaks and leftovers.
	StepObjects func() []client.ObjectList
	// Bench plays the engine in the scale benches; nil for an engine they
	// do not play.
	Bench BenchPlayer
	// Tick plays, once, opr8r's own controllers of the engine
	// (engine.ControllerProvider) over every object they handle, where no
	// manager runs them (the offline contract suite); nil for an engine
	// without controllers of its own.
	Tick func(ctx context.Context, c client.Client) error
}

// Env is what a simulator works with.
type Env struct {
	// Client writes as the engine's controller would.
	Client client.Client
	// Writes counts the simulator's writes to children and their step
	// objects: the child changes the manager observes.
	Writes *atomic.Int64
	// Timeout and Interval bound a simulator's waits for opr8r's own moves.
	Timeout, Interval time.Duration
}

// Sim plays an engine's controller for one child, so that one suite drives
// every engine through the same scenarios. Its methods fail the test
// (Gomega) when something goes wrong.
type Sim interface {
	// Key is the child's key.
	Key() client.ObjectKey
	// Object returns the child as stored.
	Object() client.Object
	// Validate runs the engine's own validation on the stored child.
	Validate() error
	// Start runs clone (at DefaultCommit) and init to success.
	Start()
	// StartAt runs clone at the given source revision, and init.
	StartAt(commit string)
	// Plan finishes the plan step with the given result (and the inputs
	// digest DefaultInputs).
	Plan(add, change, destroy int, digest string)
	// PlanResult finishes the plan step with the given results.
	PlanResult(p results.Plan)
	// Complete completes a plan-only child (a check, a planOnly run) after
	// its plan: cleanup runs and the child succeeds.
	Complete()
	// Suspend reaches the approval gate for the digest.
	Suspend(digest string)
	// SkipGate records a plan without changes: gate and apply skipped.
	SkipGate()
	// Gate returns the gate's state ("Pending", "Approved", "Rejected"),
	// its message and the approved digest it carries.
	Gate() (state, message, digest string)
	// FinishApply runs apply and export (writing the raw outputs Secret as
	// the export step does) and completes the child successfully.
	FinishApply(outputsJSON string)
	// Fail fails a step with terraform's message and completes the child.
	Fail(step, msg string)
	// PassChecks runs the given check steps (check-<name>) to success.
	PassChecks(checks ...string)
	// FailCheck fails a check step with opr8r-step's summary (its last
	// line of output), after the passed ones succeeded, and completes the
	// child as failed.
	FailCheck(check, msg string, passed ...string)
	// CompleteAfterGate completes a child whose gate was rejected (or that
	// was stopped while it waited).
	CompleteAfterGate()
	// SucceedDestroy runs a destroy child without a gate (a run with Auto
	// approval) to success.
	SucceedDestroy()
	// FinishDestroy runs a destroy child's apply (after its gate, when it
	// has one) and completes it successfully.
	FinishDestroy()
	// CancelRequested says whether opr8r asked the child to stop.
	CancelRequested() bool
}

// Children lists an engine's children in a namespace.
func Children(env Env, e engine.Engine, ns string) []client.Object {
	list := e.NewChildList()
	Expect(env.Client.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
	items, err := apimeta.ExtractList(list)
	Expect(err).NotTo(HaveOccurred())
	var out []client.Object
	for _, it := range items {
		obj := it.(client.Object)
		if obj.GetDeletionTimestamp() != nil {
			continue // being deleted: an orphaning delete waits for a garbage collector
		}
		// Children are what a TerraformRun owns (the Job engine's step
		// Jobs are owned by the child).
		for _, o := range obj.GetOwnerReferences() {
			if o.Kind == "TerraformRun" {
				out = append(out, obj)
			}
		}
	}
	return out
}

// WriteRawOutputs creates the Secret the export step writes, owned by the
// child and labelled so the manager's cache sees it.
func WriteRawOutputs(env Env, child client.Object, outputsJSON string) {
	gvk, err := apiutilGVK(env.Client, child)
	Expect(err).NotTo(HaveOccurred())
	Expect(env.Client.Create(context.Background(), RawOutputsSecret(child, gvk, outputsJSON))).To(Succeed())
}

// RawOutputsSecret is the Secret the export step writes for the child (of
// kind gvk), owned by it and labelled so the manager's cache sees it.
func RawOutputsSecret(child client.Object, gvk schema.GroupVersionKind, outputsJSON string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: names.RawOutputsSecretName(child.GetName()), Namespace: child.GetNamespace(),
			Labels:          map[string]string{infrav1.ManagedByLabel: infrav1.ManagedByValue, infrav1.ComponentLabel: infrav1.ComponentRawOutputs},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: child.GetName(), UID: child.GetUID()}},
		},
		Data: map[string][]byte{"outputs.json": []byte(outputsJSON)},
	}
	if shard := child.GetLabels()[infrav1.ShardLabel]; shard != "" {
		// As the export step's --shard does.
		s.Labels[infrav1.ShardLabel] = shard
	}
	return s
}

// Test data the simulators report unless told otherwise.
const (
	DefaultCommit = "0123456789abcdef0123456789abcdef01234567"
	DefaultInputs = "sha256:1n9u75"
)

// PlanOf is the plan step's results for the given counts and digest.
func PlanOf(add, change, destroy int, digest string) results.Plan {
	return results.Plan{Add: int32(add), Change: int32(change), Destroy: int32(destroy),
		HasChanges: add+change+destroy > 0, Digest: digest, Inputs: DefaultInputs}
}

// Digest is a plan digest for test data: "sha256:" and the hex of s's hash.
func Digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Now is a timestamp as engines write them: UTC, whole seconds.
func Now() metav1.Time { return metav1.NewTime(time.Now().UTC().Truncate(time.Second)) }

// Terminated is a container state that ended with the exit code.
func Terminated(code int32, message string) corev1.ContainerState {
	now := Now()
	reason := "Error"
	if code == 0 {
		reason = "Completed"
	}
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, StartedAt: now, FinishedAt: now, Reason: reason, Message: message}}
}

// Running is a running container state.
func Running() corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: Now()}}
}

func apiutilGVK(c client.Client, obj client.Object) (schema.GroupVersionKind, error) {
	return apiutil.GVKForObject(obj, c.Scheme())
}

// BenchPlayer plays an engine's controller in the scale benches (make
// bench, bench-checks, bench-shards), where no engine controller runs: bare
// writes of every field the engine writes, cheap enough for thousands of
// children at once.
type BenchPlayer interface {
	// Prepare makes what the engine makes of a new child before its first
	// step reports (Tekton: the plan task's TaskRun); it reports whether
	// it made anything the run's status will show.
	Prepare(ctx context.Context, c client.Client, child client.ObjectKey) (bool, error)
	// StepDone writes the change the latency bench times: the clone step
	// of a started child finished.
	StepDone(ctx context.Context, c client.Client, child client.ObjectKey) error
	// Finish completes a child as the engine does a run whose plan has no
	// changes: apply skipped, cleanup done, the child succeeded.
	Finish(ctx context.Context, c client.Client, child client.ObjectKey) error
	// Finished says whether a child, as watched, has finished.
	Finished(child client.Object) bool
	// Foreign is an object of the child's kind that is not opr8r's (no
	// labels of opr8r's), of a typical size, for the memory bench.
	Foreign(name, namespace string) client.Object
}
