package controller

import (
	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// recordHistory puts a finished run at the head of status.history, keeping
// the newest keep records. It is called in the pass that sees the run
// finish, so the record is written with the run's final status; a run's
// child is pruned only after that write (reconcileChildren).
func recordHistory(run *infrav1.TerraformRun, cur *infrav1.RunStatus, keep int32) {
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
	h := run.Status.History
	if len(h) > 0 && h[0].ID == cur.ID {
		h = h[1:] // recorded again (a retried pass): replace
	}
	h = append([]infrav1.RunRecord{rec}, h...)
	if int32(len(h)) > keep {
		h = h[:keep]
	}
	run.Status.History = h
}

// recorded returns the ids of the runs in a status's history.
func recorded(s infrav1.TerraformRunStatus) map[string]bool {
	out := make(map[string]bool, len(s.History))
	for _, h := range s.History {
		out[h.ID] = true
	}
	return out
}
