package pipeline

import (
	corev1 "k8s.io/api/core/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/results"
)

func (b *builder) resources() corev1.ResourceRequirements {
	if r := b.run.Spec.Runner.Resources; r != nil {
		return *r.DeepCopy()
	}
	return DefaultResources()
}

func (b *builder) stepBase(name string) Step {
	return Step{
		Name:            name,
		Image:           b.tfImage,
		Command:         []string{StepBinary},
		NeedsStepBinary: true,
		Resources:       b.resources(),
		SecurityContext: ContainerSecurityContext(),
	}
}

// terraformStep is a step that runs terraform in the module directory.
func (b *builder) terraformStep(name string, args ...string) Step {
	s := b.stepBase(name)
	s.Args = append([]string{name,
		"--module-dir=" + ModuleDir(b.run),
		"--workspace=" + b.run.Spec.Terraform.Workspace,
	}, args...)
	s.Args = append(s.Args, b.tfEnvArgs...)
	s.Args = append(s.Args, b.recordArgs()...)
	s.Args = append(s.Args, "--termination-log="+PhErrorFile)
	s.Env = append(terraformEnv(PluginCacheDir), b.tfEnv...)
	s.VolumeMounts = append(s.VolumeMounts, b.tfMounts...)
	return s
}

func terraformEnv(pluginCache string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "HOME", Value: TmpDir},
		{Name: "TF_IN_AUTOMATION", Value: "1"},
		{Name: "TF_INPUT", Value: "0"},
		{Name: "TF_PLUGIN_CACHE_DIR", Value: pluginCache},
		{Name: "CHECKPOINT_DISABLE", Value: "1"},
	}
}

func (b *builder) clone() Step {
	s := Step{
		Name:            names.StepClone,
		Image:           b.req.Config.StepImage,
		Command:         []string{ImageStepBinary},
		Resources:       b.resources(),
		SecurityContext: ContainerSecurityContext(),
		Results:         []string{ResultCommit},
		Env:             []corev1.EnvVar{{Name: "HOME", Value: TmpDir}},
	}
	s.Args = []string{names.StepClone}
	if g := b.run.Spec.Source.Git; g != nil {
		s.Args = append(s.Args, "--source=git", "--url="+g.URL, "--ref="+g.Ref)
		if b.credsMount != nil {
			s.Args = append(s.Args, "--credentials-dir="+GitCredsDir)
			s.VolumeMounts = append(s.VolumeMounts, *b.credsMount)
		}
	} else if o := b.run.Spec.Source.OCI; o != nil {
		s.Args = append(s.Args, "--source=oci", "--url="+o.URL, "--ref="+OCIRef(o))
		if o.Insecure {
			s.Args = append(s.Args, "--insecure")
		}
		if b.credsMount != nil {
			s.Args = append(s.Args, "--credentials-dir="+OCICredsDir)
			s.VolumeMounts = append(s.VolumeMounts, *b.credsMount)
		}
	} else if b.sourceMount == nil {
		s.Args = append(s.Args, "--source=inline")
	} else {
		s.Args = append(s.Args, "--source=dir", "--from="+SourceDir)
		s.VolumeMounts = append(s.VolumeMounts, *b.sourceMount)
	}
	s.Args = append(s.Args, "--dest="+CheckoutDir)
	if b.embedded != "" {
		s.Args = append(s.Args, "--inputs-env="+InputsEnv, "--vars-out="+EmbeddedVarsFile)
		s.Env = append(s.Env, corev1.EnvVar{Name: InputsEnv, Value: b.embedded})
	}
	s.Args = append(s.Args, PhResults)
	s.Args = append(s.Args, b.recordArgs()...)
	s.Args = append(s.Args, "--termination-log="+PhErrorFile)
	return s
}

func (b *builder) backendArgs() ([]string, []corev1.VolumeMount) {
	be := b.run.Spec.Backend
	if be != nil && be.ConfigSecretRef != nil {
		return []string{
			"--backend=" + string(be.ConfigSecretRef.Type),
			"--backend-config-file=" + BackendConfigFile,
		}, []corev1.VolumeMount{*b.backendMount}
	}
	suffix, _ := names.KubernetesStateSuffix(b.run)
	return []string{
		"--backend=kubernetes",
		"--backend-namespace=" + b.run.Namespace,
		"--backend-secret-suffix=" + suffix,
	}, nil
}

func (b *builder) init() Step {
	args, mounts := b.backendArgs()
	s := b.terraformStep(names.StepInit, args...)
	s.VolumeMounts = append(s.VolumeMounts, mounts...)
	b.useSharedCache(&s)
	return s
}

// restoreState pushes the states earlier runs kept (pkg/step
// RestoreState), in a pod of its own before the plan's, as the runner: it
// writes the state, which the planner only reads, and runs none of the
// module's code (terraform runs in a directory holding only the backend's
// configuration). It has the terraform steps' environment (the backend's
// credentials) and the backend's configuration.
func (b *builder) restoreState() Step {
	args, mounts := b.backendArgs()
	s := b.terraformStep(names.StepRestoreState, args...)
	s.VolumeMounts = append(s.VolumeMounts, mounts...)
	s.ServiceAccountName = b.run.Spec.Runner.ServiceAccountName
	return s
}

// recordArgs make a step keep its log (and the plan step the plans) as
// records of the TerraformRun, which owns them (pkg/records): they outlive
// the run's pods and engine object, and go with the TerraformRun.
func (b *builder) recordArgs() []string {
	return []string{"--records-run=" + b.run.Name, "--records-run-uid=" + string(b.run.UID), "--records-run-id=" + PhOwnerName}
}

func (b *builder) ownerArgs() []string {
	args := []string{"--owner-name=" + PhOwnerName, "--owner-uid=" + PhOwnerUID, "--owner-kind=" + PhOwnerKind, "--owner-api-version=" + PhOwnerAPI}
	if shard := Shard(b.run); shard != "" {
		// The Secrets the step writes carry the run's shard, so only that
		// shard's manager caches them.
		args = append(args, "--shard="+shard)
	}
	return args
}

func (b *builder) plan() Step {
	vars := VarsFile
	if b.embedded != "" {
		vars = EmbeddedVarsFile
	}
	args := []string{"--plan-file=" + PlanFile, "--vars-file=" + vars}
	args = append(args, b.varsFromArgs()...)
	args = append(args, b.depArgs...)
	if b.req.Type == infrav1.RunDestroy {
		args = append(args, "--destroy")
	}
	args = append(args, "--plan-secret="+names.PlanSecretName(b.req.Name), "--inputs-salt="+string(b.run.UID))
	if len(b.run.Spec.Checks) > 0 && HasChecks(b.req.Type) {
		args = append(args, "--check-input-dir="+CheckInputDir)
	}
	args = append(args, b.ownerArgs()...)
	args = append(args, PhResults)
	s := b.terraformStep(names.StepPlan, args...)
	if b.embedded == "" {
		s.VolumeMounts = append(s.VolumeMounts, corev1.VolumeMount{Name: "inputs", MountPath: InputsDir, ReadOnly: true})
	}
	s.VolumeMounts = append(s.VolumeMounts, b.varsMounts...)
	s.VolumeMounts = append(s.VolumeMounts, b.depMounts...)
	b.withBackendConfig(&s)
	s.Results = []string{ResultHasChanges, ResultDigest, ResultSummary, results.Inputs, ResultPlanTextDigest, ResultPlanJSONDigest, results.PlanSensitiveJSONDigest}
	return s
}

// varsFromArgs point the plan step at spec.terraform.varsFrom's mounts, in
// order (a later one wins): --secret-vars-dir for a Secret, whose values
// the step redacts, --vars-dir for a ConfigMap.
func (b *builder) varsFromArgs() []string {
	var args []string
	for i, m := range b.varsMounts {
		flag := "--vars-dir="
		if b.run.Spec.Terraform.VarsFrom[i].Kind == "Secret" {
			flag = "--secret-vars-dir="
		}
		args = append(args, flag+m.MountPath)
	}
	return args
}

// withBackendConfig gives a terraform step other than init and cleanup
// (which pass it to terraform) the backend configuration Secret, when the
// run has one, only so that the step redacts its values: init keeps them
// in the workspace's .terraform directory, where terraform reads them
// again in every later step, and may print them.
func (b *builder) withBackendConfig(s *Step) {
	if b.backendMount == nil {
		return
	}
	s.Args = append(s.Args, "--backend-config-file="+BackendConfigFile)
	s.VolumeMounts = append(s.VolumeMounts, *b.backendMount)
}

// checks are spec.checks' steps: each runs the user's command in the
// user's image through opr8r-step check, which keeps its output in a
// Secret and reports its last line when it fails. A check mounts the
// workspace read-only and its ConfigMap, and none of the Secrets the
// terraform steps mount.
func (b *builder) checks() []Step {
	if !HasChecks(b.req.Type) {
		return nil
	}
	var out []Step
	for _, c := range b.run.Spec.Checks {
		s := b.stepBase(names.CheckStep(c.Name))
		s.Image = c.Image
		s.WorkspaceReadOnly = true
		// A check runs an image the run chose, on the plan: not as the
		// runner, whose token may read the namespace's Secrets and whose
		// identity opens the cloud account.
		s.ServiceAccountName = b.req.Config.CheckServiceAccount
		s.Args = []string{"check", "--name=" + c.Name, "--module-dir=" + ModuleDir(b.run), "--plan-json=" + PlanJSONFile,
			"--output-secret=" + names.CheckSecretName(b.req.Name, c.Name)}
		s.Args = append(s.Args, b.ownerArgs()...)
		s.Args = append(s.Args, b.recordArgs()...)
		s.Args = append(s.Args, "--termination-log="+PhErrorFile, "--")
		s.Args = append(s.Args, c.Command...)
		s.Env = []corev1.EnvVar{
			{Name: "HOME", Value: TmpDir},
			{Name: "OPR8R_CHECK", Value: c.Name},
			{Name: "OPR8R_PLAN_JSON", Value: PlanJSONFile},
			{Name: "OPR8R_PLAN_TEXT", Value: PlanTextFile},
			{Name: "OPR8R_MODULE_DIR", Value: ModuleDir(b.run)},
		}
		for _, e := range c.Env {
			s.Env = append(s.Env, corev1.EnvVar{Name: e.Name, Value: e.Value})
		}
		if c.ConfigMapRef != nil {
			name := "check-" + c.Name
			b.addVolume(configMapVolume(name, c.ConfigMapRef.Name, false))
			s.VolumeMounts = []corev1.VolumeMount{{Name: name, MountPath: CheckConfigDir, ReadOnly: true}}
			s.Env = append(s.Env, corev1.EnvVar{Name: "OPR8R_CHECK_CONFIG", Value: CheckConfigDir})
		}
		out = append(out, s)
	}
	return out
}

// apply applies the saved plan, once the TerraformRun's status records
// its approval for this run (--await-approval: the engine's gate alone is
// not trusted). The plan file holds the variables' values, which terraform
// may print in an error: the apply step is given the varsFrom Secrets too,
// only to redact their values.
func (b *builder) apply() Step {
	s := b.terraformStep(names.StepApply, "--plan-file="+PlanFile, "--approved-digest="+PhApprovedDigest, "--await-approval")
	for i, m := range b.varsMounts {
		if b.run.Spec.Terraform.VarsFrom[i].Kind == "Secret" {
			s.Args = append(s.Args, "--secret-vars-dir="+m.MountPath)
			s.VolumeMounts = append(s.VolumeMounts, m)
		}
	}
	b.withBackendConfig(&s)
	return s
}

func (b *builder) export() Step {
	args := []string{"--outputs-secret=" + names.RawOutputsSecretName(b.req.Name)}
	args = append(args, b.ownerArgs()...)
	s := b.terraformStep(names.StepExport, args...)
	b.withBackendConfig(&s)
	return s
}

func (b *builder) cleanup() Step {
	args, mounts := b.backendArgs()
	// The owner's name is the prefix of its pods' host names: cleanup only
	// releases a state lock taken from one of this run's pods.
	args = append(args, "--lock-holder-prefix="+PhOwnerName)
	s := b.terraformStep(names.StepCleanup, args...)
	s.VolumeMounts = append(s.VolumeMounts, mounts...)
	return s
}
