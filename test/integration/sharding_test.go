package integration

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/manager"
)

// Sharding (docs/performance.md, P6): managers started with --shard and
// --unsharded-only split the runs by the sharding.opr8r.io/key label; every
// run is reconciled by exactly one of them, on every engine.
var _ = Describe("sharding", Serial, func() {
	It("reconciles each run by exactly one shard's manager, and refuses moving an active run to another shard", func() {
		stopManager() // the shards replace the suite's manager
		DeferCleanup(startManager)
		ns := newNamespace()
		shards := map[string]manager.Shard{
			"blue":    {Name: "blue"},
			"green":   {Name: "green"},
			"default": {UnshardedOnly: true},
		}
		counters := map[string]*writeCounter{}
		for name, sh := range shards {
			w := &writeCounter{namespace: ns, counts: map[string]int{}}
			counters[name] = w
			cancel, done := startShardManager(sh, w.funcs())
			DeferCleanup(func() { cancel(); <-done })
		}

		By("a run per shard and engine, driven to Ready")
		label := map[string]string{"blue": "blue", "green": "green", "default": ""}
		for _, e := range engineCases {
			g := given{e}
			for shard, value := range label {
				name := fmt.Sprintf("%s-%s", shard, e.name)
				w := g.run(name, ns).Auto()
				if value != "" {
					w.Labels = map[string]string{infrav1.ShardLabel: value}
				}
				Expect(k8sClient.Create(context.Background(), w.Obj())).To(Succeed())
				s := g.activeWithin(ns, name, 90*time.Second)
				if value != "" {
					// The child carries the shard, so only that shard caches it.
					Expect(s.Object().GetLabels()).To(HaveKeyWithValue(infrav1.ShardLabel, value))
				}
				s.Start()
				s.Plan(1, 0, 0, digestOf(name))
				s.FinishApply(`{"a":{"sensitive":false,"value":"1"}}`)
				Eventually(condReason(ns, name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
				secret := getRun(ns, name).Status.OutputsSecretName
				Expect(secret).NotTo(BeEmpty())
			}
		}

		By("every run's writes come from its own shard only")
		for _, e := range engineCases {
			for shard := range label {
				name := fmt.Sprintf("%s-%s", shard, e.name)
				for other, w := range counters {
					n := w.writesTo(name)
					if other == shard {
						Expect(n).To(BeNumerically(">", 0), "shard %s made no write for its run %s", shard, name)
					} else {
						Expect(n).To(BeZero(), "shard %s wrote to %s, a run of shard %s: %s", other, name, shard, w.written())
					}
				}
			}
		}

		By("the shard label cannot change while a run is active")
		e := engineCases[0]
		name := "moving"
		w := given{e}.run(name, ns)
		w.Labels = map[string]string{infrav1.ShardLabel: "blue"}
		Expect(k8sClient.Create(context.Background(), w.Obj())).To(Succeed())
		given{e}.activeWithin(ns, name, 90*time.Second)
		run := getRun(ns, name)
		patch := client.MergeFrom(run.DeepCopy())
		run.Labels[infrav1.ShardLabel] = "green"
		err := k8sClient.Patch(context.Background(), run, patch)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring(`metadata.labels[sharding.opr8r.io/key] cannot change from "blue" to "green" while run moving-1 is active`))
	})
})

// writesTo counts the writes to a run and its own objects ("<run>-...").
func (w *writeCounter) writesTo(run string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.names {
		f := strings.Fields(s)
		obj := f[len(f)-1]
		obj = obj[strings.Index(obj, "/")+1:]
		if obj == run || strings.HasPrefix(obj, run+"-") {
			n++
		}
	}
	return n
}
