package gate

// This file says whether a policy counts one user's decision about a
// plan. The manager tallies decisions with it, and kubectl tfrun approve
// asks it before recording one that would not count, so both say the same.

import (
	"fmt"
	"slices"
	"strings"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Why says why the policy ap does not count a decision by user (in groups)
// about a change by authors; "" when it counts. approve is whether the
// decision approves (an author may still reject).
func Why(ap infrav1.ApprovalSpec, authors []string, user string, groups []string, approve bool) string {
	switch {
	case user == "" && NeedsIdentity(ap):
		return "no user was stamped at admission (opr8r's admission policies are not installed?), and spec.approval needs to know who decided"
	case !Allowed(ap.Approvers, user, groups):
		if Nobody(ap.Approvers) {
			return "spec.approval.approvers and the approvers of the policies that govern the run (status.approvals.policy) name nobody in common, so nobody's decision counts; a policy admin must align them"
		}
		return "not in spec.approval.approvers (users or groups), or not among the approvers every policy that governs the run names (status.approvals.policy)"
	case approve && ap.SelfApproval == infrav1.SelfApprovalForbidden && len(authors) == 0:
		return "the change has no stamped author, so spec.approval.selfApproval Forbidden cannot be checked"
	case approve && ap.SelfApproval == infrav1.SelfApprovalForbidden && slices.Contains(authors, user):
		return "an author of the change may not approve it (spec.approval.selfApproval: Forbidden; status.run.authors lists who changed the spec since the last apply)"
	}
	return ""
}

// NeedsIdentity is true when the policy can only be checked knowing who
// decided: a quorum, a list of approvers, or no self-approval.
func NeedsIdentity(ap infrav1.ApprovalSpec) bool {
	return Required(ap) > 1 || ap.Approvers != nil || ap.SelfApproval == infrav1.SelfApprovalForbidden
}

// Required is how many distinct users must approve.
func Required(ap infrav1.ApprovalSpec) int32 {
	return max(ap.RequiredApprovals, 1)
}

// Allowed says whether spec.approval.approvers lets a user decide.
func Allowed(a *infrav1.Approvers, user string, groups []string) bool {
	if a == nil {
		return true
	}
	if slices.Contains(a.Users, user) {
		return true
	}
	for _, g := range groups {
		if slices.Contains(a.Groups, g) {
			return true
		}
	}
	return false
}

// Authors are the authors of a run's change as status records them: those
// who changed what the active run executes since the last applied run.
func Authors(run *infrav1.TerraformRun) []string {
	if cur := run.Status.Run; cur != nil {
		if len(cur.Authors) > 0 {
			return cur.Authors
		}
		if cur.Author != "" {
			return []string{cur.Author}
		}
	}
	return nil
}

// Describe names who approvers are ("anyone" when nil).
func Describe(a *infrav1.Approvers) string {
	if a == nil {
		return "anyone"
	}
	var who []string
	if len(a.Users) > 0 {
		who = append(who, "users "+strings.Join(a.Users, ", "))
	}
	if len(a.Groups) > 0 {
		who = append(who, "groups "+strings.Join(a.Groups, ", "))
	}
	return strings.Join(who, " or ")
}

// Remaining says what the plan t counts for still needs, as the manager
// tallied it ("" when nothing).
func Remaining(t *infrav1.ApprovalTally) string {
	if t == nil || t.Needed == 0 {
		return ""
	}
	s := fmt.Sprintf("the plan needs %d more approval(s) (%s)", t.Needed, t.Summary)
	for _, r := range t.Rules {
		if r.Effect == infrav1.RuleRequire && r.Needed > 0 {
			s += fmt.Sprintf("; rule %s: %d more", r.Name, r.Needed)
		}
	}
	return s
}
