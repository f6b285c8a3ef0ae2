// Package plugin is `kubectl tfrun`: list runs, show plans and outputs,
// approve, reject and rerun, render a run offline, and find step logs. It
// uses the user's kubeconfig and kubectl's context flags.
package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/opr8r/opr8r/pkg/results"

	"github.com/opr8r/opr8r/pkg/names"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/gate"
	"github.com/opr8r/opr8r/pkg/records"
)

// FieldManager is the field manager of the plugin's writes.
const FieldManager = "kubectl-tfrun"

// Options are the plugin's shared options.
type Options struct {
	genericiooptions.IOStreams
	Flags  *genericclioptions.ConfigFlags
	Output string

	// Engines are the engines the manager has (engines.All, from cmd/).
	Engines []engine.Engine

	// Client and Clientset are set in tests; otherwise built from Flags.
	Client    client.Client
	Clientset kubernetes.Interface
	Now       func() time.Time
	// RestoreWait is how long to wait for the manager to bring records
	// back from the object store (15s when 0).
	RestoreWait time.Duration
}

func (o *Options) now() time.Time { return engine.Now(o.Now) }

func (o *Options) clients() (client.Client, kubernetes.Interface, string, error) {
	ns, _, err := o.Flags.ToRawKubeConfigLoader().Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	if o.Client != nil {
		return o.Client, o.Clientset, ns, nil
	}
	cfg, err := o.Flags.ToRESTConfig()
	if err != nil {
		return nil, nil, "", fmt.Errorf("no cluster: %w", err)
	}
	scheme, err := engine.Scheme(o.Engines)
	if err != nil {
		return nil, nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, "", err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, "", err
	}
	o.Client, o.Clientset = c, cs
	return c, cs, ns, nil
}

// NewCommand returns `kubectl tfrun` with its subcommands.
func NewCommand(o *Options) *cobra.Command {
	root := &cobra.Command{
		Use:           "kubectl-tfrun",
		Short:         "Work with opr8r TerraformRuns: plans, approvals, outputs and logs",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	if o.Flags == nil {
		o.Flags = genericclioptions.NewConfigFlags(true)
	}
	o.Flags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVarP(&o.Output, "output", "o", "", "Output format: json or yaml (default: human); graph also takes dot")
	root.AddCommand(o.listCommand(), o.planCommand(), o.approveCommand(), o.rejectCommand(),
		&cobra.Command{Use: "rerun NAME", Short: "Start a new run of the unchanged spec", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error { return o.rerun(cmd.Context(), args[0]) }},
		&cobra.Command{Use: "checks NAME", Short: "Show the result and output of each of the current run's checks (spec.checks)", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error { return o.checks(cmd.Context(), args[0]) }},
		o.outputsCommand(), newRenderCommand(o), o.logsCommand(), newHistoryCommand(o), newGraphCommand(o), newPolicyCommand(o), o.keptStateCommand())
	return root
}

func (o *Options) listCommand() *cobra.Command {
	var allNamespaces bool
	list := &cobra.Command{
		Use: "list", Aliases: []string{"get", "ls"}, Short: "List runs with engine, phase, plan and current step",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.list(cmd.Context(), args, allNamespaces) },
	}
	list.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "List runs in every namespace")
	return list
}

func (o *Options) approveCommand() *cobra.Command {
	var pin string
	var override bool
	approve := &cobra.Command{
		Use: "approve NAME", Short: "Approve the plan waiting at the gate (bound to its digest)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.approve(cmd.Context(), args[0], pin, override) },
	}
	approve.Flags().StringVar(&pin, "plan", "", "Approve only if the waiting plan has this digest")
	approve.Flags().BoolVar(&override, "override-change-windows", false, "Let the plan apply now though spec.approval.windows hold it (a policy admin's right; recorded in the run's status)")
	return approve
}

func (o *Options) rejectCommand() *cobra.Command {
	var reason string
	reject := &cobra.Command{
		Use: "reject NAME", Short: "Reject the plan waiting at the gate", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.reject(cmd.Context(), args[0], reason) },
	}
	reject.Flags().StringVar(&reason, "reason", "", "Why (shown in status)")
	_ = reject.MarkFlagRequired("reason")
	return reject
}

func (o *Options) outputsCommand() *cobra.Command {
	var showSensitive bool
	outputs := &cobra.Command{
		Use: "outputs NAME", Short: "Show outputs; sensitive values only with --show-sensitive", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.outputs(cmd.Context(), args[0], showSensitive) },
	}
	outputs.Flags().BoolVar(&showSensitive, "show-sensitive", false, "Show the values of sensitive outputs")
	return outputs
}

func (o *Options) logsCommand() *cobra.Command {
	var step, runID string
	logs := &cobra.Command{
		Use: "logs NAME", Short: "Show a step's log: from its pod while it runs, else as kept after the run (any run in the history)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.logs(cmd.Context(), args[0], runID, step) },
	}
	logs.Flags().StringVar(&step, "step", names.StepPlan, "The step: clone, init, plan, check-<name>, apply, export-outputs or cleanup")
	logs.Flags().StringVar(&runID, "run", "", "The run's id (kubectl tfrun history's ID column); default the latest run")
	return logs
}

func (o *Options) planCommand() *cobra.Command {
	var planRun string
	var planJSON, sensitive bool
	plan := &cobra.Command{Use: "plan NAME", Short: "Show the readable plan of the run's current plan, whole (or of any run in the history), only if it is the one the plan step wrote", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind := records.KindPlanText
			switch {
			case sensitive && !planJSON:
				return errors.New("--show-sensitive shows the plan as JSON with its sensitive values: give --json too")
			case sensitive:
				kind = records.KindPlanJSONSensitive
			case planJSON:
				kind = records.KindPlanJSON
			}
			return o.plan(cmd.Context(), args[0], planRun, kind)
		}}
	plan.Flags().StringVar(&planRun, "run", "", "The run's id (kubectl tfrun history's ID column); default the run of the current plan")
	plan.Flags().BoolVar(&planJSON, "json", false, "Print the plan as JSON (terraform show -json) as kept after the run, its sensitive values masked")
	plan.Flags().BoolVar(&sensitive, "show-sensitive", false, "With --json: print the plan as JSON as terraform wrote it, sensitive values in clear (needs the right to read Secrets in the namespace)")
	return plan
}

func (o *Options) get(ctx context.Context, name string) (*infrav1.TerraformRun, client.Client, kubernetes.Interface, error) {
	c, cs, ns, err := o.clients()
	if err != nil {
		return nil, nil, nil, err
	}
	run := &infrav1.TerraformRun{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, run); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil, fmt.Errorf("TerraformRun %q not found in namespace %q", name, ns)
		}
		return nil, nil, nil, err
	}
	return run, c, cs, nil
}

// print writes v as JSON or YAML when -o asks for it; it reports whether it did.
func (o *Options) print(v any) (bool, error) {
	switch o.Output {
	case "":
		return false, nil
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return true, err
		}
		_, err = fmt.Fprintln(o.Out, string(b))
		return true, err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = o.Out.Write(b)
		return true, err
	default:
		return true, fmt.Errorf("unknown output format %q: use json or yaml", o.Output)
	}
}

// RunRow is one line of `kubectl tfrun list`.
type RunRow struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Engine    string `json:"engine"`
	Phase     string `json:"phase"`
	Plan      string `json:"plan"`
	// Approvals is "approved/required" for the latest plan, e.g. 1/2.
	Approvals string `json:"approvals,omitempty"`
	Step      string `json:"step"`
	Ready     string `json:"ready"`
	Age       string `json:"age"`
}

func currentStep(run *infrav1.TerraformRun) string {
	if run.Status.Run == nil {
		return ""
	}
	last := ""
	for _, s := range run.Status.Run.Steps {
		switch s.Phase {
		case infrav1.StepRunning:
			return s.Name
		case infrav1.StepFailed:
			return s.Name + " (failed)"
		case infrav1.StepSucceeded:
			last = s.Name
		}
	}
	return last
}

func (o *Options) list(ctx context.Context, args []string, all bool) error {
	c, _, ns, err := o.clients()
	if err != nil {
		return err
	}
	runs := &infrav1.TerraformRunList{}
	var opts []client.ListOption
	if !all {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := c.List(ctx, runs, opts...); err != nil {
		return err
	}
	var rows []RunRow
	for _, r := range runs.Items {
		if len(args) == 1 && r.Name != args[0] {
			continue
		}
		row := RunRow{Namespace: r.Namespace, Name: r.Name, Phase: r.Status.Phase, Plan: r.Status.PlanSummary, Step: currentStep(&r),
			Age: duration.HumanDuration(o.now().Sub(r.CreationTimestamp.Time))}
		if r.Status.Run != nil {
			row.Engine = string(r.Status.Run.Engine)
		}
		if a := r.Status.Approvals; a != nil && r.Status.Plan != nil && a.Digest == r.Status.Plan.Digest {
			row.Approvals = a.Summary
		}
		if c := apimeta.FindStatusCondition(r.Status.Conditions, infrav1.ReadyCondition); c != nil {
			row.Ready = string(c.Status)
		}
		rows = append(rows, row)
	}
	if len(args) == 1 && len(rows) == 0 {
		return fmt.Errorf("TerraformRun %q not found in namespace %q", args[0], ns)
	}
	if done, err := o.print(rows); done {
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintf(o.ErrOut, "No TerraformRuns found in namespace %s.\n", ns)
		return nil
	}
	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	if all {
		fmt.Fprint(w, "NAMESPACE\t")
	}
	fmt.Fprintln(w, "NAME\tENGINE\tPHASE\tPLAN\tAPPROVALS\tSTEP\tREADY\tAGE")
	for _, r := range rows {
		if all {
			fmt.Fprintf(w, "%s\t", r.Namespace)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, dash(r.Engine), dash(r.Phase), dash(r.Plan), dash(r.Approvals), dash(r.Step), dash(r.Ready), r.Age)
	}
	return w.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ErrNoPlan says the run has no plan yet.
var ErrNoPlan = errors.New("no plan")

// plan prints a run's plan: whole, from the records the plan step kept;
// for a run from before records, from its plan Secret (cut at 1 MiB). It
// shows a plan only when its bytes match the digest the plan step recorded
// in the TerraformRun's status (which only opr8r's manager writes): what
// an approver reads is what the plan step wrote, whoever could write the
// record afterwards.
func (o *Options) plan(ctx context.Context, name, runID string, kind records.Kind) error {
	run, c, cs, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	p, err := planOfRun(run, runID)
	if err != nil {
		return err
	}
	text, err := o.keptRecord(ctx, c, cs, run, records.Key{Namespace: run.Namespace, Run: run.Name, RunID: p.RunID, Step: names.StepPlan, Kind: kind})
	switch {
	case err == nil:
	case kind == records.KindPlanJSONSensitive && apierrors.IsForbidden(err):
		return fmt.Errorf("%w in namespace %s, which you do not have: the plan as JSON of run %s with its sensitive values in clear is kept only in a Secret; kubectl tfrun plan %s --json shows it with them masked (%v)",
			ErrSensitiveForbidden, run.Namespace, p.RunID, name, err)
	case errors.Is(err, records.ErrNotFound) && kind == records.KindPlanText:
		sec, serr := cs.CoreV1().Secrets(run.Namespace).Get(ctx, names.PlanSecretName(p.RunID), metav1.GetOptions{})
		if apierrors.IsNotFound(serr) {
			return fmt.Errorf("the readable plan of run %s is gone (it is no longer in the history, or its %s was pruned before opr8r kept plans); start a new run with kubectl tfrun rerun %s", p.RunID, childKind(run), name)
		}
		if apierrors.IsForbidden(serr) {
			return fmt.Errorf("the readable plan of run %s is not kept as a TerraformRunRecord (%v), and its plan Secret %s, which runs planned before opr8r kept plans have, needs the right to read Secrets in namespace %s: %w",
				p.RunID, err, names.PlanSecretName(p.RunID), run.Namespace, serr)
		}
		if serr != nil {
			return serr
		}
		text = sec.Data["plan.txt"]
	case errors.Is(err, records.ErrNotFound):
		return fmt.Errorf("the %s of run %s is not kept (pruned with the history, or made before opr8r kept plans)", kindName(kind), p.RunID)
	default:
		return err
	}
	if err := verifyPlan(p, kind, text); err != nil {
		return err
	}
	if kind != records.KindPlanText {
		_, err = o.Out.Write(text)
		return err
	}
	if done, err := o.print(map[string]string{"runID": p.RunID, "digest": p.Digest, "textDigest": p.TextDigest, "summary": p.Summary, "plan": string(text)}); done {
		return err
	}
	fmt.Fprintf(o.Out, "# plan %s (%s) of run %s, verified: the readable plan has the digest its plan step recorded (%s)\n\n", p.Digest, p.Summary, p.RunID, p.TextDigest)
	_, err = o.Out.Write(text)
	return err
}

// ErrSensitiveForbidden refuses the plan as JSON in clear to a user who
// may not read Secrets in the run's namespace, where it is kept.
var ErrSensitiveForbidden = errors.New("the plan with its sensitive values needs the right to read Secrets")

// ErrPlanNotVerified refuses to show a plan record that is not the one the
// plan step wrote.
var ErrPlanNotVerified = errors.New("the plan record is not verified")

// verifyPlan checks a plan record against the digest its plan step
// recorded in status.
func verifyPlan(p *infrav1.PlanStatus, kind records.Kind, b []byte) error {
	want := map[records.Kind]string{records.KindPlanText: p.TextDigest, records.KindPlanJSON: p.JSONDigest, records.KindPlanJSONSensitive: p.SensitiveJSONDigest}[kind]
	if want == "" {
		return fmt.Errorf("%w: run %s recorded no digest of its %s (it was planned before opr8r recorded them), so it is not shown; plan again with kubectl tfrun rerun", ErrPlanNotVerified, p.RunID, kindName(kind))
	}
	if got := records.Digest(b); got != want {
		return fmt.Errorf("%w: refusing to show the %s of run %s: its digest is %s, but its plan step recorded %s in the TerraformRun's status; it was changed after the plan step wrote it (or cut short: a plan kept only in its Secret is cut at 1 MiB). Do not approve plan %s on what you read elsewhere; plan again with kubectl tfrun rerun",
			ErrPlanNotVerified, kindName(kind), p.RunID, got, want, p.Digest)
	}
	return nil
}

// kindName says what a plan record holds.
func kindName(k records.Kind) string {
	switch k {
	case records.KindPlanJSON:
		return "plan as JSON"
	case records.KindPlanJSONSensitive:
		return "plan as JSON with its sensitive values"
	}
	return "readable plan"
}

// keptRecord reads a record from the run's namespace: the log, the
// readable plan and the plan as JSON masked from TerraformRunRecords (which
// opr8r-approver and opr8r-editor may read; from Secrets for runs recorded
// before them), the plan as JSON in clear from Secrets (records.Router).
// One that is not there, of a finished run still in the history, may have
// moved to the object store: the manager is asked to bring that run's
// records back for a while (annotation infra.opr8r.io/records-request),
// and it is waited for. Without an object store the manager does nothing,
// and the record is reported not kept.
func (o *Options) keptRecord(ctx context.Context, c client.Client, cs kubernetes.Interface, run *infrav1.TerraformRun, k records.Key) ([]byte, error) {
	store := records.NewRouter(cs, nil)
	b, err := store.Get(ctx, k)
	if err == nil || !errors.Is(err, records.ErrNotFound) || !inHistory(run, k.RunID) {
		return b, err
	}
	req := k.RunID + "@" + o.now().UTC().Format(time.RFC3339Nano)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{infrav1.RecordsRequestAnnotation: req}}})
	if perr := c.Patch(ctx, run, client.RawPatch("application/merge-patch+json", patch), client.FieldOwner(FieldManager)); perr != nil {
		return nil, fmt.Errorf("%w (asking the manager to bring it back from an object store failed: %v)", err, perr)
	}
	wait := o.RestoreWait
	if wait == 0 {
		wait = 15 * time.Second
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
		if b, err = store.Get(ctx, k); !errors.Is(err, records.ErrNotFound) {
			return b, err
		}
	}
	return nil, fmt.Errorf("%w, and the manager brought none back from an object store within %s", err, wait)
}

func inHistory(run *infrav1.TerraformRun, runID string) bool {
	for _, h := range run.Status.History {
		if h.ID == runID {
			return true
		}
	}
	return false
}

// planOfRun is the plan of the run with that id (from status or the
// history), or the current plan.
func planOfRun(run *infrav1.TerraformRun, runID string) (*infrav1.PlanStatus, error) {
	if runID == "" || (run.Status.Plan != nil && run.Status.Plan.RunID == runID) {
		if run.Status.Plan == nil {
			return nil, fmt.Errorf("%w: TerraformRun %s has no plan yet (phase %s)", ErrNoPlan, run.Name, dash(run.Status.Phase))
		}
		return run.Status.Plan, nil
	}
	for _, h := range run.Status.History {
		if h.ID == runID {
			if h.Plan == nil {
				return nil, fmt.Errorf("%w: run %s of TerraformRun %s has no plan (it ended %s before planning)", ErrNoPlan, runID, run.Name, h.Result)
			}
			return h.Plan, nil
		}
	}
	return nil, fmt.Errorf("TerraformRun %s has no run %s in its history (kubectl tfrun history %s lists them)", run.Name, runID, run.Name)
}

// CheckResult is one check of a run, as `kubectl tfrun checks` shows it.
type CheckResult struct {
	Name     string `json:"name"`
	Phase    string `json:"phase"`
	Message  string `json:"message,omitempty"`
	ExitCode string `json:"exitCode,omitempty"`
	Output   string `json:"output,omitempty"`
}

// checks shows the current run's checks: their step phase and message,
// and the output each kept in its Secret.
func (o *Options) checks(ctx context.Context, name string) error {
	run, _, cs, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	if len(run.Spec.Checks) == 0 {
		return fmt.Errorf("TerraformRun %s has no spec.checks", name)
	}
	if run.Status.Run == nil {
		return fmt.Errorf("TerraformRun %s has not run yet", name)
	}
	var out []CheckResult
	for _, st := range run.Status.Run.Steps {
		if !names.IsCheck(st.Name) {
			continue
		}
		r := CheckResult{Name: strings.TrimPrefix(st.Name, names.CheckPrefix), Phase: string(st.Phase), Message: st.Message}
		sec, err := cs.CoreV1().Secrets(run.Namespace).Get(ctx, names.CheckSecretName(run.Status.Run.ID, r.Name), metav1.GetOptions{})
		switch {
		case err == nil:
			r.ExitCode, r.Output = string(sec.Data["exit-code"]), string(sec.Data["output.txt"])
		case !apierrors.IsNotFound(err):
			return err
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return fmt.Errorf("run %s of TerraformRun %s has run no check yet (phase %s; checks run only for a plan with changes)", run.Status.Run.ID, name, run.Status.Run.Phase)
	}
	if done, err := o.print(out); done {
		return err
	}
	for _, r := range out {
		fmt.Fprintf(o.Out, "# check %s: %s", r.Name, r.Phase)
		if r.ExitCode != "" {
			fmt.Fprintf(o.Out, " (exit code %s)", r.ExitCode)
		}
		fmt.Fprintln(o.Out)
		if r.Output == "" && r.Message != "" {
			fmt.Fprintln(o.Out, r.Message)
		}
		fmt.Fprint(o.Out, r.Output)
		if r.Output != "" && !strings.HasSuffix(r.Output, "\n") {
			fmt.Fprintln(o.Out)
		}
		fmt.Fprintln(o.Out)
	}
	return nil
}

func childKind(run *infrav1.TerraformRun) string {
	if run.Status.Run != nil {
		return run.Status.Run.Child.Kind
	}
	return "engine object"
}

// waiting returns the digest of the plan waiting at the gate.
func waiting(run *infrav1.TerraformRun) (string, error) {
	if run.Status.Run == nil || run.Status.Run.Phase != infrav1.RunAwaitingApproval || run.Status.Plan == nil {
		phase := "no run"
		if run.Status.Run != nil {
			phase = string(run.Status.Run.Phase)
		}
		return "", fmt.Errorf("nothing to approve: TerraformRun %s has no plan waiting for approval (run phase: %s)", run.Name, phase)
	}
	return run.Status.Plan.Digest, nil
}

// wouldNotCount says why the manager would not count v, a vote about the
// plan digest ("" when it would, or when the votes cannot be read: the
// manager decides then). It asks the gate the manager asks (gate.Counts),
// with the input the manager recorded for the plan (gate.Recorded): the
// combined policy, each layer's approvals and the rules that matched.
func wouldNotCount(ctx context.Context, c client.Client, run *infrav1.TerraformRun, digest string, v gate.Vote) string {
	list := &infrav1.TerraformRunApprovalList{}
	if err := c.List(ctx, list, client.InNamespace(run.Namespace)); err != nil {
		return ""
	}
	in, recorded := gate.Recorded(run, digest, gate.VotesOf(run, list.Items, digest), v.At)
	if !recorded {
		// The manager has not counted the plan yet: only the policy's
		// own bar (approvers, self-approval) is known.
		return gate.Ignored(in, v)
	}
	if ok, why := gate.Counts(in, v); !ok {
		return why
	}
	return ""
}

func (o *Options) approve(ctx context.Context, name, pin string, override bool) error {
	run, c, cs, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	digest, err := waiting(run)
	if err != nil {
		return err
	}
	if pin != "" && pin != digest {
		return fmt.Errorf("wrong digest: you approved %s, but the plan waiting is %s (%s); review it with kubectl tfrun plan %s", pin, digest, run.Status.Plan.Summary, name)
	}
	if user, groups := whoAmI(ctx, cs); user != "" {
		if why := wouldNotCount(ctx, c, run, digest, gate.Vote{User: user, Groups: groups, Approve: true, Source: "kubectl tfrun approve", At: time.Now(), Override: override}); why != "" {
			return fmt.Errorf("%w: an approval of plan %s of TerraformRun %s by %s would not count: %s; nothing was recorded (kubectl tfrun list shows who has approved)",
				ErrNotCounted, digest, name, user, why)
		}
	}
	a, err := o.decide(ctx, c, cs, run, digest, infrav1.DecisionApprove, "", override)
	if err != nil {
		return err
	}
	note := policyNote(run)
	if override {
		note += "; it may apply outside its change windows (spec.approval.windows)"
	}
	fmt.Fprintf(o.Out, "approved plan %s (%s) of TerraformRun %s as %s (TerraformRunApproval %s)%s\n", digest, run.Status.Plan.Summary, name, who(a), a.Name, note)
	return nil
}

// ErrNotCounted is returned by approve when the run's approval policy would
// not count the caller's approval (spec.approval.approvers,
// selfApproval): nothing is recorded, and the command exits non-zero.
var ErrNotCounted = errors.New("not counted")

// whoAmI is the caller as the API server authenticates them (a
// SelfSubjectReview); empty when it cannot tell.
func whoAmI(ctx context.Context, cs kubernetes.Interface) (string, []string) {
	if cs == nil {
		return "", nil
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", nil
	}
	return r.Status.UserInfo.Username, r.Status.UserInfo.Groups
}

func (o *Options) reject(ctx context.Context, name, reason string) error {
	run, c, cs, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	digest, err := waiting(run)
	if err != nil {
		return errors.New(strings.Replace(err.Error(), "nothing to approve", "nothing to reject", 1))
	}
	a, err := o.decide(ctx, c, cs, run, digest, infrav1.DecisionReject, reason, false)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "rejected plan %s of TerraformRun %s as %s (TerraformRunApproval %s): %s\n", digest, name, who(a), a.Name, reason)
	return nil
}

// decide creates a TerraformRunApproval: one user's decision about one
// plan, owned by the run (deleted with it). The API server stamps the user
// at admission; the user is also filled in from a SelfSubjectReview, which
// the API server checks, so a cluster with the validating policy but not
// the mutating one accepts it too.
func (o *Options) decide(ctx context.Context, c client.Client, cs kubernetes.Interface, run *infrav1.TerraformRun, digest string, d infrav1.Decision, reason string, override bool) (*infrav1.TerraformRunApproval, error) {
	a := &infrav1.TerraformRunApproval{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: run.Name + "-", Namespace: run.Namespace,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: run.Name, UID: run.UID}},
		},
		Spec: infrav1.TerraformRunApprovalSpec{RunName: run.Name, PlanDigest: digest, Decision: d, Reason: reason, OverrideChangeWindows: override},
	}
	a.Spec.User, a.Spec.Groups = whoAmI(ctx, cs)
	if err := c.Create(ctx, a, client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("%w (deciding a plan needs the right to create terraformrunapprovals in namespace %s: the opr8r-approver role, see docs/approvals.md)", err, run.Namespace)
		}
		return nil, err
	}
	return a, nil
}

func who(a *infrav1.TerraformRunApproval) string {
	if a.Spec.User == "" {
		return "an unknown user (no identity stamped: are opr8r's admission policies installed?)"
	}
	return a.Spec.User
}

// policyNote says what the run's approval policy still asks for: the
// manager's tally of the waiting plan when there is one (it counts the
// Require rules, which can ask more than requiredApprovals), else
// requiredApprovals.
func policyNote(run *infrav1.TerraformRun) string {
	if t := run.Status.Approvals; t != nil && run.Status.Plan != nil && t.Digest == run.Status.Plan.Digest {
		if rem := gate.Remaining(t); rem != "" {
			return "; before this approval, " + rem + " (kubectl tfrun list shows the count)"
		}
		return ""
	}
	if n := run.Spec.Approval.RequiredApprovals; n > 1 {
		return fmt.Sprintf("; the plan needs %d approvals by distinct users (kubectl tfrun list shows the count)", n)
	}
	return ""
}

func (o *Options) rerun(ctx context.Context, name string) error {
	run, c, _, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	stamp := o.now().UTC().Format(time.RFC3339Nano)
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{infrav1.RunRequestAnnotation: stamp}}})
	if err := c.Patch(ctx, run, client.RawPatch("application/merge-patch+json", b), client.FieldOwner(FieldManager)); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "requested a new run of TerraformRun %s (%s=%s)\n", name, infrav1.RunRequestAnnotation, stamp)
	return nil
}

// OutputRow is one output of `kubectl tfrun outputs`.
type OutputRow struct {
	Key       string `json:"key"`
	Output    string `json:"output,omitempty"`
	Sensitive *bool  `json:"sensitive,omitempty"`
	Value     string `json:"value,omitempty"`
}

func (o *Options) outputs(ctx context.Context, name string, showSensitive bool) error {
	run, _, cs, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	if run.Status.OutputsSecretName == "" {
		return fmt.Errorf("TerraformRun %s has no outputs yet (phase %s)", name, dash(run.Status.Phase))
	}
	var rows []OutputRow
	// Sensitivity is known from the run's raw outputs while its child exists.
	raw, rawErr := cs.CoreV1().Secrets(run.Namespace).Get(ctx, names.RawOutputsSecretName(run.Status.Run.ID), metav1.GetOptions{})
	if rawErr == nil {
		outs, err := results.Outputs(run.Spec.Outputs, raw.Data[results.RawOutputsKey])
		if err != nil {
			return err
		}
		for _, out := range outs {
			s := out.Sensitive
			row := OutputRow{Key: out.Key, Output: out.Name, Sensitive: &s}
			if !s || showSensitive {
				row.Value = string(out.Value)
			}
			rows = append(rows, row)
		}
	} else {
		sec, err := cs.CoreV1().Secrets(run.Namespace).Get(ctx, run.Status.OutputsSecretName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading outputs Secret %s: %w", run.Status.OutputsSecretName, err)
		}
		keys := slices.Sorted(maps.Keys(sec.Data))
		for _, k := range keys {
			row := OutputRow{Key: k}
			if showSensitive {
				row.Value = string(sec.Data[k])
			}
			rows = append(rows, row)
		}
		if !showSensitive {
			fmt.Fprintln(o.ErrOut, "the run's raw outputs are gone, so which outputs are sensitive is unknown: values are hidden; use --show-sensitive")
		}
	}
	if done, err := o.print(rows); done {
		return err
	}
	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "KEY\tVALUE\t(Secret %s)\n", run.Status.OutputsSecretName)
	for _, r := range rows {
		v := r.Value
		if r.Value == "" && r.Sensitive != nil && *r.Sensitive {
			v = "<sensitive>"
		} else if r.Value == "" && r.Sensitive == nil {
			v = "<hidden>"
		}
		fmt.Fprintf(w, "%s\t%s\t\n", r.Key, v)
	}
	return w.Flush()
}

// logs prints a step's log: from its pod while the run is active, and
// otherwise (or when its pod is gone) as the step kept it.
func (o *Options) logs(ctx context.Context, name, runID, step string) error {
	run, c, cs, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	if run.Status.Run == nil {
		return fmt.Errorf("TerraformRun %s has no run yet", name)
	}
	if runID == "" {
		runID = run.Status.Run.ID
	}
	ph := run.Status.Run.Phase
	active := runID == run.Status.Run.ID && ph != infrav1.RunSucceeded && ph != infrav1.RunFailed && ph != infrav1.RunRejected
	kept := func() error {
		b, err := o.keptRecord(ctx, c, cs, run, records.Key{Namespace: run.Namespace, Run: run.Name, RunID: runID, Step: step, Kind: records.KindLog})
		if err != nil {
			return err
		}
		_, err = o.Out.Write(b)
		return err
	}
	if !active {
		err := kept()
		if err == nil || !errors.Is(err, records.ErrNotFound) || runID != run.Status.Run.ID {
			if errors.Is(err, records.ErrNotFound) {
				return fmt.Errorf("no log of step %s of run %s is kept: the step did not run, or the run left the history (kubectl tfrun history %s lists the runs kept)", step, runID, name)
			}
			return err
		}
	}
	return o.podLog(ctx, cs, run, step, active, kept)
}

// podLog prints a step's log from the newest of its pods, as its engine
// says where it is (LogLocator); for an active run without a pod yet, the
// log kept, if any.
func (o *Options) podLog(ctx context.Context, cs kubernetes.Interface, run *infrav1.TerraformRun, step string, active bool, kept func() error) error {
	r := run.Status.Run
	reg, err := engine.NewRegistry(o.Engines...)
	if err != nil {
		return err
	}
	e, ok := reg.Get(r.Engine)
	loc, located := e.(engine.LogLocator)
	if !ok || !located {
		return fmt.Errorf("this kubectl-tfrun cannot find the logs of engine %q runs", r.Engine)
	}
	selector, container := loc.StepLogs(r.ID, step)
	hint := loc.LogsHint(run.Namespace, r.ID)
	pods, err := cs.CoreV1().Pods(run.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if apierrors.IsForbidden(err) {
		// Who may not read pods (opr8r-approver) reads the log the step
		// kept once it ended.
		if kerr := kept(); kerr == nil || !errors.Is(kerr, records.ErrNotFound) {
			return kerr
		}
		return fmt.Errorf("step %s of run %s has kept no log yet (a step keeps it when it ends), and reading its pod's log needs the right to list pods in namespace %s: %w", step, r.ID, run.Namespace, err)
	}
	if err != nil {
		return err
	}
	if len(pods.Items) == 0 {
		if active {
			if err := kept(); err == nil || !errors.Is(err, records.ErrNotFound) {
				return err
			}
		}
		return fmt.Errorf("no pod of step %s of run %s (%s %s) exists and no log of it is kept: it has not started, or its pod was garbage-collected; the engine may still have the logs: %s", step, r.ID, r.Child.Kind, r.ID, hint)
	}
	// The newest pod that runs the step's container: a selector may name
	// several of the run's pods (the Job engine's step Jobs carry the steps
	// after them).
	pods.Items = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return !hasContainer(p.Spec, container) })
	if len(pods.Items) == 0 {
		return fmt.Errorf("no pod of run %s runs step %s yet: %s", r.ID, step, hint)
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[j].CreationTimestamp.Before(&pods.Items[i].CreationTimestamp) })
	pod := pods.Items[0]
	stream, err := cs.CoreV1().Pods(run.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container}).Stream(ctx)
	if err != nil {
		return fmt.Errorf("reading logs of pod %s container %s: %w (or try: %s)", pod.Name, container, err, hint)
	}
	defer stream.Close()
	_, err = io.Copy(o.Out, stream)
	return err
}

// hasContainer says whether a pod spec runs a container (or an init
// container) of that name.
func hasContainer(spec corev1.PodSpec, name string) bool {
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		if c.Name == name {
			return true
		}
	}
	return false
}

// Main runs the plugin with the given engines; it is cmd/kubectl-tfrun's
// main.
func Main(engines []engine.Engine) int {
	o := &Options{IOStreams: genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, Engines: engines}
	cmd := NewCommand(o)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}
