// Command opr8r-step runs one step of a TerraformRun pipeline:
//
//	opr8r-step install --dest DIR
//	opr8r-step clone --source=git|dir ...
//	opr8r-step init|plan|apply|destroy|export-outputs|cleanup --module-dir DIR ...
//	opr8r-step restore-state --workspace NAME --backend ... --records-run ...
//	opr8r-step check --name NAME ... -- COMMAND [ARGS...]
//
// Before anything runs, every secret the step can see (--env-file,
// --secret-files, --secret-vars-dir, --backend-config-file; clone's
// credentials as it reads them) is registered for redaction, in all its
// forms.
//
// On failure it prints the whole message (redacted) to its log, writes a
// short one-line summary (terraform's own diagnostic, redacted, cut, and
// saying where the whole text is: step.Runner.FailureSummary) to the
// termination log, where Argo, Tekton and the Job engine take it as the
// step's message, and exits non-zero.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/pkg/results"
	"github.com/opr8r/opr8r/pkg/step"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout))
}

func run(args []string, out io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: opr8r-step install|clone|init|restore-state|plan|apply|destroy|export-outputs|cleanup|check|results [flags] [-- command]")
		return 2
	}
	cmd := args[0]
	if !knownSteps[cmd] {
		fmt.Fprintf(os.Stderr, "opr8r-step: unknown step %q\n", cmd)
		return 2
	}
	var o options
	fs := newFlags(cmd, &o)
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if o.timeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, o.timeout)
		defer stop()
	}
	// Everything the step prints is also captured for its log record.
	capture := &step.LogCapture{}
	console := out
	out = io.MultiWriter(out, capture)
	r := &step.Runner{Terraform: o.terraformBin, Out: out, ResultsDir: o.resultsDir, ResultsFile: o.resultsFile, StateRetry: o.stateRetry, LockTimeout: o.lockTimeout, NoStateLock: o.noStateLock}
	keepLog := func() {
		if r.Records == nil {
			return
		}
		// Not with the signal's context: a step that is stopped still
		// keeps what it printed.
		kctx, kcancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer kcancel()
		if err := r.KeepRecord(kctx, records.KindLog, capture.Bytes()); err != nil {
			fmt.Fprintln(console, "opr8r-step: warning: this step's log was not kept: "+r.Redact(err.Error()))
		}
	}
	defer keepLog()
	fail := func(err error) int {
		fmt.Fprintln(out, "opr8r-step: "+cmd+" failed: "+r.Redact(err.Error()))
		if o.termLog != "" {
			_ = os.WriteFile(o.termLog, []byte(r.FailureSummary(err.Error())), 0o644)
		}
		return 1
	}
	if err := loadSecrets(r, &o); err != nil {
		return fail(err)
	}
	if err := useStateAPI(ctx, &o); err != nil {
		return fail(err)
	}
	if err := connect(r, cmd, &o); err != nil {
		return fail(err)
	}
	// The install's provider mirror, for the commands that run terraform.
	pv := step.Providers{Mirror: os.Getenv(names.EnvProviderMirror), MirrorCA: os.Getenv(names.EnvProviderMirrorCA)}
	if err := r.UseProviders(pv, filepath.Join(os.TempDir(), "opr8r-providers")); err != nil {
		return fail(err)
	}
	began := time.Now()
	if err := dispatch(ctx, r, cmd, &o, fs.Args(), out); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%s did not finish within its timeout of %s (spec.timeouts); terraform was interrupted so that it could stop and write its state: %w", cmd, o.timeout, err)
		}
		return fail(err)
	}
	// How long the step took, and terraform in it (make bench-e2e reads it).
	fmt.Fprintf(out, "opr8r-step: %s done in %s (terraform %s)\n", cmd, time.Since(began).Round(time.Millisecond), r.TerraformTime().Round(time.Millisecond))
	return 0
}

// useStateAPI writes the kubeconfig of the manager's state API when the
// step has one (names.EnvStateAPI, set by the manager with its
// certificate and a projected token): terraform's kubernetes backend and
// the step's own Secrets go through it.
func useStateAPI(ctx context.Context, o *options) error {
	url := os.Getenv(names.EnvStateAPI)
	if url == "" {
		return nil
	}
	// Terraform and the step's clients reach it through a loopback proxy
	// that waits out a manager restart (step.StateProxy). It serves for
	// the process's life, past an interrupt, so that an interrupted
	// terraform can still write its state.
	p, err := step.NewStateProxy(url, os.Getenv(names.EnvStateAPICA), names.StateTokenFile)
	if err != nil {
		return err
	}
	local, err := p.Start()
	if err != nil {
		return err
	}
	// Stopping (SIGTERM, the step's timeout): calls wait only briefly for
	// the state API, so that terraform keeps a state it cannot write in
	// errored.tfstate before it is killed.
	go func() { <-ctx.Done(); p.Stop() }()
	if err := step.WriteStateKubeconfig(names.StateKubeconfig, local, "", ""); err != nil {
		return fmt.Errorf("writing the state API's kubeconfig: %w", err)
	}
	o.stateKubeconfig = names.StateKubeconfig
	return nil
}

// connect gives the runner the API server and the run's records store,
// when the step needs them.
func connect(r *step.Runner, cmd string, o *options) error {
	o.namespace = secretsNamespace(o.namespace, o.backendNS)
	keepsRecords := o.recordsRun != "" && o.recordsRunID != "" && cmd != "install"
	needsKube := (cmd == "plan" && (o.planSecret != "" || crossNamespace(o.depVars))) || cmd == "export-outputs" || (cmd == "cleanup" && o.backend == "kubernetes") ||
		(cmd == "check" && o.outputSecret != "") || (cmd == "apply" && o.awaitApproval) || keepsRecords
	if needsKube && o.ownerName != "" && (o.ownerKind == "" || o.ownerAPI == "") {
		return errors.New("--owner-name needs --owner-kind and --owner-api-version (the engine object that owns the Secrets this step writes)")
	}
	if needsKube {
		k, err := step.NewKube(o.kubeconfig, o.namespace, step.OwnerRef(o.ownerAPI, o.ownerKind, o.ownerName, o.ownerUID))
		if err != nil {
			return err
		}
		k.Shard = o.shard
		if o.stateKubeconfig != "" {
			if err := k.UseStateAPI(o.stateKubeconfig); err != nil {
				return err
			}
		}
		r.Kube = k
	}
	if !keepsRecords {
		return nil
	}
	name := cmd
	if cmd == "check" {
		name = "check-" + o.checkName
	}
	r.RecordKey = records.Key{Namespace: o.namespace, Run: o.recordsRun, RunID: o.recordsRunID, Step: name}
	if err := (records.Key{Namespace: o.namespace, Run: o.recordsRun, RunID: o.recordsRunID, Step: name, Kind: records.KindLog}).Validate(); err != nil {
		return err
	}
	var owner *metav1.OwnerReference
	if o.recordsRunUID != "" {
		owner = &metav1.OwnerReference{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: o.recordsRun, UID: types.UID(o.recordsRunUID)}
	}
	// The log and the plans made for people in TerraformRunRecords, which
	// opr8r's approvers and editors may read; the plan in clear in a Secret.
	store := records.NewRouter(r.Kube.Client, owner)
	// Records in clear are Secrets, reached through the state API.
	store.Secrets = &records.SecretStore{Client: r.Kube.State, Owner: owner}
	store.Warn = func(msg string) { fmt.Fprintln(r.Out, "opr8r-step: warning: "+r.Redact(msg)) }
	r.Records = store
	if cmd == "apply" || cmd == names.StepRestoreState {
		// A state the backend does not take is kept as a record of the
		// TerraformRun (apply: Secrets, gzipped and chunked), which the
		// next run's restore-state step pushes, as the runner.
		r.KeptStates = &step.StateKeeper{Records: store, Key: r.RecordKey, Owner: owner}
	}
	return nil
}

// planOptions are the plan's options from the flags.
func planOptions(o *options) (step.PlanOptions, error) {
	plan := step.PlanOptions{PlanFile: o.planFile, VarsFile: o.varsFile, VarsDirs: o.varsDirs, SecretVarsDirs: o.secretVarsDirs,
		Destroy: o.destroy, PlanSecret: o.planSecret, InputsSalt: o.inputsSalt, CheckInputDir: o.checkInputDir}
	for _, v := range o.depVars {
		d, err := results.ParseDependencyVar(v)
		if err != nil {
			return plan, err
		}
		plan.DependencyVars = append(plan.DependencyVars, d)
	}
	return plan, nil
}

// dispatch runs the step; args are the arguments after the flags (a
// check's command).
func dispatch(ctx context.Context, r *step.Runner, cmd string, o *options, args []string, out io.Writer) error {
	mod := step.Module{Dir: o.moduleDir, Workspace: o.workspace}
	be := step.Backend{Type: o.backend, Namespace: o.backendNS, SecretSuffix: o.backendSuffix, ConfigFile: o.backendConfig,
		InCluster: os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBE_CONFIG_PATH") == "", Kubeconfig: o.stateKubeconfig}
	plan, err := planOptions(o)
	if err != nil {
		return err
	}
	switch cmd {
	case "install":
		return install(o.dest, out)
	case "results":
		return publishResults(o.resultsDir, out)
	case "clone":
		co := step.CloneOptions{Source: o.source, URL: o.url, Ref: o.ref, CredentialsDir: o.credsDir, Insecure: o.insecure, From: o.from, Dest: o.dest, VarsOut: o.varsOut}
		if o.inputsEnv != "" {
			co.Inputs = os.Getenv(o.inputsEnv)
		}
		return r.Clone(ctx, co)
	case "init":
		// Only the namespace's shared cache, mounted at SharedPluginCacheDir,
		// is written by other runs; the workspace's is this run's own.
		if d := os.Getenv("TF_PLUGIN_CACHE_DIR"); d != "" && filepath.Clean(d) != names.SharedPluginCacheDir {
			r.PluginCacheInWorkspace = true
		}
		return r.Init(ctx, mod, be)
	case names.StepRestoreState:
		return r.RestoreState(ctx, o.workspace, be)
	case "plan":
		_, err = r.Plan(ctx, mod, plan)
		return err
	case "apply":
		if o.awaitApproval {
			c := step.ApprovalCheck{Run: o.recordsRun, RunUID: o.recordsRunUID, RunID: o.recordsRunID, Wait: o.approvalWait}
			if err := r.AwaitApproval(ctx, c, o.approved); err != nil {
				return err
			}
		}
		return r.Apply(ctx, mod, o.planFile, o.approved)
	case "destroy":
		return r.Destroy(ctx, mod, plan)
	case "export-outputs":
		_, err = r.ExportOutputs(ctx, mod, o.outputsSecret)
		return err
	case "check":
		return r.Check(ctx, step.CheckOptions{Name: o.checkName, Dir: o.moduleDir, PlanJSON: o.planJSON, OutputSecret: o.outputSecret, Command: args})
	case "cleanup":
		if o.holderPrefix == "" {
			o.holderPrefix = o.ownerName
		}
		what, err := r.Cleanup(ctx, mod, be, o.holderPrefix)
		if err == nil {
			fmt.Fprintln(out, "opr8r-step: cleanup: "+r.Redact(what))
		}
		return err
	}
	return fmt.Errorf("unknown step %q", cmd)
}

// publishResults says which results the steps before it in its pod wrote
// to dir: the last container of a pod whose engine reads the results from
// it (Argo reads a containerSet's outputs from its container "main" only).
// No result at all is refused: the steps before it wrote none.
func publishResults(dir string, out io.Writer) error {
	if dir == "" {
		return errors.New("results needs --results-dir")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading the steps' results: %w", err)
	}
	var have []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			have = append(have, e.Name())
		}
	}
	if len(have) == 0 {
		return fmt.Errorf("no step wrote a result to %s", dir)
	}
	fmt.Fprintf(out, "opr8r-step: results published: %s\n", strings.Join(have, ", "))
	return nil
}

// install copies this binary into dest, so steps that run in a stock
// Terraform or OpenTofu image (which has only sh) can run it.
// install copies this binary into dest for the steps that follow, and
// says so: it is the first step of a pod, the one a dashboard shows first
// (the Tekton Dashboard selects it when a PipelineRun opens).
func install(dest string, out io.Writer) error {
	if dest == "" {
		return errors.New("install needs --dest")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	target := filepath.Join(dest, "opr8r-step")
	outF, err := os.OpenFile(target+".tmp", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	n, err := io.Copy(outF, in)
	if err != nil {
		outF.Close()
		return err
	}
	if err := outF.Close(); err != nil {
		return err
	}
	if err := os.Rename(target+".tmp", target); err != nil {
		return err
	}
	fmt.Fprintf(out, "opr8r-step: installed %s (%.1f MiB); the next steps of this pod run it, their logs follow in their own steps\n", target, float64(n)/(1<<20))
	return nil
}

// loadSecrets registers every secret the step's flags point at, before
// anything runs: terraform's environment from Secret keys, the Secrets
// mounted as files, the varsFrom Secrets, and the backend configuration's
// values.
func loadSecrets(r *step.Runner, o *options) error {
	if err := r.LoadEnvFiles(o.envFiles); err != nil {
		return err
	}
	// A varsFrom Secret's files are secrets as they are (plan reads them
	// as variables too; apply only redacts them).
	if err := r.LoadSecretFiles(append(slices.Clone(o.secretFiles), o.secretVarsDirs...)); err != nil {
		return err
	}
	return r.LoadBackendConfig(o.backendConfig)
}

var knownSteps = map[string]bool{
	"install": true, "clone": true, "init": true, "plan": true, "apply": true,
	"destroy": true, "export-outputs": true, "cleanup": true, "check": true,
	"results": true, names.StepRestoreState: true,
}

// options are every step's flags.
type options struct {
	timeout                                                 time.Duration
	dest, source, url, ref, credsDir, from                  string
	moduleDir, workspace, backend, backendNS, backendSuffix string
	backendConfig, planFile, varsFile, planSecret, approved string
	outputsSecret, ownerName, ownerUID, ownerKind, ownerAPI string
	resultsDir, resultsFile, kubeconfig                     string
	namespace, terraformBin                                 string
	termLog, holderPrefix, inputsSalt                       string
	checkInputDir, checkName, outputSecret, planJSON        string
	shard, inputsEnv, varsOut                               string
	recordsRun, recordsRunUID, recordsRunID                 string
	destroy, insecure, awaitApproval                        bool
	approvalWait, stateRetry, lockTimeout                   time.Duration
	noStateLock                                             bool
	stateKubeconfig                                         string
	envFiles, varsDirs, depVars, secretFiles                multi
	// secretVarsDirs are those of varsDirs that are Secrets.
	secretVarsDirs multi
}

// secretVarsDir is --secret-vars-dir: a varsFrom directory that is a
// Secret, kept in varsDirs in the order the flags come in (a later
// varsFrom wins) and in secretVarsDirs.
type secretVarsDir struct{ o *options }

// String is the flag's default: none.
func (s secretVarsDir) String() string { return "" }

// Set adds one directory, in order, to varsDirs and secretVarsDirs.
func (s secretVarsDir) Set(v string) error {
	s.o.varsDirs = append(s.o.varsDirs, v)
	s.o.secretVarsDirs = append(s.o.secretVarsDirs, v)
	return nil
}

// newFlags declares the flags of a step.
func newFlags(cmd string, o *options) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.StringVar(&o.dest, "dest", "", "install: directory to copy opr8r-step into; clone: checkout directory")
	fs.DurationVar(&o.timeout, "timeout", 0, "the step's budget (spec.timeouts): at it, terraform is interrupted and given a few minutes to stop and write its state; 0: none")
	fs.BoolVar(&o.noStateLock, "no-state-lock", false, "init, plan: read the state without its lock and create no workspace (a preview, whose state access is read-only)")
	fs.DurationVar(&o.lockTimeout, "lock-timeout", step.DefaultLockTimeout, "init, plan, apply, destroy: how long terraform waits for the state lock another holds (a scheduled check, a preview, a colleague's plan) before it fails")
	fs.DurationVar(&o.stateRetry, "state-retry", step.DefaultStateRetry, "apply, destroy: how long to keep saving a state the backend did not take before keeping it as the run's kept state (records kind errored.tfstate, in Secrets), which the next run's restore-state step pushes")
	fs.StringVar(&o.source, "source", "git", "clone: git, oci, dir, or inline (the files in --inputs-env)")
	fs.StringVar(&o.inputsEnv, "inputs-env", "", "clone: environment variable holding the run's inputs (vars.json and inline files) when the child carries them")
	fs.StringVar(&o.varsOut, "vars-out", "", "clone: where to write vars.json from --inputs-env")
	fs.StringVar(&o.url, "url", "", "clone: repository URL (oci://registry/repository for oci)")
	fs.StringVar(&o.ref, "ref", "main", "clone: branch, tag or full commit SHA (git); tag or sha256: digest (oci)")
	fs.StringVar(&o.credsDir, "credentials-dir", "", "clone: mounted git or registry credentials Secret")
	fs.BoolVar(&o.insecure, "insecure", false, "clone: the OCI registry is served over plain HTTP")
	fs.StringVar(&o.from, "from", "", "clone: directory of a dir source")
	fs.StringVar(&o.moduleDir, "module-dir", "", "the Terraform module directory")
	fs.StringVar(&o.workspace, "workspace", "default", "the Terraform workspace")
	fs.StringVar(&o.backend, "backend", "kubernetes", "state backend type")
	fs.StringVar(&o.backendNS, "backend-namespace", "", "kubernetes backend: namespace of the state Secret")
	fs.StringVar(&o.backendSuffix, "backend-secret-suffix", "", "kubernetes backend: state Secret suffix")
	fs.StringVar(&o.backendConfig, "backend-config-file", "", "other backends: the -backend-config file of init; in every step, its values are redacted")
	fs.StringVar(&o.planFile, "plan-file", "", "the saved plan")
	fs.StringVar(&o.varsFile, "vars-file", "", "plan: JSON variables")
	fs.Var(&o.varsDirs, "vars-dir", "plan: a mounted ConfigMap of variables (repeatable; with --secret-vars-dir, in varsFrom order)")
	fs.Var(secretVarsDir{o}, "secret-vars-dir", "a mounted Secret of variables (varsFrom), whose values are redacted; plan reads them (repeatable; with --vars-dir, in varsFrom order)")
	fs.Var(&o.secretFiles, "secret-files", "a directory of a Secret mounted as files (terraform.files' mountPath): every file's content is redacted (repeatable)")
	fs.Var(&o.depVars, "dependency-var", "plan: VAR,run=RUN,output=KEY,file=PATH|secret=NS/NAME[,sensitive]: a variable from a dependency's outputs (repeatable)")
	fs.BoolVar(&o.destroy, "destroy", false, "plan: plan a destroy")
	fs.StringVar(&o.planSecret, "plan-secret", "", "plan: Secret for the readable plan")
	fs.StringVar(&o.approved, "approved-digest", "", "apply: the approved plan digest")
	fs.BoolVar(&o.awaitApproval, "await-approval", false, "apply: apply only once the TerraformRun's status (--records-run, --records-run-uid) records the approval of --approved-digest for this run (--records-run-id), or that it runs without a gate")
	fs.DurationVar(&o.approvalWait, "approval-wait", 5*time.Minute, "apply: how long to wait for that record before refusing")
	fs.StringVar(&o.inputsSalt, "inputs-salt", "", "plan: salt of the inputs digest (the TerraformRun's uid)")
	fs.StringVar(&o.checkInputDir, "check-input-dir", "", "plan: directory for plan.json and plan.txt, which the run's checks read")
	fs.StringVar(&o.checkName, "name", "", "check: the check's name")
	fs.StringVar(&o.outputSecret, "output-secret", "", "check: Secret for the check's output")
	fs.StringVar(&o.planJSON, "plan-json", "/workspace/plan/plan.json", "check: the plan the check reads; the check does not start without it")
	fs.StringVar(&o.outputsSecret, "outputs-secret", "", "export-outputs: Secret for terraform's outputs")
	fs.StringVar(&o.ownerName, "owner-name", "", "the child that owns written Secrets")
	fs.StringVar(&o.ownerUID, "owner-uid", "", "the child's uid")
	fs.StringVar(&o.ownerKind, "owner-kind", "", "the child's kind, for example Workflow")
	fs.StringVar(&o.ownerAPI, "owner-api-version", "", "the child's apiVersion, for example argoproj.io/v1alpha1")
	fs.StringVar(&o.shard, "shard", "", "the run's shard (label sharding.opr8r.io/key), put on the Secrets the step writes")
	fs.StringVar(&o.holderPrefix, "lock-holder-prefix", "", "cleanup: release only locks held from hosts with this prefix (the child's pods); defaults to --owner-name")
	fs.StringVar(&o.resultsDir, "results-dir", "", "directory for small results, one file each")
	fs.StringVar(&o.resultsFile, "results-file", "", "file for small results, as one JSON object (instead of --results-dir)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig (default: in-cluster)")
	fs.StringVar(&o.namespace, "namespace", "", "namespace of written Secrets (default: the pod's)")
	fs.StringVar(&o.terraformBin, "terraform", "", "terraform or tofu binary (default: found on PATH)")
	fs.StringVar(&o.termLog, "termination-log", "/dev/termination-log", "where the failure summary goes")
	fs.StringVar(&o.recordsRun, "records-run", "", "the TerraformRun whose records (this step's log, the plans) the step keeps")
	fs.StringVar(&o.recordsRunUID, "records-run-uid", "", "the TerraformRun's uid: it owns the records")
	fs.StringVar(&o.recordsRunID, "records-run-id", "", "the run's id (its engine object's name)")
	fs.Var(&o.envFiles, "env-file", "NAME=PATH: terraform's env var NAME from a mounted Secret file (repeatable)")
	return fs
}

// crossNamespace says whether a dependency variable is read through the
// API (a dependency in another namespace).
func crossNamespace(depVars []string) bool {
	for _, v := range depVars {
		if d, err := results.ParseDependencyVar(v); err == nil && d.Secret != "" {
			return true
		}
	}
	return false
}

// serviceAccountNamespaceFile holds the pod's namespace in every pod with a
// service account token.
var serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// secretsNamespace is where the step writes Secrets: --namespace, else the
// backend's namespace, else the pod's own.
func secretsNamespace(flagNS, backendNS string) string {
	if flagNS != "" {
		return flagNS
	}
	if backendNS != "" {
		return backendNS
	}
	if b, err := os.ReadFile(serviceAccountNamespaceFile); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}
