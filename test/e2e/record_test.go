//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines"
	"github.com/opr8r/opr8r/pkg/engine"
)

// record keeps, when E2E_RECORD_DIR is set, the real objects of a run's
// current child in one of the states the engines' simulators play: the
// child and the step objects its engine made (engine.RelatedLister), as
// the API server has them. They become the engine's
// testdata/recorded/<state>.yaml, which the offline contract suite
// (engines/enginestest) checks its simulator against: a simulator that
// drifts from the real engine fails there.
func (e *env) record(t *testing.T, run *infrav1.TerraformRun, state string) {
	t.Helper()
	if run.Status.Run != nil {
		e.recordChild(t, run.Status.Run.Engine, run.Status.Run.Child.Name, state)
	}
}

// recordChild records a child of an engine (record).
func (e *env) recordChild(t *testing.T, engineName infrav1.EngineName, childName, state string) {
	t.Helper()
	dir := os.Getenv("E2E_RECORD_DIR")
	if dir == "" {
		return
	}
	reg, err := engine.NewRegistry(engines.All()...)
	if err != nil {
		t.Fatal(err)
	}
	eng, ok := reg.Get(engineName)
	if !ok {
		t.Fatalf("recording: no engine %q", engineName)
	}
	scheme, err := engine.Scheme(engines.All())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	child := eng.NewChild()
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: childName}, child); err != nil {
		t.Fatalf("recording %s: %v", state, err)
	}
	objs := []client.Object{child}
	if rl, ok := eng.(engine.RelatedLister); ok {
		related, err := rl.Related(ctx, c, child)
		if err != nil {
			t.Fatalf("recording %s: %v", state, err)
		}
		objs = append(objs, related...)
	}
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
	for _, o := range objs {
		gvk, err := c.GroupVersionKindFor(o)
		if err != nil {
			t.Fatal(err)
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetGroupVersionKind(gvk)
		u.SetManagedFields(nil)
		list.Items = append(list.Items, *u)
	}
	b, err := yaml.Marshal(list.UnstructuredContent())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, string(eng.Name()), state+".yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %s of %s: %s", state, childName, path)
}

// allEngines are the names of every engine opr8r ships (engines.All): the
// scenarios run on each, so the cluster (cluster.sh) must install each
// one's controller.
func allEngines() []string {
	var out []string
	for _, e := range engines.All() {
		out = append(out, string(e.Name()))
	}
	return out
}
