// Package nocrd starts the manager against an API server without the
// engines' CRDs: runs must stall with EngineUnavailable, the manager must
// keep running, and installing an engine's CRDs later must let its runs
// continue.
package nocrd

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/opr8r/opr8r/engines/enginestest"

	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/engine/enginetest"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines"
	"github.com/opr8r/opr8r/pkg/manager"
	"github.com/opr8r/opr8r/pkg/testutil"
	"github.com/opr8r/opr8r/test/envtestutil"
)

func TestNoEngineCRD(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "engine CRD missing")
}

var _ = It("stalls runs with EngineUnavailable without crashing, and recovers when the CRD is installed", func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter)))
	env, cfg, err := envtestutil.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)

	scheme, err := engine.Scheme(engines.All())
	Expect(err).NotTo(HaveOccurred())
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme, Cache: manager.CacheOptions(nil, engines.All()),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "127.0.0.1:18081",
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(mgr.AddHealthzCheck("healthz", healthz.Ping)).To(Succeed())
	_, err = manager.Setup(mgr, manager.Options{
		Engines: engines.All(), DefaultEngine: engine.DefaultEngine(engines.All()),
		Engine: testutil.Config, EnginePollPeriod: 200 * time.Millisecond, SealKey: testutil.SealKey,
	})
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	DeferCleanup(func() { cancel(); Eventually(done, 30*time.Second).Should(Receive(BeNil())) })

	c, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	// Every engine with CRDs of its own: its runs wait for them.
	var cases []enginetest.Kit
	for _, k := range enginestest.Kits() {
		if k.CRDs != nil {
			cases = append(cases, k)
		}
	}
	Expect(cases).NotTo(BeEmpty())
	for _, k := range cases {
		name, kind := k.Engine.Name(), k.Engine.ChildGVK().Kind
		count := func() int {
			list := k.Engine.NewChildList()
			Expect(c.List(ctx, list, client.InNamespace("default"))).To(Succeed())
			return apimeta.LenList(list)
		}
		By("a run on " + string(name) + " without its CRD stalls")
		run := testutil.MakeRun("waits-"+string(name), "default").Engine(name).Obj()
		run.UID = ""
		Expect(c.Create(ctx, run)).To(Succeed())
		stalled := func() string {
			got := &infrav1.TerraformRun{}
			Expect(c.Get(ctx, client.ObjectKeyFromObject(run), got)).To(Succeed())
			if s := apimeta.FindStatusCondition(got.Status.Conditions, infrav1.StalledCondition); s != nil {
				return string(s.Status) + "/" + s.Reason + ": " + s.Message
			}
			return ""
		}
		Eventually(stalled, 20*time.Second, 100*time.Millisecond).Should(HavePrefix("True/EngineUnavailable: engine \"" + string(name) + "\" is unavailable: the " + kind + " CRD"))

		By("the manager is still alive and healthy")
		Consistently(done, 2*time.Second).ShouldNot(Receive())
		resp, err := http.Get("http://127.0.0.1:18081/healthz")
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
		_ = resp.Body.Close()

		By("installing " + string(name) + "'s CRDs lets the run continue by itself")
		Expect(envtestutil.InstallKitCRDs(ctx, cfg, []enginetest.Kit{k})).To(Succeed())
		Eventually(count, 40*time.Second, 200*time.Millisecond).Should(Equal(1))
		Eventually(stalled, 10*time.Second, 100*time.Millisecond).Should(BeEmpty())
	}
})
