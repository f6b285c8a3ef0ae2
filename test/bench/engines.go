package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines"
	"github.com/opr8r/opr8r/engines/enginestest"
	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/engine/enginetest"
	"github.com/opr8r/opr8r/pkg/manager"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
	"github.com/opr8r/opr8r/test/envtestutil"
)

// enginePlayer plays one engine's controller for the bench (BENCH_ENGINE
// names it; default: the first engine whose kit has a bench player): no
// engine controller runs, so the bench builds the children a bare client
// would create and writes their status the way the engine does, with every
// field the engine writes (the kit's enginetest.BenchPlayer).
type enginePlayer struct {
	enginetest.BenchPlayer
	name infrav1.EngineName
	eng  engine.Engine
	gvr  schema.GroupVersionResource
}

// benchEngine is the engine BENCH_ENGINE names.
func benchEngine() (enginePlayer, error) {
	want := infrav1.EngineName(os.Getenv("BENCH_ENGINE"))
	var played []infrav1.EngineName
	for _, k := range enginestest.Kits() {
		if k.Bench == nil {
			continue
		}
		played = append(played, k.Engine.Name())
		if want == "" || want == k.Engine.Name() {
			gvk := k.Engine.ChildGVK()
			gvr, _ := meta.UnsafeGuessKindToResource(gvk)
			return enginePlayer{BenchPlayer: k.Bench, name: k.Engine.Name(), eng: k.Engine, gvr: gvr}, nil
		}
	}
	return enginePlayer{}, fmt.Errorf("BENCH_ENGINE=%q: the bench plays %v", want, played)
}

// playedEngines are the engines the bench can play, for the manager's
// --engines: the engines whose kits have a bench player.
func playedEngines() string {
	var out []string
	for _, k := range enginestest.Kits() {
		if k.Bench != nil {
			out = append(out, string(k.Engine.Name()))
		}
	}
	return strings.Join(out, ",")
}

// run is a TerraformRun of the bench, on the played engine.
func (p enginePlayer) run(name, ns string) *testutil.RunWrapper {
	return testutil.MakeRun(name, ns).Engine(p.name).Auto()
}

// build is the child the manager would create for run's first run.
func (p enginePlayer) build(run *infrav1.TerraformRun) (client.Object, error) {
	eff := pipeline.Defaults(run, p.name, testutil.Config)
	hash := pipeline.SpecHash(eff)
	return p.eng.Build(engine.Request{Run: eff, Type: infrav1.RunApply, Name: names.ChildName(run.Name, infrav1.RunApply, 1), Number: 1, SpecHash: hash, Config: testutil.Config})
}

// key is the key of a child in ns.
func key(ns, child string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: child} }

// plane is the bench's control plane: envtest's kube-apiserver and etcd
// with an audit log of every write and read, every engine's CRDs, and a
// client with the bench's QPS.
type plane struct {
	env      *envtest.Environment
	cfg      *rest.Config // the bench's own rate limits
	c        client.Client
	auditLog string
	stop     func()
}

// startPlane starts the control plane in tmp, with opr8r's admission
// policies when asked (as kustomize and Helm install them), and creates
// the namespaces.
func startPlane(tmp string, policies bool, namespaces ...string) (*plane, error) {
	env, cfg, auditLog, err := controlPlaneWithAudit(tmp)
	if err != nil {
		return nil, err
	}
	p := &plane{env: env, auditLog: auditLog}
	undo := onInterrupt(func() { _ = env.Stop() })
	p.stop = func() { undo(); _ = env.Stop() }
	if err := p.setUp(cfg, policies, namespaces); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

func (p *plane) setUp(cfg *rest.Config, policies bool, namespaces []string) error {
	ctx := context.Background()
	if err := envtestutil.InstallKitCRDs(ctx, cfg, enginestest.Kits()); err != nil {
		return err
	}
	if policies {
		if err := envtestutil.InstallPolicies(cfg); err != nil {
			return err
		}
	}
	scheme, err := engine.Scheme(engines.All())
	if err != nil {
		return err
	}
	p.cfg = rest.CopyConfig(cfg)
	p.cfg.QPS, p.cfg.Burst = qps, burst
	if p.c, err = client.New(p.cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	// The manager's own namespace too: it keeps its seal key there
	// (without it, every bench's manager failed at start since the seal).
	for _, ns := range append(namespaces, manager.OwnNamespace("opr8r-system")) {
		if err := p.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// tempDir makes the bench's temporary directory, removed by the returned
// function and on an interrupt.
func tempDir(prefix string) (string, func(), error) {
	tmp, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	undo := onInterrupt(func() { os.RemoveAll(tmp) })
	return tmp, func() { undo(); os.RemoveAll(filepath.Clean(tmp)) }, nil
}

// cloneDone says whether a run's status shows P2's change: the clone step
// succeeded.
func cloneDone(r *infrav1.TerraformRun) bool {
	if r.Status.Run == nil {
		return false
	}
	for _, s := range r.Status.Run.Steps {
		if s.Name == names.StepClone && s.Phase == infrav1.StepSucceeded {
			return true
		}
	}
	return false
}
