package step

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/pkg/results"
)

// BackendOverrideFile is the file init writes into the module to select the
// backend; Terraform merges *_override.tf files over the module's own.
const BackendOverrideFile = "opr8r_backend_override.tf"

// MaxReadablePlan is the largest readable plan stored in the plan Secret;
// larger plans are truncated with a marker (the plan record keeps it whole).
// It leaves room under the API server's 1 MiB limit on a Secret's data for
// the Secret's other key.
const MaxReadablePlan = 1<<20 - 4<<10

// Backend selects the state backend.
type Backend struct {
	// Type is kubernetes (the default) or any backend type configured by
	// ConfigFile (s3, gcs, azurerm, ...).
	Type string
	// Namespace and SecretSuffix configure the kubernetes backend.
	Namespace, SecretSuffix string
	// InCluster uses the pod's service account for the kubernetes backend;
	// otherwise KUBE_CONFIG_PATH in terraform's environment is used.
	InCluster bool
	// Kubeconfig, when set, is the kubeconfig of the manager's state API
	// (WriteStateKubeconfig): the kubernetes backend reaches the run's
	// state through it (config_path), not with the pod's service account.
	Kubeconfig string
	// ConfigFile is passed to init -backend-config.
	ConfigFile string
}

// Module says where a module lives and which workspace it uses.
type Module struct {
	Dir       string
	Workspace string
}

// Init writes the backend override and runs terraform init, then selects
// (or creates) the workspace.
func (r *Runner) Init(ctx context.Context, m Module, b Backend) error {
	if err := writeBackendOverride(m.Dir, b); err != nil {
		return err
	}
	args := []string{"init", "-input=false", "-no-color", r.lockTimeoutArg()}
	if b.ConfigFile != "" {
		args = append(args, "-backend-config="+b.ConfigFile)
	}
	if err := r.initProviders(ctx, m.Dir, args); err != nil {
		return err
	}
	if m.Workspace != "" && m.Workspace != "default" {
		args := []string{"workspace", "select", "-or-create", "-no-color", m.Workspace}
		if r.NoStateLock {
			// A preview reads the state: it makes no workspace.
			args = []string{"workspace", "select", "-no-color", m.Workspace}
		}
		if _, _, err := r.tf(ctx, m.Dir, false, nil, args...); err != nil {
			if r.NoStateLock {
				return fmt.Errorf("workspace %s of the tracked run has no state yet, and a preview reads the state without writing it: apply the tracked run once, then push again: %w", m.Workspace, err)
			}
			return err
		}
	}
	// A state an earlier run kept is pushed before this, by the runner
	// (RestoreState), never here: init runs as the planner.
	return nil
}

// initProviders runs terraform init. With the namespace's shared plugin
// cache (TF_PLUGIN_CACHE_DIR, not PluginCacheInWorkspace), the packages
// init takes from it are made the run's own and checked
// (initWithSharedCache); if anything about the cache fails (its lock, a
// package or path someone changed, a copy that does not match the lock
// file), init runs again without it and says so: the shared cache saves
// downloads, it never fails a run.
func (r *Runner) initProviders(ctx context.Context, dir string, args []string) error {
	cache := r.envValue("TF_PLUGIN_CACHE_DIR")
	if cache == "" || r.PluginCacheInWorkspace {
		unlock, err := r.lockPluginCache(ctx)
		if err != nil {
			return err
		}
		defer unlock()
		_, _, err = r.tf(ctx, dir, false, nil, args...)
		return err
	}
	err := r.initWithSharedCache(ctx, dir, args)
	if err == nil || ctx.Err() != nil {
		return err
	}
	r.logf("the shared plugin cache %s could not be used (%v): installing the providers into this run's workspace without it", cache, err)
	return r.initWithoutSharedCache(ctx, dir, args)
}

func writeBackendOverride(dir string, b Backend) error {
	var body string
	switch b.Type {
	case "", "kubernetes":
		if b.SecretSuffix == "" || b.Namespace == "" {
			return errors.New("the kubernetes backend needs --backend-namespace and --backend-secret-suffix")
		}
		body = fmt.Sprintf("  secret_suffix = %q\n  namespace     = %q\n", b.SecretSuffix, b.Namespace)
		if b.Kubeconfig != "" {
			body += fmt.Sprintf("  config_path   = %q\n", b.Kubeconfig)
		} else if b.InCluster {
			body += "  in_cluster_config = true\n"
		}
		b.Type = "kubernetes"
	default:
		if b.ConfigFile == "" {
			return fmt.Errorf("backend %q needs --backend-config-file", b.Type)
		}
	}
	content := fmt.Sprintf("# Written by opr8r: the state backend of this run.\nterraform {\n  backend %q {\n%s  }\n}\n", b.Type, body)
	return os.WriteFile(filepath.Join(dir, BackendOverrideFile), []byte(content), 0o644)
}

// PlanOptions configures a plan.
type PlanOptions struct {
	PlanFile string
	// VarsFile is a JSON object of variables (the inputs ConfigMap).
	VarsFile string
	// VarsDirs are mounted Secrets or ConfigMaps (spec.terraform.varsFrom,
	// in order: a later one wins): each file is a variable.
	VarsDirs []string
	// SecretVarsDirs are those of VarsDirs that are Secrets: their values
	// are registered as secrets (AddSecret) before terraform runs.
	// ConfigMap values are not secrets.
	SecretVarsDirs []string
	// Destroy plans a destroy.
	Destroy bool
	// PlanSecret receives the readable plan, when set.
	PlanSecret string
	// CheckInputDir, when set, receives plan.json (terraform show -json)
	// and plan.txt (the readable plan) for the run's checks.
	CheckInputDir string
	// InputsSalt salts the inputs digest (the TerraformRun's uid), so equal
	// values in two TerraformRuns give different digests.
	InputsSalt string
	// DependencyVars are variables taken from dependencies' outputs
	// (spec.dependsOn); vars and VarsDirs win over them.
	DependencyVars []results.DependencyVar
}

// PlanSummary is the plan step's summary result.
type PlanSummary struct {
	Add        int    `json:"add"`
	Change     int    `json:"change"`
	Destroy    int    `json:"destroy"`
	Replace    int    `json:"replace"`
	Import     int    `json:"import,omitempty"`
	Forget     int    `json:"forget,omitempty"`
	Move       int    `json:"move,omitempty"`
	Actions    int    `json:"actions,omitempty"`
	HasChanges bool   `json:"hasChanges"`
	Digest     string `json:"digest"`
}

// Plan runs terraform plan -out with -detailed-exitcode, stores the readable
// plan and the plan as JSON (storePlan) and writes the results has-changes,
// digest, summary, inputs, plan-text-digest and plan-json-digest.
func (r *Runner) Plan(ctx context.Context, m Module, o PlanOptions) (*PlanSummary, error) {
	// A new plan may be applied once more.
	if err := os.Remove(ApplyMarker(o.PlanFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing the apply marker of the previous plan: %w", err)
	}
	deps, err := r.loadDependencies(ctx, o)
	if err != nil {
		return nil, err
	}
	sum, planJSON, err := r.runPlan(ctx, m, o, deps)
	if err != nil {
		return nil, err
	}
	stored, err := r.storePlan(ctx, m, o, sum, planJSON)
	if err != nil {
		return nil, err
	}
	inputs, err := inputsDigest(o, deps.vals)
	if err != nil {
		return nil, err
	}
	res := results.Plan{Add: int32(sum.Add), Change: int32(sum.Change), Destroy: int32(sum.Destroy), Replace: int32(sum.Replace),
		Import: int32(sum.Import), Forget: int32(sum.Forget), Move: int32(sum.Move), Actions: int32(sum.Actions), HasChanges: sum.HasChanges, Digest: sum.Digest, Inputs: inputs,
		TextDigest: stored.TextDigest, JSONDigest: stored.JSONDigest, SensitiveJSONDigest: stored.SensitiveJSONDigest}
	for _, name := range []string{results.HasChanges, results.Digest, results.Summary, results.Inputs, results.PlanTextDigest, results.PlanJSONDigest, results.PlanSensitiveJSONDigest} {
		if err := r.WriteResult(name, res.Values()[name]); err != nil {
			return nil, err
		}
	}
	r.logf("plan: %s (replace %d), has changes: %v, digest %s", res.Short(), sum.Replace, sum.HasChanges, sum.Digest)
	return sum, nil
}

// runPlan runs terraform plan with the run's variables and its
// dependencies' outputs, and summarizes the plan file it wrote.
func (r *Runner) runPlan(ctx context.Context, m Module, o PlanOptions, deps depValues) (*PlanSummary, []byte, error) {
	args := []string{"plan", "-input=false", "-no-color", r.lockTimeoutArg(), "-detailed-exitcode", "-out=" + o.PlanFile}
	if o.Destroy {
		args = append(args, "-destroy")
	}
	varFiles, cleanup, err := r.varFiles(o, deps.vals)
	defer cleanup()
	if err != nil {
		return nil, nil, err
	}
	for _, f := range varFiles {
		args = append(args, "-var-file="+f)
	}
	// With a sensitive output of a dependency among the variables, the plan
	// is printed only once the module is known to declare it sensitive.
	quiet := hasSensitive(o.DependencyVars)
	if quiet {
		r.logf("terraform %s (printed after the sensitive variables are checked)", strings.Join(args, " "))
	}
	stdout, code, err := r.tf(ctx, m.Dir, quiet, []int{2}, args...)
	if err != nil {
		return nil, nil, destroyHint(err, deps.missing)
	}
	sum, declared, planJSON, err := r.summarize(ctx, m, o.PlanFile)
	if err != nil {
		return nil, nil, err
	}
	if err := checkSensitive(o.DependencyVars, declared); err != nil {
		return nil, nil, err
	}
	if quiet {
		rw := &redactingWriter{r: r, w: r.Out}
		_, _ = rw.Write(stdout)
		rw.Flush()
	}
	sum.HasChanges = code == 2
	return sum, planJSON, nil
}

// storedPlan are the digests of the plan as kept for people and checks.
type storedPlan struct {
	// TextDigest is the digest of the readable plan, redacted.
	TextDigest string
	// JSONDigest is the digest of the plan as JSON, masked.
	JSONDigest string
	// SensitiveJSONDigest is the digest of the plan as JSON in clear.
	SensitiveJSONDigest string
}

// storePlan keeps the plan where people and checks read it: the readable
// plan's Secret, the checks' input, and the run's records. What they read
// is the readable plan redacted like the log and the plan as JSON masked
// (MaskPlanJSON); the JSON as terraform wrote it is kept only as a record
// of its own (records.KindPlanJSONSensitive), in the same Secret-backed
// store, for the people who may read Secrets, and never given to checks.
// It returns the digests of exactly the bytes kept.
func (r *Runner) storePlan(ctx context.Context, m Module, o PlanOptions, sum *PlanSummary, planJSON []byte) (storedPlan, error) {
	// Masked first: the values terraform marks sensitive are then
	// redacted from the readable plan too.
	masked, err := r.maskPlan(planJSON)
	if err != nil {
		return storedPlan{}, err
	}
	raw, _, err := r.tf(ctx, m.Dir, true, nil, "show", "-no-color", o.PlanFile)
	if err != nil {
		return storedPlan{}, err
	}
	text := []byte(r.Redact(string(raw)))
	if o.PlanSecret != "" && r.Kube != nil {
		data := map[string][]byte{"plan.txt": TruncatePlan(text, MaxReadablePlan), "digest": []byte(sum.Digest)}
		if err := r.Kube.WriteSecret(ctx, o.PlanSecret, infrav1.ComponentPlan, data); err != nil {
			return storedPlan{}, err
		}
	}
	if o.CheckInputDir != "" {
		if err := r.writeCheckInput(o.CheckInputDir, masked, text); err != nil {
			return storedPlan{}, err
		}
	}
	for _, rec := range []struct {
		kind records.Kind
		data []byte
		what string
	}{
		{records.KindPlanText, text, "the readable plan"},
		{records.KindPlanJSON, masked, "the plan as JSON"},
		{records.KindPlanJSONSensitive, planJSON, "the plan as JSON with its sensitive values"},
	} {
		if err := r.KeepRecord(ctx, rec.kind, rec.data); err != nil {
			return storedPlan{}, fmt.Errorf("keeping %s: %w", rec.what, err)
		}
	}
	return storedPlan{TextDigest: BytesDigest(text), JSONDigest: BytesDigest(masked), SensitiveJSONDigest: BytesDigest(planJSON)}, nil
}

// writeCheckInput writes what the run's checks read: the plan as JSON,
// masked, and the readable plan, redacted, in a directory of the
// workspace.
func (r *Runner) writeCheckInput(dir string, js, text []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s for the checks: %w", dir, err)
	}
	for name, b := range map[string][]byte{"plan.json": js, "plan.txt": text} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("writing the checks' %s: %w", name, err)
		}
	}
	r.logf("plan: wrote plan.json (%d bytes, sensitive values masked) and plan.txt for the checks to %s", len(js), dir)
	return nil
}

// TruncatePlan caps a readable plan at max bytes with a clear marker.
func TruncatePlan(text []byte, max int) []byte {
	if len(text) <= max {
		return text
	}
	marker := fmt.Sprintf("\n\n... [opr8r: plan truncated: %d of %d bytes shown; the full plan is in the plan step's log]\n", max, len(text))
	return append(append([]byte{}, text[:max-len(marker)]...), marker...)
}

// varFiles returns the plan's -var-file arguments, in the order Terraform
// lets later ones win: the dependencies' outputs, the vars file, then
// varsFrom values. Dependency and varsFrom values go to private temporary
// tfvars.json files. Values that parse as JSON keep their type; others are
// strings.
func (r *Runner) varFiles(o PlanOptions, deps map[string]string) ([]string, func(), error) {
	noop := func() {}
	var files []string
	var tmp string
	if len(deps) > 0 || len(o.VarsDirs) > 0 {
		var err error
		if tmp, err = os.MkdirTemp("", "opr8r-vars-"); err != nil {
			return nil, noop, err
		}
		noop = func() { _ = os.RemoveAll(tmp) }
	}
	if len(deps) > 0 {
		path, err := writeDependencyVars(tmp, deps)
		if err != nil {
			return nil, noop, err
		}
		files = append(files, path)
	}
	if o.VarsFile != "" {
		b, err := os.ReadFile(o.VarsFile)
		if err != nil {
			return nil, noop, fmt.Errorf("reading variables: %w", err)
		}
		if strings.TrimSpace(string(b)) != "{}" {
			files = append(files, o.VarsFile)
		}
	}
	if len(o.VarsDirs) == 0 {
		return files, noop, nil
	}
	vars, err := r.readVarsDirs(o)
	if err != nil {
		return nil, noop, err
	}
	b, _ := json.Marshal(vars)
	path := filepath.Join(tmp, "vars-from.tfvars.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, noop, err
	}
	return append(files, path), noop, nil
}

// readVarsDirs reads the varsFrom variables, a later directory winning,
// and registers the values of those in Secrets (SecretVarsDirs) as
// secrets.
func (r *Runner) readVarsDirs(o PlanOptions) (map[string]json.RawMessage, error) {
	vars := map[string]json.RawMessage{}
	for _, dir := range o.VarsDirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // an optional, missing Secret or ConfigMap
			}
			return nil, err
		}
		secret := slices.Contains(o.SecretVarsDirs, dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				continue
			}
			v := strings.TrimRight(string(b), "\r\n")
			if secret {
				r.AddSecret(v)
			}
			vars[e.Name()] = tfvarValue(v)
		}
	}
	return vars, nil
}

func hasSensitive(deps []results.DependencyVar) bool {
	for _, d := range deps {
		if d.Sensitive {
			return true
		}
	}
	return false
}

// planJSON is the part of `terraform show -json PLAN` that counts changes
// and declares the root module's variables.
type planJSON struct {
	ResourceChanges []struct {
		Address         string `json:"address"`
		PreviousAddress string `json:"previous_address"`
		Change          struct {
			Actions   []string  `json:"actions"`
			Importing *struct{} `json:"importing"`
		} `json:"change"`
	} `json:"resource_changes"`
	ActionInvocations []json.RawMessage `json:"action_invocations"`
	Configuration     struct {
		RootModule struct {
			Variables map[string]planVariable `json:"variables"`
		} `json:"root_module"`
	} `json:"configuration"`
}

// planVariable is a variable the root module declares.
type planVariable struct {
	Sensitive bool `json:"sensitive"`
}

// summarize counts the plan's changes and returns the root module's
// declared variables and the plan as JSON.
func (r *Runner) summarize(ctx context.Context, m Module, planFile string) (*PlanSummary, map[string]planVariable, []byte, error) {
	digest, err := FileDigest(planFile)
	if err != nil {
		return nil, nil, nil, err
	}
	out, _, err := r.tf(ctx, m.Dir, true, nil, "show", "-json", planFile)
	if err != nil {
		return nil, nil, nil, err
	}
	s, vars, err := countPlan(out)
	if err != nil {
		return nil, nil, nil, err
	}
	s.Digest = digest
	return s, vars, out, nil
}

// countPlan counts the changes of a plan as terraform show -json prints
// it, as the rules count them (planpolicy.FromJSON), and returns the root
// module's declared variables.
func countPlan(out []byte) (*PlanSummary, map[string]planVariable, error) {
	var p planJSON
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, nil, fmt.Errorf("reading the plan: %w", err)
	}
	s := &PlanSummary{Actions: len(p.ActionInvocations)}
	for _, rc := range p.ResourceChanges {
		// As the rules count them (planpolicy.FromJSON): a no-op that
		// imports or moves a resource is a change of what is managed.
		if rc.Change.Importing != nil {
			s.Import++
		}
		if rc.PreviousAddress != "" && rc.PreviousAddress != rc.Address {
			s.Move++
		}
		acts := rc.Change.Actions
		if slices.Contains(acts, "create") && slices.Contains(acts, "delete") {
			s.Replace++
		}
		for _, act := range acts {
			switch act {
			case "create":
				s.Add++
			case "update":
				s.Change++
			case "delete":
				s.Destroy++
			case "forget":
				s.Forget++
			}
		}
	}
	return s, p.Configuration.RootModule.Variables, nil
}

// BytesDigest is "sha256:<hex>" of b.
func BytesDigest(b []byte) string { return records.Digest(b) }

// FileDigest is "sha256:<hex>" of a file.
func FileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("reading the plan file: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// ErrDigestMismatch refuses a plan that is not the approved one.
var ErrDigestMismatch = errors.New("plan digest mismatch")

// Apply applies exactly the saved plan, and only if its digest is the
// approved one.
func (r *Runner) Apply(ctx context.Context, m Module, planFile, approvedDigest string) error {
	if approvedDigest == "" {
		return fmt.Errorf("%w: no approved digest was given; refusing to apply", ErrDigestMismatch)
	}
	got, err := FileDigest(planFile)
	if err != nil {
		return err
	}
	if got != approvedDigest {
		return fmt.Errorf("%w: the approved plan is %s but the plan file is %s; refusing to apply", ErrDigestMismatch, approvedDigest, got)
	}
	if err := markApplyStarted(planFile); err != nil {
		return err
	}
	if _, _, err = r.tf(ctx, m.Dir, false, nil, "apply", "-input=false", "-no-color", r.lockTimeoutArg(), planFile); err != nil {
		return r.recoverState(ctx, m, err)
	}
	return nil
}

// ErrApplyStarted refuses a second apply of one saved plan: an engine that
// starts the apply step again (a pod re-created after it was deleted, a
// retry) must not apply the plan twice.
var ErrApplyStarted = errors.New("the apply of this plan already started once")

// ApplyMarker is the file, next to the saved plan in the run's workspace,
// that records that its apply started.
func ApplyMarker(planFile string) string { return planFile + ".apply-started" }

// markApplyStarted records, once, that the plan's apply starts; it fails
// when an earlier attempt of this run's apply step started already.
func markApplyStarted(planFile string) error {
	f, err := os.OpenFile(ApplyMarker(planFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if errors.Is(err, os.ErrExist) {
		before, _ := os.ReadFile(ApplyMarker(planFile))
		return fmt.Errorf("%w (%s): opr8r never applies a plan twice; if the first attempt was interrupted, cleanup releases its state lock, and kubectl tfrun rerun plans again from the state terraform saved", ErrApplyStarted, strings.TrimSpace(string(before)))
	}
	if err != nil {
		return fmt.Errorf("recording the start of the apply: %w", err)
	}
	host, _ := os.Hostname()
	_, err = fmt.Fprintf(f, "started by %s at %s\n", host, time.Now().UTC().Format(time.RFC3339))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Destroy plans a destroy and applies that plan: the destroy subcommand for
// running outside a pipeline.
func (r *Runner) Destroy(ctx context.Context, m Module, o PlanOptions) error {
	o.Destroy = true
	sum, err := r.Plan(ctx, m, o)
	if err != nil {
		return err
	}
	if !sum.HasChanges {
		r.logf("nothing to destroy")
		return nil
	}
	return r.Apply(ctx, m, o.PlanFile, sum.Digest)
}

// ExportOutputs writes `terraform output -json` to a Secret the operator
// reads. Values never go to the log or to results; only names are logged.
func (r *Runner) ExportOutputs(ctx context.Context, m Module, secret string) ([]string, error) {
	out, _, err := r.tf(ctx, m.Dir, true, nil, "output", "-json", "-no-color")
	if err != nil {
		return nil, err
	}
	var outs map[string]json.RawMessage
	if err := json.Unmarshal(out, &outs); err != nil {
		return nil, fmt.Errorf("reading terraform outputs: %w", err)
	}
	names := slices.Sorted(maps.Keys(outs))
	if r.Kube == nil {
		return nil, errors.New("export-outputs needs the API server (--outputs-secret)")
	}
	if err := r.Kube.WriteSecret(ctx, secret, infrav1.ComponentRawOutputs, map[string][]byte{"outputs.json": out}); err != nil {
		return nil, err
	}
	r.logf("exported %d outputs to Secret %s: %s", len(names), secret, strings.Join(names, ", "))
	return names, nil
}

// lockInfo is the lock info Terraform's kubernetes backend keeps in the
// Lease annotation app.terraform.io/lock-info.
type lockInfo struct {
	ID        string `json:"ID"`
	Operation string `json:"Operation"`
	Who       string `json:"Who"`
}

// LockInfoAnnotation is where Terraform's kubernetes backend keeps lock info.
const LockInfoAnnotation = "app.terraform.io/lock-info"

// Cleanup releases a state lock left behind by an aborted step of this run.
// Only the kubernetes backend allows this safely: a lock is released only
// if it was taken from a pod of this run, whose host name starts with
// holderPrefix (the child's name). It reports what it did.
func (r *Runner) Cleanup(ctx context.Context, m Module, b Backend, holderPrefix string) (string, error) {
	if b.Type != "" && b.Type != "kubernetes" {
		return fmt.Sprintf("backend %s: lock release is not supported; nothing done", b.Type), nil
	}
	if r.NoStateLock {
		return "this run reads the state without its lock (a preview): no lock to release", nil
	}
	if r.Kube == nil {
		return "", errors.New("cleanup needs the API server")
	}
	ws := m.Workspace
	if ws == "" {
		ws = "default"
	}
	name := fmt.Sprintf("lock-tfstate-%s-%s", ws, b.SecretSuffix)
	leases := r.Kube.stateClient().CoordinationV1().Leases(b.Namespace)
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "no state lock exists", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading state lock %s: %w", name, err)
	}
	if lease.Spec.HolderIdentity == nil {
		return "the state is not locked", nil
	}
	var info lockInfo
	_ = json.Unmarshal([]byte(lease.Annotations[LockInfoAnnotation]), &info)
	host := info.Who
	if i := strings.LastIndex(host, "@"); i >= 0 {
		host = host[i+1:]
	}
	if holderPrefix == "" || !strings.HasPrefix(host, holderPrefix) {
		return fmt.Sprintf("the state lock %s is held by %q, not by this run; left alone", *lease.Spec.HolderIdentity, info.Who), nil
	}
	// Exactly what the backend's own Unlock does.
	id := *lease.Spec.HolderIdentity
	lease.Spec.HolderIdentity = nil
	delete(lease.Annotations, LockInfoAnnotation)
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return "", fmt.Errorf("releasing state lock %s: %w", id, err)
	}
	return fmt.Sprintf("released state lock %s (%s by %s) left by an aborted step", id, info.Operation, info.Who), nil
}
