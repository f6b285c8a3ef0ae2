// Command opr8r-dev is the one-command local start: without a cluster it
// starts a local control plane (the etcd and kube-apiserver the tests use),
// installs opr8r's and the engines' CRDs, runs the manager, applies an example and
// prints what happened. With KUBECONFIG set it runs the manager there.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/opr8r/opr8r/engines/enginestest"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/manager"
	"github.com/opr8r/opr8r/test/envtestutil"
)

func main() {
	example := flag.String("example", "examples/inline.yaml", "TerraformRun to apply.")
	once := flag.Bool("once", false, "Exit after showing the run (instead of running until Ctrl-C).")
	flag.Parse()
	if err := run(*example, *once); err != nil {
		fmt.Fprintln(os.Stderr, "opr8r-dev:", err)
		os.Exit(1)
	}
}

func run(example string, once bool) error {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	fmt.Println("==> starting a local control plane (etcd + kube-apiserver from bin/)")
	env, cfg, err := envtestutil.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	fmt.Println("==> installing the engines' CRDs from the pinned modules")
	if err := envtestutil.InstallKitCRDs(ctx, cfg, enginestest.Kits()); err != nil {
		return err
	}
	kubeconfig := filepath.Join(envtestutil.RepoRoot(), "bin", "dev.kubeconfig")
	if err := writeKubeconfig(env, kubeconfig); err != nil {
		return err
	}

	engines := engines.All()
	scheme, err := engine.Scheme(engines)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Cache: manager.CacheOptions(nil, engines), Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return err
	}
	sealKey := make([]byte, 32)
	if _, err := rand.Read(sealKey); err != nil {
		return err
	}
	if _, err := manager.Setup(mgr, manager.Options{
		Engines: engines, DefaultEngine: engine.DefaultEngine(engines),
		Engine:  engine.Config{StepImage: engine.DefaultStepImage, TerraformImage: engine.DefaultTerraformImage, RunnerServiceAccount: engine.DefaultRunnerServiceAccount},
		SealKey: sealKey, // a control plane of its own, for this process only
	}); err != nil {
		return err
	}
	go func() { _ = mgr.Start(ctx) }()
	fmt.Println("==> manager started")

	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	b, err := os.ReadFile(example)
	if err != nil {
		return err
	}
	tr := &infrav1.TerraformRun{}
	if err := yaml.UnmarshalStrict(b, tr); err != nil {
		return fmt.Errorf("%s: %w", example, err)
	}
	if err := c.Create(ctx, tr); err != nil {
		return fmt.Errorf("applying %s: %w", example, err)
	}
	fmt.Printf("==> applied %s (TerraformRun %s/%s)\n", example, tr.Namespace, tr.Name)

	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		_ = c.Get(ctx, client.ObjectKeyFromObject(tr), tr)
		if tr.Status.Run != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if tr.Status.Run == nil {
		return fmt.Errorf("the manager created no child within 30s")
	}
	fmt.Printf("==> %s %s created (engine %s)\n", tr.Status.Run.Child.Kind, tr.Status.Run.ID, tr.Status.Run.Engine)
	fmt.Printf("==> run status: phase=%s, %s\n", tr.Status.Phase, conditionLine(tr))
	fmt.Printf(`
This local control plane runs no engine controller, so the %s stays Pending.
On a cluster with the engine, the run reaches the approval gate and you approve it:

  export KUBECONFIG=%s PATH=$PWD/bin:$PATH     # bin/kubectl-tfrun is the plugin
  kubectl tfrun list -n %s                    # NAME ENGINE PHASE PLAN STEP READY AGE
  kubectl tfrun render -f %s                  # the child, offline
  kubectl tfrun plan %s -n %s                 # once planned: the readable plan and its digest
  kubectl tfrun approve %s -n %s              # approves exactly the plan waiting
%s`, tr.Status.Run.Child.Kind, kubeconfig, tr.Namespace, example, tr.Name, tr.Namespace, tr.Name, tr.Namespace, engineHint(engines, tr))
	if once {
		return nil
	}
	fmt.Println("\nThe control plane and manager keep running; Ctrl-C stops them.")
	<-ctx.Done()
	return nil
}

// engineHint is the run's engine's own way to approve, if it has one.
func engineHint(engines []engine.Engine, tr *infrav1.TerraformRun) string {
	for _, e := range engines {
		if h, ok := e.(engine.ApprovalHinter); ok && e.Name() == tr.Status.Run.Engine {
			return "  # " + h.ApprovalHint(tr.Namespace, tr.Status.Run.ID) + "\n"
		}
	}
	return ""
}

func conditionLine(tr *infrav1.TerraformRun) string {
	out := ""
	for _, c := range tr.Status.Conditions {
		out += fmt.Sprintf("%s=%s(%s) ", c.Type, c.Status, c.Reason)
	}
	return out
}

// writeKubeconfig writes an admin kubeconfig for the local control plane,
// so kubectl can be pointed at it.
func writeKubeconfig(env *envtest.Environment, path string) error {
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "opr8r-dev", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, kc, 0o600)
}
