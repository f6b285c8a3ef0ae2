package v1alpha1

// Condition types of a TerraformRun. Ready, Reconciling and Stalled follow
// kstatus (https://github.com/kubernetes-sigs/cli-utils/tree/master/pkg/kstatus);
// the others are domain conditions.
const (
	// ReadyCondition is True when the latest run for the current spec
	// succeeded and its outputs were written. Polarity: normal-true.
	ReadyCondition = "Ready"
	// ReconcilingCondition is True while a run is in progress.
	// Polarity: abnormal-true (kstatus).
	ReconcilingCondition = "Reconciling"
	// StalledCondition is True when no progress is possible without a person:
	// a failed or rejected run, a missing engine, a stuck destroy.
	// Polarity: abnormal-true (kstatus).
	StalledCondition = "Stalled"
	// PlannedCondition is True when the latest plan finished; its message
	// gives the summary. Polarity: normal-true.
	PlannedCondition = "Planned"
	// ApprovedCondition is True when the latest plan was approved and False
	// when it was rejected, timed out or an approval was refused as stale.
	// Unknown while it waits. Polarity: normal-true.
	ApprovedCondition = "Approved"
	// AppliedCondition is True when the latest plan was applied (or had no
	// changes), False when the apply failed. Polarity: normal-true.
	AppliedCondition = "Applied"
	// DriftedCondition is True when the latest scheduled check found drift
	// (the infrastructure differs from the last apply, for an unchanged
	// source), False when it found none. Absent before the first check.
	// Polarity: abnormal-true.
	DriftedCondition = "Drifted"
	// DependenciesReadyCondition is True when every TerraformRun of
	// spec.dependsOn exists and is Ready for its current spec, False
	// (DependencyNotReady, DependencyNotFound, DependencyCycle,
	// CrossNamespaceDependency) naming the first one that is not. Absent
	// without spec.dependsOn. Polarity: normal-true.
	DependenciesReadyCondition = "DependenciesReady"
)

// Condition reasons. Reasons are PascalCase and never carry secrets.
const (
	ReasonProgressing      = "Progressing"
	ReasonSucceeded        = "Succeeded"
	ReasonRunFailed        = "RunFailed"
	ReasonAwaitingApproval = "AwaitingApproval"
	ReasonApproved         = "Approved"
	ReasonAutoApproved     = "AutoApproved"
	// ReasonApprovedOutsidePolicy (Approved False): the engine let the plan
	// through without meeting spec.approval's policy (a resume nobody's
	// identity was stamped for, or one the policy does not count); opr8r
	// refused the approval and stopped the run, and its apply step, which
	// waits for opr8r's record of the approval, does not apply.
	ReasonApprovedOutsidePolicy = "ApprovedOutsidePolicy"
	ReasonRejected              = "Rejected"
	ReasonApprovalTimeout       = "ApprovalTimeout"
	// ReasonDeniedByRule: a Deny rule of spec.approval.rules matched the
	// plan, or the rules could not decide it.
	ReasonDeniedByRule = "DeniedByRule"
	// ReasonPlanUnreadable (Approved Unknown): spec.approval.rules cannot
	// read the plan as JSON (it inflates past the most the manager reads,
	// records.MaxRecordSize), so the plan cannot be approved; it is held
	// at the gate, where a rejection or the approval timeout still ends it.
	ReasonPlanUnreadable = "PlanUnreadable"
	// ReasonRulesInvalid (Approved Unknown): spec.approval.rules were
	// changed while the plan waited and no longer compile; the plan is held
	// at the gate until they do (never rejected for it), where a rejection
	// or the approval timeout still ends it.
	ReasonRulesInvalid = "RulesInvalid"
	// ReasonPolicyChanged (Approved Unknown): a policy that governs the
	// run (TerraformRunPolicy, ClusterTerraformRunPolicy) was added,
	// changed or deleted while the plan waited; the plan is held until it
	// is planned again (kubectl tfrun rerun), so a change never loosens a
	// waiting plan. A rejection or the approval timeout still ends it.
	ReasonPolicyChanged = "PolicyChanged"
	// ReasonOutsideChangeWindow: the plan is approved and waits for
	// spec.approval.windows to let it apply.
	ReasonOutsideChangeWindow = "OutsideChangeWindow"
	ReasonStaleApproval       = "StaleApproval"
	ReasonNoChanges           = "NoChanges"
	ReasonPlanned             = "Planned"
	ReasonApplied             = "Applied"
	ReasonEngineUnavailable   = "EngineUnavailable"
	ReasonChildDeleted        = "ChildDeleted"
	ReasonSuspended           = "Suspended"
	ReasonDestroying          = "Destroying"
	ReasonDestroyFailed       = "DestroyFailed"
	ReasonDestroyTimeout      = "DestroyTimeout"
	ReasonSuperseded          = "Superseded"
	ReasonOutputsFailed       = "OutputsFailed"
	ReasonInvalidSpec         = "InvalidSpec"
	ReasonNoProgress          = "NoProgress"
	ReasonDriftDetected       = "DriftDetected"
	ReasonNoDrift             = "NoDrift"
	ReasonSourceChanged       = "SourceChanged"
	// ReasonNotApplied: Drifted is False on a planOnly TerraformRun whose
	// check plans changes: nothing was applied to drift from.
	ReasonNotApplied  = "NotApplied"
	ReasonQueued      = "Queued"
	ReasonPlannedOnly = "PlannedOnly"
	// ReasonDependencyNotReady: a dependency is not Ready for its current
	// spec; no run starts until it is.
	ReasonDependencyNotReady = "DependencyNotReady"
	// ReasonDependencyNotFound: a dependency does not exist (or is not in
	// a namespace the manager watches).
	ReasonDependencyNotFound = "DependencyNotFound"
	// ReasonDependencyCycle: spec.dependsOn leads back to this TerraformRun.
	ReasonDependencyCycle = "DependencyCycle"
	// ReasonCrossNamespaceDependency: a dependency in another namespace
	// that the manager does not allow (--allow-cross-namespace-dependencies)
	// or whose target did not consent (its spec.allowDependentsFrom does not
	// name this namespace; a target that does not exist reads the same).
	ReasonCrossNamespaceDependency = "CrossNamespaceDependency"
	// ReasonDependencyOutputs: the outputs spec.dependsOn selects cannot be
	// given (a missing output, two dependencies giving one variable).
	ReasonDependencyOutputs = "DependencyOutputs"
	// ReasonDependentsExist: deletion waits for the TerraformRuns that
	// depend on this one to be gone before destroying.
	ReasonDependentsExist   = "DependentsExist"
	ReasonDependenciesReady = "DependenciesReady"
	// ReasonProviderCacheDeleting: the namespace's provider cache claim
	// is being deleted; the run starts once it is gone and made again.
	ReasonProviderCacheDeleting = "ProviderCacheDeleting"
)

// Results of a scheduled check (status.drift.result).
const (
	CheckNoDrift       = "NoDrift"
	CheckDrifted       = "Drifted"
	CheckSourceChanged = "SourceChanged"
	CheckSuperseded    = "Superseded"
	CheckFailed        = "Failed"
	// CheckNotApplied: a check of a planOnly TerraformRun whose plan shows
	// the changes its preview shows, not applied by design: not drift.
	CheckNotApplied = "NotApplied"
)

// Labels and annotations opr8r reads or writes.
const (
	// Finalizer guards the destroy pipeline.
	Finalizer = "infra.opr8r.io/destroy"
	// RunRequestAnnotation asks for a new run of an unchanged spec: set it to
	// any new value (kubectl tfrun rerun writes a timestamp).
	RunRequestAnnotation = "infra.opr8r.io/run-requested-at"
	// RunRequestedByAnnotation names the user who last set
	// RunRequestAnnotation, stamped at admission (MutatingAdmissionPolicy
	// opr8r-run-requester), which refuses any other value. A run that
	// request starts counts them among its authors (status.run.authors):
	// who asks for a plan of inputs they changed (a ConfigMap or Secret the
	// run reads) authored it, and selfApproval Forbidden bars them.
	RunRequestedByAnnotation = "infra.opr8r.io/run-requested-by"
	// SealAnnotation on a child opr8r drives itself (the Job engine's) is an
	// HMAC, under a key only the manager holds, of what it reads back from
	// the child to drive it: its later steps and pod settings. A child whose
	// seal does not verify is not driven further.
	SealAnnotation = "infra.opr8r.io/seal"
	// DestroyWithoutApprovalAnnotation, set to "true", lets the destroy of a
	// TerraformRun with Manual approval run without waiting at the gate: a
	// platform admin's escape (setting it needs the policy right that
	// changing spec.approval needs; docs/security.md).
	DestroyWithoutApprovalAnnotation = "infra.opr8r.io/destroy-without-approval"
	// SkipDestroyAnnotation, set to "true", is the escape hatch for a stuck
	// deletion: the finalizer is removed without destroying anything.
	SkipDestroyAnnotation = "infra.opr8r.io/skip-destroy"
	// IgnoreDependentsAnnotation, set to "true", lets a TerraformRun being
	// deleted destroy without waiting for the TerraformRuns that depend on
	// it (spec.dependsOn) to be gone first.
	IgnoreDependentsAnnotation = "infra.opr8r.io/ignore-dependents"
	// OutputsDigestKeyAnnotation on an outputs Secret holds the random key
	// of the HMAC in status.outputsDigest. Whoever can read it can read the
	// values anyway.
	OutputsDigestKeyAnnotation = "infra.opr8r.io/outputs-digest-key"
	// SpecAuthorAnnotation names the user who last changed the spec. The
	// API server stamps it at admission (MutatingAdmissionPolicy
	// opr8r-spec-author) and refuses any other value.
	SpecAuthorAnnotation = "infra.opr8r.io/spec-author"
	// SpecAuthorsAnnotation lists, one per line as "<generation> <user>",
	// every user who changed a hashed field of the spec (what a run
	// executes) since the last applied run, with the generation of their
	// newest change. The API server keeps it at admission
	// (MutatingAdmissionPolicy opr8r-spec-author): it appends the requester
	// of each such change and drops the lines of generations the last
	// applied run included (status.lastAppliedGeneration); it refuses any
	// other value.
	SpecAuthorsAnnotation = "infra.opr8r.io/spec-authors"
	// DecidedByAnnotation names the user who last set
	// spec.approval.approvedPlan, rejectedPlan or rejectReason, stamped the
	// same way.
	DecidedByAnnotation = "infra.opr8r.io/decided-by"
	// ShardLabel on a TerraformRun names the shard of managers that
	// handles it (a manager started with --shard=NAME handles the runs
	// labelled NAME; one with --unsharded-only the runs without the label),
	// as Flux's sharding.fluxcd.io/key does. opr8r copies it onto the run's
	// children and Secrets, so each shard caches only its own. It cannot
	// change while a run is active (ValidatingAdmissionPolicy opr8r-shard).
	ShardLabel = "sharding.opr8r.io/key"
	// RunNameLabel on an engine object names its TerraformRun.
	RunNameLabel = "infra.opr8r.io/run"
	// RunTypeLabel on an engine object is apply or destroy.
	RunTypeLabel = "infra.opr8r.io/run-type"
	// SpecHashLabel on an engine object is the spec hash it was built for.
	SpecHashLabel = "infra.opr8r.io/spec-hash"
	// StepLabel on a step's pod (or its task) names the pipeline step.
	StepLabel = "infra.opr8r.io/step"
	// RunNumberLabel on an engine object is its run's number (see
	// status.run.number).
	RunNumberLabel = "infra.opr8r.io/run-number"
	// ApprovalLabel on an engine object says where its plan's approval
	// stands: waiting, approved, rejected, timed-out or superseded. It is
	// absent where the run has no gate (approval mode Auto, a plan without
	// changes). The dashboards filter by it (infra.opr8r.io/approval=waiting
	// lists every run that waits for a person), and the Tekton Dashboard's
	// run header shows it, as the dashboard shows no state of a custom task
	// such as the approval gate.
	ApprovalLabel = "infra.opr8r.io/approval"
	// SettledLabel ("true") on a finished child, and on the step objects
	// its engine made for it (Tekton's TaskRuns and CustomRuns, the Job
	// engine's Jobs and pods), says that its run's result is recorded in
	// the TerraformRun's status. The manager then caches only its metadata,
	// for pruning (spec.history), and no longer its status.
	SettledLabel = "infra.opr8r.io/settled"
	// ManagedByLabel marks every object opr8r creates; the manager's caches
	// of engine objects, Secrets and ConfigMaps select on it.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of ManagedByLabel.
	ManagedByValue = "opr8r"
	// ComponentLabel says what an opr8r-made Secret or ConfigMap holds:
	// inputs, raw-outputs, plan, check or outputs.
	ComponentLabel = "infra.opr8r.io/component"
	// ComponentInputs labels a child's input ConfigMap.
	ComponentInputs = "inputs"
	// ComponentRawOutputs labels the Secret the export step writes
	// terraform's outputs to.
	ComponentRawOutputs = "raw-outputs"
	// ComponentPlan labels the Secret the plan step writes the readable
	// plan to.
	ComponentPlan = "plan"
	// ComponentCheck labels the Secret a check step writes its output to.
	ComponentCheck = "check"
	// ComponentOutputs labels the user's outputs Secret.
	ComponentOutputs = "outputs"
)

// Values of ApprovalLabel.
const (
	// ApprovalLabelWaiting: the plan waits at the gate for a decision.
	ApprovalLabelWaiting = "waiting"
	// ApprovalLabelApproved: the plan was approved; apply runs or ran.
	ApprovalLabelApproved = "approved"
	// ApprovalLabelRejected: the plan was rejected; apply does not run.
	ApprovalLabelRejected = "rejected"
	// ApprovalLabelTimedOut: nobody decided within spec.approval.timeout.
	ApprovalLabelTimedOut = "timed-out"
	// ApprovalLabelSuperseded: a new run replaced the plan before a decision.
	ApprovalLabelSuperseded = "superseded"
)

// RecordsRequestAnnotation asks the manager to bring a run's records back
// from the object store for a while: "<run id>@<any stamp>" (kubectl
// tfrun logs and plan set it). Only those who may edit the TerraformRun
// can ask; the copies are Secrets in its namespace, readable by exactly
// those who could read the records before they moved.
const RecordsRequestAnnotation = "infra.opr8r.io/records-request"
