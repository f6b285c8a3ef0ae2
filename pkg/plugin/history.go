package plugin

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

func newHistoryCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "history NAME",
		Short: "Show the run history: every recorded run, newest first (-o json|yaml for all fields)",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return o.history(cmd.Context(), args[0]) },
	}
}

func (o *Options) history(ctx context.Context, name string) error {
	run, _, _, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	h := run.Status.History
	if done, err := o.print(h); done {
		return err
	}
	if len(h) == 0 {
		fmt.Fprintf(o.ErrOut, "TerraformRun %s has no finished run yet.\n", name)
		return nil
	}
	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RUN\tID\tTYPE\tTRIGGER\tREVISION\tPLAN\tAPPROVAL\tRESULT\tSTARTED\tDURATION\tMESSAGE")
	for _, r := range h {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Number, r.ID, r.Type, dash(string(r.Trigger)), dash(shortRev(r.Revision)),
			dash(planOf(r.Plan)), dash(approvalOf(r.Approval)), r.Result, o.ago(r), took(r), dash(oneLine(r.Message, 60)))
	}
	return w.Flush()
}

// shortRev shortens a git commit to 12 hex digits, and a digest (an OCI
// artifact's, or a ConfigMap source's) to its algorithm and 12 hex digits.
func shortRev(rev string) string {
	n := 12
	if alg, _, ok := strings.Cut(rev, ":"); ok {
		n += len(alg) + 1
	}
	if len(rev) > n {
		return rev[:n]
	}
	return rev
}

func planOf(p *infrav1.PlanStatus) string {
	if p == nil {
		return ""
	}
	if !p.HasChanges {
		return "no changes"
	}
	return p.Summary
}

// approvalOf says how a run's plan was decided: "Auto", "TerraformRun by
// alice", "Engine by bob", "rejected (Timeout)".
func approvalOf(a *infrav1.ApprovalStatus) string {
	if a == nil {
		return ""
	}
	s := string(a.Source)
	if a.By != "" {
		s += " by " + a.By
	}
	if !a.Approved {
		s = "rejected (" + s + ")"
	}
	return s
}

func (o *Options) ago(r infrav1.RunRecord) string {
	if r.StartedAt == nil {
		return "-"
	}
	return duration.HumanDuration(o.now().Sub(r.StartedAt.Time)) + " ago"
}

func took(r infrav1.RunRecord) string {
	if r.StartedAt == nil || r.FinishedAt == nil {
		return "-"
	}
	return duration.HumanDuration(r.FinishedAt.Sub(r.StartedAt.Time))
}

func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n-3] + "..."
	}
	return s
}
