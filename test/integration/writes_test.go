package integration

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// simWrites counts the engine simulators' writes to children and their
// step objects: the child changes the manager observes.
var simWrites atomic.Int64

// writeCounter counts the manager's accepted API writes by "verb kind" in
// one namespace: the manager also reconciles the runs that other specs left
// in theirs (some with scheduled checks), and in a randomized spec order
// those come and go; they are not this spec's.
// With a scope set, it counts only writes to the run of that name and its
// own objects (named "<run>-..."): a late write for an earlier run, which a
// loaded CI machine may delay into the next window, is not this run's.
type writeCounter struct {
	mu        sync.Mutex
	namespace string
	counts    map[string]int
	scope     string
	// names keeps "verb kind namespace/name" of each counted write, so a
	// failure says which object was written, not only how often.
	names []string
}

func (w *writeCounter) add(c client.Client, verb string, obj client.Object) {
	gvk, _ := apiutil.GVKForObject(obj, c.Scheme())
	w.mu.Lock()
	defer w.mu.Unlock()
	if obj.GetNamespace() != w.namespace {
		return
	}
	if w.scope != "" && obj.GetName() != w.scope && !strings.HasPrefix(obj.GetName(), w.scope+"-") {
		return
	}
	w.counts[verb+" "+gvk.Kind]++
	w.names = append(w.names, verb+" "+gvk.Kind+" "+obj.GetNamespace()+"/"+obj.GetName())
}

// resetTo clears the counts and scopes them to one run ("" for all).
func (w *writeCounter) resetTo(scope string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts = map[string]int{}
	w.names = nil
	w.scope = scope
}

// quiet waits for a window of two seconds without a write in the
// namespace, then scopes the counts to one run ("" for all). The counter
// learns of a write only when the manager's call returns, which on a
// loaded machine can be after the test has seen the write's effect: a count
// must never start or end on a write in flight.
func (w *writeCounter) quiet(scope string) {
	GinkgoHelper()
	Eventually(func() int {
		n := len(w.written())
		w.resetTo(scope)
		return n
	}, timeout, 2*time.Second).Should(BeZero(), "the manager keeps writing: %s", w.written())
}

// written lists the objects written since the last reset, in order.
func (w *writeCounter) written() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.names, "; ")
}

// count records a write that the API server accepted. A write refused for
// a stale resourceVersion (a reconcile on a cache that lags) changed
// nothing and is retried; it is not counted.
func (w *writeCounter) count(c client.Client, verb string, obj client.Object, err error) error {
	if err == nil {
		w.add(c, verb, obj)
	}
	return err
}

func (w *writeCounter) snapshot() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for k, v := range w.counts {
		out[k] = v
	}
	return out
}

func (w *writeCounter) reset() {
	w.resetTo("")
}

func (w *writeCounter) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, o ...client.CreateOption) error {
			return w.count(c, "create", obj, c.Create(ctx, obj, o...))
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, o ...client.UpdateOption) error {
			return w.count(c, "update", obj, c.Update(ctx, obj, o...))
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, o ...client.PatchOption) error {
			return w.count(c, "patch", obj, c.Patch(ctx, obj, p, o...))
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, o ...client.DeleteOption) error {
			return w.count(c, "delete", obj, c.Delete(ctx, obj, o...))
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, o ...client.SubResourcePatchOption) error {
			return w.count(c, "patch/"+sub, obj, c.SubResource(sub).Patch(ctx, obj, p, o...))
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, o ...client.SubResourceUpdateOption) error {
			return w.count(c, "update/"+sub, obj, c.SubResource(sub).Update(ctx, obj, o...))
		},
	}
}

func describeCounts(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, m[k])
	}
	return b.String()
}

// The regression guard for the performance issue's P3: API writes are
// counted, not timed, so they are exact. Each step below waits until the
// run's status shows the change, so every observed child change is one
// reconcile.
var _ = Describe("API writes", Serial, func() {
	It("makes exactly the expected writes for a lifecycle, and none on a resync of Ready runs", func() {
		stopManager()
		DeferCleanup(startManager)
		ns := newNamespace()
		w := &writeCounter{namespace: ns, counts: map[string]int{}}
		cancel, done := startInterceptedManager(w.funcs())
		DeferCleanup(func() { cancel(); <-done })

		By("waiting until the new manager runs both engines (a probe run each)")
		for _, e := range engineCases {
			probe := "probe-" + string(e.name)
			Expect(k8sClient.Create(context.Background(), given{e}.run(probe, ns).Obj())).To(Succeed())
			Eventually(func() *infrav1.RunStatus { return getRun(ns, probe).Status.Run }, timeout, interval).ShouldNot(BeNil())
			Expect(k8sClient.Delete(context.Background(), getRun(ns, probe))).To(Succeed())
			Eventually(gone(ns, probe), timeout, interval).Should(BeTrue())
		}

		for _, e := range engineCases {
			g := given{e}
			name := "w-" + string(e.name)
			w.resetTo(name)
			Expect(k8sClient.Create(context.Background(), g.run(name, ns).Auto().Obj())).To(Succeed())
			s := g.active(ns, name)
			Eventually(phase(ns, name), timeout, interval).Should(Equal(infrav1.RunPending))
			Eventually(w.snapshot, timeout, interval).Should(HaveKeyWithValue("patch/status TerraformRun", 1))
			// The finalizer came with the user's create (the admission
			// policy opr8r-finalizer): no manager write adds it. The vars
			// and the inline source travel in the child: no ConfigMap.
			want := map[string]int{
				"create " + e.kit.Engine.ChildGVK().Kind: 1,
				"patch/status TerraformRun":              1, // the run started
			}
			maps.Copy(want, e.kit.StartWrites)
			// An engine that the reconciler drives (Jobs) makes some of its
			// start writes on the pass after the status write: wait for all of
			// them, then make sure no more come.
			Eventually(w.snapshot, timeout, interval).Should(Equal(want), "writes to start a run: %s", describeCounts(w.snapshot()))
			Consistently(w.snapshot, time.Second, interval).Should(Equal(want), "writes to start a run: %s", describeCounts(w.snapshot()))
			// The recorder writes Events with its own client, past the
			// interceptor: starting an apply run emits none.
			evs, err := clientset.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
			Expect(err).NotTo(HaveOccurred())
			for _, ev := range evs.Items {
				Expect(ev.Reason).NotTo(Equal("RunStarted"), "an apply run's start is in status, not an Event")
			}

			w.resetTo(name)
			simWrites.Store(0)
			s.Start()
			Eventually(func() int { return len(getRun(ns, name).Status.Run.Steps) }, timeout, interval).Should(BeNumerically(">=", 2))
			s.Plan(1, 0, 0, digestOf(name))
			Eventually(func() *infrav1.PlanStatus { return getRun(ns, name).Status.Plan }, timeout, interval).ShouldNot(BeNil())
			s.FinishApply(`{"a":{"sensitive":false,"value":"1"}}`)
			Eventually(condReason(ns, name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
			changes := int(simWrites.Load())
			Consistently(func() int { return w.snapshot()["patch/status TerraformRun"] }, time.Second, interval).Should(BeNumerically("<=", changes),
				"at most one status write per child change (%d changes): %s", changes, describeCounts(w.snapshot()))
			got := w.snapshot()
			if e.name == infrav1.EngineArgo {
				Expect(got["patch/status TerraformRun"]).To(Equal(3), "Argo: one status write each for started, planned and finished")
			}
			Expect(got["create Secret"]).To(Equal(1), "the outputs Secret, written once: %s", describeCounts(got))
			AddReportEntry(fmt.Sprintf("%s lifecycle writes after start: %s for %d child changes", e.name, describeCounts(got), changes))
		}

		By("without the opr8r-finalizer policy (an older cluster), the manager adds the finalizer: one write more")
		withoutPolicy(&admissionregistrationv1.MutatingAdmissionPolicyBinding{}, "opr8r-finalizer", func() {
			e := engineCases[0]
			name := "nofin"
			w.resetTo(name)
			run := given{e}.run(name, ns).Auto().Obj()
			Expect(k8sClient.Create(context.Background(), run)).To(Succeed())
			Expect(run.Finalizers).To(BeEmpty(), "created without the policy")
			Eventually(func() []string { return getRun(ns, name).Finalizers }, timeout, interval).Should(ConsistOf(infrav1.Finalizer))
			Eventually(w.snapshot, timeout, interval).Should(HaveKeyWithValue("patch TerraformRun", 1), "writes: %s", describeCounts(w.snapshot()))
			Expect(k8sClient.Delete(context.Background(), getRun(ns, name))).To(Succeed())
			Eventually(gone(ns, name), timeout, interval).Should(BeTrue())
		})

		By("inputs too large to travel in the child go in one ConfigMap: one write more")
		{
			e := engineCases[0]
			name := "large"
			w.resetTo(name)
			run := given{e}.run(name, ns).Auto().Obj()
			run.Spec.Source.Inline.Files["big.tf"] = infrav1.FileContent("# " + incompressible(40<<10))
			Expect(k8sClient.Create(context.Background(), run)).To(Succeed())
			Eventually(phase(ns, name), timeout, interval).Should(Equal(infrav1.RunPending))
			want := map[string]int{"create " + e.kit.Engine.ChildGVK().Kind: 1, "create ConfigMap": 1, "patch/status TerraformRun": 1}
			maps.Copy(want, e.kit.StartWrites)
			Eventually(w.snapshot, timeout, interval).Should(Equal(want), "writes to start a run with large inputs: %s", describeCounts(w.snapshot()))
			Expect(k8sClient.Delete(context.Background(), getRun(ns, name))).To(Succeed())
			Eventually(gone(ns, name), timeout, interval).Should(BeTrue())
		}

		By("a scheduled check that finds nothing writes status once: its record")
		for _, e := range engineCases {
			g := given{e}
			name := "c-" + string(e.name)
			rw := g.run(name, ns).Auto().Retain()
			rw.Spec.Interval = &metav1.Duration{Duration: 3 * time.Second}
			Expect(k8sClient.Create(context.Background(), rw.Obj())).To(Succeed())
			s := g.active(ns, name)
			s.Start()
			s.Plan(1, 0, 0, digestOf(name))
			s.FinishApply(`{}`)
			Eventually(condReason(ns, name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
			w.quiet(name)
			c := g.checkChild(ns, name, map[string]bool{})
			c.Start()
			c.Plan(0, 0, 0, digestOf(name+"-check"))
			c.Complete()
			lastCheck(ns, name, c.Key().Name)
			// The record is seen; its write is counted when the call returns.
			statusWrites := func() int { return w.snapshot()["patch/status TerraformRun"] }
			Eventually(statusWrites, timeout, interval).Should(Equal(1), func() string { return string(e.name) + ": status writes of a check that found nothing: " + w.written() })
			Consistently(statusWrites, time.Second, interval).Should(Equal(1), func() string { return string(e.name) + ": status writes of a check that found nothing: " + w.written() })
			got := w.snapshot()
			AddReportEntry(fmt.Sprintf("%s check without drift: %s", e.name, describeCounts(got)))
			Expect(k8sClient.Delete(context.Background(), getRun(ns, name))).To(Succeed())
		}

		By("a resync of Ready runs writes nothing")
		for i := 0; i < 20; i++ {
			e := engineCases[i%len(engineCases)]
			g := given{e}
			name := fmt.Sprintf("r%02d", i)
			Expect(k8sClient.Create(context.Background(), g.run(name, ns).Auto().Obj())).To(Succeed())
			s := g.active(ns, name)
			s.Start()
			s.Plan(1, 0, 0, digestOf(name))
			s.FinishApply(`{"a":{"sensitive":false,"value":"1"}}`)
			Eventually(condReason(ns, name, infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
		}
		// The lifecycle runs and these: the checked runs are gone.
		ready := 20 + len(engineCases)
		Eventually(func() int {
			runs := &infrav1.TerraformRunList{}
			Expect(k8sClient.List(context.Background(), runs, client.InNamespace(ns))).To(Succeed())
			return len(runs.Items)
		}, timeout, interval).Should(Equal(ready))
		By("waiting until the manager is quiet: no write in the namespace for two seconds")
		w.quiet("")
		cancel()
		<-done
		w.reset()
		cancel, done = startInterceptedManager(w.funcs()) // a fresh manager reconciles every run once
		Consistently(w.snapshot, 5*time.Second, interval).Should(BeEmpty(), func() string { return "writes on resync: " + w.written() })
		checkDocRow("performance.md", fmt.Sprintf("API writes on a resync of %d Ready runs (test)", ready), "0")
		_ = ns
	})
})

// withoutPolicy deletes one of opr8r's admission policy bindings (so the
// API server stops applying the policy, as on a cluster without it), runs
// fn, and creates the binding again as it was, waiting until it acts.
func withoutPolicy(binding client.Object, name string, fn func()) {
	GinkgoHelper()
	key := client.ObjectKey{Name: name}
	Expect(k8sClient.Get(context.Background(), key, binding)).To(Succeed())
	saved := binding.DeepCopyObject().(client.Object)
	Expect(k8sClient.Delete(context.Background(), binding)).To(Succeed())
	// The API server stops applying a policy a moment after its binding goes.
	probe := func() []string {
		r := given{engineCases[0]}.run("policy-probe", "default").Obj()
		Expect(k8sClient.Create(context.Background(), r, client.DryRunAll)).To(Succeed())
		return r.Finalizers
	}
	Eventually(probe, timeout, interval).Should(BeEmpty())
	defer func() {
		saved.SetResourceVersion("")
		saved.SetUID("")
		Expect(k8sClient.Create(context.Background(), saved)).To(Succeed())
		Eventually(probe, timeout, interval).Should(ConsistOf(infrav1.Finalizer))
	}()
	fn()
}
