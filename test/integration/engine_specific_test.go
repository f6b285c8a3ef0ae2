package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opr8r/opr8r/pkg/engine"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	wfclientset "github.com/argoproj/argo-workflows/v3/pkg/client/clientset/versioned"
	"github.com/argoproj/argo-workflows/v3/server/auth"
	authtypes "github.com/argoproj/argo-workflows/v3/server/auth/types"
	"github.com/argoproj/argo-workflows/v3/workflow/hydrator/fake"
	argoutil "github.com/argoproj/argo-workflows/v3/workflow/util"
	"github.com/go-jose/go-jose/v3/jwt"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	tektonv1beta1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1beta1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/pkg/apis"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines/argo/argotest"
	"github.com/opr8r/opr8r/engines/tekton"
	"github.com/opr8r/opr8r/pkg/testutil"
	"github.com/opr8r/opr8r/test/envtestutil"
)

var argoEngine = given{engineCases[0]}

var _ = Describe("Argo specifics", func() {
	ctx := context.Background()

	It("refuses an approval given in Argo that admission did not stamp (Argo's own ResumeWorkflow as a cluster admin, its actor label naming alice): the run is stopped, never applied", func() {
		ns := newNamespace()
		digest := digestOf("external")
		run := argoEngine.run("external", ns).Obj()
		a := argoEngine.planned(ns, run, digest).(argotest.Sim)

		wfc := wfclientset.NewForConfigOrDie(cfg)
		actx := context.WithValue(ctx, auth.ClaimsKey, &authtypes.Claims{Claims: jwt.Claims{Subject: "alice"}})
		Expect(argoutil.ResumeWorkflow(actx, wfc.ArgoprojV1alpha1().Workflows(ns), fake.Noop, a.Key().Name, "")).To(Succeed())

		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("False/" + infrav1.ReasonApprovedOutsidePolicy))
		got := getRun(ns, run.Name)
		Expect(got.Status.Approval).NotTo(BeNil())
		Expect(got.Status.Approval.Approved).To(BeFalse())
		Expect(meta.FindStatusCondition(got.Status.Conditions, infrav1.ApprovedCondition).Message).To(ContainSubstring("no approval of it was stamped at admission"))
		Eventually(func() string { return string(a.Get().Spec.Shutdown) }, timeout, interval).ShouldNot(BeEmpty(), "the manager stops the Workflow before its apply")
	})

	It("judges a person's argo resume by spec.approval at admission: stamps who, refuses outsiders, the author, a second resume by one user and a quorum short of one", func() {
		ns := newNamespace()
		digest := digestOf("resume-policy")
		Expect(k8sClient.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "argo-resumer", Namespace: ns},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"argoproj.io"}, Resources: []string{"workflows"}, Verbs: []string{"get", "list", "watch", "update", "patch"}}}})).To(Succeed())
		for _, u := range []string{"ar-alice", "ar-bob", "ar-carol", "ar-mallory"} {
			grant(ns, "approver", u)
			grant(ns, "editor", u)
			Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "argo-resumer-" + u, Namespace: ns},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "argo-resumer"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: u}}})).To(Succeed())
			bound(ns, u, "argoproj.io", "workflows", "update")
		}
		run := argoEngine.run("resume-policy", ns).Obj()
		run.Spec.Approval.RequiredApprovals = 2
		run.Spec.Approval.SelfApproval = infrav1.SelfApprovalForbidden
		run.Spec.Approval.Approvers = &infrav1.Approvers{Users: []string{"ar-alice", "ar-carol"}, Groups: []string{"ar-reviewers"}}
		Expect(as("ar-carol").Create(ctx, run)).To(Succeed())
		a := argoEngine.active(ns, run.Name).(argotest.Sim)
		a.Start()
		a.Plan(1, 0, 0, digest)
		a.Suspend(digest)
		Eventually(phase(ns, run.Name), timeout, interval).Should(Equal(infrav1.RunAwaitingApproval))
		Eventually(func() map[string]string { return a.Get().Annotations }, timeout, interval).Should(And(
			HaveKeyWithValue("infra.opr8r.io/gate-needed", "2"), HaveKeyWithValue("infra.opr8r.io/gate-digest", digest),
			HaveKeyWithValue("infra.opr8r.io/gate-users", "ar-alice\nar-carol"), HaveKeyWithValue("infra.opr8r.io/gate-barred", "ar-carol")))

		resume := func(user string, groups ...string) error {
			wfc := wfclientset.NewForConfigOrDie(asConfig(user, groups...))
			return argoutil.ResumeWorkflow(ctx, wfc.ArgoprojV1alpha1().Workflows(ns), fake.Noop, a.Key().Name, "")
		}
		By("an outsider, the author, and an approver while two approvals are needed are refused; the gate stays suspended")
		for user, want := range map[string]string{
			"ar-mallory": "ar-mallory may not decide plans of TerraformRun resume-policy: not in its spec.approval.approvers",
			"ar-carol":   "ar-carol may not approve plan " + digest + " of TerraformRun resume-policy again or as the author of the change",
			"ar-alice":   "needs 2 more approvals and a resume counts as one: approve with kubectl tfrun approve resume-policy first",
		} {
			err := resume(user)
			Expect(err).To(HaveOccurred(), "resume by %s", user)
			Expect(err.Error()).To(ContainSubstring(want))
		}
		Expect(a.GateNode().Phase).To(Equal(wfv1.NodeRunning))

		By("a stamp typed by hand is refused")
		wf := a.Get()
		wf.Annotations["infra.opr8r.io/gate-decided-by"] = "ar-alice"
		err := as("ar-mallory").Update(ctx, wf)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("is stamped by the API server when a person resumes"))

		By("after ar-alice's approval one more is needed: her resume is refused, a group member's passes and is stamped")
		_, err = decide(as("ar-alice"), ns, run.Name, digest, infrav1.DecisionApprove, "")
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() map[string]string { return a.Get().Annotations }, timeout, interval).Should(And(
			HaveKeyWithValue("infra.opr8r.io/gate-needed", "1"), HaveKeyWithValue("infra.opr8r.io/gate-barred", "ar-alice\nar-carol")))
		err = resume("ar-alice")
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("ar-alice may not approve plan " + digest))
		Expect(resume("ar-bob", "ar-reviewers")).To(Succeed())
		Expect(a.Get().Annotations).To(HaveKeyWithValue("infra.opr8r.io/gate-decided-by", "ar-bob"))
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("True/Approved"))
		got := getRun(ns, run.Name)
		Expect(got.Status.Approval.Source).To(Equal(infrav1.ApprovedByEngine))
		Expect(got.Status.Approval.By).To(Equal("ar-alice, ar-bob"))
		Expect(got.Status.Approvals.Summary).To(Equal("2/2"))
	})

	It("resumes the suspend node as argo resume does: supplied outputs, finishedAt, Resume label", func() {
		ns := newNamespace()
		digest := digestOf("resume-shape")
		run := argoEngine.run("resume-shape", ns).Obj()
		a := argoEngine.planned(ns, run, digest).(argotest.Sim)
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = digest })
		Eventually(func() wfv1.NodePhase { return a.GateNode().Phase }, timeout, interval).Should(Equal(wfv1.NodeSucceeded))
		n := a.GateNode()
		Expect(n.Message).To(HavePrefix("Resumed by: opr8r"))
		Expect(n.FinishedAt.IsZero()).To(BeFalse())
		Expect(n.Outputs.Parameters).To(ContainElements(
			wfv1.Parameter{Name: "decision", Value: wfv1.AnyStringPtr("approve")},
			wfv1.Parameter{Name: "approved-digest", Value: wfv1.AnyStringPtr(digest)},
		))
		Expect(a.Get().Labels).To(HaveKeyWithValue("workflows.argoproj.io/action", "Resume"))
	})

	It("maps the Argo UI's \"reject\" choice (a succeeded gate, apply skipped) to a rejected run", func() {
		ns := newNamespace()
		digest := digestOf("ui-no")
		run := argoEngine.run("ui-no", ns).Obj()
		a := argoEngine.planned(ns, run, digest).(argotest.Sim)
		a.Update(func(wf *wfv1.Workflow) {
			argotest.SetNode(wf, "approve", wfv1.NodeTypeSuspend, wfv1.NodeSucceeded, func(n *wfv1.NodeStatus) {
				n.Outputs.Parameters[0] = wfv1.Parameter{Name: "decision", Value: wfv1.AnyStringPtr("reject")}
				n.Outputs.Parameters[1] = wfv1.Parameter{Name: "approved-digest", Value: wfv1.AnyStringPtr(digest)}
			})
		})
		a.CompleteAfterGateWith(wfv1.WorkflowSucceeded)
		Eventually(phase(ns, run.Name), timeout, interval).Should(Equal(infrav1.RunRejected))
		Expect(condReason(ns, run.Name, infrav1.ApprovedCondition)()).To(Equal("False/Rejected"))
		Expect(getRun(ns, run.Name).Status.Approval.Source).To(Equal(infrav1.ApprovedByEngine))
	})

})

var _ = Describe("Tekton specifics: the approval custom task contract", func() {
	ctx := context.Background()

	newGate := func(ns, name string, timeout *metav1.Duration, ref *tektonv1beta1.TaskRef) *tektonv1beta1.CustomRun {
		cr := &tektonv1beta1.CustomRun{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
				infrav1.ManagedByLabel: infrav1.ManagedByValue, tekton.PipelineTaskLabel: "approve", tekton.PipelineRunLabel: "pr"}},
			Spec: tektonv1beta1.CustomRunSpec{CustomRef: ref, Timeout: timeout,
				Params: tektonv1beta1.Params{{Name: "digest", Value: *tektonv1beta1.NewStructuredValues(digestOf(name))}, {Name: "run", Value: *tektonv1beta1.NewStructuredValues("r")}}},
		}
		Expect(k8sClient.Create(ctx, cr)).To(Succeed())
		return cr
	}
	succeeded := func(cr *tektonv1beta1.CustomRun) func() string {
		return func() string {
			got := &tektonv1beta1.CustomRun{}
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), got)).To(Succeed())
			c := got.Status.GetCondition(apis.ConditionSucceeded)
			if c == nil {
				return ""
			}
			return string(c.Status) + "/" + c.Reason
		}
	}
	ours := &tektonv1beta1.TaskRef{APIVersion: tekton.ApprovalAPIVersion, Kind: tekton.ApprovalKind}

	It("marks a new gate Running (Succeeded Unknown) with a message that says how to approve", func() {
		ns := newNamespace()
		cr := newGate(ns, "g1", nil, ours)
		Eventually(succeeded(cr), timeout, interval).Should(Equal("Unknown/AwaitingApproval"))
		got := &tektonv1beta1.CustomRun{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), got)).To(Succeed())
		Expect(got.Status.GetCondition(apis.ConditionSucceeded).Message).To(ContainSubstring("kubectl tfrun approve r"))
		Expect(got.Status.StartTime).NotTo(BeNil())
	})

	It("fails a cancelled gate with CustomRunCancelled", func() {
		ns := newNamespace()
		cr := newGate(ns, "g2", nil, ours)
		Eventually(succeeded(cr), timeout, interval).Should(Equal("Unknown/AwaitingApproval"))
		patch := client.MergeFrom(cr.DeepCopy())
		cr.Spec.Status = tektonv1beta1.CustomRunSpecStatusCancelled
		cr.Spec.StatusMessage = "PipelineRun cancelled"
		Expect(k8sClient.Patch(ctx, cr, patch)).To(Succeed())
		Eventually(succeeded(cr), timeout, interval).Should(Equal("False/" + tekton.ReasonCustomRunCancelled))
	})

	It("fails a gate past spec.timeout with CustomRunTimedOut", func() {
		ns := newNamespace()
		cr := newGate(ns, "g3", &metav1.Duration{Duration: time.Second}, ours)
		Eventually(succeeded(cr), timeout, interval).Should(Equal("False/" + tekton.ReasonCustomRunTimedOut))
	})

	It("refuses a person's write that decides the gate: only opr8r decides it, under spec.approval", func() {
		ns := newNamespace()
		cr := newGate(ns, "g5", nil, ours)
		Eventually(succeeded(cr), timeout, interval).Should(Equal("Unknown/AwaitingApproval"))
		Expect(k8sClient.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "customrun-writer", Namespace: ns},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"tekton.dev"}, Resources: []string{"customruns", "customruns/status"}, Verbs: []string{"get", "update", "patch"}}}})).To(Succeed())
		Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "customrun-writer", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "customrun-writer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "tg-mallory"}}})).To(Succeed())
		bound(ns, "tg-mallory", "tekton.dev", "customruns/status", "update")
		got := &tektonv1beta1.CustomRun{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), got)).To(Succeed())
		got.Status.MarkCustomRunSucceeded("Approved", "approved by alice")
		err := as("tg-mallory").Status().Update(ctx, got)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("tg-mallory may not decide opr8r's approval gate g5 by writing its status"))
		Expect(err.Error()).To(ContainSubstring("kubectl tfrun approve|reject r"))
		Consistently(succeeded(cr), time.Second, interval).Should(Equal("Unknown/AwaitingApproval"))

		By("a write that leaves the decision alone passes")
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(cr), got)).To(Succeed())
		if got.Annotations == nil {
			got.Annotations = map[string]string{}
		}
		got.Annotations["note"] = "looked at it"
		Expect(as("tg-mallory").Update(ctx, got)).To(Succeed())
	})

	It("leaves other custom tasks alone", func() {
		ns := newNamespace()
		cr := newGate(ns, "g4", nil, &tektonv1beta1.TaskRef{APIVersion: "example.dev/v1", Kind: "Wait"})
		Consistently(succeeded(cr), 2*time.Second, interval).Should(BeEmpty())
	})

})

// Every engine's golden children, as its goldens hold them, are accepted by
// a real API server with the engine's CRDs (its full schema), with the
// pods they describe where the child is a pod template (the Job engine).
var _ = Describe("golden children in a real API server", func() {
	for _, e := range engineCases {
		It("accepts every golden child of "+string(e.name), func() {
			ns := newNamespace()
			files := goldens(e.kit.Engine, filepath.Join("engines", string(e.name)))
			Expect(files).To(HaveLen(len(testutil.GoldenCases())))
			for name, obj := range files {
				obj.SetNamespace(ns)
				obj.SetOwnerReferences(nil)
				Expect(k8sClient.Create(context.Background(), obj, client.DryRunAll)).To(Succeed(), "golden %s", name)
				if j, ok := obj.(*batchv1.Job); ok {
					pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns}, Spec: j.Spec.Template.Spec}
					Expect(k8sClient.Create(context.Background(), pod, client.DryRunAll)).To(Succeed(), "golden %s's pod", name)
				}
			}
		})
	}
})

// goldens reads an engine's golden files.
func goldens(e engine.Engine, dir string) map[string]client.Object {
	paths, err := filepath.Glob(filepath.Join(envtestutil.RepoRoot(), dir, "testdata", "*.golden.yaml"))
	Expect(err).NotTo(HaveOccurred())
	out := map[string]client.Object{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		Expect(err).NotTo(HaveOccurred())
		obj := e.NewChild()
		Expect(yaml.UnmarshalStrict(b, obj)).To(Succeed(), p)
		out[strings.TrimSuffix(filepath.Base(p), ".golden.yaml")] = obj
	}
	return out
}
