package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/gate"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/records"
)

// Plans as JSON the rules read: one that only adds, one that destroys an
// IAM role.
const (
	addOnlyJSON = `{"resource_changes":[{"address":"aws_s3_bucket.logs","mode":"managed","type":"aws_s3_bucket","name":"logs","provider_name":"registry.terraform.io/hashicorp/aws","change":{"actions":["create"]}}]}`
	destroyJSON = `{"resource_changes":[{"address":"aws_iam_role.ci","mode":"managed","type":"aws_iam_role","name":"ci","provider_name":"registry.terraform.io/hashicorp/aws","change":{"actions":["delete"]}},{"address":"aws_s3_bucket.logs","mode":"managed","type":"aws_s3_bucket","name":"logs","provider_name":"registry.terraform.io/hashicorp/aws","change":{"actions":["no-op"]}}]}`
)

func jsonDigest(b string) string {
	s := sha256.Sum256([]byte(b))
	return "sha256:" + hex.EncodeToString(s[:])
}

var teamRules = []infrav1.ApprovalRule{
	{Name: "add-only", Condition: "plan.destroy == 0 && plan.change == 0", Effect: infrav1.RuleAutoApprove},
	{Name: "destroys-need-security", Condition: "plan.destroy > 0", Effect: infrav1.RuleRequire,
		Require: &infrav1.RuleRequirement{Approvals: 2, Approvers: &infrav1.Approvers{Groups: []string{"security"}}}},
	{Name: "no-iam-deletes", Condition: "plan.resourceChanges.exists(r, r.type.startsWith('aws_iam_') && 'delete' in r.actions)", Effect: infrav1.RuleDeny,
		Message: "IAM roles are deleted by the security team's own pipeline"},
}

func inGroup(a *infrav1.TerraformRunApproval, groups ...string) *infrav1.TerraformRunApproval {
	a.Spec.Groups = groups
	return a
}

// requireOne asks one approval, from anyone, for a plan that destroys.
var requireOne = infrav1.ApprovalRule{Name: "destroys-need-one", Condition: "plan.destroy > 0", Effect: infrav1.RuleRequire,
	Require: &infrav1.RuleRequirement{Approvals: 1}}

func TestPlanRulesDecide(t *testing.T) {
	const digest = "sha256:aa"
	since := metav1.NewTime(t0.Add(-time.Minute))
	decided := metav1.NewTime(t0.Add(-time.Second))
	pending := engine.Gate{State: engine.GatePending, Since: &since}
	cases := map[string]struct {
		mode         infrav1.ApprovalMode
		required     int32 // spec.approval.requiredApprovals
		rules        []infrav1.ApprovalRule
		plan         string // the plan as JSON kept
		recorded     string // the JSON digest the plan step recorded ("": that of plan)
		gate         engine.Gate
		approvals    []*infrav1.TerraformRunApproval
		wantApproved string
		wantMessage  string
		wantSource   infrav1.ApprovalSource
		wantApprove  int
		wantReject   int
		wantCancel   bool
		wantRules    string // the matched rules, "name:needed" each
		wantSummary  string
	}{
		"an add-only plan auto-approves in mode Manual": {
			rules: teamRules, plan: addOnlyJSON, gate: pending,
			wantApproved: "True/AutoApproved", wantMessage: "approved automatically by rule add-only", wantSource: infrav1.ApprovedByRule, wantApprove: 1,
			wantRules: "add-only:0",
		},
		"a Deny rule wins: rejected at the gate, with its message": {
			rules: teamRules, plan: destroyJSON, gate: pending,
			approvals:    []*infrav1.TerraformRunApproval{inGroup(approval("x1", "a", digest, "sam", true), "security"), inGroup(approval("x2", "a", digest, "sue", true), "security")},
			wantApproved: "False/DeniedByRule", wantMessage: "denied by rule no-iam-deletes: IAM roles are deleted by the security team's own pipeline",
			wantSource: infrav1.ApprovedByRule, wantReject: 1, wantRules: "destroys-need-security:0,no-iam-deletes:0",
		},
		"a destroy waits for two from security: one is not enough": {
			rules: teamRules[:2], plan: destroyJSON, gate: pending,
			approvals:    []*infrav1.TerraformRunApproval{inGroup(approval("x1", "a", digest, "sam", true), "security"), approval("x2", "a", digest, "dev", true)},
			wantApproved: "Unknown/AwaitingApproval", wantMessage: "1/2 approvals", wantRules: "destroys-need-security:1", wantSummary: "1/2",
		},
		"a destroy with two from security is approved": {
			rules: teamRules[:2], plan: destroyJSON, gate: pending,
			approvals:    []*infrav1.TerraformRunApproval{inGroup(approval("x1", "a", digest, "sam", true), "security"), inGroup(approval("x2", "a", digest, "sue", true), "security")},
			wantApproved: "True/Approved", wantSource: infrav1.ApprovedByApproval, wantApprove: 1, wantRules: "destroys-need-security:0", wantSummary: "2/2",
		},
		"a Require rule of one does not lower a requiredApprovals of two": {
			required: 2, rules: []infrav1.ApprovalRule{requireOne}, plan: destroyJSON, gate: pending,
			approvals:    []*infrav1.TerraformRunApproval{approval("x1", "a", digest, "sam", true)},
			wantApproved: "Unknown/AwaitingApproval", wantMessage: "1/2 approvals", wantRules: "destroys-need-one:0", wantSummary: "1/2",
		},
		"a Require rule of one and a requiredApprovals of two: two approve": {
			required: 2, rules: []infrav1.ApprovalRule{requireOne}, plan: destroyJSON, gate: pending,
			approvals:    []*infrav1.TerraformRunApproval{approval("x1", "a", digest, "sam", true), approval("x2", "a", digest, "sue", true)},
			wantApproved: "True/Approved", wantSource: infrav1.ApprovedByApproval, wantApprove: 1, wantRules: "destroys-need-one:0", wantSummary: "2/2",
		},
		"a Require rule of two above a requiredApprovals of one binds": {
			required: 1, rules: teamRules[:2], plan: destroyJSON, gate: pending,
			approvals:    []*infrav1.TerraformRunApproval{inGroup(approval("x1", "a", digest, "sam", true), "security")},
			wantApproved: "Unknown/AwaitingApproval", wantMessage: "1/2 approvals", wantRules: "destroys-need-security:1", wantSummary: "1/2",
		},
		"a rule edited into a typo while the plan waits: held, not rejected": {
			rules: []infrav1.ApprovalRule{{Name: "typo", Condition: "plan.destory > 0", Effect: infrav1.RuleDeny}}, plan: destroyJSON, gate: pending,
			approvals:    []*infrav1.TerraformRunApproval{approval("x1", "a", digest, "sam", true)},
			wantApproved: "Unknown/RulesInvalid", wantMessage: "spec.approval.rules were changed while the plan waited and no longer compile",
		},
		"mode Auto with rules: no rule matched, approved as Auto": {
			mode: infrav1.ApprovalAuto, rules: teamRules[1:2], plan: addOnlyJSON, gate: pending,
			wantApproved: "True/AutoApproved", wantSource: infrav1.ApprovedAutomatically, wantApprove: 1, wantRules: "",
		},
		"mode Auto with rules: a Require rule holds the plan": {
			mode: infrav1.ApprovalAuto, rules: teamRules[1:2], plan: destroyJSON, gate: pending,
			wantApproved: "Unknown/AwaitingApproval", wantRules: "destroys-need-security:2",
		},
		"a plan record that is not the one the plan step wrote: denied, fail closed": {
			rules: teamRules, plan: addOnlyJSON, recorded: jsonDigest(destroyJSON), gate: pending,
			wantApproved: "False/DeniedByRule", wantMessage: "it was changed after the plan step wrote it", wantReject: 1,
		},
		"no plan record: denied, fail closed": {
			rules: teamRules, recorded: jsonDigest(addOnlyJSON), gate: pending,
			wantApproved: "False/DeniedByRule", wantMessage: "is not kept", wantReject: 1,
		},
		"an Argo resume by someone outside the rule's approvers is refused": {
			rules: teamRules[:2], plan: destroyJSON,
			approvals:    []*infrav1.TerraformRunApproval{inGroup(approval("x1", "a", digest, "sam", true), "security")},
			gate:         engine.Gate{State: engine.GateApproved, By: "dev", ByGroups: []string{"devs"}, Stamped: true, DecidedAt: &decided},
			wantApproved: "False/ApprovedOutsidePolicy", wantMessage: "1/2 approvals", wantCancel: true,
		},
		"an Argo resume that meets the rule is recorded": {
			rules: teamRules[:2], plan: destroyJSON,
			approvals:    []*infrav1.TerraformRunApproval{inGroup(approval("x1", "a", digest, "sam", true), "security")},
			gate:         engine.Gate{State: engine.GateApproved, By: "sue", ByGroups: []string{"security"}, Stamped: true, DecidedAt: &decided},
			wantApproved: "True/Approved", wantSource: infrav1.ApprovedByEngine, wantRules: "destroys-need-security:0",
		},
		"an Argo resume of a denied plan is refused": {
			rules: teamRules, plan: destroyJSON,
			gate:         engine.Gate{State: engine.GateApproved, By: "sue", ByGroups: []string{"security"}, Stamped: true, DecidedAt: &decided},
			wantApproved: "False/ApprovedOutsidePolicy", wantMessage: "denied by rule no-iam-deletes", wantCancel: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeEngine{progress: map[string]engine.Progress{}}
			run := aRun("a")
			run.Spec.Approval = infrav1.ApprovalSpec{Mode: tc.mode, RequiredApprovals: tc.required, Rules: tc.rules}
			r, _ := newReconciler(t, f)
			run = withRun(r, run, 1, infrav1.RunAwaitingApproval, infrav1.RunApply)
			child := childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash)
			objs := []client.Object{child}
			for _, a := range tc.approvals {
				objs = append(objs, a)
			}
			r, _ = newReconciler(t, f, objs...)
			store := newMemStore(r.now)
			if tc.plan != "" {
				k := records.Key{Namespace: run.Namespace, Run: run.Name, RunID: child.Name, Step: names.StepPlan, Kind: records.KindPlanJSON}
				if err := store.Put(ctx(), k, []byte(tc.plan)); err != nil {
					t.Fatal(err)
				}
			}
			r.Records = store
			recorded := tc.recorded
			if recorded == "" {
				recorded = jsonDigest(tc.plan)
			}
			st := r.newPassState(run)
			st.engine, st.child = f, child
			st.progress = engine.Progress{Phase: infrav1.RunAwaitingApproval, Gate: tc.gate, Plan: &engine.PlanResult{Add: 1, HasChanges: true, Digest: digest, JSONDigest: recorded}}
			if _, err := r.reconcileApproval(ctx(), run, st); err != nil {
				t.Fatal(err)
			}
			if got := condOf(run, infrav1.ApprovedCondition); got != tc.wantApproved {
				t.Errorf("Approved = %s (%v), want %s", got, findCond(run, infrav1.ApprovedCondition), tc.wantApproved)
			}
			if c := findCond(run, infrav1.ApprovedCondition); tc.wantMessage != "" && (c == nil || !strings.Contains(c.Message, tc.wantMessage)) {
				t.Errorf("Approved message %v, want it to contain %q", c, tc.wantMessage)
			}
			if tc.wantSource != "" && (run.Status.Approval == nil || run.Status.Approval.Source != tc.wantSource) {
				t.Errorf("status.approval = %+v, want source %s", run.Status.Approval, tc.wantSource)
			}
			if len(f.approved) != tc.wantApprove || len(f.rejected) != tc.wantReject {
				t.Errorf("engine approved %d and rejected %d times, want %d and %d", len(f.approved), len(f.rejected), tc.wantApprove, tc.wantReject)
			}
			if got := len(f.cancelled) == 1; got != tc.wantCancel {
				t.Errorf("child stopped: %v, want %v", got, tc.wantCancel)
			}
			if tc.wantRules != "" || tc.wantSummary != "" {
				a := run.Status.Approvals
				if a == nil {
					t.Fatalf("status.approvals not set")
				}
				var got []string
				for _, rt := range a.Rules {
					got = append(got, rt.Name+":"+itoa(int64(rt.Needed)))
				}
				if g := strings.Join(got, ","); tc.wantRules != "" && g != tc.wantRules {
					t.Errorf("status.approvals.rules = %s (%+v), want %s", g, a.Rules, tc.wantRules)
				}
				if tc.wantSummary != "" && a.Summary != tc.wantSummary {
					t.Errorf("status.approvals.summary = %s, want %s", a.Summary, tc.wantSummary)
				}
			}
		})
	}
}

// A rule that does not compile stalls the run before its child is made,
// naming the rule, with the compiler's message.
func TestBadRuleStallsTheRun(t *testing.T) {
	r, _ := newReconciler(t, &fakeEngine{})
	run := aRun("a")
	run.Spec.Approval.Rules = []infrav1.ApprovalRule{teamRules[0], {Name: "typo", Condition: "plan.destroyed > 0", Effect: infrav1.RuleDeny}}
	err := r.checkRules(run)
	var stall *StallingError
	if err == nil || !errors.As(err, &stall) || stall.Reason != infrav1.ReasonInvalidSpec ||
		!strings.Contains(err.Error(), "spec.approval.rules[1] (typo)") || !strings.Contains(err.Error(), "undefined field 'destroyed'") {
		t.Fatalf("checkRules = %v, want a stall naming spec.approval.rules[1] (typo) and the compiler's message", err)
	}
}

// Change windows hold an approved plan at the gate until they open; a
// policy admin's override lets it apply now, recorded. t0 is Monday
// 2026-11-23 12:00 UTC.
func TestChangeWindowsHold(t *testing.T) {
	const digest = "sha256:aa"
	since := metav1.NewTime(t0.Add(-time.Minute))
	decided := metav1.NewTime(t0.Add(-time.Second))
	pending := engine.Gate{State: engine.GatePending, Since: &since}
	window := func(typ infrav1.WindowType, schedule string, d time.Duration) infrav1.ChangeWindow {
		return infrav1.ChangeWindow{Name: "w-" + strings.ToLower(string(typ)), Type: typ, Schedule: schedule, Duration: metav1.Duration{Duration: d}}
	}
	mondayNoonFreeze := window(infrav1.WindowDeny, "0 11 * * 1", 2*time.Hour) // 11:00 to 13:00
	override := approval("x2", "a", digest, "admin", true)
	override.Spec.OverrideChangeWindows = true
	cases := map[string]struct {
		mode         infrav1.ApprovalMode
		windows      []infrav1.ChangeWindow
		gate         engine.Gate
		approvals    []*infrav1.TerraformRunApproval
		untrusted    bool
		wantApproved string
		wantMessage  string
		wantApprove  int
		wantCancel   bool
		wantRequeue  time.Duration
		wantOverride string
	}{
		"approved inside a deny window: held, saying when it opens": {
			windows: []infrav1.ChangeWindow{mondayNoonFreeze}, gate: pending,
			approvals:    []*infrav1.TerraformRunApproval{approval("x1", "a", digest, "alice", true)},
			wantApproved: "Unknown/OutsideChangeWindow", wantMessage: "inside deny window w-deny; it applies at 2026-11-23T13:00:00Z if still approved",
			wantRequeue: time.Hour,
		},
		"not approved yet: waits for approval as always": {
			windows: []infrav1.ChangeWindow{mondayNoonFreeze}, gate: pending,
			wantApproved: "Unknown/AwaitingApproval",
		},
		"approved inside an allow window: applies": {
			windows: []infrav1.ChangeWindow{window(infrav1.WindowAllow, "0 12 * * 1", time.Hour)}, gate: pending,
			approvals:    []*infrav1.TerraformRunApproval{approval("x1", "a", digest, "alice", true)},
			wantApproved: "True/Approved", wantApprove: 1,
		},
		"approved before an allow window: held until it opens": {
			windows: []infrav1.ChangeWindow{window(infrav1.WindowAllow, "30 12 * * *", time.Hour)}, gate: pending,
			approvals:    []*infrav1.TerraformRunApproval{approval("x1", "a", digest, "alice", true)},
			wantApproved: "Unknown/OutsideChangeWindow", wantMessage: "outside every allow window (the next is w-allow)", wantRequeue: 30 * time.Minute,
		},
		"mode Auto inside a deny window: held": {
			mode: infrav1.ApprovalAuto, windows: []infrav1.ChangeWindow{mondayNoonFreeze}, gate: pending,
			wantApproved: "Unknown/OutsideChangeWindow", wantMessage: "is approved (approved automatically (approval mode Auto))", wantRequeue: time.Hour,
		},
		"a policy admin's override: applies now, recorded": {
			windows: []infrav1.ChangeWindow{mondayNoonFreeze}, gate: pending,
			approvals:    []*infrav1.TerraformRunApproval{override},
			wantApproved: "True/Approved", wantApprove: 1, wantOverride: "admin (TerraformRunApproval/x2)",
		},
		"an override nobody's identity was stamped for does not count": {
			windows: []infrav1.ChangeWindow{mondayNoonFreeze}, gate: pending, untrusted: true, mode: infrav1.ApprovalAuto,
			approvals:    []*infrav1.TerraformRunApproval{override},
			wantApproved: "Unknown/OutsideChangeWindow", wantRequeue: time.Hour,
		},
		"an Argo resume inside a deny window is refused": {
			windows:      []infrav1.ChangeWindow{mondayNoonFreeze},
			gate:         engine.Gate{State: engine.GateApproved, By: "alice", Stamped: true, DecidedAt: &decided},
			wantApproved: "False/ApprovedOutsidePolicy", wantMessage: "inside deny window w-deny", wantCancel: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeEngine{progress: map[string]engine.Progress{}}
			run := aRun("a")
			run.Spec.Approval = infrav1.ApprovalSpec{Mode: tc.mode, Windows: tc.windows}
			r, _ := newReconciler(t, f)
			run = withRun(r, run, 1, infrav1.RunAwaitingApproval, infrav1.RunApply)
			child := childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash)
			objs := []client.Object{child}
			for _, a := range tc.approvals {
				objs = append(objs, a.DeepCopy())
			}
			r, _ = newReconciler(t, f, objs...)
			r.UntrustedIdentity = tc.untrusted
			st := r.newPassState(run)
			st.engine, st.child = f, child
			st.progress = engine.Progress{Phase: infrav1.RunAwaitingApproval, Gate: tc.gate, Plan: &engine.PlanResult{Add: 1, HasChanges: true, Digest: digest}}
			res, err := r.reconcileApproval(ctx(), run, st)
			if err != nil {
				t.Fatal(err)
			}
			if got := condOf(run, infrav1.ApprovedCondition); got != tc.wantApproved {
				t.Errorf("Approved = %s (%v), want %s", got, findCond(run, infrav1.ApprovedCondition), tc.wantApproved)
			}
			if c := findCond(run, infrav1.ApprovedCondition); tc.wantMessage != "" && (c == nil || !strings.Contains(c.Message, tc.wantMessage)) {
				t.Errorf("Approved message %v, want it to contain %q", c, tc.wantMessage)
			}
			if len(f.approved) != tc.wantApprove {
				t.Errorf("engine approved %d times, want %d", len(f.approved), tc.wantApprove)
			}
			if got := len(f.cancelled) == 1; got != tc.wantCancel {
				t.Errorf("child stopped: %v, want %v", got, tc.wantCancel)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
			if tc.wantOverride != "" {
				if a := run.Status.Approval; a == nil || a.ChangeWindowOverriddenBy != tc.wantOverride {
					t.Errorf("status.approval = %+v, want changeWindowOverriddenBy %q", a, tc.wantOverride)
				}
				if w := run.Status.Approvals.ChangeWindow; w == nil || w.OverriddenBy != tc.wantOverride {
					t.Errorf("status.approvals.changeWindow = %+v, want overriddenBy %q", w, tc.wantOverride)
				}
			}
			if tc.wantApproved == "Unknown/OutsideChangeWindow" {
				if w := run.Status.Approvals.ChangeWindow; w == nil || w.Open || w.OpensAt == nil {
					t.Errorf("status.approvals.changeWindow = %+v, want closed, with when it opens", w)
				}
			}
		})
	}
}

// readFailingStore is a records store whose reads fail with err, counted.
type readFailingStore struct {
	*memStore
	err  error
	gets int
}

func (s *readFailingStore) Get(_ context.Context, k records.Key) ([]byte, error) {
	s.gets++
	return nil, fmt.Errorf("%s: %w", k, s.err)
}

// A plan whose JSON inflates past what the manager reads
// (records.MaxRecordSize) cannot be judged by spec.approval.rules: it is
// held at the gate, saying why and what to do, never approved, and read
// once; a rejection and the approval timeout still end it. A read that
// fails otherwise is retried, but does not keep a rejection or the
// timeout from acting.
func TestUnreadablePlanIsHeld(t *testing.T) {
	const digest = "sha256:aa"
	since := metav1.NewTime(t0.Add(-10 * time.Minute))
	decided := metav1.NewTime(t0.Add(-time.Second))
	pending := engine.Gate{State: engine.GatePending, Since: &since}
	tooLarge := fmt.Errorf("inflates past 64 MiB, the most a record may hold when read (records.MaxRecordSize): %w", records.ErrTooLarge)
	transient := errors.New("the API server is unavailable")
	twoFromSecurity := []*infrav1.TerraformRunApproval{
		inGroup(approval("x1", "a", digest, "sam", true), "security"), inGroup(approval("x2", "a", digest, "sue", true), "security"),
	}
	cases := map[string]struct {
		spec         infrav1.ApprovalSpec
		readErr      error
		gate         engine.Gate
		approvals    []*infrav1.TerraformRunApproval
		decidedBy    string
		wantErr      bool
		wantApproved string
		wantMessage  []string
		wantApprove  int
		wantReject   int
		wantCancel   bool
		wantRequeue  time.Duration
	}{
		"nothing decided: held, saying why and what to do": {
			spec: infrav1.ApprovalSpec{Rules: teamRules}, readErr: tooLarge, gate: pending,
			wantApproved: "Unknown/PlanUnreadable",
			wantMessage:  []string{"is held at the gate", "larger than 64 MiB, the most the manager reads", "kubectl tfrun reject", "split the configuration"},
		},
		"approvals that would meet every rule: still held, never approved": {
			spec: infrav1.ApprovalSpec{Rules: teamRules[:2]}, readErr: tooLarge, gate: pending, approvals: twoFromSecurity,
			wantApproved: "Unknown/PlanUnreadable",
		},
		"mode Auto: held, not approved automatically": {
			spec: infrav1.ApprovalSpec{Mode: infrav1.ApprovalAuto, Rules: teamRules[1:2]}, readErr: tooLarge, gate: pending,
			wantApproved: "Unknown/PlanUnreadable",
		},
		"waiting for its timeout: held, looks again at the deadline": {
			spec:    infrav1.ApprovalSpec{Rules: teamRules, Timeout: &metav1.Duration{Duration: 15 * time.Minute}},
			readErr: tooLarge, gate: pending,
			wantApproved: "Unknown/PlanUnreadable", wantRequeue: 5 * time.Minute,
		},
		"a person's rejection rejects it": {
			spec: infrav1.ApprovalSpec{Rules: teamRules}, readErr: tooLarge, gate: pending,
			approvals:    []*infrav1.TerraformRunApproval{approval("x1", "a", digest, "bob", false)},
			wantApproved: "False/Rejected", wantReject: 1,
		},
		"spec.approval.rejectedPlan rejects it": {
			spec: infrav1.ApprovalSpec{Rules: teamRules, RejectedPlan: digest}, decidedBy: "bob", readErr: tooLarge, gate: pending,
			wantApproved: "False/Rejected", wantReject: 1,
		},
		"the approval timeout times it out": {
			spec:    infrav1.ApprovalSpec{Rules: teamRules, Timeout: &metav1.Duration{Duration: 5 * time.Minute}},
			readErr: tooLarge, gate: pending,
			wantApproved: "False/ApprovalTimeout", wantReject: 1,
		},
		"an Argo resume is refused, the child stopped": {
			spec: infrav1.ApprovalSpec{Rules: teamRules[:2]}, readErr: tooLarge, approvals: twoFromSecurity[:1],
			gate:         engine.Gate{State: engine.GateApproved, By: "sue", ByGroups: []string{"security"}, Stamped: true, DecidedAt: &decided},
			wantApproved: "False/ApprovedOutsidePolicy", wantMessage: []string{"larger than 64 MiB"}, wantCancel: true,
		},
		"a read to retry: an error, nothing decided": {
			spec: infrav1.ApprovalSpec{Rules: teamRules}, readErr: transient, gate: pending, approvals: twoFromSecurity,
			wantErr: true,
		},
		"a read to retry does not keep a rejection from rejecting": {
			spec: infrav1.ApprovalSpec{Rules: teamRules}, readErr: transient, gate: pending,
			approvals:    []*infrav1.TerraformRunApproval{approval("x1", "a", digest, "bob", false)},
			wantApproved: "False/Rejected", wantReject: 1,
		},
		"a read to retry does not keep the timeout from acting": {
			spec:    infrav1.ApprovalSpec{Rules: teamRules, Timeout: &metav1.Duration{Duration: 5 * time.Minute}},
			readErr: transient, gate: pending, approvals: twoFromSecurity,
			wantApproved: "False/ApprovalTimeout", wantReject: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := &fakeEngine{progress: map[string]engine.Progress{}}
			run := aRun("a")
			run.Spec.Approval = tc.spec
			if tc.decidedBy != "" {
				run.Annotations = map[string]string{infrav1.DecidedByAnnotation: tc.decidedBy}
			}
			r, _ := newReconciler(t, f)
			run = withRun(r, run, 1, infrav1.RunAwaitingApproval, infrav1.RunApply)
			child := childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash)
			objs := []client.Object{child}
			for _, a := range tc.approvals {
				objs = append(objs, a.DeepCopy())
			}
			r, _ = newReconciler(t, f, objs...)
			store := &readFailingStore{memStore: newMemStore(r.now), err: tc.readErr}
			r.Records = store
			st := r.newPassState(run)
			st.engine, st.child = f, child
			st.progress = engine.Progress{Phase: infrav1.RunAwaitingApproval, Gate: tc.gate, Plan: &engine.PlanResult{Add: 1, HasChanges: true, Digest: digest, JSONDigest: jsonDigest(destroyJSON)}}
			res, err := r.reconcileApproval(ctx(), run, st)
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("reconcileApproval error = %v, want an error: %v", err, tc.wantErr)
			}
			var unreadable *planUnreadable
			if errors.As(err, &unreadable) {
				t.Errorf("reconcileApproval returned the unreadable plan as an error to retry: %v", err)
			}
			if tc.wantErr {
				return
			}
			if diff := cmp.Diff(tc.wantApproved, condOf(run, infrav1.ApprovedCondition)); diff != "" {
				t.Errorf("Approved (-want +got):\n%s\n%v", diff, findCond(run, infrav1.ApprovedCondition))
			}
			c := findCond(run, infrav1.ApprovedCondition)
			for _, m := range tc.wantMessage {
				if c == nil || !strings.Contains(c.Message, m) {
					t.Errorf("Approved message %v, want it to contain %q", c, m)
				}
			}
			got := [3]int{len(f.approved), len(f.rejected), len(f.cancelled)}
			want := [3]int{tc.wantApprove, tc.wantReject, 0}
			if tc.wantCancel {
				want[2] = 1
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("engine approved, rejected, stopped (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRequeue, res.RequeueAfter); diff != "" {
				t.Errorf("requeue after (-want +got):\n%s", diff)
			}
			if tc.wantApproved != "Unknown/PlanUnreadable" {
				return
			}
			// A plan held for its size is not inflated again on the next pass.
			if _, err := r.reconcileApproval(ctx(), run, st); err != nil {
				t.Fatal(err)
			}
			if store.gets != 1 {
				t.Errorf("the plan was read %d times in two passes, want once", store.gets)
			}
		})
	}
}

// kubectl tfrun approve asks gate.Counts, before it records a vote,
// whether the vote will count, on the input rebuilt from what the manager
// recorded (gate.Recorded); the manager then counts it. They agree: for
// each case, Counts says yes exactly when adding the vote raises what the
// manager counts toward a requirement still open.
func TestApproveAgreesWithTheGate(t *testing.T) {
	const digest = "sha256:aa"
	since := metav1.NewTime(t0.Add(-time.Minute))
	pending := engine.Gate{State: engine.GatePending, Since: &since}
	security := &infrav1.Approvers{Groups: []string{"security"}}
	sre := &infrav1.Approvers{Users: []string{"sam", "sue"}}
	rules := []infrav1.ApprovalRule{
		{Name: "destroys-need-security", Condition: "plan.destroy > 0", Effect: infrav1.RuleRequire, Require: &infrav1.RuleRequirement{Approvals: 2, Approvers: security}},
		{Name: "iam-needs-sre", Condition: "plan.resourceChanges.exists(r, r.type.startsWith('aws_iam_'))", Effect: infrav1.RuleRequire, Require: &infrav1.RuleRequirement{Approvals: 1, Approvers: sre}},
	}
	type voter struct {
		user   string
		groups []string
	}
	cases := []struct {
		name     string
		spec     infrav1.ApprovalSpec
		before   []voter
		next     voter
		wantHelp bool
	}{
		{"someone from security, none yet", infrav1.ApprovalSpec{Rules: rules}, nil, voter{"ann", []string{"security"}}, true},
		{"a developer: no rule counts them, requiredApprovals 1 met by no one yet", infrav1.ApprovalSpec{Rules: rules}, nil, voter{"dev", []string{"devs"}}, true},
		{"a developer, once requiredApprovals is met", infrav1.ApprovalSpec{Rules: rules}, []voter{{"dev", []string{"devs"}}}, voter{"dan", []string{"devs"}}, false},
		{"a developer after security's first: no rule counts them", infrav1.ApprovalSpec{Rules: rules}, []voter{{"ann", []string{"security"}}}, voter{"dev", []string{"devs"}}, false},
		{"sam (sre) after security's first", infrav1.ApprovalSpec{Rules: rules}, []voter{{"ann", []string{"security"}}}, voter{"sam", nil}, true},
		{"a developer with requiredApprovals 3 still unmet", infrav1.ApprovalSpec{Rules: rules, RequiredApprovals: 3}, []voter{{"ann", []string{"security"}}, {"sam", nil}}, voter{"dev", []string{"devs"}}, true},
		{"security's second after sam's", infrav1.ApprovalSpec{Rules: rules}, []voter{{"ann", []string{"security"}}, {"sam", nil}}, voter{"bob", []string{"security"}}, true},
		{"sam again", infrav1.ApprovalSpec{Rules: rules}, []voter{{"ann", []string{"security"}}, {"sam", nil}}, voter{"sam", nil}, false},
		{"mode Auto: a developer", infrav1.ApprovalSpec{Mode: infrav1.ApprovalAuto, Rules: rules}, nil, voter{"dev", nil}, false},
	}
	tally := func(t *testing.T, spec infrav1.ApprovalSpec, voters []voter) *infrav1.TerraformRun {
		t.Helper()
		f := &fakeEngine{progress: map[string]engine.Progress{}}
		run := aRun("a")
		run.Spec.Approval = spec
		r, _ := newReconciler(t, f)
		run = withRun(r, run, 1, infrav1.RunAwaitingApproval, infrav1.RunApply)
		child := childOf(t, run, infrav1.RunApply, 1, run.Status.Run.SpecHash)
		objs := []client.Object{child}
		for i, v := range voters {
			objs = append(objs, inGroup(approval(fmt.Sprint("x", i), "a", digest, v.user, true), v.groups...))
		}
		r, _ = newReconciler(t, f, objs...)
		store := newMemStore(r.now)
		k := records.Key{Namespace: run.Namespace, Run: run.Name, RunID: child.Name, Step: names.StepPlan, Kind: records.KindPlanJSON}
		if err := store.Put(ctx(), k, []byte(destroyJSON)); err != nil {
			t.Fatal(err)
		}
		r.Records = store
		st := r.newPassState(run)
		st.engine, st.child = f, child
		st.progress = engine.Progress{Phase: infrav1.RunAwaitingApproval, Gate: pending, Plan: &engine.PlanResult{Destroy: 1, HasChanges: true, Digest: digest, JSONDigest: jsonDigest(destroyJSON)}}
		if _, err := r.reconcileApproval(ctx(), run, st); err != nil {
			t.Fatal(err)
		}
		if run.Status.Approvals == nil {
			t.Fatal("no tally")
		}
		return run
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			beforeRun := tally(t, tc.spec, tc.before)
			var votes []gate.Vote
			for i, v := range tc.before {
				votes = append(votes, gate.Vote{User: v.user, Groups: v.groups, Approve: true, Source: fmt.Sprint("TerraformRunApproval/x", i)})
			}
			in, recorded := gate.Recorded(beforeRun, digest, votes, t0)
			if !recorded {
				t.Fatal("the manager recorded no policy for the plan")
			}
			helps, why := gate.Counts(in, gate.Vote{User: tc.next.user, Groups: tc.next.groups, Approve: true, Source: "kubectl tfrun approve", At: t0})
			before := beforeRun.Status.Approvals
			after := tally(t, tc.spec, append(append([]voter{}, tc.before...), tc.next)).Status.Approvals
			// What the manager counts toward each requirement still open:
			// requiredApprovals (mode Manual) and each matched Require rule.
			progress := func(t *infrav1.ApprovalTally) int32 {
				var p int32
				if tc.spec.Mode != infrav1.ApprovalAuto {
					p += min(int32(len(t.ApprovedBy)), max(tc.spec.RequiredApprovals, 1))
				}
				for _, r := range t.Rules {
					p += min(int32(len(r.ApprovedBy)), r.Required)
				}
				return p
			}
			counted := progress(after) > progress(before)
			if helps != tc.wantHelp || counted != helps {
				t.Errorf("Helps = %v (%s), the manager's count went %d -> %d; want Helps %v and the manager to agree", helps, why, progress(before), progress(after), tc.wantHelp)
			}
		})
	}
}
