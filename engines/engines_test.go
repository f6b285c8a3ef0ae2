package engines_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/engines"
	"github.com/opr8r/opr8r/engines/enginestest"
	"github.com/opr8r/opr8r/pkg/engine"
)

// TestAPIEnumIsTheRegistry checks that spec.engine's enum in the generated
// CRD lists exactly the registered engines: an engine added to engines.All
// without its enum value (or the other way round) fails here, not at
// admission on a user's cluster.
func TestAPIEnumIsTheRegistry(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "config", "crd", "bases", "infra.opr8r.io_terraformruns.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(b, crd); err != nil {
		t.Fatal(err)
	}
	var enum []string
	for _, v := range crd.Spec.Versions {
		for _, e := range v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["engine"].Enum {
			var s string
			if err := yaml.Unmarshal(e.Raw, &s); err != nil {
				t.Fatal(err)
			}
			enum = append(enum, s)
		}
	}
	var registered []string
	for _, e := range engines.All() {
		registered = append(registered, string(e.Name()))
	}
	slices.Sort(enum)
	slices.Sort(registered)
	if diff := cmp.Diff(registered, enum); diff != "" {
		t.Errorf("spec.engine's enum (+) differs from engines.All (-): add the engine to the Enum marker in api/v1alpha1 and run make manifests\n%s", diff)
	}
}

// TestKitsAreTheRegistry checks that enginestest.Kits has one kit for each
// engine of engines.All, in the same order: the shared suites run every
// engine, and no other.
func TestKitsAreTheRegistry(t *testing.T) {
	var kits, registered []infrav1.EngineName
	for _, k := range enginestest.Kits() {
		kits = append(kits, k.Engine.Name())
	}
	for _, e := range engines.All() {
		registered = append(registered, e.Name())
	}
	if diff := cmp.Diff(registered, kits); diff != "" {
		t.Errorf("enginestest.Kits (+) differs from engines.All (-):\n%s", diff)
	}
	if _, err := engine.NewRegistry(engines.All()...); err != nil {
		t.Errorf("engines.All does not make a registry: %v", err)
	}
}
