package integration

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/records"
)

// The records the steps keep (their logs, the plans) follow the history:
// the manager prunes those of runs that leave status.history, and deletes
// them all with the TerraformRun. (envtest runs no garbage collector, so
// what goes here, the manager removed.)
var _ = Describe("records", func() {
	ctx := context.Background()
	g := given{engines[0]}

	It("prunes the records of runs that left the history, and deletes them all with the TerraformRun", func() {
		ns := newNamespace()
		run := g.run("kept", ns).Auto().Obj()
		run.Spec.History.KeepFinished = ptr.To[int32](1)
		run.Spec.History.KeepRecords = ptr.To[int32](2)
		run.Spec.DeletionPolicy = infrav1.DeletionRetain
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		owner := getRun(ns, "kept")
		store := &records.SecretStore{Client: clientset, Owner: &metav1.OwnerReference{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: owner.Name, UID: owner.UID}}
		keep := func(runID string) {
			for _, k := range []records.Kind{records.KindLog, records.KindPlanText} {
				Expect(store.Put(ctx, records.Key{Namespace: ns, Run: "kept", RunID: runID, Step: "plan", Kind: k}, []byte(runID+" "+string(k)))).To(Succeed())
			}
		}
		var ids []string
		for i, d := range []string{"k1", "k2", "k3"} {
			prev := runID(ns, "kept")()
			if i > 0 {
				patchRun(ns, "kept", func(r *infrav1.TerraformRun) {
					r.Annotations = map[string]string{infrav1.RunRequestAnnotation: d}
				})
			}
			s := g.nextRun(ns, "kept", prev)
			ids = append(ids, s.Key().Name)
			keep(s.Key().Name) // what the run's steps keep
			completeAuto(ns, "kept", s, digestOf(d))
		}
		keptRuns := func() []string {
			recs, err := store.List(ctx, ns, "kept")
			Expect(err).NotTo(HaveOccurred())
			var out []string
			for _, r := range recs {
				if r.Kind == records.KindLog {
					out = append(out, r.RunID)
				}
			}
			return out
		}
		Eventually(keptRuns, timeout, interval).Should(Equal([]string{ids[1], ids[2]}), "keepRecords 2: the first run's records go with its history record")
		b, err := store.Get(ctx, records.Key{Namespace: ns, Run: "kept", RunID: ids[1], Step: "plan", Kind: records.KindPlanText})
		Expect(err).NotTo(HaveOccurred())
		Expect(string(b)).To(Equal(ids[1]+" plan.txt"), "a run still in the history keeps its plan after its child is pruned")
		Eventually(g.childCount(ns), timeout, interval).Should(Equal(1))

		By("deleting the TerraformRun deletes its records")
		Expect(k8sClient.Delete(ctx, getRun(ns, "kept"))).To(Succeed())
		Eventually(keptRuns, timeout, interval).Should(BeEmpty())
	})
})
