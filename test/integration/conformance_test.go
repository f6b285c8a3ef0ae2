package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
)

const (
	timeout  = 20 * time.Second
	interval = 100 * time.Millisecond
)

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

// condMessage is the message of a run's condition t ("" while it has none).
func condMessage(ns, name, t string) func() string {
	return func() string {
		if c := cond(getRun(ns, name), t); c != nil {
			return c.Message
		}
		return ""
	}
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

func gateState(s engineSim) func() string {
	return func() string { st, _, _ := s.Gate(); return st }
}

// approvalLabel is the stored child's infra.opr8r.io/approval label.
// recordOf is a run's record in status.history, nil while there is none.
func recordOf(ns, name, id string) *infrav1.RunRecord {
	for _, h := range getRun(ns, name).Status.History {
		if h.ID == id {
			return &h
		}
	}
	return nil
}

func approvalLabel(s engineSim) func() string {
	return func() string { return s.Object().GetLabels()[infrav1.ApprovalLabel] }
}

const sensitiveMarker = "S3NSITIVE-0UTPUT-MARKER-7f3a"

// leakScans counts, per engine, the (marker, place) pairs the leak test
// scanned; the figure goes to docs/reliability.md.
var leakScans = map[infrav1.EngineName]int{}

// stackLeakScans counts the places the stacks scenario scanned for a
// dependency's sensitive output, per engine.
var stackLeakScans = map[infrav1.EngineName]int{}

var _ = ReportAfterSuite("reliability figures", func(r Report) {
	if r.SuiteSucceeded && len(leakScans) == len(engineCases) {
		for _, e := range engineCases {
			checkReliabilityRow(fmt.Sprintf("secret leak scans (4 markers x 6 places), %s", e.name), fmt.Sprintf("%d scanned, 0 leaks", leakScans[e.name]))
		}
	}
	if r.SuiteSucceeded && len(stackLeakScans) == len(engineCases) {
		for _, e := range engineCases {
			checkReliabilityRow(fmt.Sprintf("a dependency's sensitive output in its dependent (1 marker x 7 places), %s", e.name), fmt.Sprintf("%d scanned, 0 leaks", stackLeakScans[e.name]))
		}
	}
})

func outputsJSON() string {
	return `{"id":{"sensitive":false,"type":"string","value":"abc-123"},` +
		`"tags":{"sensitive":false,"type":["map","string"],"value":{"env":"dev"}},` +
		`"password":{"sensitive":true,"type":"string","value":"` + sensitiveMarker + `"}}`
}

// Given/When/Then helpers for one engine.
type given struct{ e engineCase }

func (g given) run(name, ns string) *testutil.RunWrapper {
	w := testutil.MakeRun(name, ns).Engine(g.e.name)
	w.UID = ""
	return w
}

func (g given) childCount(ns string) func() int {
	return func() int { return len(g.e.children(ns)) }
}

// active waits for the run's current child and returns its simulator.
func (g given) active(ns, name string) engineSim { return g.activeWithin(ns, name, timeout) }

// activeWithin is active with its own time limit (the chaos suite's runs
// start through manager crashes and API faults).
func (g given) activeWithin(ns, name string, timeout time.Duration) engineSim {
	var id string
	Eventually(func() string {
		run := getRun(ns, name)
		if run.Status.Run == nil {
			return ""
		}
		id = run.Status.Run.ID
		return id
	}, timeout, interval).ShouldNot(BeEmpty())
	Eventually(func() bool {
		for _, c := range g.e.children(ns) {
			if c.GetName() == id {
				return true
			}
		}
		return false
	}, timeout, interval).Should(BeTrue())
	// The simulator waits as long for what the manager makes next (the Job
	// engine's step Jobs): the chaos suite's manager crashes every few
	// seconds, and on a loaded machine a run may wait through several
	// restarts for its next pass.
	return g.e.kit.NewSim(simEnvWithin(timeout), client.ObjectKey{Namespace: ns, Name: id})
}

// planned creates a run and drives its child to the approval gate.
func (g given) planned(ns string, run *infrav1.TerraformRun, digest string) engineSim {
	Expect(k8sClient.Create(context.Background(), run)).To(Succeed())
	s := g.active(ns, run.Name)
	s.Start()
	s.Plan(1, 0, 0, digest)
	s.Suspend(digest)
	Eventually(phase(ns, run.Name), timeout, interval).Should(Equal(infrav1.RunAwaitingApproval))
	return s
}

// applied creates a run with Auto approval and runs it to Ready.
func (g given) applied(ns, name string, retain bool) {
	w := g.run(name, ns).Auto()
	if retain {
		w = w.Retain()
	}
	Expect(k8sClient.Create(context.Background(), w.Obj())).To(Succeed())
	s := g.active(ns, name)
	s.Start()
	s.Plan(1, 0, 0, digestOf(name))
	s.FinishApply(`{}`)
	Eventually(condReason(ns, name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
}

// destroyApproved runs the destroy child of a run with Manual approval:
// its plan waits at the gate like an apply's, an approver approves it
// (spec.approval.approvedPlan), and it destroys.
func (g given) destroyApproved(d engineSim, ns, name string, within time.Duration) {
	digest := digestOf(d.Key().Name)
	d.Start()
	d.Plan(0, 0, 1, digest)
	d.Suspend(digest)
	Eventually(phase(ns, name), within, interval).Should(Equal(infrav1.RunAwaitingApproval))
	patchRun(ns, name, func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = digest })
	Eventually(gateState(d), within, interval).Should(Equal("Approved"))
	d.FinishDestroy()
}

func gone(ns, name string) func() bool {
	return func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &infrav1.TerraformRun{}))
	}
}

// The conformance suite: every scenario runs for every engine in engineCases.
var _ = Describe("engine conformance", func() {
	for _, e := range engineCases {
		Describe(string(e.name), func() {
			conformance(given{e})
			runIdentity(given{e})
			continuous(given{e})
			approvalPolicy(given{e})
			planRules(given{e})
			pushes(given{e})
			userChecks(given{e})
			stacks(given{e})
		})
	}
})

func conformance(g given) {
	ctx := context.Background()

	It("puts inputs too large to travel in the child in one ConfigMap, which the child mounts", func() {
		ns := newNamespace()
		run := g.run("large", ns).Var("name", `"demo"`).Obj()
		run.Spec.Source.Inline.Files["big.tf"] = infrav1.FileContent("# " + incompressible(40<<10))
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		s := g.active(ns, run.Name)
		cm := &corev1.ConfigMap{}
		Eventually(func() error {
			return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: names.InputsConfigMapName(s.Key().Name)}, cm)
		}, timeout, interval).Should(Succeed())
		Expect(cm.Data[pipeline.VarsKey]).To(MatchJSON(`{"name":"demo"}`))
		Expect(cm.Data).To(HaveKey("big.tf"), "the inline source shares the inputs ConfigMap")
		Expect(metav1.IsControlledBy(cm, s.Object())).To(BeTrue())
		childJSON, err := json.Marshal(s.Object())
		Expect(err).NotTo(HaveOccurred())
		Expect(string(childJSON)).NotTo(ContainSubstring(pipeline.InputsEnv))
		Expect(string(childJSON)).To(ContainSubstring(`"name":"`+cm.Name+`"`), "the child mounts it")
		Expect(s.Validate()).To(Succeed())
	})

	It("plans, waits, is approved through the CR, applies and writes outputs", func() {
		ns := newNamespace()
		digest := digestOf("happy")
		run := g.run("happy", ns).Var("name", `"demo"`).Outputs(map[string]string{"id": "resource_id"}, "tags").Obj()
		s := g.planned(ns, run, digest)

		By("the child is ours and valid for the engine")
		Expect(metav1.IsControlledBy(s.Object(), getRun(ns, run.Name))).To(BeTrue())
		Expect(s.Validate()).To(Succeed())
		By("its small inputs travel in the child: no ConfigMap")
		in := childInputs(s.Object())
		Expect(in.Vars).To(MatchJSON(`{"name":"demo"}`))
		Expect(in.Files).To(HaveKey("main.tf"), "the inline source travels with the vars")
		err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: names.InputsConfigMapName(s.Key().Name)}, &corev1.ConfigMap{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no inputs ConfigMap: %v", err)

		By("status shows the plan and waits for approval")
		got := getRun(ns, run.Name)
		Expect(got.Status.Run.Engine).To(Equal(g.e.name))
		Expect(got.Status.Plan.Digest).To(Equal(digest))
		Expect(got.Status.PlanSummary).To(Equal("+1 ~0 -0"))
		Expect(got.Status.Run.Commit).To(HaveLen(40))
		Expect(condReason(ns, run.Name, infrav1.ApprovedCondition)()).To(Equal("Unknown/AwaitingApproval"))
		Expect(condReason(ns, run.Name, infrav1.ReconcilingCondition)()).To(Equal("True/AwaitingApproval"))
		By("the child is labelled as waiting, for the dashboards' label filters")
		Eventually(approvalLabel(s), timeout, interval).Should(Equal(infrav1.ApprovalLabelWaiting))

		By("approving the current digest passes the gate with that digest")
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = digest })
		Eventually(gateState(s), timeout, interval).Should(Equal("Approved"))
		_, msg, approved := s.Gate()
		Expect(msg).To(ContainSubstring("opr8r"))
		Expect(approved).To(Equal(digest))
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("True/Approved"))
		Expect(getRun(ns, run.Name).Status.Approval.Source).To(Equal(infrav1.ApprovedBySpec))
		Eventually(approvalLabel(s), timeout, interval).Should(Equal(infrav1.ApprovalLabelApproved))

		By("apply and export finish; the outputs Secret gets the values, status only names")
		s.FinishApply(outputsJSON())
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
		for _, st := range got.Status.Run.Steps {
			steps[st.Name] = st.Phase
		}
		Expect(steps).To(Equal(map[string]infrav1.StepPhase{"clone": "Succeeded", "init": "Succeeded", "plan": "Succeeded", "approve": "Succeeded", "apply": "Succeeded", "export-outputs": "Succeeded", "cleanup": "Succeeded"}))

		By("a deleted outputs Secret is restored from the run's outputs")
		Expect(k8sClient.Delete(ctx, sec)).To(Succeed())
		Eventually(func() error {
			return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "happy-outputs"}, &corev1.Secret{})
		}, timeout, interval).Should(Succeed())

		By("an edited outputs Secret is restored too")
		Eventually(func() error {
			sec := &corev1.Secret{}
			if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "happy-outputs"}, sec); err != nil {
				return err
			}
			sec.Data["resource_id"] = []byte("tampered")
			return k8sClient.Update(ctx, sec)
		}, timeout, interval).Should(Succeed())
		Eventually(func() string {
			sec := &corev1.Secret{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "happy-outputs"}, sec)).To(Succeed())
			return string(sec.Data["resource_id"])
		}, timeout, interval).Should(Equal("abc-123"))

		By("an unchanged spec starts no new run")
		Consistently(g.childCount(ns), 2*time.Second, interval).Should(Equal(1))
	})

	It("skips the gate and apply for a plan without changes, and still exports outputs", func() {
		ns := newNamespace()
		run := g.run("nochange", ns).Obj()
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		s := g.active(ns, run.Name)
		s.Start()
		s.Plan(0, 0, 0, digestOf("nochange"))
		s.SkipGate()
		s.FinishApply(`{"id":{"sensitive":false,"type":"string","value":"x"}}`)
		Eventually(condReason(ns, run.Name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
		got := getRun(ns, run.Name)
		Expect(got.Status.Plan.HasChanges).To(BeFalse())
		Expect(cond(got, infrav1.ApprovedCondition)).To(BeNil())
		Expect(condReason(ns, run.Name, infrav1.AppliedCondition)()).To(Equal("True/NoChanges"))
		Expect(got.Status.Outputs).To(Equal([]string{"id"}))
		skipped := map[string]bool{}
		for _, st := range got.Status.Run.Steps {
			skipped[st.Name] = st.Phase == infrav1.StepSkipped
		}
		Expect(skipped).To(And(HaveKeyWithValue("approve", true), HaveKeyWithValue("apply", true)))
	})

	It("refuses an approval for an older plan and says so", func() {
		ns := newNamespace()
		run := g.run("stale", ns).Obj()
		s := g.planned(ns, run, digestOf("new plan"))
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = digestOf("old plan") })
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("False/StaleApproval"))
		Expect(cond(getRun(ns, run.Name), infrav1.ApprovedCondition).Message).To(ContainSubstring(digestOf("new plan")))
		Consistently(gateState(s), 2*time.Second, interval).Should(Equal("Pending"))
	})

	It("rejects through the CR: the gate fails with the reason and the run is Rejected", func() {
		ns := newNamespace()
		digest := digestOf("reject")
		run := g.run("reject", ns).Obj()
		s := g.planned(ns, run, digest)
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) {
			r.Spec.Approval.RejectedPlan = digest
			r.Spec.Approval.RejectReason = "deletes the prod database"
		})
		Eventually(gateState(s), timeout, interval).Should(Equal("Rejected"))
		_, msg, _ := s.Gate()
		Expect(msg).To(ContainSubstring("deletes the prod database"))
		s.CompleteAfterGate()
		Eventually(phase(ns, run.Name), timeout, interval).Should(Equal(infrav1.RunRejected))
		Expect(condReason(ns, run.Name, infrav1.StalledCondition)()).To(Equal("True/Rejected"))
		Expect(condReason(ns, run.Name, infrav1.ReadyCondition)()).To(Equal("False/Rejected"))
		Expect(getRun(ns, run.Name).Status.Approval.Reason).To(Equal("deletes the prod database"))
		Expect(approvalLabel(s)()).To(Equal(infrav1.ApprovalLabelRejected))
	})

	It("rejects a plan whose approval timed out", func() {
		ns := newNamespace()
		run := g.run("timeout", ns).Obj()
		run.Spec.Approval.Timeout = &metav1.Duration{Duration: 2 * time.Second}
		s := g.planned(ns, run, digestOf("timeout"))
		Eventually(gateState(s), timeout, interval).Should(Equal("Rejected"))
		_, msg, _ := s.Gate()
		Expect(msg).To(ContainSubstring("approval timed out after 2s"))
		Eventually(condReason(ns, run.Name, infrav1.ApprovedCondition), timeout, interval).Should(Equal("False/ApprovalTimeout"))
		Expect(approvalLabel(s)()).To(Equal(infrav1.ApprovalLabelTimedOut))
		s.CompleteAfterGate()
		Eventually(condReason(ns, run.Name, infrav1.StalledCondition), timeout, interval).Should(Equal("True/ApprovalTimeout"))
	})

	It("starts a new run on a spec change or a rerun request, and never on an unchanged spec", func() {
		ns := newNamespace()
		run := g.run("rerun", ns).Auto().Var("n", "1").Obj()
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		s := g.active(ns, run.Name)
		s.Start()
		s.Plan(1, 0, 0, digestOf("r1"))
		s.FinishApply(`{}`)
		Eventually(condReason(ns, run.Name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
		Expect(getRun(ns, run.Name).Status.Approval.Source).To(Equal(infrav1.ApprovedAutomatically))
		first := s.Key().Name

		By("changing only the approval timeout starts nothing")
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) { r.Spec.Approval.Timeout = &metav1.Duration{Duration: time.Hour} })
		Consistently(g.childCount(ns), 2*time.Second, interval).Should(Equal(1))

		By("changing a variable starts a new run with a new hash")
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) { r.Spec.Terraform.Vars[0].Value.Raw = []byte("2") })
		Eventually(func() string { return getRun(ns, run.Name).Status.Run.ID }, timeout, interval).ShouldNot(Equal(first))
		second := getRun(ns, run.Name).Status.Run
		Expect(second.Attempt).To(Equal(int32(1)))
		s2 := g.active(ns, run.Name)
		s2.Start()
		s2.Plan(0, 1, 0, digestOf("r2"))
		s2.FinishApply(`{}`)
		Eventually(phase(ns, run.Name), timeout, interval).Should(Equal(infrav1.RunSucceeded))

		By("a rerun request starts attempt 2 of the same hash, echoed to status")
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) {
			r.Annotations = map[string]string{infrav1.RunRequestAnnotation: "2026-11-23T00:00:00Z"}
		})
		Eventually(func() int32 { return getRun(ns, run.Name).Status.Run.Attempt }, timeout, interval).Should(Equal(int32(2)))
		got := getRun(ns, run.Name)
		Expect(got.Status.Run.SpecHash).To(Equal(second.SpecHash))
		Expect(got.Status.LastHandledRunRequest).To(Equal("2026-11-23T00:00:00Z"))
		By("who asked for it (stamped at admission) is among its authors")
		Expect(got.Annotations[infrav1.RunRequestedByAnnotation]).NotTo(BeEmpty())
		Expect(got.Status.Run.Authors).To(ContainElement(got.Annotations[infrav1.RunRequestedByAnnotation]))
		Expect(g.childCount(ns)()).To(Equal(3))
	})

	It("stalls a run that makes no progress, and clears it when the child moves", func() {
		ns := newNamespace()
		run := g.run("stuck-run", ns).Obj()
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		s := g.active(ns, run.Name)
		// The engine never starts the child (its controller is stuck).
		Eventually(condReason(ns, run.Name, infrav1.StalledCondition), timeout, interval).Should(Equal("True/NoProgress"))
		msg := cond(getRun(ns, run.Name), infrav1.StalledCondition).Message
		Expect(msg).To(And(ContainSubstring("has made no progress for over"), MatchRegexp(` since \d{4}-\d\d-\d\dT`), ContainSubstring("(the engine has not started it)"), ContainSubstring("opr8r keeps waiting")))
		s.Start()
		s.Plan(1, 0, 0, digestOf("stuck-run"))
		s.Suspend(digestOf("stuck-run"))
		Eventually(condReason(ns, run.Name, infrav1.StalledCondition), timeout, interval).Should(BeEmpty())
		Eventually(condReason(ns, run.Name, infrav1.ReconcilingCondition), timeout, interval).Should(Equal("True/AwaitingApproval"))
		Consistently(condReason(ns, run.Name, infrav1.StalledCondition), progressTimeout+2*time.Second, interval).Should(BeEmpty(), "waiting for approval is not a lack of progress")
	})

	It("surfaces terraform's error text when a step fails", func() {
		ns := newNamespace()
		run := g.run("fails", ns).Obj()
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		s := g.active(ns, run.Name)
		s.Start()
		s.Fail("plan", `Error: Invalid value for variable: name must be lowercase.`)
		Eventually(condReason(ns, run.Name, infrav1.StalledCondition), timeout, interval).Should(Equal("True/RunFailed"))
		got := getRun(ns, run.Name)
		Expect(cond(got, infrav1.ReadyCondition).Message).To(ContainSubstring("Invalid value for variable: name must be lowercase."))
		Expect(got.Status.Run.Message).To(ContainSubstring("step plan failed"))
		Expect(condReason(ns, run.Name, infrav1.PlannedCondition)()).To(Equal("False/RunFailed"))
	})

	Context("deletion", func() {
		It("runs a destroy child on delete and removes the finalizer when it succeeds", func() {
			ns := newNamespace()
			g.applied(ns, "gone", false)
			Expect(k8sClient.Delete(ctx, getRun(ns, "gone"))).To(Succeed())
			Eventually(func() infrav1.RunType { return getRun(ns, "gone").Status.Run.Type }, timeout, interval).Should(Equal(infrav1.RunDestroy))
			d := g.active(ns, "gone")
			Expect(d.Object().GetLabels()).To(HaveKeyWithValue(infrav1.RunTypeLabel, "destroy"))
			Expect(d.Validate()).To(Succeed())
			d.SucceedDestroy()
			Eventually(gone(ns, "gone"), timeout, interval).Should(BeTrue())
		})

		It("gates the destroy of a Manual run like an apply: it waits for approval, without a destroy timeout, and destroys once approved", func() {
			ns := newNamespace()
			digest := digestOf("keep-1")
			s := g.planned(ns, g.run("keep", ns).Obj(), digest)
			patchRun(ns, "keep", func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = digest })
			Eventually(gateState(s), timeout, interval).Should(Equal("Approved"))
			s.FinishApply(`{}`)
			Eventually(condReason(ns, "keep", infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))

			Expect(k8sClient.Delete(ctx, getRun(ns, "keep"))).To(Succeed())
			Eventually(func() infrav1.RunType { return getRun(ns, "keep").Status.Run.Type }, timeout, interval).Should(Equal(infrav1.RunDestroy))
			d := g.active(ns, "keep")
			Expect(getRun(ns, "keep").Status.Run.ApprovalMode).To(Equal(infrav1.ApprovalManual))
			ddigest := digestOf(d.Key().Name)
			d.Start()
			d.Plan(0, 0, 1, ddigest)
			d.Suspend(ddigest)
			Eventually(phase(ns, "keep"), timeout, interval).Should(Equal(infrav1.RunAwaitingApproval))
			Eventually(func() string { return cond(getRun(ns, "keep"), infrav1.ReconcilingCondition).Message }, timeout, interval).Should(
				ContainSubstring("waits for approval of its plan"))
			Consistently(gone(ns, "keep"), 2*time.Second, interval).Should(BeFalse(), "a destroy nobody approved never runs")
			Expect(gateState(d)()).To(Equal("Pending"))

			patchRun(ns, "keep", func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = ddigest })
			Eventually(gateState(d), timeout, interval).Should(Equal("Approved"))
			// The gate is passed before the pass's status write records the
			// approval (a focused envtest run on 2026-12-07 read a nil
			// status.approval between the two).
			Eventually(func() string {
				if a := getRun(ns, "keep").Status.Approval; a != nil {
					return a.Digest
				}
				return ""
			}, timeout, interval).Should(Equal(ddigest))
			d.FinishDestroy()
			Eventually(gone(ns, "keep"), timeout, interval).Should(BeTrue())
		})

		It("stalls a failing destroy with the escape hatch, which then works", func() {
			ns := newNamespace()
			g.applied(ns, "stuck", false)
			Expect(k8sClient.Delete(ctx, getRun(ns, "stuck"))).To(Succeed())
			Eventually(func() infrav1.RunType { return getRun(ns, "stuck").Status.Run.Type }, timeout, interval).Should(Equal(infrav1.RunDestroy))
			d := g.active(ns, "stuck")
			d.Start()
			d.Fail("plan", "Error: error acquiring the state lock")
			Eventually(condReason(ns, "stuck", infrav1.StalledCondition), timeout, interval).Should(Equal("True/DestroyFailed"))
			Expect(cond(getRun(ns, "stuck"), infrav1.StalledCondition).Message).To(ContainSubstring(infrav1.SkipDestroyAnnotation))
			patchRun(ns, "stuck", func(r *infrav1.TerraformRun) {
				r.Annotations = map[string]string{infrav1.SkipDestroyAnnotation: "true"}
			})
			Eventually(gone(ns, "stuck"), timeout, interval).Should(BeTrue())
		})

		It("skips the destroy with deletionPolicy Retain", func() {
			ns := newNamespace()
			g.applied(ns, "kept", true)
			Expect(k8sClient.Delete(ctx, getRun(ns, "kept"))).To(Succeed())
			Eventually(gone(ns, "kept"), timeout, interval).Should(BeTrue())
			for _, c := range g.e.children(ns) {
				Expect(c.GetLabels()[infrav1.RunTypeLabel]).NotTo(Equal("destroy"))
			}
		})
	})

	Context("faults", func() {
		It("creates no duplicate child when the manager restarts after creating it but before recording it", func() {
			ns := newNamespace()
			run := g.run("restart", ns).Obj()
			Expect(k8sClient.Create(ctx, run)).To(Succeed())
			s := g.active(ns, run.Name)
			stopManager()
			// The status write that recorded the child is lost.
			got := getRun(ns, run.Name)
			got.Status = infrav1.TerraformRunStatus{}
			Expect(k8sClient.Status().Update(ctx, got)).To(Succeed())
			startManager()
			Eventually(func() *infrav1.RunStatus { return getRun(ns, run.Name).Status.Run }, timeout, interval).ShouldNot(BeNil())
			Expect(getRun(ns, run.Name).Status.Run.ID).To(Equal(s.Key().Name))
			Consistently(g.childCount(ns), 2*time.Second, interval).Should(Equal(1))
			s.Start()
			s.Plan(1, 0, 0, digestOf("restart"))
			s.Suspend(digestOf("restart"))
			Eventually(phase(ns, run.Name), timeout, interval).Should(Equal(infrav1.RunAwaitingApproval))
		})

		It("records a child deleted by hand and starts nothing by itself", func() {
			ns := newNamespace()
			run := g.run("handdel", ns).Obj()
			Expect(k8sClient.Create(ctx, run)).To(Succeed())
			s := g.active(ns, run.Name)
			s.Start()
			Expect(k8sClient.Delete(ctx, s.Object())).To(Succeed())
			Eventually(condReason(ns, run.Name, infrav1.StalledCondition), timeout, interval).Should(Equal("True/ChildDeleted"))
			Expect(getRun(ns, run.Name).Status.Run.Phase).To(Equal(infrav1.RunFailed))
			Consistently(g.childCount(ns), 2*time.Second, interval).Should(Equal(0))
		})

		It("supersedes a plan waiting for approval when the spec changes", func() {
			ns := newNamespace()
			run := g.run("supersede", ns).Var("v", "1").Obj()
			s := g.planned(ns, run, digestOf("s1"))
			patchRun(ns, run.Name, func(r *infrav1.TerraformRun) { r.Spec.Terraform.Vars[0].Value.Raw = []byte("2") })
			Eventually(s.CancelRequested, timeout, interval).Should(BeTrue())
			Expect(g.childCount(ns)()).To(Equal(1), "no second child while the first is active")
			Expect(approvalLabel(s)()).To(Equal(infrav1.ApprovalLabelSuperseded))
			s.CompleteAfterGate()
			Eventually(g.childCount(ns), timeout, interval).Should(Equal(2))

			By("the stopped run is recorded as stopped, not as a rejection (the engines fail a waiting gate when they stop a run)")
			var rec *infrav1.RunRecord
			Eventually(func() *infrav1.RunRecord {
				rec = recordOf(ns, run.Name, s.Key().Name)
				return rec
			}, timeout, interval).ShouldNot(BeNil())
			Expect(rec.Result).To(Equal(infrav1.RunFailed))
			Expect(rec.Message).To(Equal("stopped: superseded by a spec change"))
			Expect(rec.Approval == nil || !rec.Approval.Approved && rec.Approval.Source != infrav1.ApprovedByEngine).To(BeTrue(), "approval recorded as %+v", rec.Approval)
			Expect(approvalLabel(s)()).To(Equal(infrav1.ApprovalLabelSuperseded), "the stopped child stays superseded on the dashboards")
		})
	})

	It("keeps secrets out of the child, its steps, status, events and logs", func() {
		ns := newNamespace()
		const tokenMarker = "GITT0KEN-MARKER-91c2"
		const cloudMarker = "CL0UD-CREDENTIAL-MARKER-5d1e"
		const varMarker = "SENSITIVE-VAR-MARKER-0b7a"
		for name, data := range map[string]map[string]string{
			"git-creds": {"token": tokenMarker},
			"aws":       {"secret-key": cloudMarker},
			"gcp":       {"key.json": `{"private_key":"` + cloudMarker + `"}`},
			"db-vars":   {"db_password": varMarker},
		} {
			Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: data})).To(Succeed())
		}
		w := g.run("leak", ns).Git("https://git.example.com/x.git", "main", "", "git-creds").
			EnvFromSecret("AWS_SECRET_ACCESS_KEY", "aws", "secret-key").VarsFrom("Secret", "db-vars")
		w.Spec.Terraform.Files = []infrav1.SecretFile{{SecretName: "gcp", MountPath: "/creds/gcp", EnvName: "GOOGLE_APPLICATION_CREDENTIALS", Key: "key.json"}}
		run := w.Obj()
		digest := digestOf("leak")
		s := g.planned(ns, run, digest)
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = digest })
		Eventually(gateState(s), timeout, interval).Should(Equal("Approved"))
		s.FinishApply(outputsJSON())
		Eventually(condReason(ns, run.Name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))

		sec := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "leak-outputs"}, sec)).To(Succeed())
		Expect(string(sec.Data["password"])).To(Equal(sensitiveMarker), "the marker must reach the outputs Secret, or the scan proves nothing")

		childJSON, _ := json.Marshal(s.Object())
		Expect(string(childJSON)).To(ContainSubstring("AWS_SECRET_ACCESS_KEY"), "the child references the credential by name, so the scan looks where a leak would be")
		statusJSON, _ := json.Marshal(getRun(ns, run.Name).Status)
		events, err := clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(events.Items).NotTo(BeEmpty())
		eventsJSON, _ := json.Marshal(events.Items)
		// The objects every engine makes for a child's steps (each kit
		// lists its own).
		var stepObjects []byte
		for _, l := range allStepObjects() {
			Expect(k8sClient.List(ctx, l, client.InNamespace(ns))).To(Succeed())
			b, _ := json.Marshal(l)
			stepObjects = append(stepObjects, b...)
		}
		cms := &corev1.ConfigMapList{}
		Expect(k8sClient.List(ctx, cms, client.InNamespace(ns))).To(Succeed())
		cmJSON, _ := json.Marshal(cms)
		scanned := map[string]string{"child (spec, args, env)": string(childJSON), "step objects": string(stepObjects), "input ConfigMaps": string(cmJSON),
			"status": string(statusJSON), "events": string(eventsJSON), "manager log": mgrLogs.String()}
		leaks := 0
		for _, marker := range []string{tokenMarker, cloudMarker, varMarker, sensitiveMarker} {
			for where, text := range scanned {
				if strings.Contains(text, marker) {
					leaks++
					AddReportEntry(fmt.Sprintf("leak: %s in %s", marker, where))
				}
			}
		}
		Expect(leaks).To(Equal(0))
		leakScans[g.e.name] = len(scanned) * 4
	})
}
