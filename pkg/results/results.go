// Package results is the wire format of the small results that pipeline
// steps hand to the engine (Argo output parameters, Tekton task results, a
// Job's termination message) and that engines read back. It is defined once
// here: the step runner (pkg/step) writes it and every engine's Observe reads
// it. It has no Kubernetes dependencies, so the step binary stays small.
package results

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Result names written by steps.
const (
	// Commit is the checked-out source revision (clone).
	Commit = "commit"
	// HasChanges is "true" when the plan has changes (plan).
	HasChanges = "has-changes"
	// Digest is the plan file's digest, "sha256:<hex>" (plan).
	Digest = "digest"
	// Summary is the plan's counts as JSON (plan; see Plan).
	Summary = "summary"
	// Inputs is the digest of the plan's variables (plan).
	Inputs = "inputs"
	// PlanTextDigest is the digest, "sha256:<hex>", of the readable plan
	// exactly as the plan step kept it in the run's records, redacted:
	// what a reviewer reads (plan).
	PlanTextDigest = "plan-text-digest"
	// PlanJSONDigest is the digest, "sha256:<hex>", of the plan as JSON
	// exactly as the plan step kept it in the run's records and gave it to
	// checks, masked (plan).
	PlanJSONDigest = "plan-json-digest"
	// PlanSensitiveJSONDigest is the digest, "sha256:<hex>", of the plan as
	// JSON as terraform wrote it, sensitive values in clear, as the plan
	// step kept it in the run's records (plan).
	PlanSensitiveJSONDigest = "plan-sensitive-json-digest"
	// Error is a failing step's one-line summary, where the engine has no
	// termination message of its own (Tekton).
	Error = "error"
)

// Plan is the plan step's result: what applying the plan would change.
type Plan struct {
	Add, Change, Destroy, Replace int32
	// Import, Forget and Move count the resources the plan imports,
	// removes from the state without destroying (removed blocks), and
	// moves to another address; Actions the action invocations
	// (Terraform 1.14).
	Import, Forget, Move, Actions int32
	// HasChanges is true when applying the plan would change anything.
	HasChanges bool
	// Digest is the plan file's digest, "sha256:<hex>".
	Digest string
	// Inputs is the digest of the variables the plan was made with.
	Inputs string
	// TextDigest is the digest of the readable plan as kept (redacted).
	TextDigest string
	// JSONDigest is the digest of the plan as JSON as kept (masked).
	JSONDigest string
	// SensitiveJSONDigest is the digest of the plan as JSON as terraform
	// wrote it, as kept.
	SensitiveJSONDigest string
}

// summary is the JSON of the Summary result.
type summary struct {
	Add     int32 `json:"add"`
	Change  int32 `json:"change"`
	Destroy int32 `json:"destroy"`
	Replace int32 `json:"replace"`
	Import  int32 `json:"import,omitempty"`
	Forget  int32 `json:"forget,omitempty"`
	Move    int32 `json:"move,omitempty"`
	Actions int32 `json:"actions,omitempty"`
}

// Values returns the plan step's results by name, as the step writes them.
func (p Plan) Values() map[string]string {
	b, err := json.Marshal(summary{Add: p.Add, Change: p.Change, Destroy: p.Destroy, Replace: p.Replace, Import: p.Import, Forget: p.Forget, Move: p.Move, Actions: p.Actions})
	if err != nil {
		panic(err) // integers always marshal
	}
	return map[string]string{
		HasChanges:              fmt.Sprint(p.HasChanges),
		Digest:                  p.Digest,
		Summary:                 string(b),
		Inputs:                  p.Inputs,
		PlanTextDigest:          p.TextDigest,
		PlanJSONDigest:          p.JSONDigest,
		PlanSensitiveJSONDigest: p.SensitiveJSONDigest,
	}
}

// ParsePlan reads the plan step's results; get returns a result's value by
// name ("" when missing). Whitespace around values is ignored.
func ParsePlan(get func(name string) string) (*Plan, error) {
	var s summary
	if raw := strings.TrimSpace(get(Summary)); raw != "" {
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			return nil, fmt.Errorf("the plan step's %s result is not valid JSON: %w", Summary, err)
		}
	}
	return &Plan{
		Add: s.Add, Change: s.Change, Destroy: s.Destroy, Replace: s.Replace,
		Import: s.Import, Forget: s.Forget, Move: s.Move, Actions: s.Actions,
		HasChanges:          strings.TrimSpace(get(HasChanges)) == "true",
		Digest:              strings.TrimSpace(get(Digest)),
		Inputs:              strings.TrimSpace(get(Inputs)),
		TextDigest:          strings.TrimSpace(get(PlanTextDigest)),
		JSONDigest:          strings.TrimSpace(get(PlanJSONDigest)),
		SensitiveJSONDigest: strings.TrimSpace(get(PlanSensitiveJSONDigest)),
	}, nil
}

// Short is the plan's counts as people read them: "+1 ~0 -0".
func Short(add, change, destroy int32) string {
	return fmt.Sprintf("+%d ~%d -%d", add, change, destroy)
}

// Short is the plan's counts as people read them: "+1 ~0 -0", then what
// else it does to what is managed, when it does: "+0 ~0 -0, 2 imported,
// 1 forgotten, 1 moved, 1 action invoked".
func (p Plan) Short() string {
	return ShortAll(p.Add, p.Change, p.Destroy, p.Import, p.Forget, p.Move, p.Actions)
}

// ShortAll is Short with the imports, forgets, moves and action
// invocations a plan counts.
func ShortAll(add, change, destroy, imp, forget, move, actions int32) string {
	s := Short(add, change, destroy)
	for _, c := range []struct {
		n    int32
		what string
	}{{imp, "imported"}, {forget, "forgotten"}, {move, "moved"}, {actions, "action(s) invoked"}} {
		if c.n > 0 {
			s += fmt.Sprintf(", %d %s", c.n, c.what)
		}
	}
	return s
}
