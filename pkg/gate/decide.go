package gate

// This file is the gate's decision: from a plan's policies, its rules'
// outcome, the votes about it, its authors, what changed since it reached
// the gate and the time, whether it applies, is rejected, waits (and for
// what), is held (and until when) or times out. It reads nothing and
// writes nothing: the manager gathers the inputs, calls Decide and acts on
// the decision; kubectl tfrun approve calls it with and without a vote it
// is about to record (Counts), so both say the same.

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/planpolicy"
)

// Vote is one user's decision about the plan waiting: from a
// TerraformRunApproval, spec.approval or the engine.
type Vote struct {
	User    string
	Groups  []string
	Approve bool
	Reason  string
	// Source names where the vote came from ("TerraformRunApproval/<name>",
	// "spec.approval.approvedPlan").
	Source string
	// At is when it was cast (zero when unknown: spec.approval's).
	At time.Time
	// Override is an approval that lets the plan apply outside the
	// windows of the run and its namespace's policies (admission let only
	// a policy admin make it); a cluster policy's windows it never opens.
	Override bool
}

// Input is everything the gate decides from.
type Input struct {
	// Policy is the run's spec.approval combined with the policies that
	// govern it (Combine).
	Policy Governed
	// Digest is the plan waiting.
	Digest string
	// Authors changed what the plan reads, or asked for the run.
	Authors []string
	// Votes are the decisions about Digest.
	Votes []Vote
	// Rules is what the policy's rules decided about the plan (nil
	// without rules).
	Rules *planpolicy.Outcome
	// Unreadable, when set, is why the rules could not judge the plan
	// (it did not read, or a rule no longer compiles): the plan is held.
	Unreadable error
	// Changed, when set, says how the policies changed since the plan
	// reached the gate: the plan is held.
	Changed string
	// Deadline is when the plan's wait for approval times out (zero:
	// never).
	Deadline time.Time
	// Now is the time of the decision.
	Now time.Time
	// Held is the change windows' state as the manager recorded it, for
	// an input rebuilt from the record (Recorded), which does not know the
	// windows themselves.
	Held *infrav1.ChangeWindowStatus
}

// Effect is what the gate does with the plan.
type Effect string

const (
	// Approve: the plan applies.
	Approve Effect = "Approve"
	// Reject: a counted rejection rejects it.
	Reject Effect = "Reject"
	// Deny: a Deny rule matched (or a rule could not be evaluated).
	Deny Effect = "Deny"
	// TimeOut: it waited past its deadline without approval.
	TimeOut Effect = "TimeOut"
	// Wait: it waits for approvals (Decision.Why says which).
	Wait Effect = "Wait"
	// Stale: spec.approval.approvedPlan names another plan.
	Stale Effect = "Stale"
	// HoldWindow: it is approved and waits for its change windows
	// (Decision.Window says until when).
	HoldWindow Effect = "HoldWindow"
	// HoldChanged: the policies changed while it waited; it must be
	// planned again.
	HoldChanged Effect = "HoldChanged"
	// HoldUnreadable: the rules could not judge it.
	HoldUnreadable Effect = "HoldUnreadable"
)

// Decision is what the gate decided, and what to record.
type Decision struct {
	Effect Effect
	// Tally is the count of the votes under the policy and the rules,
	// for status.approvals.
	Tally infrav1.ApprovalTally
	// Rejection is the vote that rejects, for Reject.
	Rejection *Vote
	// Source and How say how a plan that needed no person's approval was
	// approved (by a rule, or by mode Auto); empty when people approved
	// it (then ApprovalSource names where their votes came from).
	Source infrav1.ApprovalSource
	How    string
	// Why says why the plan waits, is held or is denied.
	Why string
	// Window is the change windows' state, when the plan has any and
	// is approved.
	Window *infrav1.ChangeWindowStatus
	// Publish is who may still pass the gate in the engine, for the
	// engines that enforce it at admission; nil when nobody may (the plan
	// is decided, held, or needs no one).
	Publish *GatePolicy
	// Recheck is when to look again without a new event (zero: no need):
	// the deadline, or when a closed change window opens (for HoldWindow,
	// which may have passed: look again at once).
	Recheck time.Time
}

// GatePolicy is who may still pass the gate in the engine (an Argo resume,
// a Tekton approval): engine.GatePolicy's fields, without the dependency.
type GatePolicy struct {
	Digest string
	Users  []string
	Groups []string
	Barred []string
	Needed int32
}

// Decide decides the plan in. The order is the order of precedence: a
// Deny rule, a counted rejection, a timeout of a held plan, a hold for a
// policy change or an unreadable plan, an approval (held by the change
// windows when closed), a timeout, a stale approvedPlan, and otherwise a
// wait.
func Decide(in Input) Decision {
	ap := in.Policy.Approval
	votes := in.Votes
	timedOut := !in.Deadline.IsZero() && !in.Now.Before(in.Deadline)
	if timedOut {
		votes = dropLateApprovals(votes, in.Deadline)
	}
	t, rejection := tally(ap, in.Authors, in.Digest, votes)
	rules := in.Rules
	if in.Unreadable != nil {
		rules = nil
	} else {
		applyRules(&t, rules, in.Policy, votes)
	}
	if !in.Deadline.IsZero() {
		dl := metav1.NewTime(in.Deadline)
		t.Deadline = &dl
	}
	d := Decision{Tally: t, Recheck: in.Deadline}
	denied := rules != nil && rules.Decision == planpolicy.Deny
	held := in.Unreadable != nil || in.Changed != ""
	switch {
	case denied:
		d.Effect, d.Why = Deny, rules.DenyMessage()
	case rejection != nil:
		d.Effect, d.Rejection = Reject, rejection
	case held && timedOut:
		d.Effect = TimeOut
	case in.Changed != "":
		d.Effect, d.Why = HoldChanged, in.Changed
	case in.Unreadable != nil:
		d.Effect, d.Why = HoldUnreadable, in.Unreadable.Error()
	case t.Needed == 0:
		approved(&d, in, rules, votes)
	case timedOut:
		d.Effect = TimeOut
	case ap.ApprovedPlan != "" && ap.ApprovedPlan != in.Digest:
		d.Effect = Stale
	default:
		d.Effect, d.Why = Wait, TallyMessage(d.Tally)
	}
	if d.Effect == Wait || d.Effect == Stale {
		d.Publish = publish(ap, in.Authors, rules, d.Tally)
	}
	if d.Effect != HoldWindow && !in.Deadline.After(in.Now) {
		d.Recheck = time.Time{}
	}
	return d
}

// approved decides a plan the votes and rules let through: it applies,
// unless its change windows are closed.
func approved(d *Decision, in Input, rules *planpolicy.Outcome, votes []Vote) {
	d.Source, d.How = ruleApproval(rules, in.Policy.Approval.Mode)
	if rules != nil && rules.Decision == planpolicy.AutoApprove && d.Tally.Required > 0 {
		// Another layer asked people too, and they approved.
		d.Source, d.How = "", ""
	}
	d.Effect = Approve
	w := WindowState(in.Policy, in.Authors, votes, in.Now)
	if w == nil {
		return
	}
	d.Tally.ChangeWindow, d.Window = w, w
	if w.Open {
		return
	}
	how := d.How
	if how == "" {
		how = TallyMessage(d.Tally)
	}
	d.Effect, d.Why = HoldWindow, how
	d.Recheck = in.Now.Add(time.Hour)
	if w.OpensAt != nil {
		d.Recheck = w.OpensAt.Time
	}
}

// Counts says whether a vote by user (in groups) would count toward the
// plan in, and why not. The plan is decided with and without the vote:
// an approval counts when the policy does not ignore it and it adds to a
// requirement still open (the policy's requiredApprovals, or a matched
// Require rule whose approvers it meets); an override also when it opens
// the change windows of a plan otherwise approved; a rejection when the
// policy does not ignore it.
func Counts(in Input, v Vote) (bool, string) {
	if why := Ignored(in, v); why != "" {
		return false, why
	}
	before := Decide(in)
	in.Votes = append(slices.Clone(in.Votes), v)
	after := Decide(in)
	if !v.Approve {
		return true, ""
	}
	switch before.Effect {
	case Approve, HoldWindow:
		if v.Override {
			return overrides(in, after)
		}
		return false, "the plan needs no more approvals"
	case Deny, Reject:
		return false, "the plan is rejected"
	case TimeOut:
		return false, "the plan's wait for approval timed out"
	case HoldChanged, HoldUnreadable:
		return false, "the plan is held: " + before.Why
	}
	if progress(in, after) > progress(in, before) {
		return true, ""
	}
	if slices.Contains(before.Tally.ApprovedBy, v.User) {
		return false, v.User + " has approved this plan already"
	}
	var unmet []string
	for _, rt := range before.Tally.Rules {
		if rt.Effect == infrav1.RuleRequire && rt.Needed > 0 {
			unmet = append(unmet, fmt.Sprintf("rule %s needs %d more from %s", rt.Name, rt.Needed, Describe(rt.Approvers)))
		}
	}
	if len(unmet) > 0 {
		return false, "it meets none of the Require rules the plan still needs (" + strings.Join(unmet, "; ") + ")"
	}
	return false, "it does not add to what the plan needs (" + Remaining(&before.Tally) + ")"
}

// overrides says whether an override opens the change windows of a plan
// otherwise approved: after is the decision with it; an input rebuilt
// from the record knows the windows' state only (Input.Held).
func overrides(in Input, after Decision) (bool, string) {
	w := after.Window
	if w == nil {
		w = in.Held
	}
	switch {
	case w == nil || w.Open && w.OverriddenBy == "":
		return false, "the plan needs no more approvals, and no change window holds it"
	case w.OverriddenBy != "" || w.Overridable:
		return true, ""
	}
	return false, "the plan is held by a ClusterTerraformRunPolicy's change window, which no override opens"
}

// progress is how many of the approvals the plan asks for d counts: the
// policy's own (requiredApprovals in mode Manual, or what the layers an
// AutoApprove rule did not waive ask), and each matched Require rule's.
func progress(in Input, d Decision) int32 {
	t := d.Tally
	base := t.Required
	var rules int32
	for _, rt := range t.Rules {
		if rt.Effect == infrav1.RuleRequire {
			base = Required(in.Policy.Approval)
			rules += min(int32(len(rt.ApprovedBy)), rt.Required)
		}
	}
	if in.Policy.Approval.Mode == infrav1.ApprovalAuto {
		base = 0 // mode Auto asks nothing of its own
	}
	return min(int32(len(t.ApprovedBy)), base) + rules
}

// Ignored says why the policy of in would ignore the vote v ("" when it
// counts it at all): v's user is not among the approvers, is an author
// under selfApproval Forbidden, or is not known where the policy needs
// to know.
func Ignored(in Input, v Vote) string {
	return Why(in.Policy.Approval, in.Authors, v.User, v.Groups, v.Approve)
}

// dropLateApprovals keeps the votes that still count once the approval
// deadline passed: every rejection, whenever it was cast, and the
// approvals known to be cast before the deadline. The deadline bounds
// approvals only: a plan approved in time and held past it by a change
// window must still be stopped by a rejection until it is applied. An
// approval in the TerraformRun's spec (approvedPlan) has no time of its
// own; made in time, it was counted when the spec changed.
func dropLateApprovals(votes []Vote, deadline time.Time) []Vote {
	var out []Vote
	for _, v := range votes {
		if !v.Approve || (!v.At.IsZero() && !v.At.After(deadline)) {
			out = append(out, v)
		}
	}
	return out
}

// tally counts votes about digest under the policy ap, for a change by
// authors. A user's newest decision counts; a plan is approved when
// requiredApprovals distinct allowed users approve it, and rejected by one
// allowed rejection (Rejection Any) or by requiredApprovals of them
// (Quorum). It returns the tally and the rejecting vote, if any.
func tally(ap infrav1.ApprovalSpec, authors []string, digest string, votes []Vote) (infrav1.ApprovalTally, *Vote) {
	need := Required(ap)
	t := infrav1.ApprovalTally{Digest: digest, Required: need}
	var rejection *Vote
	for _, v := range newest(votes) {
		if why := Why(ap, authors, v.User, v.Groups, v.Approve); why != "" {
			t.Ignored = append(t.Ignored, infrav1.IgnoredDecision{User: v.User, Source: v.Source, Reason: why})
			continue
		}
		if v.Approve {
			t.ApprovedBy = append(t.ApprovedBy, v.User)
			continue
		}
		t.RejectedBy = append(t.RejectedBy, v.User)
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

// newest is each user's newest vote, in the order of each user's first.
// Creation times have a resolution of one second: decisions of the same
// second are ordered by user, and a user's approval and rejection in the
// same second count as the rejection.
func newest(votes []Vote) []Vote {
	votes = slices.Clone(votes)
	sort.SliceStable(votes, func(i, j int) bool {
		a, b := votes[i], votes[j]
		if !a.At.Equal(b.At) {
			return a.At.Before(b.At)
		}
		if a.User != b.User {
			return a.User < b.User
		}
		return a.Approve && !b.Approve
	})
	latest := map[string]int{}
	var order []string
	for i, v := range votes {
		if _, seen := latest[v.User]; !seen {
			order = append(order, v.User)
		}
		latest[v.User] = i
	}
	out := make([]Vote, 0, len(order))
	for _, u := range order {
		out = append(out, votes[latest[u]])
	}
	return out
}

// TallyMessage says where a waiting plan's approvals stand.
func TallyMessage(t infrav1.ApprovalTally) string {
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

// applyRules puts what the rules decided into the tally t of votes:
// every matched rule is listed; Require rules add to requiredApprovals,
// each counting the approvals that also meet its approvers, and the plan
// needs what the furthest from met still needs, requiredApprovals
// included (in mode Manual): a rule never lowers what the rest of the
// policy asks; AutoApprove waives what its layer and those below ask
// (Waived); mode Auto where no rule matched needs none.
func applyRules(t *infrav1.ApprovalTally, o *planpolicy.Outcome, gov Governed, votes []Vote) {
	mode := gov.Approval.Mode
	if o == nil {
		// No rules: mode Auto approves what reaches the gate (a run in mode
		// Auto stops there only for its change windows).
		if mode == infrav1.ApprovalAuto {
			t.Needed = 0
		}
		return
	}
	groups := map[string][]string{}
	for _, v := range votes {
		if v.Approve {
			groups[v.User] = v.Groups
		}
	}
	for _, m := range o.Matched {
		rt := infrav1.RuleTally{Name: m.Rule.Name, Effect: m.Rule.Effect, Message: m.Rule.Message}
		if m.Err != nil {
			rt.Effect, rt.Message = infrav1.RuleDeny, "could not be evaluated, so it denies: "+m.Err.Error()
			if rt.Name == "" {
				rt.Name = "(rules)"
			}
		}
		t.Rules = append(t.Rules, rt)
	}
	switch o.Decision {
	case planpolicy.Require:
		requireRules(t, o, mode, groups)
	case planpolicy.AutoApprove:
		var auto []string
		for _, m := range o.Matched {
			if m.Err == nil && m.Rule.Effect == infrav1.RuleAutoApprove {
				auto = append(auto, m.Rule.Name)
			}
		}
		t.Required = Waived(gov, auto)
		t.Needed = max(t.Required-int32(len(t.ApprovedBy)), 0)
		t.Summary = fmt.Sprintf("%d/%d", t.Required-t.Needed, t.Required)
	case planpolicy.Default:
		if mode == infrav1.ApprovalAuto {
			t.Needed = 0
		}
	}
}

// requireRules counts the approvals that meet each matched Require rule.
// The strictest binds: a Require rule of one does not lower a
// requiredApprovals of two. Mode Auto asks for none of its own.
func requireRules(t *infrav1.ApprovalTally, o *planpolicy.Outcome, mode infrav1.ApprovalMode, groups map[string][]string) {
	if mode == infrav1.ApprovalAuto {
		t.Required, t.Needed = 0, 0
	}
	for _, rule := range o.Require {
		i := indexRule(t.Rules, rule.Name)
		rt := &t.Rules[i]
		rt.Required = rule.Require.Approvals
		rt.Approvers = rule.Require.Approvers.DeepCopy()
		for _, u := range t.ApprovedBy {
			if Allowed(rule.Require.Approvers, u, groups[u]) {
				rt.ApprovedBy = append(rt.ApprovedBy, u)
			}
		}
		rt.Needed = max(rt.Required-int32(len(rt.ApprovedBy)), 0)
		t.Required = max(t.Required, rt.Required)
		t.Needed = max(t.Needed, rt.Needed)
	}
	t.Summary = fmt.Sprintf("%d/%d", t.Required-min(t.Needed, t.Required), t.Required)
}

func indexRule(rules []infrav1.RuleTally, name string) int {
	for i, r := range rules {
		if r.Name == name {
			return i
		}
	}
	return -1
}

// ruleApproval says how a plan the tally lets through was approved when
// no person's approval was needed: by an AutoApprove rule, or by mode
// Auto where no rule matched ("" when people approved it).
func ruleApproval(o *planpolicy.Outcome, mode infrav1.ApprovalMode) (infrav1.ApprovalSource, string) {
	switch {
	case o == nil && mode == infrav1.ApprovalAuto:
		return infrav1.ApprovedAutomatically, "approved automatically (approval mode Auto)"
	case o == nil:
		return "", ""
	case o.Decision == planpolicy.AutoApprove:
		return infrav1.ApprovedByRule, "approved automatically by rule " + o.AutoApprove.Name
	case o.Decision == planpolicy.Default && mode == infrav1.ApprovalAuto:
		return infrav1.ApprovedAutomatically, "approved automatically (approval mode Auto; no rule of spec.approval.rules matched)"
	}
	return "", ""
}

// publish is who may still pass the gate in the engine: the policy's
// approvers, less the authors (selfApproval Forbidden) and those who have
// approved this plan already, narrowed to those whose resume would count
// for every Require rule still unmet. A resume is one approval, and
// admission lets one through only when the plan needs one more, so it
// must meet each unmet rule's approvers as well as the policy's: their
// intersection (Intersect, which leaves out a user one names and another
// admits by group: refused at admission, never a resume that opr8r would
// then refuse, stopping the run and losing its plan).
func publish(ap infrav1.ApprovalSpec, authors []string, o *planpolicy.Outcome, t infrav1.ApprovalTally) *GatePolicy {
	p := &GatePolicy{Digest: t.Digest, Needed: t.Needed, Barred: append([]string{}, t.ApprovedBy...)}
	who := ap.Approvers
	if o != nil && o.Decision == planpolicy.Require {
		for _, rule := range o.Require {
			if i := indexRule(t.Rules, rule.Name); i >= 0 && t.Rules[i].Needed > 0 && rule.Require.Approvers != nil {
				who = Intersect(who, rule.Require.Approvers)
			}
		}
	}
	if who != nil {
		p.Users = append([]string{}, who.Users...)
		p.Groups = append([]string{}, who.Groups...)
	}
	if ap.SelfApproval == infrav1.SelfApprovalForbidden {
		for _, a := range authors {
			if !slices.Contains(p.Barred, a) {
				p.Barred = append(p.Barred, a)
			}
		}
	}
	sort.Strings(p.Barred)
	return p
}

// WindowState says whether the change windows let the plan approved by
// votes apply at now (nil without windows): open, overridden by a policy
// admin's approval, or held until a time. The windows of each layer (the
// run's spec.approval, each policy's) are judged apart, and all must let
// the plan apply: one policy's Allow window never opens another's.
func WindowState(g Governed, authors []string, votes []Vote, now time.Time) *infrav1.ChangeWindowStatus {
	layers := g.Windows
	if layers == nil && len(g.Approval.Windows) > 0 {
		layers = [][]infrav1.ChangeWindow{g.Approval.Windows}
	}
	if len(layers) == 0 {
		return nil
	}
	open, why, next, err := windowsState(layers, now)
	if err != nil {
		// The manager stalled the run before it started; a spec or policy
		// changed since holds the plan (fail closed).
		return &infrav1.ChangeWindowStatus{Message: err.Error()}
	}
	if open {
		return &infrav1.ChangeWindowStatus{Open: true}
	}
	// An override (a namespace's policy admin) opens the run's and the
	// namespace's windows, never a cluster policy's: a cluster freeze
	// holds until a cluster admin changes it. It is an approval, and
	// counts only as one the policy counts (not by an author under
	// selfApproval Forbidden, nor by someone outside the approvers).
	var cluster [][]infrav1.ChangeWindow
	for i, l := range layers {
		if i < len(g.WindowsOf) && ClusterLayer(g.WindowsOf[i]) {
			cluster = append(cluster, l)
		}
	}
	copen, cwhy, cnext, _ := windowsState(cluster, now)
	for _, v := range votes {
		if v.Override && v.Approve && v.User != "" && Why(g.Approval, authors, v.User, v.Groups, true) == "" {
			if copen {
				return &infrav1.ChangeWindowStatus{Open: true, Message: why, OverriddenBy: v.User + " (" + v.Source + ")"}
			}
			why, next = cwhy+" (a ClusterTerraformRunPolicy's window, which an override does not open)", cnext
			break
		}
	}
	cw := &infrav1.ChangeWindowStatus{Message: why, Overridable: copen}
	if !next.IsZero() {
		at := metav1.NewTime(next)
		cw.OpensAt = &at
	}
	return cw
}

// windowsState judges each layer's windows at now: open when all are;
// otherwise why the first closed one is, and the latest time one of the
// closed layers opens (zero when one never does), when the plan looks
// again (another layer may have closed by then, which that look sees).
func windowsState(layers [][]infrav1.ChangeWindow, now time.Time) (bool, string, time.Time, error) {
	open, why := true, ""
	var next time.Time
	never := false
	for _, l := range layers {
		ws, err := Compile(l)
		if err != nil {
			return false, "", time.Time{}, err
		}
		o, w, n := ws.State(now)
		if o {
			continue
		}
		if open {
			why = w
		}
		open = false
		if n.IsZero() {
			never = true
		} else if n.After(next) {
			next = n
		}
	}
	if never {
		next = time.Time{}
	}
	return open, why, next, nil
}
