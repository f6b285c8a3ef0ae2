package pipeline

import (
	"fmt"
	"maps"
	"path"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/results"
)

// collectVolumes declares every Secret and ConfigMap volume, with the mounts
// and arguments that point the step runner at them.
func (b *builder) collectVolumes() {
	b.collectSource()
	if be := b.run.Spec.Backend; be != nil && be.ConfigSecretRef != nil {
		b.addVolume(secretVolume("backend-config", be.ConfigSecretRef.Name, nil, false))
		b.backendMount = &corev1.VolumeMount{Name: "backend-config", MountPath: BackendDir, ReadOnly: true}
	}
	for i, vf := range b.run.Spec.Terraform.VarsFrom {
		name := fmt.Sprintf("vars-%d", i)
		if vf.Kind == "Secret" {
			b.addVolume(secretVolume(name, vf.Name, nil, vf.Optional))
		} else {
			b.addVolume(configMapVolume(name, vf.Name, vf.Optional))
		}
		b.varsMounts = append(b.varsMounts, corev1.VolumeMount{Name: name, MountPath: fmt.Sprintf("%s/%d", VarsFromDir, i), ReadOnly: true})
	}
	b.collectDependencies()
	b.collectEnvSecrets()
	b.collectFiles()
	b.collectIdentityToken()
	b.collectProviders()
	b.collectStateAPI()
	b.collectPreview()
}

// StateTokenVolume is the projected token of the state API.
const StateTokenVolume = "state-token"

// StateTokenSeconds is the state token's lifetime; the kubelet renews it
// before it ends, and the step reads the file again.
const StateTokenSeconds = 3600

// collectStateAPI gives every terraform step the manager's state API
// (pkg/stateapi): its URL and certificate, and a token whose audience
// names this child and its run, which is the only way the step's
// service account reaches a Secret or a Lease. The token is redacted
// from every log.
func (b *builder) collectStateAPI() {
	api := b.req.Config.StateAPI
	if api.URL == "" {
		return
	}
	// Every terraform step mounts the runner's token here; stateRoles
	// gives the steps before the gate (and a preview's) theirs.
	b.addVolume(stateTokenVolume(b.run, b.req.Name, "runner"))
	b.tfMounts = append(b.tfMounts, corev1.VolumeMount{Name: StateTokenVolume, MountPath: names.StateTokenDir, ReadOnly: true})
	b.tfEnvArgs = append(b.tfEnvArgs, "--secret-files="+names.StateTokenDir)
	b.tfEnv = append(b.tfEnv, corev1.EnvVar{Name: names.EnvStateAPI, Value: api.URL}, corev1.EnvVar{Name: names.EnvStateAPICA, Value: api.CA})
}

// stateTokenVolume is the state token of child's steps of role, in a
// volume named after the role (StateTokenVolume for the runner's).
func stateTokenVolume(run *infrav1.TerraformRun, child, role string) corev1.Volume {
	name := StateTokenVolume
	if role != "runner" {
		name += "-" + role
	}
	aud := names.StateAudience(run.Namespace, run.Name, string(run.UID), child, role)
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To[int32](0o440),
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: aud, ExpirationSeconds: ptr.To[int64](StateTokenSeconds), Path: path.Base(names.StateTokenFile),
		}}},
	}}}
}

// stateRoles gives each step the state token of its role, once the
// steps' identities are known: a preview's steps the preview's (read the
// state, no lock), the steps that run as the plan's own account the
// planner's (read, lock, no change), the others the runner's. The role is
// fixed in the child when the manager makes it; a later change of the
// TerraformRun's spec changes no running step's rights.
func stateRoles(p *Pipeline, run *infrav1.TerraformRun, req engine.Request) {
	if req.Config.StateAPI.URL == "" {
		return
	}
	planSA, runner := run.Spec.Runner.PlanServiceAccountName, run.Spec.Runner.ServiceAccountName
	roleOf := func(s Step) string {
		switch {
		case req.Preview:
			return "preview"
		case planSA != "" && planSA != runner && s.ServiceAccountName == planSA:
			return "planner"
		}
		return "runner"
	}
	used := map[string]bool{}
	retag := func(s *Step) {
		for i, m := range s.VolumeMounts {
			if m.Name != StateTokenVolume {
				continue
			}
			if role := roleOf(*s); role != "runner" {
				s.VolumeMounts[i].Name = StateTokenVolume + "-" + role
				used[role] = true
			} else {
				used["runner"] = true
			}
		}
	}
	for i := range p.Steps {
		retag(&p.Steps[i])
	}
	retag(&p.Cleanup)
	var vols []corev1.Volume
	for _, v := range p.Volumes {
		if v.Name != StateTokenVolume || used["runner"] {
			vols = append(vols, v)
		}
	}
	for _, role := range []string{"planner", "preview"} {
		if used[role] {
			vols = append(vols, stateTokenVolume(run, req.Name, role))
		}
	}
	p.Volumes = vols
}

// collectPreview makes a preview's terraform steps read the tracked
// run's state without its lock: a pull request's plan never holds the
// lock a real apply waits for.
func (b *builder) collectPreview() {
	if b.req.Preview {
		b.tfEnvArgs = append(b.tfEnvArgs, "--no-state-lock")
	}
}

// ProviderCacheVolume is the shared plugin cache's volume.
const ProviderCacheVolume = "provider-cache"

// collectProviders points terraform steps at the install's provider
// mirror and mounts the namespace's shared plugin cache in the init step,
// and in no other: the plan, apply and later steps run module code
// (external data sources, local-exec, providers), which could otherwise
// change a package in the cache after another run's terraform verified it
// and before it executes it. Init copies what terraform linked from the
// cache into the run's workspace and checks each copy against the lock
// file's h1 checksums (step.Runner.Init); later steps execute those
// copies. Terraform and OpenTofu take a package from the shared cache only
// when the module's lock file lists its checksum (opr8r never sets
// TF_PLUGIN_CACHE_MAY_BREAK_DEPENDENCY_LOCK_FILE, which would let a module
// without one take whatever package the cache holds); otherwise they
// download and check it against the hashes the mirror or the registry
// publishes. Checks never mount the cache: they run images a TerraformRun
// chose; the admission policy opr8r-provider-cache lets no other pod
// mount it.
func (b *builder) collectProviders() {
	p := b.req.Config.Providers
	if p.Mirror != "" {
		b.tfEnv = append(b.tfEnv, corev1.EnvVar{Name: names.EnvProviderMirror, Value: p.Mirror})
	}
	if p.MirrorCA != "" {
		b.tfEnv = append(b.tfEnv, corev1.EnvVar{Name: names.EnvProviderMirrorCA, Value: p.MirrorCA})
	}
	if p.CacheClaim == "" {
		return
	}
	b.addVolume(corev1.Volume{Name: ProviderCacheVolume, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: p.CacheClaim}}})
	b.cacheMount = &corev1.VolumeMount{Name: ProviderCacheVolume, MountPath: SharedPluginCacheDir}
}

// useSharedCache makes s (the init step) use the namespace's shared plugin
// cache, when the install has one; every other terraform step keeps the
// run's own cache in its workspace (PluginCacheDir), which only init would
// fill.
func (b *builder) useSharedCache(s *Step) {
	if b.cacheMount == nil {
		return
	}
	s.VolumeMounts = append(s.VolumeMounts, *b.cacheMount)
	for i := range s.Env {
		if s.Env[i].Name == "TF_PLUGIN_CACHE_DIR" {
			s.Env[i].Value = SharedPluginCacheDir
		}
	}
}

// collectIdentityToken projects spec.runner.identityToken into every
// terraform step (checks never get it), registers the file for redaction
// and exports its path where asked.
func (b *builder) collectIdentityToken() {
	it := b.run.Spec.Runner.IdentityToken
	if it == nil {
		return
	}
	b.addVolume(corev1.Volume{Name: "identity-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To[int32](0o440),
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: it.Audience, ExpirationSeconds: it.ExpirationSeconds, Path: path.Base(IdentityTokenFile),
		}}},
	}}})
	b.tfMounts = append(b.tfMounts, corev1.VolumeMount{Name: "identity-token", MountPath: IdentityTokenDir, ReadOnly: true})
	b.tfEnvArgs = append(b.tfEnvArgs, "--secret-files="+IdentityTokenDir)
	if it.EnvName != "" {
		b.tfEnv = append(b.tfEnv, corev1.EnvVar{Name: it.EnvName, Value: IdentityTokenFile})
	}
}

// collectSource mounts what the clone step reads: the source's credentials,
// or the ConfigMap a source (or inputs too large to travel in the child)
// lives in.
func (b *builder) collectSource() {
	src := b.run.Spec.Source
	switch {
	case src.Git != nil && src.Git.CredentialsSecretRef != nil:
		b.addVolume(secretVolume("git-credentials", src.Git.CredentialsSecretRef.Name, nil, false))
		b.credsMount = &corev1.VolumeMount{Name: "git-credentials", MountPath: GitCredsDir, ReadOnly: true}
	case src.OCI != nil && src.OCI.CredentialsSecretRef != nil:
		b.addVolume(secretVolume("oci-credentials", src.OCI.CredentialsSecretRef.Name, nil, false))
		b.credsMount = &corev1.VolumeMount{Name: "oci-credentials", MountPath: OCICredsDir, ReadOnly: true}
	case src.Inline != nil && b.embedded != "":
		// The clone step writes the files from its InputsEnv.
	case src.Inline != nil:
		files := slices.Sorted(maps.Keys(src.Inline.Files))
		b.addVolume(configMapVolume("source", names.InputsConfigMapName(b.req.Name), false, keyItems(files, files)...))
		b.sourceMount = &corev1.VolumeMount{Name: "source", MountPath: SourceDir, ReadOnly: true}
	case src.ConfigMapRef != nil:
		b.addVolume(configMapVolume("source", src.ConfigMapRef.Name, false))
		b.sourceMount = &corev1.VolumeMount{Name: "source", MountPath: SourceDir, ReadOnly: true}
	}
	if b.embedded == "" {
		b.addVolume(configMapVolume("inputs", names.InputsConfigMapName(b.req.Name), false, keyItems([]string{VarsKey}, []string{path.Base(VarsFile)})...))
	}
}

// collectEnvSecrets mounts spec.terraform.env's Secrets, one volume per
// Secret holding only the keys used, and tells the step runner which file
// each variable is read from.
func (b *builder) collectEnvSecrets() {
	env := b.run.Spec.Terraform.Env
	keysBySecret := map[string][]string{}
	var secretOrder []string
	for _, e := range env {
		s, k := e.SecretKeyRef.Name, e.SecretKeyRef.Key
		if _, seen := keysBySecret[s]; !seen {
			secretOrder = append(secretOrder, s)
		}
		if !slices.Contains(keysBySecret[s], k) {
			keysBySecret[s] = append(keysBySecret[s], k)
		}
	}
	for i, s := range secretOrder {
		name := fmt.Sprintf("env-%d", i)
		b.addVolume(secretVolume(name, s, keysBySecret[s], false))
		b.tfMounts = append(b.tfMounts, corev1.VolumeMount{Name: name, MountPath: fmt.Sprintf("%s/%d", EnvSecretsDir, i), ReadOnly: true})
	}
	for _, e := range env {
		i := slices.Index(secretOrder, e.SecretKeyRef.Name)
		b.tfEnvArgs = append(b.tfEnvArgs, fmt.Sprintf("--env-file=%s=%s/%d/%s", e.Name, EnvSecretsDir, i, e.SecretKeyRef.Key))
	}
}

// collectFiles mounts spec.terraform.files, each Secret at its path, tells
// every terraform step to redact the files' content (--secret-files), and
// exports the path in an environment variable where asked.
func (b *builder) collectFiles() {
	for i, f := range b.run.Spec.Terraform.Files {
		name := fmt.Sprintf("files-%d", i)
		b.addVolume(secretVolume(name, f.SecretName, nil, false))
		b.tfMounts = append(b.tfMounts, corev1.VolumeMount{Name: name, MountPath: f.MountPath, ReadOnly: true})
		b.tfEnvArgs = append(b.tfEnvArgs, "--secret-files="+f.MountPath)
		if f.EnvName != "" {
			p := f.MountPath
			if f.Key != "" {
				p = path.Join(p, f.Key)
			}
			b.tfEnv = append(b.tfEnv, corev1.EnvVar{Name: f.EnvName, Value: p})
		}
	}
}

// collectDependencies mounts, for each dependency in the run's namespace,
// the keys of its outputs Secret that the run takes, each as a file named
// after its variable; a dependency in another namespace is read by the
// step through the API. The volumes are optional: a Secret gone by the
// time the pod starts (a destroy after the dependency was force-deleted)
// is the step's to report, not a pod that never starts.
func (b *builder) collectDependencies() {
	for i, d := range b.req.Dependencies {
		if len(d.Vars) == 0 {
			continue
		}
		run := d.Name
		local := d.Namespace == "" || d.Namespace == b.run.Namespace
		if !local {
			run = d.Namespace + "/" + d.Name
		}
		name := fmt.Sprintf("dep-%d", i)
		dir := fmt.Sprintf("%s/%d", DependenciesDir, i)
		var items []corev1.KeyToPath
		for _, v := range d.Vars {
			arg := results.DependencyVar{Variable: v.Variable, Run: run, Output: v.Output, Sensitive: v.Sensitive}
			if local {
				arg.File = dir + "/" + v.Variable
				items = append(items, corev1.KeyToPath{Key: v.Output, Path: v.Variable})
			} else {
				arg.Secret = d.Namespace + "/" + d.SecretName
			}
			b.depArgs = append(b.depArgs, "--dependency-var="+arg.String())
		}
		if local {
			src := &corev1.SecretVolumeSource{SecretName: d.SecretName, DefaultMode: ptr.To[int32](0o440), Optional: ptr.To(true), Items: items}
			b.addVolume(corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: src}})
			b.depMounts = append(b.depMounts, corev1.VolumeMount{Name: name, MountPath: dir, ReadOnly: true})
		}
	}
}

func secretVolume(name, secret string, keys []string, optional bool) corev1.Volume {
	src := &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: ptr.To[int32](0o440)}
	if optional {
		src.Optional = ptr.To(true)
	}
	for _, k := range keys {
		src.Items = append(src.Items, corev1.KeyToPath{Key: k, Path: k})
	}
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: src}}
}

// configMapVolume mounts a ConfigMap; with items, only those keys.
func configMapVolume(name, cm string, optional bool, items ...corev1.KeyToPath) corev1.Volume {
	src := &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Items: items}
	if optional {
		src.Optional = ptr.To(true)
	}
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: src}}
}

// keyItems maps keys[i] to the file paths[i].
func keyItems(keys, paths []string) []corev1.KeyToPath {
	out := make([]corev1.KeyToPath, len(keys))
	for i := range keys {
		out[i] = corev1.KeyToPath{Key: keys[i], Path: paths[i]}
	}
	return out
}

// ScratchVolumes are the per-pod volumes every step mounts: /tmp, and the
// directory of the step binary: the step image itself, read-only, when the
// pipeline mounts it as an image volume (StepBinaryImage), else an
// emptyDir InstallStepContainer copies it into.
func (p *Pipeline) ScratchVolumes() []corev1.Volume {
	bin := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	if p.StepBinaryImage != "" {
		bin = corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: p.StepBinaryImage, PullPolicy: p.ImagePullPolicy}}
	}
	return []corev1.Volume{
		{Name: TmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: StepBinVolume, VolumeSource: bin},
	}
}

// InstallsStepBinary says whether a step's pod needs InstallStepContainer
// before it: the step runs opr8r-step in an image that lacks it, and the
// pipeline does not mount the step image.
func (p *Pipeline) InstallsStepBinary(s Step) bool {
	return s.NeedsStepBinary && p.StepBinaryImage == ""
}

// UsedVolumes returns the pipeline's Secret and ConfigMap volumes that the
// given steps mount, so a pod holds no credential it does not use.
func (p *Pipeline) UsedVolumes(steps ...Step) []corev1.Volume {
	used := map[string]bool{}
	for _, s := range steps {
		for _, m := range s.VolumeMounts {
			used[m.Name] = true
		}
	}
	var out []corev1.Volume
	for _, v := range p.Volumes {
		if used[v.Name] {
			out = append(out, v)
		}
	}
	return out
}
