// Package integration runs the real manager against a real kube-apiserver and
// etcd (envtest) with every engine's CRDs installed. No engine controller
// runs: each engine's simulator (its test kit) plays its part by writing
// status with the engine's own types.
package integration

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/opr8r/opr8r/engines/enginestest"
	"github.com/opr8r/opr8r/pkg/engine"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/opr8r/opr8r/engines"
	"github.com/opr8r/opr8r/pkg/egress"
	"github.com/opr8r/opr8r/pkg/manager"
	"github.com/opr8r/opr8r/pkg/notify"
	"github.com/opr8r/opr8r/pkg/receiver"
	"github.com/opr8r/opr8r/pkg/testutil"
	"github.com/opr8r/opr8r/test/envtestutil"
)

// progressTimeout is short so the no-progress test is quick; the scenarios
// move well within it.
const progressTimeout = 6 * time.Second

var (
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.Client
	clientset kubernetes.Interface
	mgrLogs   = &syncBuffer{}
	stopMgr   context.CancelFunc
	mgrDone   chan struct{}
)

// syncBuffer collects the manager's log output for the secret-leak scan.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "TerraformRun integration (envtest + every engine's CRDs)")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.MultiWriter(GinkgoWriter, mgrLogs)), zap.UseDevMode(true)))
	var err error
	testEnv, cfg, err = envtestutil.Start()
	Expect(err).NotTo(HaveOccurred())
	Expect(envtestutil.InstallKitCRDs(context.Background(), cfg, enginestest.Kits())).To(Succeed())
	scheme, err := engine.Scheme(engines.All())
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	clientset = kubernetes.NewForConfigOrDie(cfg)
	startManager()
})

var _ = AfterSuite(func() {
	stopManager()
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// testManagerOptions are the manager's options in the suite: short
// timeouts, checks as often as a spec asks, no cap on active runs.
func testManagerOptions() manager.Options {
	return manager.Options{
		Engines:          engines.All(),
		DefaultEngine:    engine.DefaultEngine(engines.All()),
		Engine:           testutil.Config,
		DestroyTimeout:   time.Minute,
		ProgressTimeout:  progressTimeout,
		EnginePollPeriod: 200 * time.Millisecond,
		MinCheckInterval: time.Second,
		SealKey:          testutil.SealKey,
		Receiver:         &receiver.Server{Addr: "127.0.0.1:0"},
		// The sinks listen on 127.0.0.1, which production refuses.
		Notify: &notify.Dispatcher{HTTP: egress.Client(true), Backoff: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}},
	}
}

// suiteReceiver is the webhook server of the manager startManager started.
var suiteReceiver *receiver.Server

// startManager starts the production manager setup against envtest, with
// the suite's options changed by opts.
func startManager(opts ...func(*manager.Options)) { startManagerIn(nil, opts...) }

// startManagerIn starts the manager watching only the given namespaces
// (nil: all).
func startManagerIn(namespaces []string, opts ...func(*manager.Options)) {
	scheme, err := engine.Scheme(engines.All())
	Expect(err).NotTo(HaveOccurred())
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     scheme,
		Cache:      manager.CacheOptions(namespaces, engines.All()),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: ctrlConfigSkipNameValidation(),
	})
	Expect(err).NotTo(HaveOccurred())
	o := testManagerOptions()
	for _, f := range opts {
		f(&o)
	}
	r, err := manager.Setup(mgr, o)
	Expect(err).NotTo(HaveOccurred())
	suiteReceiver = o.Receiver
	ctx, cancel := context.WithCancel(context.Background())
	stopMgr = cancel
	mgrDone = make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(mgrDone)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	// The manager watches an engine's children once it sees the engine's
	// CRD, and its cache lists them a moment later. A child made and deleted
	// in that moment would never be seen, and nothing else wakes a run whose
	// status a spec wrote by hand; so specs start once every engine's
	// children are watched and listed.
	for _, e := range o.Engines {
		Eventually(func() bool { return r.Available.IsAvailable(e.Name()) }, 30*time.Second, 50*time.Millisecond).Should(BeTrue(), "engine %s", e.Name())
		_, err := mgr.GetCache().GetInformer(ctx, e.NewChild())
		Expect(err).NotTo(HaveOccurred())
	}
}

func stopManager() {
	if stopMgr != nil {
		stopMgr()
		Eventually(mgrDone, 30*time.Second).Should(BeClosed())
		stopMgr = nil
	}
}
