package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/approvalpolicy"
)

// ApprovalRunIndex indexes TerraformRunApprovals by spec.runName.
const ApprovalRunIndex = "spec.runName"

// vote is one user's decision about a plan, from a TerraformRunApproval,
// spec.approval or the engine.
type vote struct {
	user    string
	groups  []string
	approve bool
	reason  string
	source  string
	at      time.Time
	// override is an approval that lets the plan apply outside
	// spec.approval.windows (admission let only a policy admin make it).
	override bool
}

// votes gathers the decisions about digest: the run's TerraformRunApprovals
// for that plan and spec.approval's approvedPlan or rejectedPlan, made by
// the user stamped in infra.opr8r.io/decided-by.
func (r *TerraformRunReconciler) votes(ctx context.Context, run *infrav1.TerraformRun, ap infrav1.ApprovalSpec, digest string) ([]vote, error) {
	var out []vote
	decider := run.Annotations[infrav1.DecidedByAnnotation]
	switch digest {
	case ap.RejectedPlan:
		out = append(out, vote{user: decider, reason: ap.RejectReason, source: "spec.approval.rejectedPlan"})
	case ap.ApprovedPlan:
		out = append(out, vote{user: decider, approve: true, source: "spec.approval.approvedPlan"})
	}
	list := &infrav1.TerraformRunApprovalList{}
	if err := r.List(ctx, list, client.InNamespace(run.Namespace), client.MatchingFields{ApprovalRunIndex: run.Name}); err != nil {
		return nil, err
	}
	for _, a := range list.Items {
		if a.Spec.PlanDigest != digest {
			continue
		}
		out = append(out, vote{
			user: a.Spec.User, groups: a.Spec.Groups, approve: a.Spec.Decision != infrav1.DecisionReject,
			reason: a.Spec.Reason, source: "TerraformRunApproval/" + a.Name, at: a.CreationTimestamp.Time,
			override: a.Spec.OverrideChangeWindows,
		})
	}
	if r.UntrustedIdentity {
		for i := range out {
			out[i].user, out[i].groups = "", nil
		}
	}
	return out, nil
}

func required(ap infrav1.ApprovalSpec) int32 { return approvalpolicy.Required(ap) }

// tally counts votes about digest under the policy ap, for a change by
// authors. A user's newest decision counts; a plan is approved when
// requiredApprovals distinct allowed users approve it, and rejected by one
// allowed rejection (Rejection Any) or by requiredApprovals of them
// (Quorum). It returns the tally and the rejecting vote, if any.
func tally(ap infrav1.ApprovalSpec, authors []string, digest string, votes []vote) (infrav1.ApprovalTally, *vote) {
	need := required(ap)
	t := infrav1.ApprovalTally{Digest: digest, Required: need}
	// Creation times have a resolution of one second: decisions of the same
	// second are ordered by user, and a user's approval and rejection in
	// the same second count as the rejection.
	sort.SliceStable(votes, func(i, j int) bool {
		a, b := votes[i], votes[j]
		if !a.at.Equal(b.at) {
			return a.at.Before(b.at)
		}
		if a.user != b.user {
			return a.user < b.user
		}
		return a.approve && !b.approve
	})
	latest := map[string]int{}
	var order []string
	for i, v := range votes {
		if _, seen := latest[v.user]; !seen {
			order = append(order, v.user)
		}
		latest[v.user] = i
	}
	var rejection *vote
	for _, u := range order {
		v := votes[latest[u]]
		if why := ignoreReason(ap, authors, v); why != "" {
			t.Ignored = append(t.Ignored, infrav1.IgnoredDecision{User: v.user, Source: v.source, Reason: why})
			continue
		}
		if v.approve {
			t.ApprovedBy = append(t.ApprovedBy, v.user)
			continue
		}
		t.RejectedBy = append(t.RejectedBy, v.user)
		if rejection == nil {
			rejection = &v
		}
	}
	t.Needed = max(need-int32(len(t.ApprovedBy)), 0)
	t.Summary = fmt.Sprintf("%d/%d", len(t.ApprovedBy), need)
	if ap.Rejection == infrav1.RejectByQuorum && int32(len(t.RejectedBy)) < need {
		rejection = nil
	}
	return t, rejection
}

// ignoreReason says why the policy does not count a vote ("" if it does).
func ignoreReason(ap infrav1.ApprovalSpec, authors []string, v vote) string {
	return approvalpolicy.Why(ap, authors, v.user, v.groups, v.approve)
}

// tallyMessage says where a waiting plan's approvals stand.
func tallyMessage(t infrav1.ApprovalTally) string {
	s := fmt.Sprintf("%s approvals", t.Summary)
	if len(t.ApprovedBy) > 0 {
		s += " (" + strings.Join(t.ApprovedBy, ", ") + ")"
	}
	if t.Needed > 0 {
		s += fmt.Sprintf(", %d more needed", t.Needed)
	}
	for _, r := range t.Rules {
		if r.Effect == infrav1.RuleRequire {
			s += fmt.Sprintf(" (rule %s: %d/%d", r.Name, r.Required-r.Needed, r.Required)
			if len(r.ApprovedBy) > 0 {
				s += " by " + strings.Join(r.ApprovedBy, ", ")
			}
			s += ")"
		}
	}
	for _, ig := range t.Ignored {
		user := ig.User
		if user == "" {
			user = "an unknown user"
		}
		s += fmt.Sprintf("; ignored %s's decision (%s): %s", user, ig.Source, ig.Reason)
	}
	return s
}
