// Package names holds the names every part of opr8r agrees on: the steps of
// a run, a run's child, and the objects that belong to one child. The
// manager, the step runner, the engines and the kubectl plugin all use them,
// so they live below every one of those packages and import only the API.
package names

import (
	"fmt"
	"slices"
	"strings"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Step names, shared by every engine and shown in status.
const (
	StepClone = "clone"
	StepInit  = "init"
	// StepRestoreState pushes the states earlier runs kept because their
	// backend did not take them, as the runner, before the plan; a run
	// has it only when the manager found kept states when it started it.
	StepRestoreState = "restore-state"
	StepPlan         = "plan"
	StepApprove      = "approve"
	StepApply        = "apply"
	StepExport       = "export-outputs"
	StepCleanup      = "cleanup"
	// CheckPrefix begins the step name of each of spec.checks.
	CheckPrefix = "check-"
)

// LockFile is terraform's dependency lock file, the one dot file a module
// source brings along from every kind of source (an inline source's files
// and a ConfigMap's keys skip other dot files): with it, terraform takes a
// provider package from the namespace's shared plugin cache only when the
// file lists the package's checksum. The admission policy opr8r-spec-rules
// admits it as an inline file's name.
const LockFile = ".terraform.lock.hcl"

// ModuleFileName says whether a name of an inline source's file or a
// source ConfigMap's key is taken into the module: not a dot file (a
// mounted ConfigMap's ..data bookkeeping), but the lock file.
func ModuleFileName(name string) bool { return !strings.HasPrefix(name, ".") || name == LockFile }

// CheckStep is the step name of the check with that name.
func CheckStep(name string) string { return CheckPrefix + name }

// IsCheck says whether a step is one of spec.checks.
func IsCheck(step string) bool { return strings.HasPrefix(step, CheckPrefix) }

// ChildName is the name of a run's child: the run's type and number. A
// TerraformRun never gives two runs the same number, so a new run never
// meets an old run's child, while a racing or restarted reconcile computes
// the same name and adopts the child it created.
func ChildName(runName string, t infrav1.RunType, number int64) string {
	if t == infrav1.RunApply {
		return fmt.Sprintf("%s-%d", runName, number)
	}
	return fmt.Sprintf("%s-%s-%d", runName, t, number)
}

// StateSecretSuffix is the kubernetes backend's secret_suffix for a
// TerraformRun that does not set spec.backend.kubernetes.secretSuffix: its
// name, with "-state" added when the name ends in -<number> (db-1,
// cluster-2), which the backend refuses as a suffix. The state Secret is
// tfstate-<workspace>-<suffix>.
func StateSecretSuffix(runName string) string {
	if endsInNumber(runName) {
		return runName + "-state"
	}
	return runName
}

// endsInNumber says whether a name ends in -<digits>.
func endsInNumber(name string) bool {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || i == len(name)-1 {
		return false
	}
	for _, c := range name[i+1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// InputsConfigMapName is the one ConfigMap a child's inputs live in when
// they are too large to travel in the child: the run's vars and an inline
// source's files.
func InputsConfigMapName(child string) string { return child + "-inputs" }

// RawOutputsSecretName is the Secret the export step writes terraform's
// outputs to, owned by the child; the manager projects it into the user's
// outputs Secret.
func RawOutputsSecretName(child string) string { return child + "-tfoutputs" }

// CheckSecretName is the Secret a check step writes its output to.
func CheckSecretName(child, check string) string { return child + "-check-" + check }

// PlanSecretName is the Secret the plan step writes the readable plan to.
func PlanSecretName(child string) string { return child + "-plan" }

// OutputsSecretName is the user's outputs Secret.
func OutputsSecretName(run *infrav1.TerraformRun) string {
	if run.Spec.Outputs.SecretName != "" {
		return run.Spec.Outputs.SecretName
	}
	return run.Name + "-outputs"
}

// The environment of terraform steps that carries the install's provider
// mirror (engine.Providers): reserved from spec.terraform.env, as every
// OPR8R_ name is, so only the install's admin sets them.
const (
	EnvProviderMirror   = "OPR8R_PROVIDER_MIRROR"
	EnvProviderMirrorCA = "OPR8R_PROVIDER_MIRROR_CA"
)

// SharedPluginCacheDir is where the namespace's provider cache claim (the
// manager's --provider-cache-claim) is mounted, in the init step only: the
// init step copies what terraform linked from it into the run's workspace
// (step.Runner.PluginCacheInWorkspace is false for it).
const SharedPluginCacheDir = "/opr8r/provider-cache"

// The manager's state API (pkg/stateapi): the steps of a run reach their
// run's Secrets and Leases through it, with a projected service-account
// token whose audience names the run and the child, so the service
// accounts that run module code hold no right on the namespace's Secrets.
const (
	// EnvStateAPI is the state API's https URL in terraform steps'
	// environment; EnvStateAPICA the PEM of the certificate it serves.
	EnvStateAPI   = "OPR8R_STATE_API"
	EnvStateAPICA = "OPR8R_STATE_API_CA"
	// StateTokenDir holds the projected token; StateTokenFile is it.
	StateTokenDir  = "/opr8r/state-token"
	StateTokenFile = StateTokenDir + "/token"
	// StateKubeconfig is the kubeconfig the step writes for terraform's
	// kubernetes backend and for itself: the same path in every pod, as a
	// saved plan keeps the backend's configuration (config_path).
	StateKubeconfig = "/tmp/opr8r-state/kubeconfig"
	// StateAudiencePrefix begins the audience of a step's state token:
	// StateAudience.
	StateAudiencePrefix = "opr8r.io/state/"
)

// StateAudience is the audience of the state token of a step of child:
// the namespace, the TerraformRun and its uid, the child, and the step's
// role (runner, planner or preview: what it may do with the state). The
// manager builds it into the child's pods; nobody else can mint a
// runner's token, and no TerraformRun may ask for an audience that begins
// with StateAudiencePrefix (spec.runner.identityToken).
func StateAudience(namespace, run, uid, child, role string) string {
	return StateAudiencePrefix + namespace + "/" + run + "/" + uid + "/" + child + "/" + role
}

// StateAudienceParts is a StateAudience, split.
type StateAudienceParts struct {
	Namespace, Run, UID, Child, Role string
}

// ParseStateAudience splits a StateAudience; ok is false for any other
// string.
func ParseStateAudience(aud string) (StateAudienceParts, bool) {
	rest, found := strings.CutPrefix(aud, StateAudiencePrefix)
	if !found {
		return StateAudienceParts{}, false
	}
	p := strings.Split(rest, "/")
	if len(p) != 5 || slices.Contains(p, "") {
		return StateAudienceParts{}, false
	}
	return StateAudienceParts{Namespace: p[0], Run: p[1], UID: p[2], Child: p[3], Role: p[4]}, true
}

// IsChildOf says whether child is named as a child of run (ChildName):
// <run>-<n> or <run>-<type>-<n>.
func IsChildOf(child, run string) bool {
	rest, ok := strings.CutPrefix(child, run+"-")
	if !ok {
		return false
	}
	if t, n, ok := strings.Cut(rest, "-"); ok {
		switch infrav1.RunType(t) {
		case infrav1.RunDestroy, infrav1.RunDrift, infrav1.RunPlan:
		default:
			return false
		}
		if strings.Contains(n, "-") {
			return false
		}
		rest = n
	}
	if rest == "" {
		return false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// StateSecretName is the kubernetes backend's state Secret of a
// workspace and secret suffix; StateLeaseName its lock.
func StateSecretName(workspace, suffix string) string {
	if workspace == "" {
		workspace = "default"
	}
	return "tfstate-" + workspace + "-" + suffix
}

// StateLeaseName is the kubernetes backend's lock of that state.
func StateLeaseName(workspace, suffix string) string {
	return "lock-" + StateSecretName(workspace, suffix)
}

// KubernetesStateSuffix is the secret_suffix of a run's state in the
// kubernetes backend (spec.backend.kubernetes.secretSuffix, else
// StateSecretSuffix); ok is false when the run keeps its state in another
// backend (spec.backend.configSecretRef).
func KubernetesStateSuffix(run *infrav1.TerraformRun) (suffix string, ok bool) {
	be := run.Spec.Backend
	if be != nil && be.ConfigSecretRef != nil {
		return "", false
	}
	if be != nil && be.Kubernetes != nil && be.Kubernetes.SecretSuffix != "" {
		return be.Kubernetes.SecretSuffix, true
	}
	return StateSecretSuffix(run.Name), true
}
