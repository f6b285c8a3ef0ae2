// Package names holds the names every part of opr8r agrees on: the steps of
// a run, a run's child, and the objects that belong to one child. The
// manager, the step runner, the engines and the kubectl plugin all use them,
// so they live below every one of those packages and import only the API.
package names

import (
	"fmt"
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
