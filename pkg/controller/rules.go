package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/gate"
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
	if _, err := gate.Compile(eff.Spec.Approval.Windows); err != nil {
		return stalling(infrav1.ReasonInvalidSpec, "%w (docs/policies.md)", err)
	}
	return nil
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
