package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/pkg/results"
)

// Plans as JSON, as terraform show -json prints them (the parts the rules
// read): one that only adds, one that destroys a ConfigMap named keep.
const (
	rulesAddOnly = `{"format_version":"1.2","resource_changes":[{"address":"kubernetes_config_map.app","mode":"managed","type":"kubernetes_config_map","name":"app","provider_name":"registry.terraform.io/hashicorp/kubernetes","change":{"actions":["create"]}}]}`
	rulesDestroy = `{"format_version":"1.2","resource_changes":[{"address":"kubernetes_config_map.keep","mode":"managed","type":"kubernetes_config_map","name":"keep","provider_name":"registry.terraform.io/hashicorp/kubernetes","change":{"actions":["delete"]}}]}`
)

var conformanceRules = []infrav1.ApprovalRule{
	{Name: "add-only", Condition: "plan.change == 0 && plan.destroy == 0", Effect: infrav1.RuleAutoApprove},
	{Name: "destroys-need-two", Condition: "plan.destroy > 0", Effect: infrav1.RuleRequire,
		Require: &infrav1.RuleRequirement{Approvals: 2, Approvers: &infrav1.Approvers{Groups: []string{"r-security"}}}},
	{Name: "keep-the-keeper", Condition: "plan.resourceChanges.exists(r, r.name == 'keep' && 'delete' in r.actions)", Effect: infrav1.RuleDeny,
		Message: "the keep ConfigMap stays"},
}

// plannedWithJSON brings a run to its gate with a plan whose JSON record
// the plan step kept, as the real plan step does (the digest in its
// results, the record a TerraformRunRecord).
func (g given) plannedWithJSON(ns string, run *infrav1.TerraformRun, digest, planJSON string) engineSim {
	Expect(k8sClient.Create(context.Background(), run)).To(Succeed())
	s := g.active(ns, run.Name)
	s.Start()
	k := records.Key{Namespace: ns, Run: run.Name, RunID: s.Key().Name, Step: names.StepPlan, Kind: records.KindPlanJSON}
	Expect(records.NewRouter(clientset, nil).Put(context.Background(), k, []byte(planJSON))).To(Succeed())
	sum := sha256.Sum256([]byte(planJSON))
	s.PlanResult(results.Plan{Add: 1, HasChanges: true, Digest: digest, JSONDigest: "sha256:" + hex.EncodeToString(sum[:])})
	g.reachGate(s, digest)
	return s
}

// reachGate brings a planned run to its gate. No wait for AwaitingApproval:
// a rule may decide the gate in the pass that first sees it. The Job
// engine's gate is opr8r itself: its simulator's Suspend only waits for a
// gate still Pending, which a rule may have decided already.
func (g given) reachGate(s engineSim, digest string) {
	if g.e.name != infrav1.EngineJob {
		s.Suspend(digest)
	}
}

// planRules is the conformance suite's part on spec.approval.rules: CEL
// conditions over the plan decide it, on every engine.
func planRules(g given) {
	ctx := context.Background()

	It("auto-approves an add-only plan by rule, though the run is Manual", func() {
		ns := newNamespace()
		run := g.run("rules-add", ns).Obj()
		run.Spec.Approval.Rules = conformanceRules
		s := g.plannedWithJSON(ns, run, digestOf("rules-add"), rulesAddOnly)
		Eventually(gateState(s), timeout, interval).Should(Equal("Approved"))
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("True/AutoApproved"))
		got := getRun(ns, run.Name)
		Expect(got.Status.Approval.Source).To(Equal(infrav1.ApprovedByRule))
		Expect(cond(got, infrav1.ApprovedCondition).Message).To(ContainSubstring("approved automatically by rule add-only"))
		Expect(got.Status.Approvals.Rules).To(HaveLen(1))
		Expect(got.Status.Approvals.Rules[0].Name).To(Equal("add-only"))
	})

	It("holds a destroy for two approvers of the rule's group, and one, or others, are not enough", func() {
		ns := newNamespace()
		grant(ns, "approver", "r-sam")
		grant(ns, "approver", "r-sue")
		grant(ns, "approver", "r-dev")
		as("r-sam", "r-security")
		as("r-sue", "r-security")
		as("r-dev", "r-devs")
		rules := conformanceRules[:2]
		run := g.run("rules-two", ns).Obj()
		run.Spec.Approval.Rules = rules
		digest := digestOf("rules-two")
		s := g.plannedWithJSON(ns, run, digest, rulesDestroy)
		for _, u := range []string{"r-dev", "r-sam"} {
			_, err := decide(as(u), ns, run.Name, digest, infrav1.DecisionApprove, "")
			Expect(err).NotTo(HaveOccurred())
		}
		Eventually(condMessage(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(ContainSubstring("1/2 approvals"))
		Consistently(gateState(s), 2*time.Second, interval).Should(Equal("Pending"))
		rt := getRun(ns, run.Name).Status.Approvals.Rules
		Expect(rt).To(HaveLen(1))
		Expect(rt[0].Name).To(Equal("destroys-need-two"))
		Expect(rt[0].ApprovedBy).To(Equal([]string{"r-sam"}))
		Expect(rt[0].Needed).To(Equal(int32(1)))

		_, err := decide(as("r-sue"), ns, run.Name, digest, infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		Eventually(gateState(s), timeout, interval).Should(Equal("Approved"))
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("True/Approved"))
	})

	It("is governed by a TerraformRunPolicy set once in the namespace, with no policy of its own", func() {
		ns := newNamespace()
		grant(ns, "approver", "r-sam")
		grant(ns, "approver", "r-sue")
		grant(ns, "approver", "r-dev")
		as("r-sam", "r-security")
		as("r-sue", "r-security")
		as("r-dev", "r-devs")
		pol := &infrav1.TerraformRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: "platform", Namespace: ns},
			Spec: infrav1.TerraformRunPolicySpec{Approval: infrav1.ApprovalPolicy{Rules: conformanceRules[:2]}}}
		Expect(k8sClient.Create(ctx, pol)).To(Succeed())
		Eventually(func() string {
			p := &infrav1.TerraformRunPolicy{}
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pol), p)).To(Succeed())
			if c := apimeta.FindStatusCondition(p.Status.Conditions, infrav1.ReadyCondition); c != nil {
				return string(c.Status)
			}
			return ""
		}, timeout, interval).Should(Equal("True"))

		// An add-only plan goes through by the policy's rule.
		add := g.run("pol-add", ns).Obj()
		sAdd := g.plannedWithJSON(ns, add, digestOf("pol-add"), rulesAddOnly)
		Eventually(gateState(sAdd), timeout, interval).Should(Equal("Approved"))
		// The gate passes in the engine before the pass that passed it writes
		// status: wait for the condition, never read it once (a nil condition).
		Eventually(condMessage(ns, add.Name, infrav1.ApprovedCondition), timeout, interval).Should(ContainSubstring("approved automatically by rule platform/add-only"))

		// A destroy needs two of security, though the run asks for one.
		run := g.run("pol-two", ns).Obj()
		Expect(run.Spec.Approval.Rules).To(BeEmpty())
		digest := digestOf("pol-two")
		s := g.plannedWithJSON(ns, run, digest, rulesDestroy)
		for _, u := range []string{"r-dev", "r-sam"} {
			_, err := decide(as(u), ns, run.Name, digest, infrav1.DecisionApprove, "")
			Expect(err).NotTo(HaveOccurred())
		}
		Eventually(condMessage(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(ContainSubstring("1/2 approvals"))
		Consistently(gateState(s), 2*time.Second, interval).Should(Equal("Pending"))
		got := getRun(ns, run.Name).Status.Approvals
		Expect(got.Rules).To(HaveLen(1))
		Expect(got.Rules[0].Name).To(Equal("platform/destroys-need-two"))
		Expect(got.Rules[0].Approvers.Groups).To(Equal([]string{"r-security"}))
		Expect(got.Policy).NotTo(BeNil())
		created := &infrav1.TerraformRunPolicy{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pol), created)).To(Succeed())
		Expect(got.Policy.Policies).To(Equal([]infrav1.PolicyRef{{Kind: "TerraformRunPolicy", Name: "platform", Generation: 1, UID: string(created.UID)}}))

		_, err := decide(as("r-sue"), ns, run.Name, digest, infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		Eventually(gateState(s), timeout, interval).Should(Equal("Approved"))
	})

	It("holds a waiting plan when a policy that governs it changes, and a tenant cannot write one", func() {
		ns := newNamespace()
		grant(ns, "approver", "r-sam")
		grant(ns, "approver", "r-sue")
		grant(ns, "editor", "r-ed")
		grant(ns, "policy-admin", "r-admin")
		pol := &infrav1.TerraformRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: "two", Namespace: ns},
			Spec: infrav1.TerraformRunPolicySpec{Approval: infrav1.ApprovalPolicy{RequiredApprovals: 2}}}
		// An editor may read the policy, never write or delete it.
		err := as("r-ed").Create(ctx, pol.DeepCopy())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(as("r-admin").Create(ctx, pol)).To(Succeed())
		Expect(as("r-ed").Get(ctx, client.ObjectKeyFromObject(pol), &infrav1.TerraformRunPolicy{})).To(Succeed())
		Expect(apierrors.IsForbidden(as("r-ed").Delete(ctx, pol))).To(BeTrue())

		run := g.run("pol-change", ns).Obj()
		digest := digestOf("pol-change")
		s := g.plannedWithJSON(ns, run, digest, rulesAddOnly)
		_, err = decide(as("r-sam"), ns, run.Name, digest, infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		Eventually(condMessage(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(ContainSubstring("1/2 approvals"))

		// The policy admin loosens it while the plan waits: the plan is
		// held, not approved by the one approval it has.
		p := &infrav1.TerraformRunPolicy{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pol), p)).To(Succeed())
		p.Spec.Approval.RequiredApprovals = 1
		Expect(as("r-admin").Update(ctx, p)).To(Succeed())
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("Unknown/PolicyChanged"))
		Expect(cond(getRun(ns, run.Name), infrav1.ApprovedCondition).Message).To(ContainSubstring("TerraformRunPolicy two changed (generation 2, was 1)"))
		_, err = decide(as("r-sue"), ns, run.Name, digest, infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		Consistently(gateState(s), 2*time.Second, interval).Should(Equal("Pending"))
		Expect(condReason(ns, run.Name, infrav1.ApprovedCondition)()).To(Equal("Unknown/PolicyChanged"))
	})

	It("is governed by a ClusterTerraformRunPolicy that selects its namespace by label, and only then", func() {
		ns, other := newNamespace(), newNamespace()
		key := "opr8r-it/" + ns
		nsObj := &corev1.Namespace{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: ns}, nsObj)).To(Succeed())
		nsObj.Labels = map[string]string{"opr8r-it-gov": ns}
		Expect(k8sClient.Update(ctx, nsObj)).To(Succeed())
		cp := &infrav1.ClusterTerraformRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: "cp-" + ns},
			Spec: infrav1.ClusterTerraformRunPolicySpec{
				NamespaceSelector:      &metav1.LabelSelector{MatchLabels: map[string]string{"opr8r-it-gov": ns}},
				TerraformRunPolicySpec: infrav1.TerraformRunPolicySpec{Approval: infrav1.ApprovalPolicy{Rules: conformanceRules[2:]}}}}
		Expect(k8sClient.Create(ctx, cp)).To(Succeed(), key)
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, cp))).To(Succeed()) })

		run := g.run("cp-deny", ns).Obj()
		s := g.plannedWithJSON(ns, run, digestOf("cp-deny"), rulesDestroy)
		Eventually(gateState(s), timeout, interval).Should(Equal("Rejected"))
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("False/DeniedByRule"))
		_, msg, _ := s.Gate()
		Expect(msg).To(ContainSubstring("denied by rule cluster/cp-" + ns + "/keep-the-keeper"))

		// The namespace it does not select is not governed by it.
		grant(other, "approver", "r-sam")
		free := g.run("cp-free", other).Obj()
		d := digestOf("cp-free")
		sFree := g.plannedWithJSON(other, free, d, rulesDestroy)
		_, err := decide(as("r-sam"), other, free.Name, d, infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		Eventually(gateState(sFree), timeout, interval).Should(Equal("Approved"))
	})

	It("keeps a plan held when its policy is deleted and made again, looser, under its name", func() {
		ns := newNamespace()
		grant(ns, "approver", "r-sam")
		grant(ns, "policy-admin", "r-admin")
		pol := &infrav1.TerraformRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: "two", Namespace: ns},
			Spec: infrav1.TerraformRunPolicySpec{Approval: infrav1.ApprovalPolicy{RequiredApprovals: 2}}}
		Expect(as("r-admin").Create(ctx, pol)).To(Succeed())
		run := g.run("pol-recreate", ns).Obj()
		digest := digestOf("pol-recreate")
		s := g.plannedWithJSON(ns, run, digest, rulesAddOnly)
		_, err := decide(as("r-sam"), ns, run.Name, digest, infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		Eventually(condMessage(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(ContainSubstring("1/2 approvals"))
		Expect(as("r-admin").Delete(ctx, pol)).To(Succeed())
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("Unknown/PolicyChanged"))
		looser := &infrav1.TerraformRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: "two", Namespace: ns},
			Spec: infrav1.TerraformRunPolicySpec{Approval: infrav1.ApprovalPolicy{RequiredApprovals: 1}}}
		Expect(as("r-admin").Create(ctx, looser)).To(Succeed())
		Consistently(gateState(s), 3*time.Second, interval).Should(Equal("Pending"))
		Expect(condReason(ns, run.Name, infrav1.ApprovedCondition)()).To(Equal("Unknown/PolicyChanged"))
	})

	It("lets a namespace policy's AutoApprove waive neither a cluster policy's approvals nor its freeze", func() {
		ns := newNamespace()
		nsObj := &corev1.Namespace{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: ns}, nsObj)).To(Succeed())
		nsObj.Labels = map[string]string{"opr8r-it-layer": ns}
		Expect(k8sClient.Update(ctx, nsObj)).To(Succeed())
		grant(ns, "approver", "r-sam")
		grant(ns, "approver", "r-nsadmin")
		grant(ns, "policy-admin", "r-nsadmin")
		as("r-sam", "r-security")
		// The namespace's policy admin is one of security's approvers: an
		// override is an approval, and counts only as one the policy counts.
		as("r-nsadmin", "r-security")
		cp := &infrav1.ClusterTerraformRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: "layers-" + ns},
			Spec: infrav1.ClusterTerraformRunPolicySpec{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"opr8r-it-layer": ns}},
				TerraformRunPolicySpec: infrav1.TerraformRunPolicySpec{Approval: infrav1.ApprovalPolicy{
					Mode: infrav1.ApprovalManual, Approvers: &infrav1.Approvers{Groups: []string{"r-security"}},
					Windows: []infrav1.ChangeWindow{{Name: "freeze", Type: infrav1.WindowDeny, Schedule: "0 * * * *", Duration: metav1.Duration{Duration: 2 * time.Hour}}}}}}}
		Expect(apierrors.IsForbidden(as("r-nsadmin").Create(ctx, cp.DeepCopy()))).To(BeTrue())
		Expect(k8sClient.Create(ctx, cp)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, cp))).To(Succeed()) })
		team := &infrav1.TerraformRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: ns},
			Spec: infrav1.TerraformRunPolicySpec{Approval: infrav1.ApprovalPolicy{Rules: conformanceRules[:1]}}}
		Expect(as("r-nsadmin").Create(ctx, team)).To(Succeed())

		run := g.run("layers", ns).Obj()
		digest := digestOf("layers")
		s := g.plannedWithJSON(ns, run, digest, rulesAddOnly)
		Eventually(condMessage(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(ContainSubstring("0/1 approvals"))
		Consistently(gateState(s), 2*time.Second, interval).Should(Equal("Pending"))

		// Security approves: the cluster's freeze holds it; the namespace's
		// policy admin's override does not open a cluster policy's window.
		_, err := decide(as("r-sam"), ns, run.Name, digest, infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("Unknown/OutsideChangeWindow"))
		a := &infrav1.TerraformRunApproval{ObjectMeta: metav1.ObjectMeta{GenerateName: run.Name + "-", Namespace: ns},
			Spec: infrav1.TerraformRunApprovalSpec{RunName: run.Name, PlanDigest: digest, Decision: infrav1.DecisionApprove, OverrideChangeWindows: true}}
		Expect(as("r-nsadmin", "r-security").Create(ctx, a)).To(Succeed())
		Eventually(func() string {
			return getRun(ns, run.Name).Status.Approvals.ChangeWindow.Message
		}, timeout, interval).Should(ContainSubstring("which an override does not open"))
		Consistently(gateState(s), 2*time.Second, interval).Should(Equal("Pending"))
	})

	It("stops a run built without a gate before its apply when a Manual policy comes while it plans", func() {
		ns := newNamespace()
		run := g.run("late-pol", ns).Auto().Obj()
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		s := g.active(ns, run.Name)
		s.Start()
		Eventually(func() infrav1.ApprovalMode {
			if r := getRun(ns, run.Name); r.Status.Run != nil {
				return r.Status.Run.ApprovalMode
			}
			return ""
		}, timeout, interval).Should(Equal(infrav1.ApprovalAuto))
		pol := &infrav1.TerraformRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: "manual", Namespace: ns},
			Spec: infrav1.TerraformRunPolicySpec{Approval: infrav1.ApprovalPolicy{Mode: infrav1.ApprovalManual, RequiredApprovals: 2}}}
		Expect(k8sClient.Create(ctx, pol)).To(Succeed())
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("False/Superseded"))
		Expect(cond(getRun(ns, run.Name), infrav1.ApprovedCondition).Message).To(ContainSubstring("TerraformRunPolicy manual"))
		Consistently(condReason(ns, run.Name, infrav1.AppliedCondition), 2*time.Second, interval).ShouldNot(Equal("True/Applied"))
	})

	It("never applies a plan a Deny rule matches, whoever approves it", func() {
		ns := newNamespace()
		grant(ns, "approver", "r-sam")
		grant(ns, "approver", "r-sue")
		run := g.run("rules-deny", ns).Obj()
		run.Spec.Approval.Rules = conformanceRules
		digest := digestOf("rules-deny")
		s := g.plannedWithJSON(ns, run, digest, rulesDestroy)
		Eventually(gateState(s), timeout, interval).Should(Equal("Rejected"))
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("False/DeniedByRule"))
		_, msg, _ := s.Gate()
		Expect(msg).To(ContainSubstring("denied by rule keep-the-keeper: the keep ConfigMap stays"))
		Expect(getRun(ns, run.Name).Status.Approval.Source).To(Equal(infrav1.ApprovedByRule))
		s.CompleteAfterGate()
		Eventually(phase(ns, run.Name), timeout, interval).Should(Equal(infrav1.RunRejected))
	})

	It("denies a plan whose JSON record is not the one the plan step wrote (fail closed)", func() {
		ns := newNamespace()
		run := g.run("rules-forged", ns).Obj()
		run.Spec.Approval.Rules = conformanceRules
		digest := digestOf("rules-forged")
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		s := g.active(ns, run.Name)
		s.Start()
		k := records.Key{Namespace: ns, Run: run.Name, RunID: s.Key().Name, Step: names.StepPlan, Kind: records.KindPlanJSON}
		// The record says add-only; the plan step recorded the digest of
		// another plan (one no spec has shown the manager: it keeps the
		// plans it read by their digest).
		Expect(records.NewRouter(clientset, nil).Put(ctx, k, []byte(rulesAddOnly))).To(Succeed())
		sum := sha256.Sum256([]byte(rulesDestroy + " " + ns))
		s.PlanResult(results.Plan{Add: 1, HasChanges: true, Digest: digest, JSONDigest: "sha256:" + hex.EncodeToString(sum[:])})
		g.reachGate(s, digest)
		Eventually(gateState(s), timeout, interval).Should(Equal("Rejected"))
		// The gate is rejected before the pass that rejected it writes status.
		Eventually(func() string {
			if c := cond(getRun(ns, run.Name), infrav1.ApprovedCondition); c != nil {
				return c.Reason + ": " + c.Message
			}
			return ""
		}, timeout, interval).Should(And(HavePrefix("DeniedByRule: "), ContainSubstring("changed after the plan step wrote it")))
	})
}

// Who may write the rules, and a rule that does not compile, do not
// depend on the engine.
var _ = Describe("plan rules", func() {
	ctx := context.Background()

	It("lets only a policy admin set, change or remove spec.approval.rules", func() {
		ns := newNamespace()
		grant(ns, "editor", "r-editor")
		grant(ns, "editor", "r-admin")
		grant(ns, "policy-admin", "r-admin")
		editor, admin := as("r-editor"), as("r-admin")

		run := testRun("ruled", ns)
		run.Spec.Approval.Rules = conformanceRules
		err := editor.Create(ctx, run)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(And(ContainSubstring("spec.approval.rules"), ContainSubstring("terraformruns/approvalpolicy")))

		Expect(admin.Create(ctx, run)).To(Succeed())
		got := getRun(ns, "ruled")
		p := client.MergeFrom(got.DeepCopy())
		got.Spec.Approval.Rules = got.Spec.Approval.Rules[1:]
		err = editor.Patch(ctx, got, p)
		Expect(err).To(HaveOccurred(), "an editor removed a rule")
		Expect(err.Error()).To(ContainSubstring("spec.approval.rules: setting, changing or removing a rule"))

		got = getRun(ns, "ruled")
		p = client.MergeFrom(got.DeepCopy())
		got.Spec.History.KeepRecords = ptrTo(int32(2))
		Expect(editor.Patch(ctx, got, p)).To(Succeed(), "an edit that leaves the rules as they are")

		got = getRun(ns, "ruled")
		p = client.MergeFrom(got.DeepCopy())
		got.Spec.Approval.Rules[0].Condition = "true"
		Expect(admin.Patch(ctx, got, p)).To(Succeed())
	})

	It("refuses a Require rule without its requirement at admission, naming the field", func() {
		ns := newNamespace()
		run := testRun("norequire", ns)
		run.Spec.Approval.Rules = []infrav1.ApprovalRule{{Name: "x", Condition: "true", Effect: infrav1.RuleRequire}}
		err := k8sClient.Create(ctx, run)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("require (approvals, approvers) is set when, and only when, effect is Require"))
	})

	It("stalls a run whose rule does not compile before it starts, naming the rule and the compiler's message", func() {
		ns := newNamespace()
		run := given{engineCases[0]}.run("badrule", ns).Obj()
		run.Spec.Approval.Rules = []infrav1.ApprovalRule{conformanceRules[0], {Name: "typo", Condition: "plan.destroyed > 0", Effect: infrav1.RuleDeny}}
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		Eventually(condReason(ns, "badrule", infrav1.StalledCondition), timeout, interval).Should(Equal("True/InvalidSpec"))
		msg := cond(getRun(ns, "badrule"), infrav1.StalledCondition).Message
		Expect(msg).To(And(ContainSubstring("spec.approval.rules[1] (typo)"), ContainSubstring("undefined field 'destroyed'")))
		Expect(getRun(ns, "badrule").Status.Run).To(BeNil(), "no child was made")
	})
})

var _ = Describe("change windows", func() {
	ctx := context.Background()
	freeze := infrav1.ChangeWindow{Name: "friday-freeze", Type: infrav1.WindowDeny, Schedule: "0 15 * * 5", Duration: metav1.Duration{Duration: 63 * time.Hour}, TimeZone: "Europe/Berlin"}

	It("lets only a policy admin set windows, or override them", func() {
		ns := newNamespace()
		grant(ns, "editor", "w-editor")
		grant(ns, "approver", "w-editor")
		grant(ns, "editor", "w-admin")
		grant(ns, "approver", "w-admin")
		grant(ns, "policy-admin", "w-admin")
		editor, admin := as("w-editor"), as("w-admin")

		run := testRun("windowed", ns)
		run.Spec.Approval.Windows = []infrav1.ChangeWindow{freeze}
		err := editor.Create(ctx, run)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(And(ContainSubstring("spec.approval.windows: setting, changing or removing a change window"), ContainSubstring("terraformruns/approvalpolicy")))
		Expect(admin.Create(ctx, run)).To(Succeed())

		got := getRun(ns, "windowed")
		p := client.MergeFrom(got.DeepCopy())
		got.Spec.Approval.Windows = nil
		err = editor.Patch(ctx, got, p)
		Expect(err).To(HaveOccurred(), "an editor removed the freeze")
		Expect(err.Error()).To(ContainSubstring("spec.approval.windows"))

		override := func(c client.Client) error {
			a := &infrav1.TerraformRunApproval{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "windowed-", Namespace: ns},
				Spec:       infrav1.TerraformRunApprovalSpec{RunName: "windowed", PlanDigest: digestOf("windowed"), Decision: infrav1.DecisionApprove, OverrideChangeWindows: true},
			}
			return c.Create(ctx, a)
		}
		err = override(editor)
		Expect(err).To(HaveOccurred(), "an approver overrode the windows")
		Expect(err.Error()).To(ContainSubstring("spec.overrideChangeWindows: w-editor may not let a plan apply outside its change windows"))
		Expect(override(admin)).To(Succeed())
	})

	It("refuses a schedule with its own time zone, and an override of a rejection, at admission", func() {
		ns := newNamespace()
		run := testRun("tzwindow", ns)
		bad := freeze
		bad.Schedule = "CRON_TZ=Europe/Berlin 0 15 * * 5"
		run.Spec.Approval.Windows = []infrav1.ChangeWindow{bad}
		err := k8sClient.Create(ctx, run)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("set the time zone in timeZone"))

		a := &infrav1.TerraformRunApproval{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "x-", Namespace: ns},
			Spec:       infrav1.TerraformRunApprovalSpec{RunName: "x", PlanDigest: digestOf("x"), Decision: infrav1.DecisionReject, OverrideChangeWindows: true},
		}
		err = k8sClient.Create(ctx, a)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("spec.overrideChangeWindows goes with an approval"))
	})

	It("stalls a run whose window does not parse before it starts, naming it", func() {
		ns := newNamespace()
		run := given{engineCases[0]}.run("badwindow", ns).Obj()
		bad := freeze
		bad.TimeZone = "Mars/Olympus_Mons"
		run.Spec.Approval.Windows = []infrav1.ChangeWindow{bad}
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		Eventually(condReason(ns, "badwindow", infrav1.StalledCondition), timeout, interval).Should(Equal("True/InvalidSpec"))
		Expect(cond(getRun(ns, "badwindow"), infrav1.StalledCondition).Message).To(ContainSubstring(`spec.approval.windows[0] (friday-freeze).timeZone "Mars/Olympus_Mons"`))
	})
})
