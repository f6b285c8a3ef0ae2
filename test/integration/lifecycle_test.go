package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	wfclientset "github.com/argoproj/argo-workflows/v3/pkg/client/clientset/versioned"
	"github.com/argoproj/argo-workflows/v3/server/auth"
	authtypes "github.com/argoproj/argo-workflows/v3/server/auth/types"
	"github.com/argoproj/argo-workflows/v3/workflow/hydrator/fake"
	argoutil "github.com/argoproj/argo-workflows/v3/workflow/util"
	"github.com/argoproj/argo-workflows/v3/workflow/validate"
	"github.com/go-jose/go-jose/v3/jwt"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/testutil"
)

const (
	timeout  = 20 * time.Second
	interval = 100 * time.Millisecond
)

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

var nsCounter int

func newNamespace() string {
	nsCounter++
	ns := fmt.Sprintf("it-%d-%d", GinkgoParallelProcess(), nsCounter)
	Expect(k8sClient.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	return ns
}

func getRun(ns, name string) *infrav1.TerraformRun {
	run := &infrav1.TerraformRun{}
	Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, run)).To(Succeed())
	return run
}

func cond(run *infrav1.TerraformRun, t string) *metav1.Condition {
	return apimeta.FindStatusCondition(run.Status.Conditions, t)
}

func condReason(ns, name, t string) func() string {
	return func() string {
		c := cond(getRun(ns, name), t)
		if c == nil {
			return ""
		}
		return string(c.Status) + "/" + c.Reason
	}
}

func workflows(ns string) []wfv1.Workflow {
	list := &wfv1.WorkflowList{}
	Expect(k8sClient.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
	return list.Items
}

// activeWorkflow waits for the run's current Workflow and returns its fake
// Argo controller.
func activeWorkflow(ns, name string) argoController {
	var id string
	Eventually(func() string {
		run := getRun(ns, name)
		if run.Status.Run == nil {
			return ""
		}
		id = run.Status.Run.ID
		return id
	}, timeout, interval).ShouldNot(BeEmpty())
	Eventually(func() error {
		return k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: id}, &wfv1.Workflow{})
	}, timeout, interval).Should(Succeed())
	return argoController{key: client.ObjectKey{Namespace: ns, Name: id}}
}

func patchRun(ns, name string, fn func(*infrav1.TerraformRun)) {
	run := getRun(ns, name)
	patch := client.MergeFrom(run.DeepCopy())
	fn(run)
	Expect(k8sClient.Patch(context.Background(), run, patch)).To(Succeed())
}

func phase(ns, name string) func() infrav1.RunPhase {
	return func() infrav1.RunPhase {
		run := getRun(ns, name)
		if run.Status.Run == nil {
			return ""
		}
		return run.Status.Run.Phase
	}
}

const sensitiveMarker = "S3NSITIVE-0UTPUT-MARKER-7f3a"

func outputsJSON() string {
	return `{"id":{"sensitive":false,"type":"string","value":"abc-123"},` +
		`"tags":{"sensitive":false,"type":["map","string"],"value":{"env":"dev"}},` +
		`"password":{"sensitive":true,"type":"string","value":"` + sensitiveMarker + `"}}`
}

// toPlanned creates a run and drives its Workflow to the approval gate.
func toPlanned(ns string, run *infrav1.TerraformRun, digest string) argoController {
	Expect(k8sClient.Create(context.Background(), run)).To(Succeed())
	a := activeWorkflow(ns, run.Name)
	a.start()
	a.plan(1, 0, 0, digest)
	a.suspend(digest)
	Eventually(phase(ns, run.Name), timeout, interval).Should(Equal(infrav1.RunAwaitingApproval))
	return a
}

var _ = Describe("TerraformRun lifecycle on Argo", func() {
	ctx := context.Background()

	It("plans, waits, is approved through the CR exactly as argo resume would, applies and writes outputs", func() {
		ns := newNamespace()
		digest := digestOf("happy")
		run := testutil.MakeRun("happy", ns).Var("name", `"demo"`).Outputs(map[string]string{"id": "resource_id"}, "tags").Obj()
		a := toPlanned(ns, run, digest)

		By("the Workflow is ours, valid for Argo and well-formed")
		wf := a.get()
		Expect(metav1.IsControlledBy(wf, getRun(ns, run.Name))).To(BeTrue())
		Expect(validate.ValidateWorkflow(nil, nil, wf.DeepCopy(), nil, validate.ValidateOpts{})).To(Succeed())
		cm := &corev1.ConfigMap{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: wf.Name + "-inputs"}, cm)).To(Succeed())
		Expect(cm.Data["vars.json"]).To(MatchJSON(`{"name":"demo"}`))
		Expect(metav1.IsControlledBy(cm, wf)).To(BeTrue())

		By("status shows the plan and waits for approval")
		got := getRun(ns, run.Name)
		Expect(got.Status.Plan).NotTo(BeNil())
		Expect(got.Status.Plan.Digest).To(Equal(digest))
		Expect(got.Status.PlanSummary).To(Equal("+1 ~0 -0"))
		Expect(got.Status.Run.Commit).To(HaveLen(40))
		Expect(condReason(ns, run.Name, infrav1.ApprovedCondition)()).To(Equal("Unknown/AwaitingApproval"))
		Expect(condReason(ns, run.Name, infrav1.ReconcilingCondition)()).To(Equal("True/AwaitingApproval"))

		By("approving the current digest resumes the suspend node")
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = digest })
		Eventually(func() wfv1.NodePhase { return a.gateNode().Phase }, timeout, interval).Should(Equal(wfv1.NodeSucceeded))
		n := a.gateNode()
		Expect(n.Message).To(HavePrefix("Resumed by: opr8r"))
		Expect(n.FinishedAt.IsZero()).To(BeFalse())
		Expect(n.Outputs.Parameters).To(ContainElements(
			wfv1.Parameter{Name: "decision", Value: wfv1.AnyStringPtr("approve")},
			wfv1.Parameter{Name: "approved-digest", Value: wfv1.AnyStringPtr(digest)},
		))
		Expect(a.get().Labels).To(HaveKeyWithValue("workflows.argoproj.io/action", "Resume"))
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("True/Approved"))
		Expect(getRun(ns, run.Name).Status.Approval.Source).To(Equal(infrav1.ApprovedBySpec))

		By("apply and export finish; the outputs Secret gets the values, status only names")
		a.finishApply(outputsJSON())
		Eventually(condReason(ns, run.Name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
		got = getRun(ns, run.Name)
		Expect(got.Status.Outputs).To(Equal([]string{"password", "resource_id"}))
		Expect(got.Status.OutputsSecretName).To(Equal("happy-outputs"))
		Expect(got.Status.LastAppliedHash).To(Equal(got.Status.Run.SpecHash))
		Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		Expect(got.Status.Run.Phase).To(Equal(infrav1.RunSucceeded))
		Expect(condReason(ns, run.Name, infrav1.AppliedCondition)()).To(Equal("True/Applied"))
		Expect(cond(got, infrav1.ReconcilingCondition)).To(BeNil())
		Expect(cond(got, infrav1.StalledCondition)).To(BeNil())
		sec := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "happy-outputs"}, sec)).To(Succeed())
		Expect(sec.Data).To(Equal(map[string][]byte{"resource_id": []byte("abc-123"), "password": []byte(sensitiveMarker)}))
		Expect(metav1.IsControlledBy(sec, got)).To(BeTrue())
		steps := map[string]infrav1.StepPhase{}
		for _, s := range got.Status.Run.Steps {
			steps[s.Name] = s.Phase
		}
		Expect(steps).To(Equal(map[string]infrav1.StepPhase{"clone": "Succeeded", "init": "Succeeded", "plan": "Succeeded", "approve": "Succeeded", "apply": "Succeeded", "export-outputs": "Succeeded", "cleanup": "Succeeded"}))

		By("a deleted outputs Secret is restored from the run's outputs")
		Expect(k8sClient.Delete(ctx, sec)).To(Succeed())
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) { r.Annotations = map[string]string{"nudge": "1"} })
		Eventually(func() error {
			return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "happy-outputs"}, &corev1.Secret{})
		}, timeout, interval).Should(Succeed())

		By("an unchanged spec starts no new run")
		Consistently(func() int { return len(workflows(ns)) }, 2*time.Second, interval).Should(Equal(1))
	})

	It("skips the gate and apply for a plan without changes, and still exports outputs", func() {
		ns := newNamespace()
		run := testutil.MakeRun("nochange", ns).Obj()
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		a := activeWorkflow(ns, run.Name)
		a.start()
		a.plan(0, 0, 0, digestOf("nochange"))
		a.skipGate()
		a.finishApply(`{"id":{"sensitive":false,"type":"string","value":"x"}}`)
		Eventually(condReason(ns, run.Name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
		got := getRun(ns, run.Name)
		Expect(got.Status.Plan.HasChanges).To(BeFalse())
		Expect(cond(got, infrav1.ApprovedCondition)).To(BeNil())
		Expect(condReason(ns, run.Name, infrav1.AppliedCondition)()).To(Equal("True/NoChanges"))
		Expect(got.Status.Outputs).To(Equal([]string{"id"}))
	})

	It("records an approval given outside with Argo's own ResumeWorkflow (argo resume)", func() {
		ns := newNamespace()
		digest := digestOf("external")
		run := testutil.MakeRun("external", ns).Obj()
		a := toPlanned(ns, run, digest)

		wfc := wfclientset.NewForConfigOrDie(cfg)
		actx := context.WithValue(ctx, auth.ClaimsKey, &authtypes.Claims{Claims: jwt.Claims{Subject: "alice"}})
		Expect(argoutil.ResumeWorkflow(actx, wfc.ArgoprojV1alpha1().Workflows(ns), fake.Noop, a.key.Name, "")).To(Succeed())

		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("True/Approved"))
		got := getRun(ns, run.Name)
		Expect(got.Status.Approval.Source).To(Equal(infrav1.ApprovedByEngine))
		Expect(got.Status.Approval.By).To(Equal("alice"))
		Expect(got.Status.Approval.Digest).To(Equal(digest))
		n := a.gateNode()
		Expect(n.Outputs.Parameters).To(ContainElement(wfv1.Parameter{Name: "approved-digest", Value: wfv1.AnyStringPtr(digest)}))
	})

	It("refuses an approval for an older plan and says so", func() {
		ns := newNamespace()
		run := testutil.MakeRun("stale", ns).Obj()
		a := toPlanned(ns, run, digestOf("new plan"))
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = digestOf("old plan") })
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("False/StaleApproval"))
		Expect(cond(getRun(ns, run.Name), infrav1.ApprovedCondition).Message).To(ContainSubstring(digestOf("new plan")))
		Consistently(func() wfv1.NodePhase { return a.gateNode().Phase }, 2*time.Second, interval).Should(Equal(wfv1.NodeRunning))
	})

	It("rejects through the CR: the gate fails with the reason and the run is Rejected", func() {
		ns := newNamespace()
		digest := digestOf("reject")
		run := testutil.MakeRun("reject", ns).Obj()
		a := toPlanned(ns, run, digest)
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) {
			r.Spec.Approval.RejectedPlan = digest
			r.Spec.Approval.RejectReason = "deletes the prod database"
		})
		Eventually(func() wfv1.NodePhase { return a.gateNode().Phase }, timeout, interval).Should(Equal(wfv1.NodeFailed))
		Expect(a.gateNode().Message).To(ContainSubstring("deletes the prod database"))
		a.completeAfterGate(wfv1.WorkflowFailed)
		Eventually(phase(ns, run.Name), timeout, interval).Should(Equal(infrav1.RunRejected))
		Expect(condReason(ns, run.Name, infrav1.StalledCondition)()).To(Equal("True/Rejected"))
		Expect(condReason(ns, run.Name, infrav1.ReadyCondition)()).To(Equal("False/Rejected"))
		Expect(getRun(ns, run.Name).Status.Approval.Reason).To(Equal("deletes the prod database"))
	})

	It("maps the Argo UI's \"reject\" choice (a succeeded gate, apply skipped) to a rejected run", func() {
		ns := newNamespace()
		digest := digestOf("ui-no")
		run := testutil.MakeRun("ui-no", ns).Obj()
		a := toPlanned(ns, run, digest)
		a.update(func(wf *wfv1.Workflow) {
			setNode(wf, "approve", wfv1.NodeTypeSuspend, wfv1.NodeSucceeded, func(n *wfv1.NodeStatus) {
				n.Outputs.Parameters[0] = wfv1.Parameter{Name: "decision", Value: wfv1.AnyStringPtr("reject")}
				n.Outputs.Parameters[1] = wfv1.Parameter{Name: "approved-digest", Value: wfv1.AnyStringPtr(digest)}
			})
		})
		a.completeAfterGate(wfv1.WorkflowSucceeded)
		Eventually(phase(ns, run.Name), timeout, interval).Should(Equal(infrav1.RunRejected))
		Expect(condReason(ns, run.Name, infrav1.ApprovedCondition)()).To(Equal("False/Rejected"))
		Expect(getRun(ns, run.Name).Status.Approval.Source).To(Equal(infrav1.ApprovedByEngine))
	})

	It("rejects a plan whose approval timed out", func() {
		ns := newNamespace()
		run := testutil.MakeRun("timeout", ns).Obj()
		run.Spec.Approval.Timeout = &metav1.Duration{Duration: 2 * time.Second}
		a := toPlanned(ns, run, digestOf("timeout"))
		Eventually(func() wfv1.NodePhase { return a.gateNode().Phase }, timeout, interval).Should(Equal(wfv1.NodeFailed))
		Expect(a.gateNode().Message).To(ContainSubstring("approval timed out after 2s"))
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("False/ApprovalTimeout"))
		a.completeAfterGate(wfv1.WorkflowFailed)
		Eventually(condReason(ns, run.Name, infrav1.StalledCondition), timeout, interval).Should(Equal("True/ApprovalTimeout"))
	})

	It("starts a new run on a spec change or a rerun request, and never on an unchanged spec", func() {
		ns := newNamespace()
		run := testutil.MakeRun("rerun", ns).Auto().Var("n", "1").Obj()
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		a := activeWorkflow(ns, run.Name)
		a.start()
		a.plan(1, 0, 0, digestOf("r1"))
		a.finishApply(`{}`)
		Eventually(condReason(ns, run.Name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
		Expect(getRun(ns, run.Name).Status.Approval.Source).To(Equal(infrav1.ApprovedAutomatically))
		first := a.key.Name

		By("changing only the approval timeout and suspend=false starts nothing")
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) { r.Spec.Approval.Timeout = &metav1.Duration{Duration: time.Hour} })
		Consistently(func() int { return len(workflows(ns)) }, 2*time.Second, interval).Should(Equal(1))

		By("changing a variable starts a new run with a new hash")
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) { r.Spec.Terraform.Vars[0].Value.Raw = []byte("2") })
		Eventually(func() string { return getRun(ns, run.Name).Status.Run.ID }, timeout, interval).ShouldNot(Equal(first))
		second := getRun(ns, run.Name).Status.Run
		Expect(second.Attempt).To(Equal(int32(1)))
		b := activeWorkflow(ns, run.Name)
		b.start()
		b.plan(0, 1, 0, digestOf("r2"))
		b.finishApply(`{}`)
		Eventually(phase(ns, run.Name), timeout, interval).Should(Equal(infrav1.RunSucceeded))

		By("a rerun request starts attempt 2 of the same hash, echoed to status")
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) {
			r.Annotations = map[string]string{infrav1.RunRequestAnnotation: "2026-11-23T00:00:00Z"}
		})
		Eventually(func() int32 { return getRun(ns, run.Name).Status.Run.Attempt }, timeout, interval).Should(Equal(int32(2)))
		got := getRun(ns, run.Name)
		Expect(got.Status.Run.SpecHash).To(Equal(second.SpecHash))
		Expect(got.Status.LastHandledRunRequest).To(Equal("2026-11-23T00:00:00Z"))
		Expect(workflows(ns)).To(HaveLen(3))
	})

	It("surfaces terraform's error text when a step fails", func() {
		ns := newNamespace()
		run := testutil.MakeRun("fails", ns).Obj()
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		a := activeWorkflow(ns, run.Name)
		a.start()
		a.fail("plan", `Error (exit code 1): Error: Invalid value for variable: var.name must be lowercase`)
		Eventually(condReason(ns, run.Name, infrav1.StalledCondition), timeout, interval).Should(Equal("True/RunFailed"))
		got := getRun(ns, run.Name)
		Expect(cond(got, infrav1.ReadyCondition).Message).To(ContainSubstring("Invalid value for variable"))
		Expect(got.Status.Run.Message).To(ContainSubstring("step plan failed"))
		Expect(condReason(ns, run.Name, infrav1.PlannedCondition)()).To(Equal("False/RunFailed"))
	})

	Context("deletion", func() {
		applied := func(ns, name string, retain bool) {
			w := testutil.MakeRun(name, ns).Auto()
			if retain {
				w = w.Retain()
			}
			Expect(k8sClient.Create(ctx, w.Obj())).To(Succeed())
			a := activeWorkflow(ns, name)
			a.start()
			a.plan(1, 0, 0, digestOf(name))
			a.finishApply(`{}`)
			Eventually(condReason(ns, name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
		}

		It("runs a destroy Workflow on delete and removes the finalizer when it succeeds", func() {
			ns := newNamespace()
			applied(ns, "gone", false)
			Expect(k8sClient.Delete(ctx, getRun(ns, "gone"))).To(Succeed())
			Eventually(func() infrav1.RunType { return getRun(ns, "gone").Status.Run.Type }, timeout, interval).Should(Equal(infrav1.RunDestroy))
			d := activeWorkflow(ns, "gone")
			Expect(d.get().Labels).To(HaveKeyWithValue(infrav1.RunTypeLabel, "destroy"))
			Expect(d.get().Spec.Templates[0].DAG.Tasks).NotTo(ContainElement(HaveField("Name", "approve")))
			d.succeedDestroy()
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gone"}, &infrav1.TerraformRun{}))
			}, timeout, interval).Should(BeTrue())
		})

		It("stalls a failing destroy with the escape hatch, which then works", func() {
			ns := newNamespace()
			applied(ns, "stuck", false)
			Expect(k8sClient.Delete(ctx, getRun(ns, "stuck"))).To(Succeed())
			Eventually(func() infrav1.RunType { return getRun(ns, "stuck").Status.Run.Type }, timeout, interval).Should(Equal(infrav1.RunDestroy))
			d := activeWorkflow(ns, "stuck")
			d.start()
			d.fail("plan", "Error: error acquiring the state lock")
			Eventually(condReason(ns, "stuck", infrav1.StalledCondition), timeout, interval).Should(Equal("True/DestroyFailed"))
			Expect(cond(getRun(ns, "stuck"), infrav1.StalledCondition).Message).To(ContainSubstring(infrav1.SkipDestroyAnnotation))
			patchRun(ns, "stuck", func(r *infrav1.TerraformRun) {
				r.Annotations = map[string]string{infrav1.SkipDestroyAnnotation: "true"}
			})
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "stuck"}, &infrav1.TerraformRun{}))
			}, timeout, interval).Should(BeTrue())
		})

		It("skips the destroy with deletionPolicy Retain", func() {
			ns := newNamespace()
			applied(ns, "kept", true)
			Expect(k8sClient.Delete(ctx, getRun(ns, "kept"))).To(Succeed())
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kept"}, &infrav1.TerraformRun{}))
			}, timeout, interval).Should(BeTrue())
			for _, wf := range workflows(ns) {
				Expect(wf.Labels[infrav1.RunTypeLabel]).NotTo(Equal("destroy"))
			}
		})
	})

	Context("faults", func() {
		It("creates no duplicate child when the manager restarts after creating it but before recording it", func() {
			ns := newNamespace()
			run := testutil.MakeRun("restart", ns).Obj()
			Expect(k8sClient.Create(ctx, run)).To(Succeed())
			a := activeWorkflow(ns, run.Name)
			stopManager()
			// The status write that recorded the child is lost.
			got := getRun(ns, run.Name)
			got.Status = infrav1.TerraformRunStatus{}
			Expect(k8sClient.Status().Update(ctx, got)).To(Succeed())
			startManager()
			Eventually(func() *infrav1.RunStatus { return getRun(ns, run.Name).Status.Run }, timeout, interval).ShouldNot(BeNil())
			Expect(getRun(ns, run.Name).Status.Run.ID).To(Equal(a.key.Name))
			Consistently(func() int { return len(workflows(ns)) }, 2*time.Second, interval).Should(Equal(1))
			a.start()
			a.plan(1, 0, 0, digestOf("restart"))
			a.suspend(digestOf("restart"))
			Eventually(phase(ns, run.Name), timeout, interval).Should(Equal(infrav1.RunAwaitingApproval))
		})

		It("records a child deleted by hand and starts nothing by itself", func() {
			ns := newNamespace()
			run := testutil.MakeRun("handdel", ns).Obj()
			Expect(k8sClient.Create(ctx, run)).To(Succeed())
			a := activeWorkflow(ns, run.Name)
			a.start()
			Expect(k8sClient.Delete(ctx, a.get())).To(Succeed())
			Eventually(condReason(ns, run.Name, infrav1.StalledCondition), timeout, interval).Should(Equal("True/ChildDeleted"))
			Expect(getRun(ns, run.Name).Status.Run.Phase).To(Equal(infrav1.RunFailed))
			Consistently(func() int { return len(workflows(ns)) }, 2*time.Second, interval).Should(Equal(0))
		})

		It("supersedes a plan waiting for approval when the spec changes", func() {
			ns := newNamespace()
			run := testutil.MakeRun("supersede", ns).Var("v", "1").Obj()
			a := toPlanned(ns, run, digestOf("s1"))
			patchRun(ns, run.Name, func(r *infrav1.TerraformRun) { r.Spec.Terraform.Vars[0].Value.Raw = []byte("2") })
			Eventually(func() wfv1.ShutdownStrategy { return a.get().Spec.Shutdown }, timeout, interval).Should(Equal(wfv1.ShutdownStrategyStop))
			Expect(workflows(ns)).To(HaveLen(1), "no second child while the first is active")
			a.completeAfterGate(wfv1.WorkflowFailed)
			Eventually(func() int { return len(workflows(ns)) }, timeout, interval).Should(Equal(2))
		})
	})

	It("accepts every golden Workflow in a real API server with Argo's full CRD", func() {
		ns := newNamespace()
		files, err := goldenFiles()
		Expect(err).NotTo(HaveOccurred())
		Expect(files).To(HaveLen(6))
		for name, wf := range files {
			wf.Namespace = ns
			wf.OwnerReferences = nil
			Expect(k8sClient.Create(ctx, wf, client.DryRunAll)).To(Succeed(), "golden %s", name)
		}
	})

	It("keeps secrets out of the Workflow, status, events and logs", func() {
		ns := newNamespace()
		const tokenMarker = "GITT0KEN-MARKER-91c2"
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "git-creds", Namespace: ns},
			StringData: map[string]string{"token": tokenMarker}})).To(Succeed())
		run := testutil.MakeRun("leak", ns).Git("https://git.example.com/x.git", "main", "", "git-creds").Obj()
		digest := digestOf("leak")
		a := toPlanned(ns, run, digest)
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = digest })
		Eventually(func() wfv1.NodePhase { return a.gateNode().Phase }, timeout, interval).Should(Equal(wfv1.NodeSucceeded))
		a.finishApply(outputsJSON())
		Eventually(condReason(ns, run.Name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))

		sec := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "leak-outputs"}, sec)).To(Succeed())
		Expect(string(sec.Data["password"])).To(Equal(sensitiveMarker), "the marker must reach the outputs Secret, or the scan proves nothing")

		wfJSON, _ := json.Marshal(a.get())
		statusJSON, _ := json.Marshal(getRun(ns, run.Name).Status)
		events, err := clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(events.Items).NotTo(BeEmpty())
		eventsJSON, _ := json.Marshal(events.Items)
		for _, marker := range []string{tokenMarker, sensitiveMarker} {
			for where, text := range map[string]string{"Workflow": string(wfJSON), "status": string(statusJSON), "events": string(eventsJSON), "manager log": mgrLogs.String()} {
				Expect(strings.Contains(text, marker)).To(BeFalse(), "%s leaks a secret marker", where)
			}
		}
	})
})
