package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/approvalpolicy"
	"github.com/opr8r/opr8r/pkg/changewindow"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/planpolicy"
	"github.com/opr8r/opr8r/pkg/records"
)

// Plan rules (spec.approval.rules, docs/policies.md): CEL conditions over
// the plan waiting at the gate decide it, on top of the rest of
// spec.approval. What the conditions read is the plan as JSON the plan
// step kept (masked), checked against the digest the plan step recorded:
// a record that does not match, or that is not there, denies (fail
// closed), as does a rule that cannot be evaluated.

// planCacheSize bounds the plans kept read: they are named by their
// digest, so an entry never goes stale, and a full cache starts over.
const planCacheSize = 256

// ruleCache keeps compiled rules and read plans between passes, and the
// plans found too large to read, so that a plan held for that is not
// inflated again on every pass.
type ruleCache struct {
	mu         sync.Mutex
	policies   map[string]*planpolicy.Policy
	plans      map[string]planpolicy.Plan
	unreadable map[string]*planUnreadable
	// outcomes are what the rules decided, by the plan's digest, the
	// rules and what they see of the run: a plan waiting at the gate is
	// judged once, not on every pass (a rule over 100,000 changed
	// resources takes about a second).
	outcomes map[string]planpolicy.Outcome
}

func outcomeKey(digest string, rules []infrav1.ApprovalRule, run planpolicy.Run) string {
	b, _ := json.Marshal(struct {
		D string
		R []infrav1.ApprovalRule
		V planpolicy.Run
	}{digest, rules, run})
	return string(b)
}

func (c *ruleCache) outcome(key string) (planpolicy.Outcome, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.outcomes[key]
	return o, ok
}

func (c *ruleCache) keepOutcome(key string, o planpolicy.Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.outcomes == nil || len(c.outcomes) >= planCacheSize {
		c.outcomes = map[string]planpolicy.Outcome{}
	}
	c.outcomes[key] = o
}

func (c *ruleCache) policy(rules []infrav1.ApprovalRule) (*planpolicy.Policy, error) {
	b, _ := json.Marshal(rules)
	key := string(b)
	c.mu.Lock()
	p, ok := c.policies[key]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := planpolicy.Compile(rules)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.policies == nil || len(c.policies) >= planCacheSize {
		c.policies = map[string]*planpolicy.Policy{}
	}
	c.policies[key] = p
	return p, nil
}

func (c *ruleCache) plan(digest string) (planpolicy.Plan, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.plans[digest]
	return p, ok
}

func (c *ruleCache) keep(digest string, p planpolicy.Plan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.plans == nil || len(c.plans) >= planCacheSize {
		c.plans = map[string]planpolicy.Plan{}
	}
	c.plans[digest] = p
}

func (c *ruleCache) tooLarge(digest string) *planUnreadable {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unreadable[digest]
}

func (c *ruleCache) keepTooLarge(digest string, e *planUnreadable) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unreadable == nil || len(c.unreadable) >= planCacheSize {
		c.unreadable = map[string]*planUnreadable{}
	}
	c.unreadable[digest] = e
}

// checkRules compiles spec.approval.rules and windows when a run starts:
// a rule that does not compile, or a window that does not parse, stalls
// the run, named, with the compiler's or the parser's message.
func (r *TerraformRunReconciler) checkRules(eff *infrav1.TerraformRun) error {
	if len(eff.Spec.Approval.Rules) > 0 {
		if _, err := r.rules.policy(eff.Spec.Approval.Rules); err != nil {
			return stalling(infrav1.ReasonInvalidSpec, "%w; fix the condition (docs/policies.md lists what it can read), or test it with kubectl tfrun policy test", err)
		}
	}
	if _, err := changewindow.Compile(eff.Spec.Approval.Windows); err != nil {
		return stalling(infrav1.ReasonInvalidSpec, "%w (docs/policies.md)", err)
	}
	return nil
}

// windowState says whether the change windows let the plan approved by
// votes apply now (nil without windows): open, overridden by a policy
// admin's approval, or held until a time. The windows of each layer (the
// run's spec.approval, each policy's) are judged apart, and all must let
// the plan apply: one policy's Allow window never opens another's.
func (r *TerraformRunReconciler) windowState(st *passState, votes []vote) *infrav1.ChangeWindowStatus {
	layers := st.gov.Windows
	if layers == nil && len(st.eff.Spec.Approval.Windows) > 0 {
		layers = [][]infrav1.ChangeWindow{st.eff.Spec.Approval.Windows}
	}
	if len(layers) == 0 {
		return nil
	}
	open, why, next, err := windowsState(layers, r.now())
	if err != nil {
		// checkRules stalled the run before it started; a spec or policy
		// changed since holds the plan (fail closed).
		return &infrav1.ChangeWindowStatus{Message: err.Error()}
	}
	if open {
		return &infrav1.ChangeWindowStatus{Open: true}
	}
	for _, v := range votes {
		if v.override && v.approve && v.user != "" && !r.UntrustedIdentity {
			// An override (a namespace's policy admin) opens the run's
			// and the namespace's windows, never a cluster policy's: a
			// cluster freeze holds until a cluster admin changes it.
			var cluster [][]infrav1.ChangeWindow
			for i, l := range layers {
				if i < len(st.gov.WindowsOf) && approvalpolicy.ClusterLayer(st.gov.WindowsOf[i]) {
					cluster = append(cluster, l)
				}
			}
			copen, cwhy, cnext, _ := windowsState(cluster, r.now())
			if copen {
				return &infrav1.ChangeWindowStatus{Open: true, Message: why, OverriddenBy: v.user + " (" + v.source + ")"}
			}
			why, next = cwhy+" (a ClusterTerraformRunPolicy's window, which an override does not open)", cnext
			break
		}
	}
	cw := &infrav1.ChangeWindowStatus{Message: why}
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
		ws, err := changewindow.Compile(l)
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

// windowWait is how long a plan held by its change windows waits before
// its next look: until they open (an hour when they do not within a
// year, in case the spec changes).
func windowWait(w *infrav1.ChangeWindowStatus, now time.Time) time.Duration {
	if w.OpensAt == nil {
		return time.Hour
	}
	return max(w.OpensAt.Sub(now), time.Second)
}

// windowHeld says why a plan waits for its change window.
func windowHeld(w *infrav1.ChangeWindowStatus) string {
	at := "no window opens within a year"
	if w.OpensAt != nil {
		at = "it applies at " + w.OpensAt.UTC().Format(time.RFC3339) + " if still approved"
	}
	return "waits for its change window (spec.approval.windows): " + w.Message + "; " + at + ", or now with a policy admin's kubectl tfrun approve --override-change-windows"
}

// planRules evaluates spec.approval.rules against the plan waiting at the
// gate (nil without rules). A *planUnreadable error is a plan too large
// for the rules to read, which holds the plan; another error is one to
// retry (the records could not be read); everything else that keeps the
// rules from deciding denies.
func (r *TerraformRunReconciler) planRules(ctx context.Context, run *infrav1.TerraformRun, st *passState) (*planpolicy.Outcome, error) {
	rules := st.eff.Spec.Approval.Rules
	if len(rules) == 0 {
		return nil, nil
	}
	pol, err := r.rules.policy(rules)
	if err != nil {
		// The rules compiled when the run started (checkRules), so they
		// were edited while the plan waited: the plan is held until they
		// compile again, never rejected for a typo nobody judged it by.
		return nil, &planUnreadable{rules: err}
	}
	plan, err := r.rulePlan(ctx, run, st)
	var refused *planRefused
	if errors.As(err, &refused) {
		o := planpolicy.Failed(err)
		return &o, nil
	}
	if err != nil {
		return nil, err
	}
	view := planpolicy.RunOf(run)
	key := outcomeKey(st.progress.Plan.JSONDigest, rules, view)
	if o, ok := r.rules.outcome(key); ok {
		return &o, nil
	}
	o := pol.Evaluate(ctx, plan, view)
	if !failedToEvaluate(o) {
		// A condition that failed (its time limit) is tried again on the
		// next pass rather than remembered.
		r.rules.keepOutcome(key, o)
	}
	return &o, nil
}

func failedToEvaluate(o planpolicy.Outcome) bool {
	for _, m := range o.Matched {
		if m.Err != nil {
			return true
		}
	}
	return false
}

// planRefused is a plan the rules cannot read: they deny.
type planRefused struct{ msg string }

func (e *planRefused) Error() string { return e.msg }

// planUnreadable is a plan whose JSON inflates past records.MaxRecordSize,
// the most the manager reads: the rules cannot judge it, so it cannot be
// approved, and it is held at the gate (decideGate), neither retried as
// an error nor denied.
//
// Held rather than denied: the rules did not judge the plan, so recording
// a rule's denial (DeniedByRule) would claim a decision nobody made; a plan
// this large is what terraform makes of a large configuration, unlike a
// record that fails its digest (changed after the plan step wrote it),
// which is denied. Held, it never applies, the gate's own controls still
// end it (a person's rejection, the approval timeout, a spec change that
// supersedes it), and the condition says why and what to do.
//
// Rules that no longer compile (edited while the plan waits) hold it the
// same way, for the same reason.
type planUnreadable struct {
	runID string
	err   error
	rules error // set: the rules do not compile
}

func (e *planUnreadable) Error() string {
	if e.rules != nil {
		return "spec.approval.rules were changed while the plan waited and no longer compile: " + e.rules.Error()
	}
	return fmt.Sprintf("spec.approval.rules cannot read the plan as JSON of run %s: it is larger than %d MiB, the most the manager reads (%v)", e.runID, records.MaxRecordSize>>20, e.err)
}

func (e *planUnreadable) Unwrap() error { return e.err }

// advice says what to do about a plan held because it is unreadable.
func (e *planUnreadable) advice() string {
	if e.rules != nil {
		return "the plan waits until a policy admin fixes the rule (test it with kubectl tfrun policy test); reject it (kubectl tfrun reject) to end it"
	}
	return "the plan cannot be approved while spec.approval.rules apply to it; reject it (kubectl tfrun reject) or let spec.approval.timeout end it, " +
		"then make the plan smaller (split the configuration into several TerraformRuns), or have a policy admin change spec.approval.rules"
}

// rulePlan reads the plan waiting at the gate as the rules see it: the
// plan as JSON the plan step kept, verified against the digest it
// recorded.
func (r *TerraformRunReconciler) rulePlan(ctx context.Context, run *infrav1.TerraformRun, st *passState) (planpolicy.Plan, error) {
	p := st.progress.Plan
	if p.JSONDigest == "" {
		return planpolicy.Plan{}, &planRefused{"the plan step recorded no digest of the plan as JSON, which the rules read"}
	}
	if plan, ok := r.rules.plan(p.JSONDigest); ok {
		return plan, nil
	}
	if e := r.rules.tooLarge(p.JSONDigest); e != nil {
		return planpolicy.Plan{}, e
	}
	if r.Records == nil {
		return planpolicy.Plan{}, &planRefused{"this manager keeps no records, so the plan the rules read is not there"}
	}
	k := records.Key{Namespace: run.Namespace, Run: run.Name, RunID: st.child.GetName(), Step: names.StepPlan, Kind: records.KindPlanJSON}
	b, err := r.Records.Get(ctx, k)
	if errors.Is(err, records.ErrNotFound) {
		return planpolicy.Plan{}, &planRefused{fmt.Sprintf("the plan as JSON of run %s is not kept (%v)", k.RunID, err)}
	}
	if errors.Is(err, records.ErrTooLarge) {
		e := &planUnreadable{runID: k.RunID, err: err}
		r.rules.keepTooLarge(p.JSONDigest, e)
		return planpolicy.Plan{}, e
	}
	if err != nil {
		return planpolicy.Plan{}, generic("ReadPlan", err, "reading the plan as JSON for spec.approval.rules")
	}
	if got := records.Digest(b); got != p.JSONDigest {
		return planpolicy.Plan{}, &planRefused{fmt.Sprintf("the plan as JSON of run %s has the digest %s, but its plan step recorded %s: it was changed after the plan step wrote it", k.RunID, got, p.JSONDigest)}
	}
	plan, err := planpolicy.FromJSON(b)
	if err != nil {
		return planpolicy.Plan{}, &planRefused{err.Error()}
	}
	r.rules.keep(p.JSONDigest, plan)
	return plan, nil
}

// applyRules puts what the rules decided into the tally t of votes:
// every matched rule is listed; Require rules add to requiredApprovals,
// each counting the approvals that also meet its approvers, and the plan
// needs what the furthest from met still needs, requiredApprovals
// included (in mode Manual): a rule never lowers what the rest of
// spec.approval asks; AutoApprove (and mode Auto where no rule matched)
// needs none.
func applyRules(t *infrav1.ApprovalTally, o *planpolicy.Outcome, mode infrav1.ApprovalMode, gov approvalpolicy.Governed, votes []vote) {
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
		if v.approve {
			groups[v.user] = v.groups
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
		// The strictest binds: a Require rule of one does not lower a
		// requiredApprovals of two. Mode Auto asks for none of its own.
		if mode == infrav1.ApprovalAuto {
			t.Required, t.Needed = 0, 0
		}
		for _, rule := range o.Require {
			i := indexRule(t.Rules, rule.Name)
			rt := &t.Rules[i]
			rt.Required = rule.Require.Approvals
			rt.Approvers = rule.Require.Approvers.DeepCopy()
			for _, u := range t.ApprovedBy {
				if approvalpolicy.Allowed(rule.Require.Approvers, u, groups[u]) {
					rt.ApprovedBy = append(rt.ApprovedBy, u)
				}
			}
			rt.Needed = max(rt.Required-int32(len(rt.ApprovedBy)), 0)
			t.Required = max(t.Required, rt.Required)
			t.Needed = max(t.Needed, rt.Needed)
		}
		t.Summary = fmt.Sprintf("%d/%d", t.Required-min(t.Needed, t.Required), t.Required)
	case planpolicy.AutoApprove:
		// A layer's AutoApprove waives its own requirement only: what
		// the other layers (a cluster policy, the run's own Manual) ask
		// of people still holds (approvalpolicy.Waived).
		var auto []string
		for _, m := range o.Matched {
			if m.Err == nil && m.Rule.Effect == infrav1.RuleAutoApprove {
				auto = append(auto, m.Rule.Name)
			}
		}
		t.Required = approvalpolicy.Waived(gov, auto)
		t.Needed = max(t.Required-int32(len(t.ApprovedBy)), 0)
		t.Summary = fmt.Sprintf("%d/%d", t.Required-t.Needed, t.Required)
	case planpolicy.Default:
		if mode == infrav1.ApprovalAuto {
			t.Needed = 0
		}
	}
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

// ruleGatePolicy narrows who may pass the gate in the engine to those
// whose resume would count for every Require rule still unmet. A resume is
// one approval, and admission lets one through only when the plan needs
// one more (GatePolicy.Needed), so it must meet each unmet rule's
// approvers as well as spec.approval's: their intersection
// (approvalpolicy.Intersect, which leaves out a user one names and another
// admits by group: refused at admission, never a resume that opr8r would
// then refuse, stopping the run and losing its plan).
func ruleGatePolicy(p *engine.GatePolicy, ap infrav1.ApprovalSpec, o *planpolicy.Outcome, t infrav1.ApprovalTally) {
	if o == nil || o.Decision != planpolicy.Require {
		return
	}
	who := ap.Approvers
	narrowed := false
	for _, rule := range o.Require {
		if i := indexRule(t.Rules, rule.Name); i >= 0 && t.Rules[i].Needed > 0 && rule.Require.Approvers != nil {
			who = approvalpolicy.Intersect(who, rule.Require.Approvers)
			narrowed = true
		}
	}
	if narrowed {
		p.Users = append([]string{}, who.Users...)
		p.Groups = append([]string{}, who.Groups...)
	}
}
