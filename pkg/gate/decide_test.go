package gate

import (
	"slices"
	"strings"
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

var (
	t0       = time.Date(2026, 12, 9, 10, 0, 0, 0, time.UTC) // a Wednesday
	security = &infrav1.Approvers{Groups: []string{"security"}}
)

func yes(user string, min int, groups ...string) Vote {
	return Vote{User: user, Groups: groups, Approve: true, Source: "TerraformRunApproval/" + user, At: t0.Add(time.Duration(min) * time.Minute)}
}

func no(user string, min int) Vote {
	return Vote{User: user, Reason: "not now", Source: "TerraformRunApproval/" + user, At: t0.Add(time.Duration(min) * time.Minute)}
}

func manual(n int32) infrav1.ApprovalSpec {
	return infrav1.ApprovalSpec{Mode: infrav1.ApprovalManual, RequiredApprovals: n, SelfApproval: infrav1.SelfApprovalAllowed, Rejection: infrav1.RejectByAny}
}

func requireRule(name string, n int32, who *infrav1.Approvers) infrav1.ApprovalRule {
	return infrav1.ApprovalRule{Name: name, Effect: infrav1.RuleRequire, Require: &infrav1.RuleRequirement{Approvals: n, Approvers: who}}
}

// matched is the rules' outcome when rules match, as planpolicy decides
// it (Deny over Require over AutoApprove).
func matched(rules ...infrav1.ApprovalRule) *planpolicy.Outcome {
	o := &planpolicy.Outcome{Decision: planpolicy.Default}
	for _, r := range rules {
		o.Matched = append(o.Matched, planpolicy.Match{Rule: r})
	}
	for i, m := range o.Matched {
		switch m.Rule.Effect {
		case infrav1.RuleDeny:
			if o.Deny == nil {
				o.Deny = &o.Matched[i]
			}
		case infrav1.RuleRequire:
			o.Require = append(o.Require, m.Rule)
		case infrav1.RuleAutoApprove:
			if o.AutoApprove == nil {
				o.AutoApprove = &o.Matched[i].Rule
			}
		}
	}
	switch {
	case o.Deny != nil:
		o.Decision = planpolicy.Deny
	case len(o.Require) > 0:
		o.Decision = planpolicy.Require
	case o.AutoApprove != nil:
		o.Decision = planpolicy.AutoApprove
	}
	return o
}

type decideCase struct {
	name string
	in   Input
	// want
	effect    Effect
	needed    int32
	why       string // a substring of Decision.Why
	source    infrav1.ApprovalSource
	publish   []string // the users published (nil: none published; [] published, users unset)
	recheck   time.Time
	rejectBy  string
	overrider string
}

// decideCases are the gate's table: every effect, their precedence, and
// each defect issue 50 lists that the gate decides.
func decideCases() []decideCase {
	in := func(ap infrav1.ApprovalSpec, votes ...Vote) Input {
		return Input{Policy: Combine(ap, nil), Digest: "sha256:p", Votes: votes, Now: t0.Add(time.Hour)}
	}
	with := func(i Input, f func(*Input)) Input { f(&i); return i }
	nsPolicy := func(name string, ap infrav1.ApprovalPolicy) Policy {
		return Policy{Ref: infrav1.PolicyRef{Kind: KindNamespaced, Name: name, Generation: 1, UID: "u-" + name}, Approval: ap}
	}
	clPolicy := func(name string, ap infrav1.ApprovalPolicy) Policy {
		return Policy{Ref: infrav1.PolicyRef{Kind: KindCluster, Name: name, Generation: 1, UID: "c-" + name}, Approval: ap}
	}
	autoAddOnly := infrav1.ApprovalRule{Name: "platform/add-only", Effect: infrav1.RuleAutoApprove}
	deny := infrav1.ApprovalRule{Name: "no-iam", Effect: infrav1.RuleDeny, Message: "IAM changes go through the security repository"}
	deadline := t0.Add(30 * time.Minute)
	// 15:00-17:00 daily.
	laterToday := infrav1.ChangeWindow{Name: "noon", Type: infrav1.WindowAllow, Schedule: "0 15 * * *", Duration: metav1.Duration{Duration: 2 * time.Hour}}
	opensAt := time.Date(2026, 12, 9, 15, 0, 0, 0, time.UTC)
	withWindows := func(ap infrav1.ApprovalSpec, policies []Policy) Governed {
		return Combine(ap, policies)
	}
	runWindow := manual(1)
	runWindow.Windows = []infrav1.ChangeWindow{laterToday}
	override := yes("polly", 1)
	override.Override = true
	return []decideCase{
		{name: "one approval approves under the CRD's defaults", in: in(manual(1), yes("alice", 1)), effect: Approve},
		{name: "no votes: it waits, and the engine may let anyone through", in: in(manual(1)), effect: Wait, needed: 1, why: "0/1 approvals, 1 more needed", publish: []string{}},
		{name: "a rejection rejects, even after a quorum", in: in(manual(2), yes("alice", 1), yes("bob", 2), no("carol", 3)), effect: Reject, rejectBy: "carol"},
		{name: "Quorum: one rejection of two needed does not reject", in: in(func() infrav1.ApprovalSpec { a := manual(2); a.Rejection = infrav1.RejectByQuorum; return a }(), no("carol", 1)), effect: Wait, needed: 2, publish: []string{}},
		{name: "a Deny rule wins over approvals and rejections, and publishes nobody", in: with(in(manual(1), yes("alice", 1), no("bob", 2)), func(i *Input) { i.Rules = matched(deny) }), effect: Deny, why: "denied by rule no-iam: IAM changes"},
		{name: "a rule that could not be evaluated denies", in: with(in(manual(1), yes("alice", 1)), func(i *Input) {
			o := planpolicy.Failed(errString("cost limit"))
			i.Rules = &o
		}), effect: Deny, why: "cost limit"},
		{name: "a policy changed while the plan waited holds it, though approved", in: with(in(manual(1), yes("alice", 1)), func(i *Input) { i.Changed = "TerraformRunPolicy p changed (generation 2, was 1)" }),
			effect: HoldChanged, why: "generation 2"},
		{name: "a held plan past its deadline times out", in: with(in(manual(1)), func(i *Input) { i.Changed = "p changed"; i.Deadline = deadline }), effect: TimeOut},
		{name: "a rule edited into a typo holds the plan and never rejects it (defect)", in: with(in(manual(1), yes("alice", 1)), func(i *Input) {
			i.Unreadable = errString("rule iam: undeclared reference to 'plna'")
		}), effect: HoldUnreadable, why: "plna"},
		{name: "a rejection still rejects a plan that could not be read", in: with(in(manual(1), no("bob", 1)), func(i *Input) { i.Unreadable = errString("too large") }), effect: Reject, rejectBy: "bob"},
		{name: "approvals after the deadline do not count: it times out", in: with(in(manual(1), yes("alice", 45)), func(i *Input) { i.Deadline = deadline }), effect: TimeOut},
		{name: "an approval before the deadline approves after it", in: with(in(manual(1), yes("alice", 10)), func(i *Input) { i.Deadline = deadline }), effect: Approve},
		{name: "a waiting plan looks again at its deadline", in: with(in(manual(1)), func(i *Input) { i.Deadline = t0.Add(2 * time.Hour) }), effect: Wait, needed: 1, publish: []string{}, recheck: t0.Add(2 * time.Hour)},
		{name: "spec.approval.approvedPlan naming another plan is stale", in: in(func() infrav1.ApprovalSpec { a := manual(1); a.ApprovedPlan = "sha256:old"; return a }()), effect: Stale, needed: 1, publish: []string{}},
		{name: "mode Auto without rules approves automatically", in: in(infrav1.ApprovalSpec{Mode: infrav1.ApprovalAuto}), effect: Approve, source: infrav1.ApprovedAutomatically},
		{name: "an AutoApprove rule approves by rule", in: with(in(manual(1)), func(i *Input) {
			i.Rules = matched(infrav1.ApprovalRule{Name: "add-only", Effect: infrav1.RuleAutoApprove})
		}),
			effect: Approve, source: infrav1.ApprovedByRule},
		{name: "a namespace policy's AutoApprove never waives a cluster policy's two approvals", in: with(in(manual(1)), func(i *Input) {
			i.Policy = Combine(manual(1), []Policy{nsPolicy("platform", infrav1.ApprovalPolicy{}), clPolicy("sec", infrav1.ApprovalPolicy{Mode: infrav1.ApprovalManual, RequiredApprovals: 2})})
			i.Rules = matched(autoAddOnly)
		}), effect: Wait, needed: 2, publish: []string{}},
		{name: "the cluster policy's two approvals, then the plan applies, approved by people", in: with(in(manual(1), yes("alice", 1), yes("bob", 2)), func(i *Input) {
			i.Policy = Combine(manual(1), []Policy{nsPolicy("platform", infrav1.ApprovalPolicy{}), clPolicy("sec", infrav1.ApprovalPolicy{Mode: infrav1.ApprovalManual, RequiredApprovals: 2})})
			i.Rules = matched(autoAddOnly)
		}), effect: Approve},
		{name: "a Require rule of one never lowers requiredApprovals of two (defect)", in: with(in(manual(2), yes("ann", 1, "security")), func(i *Input) {
			i.Rules = matched(requireRule("destroys", 1, security))
		}), effect: Wait, needed: 1, publish: []string{}},
		{name: "a Require rule counts only its approvers, and the engine may let through only them (defect)", in: with(in(manual(1), yes("dev", 1, "devs")), func(i *Input) {
			i.Rules = matched(requireRule("destroys", 1, security))
		}), effect: Wait, needed: 1, why: "rule destroys: 0/1", publish: []string{}},
		{name: "two Require rules: each must be met", in: with(in(manual(1), yes("ann", 1, "security")), func(i *Input) {
			i.Rules = matched(requireRule("destroys", 1, security), requireRule("iam", 1, &infrav1.Approvers{Users: []string{"sam"}}))
		}), effect: Wait, needed: 1, publish: []string{}},
		{name: "two Require rules met", in: with(in(manual(1), yes("ann", 1, "security"), yes("sam", 2)), func(i *Input) {
			i.Rules = matched(requireRule("destroys", 1, security), requireRule("iam", 1, &infrav1.Approvers{Users: []string{"sam"}}))
		}), effect: Approve},
		{name: "an author's approval does not count under selfApproval Forbidden", in: with(in(func() infrav1.ApprovalSpec { a := manual(1); a.SelfApproval = infrav1.SelfApprovalForbidden; return a }(), yes("alice", 1)), func(i *Input) {
			i.Authors = []string{"alice"}
		}), effect: Wait, needed: 1, why: "ignored alice's decision", publish: []string{}},
		{name: "approved outside its change window: held until it opens", in: with(in(runWindow, yes("alice", 1)), func(i *Input) { i.Policy = withWindows(runWindow, nil) }),
			effect: HoldWindow, why: "1/1 approvals", recheck: opensAt},
		{name: "a policy admin's override opens the run's window", in: with(in(runWindow, override), func(i *Input) { i.Policy = withWindows(runWindow, nil) }),
			effect: Approve, overrider: "polly (TerraformRunApproval/polly)"},
		{name: "an override never opens a cluster policy's window", in: with(in(manual(1), override), func(i *Input) {
			i.Policy = withWindows(manual(1), []Policy{clPolicy("freeze", infrav1.ApprovalPolicy{Windows: []infrav1.ChangeWindow{laterToday}})})
		}), effect: HoldWindow, why: "1/1 approvals", recheck: opensAt},
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestDecide(t *testing.T) {
	for _, c := range decideCases() {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.in)
			if d.Effect != c.effect {
				t.Fatalf("effect %s (%s), want %s; tally %+v", d.Effect, d.Why, c.effect, d.Tally)
			}
			if d.Tally.Needed != c.needed && (c.effect == Wait || c.effect == Stale) {
				t.Errorf("needed %d, want %d", d.Tally.Needed, c.needed)
			}
			if !strings.Contains(d.Why, c.why) {
				t.Errorf("why %q lacks %q", d.Why, c.why)
			}
			if d.Source != c.source {
				t.Errorf("source %q, want %q", d.Source, c.source)
			}
			switch {
			case c.publish == nil && d.Publish != nil:
				t.Errorf("published %+v, want nothing published", d.Publish)
			case c.publish != nil && d.Publish == nil:
				t.Errorf("published nothing, want users %v", c.publish)
			case c.publish != nil && len(c.publish) > 0 && !slices.Equal(d.Publish.Users, c.publish):
				t.Errorf("published users %v, want %v", d.Publish.Users, c.publish)
			}
			if d.Publish != nil && d.Publish.Needed != d.Tally.Needed {
				t.Errorf("published needed %d, tally %d", d.Publish.Needed, d.Tally.Needed)
			}
			if !d.Recheck.Equal(c.recheck) {
				t.Errorf("recheck %v, want %v", d.Recheck, c.recheck)
			}
			if (d.Rejection == nil) != (c.rejectBy == "") || d.Rejection != nil && d.Rejection.User != c.rejectBy {
				t.Errorf("rejection %+v, want by %q", d.Rejection, c.rejectBy)
			}
			if c.overrider != "" && (d.Window == nil || d.Window.OverriddenBy != c.overrider) {
				t.Errorf("window %+v, want overridden by %q", d.Window, c.overrider)
			}
		})
	}
}

// The rule gate narrows who the engine lets through to the intersection
// of the Require rules' approvers (publish); a case with groups shows it.
func TestDecidePublishesTheRulesApprovers(t *testing.T) {
	c := decideCases()[19]
	d := Decide(c.in)
	if d.Publish == nil || len(d.Publish.Users) != 0 || !slices.Equal(d.Publish.Groups, []string{"security"}) {
		t.Fatalf("%s: published %+v, want group security only", c.name, d.Publish)
	}
}

// recordOf is the run kubectl tfrun approve reads after the manager
// decided in: status.approvals as decideGate records it (the tally, with
// the combined policy and how it changed), and the Approved condition's
// reason for a plan the rules could not read.
func recordOf(in Input, d Decision) *infrav1.TerraformRun {
	run := &infrav1.TerraformRun{}
	run.Name = "r"
	run.Spec.Approval = in.Policy.Approval
	run.Status.Run = &infrav1.RunStatus{Authors: in.Authors}
	t := d.Tally
	t.Policy = Effective(in.Policy)
	t.Policy.Changed = in.Changed
	run.Status.Approvals = &t
	if d.Effect == HoldUnreadable {
		run.Status.Conditions = []metav1.Condition{{Type: infrav1.ApprovedCondition, Status: metav1.ConditionUnknown, Reason: infrav1.ReasonPlanUnreadable, Message: d.Why}}
	}
	return run
}

// kubectl tfrun approve asks Counts, on the input rebuilt from what the
// manager recorded (Recorded), whether a vote will count; the manager
// asks Counts' Decide on the input it gathered. For every case of the
// gate's table and every voter, they agree.
func TestCountsAgreesWithTheRecord(t *testing.T) {
	voters := []Vote{
		yes("alice", 50), yes("bob", 50), yes("ann", 50, "security"), yes("sue", 50, "security"),
		yes("sam", 50), yes("dev", 50, "devs"), yes("", 50), no("mallory", 50),
		overrideBy("polly"), overrideBy("alice"),
	}
	for _, c := range decideCases() {
		d := Decide(c.in)
		run := recordOf(c.in, d)
		rec, ok := Recorded(run, c.in.Digest, c.in.Votes, c.in.Now)
		if !ok {
			t.Fatalf("%s: the record was not read", c.name)
		}
		for _, v := range voters {
			live, why := Counts(c.in, v)
			got, rwhy := Counts(rec, v)
			if live != got {
				t.Errorf("%s: %q: the manager says %v (%s), kubectl tfrun approve says %v (%s)", c.name, v.User, live, why, got, rwhy)
			}
		}
	}
}

// Counts is what kubectl tfrun approve says before it records a vote.
func TestCounts(t *testing.T) {
	cases := decideCases()
	byName := map[string]decideCase{}
	for _, c := range cases {
		byName[c.name] = c
	}
	for _, tc := range []struct {
		caseName string
		v        Vote
		want     bool
		why      string
	}{
		{"no votes: it waits, and the engine may let anyone through", yes("bob", 50), true, ""},
		{"a Require rule counts only its approvers, and the engine may let through only them (defect)", yes("dev2", 50, "devs"), false, "rule destroys needs 1 more from groups security"},
		{"a Require rule counts only its approvers, and the engine may let through only them (defect)", yes("sue", 50, "security"), true, ""},
		{"a Require rule of one never lowers requiredApprovals of two (defect)", yes("dev", 50, "devs"), true, ""},
		{"an author's approval does not count under selfApproval Forbidden", yes("alice", 50), false, "author"},
		{"a Deny rule wins over approvals and rejections, and publishes nobody", yes("carol", 50), false, "rejected"},
		{"a policy changed while the plan waited holds it, though approved", yes("carol", 50), false, "held"},
		{"approved outside its change window: held until it opens", yes("carol", 50), false, "needs no more approvals"},
		{"approved outside its change window: held until it opens", func() Vote { v := yes("polly", 50); v.Override = true; return v }(), true, ""},
		{"a namespace policy's AutoApprove never waives a cluster policy's two approvals", yes("carol", 50), true, ""},
	} {
		c, ok := byName[tc.caseName]
		if !ok {
			t.Fatalf("no case %q", tc.caseName)
		}
		got, why := Counts(c.in, tc.v)
		if got != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("%s, %s: Counts = %v (%q), want %v (%q)", tc.caseName, tc.v.User, got, why, tc.want, tc.why)
		}
	}
}

var laterToday = infrav1.ChangeWindow{Name: "noon", Type: infrav1.WindowAllow, Schedule: "0 15 * * *", Duration: metav1.Duration{Duration: 2 * time.Hour}}

func overrideBy(u string) Vote { v := yes(u, 5); v.Override = true; return v }

// kubectl tfrun approve --override-change-windows says an override does
// not count for a plan held by a ClusterTerraformRunPolicy's window, which
// no override opens, and that it does where it opens the windows
// (attack review).
func TestCountsAnOverrideOnlyWhereItOpens(t *testing.T) {
	cl := Policy{Ref: infrav1.PolicyRef{Kind: KindCluster, Name: "freeze", Generation: 1}, Approval: infrav1.ApprovalPolicy{Windows: []infrav1.ChangeWindow{laterToday}}}
	in := Input{Policy: Combine(manual(1), []Policy{cl}), Digest: "sha256:p", Votes: []Vote{yes("alice", 1)}, Now: t0.Add(time.Hour)}
	if d := Decide(in); d.Effect != HoldWindow {
		t.Fatalf("setup: %s", d.Effect)
	}
	ok, why := Counts(in, overrideBy("polly"))
	in.Votes = append(in.Votes, overrideBy("polly"))
	after := Decide(in)
	if ok || after.Effect != HoldWindow || !strings.Contains(why, "ClusterTerraformRunPolicy") {
		t.Errorf("Counts = %v (%q), the plan is %s: want an override refused where a cluster window holds", ok, why, after.Effect)
	}
	ns := Policy{Ref: infrav1.PolicyRef{Kind: KindNamespaced, Name: "team", Generation: 1}, Approval: infrav1.ApprovalPolicy{Windows: []infrav1.ChangeWindow{laterToday}}}
	in = Input{Policy: Combine(manual(1), []Policy{ns}), Digest: "sha256:p", Votes: []Vote{yes("alice", 1)}, Now: t0.Add(time.Hour)}
	if ok, why := Counts(in, overrideBy("polly")); !ok {
		t.Errorf("an override of a namespace policy's window: Counts = false (%q)", why)
	}
}

// Under selfApproval Forbidden, the author (a namespace policy admin) does
// not open the windows of their own change with an override: it is an
// approval the policy ignores (attack review).
func TestAnAuthorsOverrideOpensNoWindow(t *testing.T) {
	ap := manual(1)
	ap.SelfApproval = infrav1.SelfApprovalForbidden
	ns := Policy{Ref: infrav1.PolicyRef{Kind: KindNamespaced, Name: "team", Generation: 1}, Approval: infrav1.ApprovalPolicy{Windows: []infrav1.ChangeWindow{laterToday}}}
	in := Input{Policy: Combine(ap, []Policy{ns}), Digest: "sha256:p", Authors: []string{"alice"}, Votes: []Vote{yes("bob", 1)}, Now: t0.Add(time.Hour)}
	if d := Decide(in); d.Effect != HoldWindow {
		t.Fatalf("setup: %s", d.Effect)
	}
	ok, why := Counts(in, overrideBy("alice"))
	in.Votes = append(in.Votes, overrideBy("alice"))
	d := Decide(in)
	if d.Effect != HoldWindow || ok {
		t.Errorf("the author's own override (ignored: %v) opened the window: %s, overridden by %q; Counts said %v (%q)", d.Tally.Ignored, d.Effect, d.Window.OverriddenBy, ok, why)
	}
}
