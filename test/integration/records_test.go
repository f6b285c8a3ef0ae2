package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
		// As the steps keep them: the log and the readable plan in
		// TerraformRunRecords, the plan as JSON in clear in a Secret.
		store := records.NewRouter(clientset, &metav1.OwnerReference{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: owner.Name, UID: owner.UID})
		var bigPlan bytes.Buffer
		for i := 0; bigPlan.Len() < 5<<20; i++ {
			fmt.Fprintf(&bigPlan, "  # terraform_data.item[%d] will be created\n  + resource \"terraform_data\" \"item\" { input = \"%x\" }\n", i, i*7919)
		}
		bigPlan.WriteString("[the end of a 5 MB plan]\n")
		keep := func(runID string, plan []byte) {
			Expect(store.Put(ctx, records.Key{Namespace: ns, Run: "kept", RunID: runID, Step: "plan", Kind: records.KindLog}, []byte(runID+" log"))).To(Succeed())
			Expect(store.Put(ctx, records.Key{Namespace: ns, Run: "kept", RunID: runID, Step: "plan", Kind: records.KindPlanText}, plan)).To(Succeed())
			Expect(store.Put(ctx, records.Key{Namespace: ns, Run: "kept", RunID: runID, Step: "plan", Kind: records.KindPlanJSONSensitive}, []byte(`{"run":"`+runID+`"}`))).To(Succeed())
		}
		var ids []string
		for i, d := range []string{"k1", "k2", "k3"} {
			// The first run is whichever the manager starts: read before it
			// does, the id would be empty; after, it is that run itself,
			// and nextRun would wait for another (CI once: "kept-1 not to
			// equal kept-1").
			prev := ""
			if i > 0 {
				prev = runID(ns, "kept")()
				patchRun(ns, "kept", func(r *infrav1.TerraformRun) {
					r.Annotations = map[string]string{infrav1.RunRequestAnnotation: d}
				})
			}
			s := g.nextRun(ns, "kept", prev)
			ids = append(ids, s.Key().Name)
			plan := []byte(s.Key().Name + " plan.txt")
			if i == 2 {
				plan = bigPlan.Bytes()
			}
			keep(s.Key().Name, plan) // what the run's steps keep
			completeAuto(ns, "kept", s, digestOf(d))
		}
		// The digest of the readable plan the plan step records, which
		// kubectl tfrun plan checks (the engine simulators do not carry
		// it), as the manager records it in status.
		Eventually(func() error {
			r := getRun(ns, "kept")
			sum := sha256.Sum256(bigPlan.Bytes())
			r.Status.Plan.TextDigest = "sha256:" + hex.EncodeToString(sum[:])
			return k8sClient.Status().Update(ctx, r)
		}, timeout, interval).Should(Succeed())
		keptRuns := func() []string {
			recs, err := store.List(ctx, ns, "kept")
			Expect(err).NotTo(HaveOccurred())
			var out []string
			for _, r := range recs {
				out = append(out, r.RunID+"/"+string(r.Kind))
			}
			return out
		}
		Eventually(keptRuns, timeout, interval).Should(Equal([]string{
			ids[1] + "/log", ids[1] + "/plan-sensitive.json", ids[1] + "/plan.txt",
			ids[2] + "/log", ids[2] + "/plan-sensitive.json", ids[2] + "/plan.txt",
		}), "keepRecords 2: the first run's records go with its history record, from both stores")
		By("each kind is in its store: TerraformRunRecords for people, the plan in clear in Secrets")
		inResources := func() []string {
			l := &infrav1.TerraformRunRecordList{}
			Expect(k8sClient.List(ctx, l, client.InNamespace(ns))).To(Succeed())
			var out []string
			for _, r := range l.Items {
				if k := r.Spec.RunID + "/" + string(r.Spec.Kind); !slices.Contains(out, k) { // a record's chunks, once
					out = append(out, k)
				}
			}
			return out
		}
		inSecrets := func() []string {
			l, err := clientset.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "infra.opr8r.io/component=record"})
			Expect(err).NotTo(HaveOccurred())
			var out []string
			for _, s := range l.Items {
				out = append(out, s.Labels[records.RunIDLabel]+"/"+s.Labels[records.KindLabel])
			}
			return out
		}
		Expect(inResources()).To(ConsistOf(ids[1]+"/log", ids[1]+"/plan.txt", ids[2]+"/log", ids[2]+"/plan.txt"))
		Expect(inSecrets()).To(ConsistOf(ids[1]+"/plan-sensitive.json", ids[2]+"/plan-sensitive.json"))
		b, err := store.Get(ctx, records.Key{Namespace: ns, Run: "kept", RunID: ids[1], Step: "plan", Kind: records.KindPlanText})
		Expect(err).NotTo(HaveOccurred())
		Expect(string(b)).To(Equal(ids[1]+" plan.txt"), "a run still in the history keeps its plan after its child is pruned")
		Eventually(g.childCount(ns), timeout, interval).Should(Equal(1))

		By("a 5 MB plan is kept, and kubectl tfrun plan shows it whole")
		var out, errOut bytes.Buffer
		flags := genericclioptions.NewConfigFlags(false)
		flags.Namespace = &ns
		cmd := plugin.NewCommand(&plugin.Options{IOStreams: genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}, Flags: flags, Client: k8sClient, Clientset: clientset, Engines: engines.All()})
		cmd.SetArgs([]string{"plan", "kept", "--run", ids[2]})
		Expect(cmd.ExecuteContext(ctx)).To(Succeed())
		Expect(out.Len()).To(BeNumerically(">", 5<<20))
		Expect(strings.HasSuffix(out.String(), "[the end of a 5 MB plan]\n")).To(BeTrue(), "the whole plan")

		By("deleting the TerraformRun deletes its records, the 5 MB plan too, in both stores")
		Expect(k8sClient.Delete(ctx, getRun(ns, "kept"))).To(Succeed())
		Eventually(func() []string { return append(inResources(), inSecrets()...) }, timeout, interval).Should(BeEmpty())
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
		// As the steps keep them (TerraformRunRecords, the plan in clear
		// in a Secret).
		steps := records.NewRouter(clientset, &metav1.OwnerReference{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: owner.Name, UID: owner.UID})
		const marker = "PLAN-SECRET-VALUE-71d3"
		var ids []string
		for i, d := range []string{"m1", "m2", "m3"} {
			prev := "" // the first run is whichever the manager starts (see above)
			if i > 0 {
				prev = runID(ns, "moved")()
				patchRun(ns, "moved", func(r *infrav1.TerraformRun) { r.Annotations = map[string]string{infrav1.RunRequestAnnotation: d} })
			}
			s := g.nextRun(ns, "moved", prev)
			id := s.Key().Name
			ids = append(ids, id)
			Expect(steps.Put(ctx, records.Key{Namespace: ns, Run: "moved", RunID: id, Step: "plan", Kind: records.KindLog}, []byte("log of "+id))).To(Succeed())
			Expect(steps.Put(ctx, records.Key{Namespace: ns, Run: "moved", RunID: id, Step: "plan", Kind: records.KindPlanJSON}, []byte(`{"password":"(sensitive value)"}`))).To(Succeed())
			Expect(steps.Put(ctx, records.Key{Namespace: ns, Run: "moved", RunID: id, Step: "plan", Kind: records.KindPlanJSONSensitive}, []byte(`{"password":"`+marker+`"}`))).To(Succeed())
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
		Eventually(inStore(objects), timeout, interval).Should(Equal([]string{
			ids[1] + "/log", ids[1] + "/plan-sensitive.json", ids[1] + "/plan.json",
			ids[2] + "/log", ids[2] + "/plan-sensitive.json", ids[2] + "/plan.json",
		}), "the records of the runs in the history (keepRecords 2) are in the object store, from both stores")
		Eventually(inStore(steps), timeout, interval).Should(BeEmpty(), "and no longer in TerraformRunRecords or Secrets")
		raw, err := objects.Raw(ctx, records.Key{Namespace: ns, Run: "moved", RunID: ids[2], Step: "plan", Kind: records.KindPlanJSONSensitive})
		Expect(err).NotTo(HaveOccurred())
		Expect(string(raw)).NotTo(ContainSubstring(marker), "nothing in clear in the object store")

		By("kubectl tfrun logs --run asks the manager, which brings the run's records back for a while, each kind into its store")
		var out, errOut bytes.Buffer
		flags := genericclioptions.NewConfigFlags(false)
		flags.Namespace = &ns
		o := &plugin.Options{IOStreams: genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}, Flags: flags, Client: k8sClient, Clientset: clientset, Engines: engines.All()}
		cmd := plugin.NewCommand(o)
		cmd.SetArgs([]string{"logs", "moved", "--run", ids[1], "--step", "plan"})
		Expect(cmd.ExecuteContext(ctx)).To(Succeed())
		Expect(out.String()).To(Equal("log of " + ids[1]))
		recs, err := steps.List(ctx, ns, "moved")
		Expect(err).NotTo(HaveOccurred())
		Expect(recs).To(HaveLen(3))
		for _, r := range recs {
			Expect(r.RunID).To(Equal(ids[1]))
			Expect(r.Restored).To(BeTrue())
		}
		Expect(inStore(&records.ResourceStore{Client: clientset})()).To(Equal([]string{ids[1] + "/log", ids[1] + "/plan.json"}), "the log and the masked plan back as TerraformRunRecords")
		Expect(inStore(&records.SecretStore{Client: clientset})()).To(Equal([]string{ids[1] + "/plan-sensitive.json"}), "the plan in clear back as a Secret")
		Eventually(inStore(steps), timeout, interval).Should(BeEmpty(), "the copies go after the restore TTL")
		Expect(inStore(objects)()).To(HaveLen(6), "the object store still has them")

		By("deleting the TerraformRun deletes its records from the object store")
		Expect(k8sClient.Delete(ctx, getRun(ns, "moved"))).To(Succeed())
		Eventually(inStore(objects), timeout, interval).Should(BeEmpty())
	})
})
