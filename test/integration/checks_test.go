package integration

import (
	"context"
	"time"

	"github.com/opr8r/opr8r/pkg/names"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// stepNames are the run's steps in status order, with their phases.
func stepNames(ns, name string) ([]string, map[string]infrav1.StepPhase) {
	run := getRun(ns, name)
	if run.Status.Run == nil {
		return nil, nil
	}
	var order []string
	phases := map[string]infrav1.StepPhase{}
	for _, st := range run.Status.Run.Steps {
		order = append(order, st.Name)
		phases[st.Name] = st.Phase
	}
	return order, phases
}

// userChecks: spec.checks run after the plan and before the gate, and a
// failing one fails the run before anyone is asked to approve.
func userChecks(g given) {
	ctx := context.Background()
	const policy, cost = "check-policy", "check-cost"
	withChecks := func(name, ns string) *infrav1.TerraformRun {
		return g.run(name, ns).
			Check("policy", "conftest:test", "opa-policies", "conftest", "test", "--policy", "/opr8r/check", "/workspace/plan/plan.json").
			Check("cost", "infracost:test", "", "sh", "-c", "infracost breakdown --path $OPR8R_PLAN_JSON").Obj()
	}

	It("runs checks after a plan with changes and asks for approval only once they pass", func() {
		ns := newNamespace()
		digest := digestOf("checked")
		run := withChecks("checked", ns)
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		s := g.active(ns, run.Name)
		Expect(s.Validate()).To(Succeed())
		s.Start()
		s.Plan(1, 0, 0, digest)

		By("no approval is asked for while the checks run")
		Consistently(phase(ns, run.Name), 2*time.Second, interval).ShouldNot(Equal(infrav1.RunAwaitingApproval))

		s.PassChecks(cost, policy)
		s.Suspend(digest)
		Eventually(phase(ns, run.Name), timeout, interval).Should(Equal(infrav1.RunAwaitingApproval))
		order, phases := stepNames(ns, run.Name)
		Expect(phases).To(And(HaveKeyWithValue(policy, infrav1.StepSucceeded), HaveKeyWithValue(cost, infrav1.StepSucceeded)))
		Expect(order).To(ContainElements(names.StepPlan, cost, policy, names.StepApprove))
		idx := func(n string) int {
			for i, o := range order {
				if o == n {
					return i
				}
			}
			return -1
		}
		Expect(idx(names.StepPlan)).To(BeNumerically("<", idx(cost)))
		Expect(idx(cost)).To(BeNumerically("<", idx(names.StepApprove)))
		Expect(idx(policy)).To(BeNumerically("<", idx(names.StepApprove)))

		patchRun(ns, run.Name, func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = digest })
		Eventually(gateState(s), timeout, interval).Should(Equal("Approved"))
		s.FinishApply(`{}`)
		Eventually(condReason(ns, run.Name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
	})

	It("fails the run with the check's name and last output line when a check fails: no approval, no apply", func() {
		ns := newNamespace()
		run := withChecks("blocked", ns)
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		s := g.active(ns, run.Name)
		s.Start()
		s.Plan(0, 0, 1, digestOf("blocked"))
		last := "FAIL - /workspace/plan/plan.json - main - terraform_data.x would be destroyed (exit code 1)"
		s.FailCheck(policy, last, cost)
		Eventually(condReason(ns, run.Name, infrav1.StalledCondition), timeout, interval).Should(Equal("True/RunFailed"))
		got := getRun(ns, run.Name)
		Expect(got.Status.Run.Message).To(ContainSubstring("step check-policy failed: " + last))
		Expect(cond(got, infrav1.ReadyCondition).Message).To(ContainSubstring("terraform_data.x would be destroyed"))
		Expect(cond(got, infrav1.ApprovedCondition)).To(BeNil(), "nobody was asked to approve a plan that failed its checks")
		Expect(condReason(ns, run.Name, infrav1.AppliedCondition)()).NotTo(HavePrefix("True"))
		_, phases := stepNames(ns, run.Name)
		Expect(phases).To(HaveKeyWithValue(policy, infrav1.StepFailed))
		Expect(phases).To(HaveKeyWithValue(cost, infrav1.StepSucceeded))
		Expect(phases).NotTo(HaveKeyWithValue(names.StepApply, infrav1.StepSucceeded))
		Expect(got.Status.History).NotTo(BeEmpty())
		Expect(got.Status.History[0].Result).To(Equal(infrav1.RunFailed))
		Expect(got.Status.History[0].Message).To(ContainSubstring("check-policy"))
	})

	It("runs no check for a plan without changes", func() {
		ns := newNamespace()
		run := withChecks("unchanged", ns)
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		s := g.active(ns, run.Name)
		s.Start()
		s.Plan(0, 0, 0, digestOf("unchanged"))
		s.SkipGate()
		s.FinishApply(`{}`)
		Eventually(condReason(ns, run.Name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
		_, phases := stepNames(ns, run.Name)
		for _, c := range []string{policy, cost} {
			Expect(phases[c]).To(Or(BeEmpty(), Equal(infrav1.StepSkipped)), "check %s ran for a plan without changes", c)
		}
	})
}
