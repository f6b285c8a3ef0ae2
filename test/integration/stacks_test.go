package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/manager"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// layer is a run of a stack: Auto approval, depending on deps (each taking
// all of its outputs).
func (g given) layer(ns, name string, deps ...string) *testutil.RunWrapper {
	w := g.run(name, ns).Auto()
	for _, d := range deps {
		w = w.DependsOn("", d, true)
	}
	return w
}

// applyNext runs the run's next child (other than prev) to Ready, writing
// outputs, and returns its id.
func (g given) applyNext(ns, name, prev, outputs string) string {
	s := g.nextRun(ns, name, prev)
	s.Start()
	s.Plan(1, 0, 0, digestOf(s.Key().Name))
	s.FinishApply(outputs)
	Eventually(func() string {
		run := getRun(ns, name)
		if run.Status.Run == nil || run.Status.Run.ID != s.Key().Name {
			return ""
		}
		return condReason(ns, name, infrav1.ReadyCondition)()
	}, timeout, interval).Should(Equal("True/Succeeded"))
	return s.Key().Name
}

func outputJSON(name, value string, sensitive bool) string {
	return fmt.Sprintf(`{%q:{"sensitive":%v,"type":"string","value":%q}}`, name, sensitive, value)
}

// childJSON is a run's current child, whole, as JSON.
func (g given) childJSON(ns, name string) string {
	id := runID(ns, name)()
	for _, c := range g.e.children(ns) {
		if c.GetName() == id {
			b, _ := json.Marshal(c)
			return string(b)
		}
	}
	return ""
}

// noRun says a run has not started any run, and shows why.
func noRun(ns, name string) {
	Consistently(runID(ns, name), 2*time.Second, interval).Should(BeEmpty(), "%s started a run", name)
}

// stacks: spec.dependsOn orders runs, hands outputs on, plans dependents
// again when outputs change, refuses cycles and other namespaces, reports
// missing dependencies, and deletes in reverse order.
func stacks(g given) {
	ctx := context.Background()

	It("runs a chain of three in order, each taking the outputs of the one before", func() {
		ns := newNamespace()
		for _, w := range []*testutil.RunWrapper{g.layer(ns, "app", "cluster"), g.layer(ns, "cluster", "network"), g.layer(ns, "network")} {
			Expect(k8sClient.Create(ctx, w.Obj())).To(Succeed())
		}
		By("only the bottom layer starts; the others wait, naming what they wait for")
		Eventually(condReason(ns, "cluster", infrav1.ReconcilingCondition), timeout, interval).Should(Equal("True/DependencyNotReady"))
		Expect(cond(getRun(ns, "cluster"), infrav1.ReconcilingCondition).Message).To(ContainSubstring("waiting for dependency network: "))
		Eventually(condReason(ns, "app", infrav1.DependenciesReadyCondition), timeout, interval).Should(Equal("False/DependencyNotReady"))
		Expect(cond(getRun(ns, "app"), infrav1.DependenciesReadyCondition).Message).To(ContainSubstring("waiting for dependency cluster: "))
		g.applyNext(ns, "network", "", outputJSON("vpc_id", "vpc-1", false))

		By("the middle layer starts once the bottom one is Ready, and its child reads the bottom's outputs Secret")
		g.applyNext(ns, "cluster", "", outputJSON("endpoint", "https://k8s-1", false))
		Expect(g.childJSON(ns, "cluster")).To(ContainSubstring("network-outputs"))
		Expect(g.childJSON(ns, "cluster")).NotTo(ContainSubstring("vpc-1"), "names only: the value stays in the Secret")
		got := getRun(ns, "cluster")
		Expect(got.Status.Run.Dependencies).To(HaveLen(1))
		Expect(got.Status.Run.Dependencies[0].Name).To(Equal("network"))
		Expect(got.Status.Run.Dependencies[0].OutputsDigest).To(Equal(getRun(ns, "network").Status.OutputsDigest))
		Expect(getRun(ns, "network").Status.OutputsDigest).To(HavePrefix("hmac-sha256:"))

		By("then the top layer")
		g.applyNext(ns, "app", "", `{}`)
		Expect(g.childJSON(ns, "app")).To(ContainSubstring("cluster-outputs"))
		Expect(condReason(ns, "app", infrav1.DependenciesReadyCondition)()).To(Equal("True/DependenciesReady"))
	})

	It("fans in: a run waits for every dependency", func() {
		ns := newNamespace()
		for _, w := range []*testutil.RunWrapper{g.layer(ns, "app", "network", "dns"), g.layer(ns, "network"), g.layer(ns, "dns")} {
			Expect(k8sClient.Create(ctx, w.Obj())).To(Succeed())
		}
		g.applyNext(ns, "network", "", outputJSON("vpc_id", "vpc-1", false))
		Eventually(condReason(ns, "app", infrav1.ReconcilingCondition), timeout, interval).Should(Equal("True/DependencyNotReady"))
		// The reason is the same while network still runs; the message
		// names the dependency waited for once network is done.
		Eventually(func() string { return cond(getRun(ns, "app"), infrav1.ReconcilingCondition).Message }, timeout, interval).
			Should(ContainSubstring("waiting for dependency dns: "))
		noRun(ns, "app")
		g.applyNext(ns, "dns", "", outputJSON("zone", "example.com", false))
		g.applyNext(ns, "app", "", `{}`)
		deps := getRun(ns, "app").Status.Run.Dependencies
		Expect(deps).To(HaveLen(2))
		Expect(g.childJSON(ns, "app")).To(And(ContainSubstring("network-outputs"), ContainSubstring("dns-outputs")))
	})

	It("plans dependents again when a dependency's outputs change, and not when they stay the same", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, g.layer(ns, "network").Var("cidr", `"10.0.0.0/16"`).Obj())).To(Succeed())
		Expect(k8sClient.Create(ctx, g.layer(ns, "cluster", "network").Obj())).To(Succeed())
		n1 := g.applyNext(ns, "network", "", outputJSON("vpc_id", "vpc-1", false))
		c1 := g.applyNext(ns, "cluster", "", `{}`)

		By("a rerun of the dependency that leaves its outputs as they were starts nothing")
		digest := getRun(ns, "network").Status.OutputsDigest
		patchRun(ns, "network", func(r *infrav1.TerraformRun) {
			r.Annotations = map[string]string{infrav1.RunRequestAnnotation: "same-outputs"}
		})
		n2 := g.applyNext(ns, "network", n1, outputJSON("vpc_id", "vpc-1", false))
		Expect(getRun(ns, "network").Status.OutputsDigest).To(Equal(digest))
		Consistently(runID(ns, "cluster"), 3*time.Second, interval).Should(Equal(c1))

		By("a spec change of the dependency that changes an output plans the dependent again, naming why")
		patchRun(ns, "network", func(r *infrav1.TerraformRun) { r.Spec.Terraform.Vars[0].Value.Raw = []byte(`"10.1.0.0/16"`) })
		n3 := g.applyNext(ns, "network", n2, outputJSON("vpc_id", "vpc-2", false))
		Expect(getRun(ns, "network").Status.OutputsDigest).NotTo(Equal(digest))
		c2 := g.applyNext(ns, "cluster", c1, `{}`)
		got := getRun(ns, "cluster").Status
		Expect(got.Run.Trigger).To(Equal(infrav1.TriggerDependencyChange))
		Expect(got.Run.TriggerDetail).To(Equal(fmt.Sprintf("dependency network: run %s changed its outputs", n3)))
		Expect(got.History[0].ID).To(Equal(c2))
		Expect(got.History[0].Trigger).To(Equal(infrav1.TriggerDependencyChange))
		Expect(got.History[0].TriggerDetail).To(ContainSubstring(n3))
		Consistently(runID(ns, "cluster"), 2*time.Second, interval).Should(Equal(c2), "one run per change")
	})

	It("goes through the dependent's own approval gate, and a plan waiting there is planned again when outputs change", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, g.layer(ns, "network").Obj())).To(Succeed())
		Expect(k8sClient.Create(ctx, g.run("cluster", ns).DependsOn("", "network", true).Obj())).To(Succeed())
		n1 := g.applyNext(ns, "network", "", outputJSON("vpc_id", "vpc-1", false))
		s := g.active(ns, "cluster")
		s.Start()
		s.Plan(1, 0, 0, digestOf("c1"))
		s.Suspend(digestOf("c1"))
		Eventually(phase(ns, "cluster"), timeout, interval).Should(Equal(infrav1.RunAwaitingApproval))
		patchRun(ns, "network", func(r *infrav1.TerraformRun) {
			r.Annotations = map[string]string{infrav1.RunRequestAnnotation: "new-vpc"}
		})
		g.applyNext(ns, "network", n1, outputJSON("vpc_id", "vpc-2", false))
		Eventually(s.CancelRequested, timeout, interval).Should(BeTrue())
		Eventually(condReason(ns, "cluster", infrav1.ApprovedCondition), timeout, interval).Should(Equal("False/Superseded"))
		Expect(cond(getRun(ns, "cluster"), infrav1.ApprovedCondition).Message).To(ContainSubstring("dependency network"))
		Expect(approvalLabel(s)()).To(Equal(infrav1.ApprovalLabelSuperseded), "the superseded child says so to the dashboards")
		s.CompleteAfterGate()
		s2 := g.nextRun(ns, "cluster", s.Key().Name)
		Expect(getRun(ns, "cluster").Status.Run.Trigger).To(Equal(infrav1.TriggerDependencyChange))
		s2.Start()
		s2.Plan(1, 0, 0, digestOf("c2"))
		s2.Suspend(digestOf("c2"))
		Eventually(phase(ns, "cluster"), timeout, interval).Should(Equal(infrav1.RunAwaitingApproval), "the new plan waits for a person too")
	})

	It("refuses a cycle, naming it", func() {
		ns := newNamespace()
		for _, w := range []*testutil.RunWrapper{g.layer(ns, "a", "b"), g.layer(ns, "b", "c"), g.layer(ns, "c", "a")} {
			Expect(k8sClient.Create(ctx, w.Obj())).To(Succeed())
		}
		for _, n := range []string{"a", "b", "c"} {
			Eventually(condReason(ns, n, infrav1.StalledCondition), timeout, interval).Should(Equal("True/DependencyCycle"))
		}
		Expect(cond(getRun(ns, "a"), infrav1.StalledCondition).Message).To(ContainSubstring("a -> b -> c -> a"))
		Expect(cond(getRun(ns, "b"), infrav1.StalledCondition).Message).To(ContainSubstring("b -> c -> a -> b"))
		Expect(g.e.children(ns)).To(BeEmpty())

		By("breaking the cycle lets the runs go, in order")
		patchRun(ns, "c", func(r *infrav1.TerraformRun) { r.Spec.DependsOn = nil })
		g.applyNext(ns, "c", "", outputJSON("x", "1", false))
		g.applyNext(ns, "b", "", outputJSON("y", "2", false))
		g.applyNext(ns, "a", "", `{}`)
	})

	It("reports a missing dependency, and starts once it exists and is Ready", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, g.layer(ns, "app", "ghost").Obj())).To(Succeed())
		Eventually(condReason(ns, "app", infrav1.StalledCondition), timeout, interval).Should(Equal("True/DependencyNotFound"))
		Expect(cond(getRun(ns, "app"), infrav1.StalledCondition).Message).To(ContainSubstring("dependency ghost (spec.dependsOn[0]) does not exist"))
		Expect(condReason(ns, "app", infrav1.DependenciesReadyCondition)()).To(Equal("False/DependencyNotFound"))
		noRun(ns, "app")
		Expect(k8sClient.Create(ctx, g.layer(ns, "ghost").Obj())).To(Succeed())
		Eventually(condReason(ns, "app", infrav1.ReconcilingCondition), timeout, interval).Should(Equal("True/DependencyNotReady"))
		g.applyNext(ns, "ghost", "", outputJSON("id", "g-1", false))
		g.applyNext(ns, "app", "", `{}`)
	})

	It("refuses a dependency in another namespace without --allow-cross-namespace-dependencies", func() {
		ns, other := newNamespace(), newNamespace()
		Expect(k8sClient.Create(ctx, g.layer(other, "network").Obj())).To(Succeed())
		Expect(k8sClient.Create(ctx, g.run("app", ns).Auto().DependsOn(other, "network", true).Obj())).To(Succeed())
		Eventually(condReason(ns, "app", infrav1.StalledCondition), timeout, interval).Should(Equal("True/CrossNamespaceDependency"))
		msg := cond(getRun(ns, "app"), infrav1.StalledCondition).Message
		Expect(msg).To(And(ContainSubstring("spec.dependsOn[0]"), ContainSubstring(other+"/network"), ContainSubstring("--allow-cross-namespace-dependencies")))
		noRun(ns, "app")
	})

	Context("deletion", func() {
		It("destroys in reverse order: a dependency waits until its dependents are gone", func() {
			ns := newNamespace()
			Expect(k8sClient.Create(ctx, g.layer(ns, "network").Obj())).To(Succeed())
			Expect(k8sClient.Create(ctx, g.layer(ns, "cluster", "network").Obj())).To(Succeed())
			g.applyNext(ns, "network", "", outputJSON("vpc_id", "vpc-1", false))
			c1 := g.applyNext(ns, "cluster", "", `{}`)

			Expect(k8sClient.Delete(ctx, getRun(ns, "network"))).To(Succeed())
			Expect(k8sClient.Delete(ctx, getRun(ns, "cluster"))).To(Succeed())
			By("the dependent destroys first, with its dependency's outputs; the dependency waits")
			d := g.nextRun(ns, "cluster", c1)
			Expect(getRun(ns, "cluster").Status.Run.Type).To(Equal(infrav1.RunDestroy))
			Expect(g.childJSON(ns, "cluster")).To(ContainSubstring("network-outputs"), "a destroy plans with the same variables")
			Eventually(condReason(ns, "network", infrav1.ReconcilingCondition), timeout, interval).Should(Equal("True/DependentsExist"))
			Expect(cond(getRun(ns, "network"), infrav1.ReconcilingCondition).Message).To(ContainSubstring("cluster"))
			Consistently(func() infrav1.RunType { return getRun(ns, "network").Status.Run.Type }, 2*time.Second, interval).Should(Equal(infrav1.RunApply))

			By("once the dependent is gone, the dependency destroys")
			d.SucceedDestroy()
			Eventually(gone(ns, "cluster"), timeout, interval).Should(BeTrue())
			Eventually(func() infrav1.RunType { return getRun(ns, "network").Status.Run.Type }, timeout, interval).Should(Equal(infrav1.RunDestroy))
			g.active(ns, "network").SucceedDestroy()
			Eventually(gone(ns, "network"), timeout, interval).Should(BeTrue())
		})

		It("lets infra.opr8r.io/ignore-dependents destroy at once, and a dependency that is gone never blocks a dependent's delete", func() {
			ns := newNamespace()
			Expect(k8sClient.Create(ctx, g.layer(ns, "network").Obj())).To(Succeed())
			Expect(k8sClient.Create(ctx, g.layer(ns, "cluster", "network").Obj())).To(Succeed())
			n1 := g.applyNext(ns, "network", "", outputJSON("vpc_id", "vpc-1", false))
			c1 := g.applyNext(ns, "cluster", "", `{}`)

			Expect(k8sClient.Delete(ctx, getRun(ns, "network"))).To(Succeed())
			Eventually(condReason(ns, "network", infrav1.StalledCondition), timeout, interval).Should(Equal("True/DependentsExist"))
			Expect(cond(getRun(ns, "network"), infrav1.StalledCondition).Message).To(And(
				ContainSubstring("TerraformRuns depend on this one: cluster"), ContainSubstring(infrav1.IgnoreDependentsAnnotation+"=true")))
			Expect(runID(ns, "network")()).To(Equal(n1))

			patchRun(ns, "network", func(r *infrav1.TerraformRun) {
				r.Annotations = map[string]string{infrav1.IgnoreDependentsAnnotation: "true"}
			})
			g.nextRun(ns, "network", n1).SucceedDestroy()
			Eventually(gone(ns, "network"), timeout, interval).Should(BeTrue())
			Eventually(condReason(ns, "cluster", infrav1.DependenciesReadyCondition), timeout, interval).Should(Equal("False/DependencyNotFound"))

			Expect(k8sClient.Delete(ctx, getRun(ns, "cluster"))).To(Succeed())
			d := g.nextRun(ns, "cluster", c1)
			Expect(getRun(ns, "cluster").Status.Run.Type).To(Equal(infrav1.RunDestroy))
			Expect(g.childJSON(ns, "cluster")).NotTo(ContainSubstring("network-outputs"), "the destroy goes on without the dependency that is gone")
			d.SucceedDestroy()
			Eventually(gone(ns, "cluster"), timeout, interval).Should(BeTrue())
		})
	})

	It("keeps a dependency's sensitive output out of the dependent's status, events, child, step objects and the manager's log", func() {
		ns := newNamespace()
		const depMarker = "DEP-SENSITIVE-0UTPUT-MARKER-2c9e"
		Expect(k8sClient.Create(ctx, g.layer(ns, "db").Obj())).To(Succeed())
		Expect(k8sClient.Create(ctx, g.run("app", ns).Auto().DependsOn("", "db", false, "password=db_password", "host").Obj())).To(Succeed())
		g.applyNext(ns, "db", "", `{"host":{"sensitive":false,"type":"string","value":"db.internal"},"password":{"sensitive":true,"type":"string","value":"`+depMarker+`"}}`)
		db := getRun(ns, "db")
		Expect(db.Status.SensitiveOutputs).To(Equal([]string{"password"}))
		sec := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "db-outputs"}, sec)).To(Succeed())
		Expect(string(sec.Data["password"])).To(Equal(depMarker), "the marker must reach the producer's outputs Secret, or the scan proves nothing")
		Expect(db.Status.OutputsDigest).NotTo(ContainSubstring(depMarker))

		g.applyNext(ns, "app", "", `{}`)
		child := g.childJSON(ns, "app")
		Expect(child).To(ContainSubstring("db_password,run=db,output=password,file=/opr8r/deps/0/db_password,sensitive"),
			"the child names the output, and that it is sensitive, so the scan looks where a leak would be")
		statusJSON, _ := json.Marshal(getRun(ns, "app").Status)
		events, err := clientset.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		eventsJSON, _ := json.Marshal(events.Items)
		var stepObjects []byte
		for _, l := range allStepObjects() {
			Expect(k8sClient.List(ctx, l, client.InNamespace(ns))).To(Succeed())
			b, _ := json.Marshal(l)
			stepObjects = append(stepObjects, b...)
		}
		cms := &corev1.ConfigMapList{}
		Expect(k8sClient.List(ctx, cms, client.InNamespace(ns))).To(Succeed())
		cmJSON, _ := json.Marshal(cms)
		consumer := getRun(ns, "app")
		specJSON, _ := json.Marshal(consumer.Spec)
		for where, text := range map[string]string{"dependent's child": child, "dependent's status": string(statusJSON), "dependent's spec": string(specJSON),
			"events": string(eventsJSON), "step objects": string(stepObjects), "input ConfigMaps": string(cmJSON), "manager log": mgrLogs.String()} {
			Expect(strings.Contains(text, depMarker)).To(BeFalse(), "the dependency's sensitive output is in the %s", where)
		}
		stackLeakScans[g.e.name] = 7
	})
}

// Dependencies in other namespaces, allowed: a manager started with the
// flag. The step pods read the outputs through the API, so the child
// carries a reference (namespace/name of the outputs Secret), no volume.
var _ = Describe("stacks across namespaces", Serial, func() {
	It("runs a dependent in another namespace once allowed, reading the outputs through the API", func() {
		stopManager()
		DeferCleanup(func() { stopManager(); startManager() })
		startManager(func(o *manager.Options) { o.AllowCrossNamespaceDependencies = true })
		g := given{engineCases[0]}
		ctx := context.Background()
		infra, team := newNamespace(), newNamespace()
		Expect(k8sClient.Create(ctx, g.layer(infra, "network").Obj())).To(Succeed())
		Expect(k8sClient.Create(ctx, g.run("app", team).Auto().DependsOn(infra, "network", true).Obj())).To(Succeed())
		By("without the dependency's consent the dependent is Stalled, naming the field")
		Eventually(condReason(team, "app", infrav1.StalledCondition), timeout, interval).Should(Equal("True/CrossNamespaceDependency"))
		Expect(cond(getRun(team, "app"), infrav1.StalledCondition).Message).To(ContainSubstring("must list " + team + " in its spec.allowDependentsFrom"))
		patchRun(infra, "network", func(r *infrav1.TerraformRun) { r.Spec.AllowDependentsFrom = []string{team} })
		Eventually(condReason(team, "app", infrav1.ReconcilingCondition), timeout, interval).Should(Equal("True/DependencyNotReady"))
		Expect(cond(getRun(team, "app"), infrav1.ReconcilingCondition).Message).To(ContainSubstring("waiting for dependency " + infra + "/network"))
		g.applyNext(infra, "network", "", outputJSON("vpc_id", "vpc-1", false))
		g.applyNext(team, "app", "", `{}`)
		child := g.childJSON(team, "app")
		Expect(child).To(ContainSubstring("vpc_id,run=" + infra + "/network,output=vpc_id,secret=" + infra + "/network-outputs"))
		Expect(child).NotTo(ContainSubstring(`"secretName":"network-outputs"`), "no volume: another namespace's Secret cannot be mounted")

		By("a dependent in another namespace does not hold back the dependency's destroy")
		Expect(k8sClient.Delete(ctx, getRun(infra, "network"))).To(Succeed())
		Eventually(func() infrav1.RunType {
			if r := getRun(infra, "network").Status.Run; r != nil {
				return r.Type
			}
			return ""
		}, timeout, interval).Should(Equal(infrav1.RunDestroy))
		Expect(condReason(infra, "network", infrav1.StalledCondition)()).NotTo(Equal("True/DependentsExist"))
	})
})

// A stack whose layers run on different engines: each producer on one
// engine, its consumer on the next.
var _ = Describe("stacks across engines", func() {
	for i := range engineCases {
		producer, consumer := given{engineCases[i]}, given{engineCases[(i+1)%len(engineCases)]}
		It(fmt.Sprintf("runs a %s dependent of a %s dependency, and plans it again when the outputs change", consumer.e.name, producer.e.name), func() {
			ctx := context.Background()
			ns := newNamespace()
			Expect(k8sClient.Create(ctx, producer.layer(ns, "network").Obj())).To(Succeed())
			Expect(k8sClient.Create(ctx, consumer.layer(ns, "app", "network").Obj())).To(Succeed())
			n1 := producer.applyNext(ns, "network", "", outputJSON("vpc_id", "vpc-1", false))
			a1 := consumer.applyNext(ns, "app", "", `{}`)
			Expect(consumer.childJSON(ns, "app")).To(ContainSubstring("network-outputs"))
			patchRun(ns, "network", func(r *infrav1.TerraformRun) {
				r.Annotations = map[string]string{infrav1.RunRequestAnnotation: "new"}
			})
			n2 := producer.applyNext(ns, "network", n1, outputJSON("vpc_id", "vpc-2", false))
			consumer.applyNext(ns, "app", a1, `{}`)
			Expect(getRun(ns, "app").Status.Run.TriggerDetail).To(ContainSubstring(n2))
		})
	}
})
