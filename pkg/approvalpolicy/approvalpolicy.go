// Package approvalpolicy says whether spec.approval counts one user's
// decision about a plan. The manager tallies decisions with it, and
// kubectl tfrun approve asks it before recording one that would not count,
// so both say the same.
package approvalpolicy

import (
	"slices"

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
		return "not in spec.approval.approvers (users or groups)"
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
