package controller

import (
	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// historyLimits is what status.history keeps: the newest runs (applies,
// destroys, previews) and, counted apart, the newest checks, so that checks
// never push an apply out; and the record pinned, the last successful
// apply's, whatever its age.
type historyLimits struct {
	runs, checks int32
	pinned       string
}

// limitsOf are the history limits of a run (spec.history, with defaults).
func limitsOf(run *infrav1.TerraformRun, spec infrav1.TerraformRunSpec) historyLimits {
	l := historyLimits{runs: *spec.History.KeepRecords, checks: *spec.History.KeepChecks}
	if a := run.Status.LastApplied; a != nil {
		l.pinned = a.RunID
	}
	return l
}

// appendHistory puts a finished run at the head of status.history, within
// its limits. It is called in the pass that sees the run
// finish, so the record is written with the run's final status; a run's
// child is pruned only after that write (reconcileChildren).
func appendHistory(run *infrav1.TerraformRun, cur *infrav1.RunStatus, keep historyLimits) {
	rec := infrav1.RunRecord{
		ID: cur.ID, Number: cur.Number, Type: cur.Type, Engine: cur.Engine,
		Trigger: cur.Trigger, TriggerDetail: cur.TriggerDetail, SpecHash: cur.SpecHash,
		Revision: cur.Commit, Result: cur.Phase, StartedAt: cur.StartedAt, FinishedAt: cur.FinishedAt,
		Message: truncate(cur.Message, 1024),
	}
	if p := run.Status.Plan; p != nil && p.RunID == cur.ID {
		rec.Plan = p.DeepCopy()
	}
	if a := run.Status.Approval; a != nil && rec.Plan != nil && a.Digest == rec.Plan.Digest {
		rec.Approval = a.DeepCopy()
	}
	rec.Inputs = cur.Inputs
	rec.Author = cur.Author
	run.Status.History = historyWith(run.Status.History, rec, keep)
}

// historyWith puts a record at the head of a history (replacing a record of
// the same run, from a retried pass) and keeps what the limits keep.
func historyWith(h []infrav1.RunRecord, rec infrav1.RunRecord, keep historyLimits) []infrav1.RunRecord {
	out := make([]infrav1.RunRecord, 0, len(h)+1)
	var runs, checks int32
	for _, r := range append([]infrav1.RunRecord{rec}, h...) {
		if r.ID == rec.ID && len(out) > 0 {
			continue
		}
		n, limit := &runs, keep.runs
		if r.Type == infrav1.RunDrift {
			n, limit = &checks, keep.checks
		}
		if *n < limit || r.ID == keep.pinned {
			out = append(out, r)
		}
		*n++
	}
	return out
}
