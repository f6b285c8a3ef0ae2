package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines"
	"github.com/opr8r/opr8r/pkg/manager"
	"github.com/opr8r/opr8r/pkg/plugin"
	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/pkg/records/s3"
	"github.com/opr8r/opr8r/test/envtestutil"
)

// The records the steps keep (their logs, the plans) follow the history:
// the manager prunes those of runs that leave status.history, and deletes
// them all with the TerraformRun. (envtest runs no garbage collector, so
// what goes here, the manager removed.)
var _ = Describe("records", func() {
	ctx := context.Background()
	g := given{engineCases[0]}

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

		By("a 5 MB plan is kept, and kubectl tfrun plan shows it whole")
		var plan bytes.Buffer
		for i := 0; plan.Len() < 5<<20; i++ {
			fmt.Fprintf(&plan, "  # terraform_data.item[%d] will be created\n  + resource \"terraform_data\" \"item\" { input = \"%x\" }\n", i, i*7919)
		}
		plan.WriteString("[the end of a 5 MB plan]\n")
		Expect(store.Put(ctx, records.Key{Namespace: ns, Run: "kept", RunID: ids[2], Step: "plan", Kind: records.KindPlanText}, plan.Bytes())).To(Succeed())
		var out, errOut bytes.Buffer
		flags := genericclioptions.NewConfigFlags(false)
		flags.Namespace = &ns
		cmd := plugin.NewCommand(&plugin.Options{IOStreams: genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}, Flags: flags, Client: k8sClient, Clientset: clientset, Engines: engines.All()})
		cmd.SetArgs([]string{"plan", "kept", "--run", ids[2]})
		Expect(cmd.ExecuteContext(ctx)).To(Succeed())
		Expect(out.Len()).To(BeNumerically(">", 5<<20))
		Expect(strings.HasSuffix(out.String(), "[the end of a 5 MB plan]\n")).To(BeTrue(), "the whole plan")

		By("deleting the TerraformRun deletes its records, the 5 MB plan too")
		Expect(k8sClient.Delete(ctx, getRun(ns, "kept"))).To(Succeed())
		Eventually(func() int {
			l, err := clientset.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "infra.opr8r.io/component=record"})
			Expect(err).NotTo(HaveOccurred())
			return len(l.Items)
		}, timeout, interval).Should(BeZero())
	})
})

// With an object store (versitygw, a real S3 server, on 127.0.0.1), the
// manager moves finished runs' records out of the cluster, encrypted, and
// brings a run's back for a while when kubectl tfrun asks.
var _ = Describe("records in an object store", Serial, func() {
	ctx := context.Background()
	g := given{engineCases[0]}
	var srv *envtestutil.S3Server
	var objects *s3.Store

	BeforeEach(func() {
		var err error
		srv, err = envtestutil.StartS3(GinkgoT().TempDir(), "opr8r-records")
		Expect(err).NotTo(HaveOccurred())
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		objects, err = s3.New(s3.Config{Endpoint: srv.Endpoint, Insecure: true, Bucket: srv.Bucket, Prefix: "opr8r/", AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Key: key})
		Expect(err).NotTo(HaveOccurred())
		stopManager()
		startManager(func(o *manager.Options) { o.ObjectStore, o.RestoreTTL = objects, 3*time.Second })
		DeferCleanup(func() {
			stopManager()
			startManager()
			srv.Stop()
		})
	})

	It("moves finished runs' records to the object store, brings one back on request for a while, and deletes them with the TerraformRun", func() {
		ns := newNamespace()
		run := g.run("moved", ns).Auto().Obj()
		run.Spec.History.KeepFinished = ptr.To[int32](1)
		run.Spec.History.KeepRecords = ptr.To[int32](2)
		run.Spec.DeletionPolicy = infrav1.DeletionRetain
		Expect(k8sClient.Create(ctx, run)).To(Succeed())
		owner := getRun(ns, "moved")
		secrets := &records.SecretStore{Client: clientset, Owner: &metav1.OwnerReference{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: owner.Name, UID: owner.UID}}
		const marker = "PLAN-SECRET-VALUE-71d3"
		var ids []string
		for i, d := range []string{"m1", "m2", "m3"} {
			prev := runID(ns, "moved")()
			if i > 0 {
				patchRun(ns, "moved", func(r *infrav1.TerraformRun) { r.Annotations = map[string]string{infrav1.RunRequestAnnotation: d} })
			}
			s := g.nextRun(ns, "moved", prev)
			id := s.Key().Name
			ids = append(ids, id)
			Expect(secrets.Put(ctx, records.Key{Namespace: ns, Run: "moved", RunID: id, Step: "plan", Kind: records.KindLog}, []byte("log of "+id))).To(Succeed())
			Expect(secrets.Put(ctx, records.Key{Namespace: ns, Run: "moved", RunID: id, Step: "plan", Kind: records.KindPlanJSON}, []byte(`{"password":"`+marker+`"}`))).To(Succeed())
			completeAuto(ns, "moved", s, digestOf(d))
		}
		inStore := func(st records.Store) func() []string {
			return func() []string {
				recs, err := st.List(ctx, ns, "moved")
				Expect(err).NotTo(HaveOccurred())
				var out []string
				for _, r := range recs {
					out = append(out, r.RunID+"/"+string(r.Kind))
				}
				return out
			}
		}
		Eventually(inStore(objects), timeout, interval).Should(Equal([]string{ids[1] + "/log", ids[1] + "/plan.json", ids[2] + "/log", ids[2] + "/plan.json"}),
			"the records of the runs in the history (keepRecords 2) are in the object store")
		Eventually(inStore(secrets), timeout, interval).Should(BeEmpty(), "and no longer in Secrets")
		raw, err := objects.Raw(ctx, records.Key{Namespace: ns, Run: "moved", RunID: ids[2], Step: "plan", Kind: records.KindPlanJSON})
		Expect(err).NotTo(HaveOccurred())
		Expect(string(raw)).NotTo(ContainSubstring(marker), "nothing in clear in the object store")

		By("kubectl tfrun logs --run asks the manager, which brings the run's records back as Secrets for a while")
		var out, errOut bytes.Buffer
		flags := genericclioptions.NewConfigFlags(false)
		flags.Namespace = &ns
		o := &plugin.Options{IOStreams: genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}, Flags: flags, Client: k8sClient, Clientset: clientset, Engines: engines.All()}
		cmd := plugin.NewCommand(o)
		cmd.SetArgs([]string{"logs", "moved", "--run", ids[1], "--step", "plan"})
		Expect(cmd.ExecuteContext(ctx)).To(Succeed())
		Expect(out.String()).To(Equal("log of " + ids[1]))
		recs, err := secrets.List(ctx, ns, "moved")
		Expect(err).NotTo(HaveOccurred())
		Expect(recs).NotTo(BeEmpty())
		for _, r := range recs {
			Expect(r.RunID).To(Equal(ids[1]))
			Expect(r.Restored).To(BeTrue())
		}
		Eventually(inStore(secrets), timeout, interval).Should(BeEmpty(), "the copies go after the restore TTL")
		Expect(inStore(objects)()).To(HaveLen(4), "the object store still has them")

		By("deleting the TerraformRun deletes its records from the object store")
		Expect(k8sClient.Delete(ctx, getRun(ns, "moved"))).To(Succeed())
		Eventually(inStore(objects), timeout, interval).Should(BeEmpty())
	})
})
