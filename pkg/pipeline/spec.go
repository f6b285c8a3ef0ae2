package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/gitpaths"
	"github.com/opr8r/opr8r/pkg/names"
)

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
	if s.Runner.PlanServiceAccountName == "" {
		s.Runner.PlanServiceAccountName = cfg.PlanServiceAccount
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
	if s.History.KeepChecks == nil {
		s.History.KeepChecks = ptr.To[int32](10)
	}
	if s.Outputs.SecretName == "" {
		s.Outputs.SecretName = r.Name + "-outputs"
	}
	return r
}

// SpecHash hashes what a run executes. Approval decisions, the approval
// timeout, suspend, the deletion policy, history settings and
// spec.source.git.paths (which pushes wake a plan, not what it runs) are
// left out: changing them never starts a new run. The run must have
// defaults applied.
func SpecHash(run *infrav1.TerraformRun) string {
	s := run.Spec
	if g := s.Source.Git; g != nil && g.Paths != nil {
		g = g.DeepCopy()
		g.Paths = nil
		s.Source.Git = g
	}
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
	// fileNameRE is opr8r-spec-rules' rule for inline files' names: plain
	// names, not dot files, but the lock file (names.LockFile).
	fileNameRE   = regexp.MustCompile(`^([A-Za-z0-9_-][A-Za-z0-9._-]{0,252}|\.terraform\.lock\.hcl)$`)
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
		for _, k := range slices.Sorted(maps.Keys(in.Files)) {
			if !fileNameRE.MatchString(k) {
				return fmt.Errorf("spec.source.inline.files: %q is not a plain file name (letters, digits, '.', '_', '-'; not starting with '.' but %s; no directories)", k, names.LockFile)
			}
		}
	}
	if g := run.Spec.Source.Git; g != nil {
		for _, p := range g.Paths {
			if err := gitpaths.Valid(string(p)); err != nil {
				return fmt.Errorf("spec.source.git.paths: %w", err)
			}
		}
	}
	if it := run.Spec.Runner.IdentityToken; it != nil && strings.HasPrefix(it.Audience, "opr8r.io/") {
		// Stored before the CRD refused it: a state API token's audience
		// would give this run's steps another run's state.
		return fmt.Errorf("spec.runner.identityToken.audience: %q begins with opr8r.io/, which is opr8r's own (its state API's tokens); use your cloud's audience", it.Audience)
	}
	for _, k := range slices.Sorted(maps.Keys(run.Spec.Outputs.Rename)) {
		if !outputNameRE.MatchString(k) {
			return fmt.Errorf("spec.outputs.rename: %q is not a Terraform output name", k)
		}
	}
	seen := map[infrav1.SecretDataKey]string{}
	for _, k := range slices.Sorted(maps.Keys(run.Spec.Outputs.Rename)) {
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

// HasGate says whether runs of a type wait at the approval gate: apply
// runs, and the destroy a deletion runs, of a TerraformRun whose approval
// is Manual; a destroy goes without when a platform admin set
// infra.opr8r.io/destroy-without-approval. Plan-only runs never apply.
// A run with spec.approval.rules or windows has a gate in mode Auto too:
// a rule may deny or require approvals, and a window hold an approved
// plan, which only a gate can do.
func HasGate(run *infrav1.TerraformRun, t infrav1.RunType) bool {
	if !ApprovalNeedsGate(run.Spec.Approval) {
		return false
	}
	switch t {
	case infrav1.RunApply:
		return true
	case infrav1.RunDestroy:
		return run.Annotations[infrav1.DestroyWithoutApprovalAnnotation] != "true"
	}
	return false
}

// ApprovalNeedsGate says whether an approval policy needs the gate: mode
// Manual, or rules or windows that may hold a plan in mode Auto.
func ApprovalNeedsGate(ap infrav1.ApprovalSpec) bool {
	return ap.Mode != infrav1.ApprovalAuto || len(ap.Rules) > 0 || len(ap.Windows) > 0
}

// HasChecks says whether runs of a type run spec.checks: apply runs and
// the runs of a planOnly TerraformRun. Drift checks compare, they do not
// propose; a destroy run follows a deletion, which a policy on the plan
// should not be able to block.
func HasChecks(t infrav1.RunType) bool {
	return t == infrav1.RunApply || t == infrav1.RunPlan
}

// PlanOnly says whether runs of a type stop after the plan: scheduled
// checks and the runs of a planOnly TerraformRun have no gate, no apply
// and no export.
func PlanOnly(t infrav1.RunType) bool {
	return t == infrav1.RunDrift || t == infrav1.RunPlan
}

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
