package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opr8r/opr8r/pkg/engine"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines"
	"github.com/opr8r/opr8r/pkg/manager"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// chaos injects API faults into the manager's client and crashes the manager
// at chosen points. Its dice are seeded, so a failing run can be repeated.
type chaos struct {
	mu      sync.Mutex
	rnd     *rand.Rand
	faults  atomic.Int64
	crashes atomic.Int64
	// deferred counts the crashes held back until the manager had
	// reached every run (unseen).
	deferred atomic.Int64
	crash    chan string
	disabled atomic.Bool
	// armed is when crashes may happen again (unix nanoseconds): a
	// restarted manager lives at least chaosMinUptime. Without it, on a
	// loaded machine the crashes (a share of the manager's own writes)
	// came every few seconds, and a run listed late after each restart
	// never got its pass: starved for minutes, not a fault of the manager's.
	armed atomic.Int64
	// unseen are the TerraformRuns that existed when the current manager
	// started and that it has not read yet (each pass starts by reading
	// its run): crashes wait until it has reached every one. Without it, a
	// manager that crashed every chaosMinUptime on a slower machine did not
	// get through its backlog of the finished runs listed before the
	// active ones, and an active run went without a pass for 90 s (the step
	// Job it was due never made: CI, stop 45). A manager that crashes
	// faster than it can look at each run once makes no progress by
	// definition; the test is of what survives crashes, not of that.
	seenMu sync.Mutex
	unseen map[types.NamespacedName]bool
	// startedAt is when the current manager started; slowest is the longest
	// a manager took to reach every run.
	startedAt time.Time
	slowest   time.Duration
}

// started records a (re)started manager and the runs it must reach.
func (c *chaos) started(ns string) {
	unseen := map[types.NamespacedName]bool{}
	if ns != "" {
		runs := &infrav1.TerraformRunList{}
		Expect(k8sClient.List(context.Background(), runs, client.InNamespace(ns))).To(Succeed())
		for _, r := range runs.Items {
			unseen[client.ObjectKeyFromObject(&r)] = true
		}
	}
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	c.unseen, c.startedAt = unseen, time.Now()
	c.arm()
}

// saw records the manager's read of a run.
func (c *chaos) saw(key types.NamespacedName) {
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	if !c.unseen[key] {
		return
	}
	delete(c.unseen, key)
	if len(c.unseen) == 0 {
		c.slowest = max(c.slowest, time.Since(c.startedAt))
	}
}

// slowestReach is the longest a manager took to reach every run.
func (c *chaos) slowestReach() time.Duration {
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	return c.slowest
}

// backlog is how many runs the current manager has not reached yet.
func (c *chaos) backlog() int {
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	return len(c.unseen)
}

// chaosMinUptime is how long a manager runs after a (re)start before the
// next crash.
const chaosMinUptime = 5 * time.Second

// arm lets crashes happen again chaosMinUptime from now.
func (c *chaos) arm() { c.armed.Store(time.Now().Add(chaosMinUptime).UnixNano()) }

func (c *chaos) roll(p float64) bool {
	if c.disabled.Load() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rnd.Float64() < p
}

func (c *chaos) fault(what string) error {
	c.faults.Add(1)
	return apierrors.NewInternalError(errors.New("chaos: " + what))
}

// crashHere asks the supervisor to kill the manager now.
func (c *chaos) crashHere(where string, p float64) {
	if time.Now().UnixNano() < c.armed.Load() || !c.roll(p) {
		return
	}
	if n := c.backlog(); n > 0 {
		c.deferred.Add(1)
		GinkgoWriter.Printf("chaos: crash %s deferred: the manager has not reached %d runs yet\n", where, n)
		return
	}
	select {
	case c.crash <- where:
	default:
	}
}

// isChild tells whether obj is of a kind that some engine makes its child
// (from the engines' own ChildGVK, so a new engine is covered too).
func isChild(cl client.Client, obj client.Object) bool {
	gvk, err := apiutil.GVKForObject(obj, cl.Scheme())
	if err != nil {
		return false
	}
	for _, e := range engineCases {
		if e.kit.Engine.ChildGVK() == gvk {
			return true
		}
	}
	return false
}

func (c *chaos) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*infrav1.TerraformRun); ok {
				c.saw(key)
			}
			return cl.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.Secret); ok && c.roll(0.1) {
				return c.fault("Secret create refused")
			}
			if err := cl.Create(ctx, obj, opts...); err != nil {
				return err
			}
			if isChild(cl, obj) {
				// Between creating a child and recording it in status.
				c.crashHere("after creating a child", 0.08)
				if c.roll(0.15) {
					return c.fault("child created, response lost")
				}
			}
			if s, ok := obj.(*corev1.Secret); ok && s.Labels[infrav1.ComponentLabel] == "outputs" {
				c.crashHere("during outputs projection", 0.1)
			}
			return nil
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if isChild(cl, obj) && c.roll(0.1) {
				return apierrors.NewConflict(schema.GroupResource{Resource: "workflows"}, obj.GetName(), errors.New("chaos"))
			}
			return cl.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*infrav1.TerraformRun); ok {
				// Finalizer handling.
				c.crashHere("during finalizer handling", 0.05)
				if c.roll(0.1) {
					return c.fault("metadata patch refused")
				}
			}
			return cl.Patch(ctx, obj, patch, opts...)
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if c.roll(0.15) {
				c.faults.Add(1)
				return apierrors.NewConflict(schema.GroupResource{Resource: "terraformruns"}, obj.GetName(), errors.New("chaos"))
			}
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
}

// startInterceptedManager starts the production setup with a client whose
// calls pass through funcs (fault injection, write counting).
func startInterceptedManager(funcs interceptor.Funcs, opts ...func(*manager.Options)) (context.CancelFunc, chan struct{}) {
	return startShardManager(manager.Shard{}, funcs, opts...)
}

// startShardManager is startInterceptedManager for one shard of the runs.
func startShardManager(shard manager.Shard, funcs interceptor.Funcs, opts ...func(*manager.Options)) (context.CancelFunc, chan struct{}) {
	scheme, err := engine.Scheme(engines.All())
	Expect(err).NotTo(HaveOccurred())
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme, Cache: manager.ShardCacheOptions(nil, engines.All(), shard),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: ctrlConfigSkipNameValidation(),
		NewClient: func(rc *rest.Config, o client.Options) (client.Client, error) {
			cl, err := client.NewWithWatch(rc, o) // reads from the cache, as the manager's own client does
			if err != nil {
				return nil, err
			}
			return interceptor.NewClient(cl, funcs), nil
		},
	})
	Expect(err).NotTo(HaveOccurred())
	o := manager.Options{
		Engines: engines.All(), DefaultEngine: infrav1.EngineArgo,
		Engine: testutil.Config, DestroyTimeout: 5 * time.Minute, EnginePollPeriod: 100 * time.Millisecond,
		MinCheckInterval: time.Second, Shard: shard, SealKey: testutil.SealKey,
	}
	for _, f := range opts {
		f(&o)
	}
	_, err = manager.Setup(mgr, o)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		_ = mgr.Start(ctx)
	}()
	return cancel, done
}

const chaosLifecycles = 200

var _ = Describe("chaos", Serial, func() {
	It("runs 200 lifecycles on every engine through API faults and manager crashes: no duplicate children, no lost outputs, no stuck finalizers", func() {
		stopManager() // the chaos manager replaces the suite's
		DeferCleanup(startManager)

		ns := newNamespace()
		ch := &chaos{rnd: rand.New(rand.NewSource(20261123)), crash: make(chan string, 1)}
		ch.started("")
		cancel, done := startInterceptedManager(ch.funcs())
		restarts := 0
		supervisorDone := make(chan struct{})
		stopSupervisor := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(supervisorDone)
			for {
				select {
				case where := <-ch.crash:
					cancel()
					<-done
					ch.crashes.Add(1)
					restarts++
					GinkgoWriter.Printf("chaos: manager crashed %s; restarting (the last one reached every run after %s at most)\n", where, ch.slowestReach())
					ch.started(ns)
					cancel, done = startInterceptedManager(ch.funcs())
				case <-stopSupervisor:
					return
				}
			}
		}()

		long := 90 * time.Second
		var failures atomic.Int64
		lifecycle := func(i int) {
			defer GinkgoRecover()
			g := given{engineCases[i%len(engineCases)]}
			name := fmt.Sprintf("c%03d", i)
			manual := i%4 == 0
			remove := i%2 == 0
			w := g.run(name, ns)
			if !manual {
				w = w.Auto()
			}
			Expect(k8sClient.Create(context.Background(), w.Obj())).To(Succeed())
			s := g.activeWithin(ns, name, long)
			s.Start()
			digest := digestOf(name)
			s.Plan(1, 0, 0, digest)
			if manual {
				s.Suspend(digest)
				Eventually(phase(ns, name), long, interval).Should(Equal(infrav1.RunAwaitingApproval))
				patchRun(ns, name, func(r *infrav1.TerraformRun) { r.Spec.Approval.ApprovedPlan = digest })
				Eventually(gateState(s), long, interval).Should(Equal("Approved"))
			}
			s.FinishApply(`{"a":{"sensitive":false,"value":"1"},"b":{"sensitive":true,"value":"2"}}`)
			Eventually(condReason(ns, name, infrav1.ReadyCondition), long, interval).Should(Equal("True/Succeeded"))
			if remove {
				Expect(k8sClient.Delete(context.Background(), getRun(ns, name))).To(Succeed())
				Eventually(func() infrav1.RunType {
					r := &infrav1.TerraformRun{}
					if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, r); err != nil || r.Status.Run == nil {
						return ""
					}
					return r.Status.Run.Type
				}, long, interval).Should(Equal(infrav1.RunDestroy))
				d := g.activeWithin(ns, name, long)
				if manual {
					g.destroyApproved(d, ns, name, long)
				} else {
					d.SucceedDestroy()
				}
				Eventually(gone(ns, name), long, interval).Should(BeTrue())
			}
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, 20)
		for i := 0; i < chaosLifecycles; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func(i int) {
				defer wg.Done()
				defer func() { <-sem }()
				defer func() {
					if r := recover(); r != nil {
						failures.Add(1)
						panic(r)
					}
				}()
				lifecycle(i)
			}(i)
		}
		wg.Wait()
		close(stopSupervisor)
		<-supervisorDone
		ch.disabled.Store(true)
		cancel()
		<-done

		By("checking every run's children, outputs and finalizers")
		duplicates, lostOutputs, stuck, destroyRuns := 0, 0, 0, 0
		children := map[string][]client.Object{}
		for _, e := range engineCases {
			for _, c := range e.children(ns) {
				run := c.GetLabels()[infrav1.RunNameLabel]
				children[run] = append(children[run], c)
			}
		}
		for i := 0; i < chaosLifecycles; i++ {
			name := fmt.Sprintf("c%03d", i)
			apply, destroy := 0, 0
			for _, c := range children[name] {
				switch c.GetLabels()[infrav1.RunTypeLabel] {
				case "apply":
					apply++
				case "destroy":
					destroy++
				}
			}
			if apply != 1 {
				duplicates += apply - 1
				AddReportEntry(fmt.Sprintf("%s has %d apply children", name, apply))
			}
			if i%2 == 0 {
				destroyRuns++
				if destroy != 1 {
					duplicates += destroy - 1
					AddReportEntry(fmt.Sprintf("%s has %d destroy children", name, destroy))
				}
				if !gone(ns, name)() {
					stuck++
				}
				continue
			}
			sec := &corev1.Secret{}
			if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-outputs"}, sec); err != nil || len(sec.Data) != 2 || string(sec.Data["a"]) != "1" || string(sec.Data["b"]) != "2" {
				lostOutputs++
			}
		}
		AddReportEntry(fmt.Sprintf("chaos: %d lifecycles, %d injected API faults, %d manager crashes (%d more held back until the manager had reached every run), %d destroys; a restarted manager reached every run within %s at most", chaosLifecycles, ch.faults.Load(), ch.crashes.Load(), ch.deferred.Load(), destroyRuns, ch.slowestReach().Round(time.Millisecond)))
		Expect(failures.Load()).To(BeZero())
		Expect(ch.faults.Load()).To(BeNumerically(">", 0), "no fault was injected; the test proves nothing")
		Expect(ch.crashes.Load()).To(BeNumerically(">", 0), "the manager never crashed; the test proves nothing")
		Expect(duplicates).To(Equal(0))
		Expect(lostOutputs).To(Equal(0))
		Expect(stuck).To(Equal(0))
		checkReliabilityRow("chaos lifecycles, both engines", fmt.Sprint(chaosLifecycles))
		checkReliabilityRow("duplicate children after chaos", fmt.Sprint(duplicates))
		checkReliabilityRow("lost outputs after chaos", fmt.Sprint(lostOutputs))
		checkReliabilityRow("stuck finalizers after chaos", fmt.Sprint(stuck))
	})
})
