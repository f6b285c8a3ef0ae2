package controller

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/gate"
)

// ApprovalRunIndex indexes TerraformRunApprovals by spec.runName.
const ApprovalRunIndex = "spec.runName"

// votes gathers the decisions about digest: the run's TerraformRunApprovals
// for that plan and spec.approval's approvedPlan or rejectedPlan, made by
// the user stamped in infra.opr8r.io/decided-by.
func (r *TerraformRunReconciler) votes(ctx context.Context, run *infrav1.TerraformRun, ap infrav1.ApprovalSpec, digest string) ([]gate.Vote, error) {
	var out []gate.Vote
	decider := run.Annotations[infrav1.DecidedByAnnotation]
	switch digest {
	case ap.RejectedPlan:
		out = append(out, gate.Vote{User: decider, Reason: ap.RejectReason, Source: "spec.approval.rejectedPlan"})
	case ap.ApprovedPlan:
		out = append(out, gate.Vote{User: decider, Approve: true, Source: "spec.approval.approvedPlan"})
	}
	list := &infrav1.TerraformRunApprovalList{}
	if err := r.List(ctx, list, client.InNamespace(run.Namespace), client.MatchingFields{ApprovalRunIndex: run.Name}); err != nil {
		return nil, err
	}
	for _, a := range list.Items {
		if a.Spec.PlanDigest != digest {
			continue
		}
		out = append(out, gate.Vote{
			User: a.Spec.User, Groups: a.Spec.Groups, Approve: a.Spec.Decision != infrav1.DecisionReject,
			Reason: a.Spec.Reason, Source: "TerraformRunApproval/" + a.Name, At: a.CreationTimestamp.Time,
			Override: a.Spec.OverrideChangeWindows,
		})
	}
	if r.UntrustedIdentity {
		for i := range out {
			out[i].User, out[i].Groups = "", nil
		}
	}
	return out, nil
}
