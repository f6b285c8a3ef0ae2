package integration

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/manager"
	"github.com/opr8r/opr8r/pkg/results"
)

// checkEvery is the interval of the scheduled checks in these scenarios.
const checkEvery = 2 * time.Second

// checkChild waits for the run's next scheduled check child (one not in
// seen) and returns its simulator.
func (g given) checkChild(ns, name string, seen map[string]bool) engineSim {
	var key client.ObjectKey
	Eventually(func() bool {
		for _, c := range g.e.children(ns) {
			if c.GetLabels()[infrav1.RunTypeLabel] == string(infrav1.RunDrift) && c.GetLabels()[infrav1.RunNameLabel] == name && !seen[c.GetName()] {
				key = client.ObjectKeyFromObject(c)
				return true
			}
		}
		return false
	}, timeout, interval).Should(BeTrue(), "a scheduled check of %s starts", name)
	seen[key.Name] = true
	return g.e.sim(key)
}

// appliedWithChecks creates a run with scheduled checks and runs its first
// apply to Ready (approving it when the approval mode is Manual).
func (g given) appliedWithChecks(ns, name string, change func(*infrav1.TerraformRun)) {
	w := g.run(name, ns).Auto()
	w.Spec.Interval = &metav1.Duration{Duration: checkEvery}
	if change != nil {
		change(w.Obj())
	}
	Expect(k8sClient.Create(context.Background(), w.Obj())).To(Succeed())
	s := g.active(ns, name)
	digest := digestOf(name)
	s.Start()
	s.Plan(1, 0, 0, digest)
	if w.Spec.Approval.Mode == infrav1.ApprovalManual {
		s.Suspend(digest)
		Eventually(phase(ns, name), timeout, interval).Should(Equal(infrav1.RunAwaitingApproval))
		patchRun(ns, name, func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = digest })
		Eventually(func() string { st, _, _ := s.Gate(); return st }, timeout, interval).Should(Equal("Approved"))
	}
	s.FinishApply(`{}`)
	Eventually(condReason(ns, name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
}

// lastCheck waits until status records the check and returns the record.
func lastCheck(ns, name, id string) infrav1.RunRecord {
	var rec infrav1.RunRecord
	Eventually(func() string {
		run := getRun(ns, name)
		if run.Status.Drift == nil || run.Status.Drift.LastCheckID != id || len(run.Status.History) == 0 {
			return ""
		}
		for _, h := range run.Status.History {
			if h.ID == id {
				rec = h
			}
		}
		return run.Status.Drift.Result
	}, timeout, interval).ShouldNot(BeEmpty(), "check %s is recorded", id)
	return rec
}

func applyRuns(g given, ns string) int {
	n := 0
	for _, c := range g.e.children(ns) {
		if c.GetLabels()[infrav1.RunTypeLabel] == string(infrav1.RunApply) {
			n++
		}
	}
	return n
}

// continuous is the conformance suite's part on scheduled checks, drift and
// plan-only runs.
func continuous(g given) {
	ctx := context.Background()

	It("records a check that finds no drift, and applies nothing", func() {
		ns := newNamespace()
		g.appliedWithChecks(ns, "nodrift", nil)
		seen := map[string]bool{}
		c := g.checkChild(ns, "nodrift", seen)
		Expect(c.Validate()).To(Succeed())
		c.Start()
		c.Plan(0, 0, 0, digestOf("nodrift-check"))
		c.Complete()
		rec := lastCheck(ns, "nodrift", c.Key().Name)
		Expect(rec.Type).To(Equal(infrav1.RunDrift))
		Expect(rec.Trigger).To(Equal(infrav1.TriggerSchedule))
		Expect(rec.Result).To(Equal(infrav1.RunSucceeded))
		Expect(rec.Message).To(HavePrefix("NoDrift"))
		got := getRun(ns, "nodrift")
		Expect(got.Status.Drift.Result).To(Equal(infrav1.CheckNoDrift))
		Expect(condReason(ns, "nodrift", infrav1.DriftedCondition)()).To(Equal("False/NoDrift"))
		Expect(condReason(ns, "nodrift", infrav1.ReadyCondition)()).To(Equal("True/Succeeded"))
		Expect(got.Status.Run.ID).NotTo(Equal(c.Key().Name), "a check is not status.run")
		Expect(applyRuns(g, ns)).To(Equal(1))

		By("the next check follows the interval")
		c2 := g.checkChild(ns, "nodrift", seen)
		Expect(c2.Key().Name).NotTo(Equal(c.Key().Name))
	})

	It("reports drift: Drifted, Ready False, a Warning event; with Report no apply starts", func() {
		ns := newNamespace()
		g.appliedWithChecks(ns, "drift", nil)
		c := g.checkChild(ns, "drift", map[string]bool{})
		c.Start()
		c.Plan(0, 1, 0, digestOf("drift-check"))
		c.Complete()
		lastCheck(ns, "drift", c.Key().Name)
		Eventually(condReason(ns, "drift", infrav1.DriftedCondition), timeout, interval).Should(Equal("True/DriftDetected"))
		got := getRun(ns, "drift")
		Expect(condReason(ns, "drift", infrav1.ReadyCondition)()).To(Equal("False/DriftDetected"))
		Expect(cond(got, infrav1.DriftedCondition).Message).To(And(ContainSubstring("+0 ~1 -0"), ContainSubstring(digestOf("drift-check")), ContainSubstring("kubectl tfrun rerun drift")))
		Expect(got.Status.Drift.Plan.Digest).To(Equal(digestOf("drift-check")))
		evs, err := clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=drift,reason=DriftDetected"})
		Expect(err).NotTo(HaveOccurred())
		Expect(evs.Items).NotTo(BeEmpty())
		Expect(evs.Items[0].Type).To(Equal("Warning"))
		Consistently(func() int { return applyRuns(g, ns) }, 2*time.Second, interval).Should(Equal(1))
	})

	It("repairs drift through the approval gate (driftRemediation Apply, Manual approval)", func() {
		ns := newNamespace()
		g.appliedWithChecks(ns, "repair", func(r *infrav1.TerraformRun) {
			r.Spec.Approval.Mode = infrav1.ApprovalManual
			r.Spec.DriftRemediation = infrav1.DriftApply
		})
		Expect(getRun(ns, "repair").Status.Run.ID).To(Equal("repair-1"))
		c := g.checkChild(ns, "repair", map[string]bool{})
		c.Start()
		c.Plan(0, 1, 0, digestOf("repair-check"))
		c.Complete()
		s := g.nextRun(ns, "repair", "repair-1")
		Expect(getRun(ns, "repair").Status.Run.Trigger).To(Equal(infrav1.TriggerDrift))
		digest := digestOf("repair-plan")
		s.Start()
		s.Plan(0, 1, 0, digest)
		s.Suspend(digest)
		Eventually(phase(ns, "repair"), timeout, interval).Should(Equal(infrav1.RunAwaitingApproval))
		Consistently(func() string { st, _, _ := s.Gate(); return st }, time.Second, interval).Should(Equal("Pending"), "Manual approval still waits for a person")
		patchRun(ns, "repair", func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = digest })
		Eventually(func() string { st, _, _ := s.Gate(); return st }, timeout, interval).Should(Equal("Approved"))
		s.FinishApply(`{}`)
		Eventually(condReason(ns, "repair", infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
		Expect(condReason(ns, "repair", infrav1.DriftedCondition)()).To(Equal("False/NoDrift"))
	})

	It("repairs drift at once with Auto approval", func() {
		ns := newNamespace()
		g.appliedWithChecks(ns, "autofix", func(r *infrav1.TerraformRun) { r.Spec.DriftRemediation = infrav1.DriftApply })
		c := g.checkChild(ns, "autofix", map[string]bool{})
		c.Start()
		c.Plan(0, 1, 0, digestOf("autofix-check"))
		c.Complete()
		s := g.nextRun(ns, "autofix", "autofix-1")
		Expect(getRun(ns, "autofix").Status.Run.Trigger).To(Equal(infrav1.TriggerDrift))
		completeAuto(ns, "autofix", s, digestOf("autofix-plan"))
		Expect(condReason(ns, "autofix", infrav1.DriftedCondition)()).To(Equal("False/NoDrift"))
	})

	It("starts an apply run when the source moved, and records the new revision", func() {
		ns := newNamespace()
		g.appliedWithChecks(ns, "moved", nil)
		c := g.checkChild(ns, "moved", map[string]bool{})
		const newCommit = "fedcba9876543210fedcba9876543210fedcba98"
		c.StartAt(newCommit)
		c.Plan(0, 1, 0, digestOf("moved-check"))
		c.Complete()
		s := g.nextRun(ns, "moved", "moved-1")
		run := getRun(ns, "moved")
		Expect(run.Status.Run.Trigger).To(Equal(infrav1.TriggerSourceChange))
		Expect(run.Status.Drift.Result).To(Equal(infrav1.CheckSourceChanged))
		s.StartAt(newCommit)
		s.Plan(0, 1, 0, digestOf("moved-plan"))
		s.FinishApply(`{}`)
		Eventually(func() string {
			r := getRun(ns, "moved")
			if r.Status.LastApplied == nil {
				return ""
			}
			return r.Status.LastApplied.Revision
		}, timeout, interval).Should(Equal(newCommit))
		Expect(getRun(ns, "moved").Status.History[0].Revision).To(Equal(newCommit))
	})

	It("starts an apply run when an OCI source's tag moved to another digest", func() {
		ns := newNamespace()
		first, moved := "sha256:"+strings.Repeat("1", 64), "sha256:"+strings.Repeat("2", 64)
		w := g.run("ocitag", ns).Auto().OCI("oci://registry.example.com/modules/net", "stable", "", "")
		w.Spec.Interval = &metav1.Duration{Duration: checkEvery}
		Expect(k8sClient.Create(context.Background(), w.Obj())).To(Succeed())
		s := g.active(ns, "ocitag")
		Expect(s.Validate()).To(Succeed())
		child, err := json.Marshal(s.Object())
		Expect(err).NotTo(HaveOccurred())
		Expect(string(child)).To(And(ContainSubstring("--source=oci"), ContainSubstring("--url=oci://registry.example.com/modules/net"), ContainSubstring("--ref=stable")))
		s.StartAt(first)
		s.Plan(1, 0, 0, digestOf("ocitag"))
		s.FinishApply(`{}`)
		Eventually(condReason(ns, "ocitag", infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
		Expect(getRun(ns, "ocitag").Status.LastApplied.Revision).To(Equal(first))

		By("a check that resolves the tag to the same digest finds nothing")
		seen := map[string]bool{}
		c := g.checkChild(ns, "ocitag", seen)
		c.StartAt(first)
		c.Plan(0, 0, 0, digestOf("ocitag-check"))
		c.Complete()
		Expect(lastCheck(ns, "ocitag", c.Key().Name).Revision).To(Equal(first))
		Expect(getRun(ns, "ocitag").Status.Drift.Result).To(Equal(infrav1.CheckNoDrift))

		By("a check that resolves the tag to a new digest starts an apply run")
		c2 := g.checkChild(ns, "ocitag", seen)
		c2.StartAt(moved)
		c2.Plan(0, 1, 0, digestOf("ocitag-check-2"))
		c2.Complete()
		s2 := g.nextRun(ns, "ocitag", "ocitag-1")
		run := getRun(ns, "ocitag")
		Expect(run.Status.Run.Trigger).To(Equal(infrav1.TriggerSourceChange))
		Expect(run.Status.Drift.Result).To(Equal(infrav1.CheckSourceChanged))
		Expect(run.Status.Drift.Revision).To(Equal(moved))
		s2.StartAt(moved)
		s2.Plan(0, 1, 0, digestOf("ocitag-plan"))
		s2.FinishApply(`{}`)
		Eventually(func() string {
			r := getRun(ns, "ocitag")
			if r.Status.LastApplied == nil {
				return ""
			}
			return r.Status.LastApplied.Revision
		}, timeout, interval).Should(Equal(moved))
	})

	It("starts an apply run when only the inputs changed (a varsFrom value)", func() {
		ns := newNamespace()
		g.appliedWithChecks(ns, "inputs", nil)
		c := g.checkChild(ns, "inputs", map[string]bool{})
		c.Start()
		c.PlanResult(results.Plan{HasChanges: true, Change: 1, Digest: digestOf("inputs-check"), Inputs: "sha256:changed"})
		c.Complete()
		g.nextRun(ns, "inputs", "inputs-1")
		Expect(getRun(ns, "inputs").Status.Run.Trigger).To(Equal(infrav1.TriggerSourceChange))
	})

	It("supersedes a check that runs while the spec changes", func() {
		ns := newNamespace()
		g.appliedWithChecks(ns, "busy", func(r *infrav1.TerraformRun) { r.Spec.Terraform.Vars = nil })
		c := g.checkChild(ns, "busy", map[string]bool{})
		c.Start()
		patchRun(ns, "busy", func(r *infrav1.TerraformRun) { r.Spec.Terraform.Workspace = "other" })
		Eventually(c.CancelRequested, timeout, interval).Should(BeTrue(), "the check is stopped")
		c.CompleteAfterGate()
		s := g.nextRun(ns, "busy", "busy-1")
		Expect(s.Key().Name).NotTo(Equal(c.Key().Name))
		rec := lastCheck(ns, "busy", c.Key().Name)
		Expect(rec.Message).To(HavePrefix(infrav1.CheckSuperseded))
		Expect(getRun(ns, "busy").Status.Run.Trigger).To(Equal(infrav1.TriggerSpecChange))
	})

	It("runs a planOnly TerraformRun up to its plan: no gate, no apply, no destroy", func() {
		ns := newNamespace()
		run := g.run("preview", ns).Obj()
		run.Spec.PlanOnly = true
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		s := g.active(ns, "preview")
		Expect(s.Object().GetLabels()).To(HaveKeyWithValue(infrav1.RunTypeLabel, string(infrav1.RunPlan)))
		Expect(s.Validate()).To(Succeed())
		s.Start()
		s.Plan(2, 0, 0, digestOf("preview"))
		s.Complete()
		Eventually(condReason(ns, "preview", infrav1.ReadyCondition), timeout, interval).Should(Equal("True/PlannedOnly"))
		got := getRun(ns, "preview")
		Expect(got.Status.Plan.Summary).To(Equal("+2 ~0 -0"))
		Expect(got.Status.Approval).To(BeNil())
		for _, st := range got.Status.Run.Steps {
			Expect(st.Name).NotTo(BeElementOf("approve", "apply", "export-outputs"))
		}
		Expect(k8sClient.Delete(ctx, got)).To(Succeed())
		Eventually(gone(ns, "preview"), timeout, interval).Should(BeTrue())
		for _, c := range g.e.children(ns) {
			Expect(c.GetLabels()[infrav1.RunTypeLabel]).NotTo(Equal("destroy"))
		}
	})
}

// The cap on active runs, and its order: runs people asked for before
// scheduled checks.
var _ = Describe("max active runs", Serial, func() {
	It("caps active children, queues the rest with their position, and serves runs before checks", func() {
		// A manager of one namespace: the cap counts its runs only, not the
		// other scenarios' (which may still wait at their gates).
		ns := newNamespace()
		stopManager()
		DeferCleanup(func() { stopManager(); startManager() })
		startManagerIn([]string{ns}, func(o *manager.Options) { o.MaxActiveRuns = 1 })
		g := given{engineCases[0]}

		By("a run with checks, applied")
		g.appliedWithChecks(ns, "checked", nil)
		seen := map[string]bool{}
		check := g.checkChild(ns, "checked", seen)

		By("while the check holds the only slot, a new run waits, Queued, position 1")
		Expect(k8sClient.Create(context.Background(), g.run("waiter", ns).Auto().Obj())).To(Succeed())
		Eventually(condReason(ns, "waiter", infrav1.ReconcilingCondition), timeout, interval).Should(Equal("True/Queued"))
		Expect(cond(getRun(ns, "waiter"), infrav1.ReconcilingCondition).Message).To(ContainSubstring("position 1 of 1"))
		Expect(getRun(ns, "waiter").Status.Run).To(BeNil())

		By("the check ends: the run takes the slot, and the next check waits for it")
		check.Start()
		check.Plan(0, 0, 0, digestOf("c1"))
		check.Complete()
		w := g.active(ns, "waiter")
		time.Sleep(2 * checkEvery) // the next check is due, and must wait
		for _, c := range g.e.children(ns) {
			if c.GetLabels()[infrav1.RunTypeLabel] == string(infrav1.RunDrift) && !seen[c.GetName()] {
				Fail("a check started while the run held the only slot: " + c.GetName())
			}
		}
		w.Start()
		w.Plan(1, 0, 0, digestOf("w"))
		w.FinishApply(`{}`)
		Eventually(condReason(ns, "waiter", infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
		next := g.checkChild(ns, "checked", seen)
		Expect(next.Key().Name).NotTo(Equal(check.Key().Name))
	})
})
