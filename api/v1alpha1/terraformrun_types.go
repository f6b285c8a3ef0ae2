package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EngineName names a workflow engine that runs the pipeline of a TerraformRun.
// +kubebuilder:validation:Enum=argo;tekton;job
type EngineName string

const (
	// EngineArgo runs the pipeline as an Argo Workflows Workflow.
	EngineArgo EngineName = "argo"
	// EngineTekton runs the pipeline as a Tekton PipelineRun.
	EngineTekton EngineName = "tekton"
	// EngineJob runs the pipeline as plain Kubernetes Jobs, one per step
	// group, driven by opr8r itself: no workflow engine is needed.
	EngineJob EngineName = "job"
)

// ApprovalMode says who lets a plan with changes be applied.
// +kubebuilder:validation:Enum=Manual;Auto
type ApprovalMode string

const (
	// ApprovalManual waits at the approval gate until a person approves the
	// plan's digest, through the TerraformRun, the kubectl plugin or the engine.
	ApprovalManual ApprovalMode = "Manual"
	// ApprovalAuto applies every plan without waiting.
	ApprovalAuto ApprovalMode = "Auto"
)

// DeletionPolicy says what deleting a TerraformRun does to the infrastructure
// it manages.
// +kubebuilder:validation:Enum=Destroy;Retain
type DeletionPolicy string

const (
	// DeletionDestroy runs a destroy pipeline before the object goes away.
	DeletionDestroy DeletionPolicy = "Destroy"
	// DeletionRetain leaves the infrastructure and its state in place.
	DeletionRetain DeletionPolicy = "Retain"
)

// DriftRemediation says what a scheduled check that finds drift does.
// +kubebuilder:validation:Enum=Report;Apply
type DriftRemediation string

const (
	// DriftReport sets the Drifted condition, emits an event and counts it.
	DriftReport DriftRemediation = "Report"
	// DriftApply also starts an apply run, through the usual approval gate.
	DriftApply DriftRemediation = "Apply"
)

// BackendType names a Terraform state backend that opr8r can configure from a
// Secret.
// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_]{0,31}$`
type BackendType string

// TerraformRunSpec is the desired state of a TerraformRun: which module to
// run, with what inputs, where its state lives and how its plans are approved.
//
// +kubebuilder:validation:XValidation:rule="!has(self.approval) || !has(self.approval.approvedPlan) || !has(self.approval.rejectedPlan) || self.approval.approvedPlan != self.approval.rejectedPlan",message="spec.approval.approvedPlan and spec.approval.rejectedPlan name the same plan; set only one"
// +kubebuilder:validation:XValidation:rule="!(has(self.planOnly) && self.planOnly && has(self.driftRemediation) && self.driftRemediation == 'Apply')",message="spec.planOnly never applies, so spec.driftRemediation: Apply contradicts it; set driftRemediation: Report (or leave it out), or drop planOnly"
type TerraformRunSpec struct {
	// Engine is the workflow engine that runs the pipeline: argo, tekton or job.
	// When empty, the manager's --default-engine is used.
	// +optional
	Engine EngineName `json:"engine,omitempty"`

	// Source is where the Terraform module comes from. Exactly one of git,
	// oci, inline and configMapRef must be set.
	Source Source `json:"source"`

	// Terraform configures the Terraform (or OpenTofu) invocation.
	// +optional
	Terraform TerraformSpec `json:"terraform,omitempty"`

	// Backend says where Terraform state lives. When unset, state lives in a
	// Secret in the run's namespace through Terraform's kubernetes backend,
	// locked with a Lease.
	// +optional
	Backend *BackendSpec `json:"backend,omitempty"`

	// Approval says how plans with changes are approved before they are applied.
	// +optional
	Approval ApprovalSpec `json:"approval,omitempty"`

	// Outputs says where Terraform outputs are written and under which keys.
	// +optional
	Outputs OutputsSpec `json:"outputs,omitempty"`

	// DeletionPolicy says what deleting this object does: Destroy (the default)
	// runs a destroy pipeline first; Retain leaves the infrastructure in place.
	// +kubebuilder:default=Destroy
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// Runner configures the pods that run the pipeline's steps.
	// +optional
	Runner RunnerSpec `json:"runner,omitempty"`

	// History configures how long finished pipelines are kept.
	// +optional
	History HistorySpec `json:"history,omitempty"`

	// Suspend stops new runs and scheduled checks from starting. A run
	// already in progress is still followed to its end, and deletion still
	// works.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Interval is how often opr8r checks this TerraformRun while no run is
	// active: a plan-only run on the same engine (a drift check) fetches the
	// source again (a new commit on the branch, an edited ConfigMap source,
	// changed varsFrom values) and plans with -refresh. A moved source
	// starts an apply run; a plan with changes for an unchanged source is
	// drift (the Drifted condition; see driftRemediation). Checks never
	// apply and never wait at the approval gate. Each TerraformRun's checks
	// are spread by up to a tenth of the interval, so runs with the same
	// interval do not start together. The manager raises an interval
	// shorter than its --min-check-interval (default 1m) to it. Unset: no
	// scheduled checks.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('8760h')",message="spec.interval must be between 1s and 8760h (one year), for example 10m or 6h"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// DriftRemediation says what a check that finds drift does: Report (the
	// default) sets Drifted, emits an event and counts it in a metric; Apply
	// also starts an apply run, through the usual approval gate (Manual
	// approval still waits for a person).
	// +kubebuilder:default=Report
	// +optional
	DriftRemediation DriftRemediation `json:"driftRemediation,omitempty"`

	// PlanOnly makes every run stop after the plan: nothing is applied
	// and no approval is asked for. For previews of a branch or a pull
	// request. Deletion destroys nothing unless an earlier apply of this
	// TerraformRun (before planOnly was set) may have created resources.
	// +optional
	PlanOnly bool `json:"planOnly,omitempty"`

	// Timeouts bound how long each step may run, whatever the engine's
	// defaults (Tekton's is 60 minutes): a step still running at its
	// timeout is interrupted (terraform stops and writes its state), and
	// the engine ends its pod a few minutes later if it has not stopped.
	// Waiting for approval is never counted. Unset fields take the
	// manager's defaults (--default-plan-timeout, 1h; --default-apply-timeout,
	// 24h; a destroy takes the apply's).
	// +optional
	Timeouts *Timeouts `json:"timeouts,omitempty"`

	// Checks run after the plan and before the approval gate, each in an
	// image of the user's choice, with the plan as JSON (terraform show
	// -json) at /workspace/plan/plan.json and the readable plan at
	// /workspace/plan/plan.txt (also in $OPR8R_PLAN_JSON and
	// $OPR8R_PLAN_TEXT). A check that exits non-zero fails the run before
	// anyone is asked to approve: nothing is applied, and the run's status
	// names the check and its last line of output. Checks run in apply runs
	// and planOnly runs with changes to plan; not in drift checks or
	// destroy runs. Each check's output is kept in the Secret
	// <child>-check-<name> (kubectl tfrun checks).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Checks []Check `json:"checks,omitempty"`

	// DependsOn lists the TerraformRuns this one depends on: a run starts
	// only once every dependency is Ready for its current spec, a
	// dependency's outputs may be taken as variables (outputs), a change of
	// those outputs plans this one again (trigger DependencyChange), and a
	// dependency waits for its dependents to be gone before it destroys.
	// Dependencies are in this TerraformRun's namespace unless namespace is
	// set, which the manager allows only when started with
	// --allow-cross-namespace-dependencies. Cycles are refused.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(d, self.exists_one(e, e.name == d.name && (has(e.__namespace__) ? e.__namespace__ : '') == (has(d.__namespace__) ? d.__namespace__ : '')))",message="spec.dependsOn names the same TerraformRun twice; list each dependency once"
	// +listType=atomic
	// +optional
	DependsOn []Dependency `json:"dependsOn,omitempty"`

	// AllowDependentsFrom lists the other namespaces whose TerraformRuns may
	// depend on this one (spec.dependsOn with this run's namespace): their
	// runs then wait for this one, read its outputs digest and take its
	// outputs. Without it, no TerraformRun of another namespace may depend on
	// this one, even on a manager started with
	// --allow-cross-namespace-dependencies. A dependent in another namespace
	// never holds back this one's destroy.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +listType=set
	// +optional
	AllowDependentsFrom []string `json:"allowDependentsFrom,omitempty"`
}

// Dependency is a TerraformRun that this one depends on, and the outputs of
// it that this one takes as variables.
type Dependency struct {
	// Name is the TerraformRun's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// Namespace is the TerraformRun's namespace; empty means this
	// TerraformRun's own. Another namespace needs the manager's
	// --allow-cross-namespace-dependencies, and its outputs are read by the
	// step pods through the API, so the runner's service account needs the
	// right to get that TerraformRun's outputs Secret there (docs/stacks.md).
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Outputs selects the dependency's outputs (the keys of its outputs
	// Secret, as its status.outputs lists them) that become variables of
	// this run. Unset: the dependency only orders runs. Values are read
	// from the outputs Secret by the step pods and never copied into this
	// TerraformRun or its engine objects. Variables from dependencies come
	// before spec.terraform.vars and varsFrom, which win over them.
	// +optional
	Outputs *DependencyOutputs `json:"outputs,omitempty"`
}

// DependencyOutputs selects a dependency's outputs: all of them, each as
// the variable of the same name, or the listed ones.
//
// +kubebuilder:validation:XValidation:rule="(has(self.all) && self.all ? 1 : 0) + (has(self.select) ? 1 : 0) == 1",message="spec.dependsOn[].outputs must set exactly one of all: true or select"
type DependencyOutputs struct {
	// All takes every output of the dependency, each as the variable of the
	// same name. A module that declares no such variable gets Terraform's
	// warning about an undeclared variable, not an error.
	// +optional
	All bool `json:"all,omitempty"`

	// Select takes the listed outputs, each as a variable named by as (or
	// the output's own name). Each output is listed once; two that give
	// one variable are refused by the manager.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=output
	// +optional
	Select []OutputVariable `json:"select,omitempty"`
}

// OutputVariable maps one output of a dependency to a variable.
type OutputVariable struct {
	// Output is the key of the dependency's outputs Secret (its
	// status.outputs), after its own spec.outputs.rename.
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +kubebuilder:validation:MaxLength=253
	Output string `json:"output"`
	// As is the variable's name; empty means the output's name.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_-]*$`
	// +kubebuilder:validation:MaxLength=128
	// +optional
	As string `json:"as,omitempty"`
}

// Check is a user's check of a plan, such as a policy (conftest, OPA,
// checkov) that must pass before the plan may be approved or applied.
// It runs in the same hardened pod as the plan step (non-root, read-only
// root file system, no privilege escalation), with the run's service
// account and none of spec.terraform's environment Secrets or files; the
// workspace is mounted read-only and /tmp is writable.
type Check struct {
	// Name of the check; its step is shown as check-<name>.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=40
	Name string `json:"name"`

	// Image runs the check.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`

	// Command is the check's command and arguments, run in the module's
	// directory. It passes by exiting 0.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Command []string `json:"command"`

	// Env are plain environment variables (no Secret references: checks
	// get no credentials of their own).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Env []CheckEnvVar `json:"env,omitempty"`

	// ConfigMapRef names a ConfigMap in the run's namespace (policies, for
	// example) mounted read-only at /opr8r/check.
	// +optional
	ConfigMapRef *LocalObjectReference `json:"configMapRef,omitempty"`
}

// CheckEnvVar is a plain environment variable of a check.
type CheckEnvVar struct {
	// Name of the variable. Names starting with OPR8R_ are opr8r's.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('OPR8R_')",message="check env names starting with OPR8R_ are set by opr8r; choose another name"
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`
	// Value of the variable.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Value string `json:"value,omitempty"`
}

// Source is where the Terraform module comes from. Exactly one field is set.
//
// +kubebuilder:validation:XValidation:rule="(has(self.git) ? 1 : 0) + (has(self.oci) ? 1 : 0) + (has(self.inline) ? 1 : 0) + (has(self.configMapRef) ? 1 : 0) == 1",message="spec.source must set exactly one of git, oci, inline or configMapRef"
type Source struct {
	// Git fetches the module from a git repository.
	// +optional
	Git *GitSource `json:"git,omitempty"`

	// OCI fetches the module from an OCI artifact in a container registry:
	// an artifact pushed with `flux push artifact`, or any artifact whose
	// one layer is a tar or gzipped tar of the module. The manifest digest
	// it resolved to is the run's revision (status.run.commit), so a tag
	// that moves is seen by the scheduled checks of spec.interval.
	// +optional
	OCI *OCISource `json:"oci,omitempty"`

	// Inline holds the module's files in this object.
	// +optional
	Inline *InlineSource `json:"inline,omitempty"`

	// ConfigMapRef takes the module's files from a ConfigMap in the run's
	// namespace: each key is a file name.
	// +optional
	ConfigMapRef *LocalObjectReference `json:"configMapRef,omitempty"`
}

// GitSource fetches a Terraform module from a git repository.
//
// +kubebuilder:validation:XValidation:rule="!self.url.matches('^[a-z+]+://[^/@]*@') || self.url.startsWith('ssh://')",message="spec.source.git.url must not embed credentials; put them in a Secret named by spec.source.git.credentialsSecretRef"
type GitSource struct {
	// URL is the repository: https://, http://, ssh://, file:// or the
	// scp-like git@host:path form.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(https?|ssh|file|git)://[^\\\\s]+$') || self.matches('^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\\\\s]+$')",message="spec.source.git.url must be an https://, http://, ssh://, git://, file:// or user@host:path URL without spaces"
	URL string `json:"url"`

	// Ref is the branch, tag or full commit SHA to check out.
	// +kubebuilder:default=main
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9._/-]+$') && !self.contains('..') && !self.startsWith('-')",message="spec.source.git.ref must be a branch, tag or commit SHA (letters, digits, '.', '_', '/', '-'; no '..')"
	// +optional
	Ref string `json:"ref,omitempty"`

	// Path is the module's directory inside the repository, relative to its root.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.split('/').exists(s, s == '..')",message="spec.source.git.path must be relative to the repository root and must not contain '..'"
	// +optional
	Path string `json:"path,omitempty"`

	// CredentialsSecretRef names a Secret with the repository's credentials:
	// the key "token" (and optionally "username") for https, or the keys
	// "identity" and "known_hosts" for ssh. They are mounted as files and never
	// put in the URL, arguments or environment.
	// +optional
	CredentialsSecretRef *LocalObjectReference `json:"credentialsSecretRef,omitempty"`

	// Paths are the files of the repository this run reads, as glob
	// patterns relative to the repository's root (not to path), in the
	// manner of Atlantis' when_modified: "*" and "?" within a name, "**"
	// for any number of directories, a pattern that names a directory
	// stands for everything under it, "!" before a pattern excludes what it
	// matches, and the last pattern that matches a file decides. For
	// example ["stacks/network/**", "modules/**", "!**/*.md"]. A push to
	// the tracked ref whose commits change no file they match wakes the
	// run without a plan (status.lastSkippedPush says why). Whenever the
	// push's payload cannot show every file it changed (a truncated list
	// of commits, commits without file lists, a new ref, a force push, or
	// a forge that does not say whether a push was forced), the run plans.
	// Unset: every push plans. Changing paths starts no run.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.exists(p, !p.startsWith('!'))",message="spec.source.git.paths: at least one pattern must not start with '!': exclusions alone match nothing, so every push would be skipped"
	// +listType=atomic
	// +optional
	Paths []PathPattern `json:"paths,omitempty"`
}

// PathPattern is a glob pattern of files relative to a repository's root,
// optionally negated with a leading "!". Its syntax ("[" without "]", a
// backslash) is checked by the manager, which stalls the run naming it.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=256
// +kubebuilder:validation:XValidation:rule="!self.matches('^!?/')",message="spec.source.git.paths: a pattern is relative to the repository's root: no leading '/' (for example stacks/network/**)"
// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(s, s == '..' || s == '!..' || s == '.' || s == '!.' || size(s) == 0 || s == '!')",message="spec.source.git.paths: a pattern's directories must not be empty, '.' or '..' (for example stacks/network/**, not ./stacks/network or stacks//network)"
type PathPattern string

// OCISource fetches a Terraform module published as an OCI artifact.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.tag) && has(self.digest))",message="spec.source.oci: set tag or digest, not both (a digest pins the artifact; a tag may move)"
type OCISource struct {
	// URL is the artifact's repository, oci://<registry>/<repository>, for
	// example oci://ghcr.io/acme/modules/network (no tag or digest: use tag
	// or digest).
	// +kubebuilder:validation:MinLength=7
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^oci://[A-Za-z0-9.-]+(:[0-9]+)?/[a-z0-9]+(([.]|_|__|-+|/)[a-z0-9]+)*$')",message="spec.source.oci.url must be oci://<registry>/<repository> with a lowercase repository path and no tag, digest or credentials, for example oci://ghcr.io/acme/modules/network; put the tag in spec.source.oci.tag"
	URL string `json:"url"`

	// Tag is the artifact's tag. When neither tag nor digest is set, the
	// tag is latest.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`
	// +optional
	Tag string `json:"tag,omitempty"`

	// Digest pins the artifact's manifest, sha256:<64 hex digits>.
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	// +optional
	Digest string `json:"digest,omitempty"`

	// Path is the module's directory inside the artifact, relative to its root.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.split('/').exists(s, s == '..')",message="spec.source.oci.path must be relative to the artifact's root and must not contain '..'"
	// +optional
	Path string `json:"path,omitempty"`

	// CredentialsSecretRef names a Secret with the registry's credentials:
	// a kubernetes.io/dockerconfigjson Secret (key .dockerconfigjson, as
	// for imagePullSecrets; the entry for the artifact's registry is used),
	// or the keys username and password. The Secret is mounted as files
	// into the clone step and read by the step runner; the credentials are
	// never put in arguments, the environment or logs.
	// +optional
	CredentialsSecretRef *LocalObjectReference `json:"credentialsSecretRef,omitempty"`

	// Insecure allows a registry served over plain HTTP (a registry inside
	// the cluster or a test registry). Credentials then cross the network
	// in clear; leave it off for any registry on the internet.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
}

// InlineSource holds a module's files in the TerraformRun itself.
type InlineSource struct {
	// Files maps a file name (no directories) to its content.
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=64
	Files map[string]FileContent `json:"files"`
}

// FileContent is the content of one inline file, at most 256 KiB; use a git
// or configMapRef source for larger modules.
// +kubebuilder:validation:MaxLength=262144
type FileContent string

// LocalObjectReference names an object in the TerraformRun's namespace.
type LocalObjectReference struct {
	// Name is the object's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// TerraformSpec configures the Terraform (or OpenTofu) invocation.
type TerraformSpec struct {
	// Image is the Terraform or OpenTofu image the steps run in. When empty,
	// the manager's --terraform-image is used.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// Workspace is the Terraform workspace.
	// +kubebuilder:default=default
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`
	// +optional
	Workspace string `json:"workspace,omitempty"`

	// Vars sets Terraform input variables; each value may be any JSON value.
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=name
	// +optional
	Vars []Variable `json:"vars,omitempty"`

	// VarsFrom reads variables from Secrets or ConfigMaps: each key is a
	// variable name and each value its (HCL or JSON) value. They are mounted
	// as files. Later entries win over earlier ones and over vars. Each
	// Secret or ConfigMap is listed once.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=kind
	// +listMapKey=name
	// +optional
	VarsFrom []VarsFromSource `json:"varsFrom,omitempty"`

	// Env sets environment variables of the Terraform process from Secret
	// keys, for example provider credentials. The Secret is mounted as a file
	// and read by the step runner, so values never appear in the pod spec.
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []SecretEnvVar `json:"env,omitempty"`

	// Files mounts Secrets as files, for example a cloud credentials file.
	// Each entry has its own mountPath (two at one path are refused).
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=mountPath
	// +optional
	Files []SecretFile `json:"files,omitempty"`
}

// Variable is one Terraform input variable.
type Variable struct {
	// Name is the variable's name.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_-]*$`
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`
	// Value is the variable's value: a string, number, bool, list or object.
	Value apiextensionsv1.JSON `json:"value"`
}

// VarsFromSource names a Secret or ConfigMap whose keys are Terraform variables.
type VarsFromSource struct {
	// Kind is Secret or ConfigMap.
	// +kubebuilder:validation:Enum=Secret;ConfigMap
	Kind string `json:"kind"`
	// Name is the object's name in the run's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Optional lets the run go on when the object is missing.
	// +optional
	Optional bool `json:"optional,omitempty"`
}

// SecretEnvVar sets one environment variable of the Terraform process from a
// Secret key.
type SecretEnvVar struct {
	// Name is the environment variable's name.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="!(self in ['PATH', 'HOME', 'SHELL', 'TMPDIR', 'BASH_ENV', 'ENV', 'IFS', 'KUBECONFIG', 'KUBE_CONFIG_PATH', 'SSL_CERT_FILE', 'SSL_CERT_DIR', 'TF_DATA_DIR', 'TF_CLI_CONFIG_FILE', 'TF_CLI_ARGS', 'TF_PLUGIN_CACHE_DIR', 'TF_PLUGIN_CACHE_MAY_BREAK_DEPENDENCY_LOCK_FILE', 'TF_REATTACH_PROVIDERS', 'TF_WORKSPACE', 'TF_IN_AUTOMATION', 'TF_INPUT', 'TF_IGNORE']) && !['LD_', 'DYLD_', 'TF_CLI_ARGS_', 'TF_LOG', 'TOFU_', 'OPR8R_', 'GIT_', 'SSH_', 'KUBERNETES_'].exists(p, self.startsWith(p))",messageExpression="'spec.terraform.env name ' + self + ' is reserved: it changes how terraform, its providers, git or the loader run (PATH, HOME, LD_*, TF_CLI_*, TF_LOG*, TF_REATTACH_PROVIDERS, TF_PLUGIN_CACHE_DIR, TOFU_*, GIT_*, SSH_*, ...), which no approval of the plan shows, or prints what redaction cannot catch; give terraform values as TF_VAR_ variables or spec.terraform.vars'"
	Name string `json:"name"`
	// SecretKeyRef is the Secret key that holds the value.
	SecretKeyRef SecretKeyRef `json:"secretKeyRef"`
}

// SecretKeyRef names one key of a Secret in the run's namespace.
type SecretKeyRef struct {
	// Name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key is the key inside the Secret.
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// SecretFile mounts a Secret's keys as files in every Terraform step.
type SecretFile struct {
	// SecretName is the Secret to mount.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SecretName string `json:"secretName"`
	// MountPath is the absolute directory the keys appear in.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/') && !self.split('/').exists(s, s == '..')",message="spec.terraform.files mountPath must be an absolute path without '..'"
	// +kubebuilder:validation:XValidation:rule="self != '/' && !['bin', 'boot', 'dev', 'etc', 'home', 'lib', 'lib32', 'lib64', 'libx32', 'opt', 'proc', 'root', 'run', 'sbin', 'sys', 'tmp', 'usr', 'var', 'workspace', 'opr8r', 'tekton', 'argo', 'mainctrfs'].exists(d, self == '/' + d || self.startsWith('/' + d + '/'))",messageExpression="'spec.terraform.files mountPath ' + self + ' would hide or replace a system or runner directory (/, /bin, /boot, /dev, /etc, /home, /lib*, /opt, /proc, /root, /run, /sbin, /sys, /tmp, /usr, /var (the service-account token is under /var/run/secrets), /workspace, /opr8r, /tekton, /argo, /mainctrfs); mount Secrets elsewhere, for example under /secrets'"
	MountPath string `json:"mountPath"`
	// EnvName, when set, exports the mounted directory's path (or, with
	// key, the file's path) to Terraform under this name, for example
	// GOOGLE_APPLICATION_CREDENTIALS.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="!(self in ['PATH', 'HOME', 'SHELL', 'TMPDIR', 'BASH_ENV', 'ENV', 'IFS', 'KUBECONFIG', 'KUBE_CONFIG_PATH', 'SSL_CERT_FILE', 'SSL_CERT_DIR', 'TF_DATA_DIR', 'TF_CLI_CONFIG_FILE', 'TF_CLI_ARGS', 'TF_PLUGIN_CACHE_DIR', 'TF_PLUGIN_CACHE_MAY_BREAK_DEPENDENCY_LOCK_FILE', 'TF_REATTACH_PROVIDERS', 'TF_WORKSPACE', 'TF_IN_AUTOMATION', 'TF_INPUT', 'TF_IGNORE']) && !['LD_', 'DYLD_', 'TF_CLI_ARGS_', 'TF_LOG', 'TOFU_', 'OPR8R_', 'GIT_', 'SSH_', 'KUBERNETES_'].exists(p, self.startsWith(p))",messageExpression="'spec.terraform.files envName ' + self + ' is reserved: it changes how terraform, its providers, git or the loader run (PATH, HOME, LD_*, TF_CLI_*, TF_LOG*, TF_REATTACH_PROVIDERS, TF_PLUGIN_CACHE_DIR, TOFU_*, GIT_*, SSH_*, ...), which no approval of the plan shows, or prints what redaction cannot catch; give terraform values as TF_VAR_ variables or spec.terraform.vars'"
	// +optional
	EnvName string `json:"envName,omitempty"`
	// Key selects one key of the Secret for envName.
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// BackendSpec says where Terraform state lives. At most one field is set;
// with none, the kubernetes backend is used.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.kubernetes) && has(self.configSecretRef))",message="spec.backend must set at most one of kubernetes or configSecretRef"
type BackendSpec struct {
	// Kubernetes stores state in a Secret in the run's namespace, named
	// tfstate-<workspace>-<secretSuffix>, with Lease locking.
	// +optional
	Kubernetes *KubernetesBackend `json:"kubernetes,omitempty"`

	// ConfigSecretRef configures another backend (s3, gcs, azurerm, ...) from
	// a Secret whose "config" key holds the backend's settings in HCL, as
	// passed to terraform init -backend-config.
	// +optional
	ConfigSecretRef *BackendConfigRef `json:"configSecretRef,omitempty"`
}

// KubernetesBackend configures Terraform's kubernetes backend.
type KubernetesBackend struct {
	// SecretSuffix names the state Secret, tfstate-<workspace>-<suffix>. It
	// defaults to the run's name, with "-state" added when the name ends in
	// -<number> (db-1 keeps its state in tfstate-default-db-1-state), since
	// the kubernetes backend refuses a suffix that ends in -<number>.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('-[0-9]+$')",messageExpression="'spec.backend.kubernetes.secretSuffix ' + self + ' ends in -<number>, which the kubernetes backend of Terraform refuses (its secret_suffix must not end in -<number>); add a word, for example ' + self + '-state'"
	// +kubebuilder:validation:MaxLength=200
	// +optional
	SecretSuffix string `json:"secretSuffix,omitempty"`
}

// BackendConfigRef configures a Terraform backend from a Secret.
type BackendConfigRef struct {
	// Type is the backend type, for example s3, gcs or azurerm.
	Type BackendType `json:"type"`
	// Name is the Secret's name in the run's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ApprovalSpec says how plans are approved. A plan is named by its digest,
// "sha256:<hex>", which status.plan.digest shows.
//
// +kubebuilder:validation:XValidation:rule="!has(self.approvers) || (has(self.approvers.users) && size(self.approvers.users) > 0) || (has(self.approvers.groups) && size(self.approvers.groups) > 0)",message="spec.approval.approvers lists no user and no group, so nobody could ever approve a plan, not even a cluster admin; name the users or groups who may approve, or leave approvers out to let anyone RBAC allows approve"
// +kubebuilder:validation:XValidation:rule="!has(self.approvers) || (has(self.approvers.groups) && size(self.approvers.groups) > 0) || !has(self.requiredApprovals) || self.requiredApprovals <= (has(self.approvers.users) ? size(self.approvers.users) : 0)",message="spec.approval.requiredApprovals is more than the number of users spec.approval.approvers names (and it names no group), so no plan could ever be approved; lower requiredApprovals or name more approvers"
type ApprovalSpec struct {
	// Mode is Manual (the default), which waits at the approval gate, or Auto.
	// +kubebuilder:default=Manual
	// +optional
	Mode ApprovalMode `json:"mode,omitempty"`

	// Timeout rejects a plan that has waited this long for approval.
	// Unset means wait without limit.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('8760h')",message="spec.approval.timeout must be positive and at most 8760h (one year), for example 30m or 24h"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// ApprovedPlan approves the plan with this digest. An approval that does
	// not match the plan waiting at the gate is refused and reported.
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	// +optional
	ApprovedPlan string `json:"approvedPlan,omitempty"`

	// RejectedPlan rejects the plan with this digest.
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	// +optional
	RejectedPlan string `json:"rejectedPlan,omitempty"`

	// RejectReason says why the plan was rejected; it is shown in status.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	RejectReason string `json:"rejectReason,omitempty"`

	// RequiredApprovals is how many distinct users must approve a plan
	// (TerraformRunApprovals, kubectl tfrun approve, spec.approval.approvedPlan
	// or the engine's resume each count once per user).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	// +kubebuilder:default=1
	// +optional
	RequiredApprovals int32 `json:"requiredApprovals,omitempty"`

	// Approvers, when set, are the only users and groups whose decisions
	// count; others are ignored and reported in status.approvals.ignored.
	// Unset: anyone RBAC lets create a TerraformRunApproval here.
	// +optional
	Approvers *Approvers `json:"approvers,omitempty"`

	// SelfApproval says whether the author of the change (the user who last
	// changed the spec, stamped at admission in the infra.opr8r.io/spec-author
	// annotation) may approve its plan: Allowed (the default) or Forbidden.
	// +kubebuilder:default=Allowed
	// +optional
	SelfApproval SelfApproval `json:"selfApproval,omitempty"`

	// Rejection is Any (the default: one rejection by an allowed approver
	// rejects the plan) or Quorum (requiredApprovals distinct rejections).
	// +kubebuilder:default=Any
	// +optional
	Rejection RejectionRule `json:"rejection,omitempty"`

	// Rules decide a plan's approval from what it changes
	// (docs/policies.md): each has a CEL condition over the plan and the
	// run, and one effect. Any matching Deny wins; otherwise every
	// matching Require must be met (replacing requiredApprovals);
	// otherwise a matching AutoApprove approves; otherwise the rest of
	// spec.approval decides. A run with rules always stops at the approval
	// gate, in mode Auto too, so a Deny holds. Setting or changing rules
	// needs the right to update terraformruns/approvalpolicy (the
	// opr8r-policy-admin role): those the rules constrain cannot change
	// them.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Rules []ApprovalRule `json:"rules,omitempty"`

	// Windows say when an approved plan may apply (docs/policies.md): never
	// inside a Deny window, and, when there are Allow windows, only inside
	// one of them. Outside, the approved plan waits at the gate (Approved
	// Unknown, reason OutsideChangeWindow, saying when it opens) and
	// applies when it opens, if it is still approved. A policy admin's
	// TerraformRunApproval with overrideChangeWindows lets one plan apply
	// now, and is recorded. A run with windows always stops at the gate,
	// in mode Auto too. Setting or changing windows needs the right to
	// update terraformruns/approvalpolicy.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Windows []ChangeWindow `json:"windows,omitempty"`
}

// ChangeWindow is a recurring time span: it opens on a cron schedule and
// stays open for a duration.
type ChangeWindow struct {
	// Name names the window in status and messages.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Type is Allow (plans apply only inside Allow windows) or Deny (never
	// inside).
	Type WindowType `json:"type"`
	// Schedule is when the window opens, in cron's five fields (minute hour
	// day-of-month month day-of-week, e.g. "0 18 * * 5" for Fridays at
	// 18:00) or a descriptor such as @daily. The time zone is timeZone's.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('TZ=') && !self.startsWith('CRON_TZ=')",message="spec.approval.windows[].schedule: set the time zone in timeZone, not in the schedule"
	Schedule string `json:"schedule"`
	// Duration is how long the window stays open, e.g. 8h or 63h.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s') && duration(self) <= duration('8760h')",message="spec.approval.windows[].duration must be positive and at most 8760h, e.g. 8h"
	Duration metav1.Duration `json:"duration"`
	// TimeZone is the IANA time zone of schedule, e.g. Europe/Berlin
	// (default UTC).
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self != 'Local'",message="spec.approval.windows[].timeZone Local is the manager's own time zone, which nobody reading the window knows; name an IANA zone (e.g. Europe/Berlin) or leave timeZone out for UTC"
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// WindowType says what a change window does.
// +kubebuilder:validation:Enum=Allow;Deny
type WindowType string

const (
	// WindowAllow: plans apply only inside Allow windows.
	WindowAllow WindowType = "Allow"
	// WindowDeny: plans never apply inside.
	WindowDeny WindowType = "Deny"
)

// ApprovalRule is a CEL condition over a plan, and what follows when it
// matches.
//
// +kubebuilder:validation:XValidation:rule="self.effect == 'Require' ? has(self.require) : !has(self.require)",message="spec.approval.rules[]: require (approvals, approvers) is set when, and only when, effect is Require"
type ApprovalRule struct {
	// Name names the rule in status and messages.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Condition is a CEL expression that gives a bool. It sees plan (add,
	// change, destroy, replace, imports, forgets, moves, actionInvocations,
	// hasChanges, resourceChanges[] with address, module, mode, type, name,
	// provider, actions, replace, importing, importId, previousAddress,
	// outputChanges[] with name and actions, and runsCode[] with address,
	// kind and type: provisioners and external data sources, docs/policies.md)
	// and run (name, namespace,
	// type: Apply or Destroy, trigger, author, authors). It is compiled
	// when a run starts: a condition that does not compile stalls the run,
	// naming the rule, with the compiler's message.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Condition string `json:"condition"`
	// Effect is AutoApprove, Require or Deny.
	Effect RuleEffect `json:"effect"`
	// Require is how many distinct approvers, and from whom, when Effect is
	// Require.
	// +optional
	Require *RuleRequirement `json:"require,omitempty"`
	// Message is shown when the rule matches (a Deny's reason).
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Message string `json:"message,omitempty"`
}

// RuleEffect is what a matching rule does.
// +kubebuilder:validation:Enum=AutoApprove;Require;Deny
type RuleEffect string

const (
	// RuleAutoApprove approves the plan without a person.
	RuleAutoApprove RuleEffect = "AutoApprove"
	// RuleRequire needs approvals from distinct people.
	RuleRequire RuleEffect = "Require"
	// RuleDeny rejects the plan.
	RuleDeny RuleEffect = "Deny"
)

// RuleRequirement is what a Require rule needs.
//
// +kubebuilder:validation:XValidation:rule="!has(self.approvers) || (has(self.approvers.users) && size(self.approvers.users) > 0) || (has(self.approvers.groups) && size(self.approvers.groups) > 0)",message="spec.approval.rules[].require.approvers lists no user and no group, so the rule could never be met, not even by a cluster admin; name the users or groups whose approvals count for it, or leave approvers out"
// +kubebuilder:validation:XValidation:rule="!has(self.approvers) || (has(self.approvers.groups) && size(self.approvers.groups) > 0) || self.approvals <= (has(self.approvers.users) ? size(self.approvers.users) : 0)",message="spec.approval.rules[].require.approvals is more than the number of users its approvers name (and they name no group), so the rule could never be met; lower approvals or name more approvers"
type RuleRequirement struct {
	// Approvals is how many distinct users must approve.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Approvals int32 `json:"approvals"`
	// Approvers, when set, are whose approvals count for this rule (on top
	// of spec.approval.approvers and selfApproval, which every approval
	// must meet).
	// +optional
	Approvers *Approvers `json:"approvers,omitempty"`
}

// OutputsSpec says where Terraform outputs go. Values, sensitive or not, are
// written only to the outputs Secret; status lists output names.
//
// +kubebuilder:validation:XValidation:rule="!has(self.include) || !has(self.exclude) || !self.include.exists(n, n in self.exclude)",message="spec.outputs: a name may not be both included and excluded"
type OutputsSpec struct {
	// SecretName is the Secret the outputs are written to. It defaults to
	// <run name>-outputs. It may not be a name that opr8r or Terraform's
	// kubernetes backend gives its own Secrets (a run's <child>-plan and
	// <child>-tfoutputs, the state's tfstate-*). A Secret of that name that
	// belongs to something else is never overwritten: the run stalls and
	// says so.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('tfstate-') && !self.matches('^.+-([a-z]+-)?[0-9]+-(plan|tfoutputs)$')",message="spec.outputs.secretName names one of the Secrets opr8r or the kubernetes backend write themselves (a run's <child>-plan or <child>-tfoutputs, the state's tfstate-*); choose another name, e.g. <run name>-outputs"
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// Include lists the outputs to write; empty means all.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z_][A-Za-z0-9_-]*$`
	// +kubebuilder:validation:items:MaxLength=128
	// +optional
	Include []string `json:"include,omitempty"`

	// Exclude lists outputs not to write.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z_][A-Za-z0-9_-]*$`
	// +kubebuilder:validation:items:MaxLength=128
	// +optional
	Exclude []string `json:"exclude,omitempty"`

	// Rename maps an output name to the Secret key it is written under.
	// +kubebuilder:validation:MaxProperties=256
	// +optional
	Rename map[string]SecretDataKey `json:"rename,omitempty"`
}

// SecretDataKey is a valid key of a Secret's data.
// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
// +kubebuilder:validation:MaxLength=253
type SecretDataKey string

// RunnerSpec configures the pods that run the pipeline's steps.
type RunnerSpec struct {
	// ServiceAccountName is the service account of the step pods. It needs
	// the rights of the runner Role (config/rbac/runner_role.yaml). When
	// empty, the manager's --runner-service-account is used.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// PlanServiceAccountName is the service account of the steps that run
	// before the approval gate: clone, init and plan, and every step of a
	// run that never applies (a drift check, planOnly). A plan runs the
	// module's providers and data sources, which the author wrote and
	// nobody has approved yet: give this account a cloud identity that may
	// read but not change (docs/security.md), and serviceAccountName the
	// one that applies. When empty, the manager's --plan-service-account,
	// else serviceAccountName. An installer restricts it as
	// serviceAccountName (runner policy allowedServiceAccounts).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PlanServiceAccountName string `json:"planServiceAccountName,omitempty"`

	// Resources are the requests and limits of each step container. On
	// Tekton, whose task runs its steps one after another in one pod, the
	// pod requests this once, not once per step: each step requests an
	// equal share and keeps the whole limit.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// NodeSelector constrains the step pods to matching nodes.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations of the step pods.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Workspace configures the volume shared by the steps of one pipeline.
	// +optional
	Workspace WorkspaceVolume `json:"workspace,omitempty"`

	// IdentityToken projects a token of the step pods' service account,
	// for an audience a cloud trusts, into the terraform steps (never into
	// checks): workload identity, so the runner's cloud credentials come
	// from the cluster's token issuer and not from a Secret tenants who may
	// edit the namespace can read (docs/security.md).
	// +optional
	IdentityToken *IdentityToken `json:"identityToken,omitempty"`

	// SecurityContext sets the user and group the steps run as, for images
	// that need a particular one. Steps always run as non-root, without
	// privilege escalation, with all capabilities dropped and the
	// RuntimeDefault seccomp profile; nothing here can loosen that.
	// +optional
	SecurityContext *RunnerSecurityContext `json:"securityContext,omitempty"`
}

// IdentityToken is a projected service-account token for a cloud's
// workload identity: AWS (IRSA: envName AWS_WEB_IDENTITY_TOKEN_FILE, with
// AWS_ROLE_ARN from spec.terraform.env), Azure (AZURE_FEDERATED_TOKEN_FILE),
// Google Cloud (the token file of a credential configuration). The kubelet
// writes and refreshes it at /opr8r/identity/token in the terraform steps.
type IdentityToken struct {
	// Audience is the token's audience, the one the cloud's trust policy
	// names (for example sts.amazonaws.com). An installer may restrict it
	// (runner policy allowedTokenAudiences). Audiences that begin with
	// opr8r.io/ are opr8r's own (its state API's tokens): refused.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('opr8r.io/')",message="audiences that begin with opr8r.io/ are opr8r's own (its state API's tokens); use your cloud's audience, for example sts.amazonaws.com"
	Audience string `json:"audience"`
	// ExpirationSeconds is the token's lifetime; the kubelet refreshes it
	// before it ends.
	// +kubebuilder:validation:Minimum=600
	// +kubebuilder:validation:Maximum=86400
	// +kubebuilder:default=3600
	// +optional
	ExpirationSeconds *int64 `json:"expirationSeconds,omitempty"`
	// EnvName, when set, exports the token file's path to terraform under
	// this name.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="!(self in ['PATH', 'HOME', 'SHELL', 'TMPDIR', 'BASH_ENV', 'ENV', 'IFS', 'KUBECONFIG', 'KUBE_CONFIG_PATH', 'SSL_CERT_FILE', 'SSL_CERT_DIR', 'TF_DATA_DIR', 'TF_CLI_CONFIG_FILE', 'TF_CLI_ARGS', 'TF_PLUGIN_CACHE_DIR', 'TF_PLUGIN_CACHE_MAY_BREAK_DEPENDENCY_LOCK_FILE', 'TF_REATTACH_PROVIDERS', 'TF_WORKSPACE', 'TF_IN_AUTOMATION', 'TF_INPUT', 'TF_IGNORE']) && !['LD_', 'DYLD_', 'TF_CLI_ARGS_', 'TF_LOG', 'TOFU_', 'OPR8R_', 'GIT_', 'SSH_', 'KUBERNETES_'].exists(p, self.startsWith(p))",messageExpression="'spec.runner.identityToken.envName ' + self + ' is reserved: it changes how terraform, its providers, git or the loader run; name the variable the cloud reads, for example AWS_WEB_IDENTITY_TOKEN_FILE'"
	// +optional
	EnvName string `json:"envName,omitempty"`
}

// RunnerSecurityContext is the part of the step pods' security context a
// TerraformRun may choose.
type RunnerSecurityContext struct {
	// RunAsUser is the steps' user id; 0 (root) is refused.
	// +kubebuilder:validation:Minimum=1
	// +optional
	RunAsUser *int64 `json:"runAsUser,omitempty"`
	// RunAsGroup is the steps' group id; 0 (root's group, which owns
	// system files) is refused.
	// +kubebuilder:validation:Minimum=1
	// +optional
	RunAsGroup *int64 `json:"runAsGroup,omitempty"`
	// FSGroup owns the workspace volume; 0 (root's group) is refused.
	// +kubebuilder:validation:Minimum=1
	// +optional
	FSGroup *int64 `json:"fsGroup,omitempty"`
	// Privileged is accepted only as false: steps never run privileged.
	// +kubebuilder:validation:XValidation:rule="!self",message="spec.runner.securityContext.privileged must be false: steps never run privileged"
	// +optional
	Privileged *bool `json:"privileged,omitempty"`
	// AllowPrivilegeEscalation is accepted only as false.
	// +kubebuilder:validation:XValidation:rule="!self",message="spec.runner.securityContext.allowPrivilegeEscalation must be false"
	// +optional
	AllowPrivilegeEscalation *bool `json:"allowPrivilegeEscalation,omitempty"`
}

// WorkspaceVolume configures the per-pipeline volume that carries the
// checkout, the provider cache and the plan file between steps.
type WorkspaceVolume struct {
	// Size of the volume.
	// +kubebuilder:default="1Gi"
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// StorageClassName of the volume; empty means the cluster default.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// Timeouts bound how long each step of a run may run.
type Timeouts struct {
	// Plan bounds each step up to the plan (clone, init, plan) and the
	// checks.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('168h')",message="spec.timeouts.plan must be between 1m and 168h, for example 30m or 2h"
	// +optional
	Plan *metav1.Duration `json:"plan,omitempty"`
	// Apply bounds the apply step.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('168h')",message="spec.timeouts.apply must be between 1m and 168h, for example 2h or 24h"
	// +optional
	Apply *metav1.Duration `json:"apply,omitempty"`
	// Destroy bounds the apply step of a destroy run; unset, the apply's.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('168h')",message="spec.timeouts.destroy must be between 1m and 168h, for example 2h or 24h"
	// +optional
	Destroy *metav1.Duration `json:"destroy,omitempty"`
}

// HistorySpec configures how long finished pipelines and their records are
// kept. A run's result is always recorded in status.history before its
// pipeline object can be deleted, on every engine.
type HistorySpec struct {
	// TTLAfterFinished deletes a finished pipeline object (and the plan and
	// raw-outputs Secrets it owns) this long after it finished. opr8r deletes
	// it itself, on every engine, and only once the run's result is recorded
	// in status.history; 0s deletes it as soon as that is done. Unset keeps
	// it until it is pruned by keepFinished.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="spec.history.ttlAfterFinished must not be negative"
	// +optional
	TTLAfterFinished *metav1.Duration `json:"ttlAfterFinished,omitempty"`

	// KeepFinished is how many finished pipelines to keep per TerraformRun.
	// The last successful apply's is kept besides (it holds the raw
	// outputs the outputs Secret is restored from), until ttlAfterFinished
	// if set.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	KeepFinished *int32 `json:"keepFinished,omitempty"`

	// KeepRecords is how many runs (applies, destroys, previews) status.history
	// records, newest first, with their records (logs, plans, approvals).
	// Scheduled checks are counted apart (keepChecks), so checks never push
	// an apply out; and the last successful apply is always kept.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	KeepRecords *int32 `json:"keepRecords,omitempty"`

	// KeepChecks is how many scheduled checks status.history records,
	// newest first, with their records, besides keepRecords' runs.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	KeepChecks *int32 `json:"keepChecks,omitempty"`
}

// RunType is what a pipeline does.
type RunType string

const (
	// RunApply plans, waits for approval and applies.
	RunApply RunType = "apply"
	// RunDestroy plans a destroy and applies it; it runs on deletion.
	RunDestroy RunType = "destroy"
	// RunDrift is a scheduled check (spec.interval): it fetches the source
	// and plans with -refresh, and never applies.
	RunDrift RunType = "drift"
	// RunPlan is a run of a planOnly TerraformRun: it plans and stops.
	RunPlan RunType = "plan"
)

// RunTrigger says why a run started.
type RunTrigger string

const (
	// TriggerCreated is the first run of a new TerraformRun.
	TriggerCreated RunTrigger = "Created"
	// TriggerSpecChange is a run for a changed spec.
	TriggerSpecChange RunTrigger = "SpecChange"
	// TriggerRerunRequest is a run asked for with the
	// infra.opr8r.io/run-requested-at annotation (kubectl tfrun rerun); for
	// a failed destroy it is the retry.
	TriggerRerunRequest RunTrigger = "RerunRequest"
	// TriggerDeletion is the destroy run of a TerraformRun being deleted.
	TriggerDeletion RunTrigger = "Deletion"
	// TriggerSchedule is a scheduled check (spec.interval).
	TriggerSchedule RunTrigger = "Schedule"
	// TriggerSourceChange is an apply run for a source that moved: a check
	// found a new commit, an edited ConfigMap source or changed varsFrom
	// values.
	TriggerSourceChange RunTrigger = "SourceChange"
	// TriggerDrift is an apply run that repairs drift a check found
	// (driftRemediation Apply).
	TriggerDrift RunTrigger = "Drift"
	// TriggerDependencyChange is an apply run for a dependency (see
	// spec.dependsOn) whose outputs changed since this TerraformRun's last
	// run; the detail names it and the run that changed them.
	TriggerDependencyChange RunTrigger = "DependencyChange"
)

// StepPhase is the phase of one pipeline step.
type StepPhase string

const (
	// StepPending has not started.
	StepPending StepPhase = "Pending"
	// StepRunning is running, or waiting at the approval gate.
	StepRunning StepPhase = "Running"
	// StepSucceeded finished successfully.
	StepSucceeded StepPhase = "Succeeded"
	// StepFailed finished with an error.
	StepFailed StepPhase = "Failed"
	// StepSkipped did not run because its condition was false.
	StepSkipped StepPhase = "Skipped"
)

// StepStatus is the observed state of one pipeline step.
type StepStatus struct {
	// Name is the step: clone, init, plan, approve, apply, export-outputs or cleanup.
	Name string `json:"name"`
	// Phase is Pending, Running, Succeeded, Failed or Skipped.
	Phase StepPhase `json:"phase"`
	// StartedAt is when the step started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when the step finished.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Message is the engine's or terraform's short message about the step.
	// +optional
	Message string `json:"message,omitempty"`
}

// ChildReference names the engine object of a run.
type ChildReference struct {
	// APIVersion of the object, for example argoproj.io/v1alpha1.
	APIVersion string `json:"apiVersion"`
	// Kind of the object, for example Workflow.
	Kind string `json:"kind"`
	// Name of the object in the run's namespace.
	Name string `json:"name"`
}

// RunPhase is the phase of one pipeline run.
type RunPhase string

const (
	// RunPending has been created but has not started.
	RunPending RunPhase = "Pending"
	// RunRunning is running.
	RunRunning RunPhase = "Running"
	// RunAwaitingApproval waits at the approval gate.
	RunAwaitingApproval RunPhase = "AwaitingApproval"
	// RunSucceeded finished successfully.
	RunSucceeded RunPhase = "Succeeded"
	// RunFailed finished with an error.
	RunFailed RunPhase = "Failed"
	// RunRejected finished because its plan was rejected or timed out.
	RunRejected RunPhase = "Rejected"
)

// RunStatus is the state of one pipeline run of a TerraformRun.
type RunStatus struct {
	// ID is the run's id, the name of its engine object.
	ID string `json:"id"`
	// Type is apply or destroy.
	Type RunType `json:"type"`
	// Engine is the engine that runs it.
	Engine EngineName `json:"engine"`
	// Number is the run's number: 1 for the first run of this TerraformRun,
	// then one more for each run. A number, and so a child name, is never
	// used twice.
	// +optional
	Number int64 `json:"number,omitempty"`
	// Trigger says why the run started.
	// +optional
	Trigger RunTrigger `json:"trigger,omitempty"`
	// TriggerDetail adds to the trigger: the rerun request's value, or the
	// spec hashes of a spec change.
	// +optional
	TriggerDetail string `json:"triggerDetail,omitempty"`
	// SpecHash is the hash of the spec the run was started for.
	SpecHash string `json:"specHash"`
	// Attempt counts consecutive runs started for the same spec hash, from 1.
	Attempt int32 `json:"attempt"`
	// Child is the engine object.
	Child ChildReference `json:"child"`
	// Phase is the run's phase.
	Phase RunPhase `json:"phase"`
	// StartedAt is when the run started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when the run finished.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Commit is the source revision the run checked out: the git commit,
	// an OCI artifact's manifest digest, or the digest of a ConfigMap or
	// inline source's files.
	// +optional
	Commit string `json:"commit,omitempty"`
	// Author is the user who last changed the spec when the run started
	// (the infra.opr8r.io/spec-author annotation, stamped at admission).
	// +optional
	Author string `json:"author,omitempty"`
	// Authors are every user who changed a hashed field of the spec since
	// the last applied run, as stamped at admission: none of them may
	// approve this run's plan when spec.approval.selfApproval is Forbidden.
	// +listType=set
	// +optional
	Authors []string `json:"authors,omitempty"`
	// Generation is the TerraformRun's metadata.generation the run was
	// started from.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// ApprovalMode is the approval the run was started under: Manual runs
	// apply only a plan whose approval status.approval records, which the
	// apply step checks itself before it applies.
	// +optional
	ApprovalMode ApprovalMode `json:"approvalMode,omitempty"`
	// Inputs is the digest of the run's variables (vars and varsFrom
	// values), salted with the TerraformRun's uid; values never leave the
	// step pods.
	// +optional
	Inputs string `json:"inputs,omitempty"`
	// Dependencies are the dependencies whose outputs the run took as
	// variables, with the digest of their outputs when it started: a
	// dependency whose outputsDigest differs later starts a new run.
	// +listType=atomic
	// +optional
	Dependencies []DependencyRun `json:"dependencies,omitempty"`
	// Steps are the pipeline's steps in order.
	// +optional
	Steps []StepStatus `json:"steps,omitempty"`
	// Message is a short description of the run's state; on failure it
	// carries terraform's own error text.
	// +optional
	Message string `json:"message,omitempty"`
}

// DependencyRun is a dependency whose outputs a run took, as they were
// when it started.
type DependencyRun struct {
	// Name is the dependency's name.
	Name string `json:"name"`
	// Namespace is the dependency's namespace, when not the run's own.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// OutputsDigest is the dependency's status.outputsDigest.
	// +optional
	OutputsDigest string `json:"outputsDigest,omitempty"`
	// RunID is the dependency's run that wrote those outputs.
	// +optional
	RunID string `json:"runID,omitempty"`
}

// PlanStatus summarizes the plan of the latest run.
type PlanStatus struct {
	// Add is the number of resources to create.
	Add int32 `json:"add"`
	// Change is the number of resources to update in place.
	Change int32 `json:"change"`
	// Destroy is the number of resources to destroy.
	Destroy int32 `json:"destroy"`
	// Replace is the number of resources to replace (counted in add and destroy too).
	// +optional
	Replace int32 `json:"replace,omitempty"`
	// Import is the number of resources the plan imports (import blocks).
	// +optional
	Import int32 `json:"import,omitempty"`
	// Forget is the number of resources the plan removes from the state
	// without destroying them (removed blocks, lifecycle destroy = false).
	// +optional
	Forget int32 `json:"forget,omitempty"`
	// Move is the number of resources the plan moves to another address
	// (moved blocks).
	// +optional
	Move int32 `json:"move,omitempty"`
	// Actions is the number of action invocations the plan carries
	// (Terraform 1.14 actions: side effects outside resource changes).
	// +optional
	Actions int32 `json:"actions,omitempty"`
	// HasChanges is true when applying the plan would change anything.
	HasChanges bool `json:"hasChanges"`
	// Digest is the plan file's sha256 digest, "sha256:<hex>"; approvals name it.
	Digest string `json:"digest"`
	// Summary is the plan in the form "+1 ~0 -0" for printing.
	Summary string `json:"summary"`
	// RunID is the run that made the plan.
	RunID string `json:"runID"`
	// TextDigest is the digest, "sha256:<hex>", of the readable plan as the
	// plan step kept it in the run's records (redacted), and JSONDigest of
	// the plan as JSON as kept (sensitive values masked): kubectl tfrun plan
	// shows a record only when it matches, so what an approver reads is
	// what the plan step wrote. SensitiveJSONDigest is the digest of the
	// plan as JSON in clear (kubectl tfrun plan --json --show-sensitive).
	// +optional
	TextDigest string `json:"textDigest,omitempty"`
	// +optional
	JSONDigest string `json:"jsonDigest,omitempty"`
	// +optional
	SensitiveJSONDigest string `json:"sensitiveJSONDigest,omitempty"`
}

// ApprovalSource says how a plan was approved or rejected.
type ApprovalSource string

const (
	// ApprovedBySpec was approved through spec.approval.approvedPlan.
	ApprovedBySpec ApprovalSource = "TerraformRun"
	// ApprovedByApproval was approved through TerraformRunApprovals
	// (kubectl tfrun approve).
	ApprovedByApproval ApprovalSource = "TerraformRunApproval"
	// ApprovedByEngine was approved in the engine (argo resume, the Argo UI).
	ApprovedByEngine ApprovalSource = "Engine"
	// ApprovedAutomatically was approved by approval mode Auto.
	ApprovedAutomatically ApprovalSource = "Auto"
	// ApprovalTimedOut was rejected because spec.approval.timeout expired.
	ApprovalTimedOut ApprovalSource = "Timeout"
	// ApprovedByRule was approved or rejected by a rule of
	// spec.approval.rules (AutoApprove or Deny).
	ApprovedByRule ApprovalSource = "Rule"
)

// ApprovalStatus records the decision about the latest plan.
type ApprovalStatus struct {
	// Digest is the plan the decision is about.
	Digest string `json:"digest"`
	// Approved is true when the plan was approved, false when rejected.
	Approved bool `json:"approved"`
	// Source is how the decision was made: TerraformRunApproval, TerraformRun
	// (spec.approval), Engine, Auto or Timeout.
	Source ApprovalSource `json:"source"`
	// By names who decided: the users whose decisions counted, comma
	// separated, as stamped at admission or recorded by the engine.
	// +optional
	By string `json:"by,omitempty"`
	// At is when the decision was made.
	At metav1.Time `json:"at"`
	// Reason is the reason given for a rejection.
	// +optional
	Reason string `json:"reason,omitempty"`
	// ChangeWindowOverriddenBy names the policy admin, and their
	// TerraformRunApproval, who let the plan apply outside
	// spec.approval.windows.
	// +optional
	ChangeWindowOverriddenBy string `json:"changeWindowOverriddenBy,omitempty"`
}

// RunRecord is one finished run in status.history.
type RunRecord struct {
	// ID is the run's id, the name its engine object had.
	ID string `json:"id"`
	// Number is the run's number (see status.run.number).
	Number int64 `json:"number"`
	// Type is apply or destroy.
	Type RunType `json:"type"`
	// Engine ran it.
	Engine EngineName `json:"engine"`
	// Trigger says why it started.
	// +optional
	Trigger RunTrigger `json:"trigger,omitempty"`
	// TriggerDetail adds to the trigger, for example the rerun request's
	// value.
	// +optional
	TriggerDetail string `json:"triggerDetail,omitempty"`
	// SpecHash is the hash of the spec it ran.
	SpecHash string `json:"specHash"`
	// Revision is the source revision it ran (the git commit, an OCI
	// artifact's manifest digest, or the digest of a ConfigMap or inline
	// source's files).
	// +optional
	Revision string `json:"revision,omitempty"`
	// Inputs is the digest of its variables (see status.run.inputs).
	// +optional
	Inputs string `json:"inputs,omitempty"`
	// Plan is its plan, when it got that far.
	// +optional
	Plan *PlanStatus `json:"plan,omitempty"`
	// Approval is the decision about its plan: how, by whom, when.
	// +optional
	Approval *ApprovalStatus `json:"approval,omitempty"`
	// Author is the user who last changed the spec when the run started.
	// +optional
	Author string `json:"author,omitempty"`
	// Result is Succeeded, Failed or Rejected.
	Result RunPhase `json:"result"`
	// StartedAt is when it started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when it finished.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Message is its final message; on failure terraform's error text.
	// +optional
	Message string `json:"message,omitempty"`
}

// AppliedRevision is the source revision and inputs an apply ran with.
type AppliedRevision struct {
	// Revision is the source revision (see status.run.commit).
	// +optional
	Revision string `json:"revision,omitempty"`
	// Inputs is the inputs digest (see status.run.inputs).
	// +optional
	Inputs string `json:"inputs,omitempty"`
	// RunID is the apply run.
	RunID string `json:"runID"`
}

// DriftStatus is what the latest scheduled check found.
type DriftStatus struct {
	// LastCheckID is the latest check's run id.
	LastCheckID string `json:"lastCheckID"`
	// LastCheckedAt is when it finished.
	LastCheckedAt metav1.Time `json:"lastCheckedAt"`
	// Result is NoDrift, Drifted, SourceChanged, NotApplied (planOnly: the
	// preview's changes, pending by design), Superseded or Failed.
	Result string `json:"result"`
	// Plan is the check's plan when it found drift: what applying would
	// change back.
	// +optional
	Plan *PlanStatus `json:"plan,omitempty"`
	// Revision is the source revision the check saw.
	// +optional
	Revision string `json:"revision,omitempty"`
}

// SkippedPush is a push that woke a TerraformRun without a plan.
type SkippedPush struct {
	// Commit is the commit the push moved the tracked ref to.
	Commit string `json:"commit"`
	// Reason is why no plan ran: NoPathMatched.
	Reason string `json:"reason"`
	// Message says it for people: the files the push changed, and that no
	// pattern of spec.source.git.paths matched them.
	// +optional
	Message string `json:"message,omitempty"`
	// At is when the run took the push.
	At metav1.Time `json:"at"`
}

// TerraformRunStatus is the observed state of a TerraformRun.
type TerraformRunStatus struct {
	// Conditions are Ready, Reconciling and Stalled (kstatus), plus Planned,
	// Approved and Applied.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the generation whose run has finished.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// LastAppliedHash is the spec hash of the last successful apply.
	// +optional
	LastAppliedHash string `json:"lastAppliedHash,omitempty"`

	// LastAppliedGeneration is the metadata.generation the last successful
	// apply was started from: the changes of later generations are the
	// next run's (their authors, metadata.annotations
	// infra.opr8r.io/spec-authors).
	// +optional
	LastAppliedGeneration int64 `json:"lastAppliedGeneration,omitempty"`

	// LastHandledRunRequest echoes the infra.opr8r.io/run-requested-at
	// annotation of the last rerun request that started a run.
	// +optional
	LastHandledRunRequest string `json:"lastHandledRunRequest,omitempty"`

	// LastHandledPush echoes the infra.opr8r.io/source-push annotation (a
	// receiver's push) once a run covered that commit, or found it was the
	// commit its last run already used.
	// +optional
	LastHandledPush string `json:"lastHandledPush,omitempty"`

	// LastSkippedPush is the latest push that woke this run without a plan:
	// its commits changed no file spec.source.git.paths matches. Its commit
	// is then the run's, as status.lastHandledPush says: the next push is
	// read from it.
	// +optional
	LastSkippedPush *SkippedPush `json:"lastSkippedPush,omitempty"`

	// LastRunNumber is the number of the latest run started; the next run
	// gets a higher one.
	// +optional
	LastRunNumber int64 `json:"lastRunNumber,omitempty"`

	// ResourcesMayExist is true once an apply step of this TerraformRun may
	// have run (or a run ended unobserved): the state may then hold
	// resources, and deletion runs a destroy.
	// +optional
	ResourcesMayExist bool `json:"resourcesMayExist,omitempty"`

	// Run is the latest (or active) pipeline run; scheduled checks are
	// recorded in history and status.drift, not here.
	// +optional
	Run *RunStatus `json:"run,omitempty"`

	// LastApplied is the source revision and inputs of the last successful
	// apply run: what scheduled checks compare with to tell a moved source
	// from drift.
	// +optional
	LastApplied *AppliedRevision `json:"lastApplied,omitempty"`

	// Drift is what the latest scheduled check found.
	// +optional
	Drift *DriftStatus `json:"drift,omitempty"`

	// History records the latest finished runs, newest first
	// (spec.history.keepRecords, default 10). A run is recorded before its
	// pipeline object can be pruned or deleted.
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	History []RunRecord `json:"history,omitempty"`

	// Plan is the latest plan.
	// +optional
	Plan *PlanStatus `json:"plan,omitempty"`

	// Approval is the decision about the latest plan.
	// +optional
	Approval *ApprovalStatus `json:"approval,omitempty"`

	// Approvals is what spec.approval's policy has counted for the latest
	// plan: who approved, how many more are needed, which decisions do not
	// count and why.
	// +optional
	Approvals *ApprovalTally `json:"approvals,omitempty"`

	// Outputs lists the names of the outputs written to the outputs Secret;
	// never their values.
	// +optional
	Outputs []string `json:"outputs,omitempty"`

	// OutputsSecretName is the Secret that holds the output values.
	// +optional
	OutputsSecretName string `json:"outputsSecretName,omitempty"`

	// SensitiveOutputs lists the outputs Terraform marks sensitive (names
	// only): a dependent that takes one as a variable must declare that
	// variable sensitive.
	// +optional
	SensitiveOutputs []string `json:"sensitiveOutputs,omitempty"`

	// OutputsDigest changes when, and only when, the values in the outputs
	// Secret change: an HMAC of them under a random key kept in the
	// Secret's annotations, so it says nothing about the values to whoever
	// cannot read the Secret. Dependents compare it with the digest their
	// last run used.
	// +optional
	OutputsDigest string `json:"outputsDigest,omitempty"`

	// Phase is a one-word summary for people; conditions are the source of truth.
	// +optional
	Phase string `json:"phase,omitempty"`

	// PlanSummary is status.plan.summary, for the printer column.
	// +optional
	PlanSummary string `json:"planSummary,omitempty"`
}

// TerraformRun runs a Terraform module through a workflow engine: clone, init,
// plan, an approval gate, apply and export of outputs.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tfrun;tfr,categories=opr8r
// +kubebuilder:printcolumn:name="Engine",type=string,JSONPath=`.status.run.engine`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Plan",type=string,JSONPath=`.status.planSummary`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Approvals",type=string,JSONPath=`.status.approvals.summary`
// +kubebuilder:printcolumn:name="Drifted",type=string,JSONPath=`.status.conditions[?(@.type=="Drifted")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 40",message="metadata.name must be at most 40 characters so that engine object names fit in 63"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.dependsOn) || self.spec.dependsOn.all(d, has(d.__namespace__) || d.name != self.metadata.name)",message="spec.dependsOn names this TerraformRun itself; a run cannot depend on itself"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.spec.engine) || !has(self.spec.engine) || oldSelf.spec.engine == self.spec.engine || !has(oldSelf.status.run) || oldSelf.status.run.phase in ['Succeeded', 'Failed', 'Rejected']",message="spec.engine cannot change while a run is active; wait for it to finish (or reject its plan) first"
type TerraformRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	Spec TerraformRunSpec `json:"spec"`
	// Status is the observed state.
	// +optional
	Status TerraformRunStatus `json:"status,omitempty"`
}

// TerraformRunList is a list of TerraformRuns.
//
// +kubebuilder:object:root=true
type TerraformRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the TerraformRuns.
	Items []TerraformRun `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TerraformRun{}, &TerraformRunList{})
}
