package plugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/opr8r/opr8r/pkg/records"
)

// keptStateCommand is kubectl tfrun kept-state: it prints a state an
// earlier run kept because its backend did not take it, as terraform wrote
// it, for a person to push with terraform state push.
func (o *Options) keptStateCommand() *cobra.Command {
	var runID string
	cmd := &cobra.Command{
		Use:   "kept-state NAME",
		Short: "Print a state an earlier run kept because its backend did not take it (the oldest, or --run's), for terraform state push; the next run pushes it itself (needs the right to read Secrets)",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return o.keptState(cmd.Context(), args[0], runID) },
	}
	cmd.Flags().StringVar(&runID, "run", "", "The id of the run that kept it (the oldest kept state's by default)")
	return cmd
}

// keptState prints the kept state of run runID of the TerraformRun name,
// or its oldest, and says on stderr which it is and how many are kept.
func (o *Options) keptState(ctx context.Context, name, runID string) error {
	run, _, cs, err := o.get(ctx, name)
	if err != nil {
		return err
	}
	store := records.NewRouter(cs, nil)
	recs, err := records.ListKind(ctx, store, run.Namespace, run.Name, records.KindErroredState)
	if err != nil {
		return err
	}
	kept := records.KeptStates(recs, run.UID)
	if len(kept) == 0 {
		return fmt.Errorf("TerraformRun %s keeps no state a run's backend did not take", name)
	}
	pick := kept[0]
	if runID != "" {
		found := false
		for _, r := range kept {
			if r.RunID == runID {
				pick, found = r, true
				break
			}
		}
		if !found {
			return fmt.Errorf("run %s of %s kept no state (%d kept, the oldest by run %s)", runID, name, len(kept), kept[0].RunID)
		}
	}
	b, err := store.Get(ctx, pick.Key)
	if errors.Is(err, records.ErrNotFound) {
		return fmt.Errorf("the state run %s kept is gone (a run pushed it since)", pick.RunID)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(o.ErrOut, "the state run %s of %s kept (%d bytes; %d kept in all, oldest first); once pushed, delete it: kubectl delete secrets -n %s -l %s=%s,%s=%s\n",
		pick.RunID, name, len(b), len(kept), run.Namespace, records.RunIDLabel, pick.RunID, records.KindLabel, records.KindErroredState)
	_, err = o.Out.Write(b)
	return err
}
