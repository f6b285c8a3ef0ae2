// Package pipeline describes, independently of any engine, what one run of a
// TerraformRun executes: its steps, their opr8r-step arguments, the volumes
// they mount and the small results they produce. Engines (engines/argo,
// engines/tekton, engines/job) only wire these steps together in their own
// syntax. Its files follow its concerns: the contract with the step
// containers (contract.go), the effective spec and its hash (spec.go), the
// inputs that travel with a child (inputs.go), the pipeline and its builder
// (build.go), one method per step (steps.go), volumes (volumes.go), and
// containers and their security (containers.go). The names every part of
// opr8r agrees on are in pkg/names.
//
// Nothing here reads a secret value: secrets are referenced by name and
// mounted as files, which the step runner reads.
package pipeline

import (
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/results"
)

// The contract with the step containers: where things are inside them, the
// placeholders each engine fills in, and the results steps write.

// Result names written by steps (the wire format is pkg/results).
const (
	ResultCommit     = results.Commit
	ResultHasChanges = results.HasChanges
	ResultDigest     = results.Digest
	ResultSummary    = results.Summary
	// ResultPlanTextDigest and ResultPlanJSONDigest are the digests of the
	// readable plan and of the plan as JSON exactly as the plan step kept
	// them (redacted, masked): what a reviewer reads.
	ResultPlanTextDigest = results.PlanTextDigest
	ResultPlanJSONDigest = results.PlanJSONDigest
)

// Paths inside step containers.
const (
	WorkspaceDir   = "/workspace"
	CheckoutDir    = WorkspaceDir + "/src"
	PluginCacheDir = WorkspaceDir + "/.plugin-cache"
	// SharedPluginCacheDir is where the namespace's provider cache claim
	// (engine.Providers.CacheClaim) is mounted, in the init step only.
	SharedPluginCacheDir = names.SharedPluginCacheDir
	PlanFile             = WorkspaceDir + "/tfplan"
	TmpDir               = "/tmp"
	StepBinDir           = "/opr8r/bin"
	StepBinary           = StepBinDir + "/opr8r-step"
	ImageStepBinary      = "/opr8r-step"
	SourceDir            = "/opr8r/source"
	InputsDir            = "/opr8r/inputs"
	VarsFile             = InputsDir + "/vars.json"
	// EmbeddedVarsFile is where the clone step writes vars.json when the
	// inputs travel in the child (InputsEnv): in the workspace, which the
	// plan step shares with it.
	EmbeddedVarsFile = WorkspaceDir + "/.opr8r/vars.json"
	GitCredsDir      = "/opr8r/secrets/git"
	OCICredsDir      = "/opr8r/secrets/oci"
	BackendDir       = "/opr8r/secrets/backend"
	// IdentityTokenDir holds the projected service-account token of
	// spec.runner.identityToken, in the terraform steps only.
	IdentityTokenDir = "/opr8r/identity"
	// IdentityTokenFile is that token.
	IdentityTokenFile = IdentityTokenDir + "/token"
	// BackendConfigFile is the backend configuration Secret's config key.
	BackendConfigFile = BackendDir + "/config"
	VarsFromDir       = "/opr8r/vars"
	EnvSecretsDir     = "/opr8r/secrets/env"
	// DependenciesDir holds, in one directory per dependency, the outputs
	// of spec.dependsOn a run takes as variables (same namespace only).
	DependenciesDir = "/opr8r/deps"
	// CheckInputDir holds what checks read: the plan as JSON and the
	// readable plan, written by the plan step when a run has checks.
	CheckInputDir = WorkspaceDir + "/plan"
	PlanJSONFile  = CheckInputDir + "/plan.json"
	PlanTextFile  = CheckInputDir + "/plan.txt"
	// CheckConfigDir is where a check's configMapRef is mounted.
	CheckConfigDir = "/opr8r/check"
)

// Volume names the engines create themselves.
const (
	WorkspaceVolume = "workspace"
	TmpVolume       = "tmp"
	StepBinVolume   = "opr8r-bin"
)

// Placeholders in step arguments that each engine replaces with its own
// expression (for example {{workflow.uid}} in Argo).
const (
	PhOwnerUID  = "{opr8r:owner-uid}"
	PhOwnerName = "{opr8r:owner-name}"
	// PhResults is a whole argument: the step runner's flag that says where
	// its small results go (--results-dir=DIR or --results-file=FILE).
	PhResults        = "{opr8r:results}"
	PhApprovedDigest = "{opr8r:approved-digest}"
	PhOwnerKind      = "{opr8r:owner-kind}"
	PhOwnerAPI       = "{opr8r:owner-api-version}"
	// PhErrorFile is where a failing step writes its one-line summary: the
	// termination log on Argo, a task result on Tekton.
	PhErrorFile = "{opr8r:error-file}"
)

// InputsEnv is the clone step's environment variable that carries the
// run's inputs (pkg/inputs) when they are small enough to travel in the
// child (EmbeddedInputs).
const InputsEnv = "OPR8R_INPUTS"

// VarsKey is the key of vars.json in the inputs ConfigMap. Its leading dot
// keeps it apart from inline file names, which cannot start with one; each
// volume selects its own keys with items.
const VarsKey = ".vars.json"

// ResultError is the result a failing step's summary is written to where
// the engine has no termination message of its own (Tekton).
const ResultError = results.Error
