package integration

import (
	"time"

	"github.com/opr8r/opr8r/pkg/engine"
	"github.com/opr8r/opr8r/pkg/names"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines/enginestest"
	"github.com/opr8r/opr8r/pkg/engine/enginetest"
)

// engineSim plays an engine's controller for one child (enginetest.Sim),
// so the conformance suite drives every engine through the same scenarios.
type engineSim = enginetest.Sim

// engineCase is one engine of the conformance suite: its test kit.
type engineCase struct {
	name infrav1.EngineName
	kit  enginetest.Kit
}

// sim returns the simulator for a child.
func (e engineCase) sim(key client.ObjectKey) engineSim { return e.kit.NewSim(simEnv(), key) }

// children lists the engine's children (objects a TerraformRun owns) in a
// namespace.
func (e engineCase) children(ns string) []client.Object {
	return enginetest.Children(simEnv(), e.kit.Engine, ns)
}

// engineCases is the conformance suite's engine list: every engine's kit
// (engines/enginestest).
var engineCases = func() []engineCase {
	var out []engineCase
	for _, k := range enginestest.Kits() {
		out = append(out, engineCase{name: k.Engine.Name(), kit: k})
	}
	return out
}()

// buildRequest is the request the manager makes for a run's child on an
// engine.
func buildRequest(e engineCase, run *infrav1.TerraformRun, typ infrav1.RunType, n int64) engine.Request {
	eff := pipeline.Defaults(run, e.name, testutil.Config)
	return engine.Request{Run: eff, Type: typ, Name: names.ChildName(run.Name, typ, n), Number: n, SpecHash: pipeline.SpecHash(eff), Config: testutil.Config}
}

// allStepObjects are empty lists of every kind any engine makes for a
// child's steps.
func allStepObjects() []client.ObjectList {
	var out []client.ObjectList
	for _, e := range engineCases {
		if e.kit.StepObjects != nil {
			out = append(out, e.kit.StepObjects()...)
		}
	}
	return out
}

func simEnv() enginetest.Env { return simEnvWithin(timeout) }

// simEnvWithin is the simulators' environment with its own time limit for
// what a simulator waits for from the manager (the Job engine's step Jobs,
// which the manager's driver creates).
func simEnvWithin(limit time.Duration) enginetest.Env {
	return enginetest.Env{Client: k8sClient, Writes: &simWrites, Timeout: limit, Interval: interval}
}

func digestOf(s string) string { return enginetest.Digest(s) }

func ctrlConfigSkipNameValidation() config.Controller {
	// The manager is restarted inside one process; controller names must
	// not be checked for uniqueness across those restarts.
	return config.Controller{SkipNameValidation: ptr.To(true)}
}
