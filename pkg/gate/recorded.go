package gate

// This file rebuilds the gate's input from what the manager recorded, so
// that kubectl tfrun approve, which cannot read the plan, asks Decide the
// same question the manager does.

import (
	"errors"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/planpolicy"
)

// VotesOf are the decisions about digest: the run's TerraformRunApprovals
// (approvals, of any run: those of another run or plan are left out) and
// spec.approval's approvedPlan or rejectedPlan, made by the user stamped
// in infra.opr8r.io/decided-by.
func VotesOf(run *infrav1.TerraformRun, approvals []infrav1.TerraformRunApproval, digest string) []Vote {
	var out []Vote
	ap := run.Spec.Approval
	decider := run.Annotations[infrav1.DecidedByAnnotation]
	switch digest {
	case ap.RejectedPlan:
		out = append(out, Vote{User: decider, Reason: ap.RejectReason, Source: "spec.approval.rejectedPlan"})
	case ap.ApprovedPlan:
		out = append(out, Vote{User: decider, Approve: true, Source: "spec.approval.approvedPlan"})
	}
	for _, a := range approvals {
		if a.Spec.RunName != run.Name || a.Spec.PlanDigest != digest {
			continue
		}
		out = append(out, Vote{
			User: a.Spec.User, Groups: a.Spec.Groups, Approve: a.Spec.Decision != infrav1.DecisionReject,
			Reason: a.Spec.Reason, Source: "TerraformRunApproval/" + a.Name, At: a.CreationTimestamp.Time,
			Override: a.Spec.OverrideChangeWindows,
		})
	}
	return out
}

// Recorded is the gate's input for the plan the manager last counted
// (status.approvals), rebuilt from that record: the combined policy and
// each layer's approvals, the Require, AutoApprove and Deny rules that
// matched, whether the policies changed or the plan could not be read,
// with votes and the run's authors. ok is false when the manager has not
// counted that plan yet: the input is then the run's own spec.approval,
// without rules.
// The change windows are known by their recorded state only (Held): they
// decide when an approved plan applies, and whether an override opens
// them, never whether an approval counts.
func Recorded(run *infrav1.TerraformRun, digest string, votes []Vote, now time.Time) (in Input, ok bool) {
	in = Input{Digest: digest, Authors: Authors(run), Votes: votes, Now: now}
	t := run.Status.Approvals
	in.Policy = Combine(run.Spec.Approval, nil)
	if t == nil || t.Digest != digest {
		return in, false
	}
	if t.Policy != nil {
		// A manager before policies were recorded counted under the
		// run's spec.approval alone.
		in.Policy = Governed{Approval: FromEffective(t.Policy), Refs: t.Policy.Policies, Needs: map[string]int32{}}
		for _, l := range t.Policy.Layers {
			in.Policy.Needs[l.Layer] = l.Approvals
		}
		in.Changed = t.Policy.Changed
	}
	if t.Deadline != nil {
		in.Deadline = t.Deadline.Time
	}
	in.Rules = outcomeOf(t.Rules, run.Spec.Approval.Rules)
	in.Held = t.ChangeWindow
	if c := meta.FindStatusCondition(run.Status.Conditions, infrav1.ApprovedCondition); c != nil && c.Status == "Unknown" &&
		(c.Reason == infrav1.ReasonPlanUnreadable || c.Reason == infrav1.ReasonRulesInvalid) {
		in.Unreadable = errors.New(c.Message)
	}
	return in, true
}

// outcomeOf is the rules' outcome as the manager recorded it (nil when no
// rule matched: the same decision as no rules). A manager before it
// recorded whom a Require rule counts named the rule only: its approvers
// are then the run's own rule's (own).
func outcomeOf(rules []infrav1.RuleTally, own []infrav1.ApprovalRule) *planpolicy.Outcome {
	if len(rules) == 0 {
		return nil
	}
	o := &planpolicy.Outcome{Decision: planpolicy.Default}
	for _, rt := range rules {
		r := infrav1.ApprovalRule{Name: rt.Name, Effect: rt.Effect, Message: rt.Message}
		if rt.Effect == infrav1.RuleRequire {
			r.Require = &infrav1.RuleRequirement{Approvals: rt.Required, Approvers: rt.Approvers.DeepCopy()}
			if i := slices.IndexFunc(own, func(o infrav1.ApprovalRule) bool { return o.Name == rt.Name }); rt.Approvers == nil && i >= 0 && own[i].Require != nil {
				r.Require.Approvers = own[i].Require.Approvers.DeepCopy()
			}
			o.Require = append(o.Require, r)
		}
		o.Matched = append(o.Matched, planpolicy.Match{Rule: r})
	}
	for i, m := range o.Matched {
		switch {
		case m.Rule.Effect == infrav1.RuleDeny && o.Deny == nil:
			o.Deny = &o.Matched[i]
		case m.Rule.Effect == infrav1.RuleAutoApprove && o.AutoApprove == nil:
			o.AutoApprove = &o.Matched[i].Rule
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
