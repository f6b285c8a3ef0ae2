package planpolicy

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// bigPlan is a plan that updates n resources (a provider-wide
// default_tags change), as FromJSON reads it.
func bigPlan(n int) Plan {
	p := Plan{Change: int64(n), HasChanges: true}
	for i := range n {
		p.ResourceChanges = append(p.ResourceChanges, ResourceChange{Address: fmt.Sprintf("module.m%d.aws_instance.web[%d]", i%50, i), Module: fmt.Sprintf("module.m%d", i%50),
			Mode: "managed", Type: "aws_instance", Name: "web", Provider: "registry.terraform.io/hashicorp/aws", Actions: []string{"update"}})
	}
	return p
}

func docPolicy(b testing.TB) *Policy {
	raw, err := os.ReadFile("../../docs/examples/plan-rules.yaml")
	if err != nil {
		b.Fatal(err)
	}
	var run infrav1.TerraformRun
	if err := yaml.Unmarshal(raw, &run); err != nil {
		b.Fatal(err)
	}
	pol, err := Compile(run.Spec.Approval.Rules)
	if err != nil {
		b.Fatal(err)
	}
	return pol
}

// BenchmarkDocRules: the rules of docs/policies.md on one plan of 1,000
// to 100,000 changed resources (docs/performance.md has the figures).
func BenchmarkDocRules(b *testing.B) {
	pol := docPolicy(b)
	for _, n := range benchSizes {
		plan := bigPlan(n)
		b.Run(fmt.Sprintf("resources=%d", n), func(b *testing.B) {
			for b.Loop() {
				o := pol.Evaluate(context.Background(), plan, Run{Type: "Apply", Trigger: "SpecChange"})
				if o.Deny != nil {
					b.Fatalf("denied: %s", o.DenyMessage())
				}
			}
		})
	}
}

var benchSizes = []int{1_000, 20_000, 100_000}

// The conditions read plan and run as maps (activation); every field the
// types declare, and that the conditions are checked against, is there.
func TestActivationHasEveryField(t *testing.T) {
	plan := Plan{ResourceChanges: []ResourceChange{{}}, OutputChanges: []OutputChange{{}}, RunsCode: []CodeRunner{{}}}
	vars := activation(plan, Run{})
	check := func(what string, typ reflect.Type, m any) {
		got, ok := m.(map[string]any)
		if !ok {
			t.Fatalf("%s is %T, not a map", what, m)
		}
		for i := range typ.NumField() {
			name := typ.Field(i).Tag.Get("cel")
			if _, ok := got[name]; !ok {
				t.Errorf("%s lacks %s (field %s)", what, name, typ.Field(i).Name)
			}
		}
		if len(got) != typ.NumField() {
			t.Errorf("%s has %d keys, the type %d fields", what, len(got), typ.NumField())
		}
	}
	p := vars["plan"].(map[string]any)
	check("plan", reflect.TypeFor[Plan](), p)
	check("run", reflect.TypeFor[Run](), vars["run"])
	check("plan.resourceChanges[]", reflect.TypeFor[ResourceChange](), p["resourceChanges"].([]any)[0])
	check("plan.outputChanges[]", reflect.TypeFor[OutputChange](), p["outputChanges"].([]any)[0])
	check("plan.runsCode[]", reflect.TypeFor[CodeRunner](), p["runsCode"].([]any)[0])
}
