package step_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/opr8r/opr8r/pkg/step"
)

// maskedLeaf is a masked value as JSON, in maskCases.
const maskedLeaf = `"(sensitive value)"`

// maskCases are plans as JSON, the registered secrets, the plans masked
// and the strings masked by terraform's marks.
var maskCases = map[string]struct {
	plan      string
	secrets   []string
	want      string
	wantFound []string
}{
	"a resource change by its marks, shapes kept": {
		plan: `{"resource_changes":[{"address":"a.b","change":{"actions":["update"],
			"before":{"id":"i-1","input":{"token":"OLD-TOKEN","label":"keep"},"list":["x1","SECRET-ITEM"]},
			"after":{"id":"i-1","input":{"token":"NEW-TOKEN","label":"keep"},"whole":{"k":"v-secret","n":[1,null]}},
			"before_sensitive":{"input":{"token":true},"list":[false,true]},
			"after_sensitive":{"input":{"token":true},"whole":true}}}]}`,
		want: `{"resource_changes":[{"address":"a.b","change":{"actions":["update"],
			"before":{"id":"i-1","input":{"token":` + maskedLeaf + `,"label":"keep"},"list":["x1",` + maskedLeaf + `]},
			"after":{"id":"i-1","input":{"token":` + maskedLeaf + `,"label":"keep"},"whole":{"k":` + maskedLeaf + `,"n":[` + maskedLeaf + `,` + maskedLeaf + `]}},
			"before_sensitive":{"input":{"token":true},"list":[false,true]},
			"after_sensitive":{"input":{"token":true},"whole":true}}}]}`,
		wantFound: []string{"OLD-TOKEN", "SECRET-ITEM", "NEW-TOKEN", "v-secret"},
	},
	"drift and deferred changes": {
		plan: `{"resource_drift":[{"change":{"before":{"p":"DRIFT-SECRET"},"before_sensitive":{"p":true}}}],
			"deferred_changes":[{"resource_change":{"change":{"after":"DEFERRED-SECRET","after_sensitive":true}}}]}`,
		want: `{"resource_drift":[{"change":{"before":{"p":` + maskedLeaf + `},"before_sensitive":{"p":true}}}],
			"deferred_changes":[{"resource_change":{"change":{"after":` + maskedLeaf + `,"after_sensitive":true}}}]}`,
		wantFound: []string{"DRIFT-SECRET", "DEFERRED-SECRET"},
	},
	"outputs: by their flags, and one sensitive before": {
		plan: `{"output_changes":{"pw":{"before":"OLD-PW","after":"NEW-PW","before_sensitive":true,"after_sensitive":true},
			"was":{"before":"WAS-SENSITIVE","after":"now-public","before_sensitive":false,"after_sensitive":false},
			"plain":{"before":"a","after":"b","before_sensitive":false,"after_sensitive":false}},
			"prior_state":{"values":{"outputs":{"was":{"sensitive":true,"value":"WAS-SENSITIVE"}}}},
			"planned_values":{"outputs":{"pw":{"sensitive":true,"value":{"a":"NEW-PW"}},"plain":{"sensitive":false,"value":"b"}}}}`,
		want: `{"output_changes":{"pw":{"before":` + maskedLeaf + `,"after":` + maskedLeaf + `,"before_sensitive":true,"after_sensitive":true},
			"was":{"before":` + maskedLeaf + `,"after":"now-public","before_sensitive":false,"after_sensitive":false},
			"plain":{"before":"a","after":"b","before_sensitive":false,"after_sensitive":false}},
			"prior_state":{"values":{"outputs":{"was":{"sensitive":true,"value":` + maskedLeaf + `}}}},
			"planned_values":{"outputs":{"pw":{"sensitive":true,"value":{"a":` + maskedLeaf + `}},"plain":{"sensitive":false,"value":"b"}}}}`,
		wantFound: []string{"OLD-PW", "NEW-PW", "WAS-SENSITIVE"},
	},
	"variables: sensitive, ephemeral and undeclared ones": {
		plan: `{"variables":{"pw":{"value":"VAR-PW"},"eph":{"value":"EPH-DEFAULT"},"odd":{"value":"UNDECLARED"},"name":{"value":"demo"}},
			"configuration":{"root_module":{"variables":{"pw":{"sensitive":true,"default":"DEFAULT-PW"},"eph":{"ephemeral":true},"name":{"default":"demo"}}}}}`,
		want: `{"variables":{"pw":{"value":` + maskedLeaf + `},"eph":{"value":` + maskedLeaf + `},"odd":{"value":` + maskedLeaf + `},"name":{"value":"demo"}},
			"configuration":{"root_module":{"variables":{"pw":{"sensitive":true,"default":` + maskedLeaf + `},"eph":{"ephemeral":true},"name":{"default":"demo"}}}}}`,
		wantFound: []string{"VAR-PW", "EPH-DEFAULT", "UNDECLARED", "DEFAULT-PW"},
	},
	"configuration: a module input to a sensitive variable, a sensitive output": {
		plan: `{"configuration":{"root_module":{
			"outputs":{"o":{"sensitive":true,"expression":{"constant_value":"OUT-LITERAL"}}},
			"module_calls":{"m":{"expressions":{"pw":{"constant_value":"MODULE-LITERAL-PW"},"name":{"constant_value":"public"}},
				"module":{"variables":{"pw":{"sensitive":true},"name":{}}}}}}}}`,
		want: `{"configuration":{"root_module":{
			"outputs":{"o":{"sensitive":true,"expression":{"constant_value":` + maskedLeaf + `}}},
			"module_calls":{"m":{"expressions":{"pw":{"constant_value":` + maskedLeaf + `},"name":{"constant_value":"public"}},
				"module":{"variables":{"pw":{"sensitive":true},"name":{}}}}}}}}`,
		wantFound: []string{"OUT-LITERAL", "MODULE-LITERAL-PW"},
	},
	"prior state and planned values, through child modules": {
		plan: `{"prior_state":{"values":{"root_module":{"child_modules":[{"resources":[{"values":{"k":"CHILD-SECRET","n":"x"},"sensitive_values":{"k":true}}]}]}}},
			"planned_values":{"root_module":{"resources":[{"values":{"k":"ROOT-SECRET"},"sensitive_values":{"k":true}}]}}}`,
		want: `{"prior_state":{"values":{"root_module":{"child_modules":[{"resources":[{"values":{"k":` + maskedLeaf + `,"n":"x"},"sensitive_values":{"k":true}}]}]}}},
			"planned_values":{"root_module":{"resources":[{"values":{"k":` + maskedLeaf + `},"sensitive_values":{"k":true}}]}}}`,
		wantFound: []string{"CHILD-SECRET", "ROOT-SECRET"},
	},
	"by value: registered secrets and unmarked copies, in strings and keys": {
		plan: `{"resource_changes":[{"change":{"before":{"input":"COPIED-SECRET","output":"COPIED-SECRET"},"before_sensitive":{"input":true}}}],
			"checks":[{"instances":[{"problems":[{"message":"key is REGISTERED-KEY and COPIED-SECRET"}]}]}],
			"variables":{"k":{"value":"REGISTERED-KEY"}},"configuration":{"root_module":{"variables":{"k":{}}}},
			"planned_values":{"root_module":{"resources":[{"values":{"tags":{"REGISTERED-KEY":"v"}},"sensitive_values":{}}]}}}`,
		secrets: []string{"REGISTERED-KEY"},
		want: `{"resource_changes":[{"change":{"before":{"input":` + maskedLeaf + `,"output":` + maskedLeaf + `},"before_sensitive":{"input":true}}}],
			"checks":[{"instances":[{"problems":[{"message":"key is (sensitive value) and (sensitive value)"}]}]}],
			"variables":{"k":{"value":` + maskedLeaf + `}},"configuration":{"root_module":{"variables":{"k":{}}}},
			"planned_values":{"root_module":{"resources":[{"values":{"tags":{"(sensitive value)":"v"}},"sensitive_values":{}}]}}}`,
		wantFound: []string{"COPIED-SECRET"},
	},
	"trivial values masked by marks are not swept": {
		plan: `{"resource_changes":[{"change":{"after":{"a":"true","b":"abc","c":"true-ish"},"after_sensitive":{"a":true,"b":true}}}]}`,
		want: `{"resource_changes":[{"change":{"after":{"a":` + maskedLeaf + `,"b":` + maskedLeaf + `,"c":"true-ish"},"after_sensitive":{"a":true,"b":true}}}]}`,
	},
}

// TestMaskPlanJSON masks each place of terraform's plan JSON (format 1.2,
// Terraform 1.11 and OpenTofu 1.12) where a value may be sensitive, keeps
// the document's shape and the values that are not.
func TestMaskPlanJSON(t *testing.T) {
	for name, tc := range maskCases {
		t.Run(name, func(t *testing.T) {
			got, found, err := step.MaskPlanJSON([]byte(tc.plan), tc.secrets)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(decode(t, tc.want), decode(t, string(got))); diff != "" {
				t.Errorf("masked plan (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(setOf(tc.wantFound), setOf(found)); diff != "" {
				t.Errorf("found (-want +got):\n%s", diff)
			}
		})
	}
}

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	return v
}

// setOf is a set of strings, nil when empty.
func setOf(ss []string) map[string]bool {
	if len(ss) == 0 {
		return nil
	}
	m := map[string]bool{}
	for _, s := range ss {
		m[s] = true
	}
	return m
}
