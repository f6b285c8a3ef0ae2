package gate

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/planpolicy"
)

func TestWindowsStateEveryLayerMustBeOpen(t *testing.T) {
	now := time.Date(2026, 12, 9, 10, 0, 0, 0, time.UTC) // a Wednesday
	allow := func(name, sched string, d time.Duration) infrav1.ChangeWindow {
		return infrav1.ChangeWindow{Name: name, Type: infrav1.WindowAllow, Schedule: sched, Duration: metav1.Duration{Duration: d}}
	}
	openNow := allow("now", "0 9 * * *", 4*time.Hour)       // 09:00-13:00 daily
	laterToday := allow("later", "0 15 * * *", 2*time.Hour) // 15:00-17:00 daily
	neverNow := allow("feb30", "0 9 30 2 *", time.Hour)     // refused by Compile
	tomorrow := allow("thursday", "0 8 * * 4", 2*time.Hour) // Thursday 08:00
	if open, _, _, err := windowsState([][]infrav1.ChangeWindow{{openNow}, {openNow}}, now); err != nil || !open {
		t.Fatalf("two open layers: open=%v err=%v", open, err)
	}
	// One policy's Allow window does not open another's: the run's window
	// is open, the policy's is not.
	open, why, next, err := windowsState([][]infrav1.ChangeWindow{{openNow}, {laterToday}}, now)
	if err != nil || open || why == "" || !next.Equal(time.Date(2026, 12, 9, 15, 0, 0, 0, time.UTC)) {
		t.Fatalf("open=%v why=%q next=%v err=%v", open, why, next, err)
	}
	// Two closed layers: look again when the later of the two opens.
	_, _, next, _ = windowsState([][]infrav1.ChangeWindow{{laterToday}, {tomorrow}}, now)
	if !next.Equal(time.Date(2026, 12, 10, 8, 0, 0, 0, time.UTC)) {
		t.Fatalf("next %v", next)
	}
	if _, _, _, err := windowsState([][]infrav1.ChangeWindow{{openNow}, {neverNow}}, now); err == nil {
		t.Fatal("a layer whose window never opens must fail to compile, holding the plan")
	}
}

// TestRuleGatePolicyLetsThroughOnlyAResumeThatCounts: an engine's resume
// (Argo's RESUME) that admission lets through must be one the tally then
// counts; otherwise opr8r refuses it after the fact, stopping the run and
// losing its plan. A resume is one approval, so it must meet every unmet
// Require rule and spec.approval's approvers.
func TestRuleGatePolicyLetsThroughOnlyAResumeThatCounts(t *testing.T) {
	sec := &infrav1.Approvers{Groups: []string{"security"}}
	ops := &infrav1.Approvers{Groups: []string{"ops"}}
	bob := &infrav1.Approvers{Users: []string{"bob"}}
	rule := func(name string, a *infrav1.Approvers) infrav1.ApprovalRule {
		return infrav1.ApprovalRule{Name: name, Effect: infrav1.RuleRequire, Require: &infrav1.RuleRequirement{Approvals: 1, Approvers: a}}
	}
	tallied := func(needed map[string]int32) infrav1.ApprovalTally {
		var t infrav1.ApprovalTally
		for n, k := range needed {
			t.Rules = append(t.Rules, infrav1.RuleTally{Name: n, Effect: infrav1.RuleRequire, Needed: k})
		}
		return t
	}
	cases := []struct {
		name      string
		approvers *infrav1.Approvers
		rules     []infrav1.ApprovalRule
		needed    map[string]int32
		users     []string // nil: anyone
		groups    []string
		mayResume map[string][]string // user -> groups: allowed
		mayNot    map[string][]string
	}{
		{name: "one unmet rule: its approvers", rules: []infrav1.ApprovalRule{rule("iam", sec)}, needed: map[string]int32{"iam": 1},
			users: []string{}, groups: []string{"security"}, mayResume: map[string][]string{"sue": {"security"}}, mayNot: map[string][]string{"dev": {"devs"}}},
		{name: "two unmet rules: only who meets both", rules: []infrav1.ApprovalRule{rule("iam", sec), rule("prod", ops)}, needed: map[string]int32{"iam": 1, "prod": 1},
			users: []string{}, groups: []string{}, mayNot: map[string][]string{"sue": {"security"}, "oli": {"ops"}}},
		{name: "spec.approval's approvers and the rule's", approvers: &infrav1.Approvers{Users: []string{"alice", "bob"}}, rules: []infrav1.ApprovalRule{rule("iam", bob)}, needed: map[string]int32{"iam": 1},
			users: []string{"bob"}, groups: []string{}, mayResume: map[string][]string{"bob": nil}, mayNot: map[string][]string{"alice": nil}},
		{name: "a met rule narrows nothing", rules: []infrav1.ApprovalRule{rule("iam", sec)}, needed: map[string]int32{"iam": 0},
			users: nil, mayResume: map[string][]string{"dev": nil}},
		{name: "a rule for anyone narrows nothing", rules: []infrav1.ApprovalRule{rule("two", nil)}, needed: map[string]int32{"two": 1},
			users: nil, mayResume: map[string][]string{"dev": nil}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ap := infrav1.ApprovalSpec{Approvers: c.approvers}
			tl := tallied(c.needed)
			p := publish(ap, nil, &planpolicy.Outcome{Decision: planpolicy.Require, Require: c.rules}, tl)
			if (p.Users == nil) != (c.users == nil) || !slices.Equal(p.Users, c.users) || !slices.Equal(p.Groups, c.groups) {
				t.Fatalf("gate users %#v groups %#v, want %#v %#v", p.Users, p.Groups, c.users, c.groups)
			}
			may := func(user string, groups []string) bool {
				if p.Users == nil {
					return true
				}
				return Allowed(&infrav1.Approvers{Users: p.Users, Groups: p.Groups}, user, groups)
			}
			for u, g := range c.mayResume {
				if !may(u, g) {
					t.Errorf("%s may not resume, but the rules count them", u)
				}
			}
			for u, g := range c.mayNot {
				if may(u, g) {
					t.Errorf("%s may resume, but the rules would not count it: the run would be stopped", u)
				}
			}
		})
	}
}
