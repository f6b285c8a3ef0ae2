package gate

import (
	"strings"
	"testing"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

func TestHelps(t *testing.T) {
	security := &infrav1.Approvers{Groups: []string{"security"}}
	rules := []infrav1.ApprovalRule{
		{Name: "destroys-need-security", Effect: infrav1.RuleRequire, Require: &infrav1.RuleRequirement{Approvals: 2, Approvers: security}},
		{Name: "iam-needs-sam", Effect: infrav1.RuleRequire, Require: &infrav1.RuleRequirement{Approvals: 1, Approvers: &infrav1.Approvers{Users: []string{"sam"}}}},
	}
	open := []infrav1.RuleTally{
		{Name: "destroys-need-security", Effect: infrav1.RuleRequire, Required: 2, Needed: 1, ApprovedBy: []string{"ann"}},
		{Name: "iam-needs-sam", Effect: infrav1.RuleRequire, Required: 1, Needed: 1},
	}
	for _, tc := range []struct {
		name   string
		spec   infrav1.ApprovalSpec
		tally  *infrav1.ApprovalTally
		user   string
		groups []string
		want   bool
		why    string
	}{
		{"no tally yet: the rest of spec.approval decides", infrav1.ApprovalSpec{Rules: rules}, nil, "dev", nil, true, ""},
		{"no rule matched", infrav1.ApprovalSpec{}, &infrav1.ApprovalTally{Required: 1, Needed: 1}, "dev", nil, true, ""},
		{"requiredApprovals still open", infrav1.ApprovalSpec{Rules: rules, RequiredApprovals: 2}, &infrav1.ApprovalTally{ApprovedBy: []string{"ann"}, Rules: open}, "dev", nil, true, ""},
		{"security's second", infrav1.ApprovalSpec{Rules: rules}, &infrav1.ApprovalTally{ApprovedBy: []string{"ann"}, Rules: open}, "bob", []string{"security"}, true, ""},
		{"sam", infrav1.ApprovalSpec{Rules: rules}, &infrav1.ApprovalTally{ApprovedBy: []string{"ann"}, Rules: open}, "sam", nil, true, ""},
		{"a developer, requiredApprovals met", infrav1.ApprovalSpec{Rules: rules}, &infrav1.ApprovalTally{ApprovedBy: []string{"ann"}, Rules: open}, "dev", []string{"devs"}, false,
			"it meets none of the Require rules the plan still needs (rule destroys-need-security needs 1 more from groups security; rule iam-needs-sam needs 1 more from users sam)"},
		{"ann again", infrav1.ApprovalSpec{Rules: rules}, &infrav1.ApprovalTally{ApprovedBy: []string{"ann"}, Rules: open}, "ann", []string{"security"}, false, "rule iam-needs-sam needs 1 more from users sam"},
		{"mode Auto asks nothing of its own", infrav1.ApprovalSpec{Mode: infrav1.ApprovalAuto, Rules: rules}, &infrav1.ApprovalTally{Rules: open[1:]}, "dev", nil, false, "iam-needs-sam"},
		{"every rule met", infrav1.ApprovalSpec{Rules: rules}, &infrav1.ApprovalTally{ApprovedBy: []string{"ann"}, Rules: []infrav1.RuleTally{{Name: "iam-needs-sam", Effect: infrav1.RuleRequire, Required: 1}}}, "dev", nil, true, ""},
	} {
		got, why := Helps(tc.spec, tc.tally, tc.user, tc.groups)
		if got != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("%s: Helps = %v, %q; want %v, %q", tc.name, got, why, tc.want, tc.why)
		}
	}
}
