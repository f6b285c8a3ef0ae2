package integration

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// runID returns the id of the run's current run.
func runID(ns, name string) func() string {
	return func() string {
		run := getRun(ns, name)
		if run.Status.Run == nil {
			return ""
		}
		return run.Status.Run.ID
	}
}

// nextRun waits for a run other than prev and returns its simulator.
func (g given) nextRun(ns, name, prev string) engineSim {
	Eventually(runID(ns, name), timeout, interval).ShouldNot(Equal(prev))
	return g.active(ns, name)
}

// completeAuto runs an Auto-approval run's child to Ready.
func completeAuto(ns, name string, s engineSim, digest string) {
	s.Start()
	s.Plan(0, 1, 0, digest)
	s.FinishApply(`{}`)
	Eventually(func() infrav1.RunPhase {
		run := getRun(ns, name)
		if run.Status.Run == nil || run.Status.Run.ID != s.Key().Name {
			return ""
		}
		return run.Status.Run.Phase
	}, timeout, interval).Should(Equal(infrav1.RunSucceeded))
}

func triggers(h []infrav1.RunRecord) []infrav1.RunTrigger {
	var out []infrav1.RunTrigger
	for _, r := range h {
		out = append(out, r.Trigger)
	}
	return out
}

// runIdentity is the conformance suite's part on run identity and history:
// a new run never meets an old run's child, every run is recorded before
// its child can go, and deletion destroys what may exist.
func runIdentity(g given) {
	ctx := context.Background()

	It("gives every new run a child name it never used: a reverted spec (A, B, A) and a revert after a rerun plan again", func() {
		ns := newNamespace()
		run := g.run("revert", ns).Auto().Var("v", `"A"`).Obj()
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		seen := map[string]bool{}
		step := func(digest string, change func(r *infrav1.TerraformRun)) {
			// The first run is whichever the manager starts: its id read
			// after it started would make nextRun wait for another.
			prev := ""
			if change != nil {
				prev = runID(ns, run.Name)()
				patchRun(ns, run.Name, change)
			}
			s := g.nextRun(ns, run.Name, prev)
			Expect(seen).NotTo(HaveKey(s.Key().Name), "run %s reuses a child name", s.Key().Name)
			seen[s.Key().Name] = true
			completeAuto(ns, run.Name, s, digestOf(digest))
		}
		setVar := func(v string) func(r *infrav1.TerraformRun) {
			return func(r *infrav1.TerraformRun) { r.Spec.Terraform.Vars[0].Value.Raw = []byte(v) }
		}
		step("A1", nil)
		step("B", setVar(`"B"`))
		step("A2", setVar(`"A"`)) // the revert: a new plan, not the first run's child
		step("A3", func(r *infrav1.TerraformRun) {
			r.Annotations = map[string]string{infrav1.RunRequestAnnotation: "again"}
		})
		step("B2", setVar(`"B"`)) // a revert after a rerun
		got := getRun(ns, run.Name)
		Expect(got.Status.Run.Number).To(Equal(int64(5)))
		Expect(got.Status.LastRunNumber).To(Equal(int64(5)))
		Expect(triggers(got.Status.History)).To(Equal([]infrav1.RunTrigger{
			infrav1.TriggerSpecChange, infrav1.TriggerRerunRequest, infrav1.TriggerSpecChange, infrav1.TriggerSpecChange, infrav1.TriggerCreated}))
		Expect(got.Status.History[0].Plan.Digest).To(Equal(digestOf("B2")))
		Expect(got.Status.History[1].TriggerDetail).To(Equal("again"))
		Expect(cond(got, infrav1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
	})

	It("never adopts the children of a deleted TerraformRun of the same name (Retain, created again)", func() {
		ns := newNamespace()
		g.applied(ns, "again", true)
		old := getRun(ns, "again")
		oldChild := old.Status.Run.ID
		Expect(k8sClient.Delete(ctx, old)).To(Succeed())
		Eventually(gone(ns, "again"), timeout, interval).Should(BeTrue())
		// No garbage collector runs here: the old children stay, as they
		// may for a while on a real cluster.
		Expect(k8sClient.Create(ctx, g.run("again", ns).Auto().Obj())).To(Succeed())
		s := g.nextRun(ns, "again", "")
		Expect(s.Key().Name).NotTo(Equal(oldChild))
		fresh := getRun(ns, "again")
		Expect(metav1.IsControlledBy(s.Object(), fresh)).To(BeTrue())
		completeAuto(ns, "again", s, digestOf("again-2"))
		Expect(getRun(ns, "again").Status.History).To(HaveLen(1))
		Expect(getRun(ns, "again").Status.History[0].ID).To(Equal(s.Key().Name))
	})

	It("records every run in status.history before pruning its child, and keeps the history across a manager restart", func() {
		ns := newNamespace()
		run := g.run("hist", ns).Auto().Obj()
		run.Spec.History.KeepFinished = ptr.To[int32](1)
		run.Spec.History.KeepRecords = ptr.To[int32](2)
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		var ids []string
		for i, d := range []string{"h1", "h2", "h3"} {
			prev := "" // the first run is whichever the manager starts (see step above)
			if i > 0 {
				prev = runID(ns, run.Name)()
				patchRun(ns, run.Name, func(r *infrav1.TerraformRun) {
					r.Annotations = map[string]string{infrav1.RunRequestAnnotation: d}
				})
			}
			s := g.nextRun(ns, run.Name, prev)
			ids = append(ids, s.Key().Name)
			completeAuto(ns, run.Name, s, digestOf(d))
		}
		Eventually(g.childCount(ns), timeout, interval).Should(Equal(1), "keepFinished 1: only the latest run's child stays")
		Expect(g.e.children(ns)[0].GetName()).To(Equal(ids[2]))
		h := getRun(ns, run.Name).Status.History
		Expect(h).To(HaveLen(2), "keepRecords 2")
		Expect([]string{h[0].ID, h[1].ID}).To(Equal([]string{ids[2], ids[1]}))
		rec := h[0]
		Expect(rec.Number).To(Equal(int64(3)))
		Expect(rec.Type).To(Equal(infrav1.RunApply))
		Expect(rec.Engine).To(Equal(g.e.name))
		Expect(rec.Trigger).To(Equal(infrav1.TriggerRerunRequest))
		Expect(rec.TriggerDetail).To(Equal("h3"))
		Expect(rec.Revision).To(HaveLen(40))
		Expect(rec.Plan).NotTo(BeNil())
		Expect(rec.Plan.Digest).To(Equal(digestOf("h3")))
		Expect(rec.Plan.Summary).To(Equal("+0 ~1 -0"))
		Expect(rec.Approval).NotTo(BeNil())
		Expect(rec.Approval.Source).To(Equal(infrav1.ApprovedAutomatically))
		Expect(rec.Result).To(Equal(infrav1.RunSucceeded))
		Expect(rec.StartedAt).NotTo(BeNil())
		Expect(rec.FinishedAt).NotTo(BeNil())

		By("a manager restart changes nothing")
		stopManager()
		startManager()
		Consistently(func() []infrav1.RunRecord { return getRun(ns, run.Name).Status.History }, 2*time.Second, interval).Should(Equal(h))
	})

	It("labels a finished child and its step objects recorded once status records its run, and not before", func() {
		ns := newNamespace()
		run := g.run("rec", ns).Auto().Retain().Obj()
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		s := g.active(ns, run.Name)
		s.Start()
		s.Plan(1, 0, 0, digestOf("rec"))
		recorded := func(o client.Object) func() string {
			return func() string {
				obj := o.DeepCopyObject().(client.Object)
				if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(o), obj); err != nil {
					return err.Error()
				}
				return obj.GetLabels()[infrav1.SettledLabel]
			}
		}
		Consistently(recorded(s.Object()), time.Second, interval).Should(BeEmpty(), "an active child stays cached whole")
		s.FinishApply(`{}`)
		Eventually(condReason(ns, run.Name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
		Eventually(recorded(s.Object()), timeout, interval).Should(Equal("true"))
		if rl, ok := g.e.kit.Engine.(engine.RelatedLister); ok {
			related, err := rl.Related(ctx, k8sClient, s.Object())
			Expect(err).NotTo(HaveOccurred())
			Expect(related).NotTo(BeEmpty())
			for _, o := range related {
				Expect(recorded(o)()).To(Equal("true"), "%T %s", o, o.GetName())
			}
		}

		By("a rerun starts under the next number, and the recorded child is kept (keepFinished)")
		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) {
			r.Annotations = map[string]string{infrav1.RunRequestAnnotation: "again"}
		})
		next := g.nextRun(ns, run.Name, s.Key().Name)
		Expect(getRun(ns, run.Name).Status.Run.Number).To(Equal(int64(2)))
		completeAuto(ns, run.Name, next, digestOf("rec2"))
		Eventually(recorded(next.Object()), timeout, interval).Should(Equal("true"))
		Expect(g.childCount(ns)()).To(Equal(2))
	})

	It("honours ttlAfterFinished 0s on every engine: the child goes once its result is recorded", func() {
		ns := newNamespace()
		run := g.run("ttl", ns).Auto().Obj()
		run.Spec.History.TTLAfterFinished = &metav1.Duration{}
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		s := g.active(ns, run.Name)
		completeAuto(ns, run.Name, s, digestOf("ttl"))
		Eventually(g.childCount(ns), timeout, interval).Should(BeZero())
		got := getRun(ns, run.Name)
		Expect(got.Status.History).To(HaveLen(1))
		Expect(got.Status.History[0].Result).To(Equal(infrav1.RunSucceeded))
		Expect(got.Status.OutputsSecretName).NotTo(BeEmpty())
		Expect(cond(got, infrav1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
	})

	It("retries a failed destroy when infra.opr8r.io/run-requested-at changes", func() {
		ns := newNamespace()
		g.applied(ns, "retry", false)
		Expect(k8sClient.Delete(ctx, getRun(ns, "retry"))).To(Succeed())
		Eventually(func() infrav1.RunType { return getRun(ns, "retry").Status.Run.Type }, timeout, interval).Should(Equal(infrav1.RunDestroy))
		d := g.active(ns, "retry")
		d.Start()
		d.Fail("plan", "Error: error acquiring the state lock")
		Eventually(condReason(ns, "retry", infrav1.StalledCondition), timeout, interval).Should(Equal("True/DestroyFailed"))
		Expect(cond(getRun(ns, "retry"), infrav1.StalledCondition).Message).To(ContainSubstring("kubectl tfrun rerun retry"))
		patchRun(ns, "retry", func(r *infrav1.TerraformRun) {
			r.Annotations = map[string]string{infrav1.RunRequestAnnotation: "retry-destroy"}
		})
		d2 := g.nextRun(ns, "retry", d.Key().Name)
		Expect(d2.Object().GetLabels()).To(HaveKeyWithValue(infrav1.RunTypeLabel, "destroy"))
		Expect(getRun(ns, "retry").Status.Run.Trigger).To(Equal(infrav1.TriggerRerunRequest))
		d2.SucceedDestroy()
		Eventually(gone(ns, "retry"), timeout, interval).Should(BeTrue())
	})

	It("destroys on delete a run whose apply succeeded while the manager was down", func() {
		if _, driven := g.e.kit.Engine.(engine.Driver); driven {
			Skip("the " + string(g.e.name) + " engine's steps only advance with the manager, so no apply finishes unseen")
		}
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, g.run("unseen", ns).Auto().Obj())).To(Succeed())
		s := g.active(ns, "unseen")
		Eventually(func() []string { return getRun(ns, "unseen").Finalizers }, timeout, interval).ShouldNot(BeEmpty())
		stopManager()
		s.Start()
		s.Plan(1, 0, 0, digestOf("unseen"))
		s.FinishApply(`{}`)
		Expect(k8sClient.Delete(ctx, getRun(ns, "unseen"))).To(Succeed())
		Expect(getRun(ns, "unseen").Status.Run.Phase).To(Equal(infrav1.RunPending), "the manager never saw the run move")
		startManager()
		Eventually(func() infrav1.RunType { return getRun(ns, "unseen").Status.Run.Type }, timeout, interval).Should(Equal(infrav1.RunDestroy))
		d := g.active(ns, "unseen")
		d.SucceedDestroy()
		Eventually(gone(ns, "unseen"), timeout, interval).Should(BeTrue())
	})

	It("tells a run waiting for approval how to approve with this engine's tools only", func() {
		ns := newNamespace()
		run := g.run("hint", ns).Obj()
		g.planned(ns, run, digestOf("hint"))
		msg := cond(getRun(ns, run.Name), infrav1.ApprovedCondition).Message
		Expect(msg).To(ContainSubstring("kubectl tfrun approve hint"))
		if _, ok := g.e.kit.Engine.(engine.ApprovalHinter); ok {
			Expect(msg).To(ContainSubstring(", or "))
		} else {
			Expect(msg).NotTo(ContainSubstring("argo"), "engine %s has no argo resume", g.e.name)
		}
	})

	It("keeps a child whose result is not yet recorded, and never prunes the active run", func() {
		ns := newNamespace()
		run := g.run("keep", ns).Obj()
		run.Spec.History.TTLAfterFinished = &metav1.Duration{}
		s := g.planned(ns, run, digestOf("keep"))
		Consistently(func() error {
			return k8sClient.Get(ctx, client.ObjectKeyFromObject(s.Object()), s.Object())
		}, 2*time.Second, interval).Should(Succeed())
	})
}
