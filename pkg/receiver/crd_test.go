package receiver

import (
	"os"
	"testing"

	"github.com/google/cel-go/cel"
	"sigs.k8s.io/yaml"
)

// TestReceiverCRDRules compiles every CEL rule of the receiver's CRD and
// checks the previews' rules on a few specs (the envtest suite checks
// them in a real API server).
func TestReceiverCRDRules(t *testing.T) {
	b, err := os.ReadFile("../../config/crd/bases/infra.opr8r.io_terraformrunreceivers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	env, err := cel.NewEnv(cel.Variable("self", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	progs := map[string]cel.Program{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if rules, ok := v["x-kubernetes-validations"].([]any); ok {
				for _, r := range rules {
					rule := r.(map[string]any)["rule"].(string)
					ast, iss := env.Compile(rule)
					if iss.Err() != nil {
						t.Errorf("rule %q: %v", rule, iss.Err())
						continue
					}
					if progs[rule], err = env.Program(ast); err != nil {
						t.Errorf("rule %q: %v", rule, err)
					}
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(crd)
	cases := map[string]struct {
		rule string
		self any
		want bool
	}{
		"Gitea without apiURL": {rule: "self.type != 'Gitea' || !has(self.previews) || has(self.previews.apiURL)",
			self: map[string]any{"type": "Gitea", "previews": map[string]any{"tokenSecretRef": map[string]any{"name": "a"}}}},
		"Gitea with apiURL": {rule: "self.type != 'Gitea' || !has(self.previews) || has(self.previews.apiURL)",
			self: map[string]any{"type": "Gitea", "previews": map[string]any{"apiURL": "https://g.example.com"}}, want: true},
		"GitHub without apiURL": {rule: "self.type != 'Gitea' || !has(self.previews) || has(self.previews.apiURL)",
			self: map[string]any{"type": "GitHub", "previews": map[string]any{}}, want: true},
		"an apiURL":              {rule: `self.matches('^https?://[^\\s/?#]+(/[^\\s?#]*)?$')`, self: "https://ghe.example.com/api/v3", want: true},
		"an apiURL with a query": {rule: `self.matches('^https?://[^\\s/?#]+(/[^\\s?#]*)?$')`, self: "https://x.example.com/?a=b"},
		"an apiURL not http":     {rule: `self.matches('^https?://[^\\s/?#]+(/[^\\s?#]*)?$')`, self: "file:///etc/passwd"},
		"both credentials": {rule: "has(self.tokenSecretRef) != has(self.githubApp)",
			self: map[string]any{"tokenSecretRef": map[string]any{}, "githubApp": map[string]any{}}},
		"neither credential": {rule: "has(self.tokenSecretRef) != has(self.githubApp)", self: map[string]any{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, ok := progs[tc.rule]
			if !ok {
				t.Fatalf("the CRD has no rule %q", tc.rule)
			}
			out, _, err := p.Eval(map[string]any{"self": tc.self})
			if err != nil || out.Value() != tc.want {
				t.Errorf("%s = %v, %v; want %v", tc.rule, out, err, tc.want)
			}
		})
	}
}
