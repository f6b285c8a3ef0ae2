package controller

import (
	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// appendHistory puts a finished run at the head of status.history, keeping
// the newest keep records. It is called in the pass that sees the run
// finish, so the record is written with the run's final status; a run's
// child is pruned only after that write (reconcileChildren).
func appendHistory(run *infrav1.TerraformRun, cur *infrav1.RunStatus, keep int32) {
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
// the same run, from a retried pass) and keeps the newest keep.
func historyWith(h []infrav1.RunRecord, rec infrav1.RunRecord, keep int32) []infrav1.RunRecord {
	out := make([]infrav1.RunRecord, 0, len(h)+1)
	out = append(out, rec)
	for _, old := range h {
		if old.ID != rec.ID {
			out = append(out, old)
		}
	}
	if int32(len(out)) > keep {
		out = out[:keep]
	}
	return out
}
