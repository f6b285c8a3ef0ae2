// Package engine is the seam between the TerraformRun reconciler and the
// workflow engines that run its pipelines. The reconciler only talks to the
// Engine interface and the optional interfaces below; each engine lives in its
// own package under engines/ and is listed once in engines.All.
package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/results"
)

// Engine translates a TerraformRun into an engine object (the child) and reads
// the child's progress back. Build and Observe are pure: they make no API calls,
// so they are tested offline.
type Engine interface {
	// Name is the value of spec.engine that selects this engine.
	Name() infrav1.EngineName
	// ChildGVK is the group, version and kind of the child object.
	ChildGVK() schema.GroupVersionKind
	// NewChild returns an empty child object, for Get and watches.
	NewChild() client.Object
	// NewChildList returns an empty list of child objects.
	NewChildList() client.ObjectList
	// Build returns the child for a run. It must be deterministic: the same
	// request always gives the same object.
	Build(req Request) (client.Object, error)
	// Observe reads a child's status, and that of its related objects (see
	// RelatedLister), into engine-neutral progress, as of now: it reads no
	// clock of its own, so the same objects and time always give the same
	// progress.
	Observe(child client.Object, related []client.Object, now time.Time) (Progress, error)
}

// RelatedLister is an optional interface that engines implement when a
// child's status does not hold its steps' status, which live in objects the
// engine creates for the child (Tekton's TaskRuns and CustomRuns).
type RelatedLister interface {
	// RelatedTypes returns empty objects of each related kind, to watch.
	// Related objects carry the child's labels, so the run they belong to
	// is found by label.
	RelatedTypes() []client.Object
	// Related lists a child's related objects.
	Related(ctx context.Context, c client.Reader, child client.Object) ([]client.Object, error)
}

// ControllerProvider is an optional interface that engines implement when
// they need a controller of their own, such as Tekton's approval custom
// task. It is set up once the engine's CRDs are served.
type ControllerProvider interface {
	// SetupControllers adds the engine's controllers to the manager.
	SetupControllers(mgr ctrl.Manager) error
}

// Approver is an optional interface that engines implement when their
// approval gate can be decided through the API (all current engines do).
type Approver interface {
	// Approve lets the child's pending gate pass for the given plan digest.
	// It returns ErrGateNotPending if no gate is waiting.
	Approve(ctx context.Context, c client.Client, child client.Object, d Decision) error
	// Reject fails the child's pending gate with the decision's reason.
	// It returns ErrGateNotPending if no gate is waiting.
	Reject(ctx context.Context, c client.Client, child client.Object, d Decision) error
}

// GatePublisher is an optional interface that engines implement when people
// can pass the gate in the engine itself (Argo's RESUME button, argo
// resume), where an admission policy judges each resume against the rule
// opr8r publishes on the child while its gate waits (Argo: the
// opr8r-argo-resume policy in engines/argo/manifests/policy.yaml).
type GatePublisher interface {
	// PublishGate writes the rule onto the child unless it is there.
	PublishGate(ctx context.Context, c client.Client, child client.Object, p GatePolicy) error
}

// GatePolicy is who may still pass a waiting gate in the engine, under
// spec.approval and the decisions counted so far.
type GatePolicy struct {
	// Digest is the plan waiting.
	Digest string
	// Users may decide; nil means anyone.
	Users []string
	// Groups may decide (members of any).
	Groups []string
	// Barred are users whose resume would not count: the change's author
	// under selfApproval Forbidden, and users who approved already.
	Barred []string
	// Needed is how many more approvals the plan needs; a resume is one.
	Needed int32
}

// Canceller is an optional interface that engines implement when a running
// child can be stopped while still running its cleanup step.
type Canceller interface {
	// Cancel stops the child; its cleanup step still runs. The reason is
	// kept on the child (CancelledAnnotation), and once the child has
	// stopped, Observe reads it as Failed with the message "stopped:
	// <reason>" (unless a step failed first) and a gate left undecided by
	// the stop as GateSkipped, never as a rejection: the engines fail a
	// waiting gate when they stop a run (Argo's shutdown fails the suspend
	// node, Tekton cancels the CustomRun).
	Cancel(ctx context.Context, c client.Client, child client.Object, reason string) error
}

// CancelledAnnotation on a child says why opr8r stopped it (Cancel).
const CancelledAnnotation = "infra.opr8r.io/cancelled"

// Stopped is the message of a run that Cancel stopped.
func Stopped(reason string) string { return "stopped: " + reason }

// Driver is an optional interface that engines implement when no engine
// controller moves a child from step to step, so the reconciler does it
// (the Job engine). Drive is called on every pass that observes an active
// child, with what Observe made of it, and once more when it has finished.
type Driver interface {
	// Drive creates what the child's next step needs (the next Job, the
	// workspace volume) or removes what it no longer needs. It must be
	// idempotent: it may run again before its writes reach the cache. api
	// reads past the cache, for objects the cache keeps only in part. It
	// acts on the gate's decision as opr8r recorded it (in), never on one
	// read back from the child, which tenants may write.
	Drive(ctx context.Context, c client.Client, api client.Reader, child client.Object, prog Progress, in DriveInput) error
}

// DriveInput is what the reconciler keeps of a run, where tenants cannot
// write it, for a Driver.
type DriveInput struct {
	// Decision is the gate's decision opr8r recorded in the TerraformRun's
	// status for the plan waiting (nil: none yet): an approval of the plan
	// with Digest, or a rejection.
	Decision *RecordedDecision
	// Verify checks a child's seal (engine.Sealer): a Driver reads back
	// from a child only what Verify accepts.
	Verify func(child client.Object) error
}

// RecordedDecision is a gate decision as opr8r recorded it.
type RecordedDecision struct {
	// Approved is true for an approval, false for a rejection.
	Approved bool
	// Digest is the plan the decision is for.
	Digest string
}

// Sealer is an optional interface that engines implement when their Driver
// reads back from the child what Build put in it (the Job engine's later
// steps). The reconciler seals those bytes with an HMAC under a key only the
// manager holds, in the child's SealAnnotation, as it creates the child,
// and gives the Driver a DriveInput.Verify that checks them.
type Sealer interface {
	// Sealed returns, in a stable form, what the Driver reads back from a
	// child.
	Sealed(child client.Object) ([]byte, error)
}

// SchemeAdder is an optional interface that engines implement when their
// objects are not in client-go's scheme (Argo's and Tekton's types).
type SchemeAdder interface {
	// AddToScheme registers the engine's types.
	AddToScheme(s *runtime.Scheme) error
}

// CacheSlimmer is an optional interface that engines implement to keep the
// manager's memory small: it drops from a cached object of one of the
// engine's kinds what Observe, Approve, Cancel and Drive never read.
type CacheSlimmer interface {
	// SlimForCache slims obj in place and reports whether obj is one of the
	// engine's kinds.
	SlimForCache(obj any) bool
}

// CacheConfigurer is an optional interface that engines implement when the
// manager must cache objects of a kind that exists in every cluster (the
// Job engine's pods), restricted to the engine's own.
type CacheConfigurer interface {
	// CacheByObject returns the cache settings of those kinds.
	CacheByObject() map[client.Object]cache.ByObject
}

// LogLocator is an optional interface that engines implement so that
// `kubectl tfrun logs` finds a step's log in the engine's pods.
type LogLocator interface {
	// StepLogs returns the label selector of the pods that may run one step
	// of a child and the container that holds the step's log: the newest
	// selected pod that has that container holds it.
	StepLogs(child, step string) (selector, container string)
	// LogsHint is the engine's own command that prints a child's logs.
	LogsHint(namespace, child string) string
}

// ApprovalHinter is an optional interface that engines implement when a
// plan can also be approved with the engine's own tools; the hint is added
// to the message of a run that waits for approval.
type ApprovalHinter interface {
	// ApprovalHint says how to approve the child's gate in the engine, for
	// example "argo resume NAME".
	ApprovalHint(namespace, child string) string
	// ApprovalRights says which rights let a person pass the gate in the
	// engine, for the message of an approval the engine let through
	// outside the run's approval policy: what to restrict.
	ApprovalRights() string
}

// ErrGateNotPending says that a child has no approval gate waiting.
var ErrGateNotPending = errors.New("no approval gate is waiting")

// Decision is an approval or rejection of a plan.
type Decision struct {
	// Digest is the plan digest the decision is bound to.
	Digest string
	// By says who decided, for the engine's records.
	By string
	// Reason says why, for rejections.
	Reason string
}

// ActorName is who engines record as deciding when opr8r decides a gate.
const ActorName = "opr8r"

// CacheLagGrace is how long after a child (or a step object of it)
// completed an engine waits to see the step objects it names in its view
// before it reads the child as it can: after a kube-apiserver restart one
// informer's cache lags another's for seconds (the pods behind the Job
// engine's Jobs, the TaskRuns behind a PipelineRun), and a finished child
// read without its steps would end a run Ready without its outputs.
const CacheLagGrace = 2 * time.Minute

// Actor names the decider as engines record it: "opr8r", or "opr8r (who)"
// when the decision names who made it.
func (d Decision) Actor() string {
	if d.By == "" {
		return ActorName
	}
	return ActorName + " (" + d.By + ")"
}

// Approved is how engines that write their own gate's message word an
// approval.
func (d Decision) Approved() string {
	return fmt.Sprintf("plan %s approved by %s", d.Digest, d.Actor())
}

// Rejected is how engines that write their own gate's message word a
// rejection.
func (d Decision) Rejected() string {
	return fmt.Sprintf("Rejected: %s. Decided by %s", d.Reason, d.Actor())
}

// Config carries the manager-wide settings engines need to build children.
type Config struct {
	// StepImage holds the opr8r-step binary; it runs the clone step and
	// installs the binary into the Terraform steps.
	StepImage string
	// TerraformImage is the default Terraform or OpenTofu image.
	TerraformImage string
	// RunnerServiceAccount is the default service account of step pods.
	RunnerServiceAccount string
	// PlanServiceAccount is the default service account of the steps
	// before the approval gate (spec.runner.planServiceAccountName); empty:
	// the runner's.
	PlanServiceAccount string
	// PreviewServiceAccount is the service account of every step of a
	// pull request's preview (Request.Preview); empty: the plan's.
	PreviewServiceAccount string
	// CheckServiceAccount is the service account of check steps, which
	// run images the run chose on the plan: it reads no Secret and holds no
	// cloud identity (empty: the runner's, as before checks had their own).
	CheckServiceAccount string
	// RunnerServiceAccounts are the other service accounts the install
	// lets a TerraformRun's steps run as (spec.runner.serviceAccountName,
	// planServiceAccountName; --runner-service-accounts, the chart's
	// identities.runnerServiceAccounts): the admission policies treat
	// exactly these, and the three above, as runners (opr8r-identities), so
	// a run may name no other.
	RunnerServiceAccounts []string
	// ImagePullPolicy of every step container; empty means the cluster default.
	ImagePullPolicy string
	// StepBinaryFromImage mounts StepImage into the pods of terraform
	// steps as a Kubernetes image volume, from which they run opr8r-step,
	// instead of an init container copying it there in every pod
	// (--step-binary). Image volumes are GA in Kubernetes 1.36 and need
	// containerd 2.1 or CRI-O 1.31 on the nodes.
	StepBinaryFromImage bool
	// PlanTimeout and ApplyTimeout bound the steps of a run that sets no
	// spec.timeouts of its own (--default-plan-timeout,
	// --default-apply-timeout); zero: pipeline's defaults.
	PlanTimeout, ApplyTimeout time.Duration
	// StateRetry is how long an apply keeps saving a state its backend
	// did not take before it keeps it in the run's errored-state Secret
	// (--state-retry); zero: the step's default.
	StateRetry time.Duration
	// Providers says where terraform steps install providers from and
	// whether they share a plugin cache across runs (--provider-*).
	Providers Providers
	// StateAPI is the manager's state API, through which terraform steps
	// reach their run's Secrets and Leases (pkg/stateapi); its zero value:
	// the steps use their service account's own rights (a manager outside
	// the cluster, make dev with KUBECONFIG).
	StateAPI StateAPI
}

// StateAPI says where the manager serves the state API.
type StateAPI struct {
	// URL is its https address, as the step pods reach it
	// (--state-api-url: the opr8r-state Service).
	URL string
	// CA is the PEM of the certificate it serves.
	CA string
}

// IsRunnerAccount says whether sa is one of the install's runner service
// accounts: the default runner, planner or check account, or one the
// install lists besides them.
func (c Config) IsRunnerAccount(sa string) bool {
	if sa == "" {
		return false
	}
	if sa == c.RunnerServiceAccount || sa == c.PlanServiceAccount || sa == c.CheckServiceAccount || sa == c.PreviewServiceAccount {
		return true
	}
	return slices.Contains(c.RunnerServiceAccounts, sa)
}

// Providers configures provider installation for every terraform step of
// an install: set by its admin, never by a TerraformRun.
type Providers struct {
	// Mirror is the https URL of a provider network mirror (the protocol
	// terraform and OpenTofu define for network_mirror): steps install
	// every provider from it and from nowhere else. Empty: terraform's own
	// installation (the image's local mirror directories, then the
	// registry).
	Mirror string
	// MirrorCA is PEM the steps trust besides the image's own roots, for a
	// mirror whose certificate a private CA signed.
	MirrorCA string
	// CacheClaim names the PersistentVolumeClaim, in each run's namespace,
	// that holds terraform's plugin cache across that namespace's runs; the
	// manager makes it when missing (CacheSize, CacheStorageClass). Empty: a
	// cache per run, in its workspace.
	CacheClaim string
	// CacheSize is the claim's requested size (default 2Gi).
	CacheSize string
	// CacheStorageClass is the claim's StorageClass (empty: the cluster's
	// default).
	CacheStorageClass string
	// CacheAccessMode is the claim's access mode: ReadWriteOnce (empty, the
	// default: the volume is attached to one node at a time, so the step
	// pods of a namespace on another node wait until the pods that mount it
	// end) or ReadWriteMany (every node at once, where the StorageClass can).
	CacheAccessMode string
}

// Request asks an engine to build the child of one run.
type Request struct {
	// Run is the TerraformRun, with defaults applied.
	Run *infrav1.TerraformRun
	// Type is apply or destroy.
	Type infrav1.RunType
	// Name is the child's name (see names.ChildName).
	Name string
	// Number is the run's number.
	Number int64
	// SpecHash is the hash of the spec the run is for.
	SpecHash string
	// Config is the manager-wide configuration.
	Config Config
	// Dependencies are the run's dependencies (spec.dependsOn) whose
	// outputs it takes as variables, resolved by the reconciler from their
	// status: names only, never values.
	Dependencies []Dependency
	// Preview says the run is a pull request's preview the manager made
	// (its seal verifies): its steps read the tracked run's state without
	// the lock, and the state API lets them write none of it.
	Preview bool
	// KeptStates is true when the TerraformRun has states earlier runs
	// kept because their backend did not take them (records of kind
	// errored.tfstate), which the reconciler found when it started the
	// run: the pipeline then begins with the restore-state step, which
	// pushes them as the runner before anything plans.
	KeptStates bool
}

// Dependency is a TerraformRun whose outputs a run takes as variables.
type Dependency struct {
	// Name and Namespace are the dependency's.
	Name, Namespace string
	// SecretName is the dependency's outputs Secret.
	SecretName string
	// Vars are the variables taken from it.
	Vars []DependencyVar
}

// DependencyVar is one output of a dependency taken as a variable.
type DependencyVar struct {
	// Output is the key of the dependency's outputs Secret.
	Output string
	// Variable is the variable's name.
	Variable string
	// Sensitive is true when Terraform marked the output sensitive: the
	// variable must be declared sensitive too.
	Sensitive bool
}

// Progress is what an engine observed of a child, in engine-neutral terms.
type Progress struct {
	// Phase is the run's phase.
	Phase infrav1.RunPhase
	// Finished is true once the child will not change any more.
	Finished bool
	// StartedAt and FinishedAt are the child's own times.
	StartedAt, FinishedAt *metav1.Time
	// Steps are the known steps in pipeline order.
	Steps []infrav1.StepStatus
	// Message is a short description; on failure terraform's error text.
	Message string
	// Commit is the checked-out commit, once clone has finished.
	Commit string
	// Plan is set once the plan step has finished and its results are synced.
	Plan *PlanResult
	// Gate is the state of the approval gate.
	Gate Gate
	// Applied is true when the apply step succeeded.
	Applied bool
	// OutputsExported is true when the export-outputs step succeeded, so the
	// raw outputs Secret (RawOutputsSecretName) exists.
	OutputsExported bool
}

// FirstFailure words the first failed step of steps, the gate aside (a
// rejection is not a failure): "step <name> failed: <message>", or "".
func FirstFailure(steps []infrav1.StepStatus) string {
	for _, s := range steps {
		if s.Phase == infrav1.StepFailed && s.Name != names.StepApprove {
			return fmt.Sprintf("step %s failed: %s", s.Name, s.Message)
		}
	}
	return ""
}

// Conclude words a child's message once its steps, gate, phase and the
// engine's own message are read, as every engine words it: the first
// failed step's message, else a rejection's, else, for a child that was
// stopped (Canceller) and failed without a failed step, the stop's reason.
func (p *Progress) Conclude(stopped bool, stopReason string) {
	failed := FirstFailure(p.Steps)
	if failed != "" {
		p.Message = failed
	}
	if p.Gate.State == GateRejected {
		p.Message = "plan rejected: " + p.Gate.Message
	}
	if stopped && p.Finished && p.Phase == infrav1.RunFailed && failed == "" {
		p.Message = Stopped(stopReason)
	}
}

// PlanResult is the plan step's small result (see pkg/results).
type PlanResult = results.Plan

// GateState is the state of an approval gate.
type GateState string

const (
	// GateAbsent: the pipeline has no gate (auto approval, destroy) or the
	// gate has not been reached.
	GateAbsent GateState = ""
	// GateSkipped: the plan had no changes.
	GateSkipped GateState = "Skipped"
	// GatePending: the gate waits for a decision.
	GatePending GateState = "Pending"
	// GateApproved: the gate passed with an approval.
	GateApproved GateState = "Approved"
	// GateRejected: the gate was rejected (failed, or a "reject" choice).
	GateRejected GateState = "Rejected"
)

// Gate is the observed approval gate.
type Gate struct {
	// State is the gate's state.
	State GateState
	// Since is when the gate started waiting.
	Since *metav1.Time
	// DecidedAt is when it was decided.
	DecidedAt *metav1.Time
	// Digest is the plan digest the gate was decided for.
	Digest string
	// By is who decided, as the engine recorded it.
	By string
	// Stamped is true when By was stamped by the API server at admission
	// (an engine-native approval judged by opr8r's admission policy, such as
	// a person's Argo resume): only then does a decision the engine shows,
	// and opr8r did not make, count.
	Stamped bool
	// ByGroups are By's groups, where the API server stamped them.
	ByGroups []string
	// Message is the engine's message on the gate.
	Message string
}

// Registry holds the enabled engines by name. It is filled explicitly in
// cmd/ from engines.All; there is no init() registration.
type Registry struct {
	engines map[infrav1.EngineName]Engine
}

// NewRegistry returns a registry of the given engines; names must be unique.
func NewRegistry(engines ...Engine) (*Registry, error) {
	r := &Registry{engines: map[infrav1.EngineName]Engine{}}
	for _, e := range engines {
		if _, dup := r.engines[e.Name()]; dup {
			return nil, fmt.Errorf("engine %q registered twice", e.Name())
		}
		r.engines[e.Name()] = e
	}
	return r, nil
}

// Get returns the engine with the given name.
func (r *Registry) Get(name infrav1.EngineName) (Engine, bool) {
	e, ok := r.engines[name]
	return e, ok
}

// Names lists the registered engines, sorted.
func (r *Registry) Names() []infrav1.EngineName {
	return slices.Sorted(maps.Keys(r.engines))
}

// All returns the registered engines in name order.
func (r *Registry) All() []Engine {
	out := make([]Engine, 0, len(r.engines))
	for _, n := range r.Names() {
		out = append(out, r.engines[n])
	}
	return out
}

// TimeOrNil returns a pointer to t, or nil for the zero time: engines' zero
// timestamps mean "not yet".
func TimeOrNil(t metav1.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Now reads clock, or the wall clock when clock is nil: the one clock
// helper of the reconcilers and the plugin, whose tests replace it.
func Now(clock func() time.Time) time.Time {
	if clock != nil {
		return clock()
	}
	return time.Now()
}

// Elapsed returns how long ago t was, or 0 for nil.
func Elapsed(now time.Time, t *metav1.Time) time.Duration {
	if t == nil {
		return 0
	}
	return now.Sub(t.Time)
}
