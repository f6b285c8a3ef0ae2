// Package pipeline describes, independently of any engine, what one run of a
// TerraformRun executes: its steps, their opr8r-step arguments, the volumes
// they mount and the small results they produce. Engines (engines/argo,
// engines/tekton) only wire these steps together in their own syntax.
//
// Nothing here reads a secret value: secrets are referenced by name and
// mounted as files, which the step runner reads.
package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/inputs"
	"github.com/opr8r/opr8r/pkg/results"
)

// Step names, shared by every engine and shown in status.
const (
	StepClone   = "clone"
	StepInit    = "init"
	StepPlan    = "plan"
	StepApprove = "approve"
	StepApply   = "apply"
	StepExport  = "export-outputs"
	StepCleanup = "cleanup"
	// CheckPrefix begins the step name of each of spec.checks.
	CheckPrefix = "check-"
)

// CheckStep is the step name of the check with that name.
func CheckStep(name string) string { return CheckPrefix + name }

// IsCheck says whether a step is one of spec.checks.
func IsCheck(step string) bool { return strings.HasPrefix(step, CheckPrefix) }

// Result names written by steps (the wire format is pkg/results).
const (
	ResultCommit     = results.Commit
	ResultHasChanges = results.HasChanges
	ResultDigest     = results.Digest
	ResultSummary    = results.Summary
)

// Paths inside step containers.
const (
	WorkspaceDir    = "/workspace"
	CheckoutDir     = WorkspaceDir + "/src"
	PluginCacheDir  = WorkspaceDir + "/.plugin-cache"
	PlanFile        = WorkspaceDir + "/tfplan"
	TmpDir          = "/tmp"
	StepBinDir      = "/opr8r/bin"
	StepBinary      = StepBinDir + "/opr8r-step"
	ImageStepBinary = "/opr8r-step"
	SourceDir       = "/opr8r/source"
	InputsDir       = "/opr8r/inputs"
	VarsFile        = InputsDir + "/vars.json"
	// EmbeddedVarsFile is where the clone step writes vars.json when the
	// inputs travel in the child (InputsEnv): in the workspace, which the
	// plan step shares with it.
	EmbeddedVarsFile = WorkspaceDir + "/.opr8r/vars.json"
	GitCredsDir      = "/opr8r/secrets/git"
	OCICredsDir      = "/opr8r/secrets/oci"
	BackendDir       = "/opr8r/secrets/backend"
	VarsFromDir      = "/opr8r/vars"
	EnvSecretsDir    = "/opr8r/secrets/env"
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

// Pipeline is one run, described independently of any engine.
type Pipeline struct {
	// Type is apply or destroy.
	Type infrav1.RunType
	// Name is the child's name.
	Name string
	// Namespace is the run's namespace.
	Namespace string
	// Steps in order; the approve step is a gate, not a container.
	Steps []Step
	// Cleanup always runs at the end (Argo onExit, Tekton finally).
	Cleanup Step
	// ManualApproval is true when the pipeline has an approval gate.
	ManualApproval bool
	// Volumes are the Secret and ConfigMap volumes that steps mount.
	Volumes []corev1.Volume
	// ServiceAccountName of the step pods.
	ServiceAccountName string
	// WorkspaceSize and StorageClassName of the shared workspace volume.
	WorkspaceSize    resource.Quantity
	StorageClassName *string
	// NodeSelector and Tolerations of the step pods.
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	// PodSecurityContext of the step pods.
	PodSecurityContext *corev1.PodSecurityContext
	// Labels go on the child and every pod.
	Labels map[string]string
	// ImagePullPolicy of every container.
	ImagePullPolicy corev1.PullPolicy
}

// Step is one container step, or the approval gate.
type Step struct {
	// Name is the step's name.
	Name string
	// Gate is true for the approval gate, which runs no container.
	Gate bool
	// Image is the container image.
	Image string
	// Command is the entrypoint.
	Command []string
	// Args are the arguments, which may contain placeholders.
	Args []string
	// Env holds non-secret environment variables.
	Env []corev1.EnvVar
	// VolumeMounts of Secret and ConfigMap volumes (the workspace, tmp and
	// step-binary volumes are added by engines).
	VolumeMounts []corev1.VolumeMount
	// WorkspaceReadOnly mounts the shared workspace read-only (checks).
	WorkspaceReadOnly bool `json:",omitempty"`
	// Results are the names of the small results the step writes.
	Results []string
	// NeedsStepBinary is true when the image lacks opr8r-step, so engines
	// install it from the step image into the StepBinVolume first.
	NeedsStepBinary bool
	// Resources of the container.
	Resources corev1.ResourceRequirements
	// SecurityContext of the container.
	SecurityContext *corev1.SecurityContext
}

// Names of objects that belong to one child.

// InputsConfigMapName is the one ConfigMap a child's inputs live in: the
// run's vars (key VarsKey) and an inline source's files (one key per file,
// named as the file).
func InputsConfigMapName(child string) string { return child + "-inputs" }

// InputsEnv is the clone step's environment variable that carries the
// run's inputs (pkg/inputs) when they are small enough to travel in the
// child (EmbeddedInputs).
const InputsEnv = "OPR8R_INPUTS"

// MaxEmbeddedInputs is the largest encoded size of inputs that travel in
// the child instead of a ConfigMap. Every copy of the child's step carries
// them: the child itself, the engine's copy of its spec in status (Tekton's
// PipelineRun and TaskRun), the pod, and on Argo the executor's
// ARGO_TEMPLATE variable, which holds the whole template in one environment
// string, and Linux refuses to start a process with any one environment
// string over 128 KiB. At 16 KiB (gzip shrinks Terraform's text four to
// six times: 60-100 KiB of inline module and vars) a run stores at most
// about 80 KiB more across its objects, far from etcd's 1.5 MiB per object,
// and the step's environment stays far from the kernel's limit. Past it,
// the inputs go in a ConfigMap, one write more.
const MaxEmbeddedInputs = 16 << 10

// maxConfigMapData is the API server's limit on a ConfigMap's data: keys
// and values together.
const maxConfigMapData = 1 << 20

// VarsKey is the key of vars.json in the inputs ConfigMap. Its leading dot
// keeps it apart from inline file names, which cannot start with one; each
// volume selects its own keys with items.
const VarsKey = ".vars.json"

// RawOutputsSecretName is the Secret the export step writes terraform's
// outputs to, owned by the child; the operator projects it.
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

// Defaults returns a copy of run with every default filled in: the manager's
// defaults for engine, image and service account, and the API's defaults for
// objects that did not go through the API server (kubectl tfrun render).
func Defaults(run *infrav1.TerraformRun, defaultEngine infrav1.EngineName, cfg engine.Config) *infrav1.TerraformRun {
	r := run.DeepCopy()
	s := &r.Spec
	if s.Engine == "" {
		s.Engine = defaultEngine
	}
	if s.Terraform.Image == "" {
		s.Terraform.Image = cfg.TerraformImage
	}
	if s.Terraform.Workspace == "" {
		s.Terraform.Workspace = "default"
	}
	if s.Source.Git != nil && s.Source.Git.Ref == "" {
		s.Source.Git.Ref = "main"
	}
	if s.Approval.Mode == "" {
		s.Approval.Mode = infrav1.ApprovalManual
	}
	if s.DeletionPolicy == "" {
		s.DeletionPolicy = infrav1.DeletionDestroy
	}
	if s.Runner.ServiceAccountName == "" {
		s.Runner.ServiceAccountName = cfg.RunnerServiceAccount
	}
	if s.Runner.Workspace.Size == nil {
		q := resource.MustParse("1Gi")
		s.Runner.Workspace.Size = &q
	}
	if s.History.KeepFinished == nil {
		s.History.KeepFinished = ptr.To[int32](3)
	}
	if s.History.KeepRecords == nil {
		s.History.KeepRecords = ptr.To[int32](10)
	}
	if s.Outputs.SecretName == "" {
		s.Outputs.SecretName = r.Name + "-outputs"
	}
	return r
}

// SpecHash hashes what a run executes. Approval decisions, the approval
// timeout, suspend, the deletion policy and history settings are left out:
// changing them never starts a new run. The run must have defaults applied.
func SpecHash(run *infrav1.TerraformRun) string {
	s := run.Spec
	hashed := struct {
		Engine    infrav1.EngineName
		Source    infrav1.Source
		Terraform infrav1.TerraformSpec
		Backend   *infrav1.BackendSpec
		Mode      infrav1.ApprovalMode
		Outputs   infrav1.OutputsSpec
		Runner    infrav1.RunnerSpec
		PlanOnly  bool                 `json:",omitempty"`
		Checks    []infrav1.Check      `json:",omitempty"`
		DependsOn []infrav1.Dependency `json:",omitempty"`
	}{s.Engine, s.Source, s.Terraform, s.Backend, s.Approval.Mode, s.Outputs, s.Runner, s.PlanOnly, s.Checks, s.DependsOn}
	b, err := json.Marshal(hashed)
	if err != nil {
		// Marshalling plain API types cannot fail; a panic here is a bug.
		panic(fmt.Sprintf("hashing spec: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

var (
	fileNameRE   = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,252}$`)
	outputNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,127}$`)
)

// Validate checks what the CRD schema cannot: map keys, which OpenAPI gives
// no schema and CEL in a CRD cannot check within its cost budget. The
// admission policy opr8r-spec-rules (config/policy/spec-rules.yaml) refuses
// the same at admission; this is the manager's own check for a cluster
// without it or an object stored before it. The reconciler reports its
// error as a Stalled condition before anything is created.
func Validate(run *infrav1.TerraformRun) error {
	if in := run.Spec.Source.Inline; in != nil {
		for _, k := range SortedKeys(in.Files) {
			if !fileNameRE.MatchString(k) {
				return fmt.Errorf("spec.source.inline.files: %q is not a plain file name (letters, digits, '.', '_', '-'; not starting with '.'; no directories)", k)
			}
		}
	}
	for _, k := range SortedKeys(run.Spec.Outputs.Rename) {
		if !outputNameRE.MatchString(k) {
			return fmt.Errorf("spec.outputs.rename: %q is not a Terraform output name", k)
		}
	}
	seen := map[infrav1.SecretDataKey]string{}
	for _, k := range SortedKeys(run.Spec.Outputs.Rename) {
		to := run.Spec.Outputs.Rename[k]
		if other, dup := seen[to]; dup {
			return fmt.Errorf("spec.outputs.rename: outputs %q and %q are both renamed to %q", other, k, to)
		}
		seen[to] = k
	}
	return nil
}

// OCIRef is what the clone step fetches of an OCI source: its digest, else
// its tag, else latest.
func OCIRef(o *infrav1.OCISource) string {
	switch {
	case o.Digest != "":
		return o.Digest
	case o.Tag != "":
		return o.Tag
	}
	return "latest"
}

// ModuleDir is the Terraform module's directory in the workspace.
func ModuleDir(run *infrav1.TerraformRun) string {
	if g := run.Spec.Source.Git; g != nil && g.Path != "" {
		return path.Join(CheckoutDir, path.Clean(g.Path))
	}
	if o := run.Spec.Source.OCI; o != nil && o.Path != "" {
		return path.Join(CheckoutDir, path.Clean(o.Path))
	}
	return CheckoutDir
}

// Build describes the pipeline of one run. The run must have defaults applied.
func Build(req engine.Request) (*Pipeline, error) {
	run := req.Run
	if run.Spec.Source.Git == nil && run.Spec.Source.OCI == nil && run.Spec.Source.Inline == nil && run.Spec.Source.ConfigMapRef == nil {
		return nil, fmt.Errorf("spec.source: one of git, oci, inline or configMapRef is required")
	}
	if req.Config.StepImage == "" {
		return nil, fmt.Errorf("the manager has no step image configured (--step-image)")
	}
	if err := Validate(run); err != nil {
		return nil, err
	}
	b := builder{req: req, run: run, tfImage: run.Spec.Terraform.Image}
	if b.tfImage == "" {
		return nil, fmt.Errorf("spec.terraform.image is empty and the manager has no --terraform-image")
	}
	enc, embedded, err := EmbeddedInputs(run)
	if err != nil {
		return nil, err
	}
	if embedded {
		b.embedded = enc
	}
	b.collectVolumes()

	p := &Pipeline{
		Type:               req.Type,
		Name:               req.Name,
		Namespace:          run.Namespace,
		ManualApproval:     req.Type == infrav1.RunApply && run.Spec.Approval.Mode != infrav1.ApprovalAuto,
		Volumes:            b.volumes,
		ServiceAccountName: run.Spec.Runner.ServiceAccountName,
		WorkspaceSize:      *run.Spec.Runner.Workspace.Size,
		StorageClassName:   run.Spec.Runner.Workspace.StorageClassName,
		NodeSelector:       run.Spec.Runner.NodeSelector,
		Tolerations:        run.Spec.Runner.Tolerations,
		PodSecurityContext: podSecurityContext(run.Spec.Runner.SecurityContext),
		Labels:             ChildLabels(run, req.Type, req.SpecHash, req.Number),
		ImagePullPolicy:    corev1.PullPolicy(req.Config.ImagePullPolicy),
	}
	p.Steps = append(p.Steps, b.clone(), b.init(), b.plan())
	p.Steps = append(p.Steps, b.checks()...)
	p.Volumes = b.volumes // with the checks' ConfigMaps
	if PlanOnly(req.Type) {
		p.Cleanup = b.cleanup()
		return p, nil
	}
	if p.ManualApproval {
		p.Steps = append(p.Steps, Step{Name: StepApprove, Gate: true})
	}
	p.Steps = append(p.Steps, b.apply())
	if req.Type == infrav1.RunApply {
		p.Steps = append(p.Steps, b.export())
	}
	p.Cleanup = b.cleanup()
	return p, nil
}

// HasChecks says whether runs of a type run spec.checks: apply runs and
// the runs of a planOnly TerraformRun. Drift checks compare, they do not
// propose; a destroy run follows a deletion, which a policy on the plan
// should not be able to block.
func HasChecks(t infrav1.RunType) bool {
	return t == infrav1.RunApply || t == infrav1.RunPlan
}

// Checks returns the pipeline's check steps, in order.
func (p *Pipeline) Checks() []Step {
	var out []Step
	for _, s := range p.Steps {
		if IsCheck(s.Name) {
			out = append(out, s)
		}
	}
	return out
}

// PlanOnly says whether runs of a type stop after the plan: scheduled
// checks and the runs of a planOnly TerraformRun have no gate, no apply
// and no export.
func PlanOnly(t infrav1.RunType) bool {
	return t == infrav1.RunDrift || t == infrav1.RunPlan
}

// ResultError is the result a failing step's summary is written to where
// the engine has no termination message of its own (Tekton).
const ResultError = results.Error

// ChildLabels are the labels of a child and its pods.
func ChildLabels(run *infrav1.TerraformRun, t infrav1.RunType, specHash string, number int64) map[string]string {
	l := map[string]string{
		infrav1.ManagedByLabel: infrav1.ManagedByValue,
		infrav1.RunNameLabel:   run.Name,
		infrav1.RunTypeLabel:   string(t),
		infrav1.SpecHashLabel:  specHash,
		infrav1.RunNumberLabel: strconv.FormatInt(number, 10),
	}
	if shard := Shard(run); shard != "" {
		l[infrav1.ShardLabel] = shard
	}
	return l
}

// Shard is the shard a run belongs to (its sharding.opr8r.io/key label),
// or "" for none.
func Shard(run *infrav1.TerraformRun) string { return run.Labels[infrav1.ShardLabel] }

// PodSecurityContext is the hardened pod security context of step pods.
func PodSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](65532),
		RunAsGroup:     ptr.To[int64](65532),
		FSGroup:        ptr.To[int64](65532),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// podSecurityContext applies the run's chosen user and groups to the
// hardened pod security context.
func podSecurityContext(sc *infrav1.RunnerSecurityContext) *corev1.PodSecurityContext {
	p := PodSecurityContext()
	if sc == nil {
		return p
	}
	if sc.RunAsUser != nil {
		p.RunAsUser = sc.RunAsUser
	}
	if sc.RunAsGroup != nil {
		p.RunAsGroup = sc.RunAsGroup
	}
	if sc.FSGroup != nil {
		p.FSGroup = sc.FSGroup
	}
	return p
}

// ContainerSecurityContext is the hardened security context of every step.
func ContainerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// DefaultResources are the step containers' requests and limits when
// spec.runner.resources is unset.
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("256Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("2"),
			corev1.ResourceMemory: resource.MustParse("2Gi"),
		},
	}
}

// runInputs returns the run's inputs: vars.json, a JSON object of
// spec.terraform.vars, and the inline source's files.
func runInputs(run *infrav1.TerraformRun) (inputs.Inputs, error) {
	vars := map[string]json.RawMessage{}
	for _, v := range run.Spec.Terraform.Vars {
		vars[v.Name] = json.RawMessage(v.Value.Raw)
	}
	vb, err := json.Marshal(vars)
	if err != nil {
		return inputs.Inputs{}, fmt.Errorf("spec.terraform.vars: %w", err)
	}
	in := inputs.Inputs{Vars: string(vb)}
	if src := run.Spec.Source.Inline; src != nil {
		in.Files = make(map[string]string, len(src.Files))
		for k, v := range src.Files {
			in.Files[k] = string(v)
		}
	}
	return in, nil
}

// EmbeddedInputs returns the run's inputs encoded for the clone step's
// InputsEnv, and whether they travel in the child: when their encoded size
// is at most MaxEmbeddedInputs and a ConfigMap could hold them. Then
// starting a run writes no ConfigMap.
func EmbeddedInputs(run *infrav1.TerraformRun) (string, bool, error) {
	in, err := runInputs(run)
	if err != nil {
		return "", false, err
	}
	enc, err := inputs.Encode(in)
	if err != nil {
		return "", false, fmt.Errorf("encoding the inputs: %w", err)
	}
	// Inputs a ConfigMap could not hold are never embedded, however well
	// they compress: the rule a user meets stays one (under 1 MiB
	// together), with the ConfigMap's clear refusal.
	raw := len(VarsKey) + len(in.Vars)
	for k, v := range in.Files {
		raw += len(k) + len(v)
	}
	return enc, len(enc) <= MaxEmbeddedInputs && raw <= maxConfigMapData, nil
}

// InputObjects returns the ConfigMaps a child needs besides user objects:
// none when the inputs travel in the child (EmbeddedInputs), else one,
// holding vars.json and the inline source's files. The reconciler creates
// it owned by the child, so it goes away with it.
func InputObjects(run *infrav1.TerraformRun, child string) ([]*corev1.ConfigMap, error) {
	if _, embedded, err := EmbeddedInputs(run); err != nil || embedded {
		return nil, err
	}
	in, err := runInputs(run)
	if err != nil {
		return nil, err
	}
	data := map[string]string{VarsKey: in.Vars}
	for k, v := range in.Files {
		if k == VarsKey {
			return nil, fmt.Errorf("spec.source.inline.files: %q is reserved", k)
		}
		data[k] = v
	}
	labels := map[string]string{
		infrav1.ManagedByLabel: infrav1.ManagedByValue,
		infrav1.RunNameLabel:   run.Name,
		infrav1.ComponentLabel: infrav1.ComponentInputs,
	}
	return []*corev1.ConfigMap{{
		ObjectMeta: metav1.ObjectMeta{Name: InputsConfigMapName(child), Namespace: run.Namespace, Labels: labels},
		Data:       data,
		Immutable:  ptr.To(true),
	}}, nil
}

type builder struct {
	req     engine.Request
	run     *infrav1.TerraformRun
	tfImage string
	volumes []corev1.Volume
	// embedded holds the encoded inputs when they travel in the child
	// (EmbeddedInputs); empty when they are in the inputs ConfigMap.
	embedded string

	sourceMount  *corev1.VolumeMount
	credsMount   *corev1.VolumeMount
	backendMount *corev1.VolumeMount
	varsMounts   []corev1.VolumeMount
	depMounts    []corev1.VolumeMount
	depArgs      []string
	tfMounts     []corev1.VolumeMount // env and file secrets for every terraform step
	tfEnvArgs    []string
	tfEnv        []corev1.EnvVar
}

func (b *builder) addVolume(v corev1.Volume) { b.volumes = append(b.volumes, v) }

// collectVolumes declares every Secret and ConfigMap volume, with the mounts
// and arguments that point the step runner at them.
func (b *builder) collectVolumes() {
	spec := b.run.Spec
	switch {
	case spec.Source.Git != nil && spec.Source.Git.CredentialsSecretRef != nil:
		b.addVolume(secretVolume("git-credentials", spec.Source.Git.CredentialsSecretRef.Name, nil, false))
		b.credsMount = &corev1.VolumeMount{Name: "git-credentials", MountPath: GitCredsDir, ReadOnly: true}
	case spec.Source.OCI != nil && spec.Source.OCI.CredentialsSecretRef != nil:
		b.addVolume(secretVolume("oci-credentials", spec.Source.OCI.CredentialsSecretRef.Name, nil, false))
		b.credsMount = &corev1.VolumeMount{Name: "oci-credentials", MountPath: OCICredsDir, ReadOnly: true}
	case spec.Source.Inline != nil && b.embedded != "":
		// The clone step writes the files from its InputsEnv.
	case spec.Source.Inline != nil:
		files := SortedKeys(spec.Source.Inline.Files)
		b.addVolume(configMapVolume("source", InputsConfigMapName(b.req.Name), false, keyItems(files, files)...))
		b.sourceMount = &corev1.VolumeMount{Name: "source", MountPath: SourceDir, ReadOnly: true}
	case spec.Source.ConfigMapRef != nil:
		b.addVolume(configMapVolume("source", spec.Source.ConfigMapRef.Name, false))
		b.sourceMount = &corev1.VolumeMount{Name: "source", MountPath: SourceDir, ReadOnly: true}
	}
	if b.embedded == "" {
		b.addVolume(configMapVolume("inputs", InputsConfigMapName(b.req.Name), false, keyItems([]string{VarsKey}, []string{path.Base(VarsFile)})...))
	}

	if be := spec.Backend; be != nil && be.ConfigSecretRef != nil {
		b.addVolume(secretVolume("backend-config", be.ConfigSecretRef.Name, nil, false))
		b.backendMount = &corev1.VolumeMount{Name: "backend-config", MountPath: BackendDir, ReadOnly: true}
	}
	for i, vf := range spec.Terraform.VarsFrom {
		name := fmt.Sprintf("vars-%d", i)
		if vf.Kind == "Secret" {
			b.addVolume(secretVolume(name, vf.Name, nil, vf.Optional))
		} else {
			b.addVolume(configMapVolume(name, vf.Name, vf.Optional))
		}
		b.varsMounts = append(b.varsMounts, corev1.VolumeMount{Name: name, MountPath: fmt.Sprintf("%s/%d", VarsFromDir, i), ReadOnly: true})
	}

	b.collectDependencies()

	// Env from Secrets: one volume per Secret, holding only the keys used.
	keysBySecret := map[string][]string{}
	var secretOrder []string
	for _, e := range spec.Terraform.Env {
		s := e.SecretKeyRef.Name
		if _, seen := keysBySecret[s]; !seen {
			secretOrder = append(secretOrder, s)
		}
		keysBySecret[s] = appendUnique(keysBySecret[s], e.SecretKeyRef.Key)
	}
	for i, s := range secretOrder {
		name := fmt.Sprintf("env-%d", i)
		b.addVolume(secretVolume(name, s, keysBySecret[s], false))
		b.tfMounts = append(b.tfMounts, corev1.VolumeMount{Name: name, MountPath: fmt.Sprintf("%s/%d", EnvSecretsDir, i), ReadOnly: true})
	}
	for _, e := range spec.Terraform.Env {
		i := indexOf(secretOrder, e.SecretKeyRef.Name)
		b.tfEnvArgs = append(b.tfEnvArgs, fmt.Sprintf("--env-file=%s=%s/%d/%s", e.Name, EnvSecretsDir, i, e.SecretKeyRef.Key))
	}
	for i, f := range spec.Terraform.Files {
		name := fmt.Sprintf("files-%d", i)
		b.addVolume(secretVolume(name, f.SecretName, nil, false))
		b.tfMounts = append(b.tfMounts, corev1.VolumeMount{Name: name, MountPath: f.MountPath, ReadOnly: true})
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
	s.Env = append(terraformEnv(), b.tfEnv...)
	s.VolumeMounts = append(s.VolumeMounts, b.tfMounts...)
	return s
}

func terraformEnv() []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "HOME", Value: TmpDir},
		{Name: "TF_IN_AUTOMATION", Value: "1"},
		{Name: "TF_INPUT", Value: "0"},
		{Name: "TF_PLUGIN_CACHE_DIR", Value: PluginCacheDir},
		{Name: "CHECKPOINT_DISABLE", Value: "1"},
	}
}

func (b *builder) clone() Step {
	s := Step{
		Name:            StepClone,
		Image:           b.req.Config.StepImage,
		Command:         []string{ImageStepBinary},
		Resources:       b.resources(),
		SecurityContext: ContainerSecurityContext(),
		Results:         []string{ResultCommit},
		Env:             []corev1.EnvVar{{Name: "HOME", Value: TmpDir}},
	}
	s.Args = []string{StepClone}
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
			"--backend-config-file=" + BackendDir + "/config",
		}, []corev1.VolumeMount{*b.backendMount}
	}
	suffix := b.run.Name
	if be != nil && be.Kubernetes != nil && be.Kubernetes.SecretSuffix != "" {
		suffix = be.Kubernetes.SecretSuffix
	}
	return []string{
		"--backend=kubernetes",
		"--backend-namespace=" + b.run.Namespace,
		"--backend-secret-suffix=" + suffix,
	}, nil
}

func (b *builder) init() Step {
	args, mounts := b.backendArgs()
	s := b.terraformStep(StepInit, args...)
	s.VolumeMounts = append(s.VolumeMounts, mounts...)
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
	for _, m := range b.varsMounts {
		args = append(args, "--vars-dir="+m.MountPath)
	}
	args = append(args, b.depArgs...)
	if b.req.Type == infrav1.RunDestroy {
		args = append(args, "--destroy")
	}
	args = append(args, "--plan-secret="+PlanSecretName(b.req.Name), "--inputs-salt="+string(b.run.UID))
	if len(b.run.Spec.Checks) > 0 && HasChecks(b.req.Type) {
		args = append(args, "--check-input-dir="+CheckInputDir)
	}
	args = append(args, b.ownerArgs()...)
	args = append(args, PhResults)
	s := b.terraformStep(StepPlan, args...)
	if b.embedded == "" {
		s.VolumeMounts = append(s.VolumeMounts, corev1.VolumeMount{Name: "inputs", MountPath: InputsDir, ReadOnly: true})
	}
	s.VolumeMounts = append(s.VolumeMounts, b.varsMounts...)
	s.VolumeMounts = append(s.VolumeMounts, b.depMounts...)
	s.Results = []string{ResultHasChanges, ResultDigest, ResultSummary, results.Inputs}
	return s
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
		s := b.stepBase(CheckStep(c.Name))
		s.Image = c.Image
		s.WorkspaceReadOnly = true
		s.Args = []string{"check", "--name=" + c.Name, "--module-dir=" + ModuleDir(b.run), "--plan-json=" + PlanJSONFile,
			"--output-secret=" + CheckSecretName(b.req.Name, c.Name)}
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

func (b *builder) apply() Step {
	return b.terraformStep(StepApply, "--plan-file="+PlanFile, "--approved-digest="+PhApprovedDigest)
}

func (b *builder) export() Step {
	args := []string{"--outputs-secret=" + RawOutputsSecretName(b.req.Name)}
	args = append(args, b.ownerArgs()...)
	return b.terraformStep(StepExport, args...)
}

func (b *builder) cleanup() Step {
	args, mounts := b.backendArgs()
	// The owner's name is the prefix of its pods' host names: cleanup only
	// releases a state lock taken from one of this run's pods.
	args = append(args, "--lock-holder-prefix="+PhOwnerName)
	s := b.terraformStep(StepCleanup, args...)
	s.VolumeMounts = append(s.VolumeMounts, mounts...)
	return s
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

func appendUnique(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// Replace substitutes placeholders in args with an engine's expressions.
func Replace(args []string, r *strings.Replacer) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = r.Replace(a)
	}
	return out
}

// SortedKeys returns a map's keys in order.
func SortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// InstallStepContainer copies opr8r-step from the step image into the
// StepBinVolume, for steps that run in a stock Terraform or OpenTofu image
// (which has only sh). Every engine runs it before such steps.
func InstallStepContainer(p *Pipeline, stepImage string, res corev1.ResourceRequirements) corev1.Container {
	return corev1.Container{
		Name:            "install-opr8r-step",
		Image:           stepImage,
		ImagePullPolicy: p.ImagePullPolicy,
		Command:         []string{ImageStepBinary},
		Args:            []string{"install", "--dest=" + StepBinDir},
		VolumeMounts:    []corev1.VolumeMount{{Name: StepBinVolume, MountPath: StepBinDir}},
		SecurityContext: ContainerSecurityContext(),
		Resources:       res,
	}
}

// Container is a step's container: its placeholders replaced by the
// engine's expressions, the tmp volume and (when it needs it) the installed
// step binary mounted, then the step's own mounts. Engines add the
// workspace their own way.
func (s Step) Container(name string, p *Pipeline, r *strings.Replacer) corev1.Container {
	mounts := []corev1.VolumeMount{{Name: TmpVolume, MountPath: TmpDir}}
	if s.NeedsStepBinary {
		mounts = append(mounts, corev1.VolumeMount{Name: StepBinVolume, MountPath: StepBinDir, ReadOnly: true})
	}
	return corev1.Container{
		Name:            name,
		Image:           s.Image,
		ImagePullPolicy: p.ImagePullPolicy,
		Command:         s.Command,
		Args:            Replace(s.Args, r),
		Env:             s.Env,
		VolumeMounts:    append(mounts, s.VolumeMounts...),
		Resources:       s.Resources,
		SecurityContext: s.SecurityContext,
	}
}

// WorkspaceMount is how a step mounts the shared workspace.
func (s Step) WorkspaceMount() corev1.VolumeMount {
	return corev1.VolumeMount{Name: WorkspaceVolume, MountPath: WorkspaceDir, ReadOnly: s.WorkspaceReadOnly}
}

// ScratchVolumes are the per-pod volumes every step mounts: /tmp, and the
// directory the step binary is installed into.
func ScratchVolumes() []corev1.Volume {
	return []corev1.Volume{
		{Name: TmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: StepBinVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
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

// StepNamed returns the pipeline's step (or cleanup) with that name.
func (p *Pipeline) StepNamed(name string) (Step, bool) {
	if name == p.Cleanup.Name {
		return p.Cleanup, true
	}
	for _, s := range p.Steps {
		if s.Name == name {
			return s, true
		}
	}
	return Step{}, false
}
