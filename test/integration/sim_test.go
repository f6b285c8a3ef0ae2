package integration

import (
	"context"

	wfv1 "github.com/argoproj/argo-workflows/v3/pkg/apis/workflow/v1alpha1"
	. "github.com/onsi/gomega"
	tektonv1 "github.com/tektoncd/pipeline/pkg/apis/pipeline/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// engineSim plays an engine's controller for one child, so the conformance
// suite can drive every engine through the same scenarios. Adding an engine
// to the suite means implementing this for it and listing it in engines.
type engineSim interface {
	// key is the child's key.
	key() client.ObjectKey
	// object returns the child as stored.
	object() client.Object
	// validate runs the engine's own validation on the stored child.
	validate() error
	// start runs clone and init to success.
	start()
	// plan finishes the plan step with the given result.
	plan(add, change, destroy int, digest string)
	// suspend reaches the approval gate for the digest.
	suspend(digest string)
	// skipGate records a plan without changes: gate and apply skipped.
	skipGate()
	// gate returns the gate's state ("Pending", "Approved", "Rejected"),
	// its message and the approved digest it carries.
	gate() (state, message, digest string)
	// finishApply runs apply and export (writing the raw outputs Secret as
	// the export step does) and completes the child successfully.
	finishApply(outputsJSON string)
	// fail fails a step with terraform's message and completes the child.
	fail(step, msg string)
	// completeAfterGate completes a child whose gate was rejected.
	completeAfterGate()
	// succeedDestroy runs a destroy child to success.
	succeedDestroy()
	// cancelRequested says whether opr8r asked the child to stop.
	cancelRequested() bool
}

// engineCase is one engine of the conformance suite.
type engineCase struct {
	name infrav1.EngineName
	// sim returns the simulator for a child.
	sim func(key client.ObjectKey) engineSim
	// children counts the engine's children in a namespace.
	children func(ns string) []client.Object
}

// engines is the conformance suite's engine list.
var engines = []engineCase{
	{
		name: infrav1.EngineArgo,
		sim:  func(k client.ObjectKey) engineSim { return argoController{k: k} },
		children: func(ns string) []client.Object {
			list := &wfv1.WorkflowList{}
			Expect(k8sClient.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
			var out []client.Object
			for i := range list.Items {
				out = append(out, &list.Items[i])
			}
			return out
		},
	},
	{
		name: infrav1.EngineTekton,
		sim:  func(k client.ObjectKey) engineSim { return tektonController{k: k} },
		children: func(ns string) []client.Object {
			list := &tektonv1.PipelineRunList{}
			Expect(k8sClient.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
			var out []client.Object
			for i := range list.Items {
				out = append(out, &list.Items[i])
			}
			return out
		},
	},
}
