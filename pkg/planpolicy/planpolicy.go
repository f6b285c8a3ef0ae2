// Package planpolicy evaluates spec.approval.rules: CEL conditions over a
// plan's content, each with one effect (AutoApprove, Require, Deny). The
// manager decides a waiting plan's approval with it, and kubectl tfrun
// policy test evaluates the same rules offline against a saved plan, so
// both say the same.
//
// Conditions are compiled with cel-go, the CEL library Kubernetes uses,
// against declared types: a condition that names a field that does not
// exist fails to compile, with the compiler's message. Each evaluation is
// bounded in time (EvalTimeout).
package planpolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Plan is what a condition sees as plan: the counts and every change
// terraform proposes (read entries, and no-op entries that neither import
// nor move, left out), and the code the plan runs.
type Plan struct {
	// Add, Change, Destroy and Replace count resources as terraform's
	// summary does: a replacement counts in add, destroy and replace.
	Add     int64 `cel:"add" json:"add"`
	Change  int64 `cel:"change" json:"change"`
	Destroy int64 `cel:"destroy" json:"destroy"`
	Replace int64 `cel:"replace" json:"replace"`
	// Imports count resources the plan imports (import blocks), Forgets
	// those it removes from the state without destroying them (removed
	// blocks with destroy = false), Moves those whose address changes
	// (moved blocks), and ActionInvocations the actions it invokes
	// (Terraform 1.14's action blocks): none of them shows in add, change
	// or destroy, and each changes what the state manages or runs
	// something.
	Imports           int64 `cel:"imports" json:"imports"`
	Forgets           int64 `cel:"forgets" json:"forgets"`
	Moves             int64 `cel:"moves" json:"moves"`
	ActionInvocations int64 `cel:"actionInvocations" json:"actionInvocations"`
	// HasChanges is true when applying would change a resource, the state
	// (an import, a forget, a move), an output, or invoke an action.
	HasChanges      bool             `cel:"hasChanges" json:"hasChanges"`
	ResourceChanges []ResourceChange `cel:"resourceChanges" json:"resourceChanges"`
	OutputChanges   []OutputChange   `cel:"outputChanges" json:"outputChanges"`
	// RunsCode are the programs the plan runs that terraform does not model
	// as resource changes: the provisioners of every resource instance the
	// plan creates or destroys (run at apply, as the runner), and data
	// sources of type external (run at plan, and when read again). A rule
	// that approves by counts alone should ask that this is empty.
	RunsCode []CodeRunner `cel:"runsCode" json:"runsCode"`
}

// CodeRunner is one program a plan runs.
type CodeRunner struct {
	// Address is the resource instance's address (a provisioner's) or the
	// data source's address in the configuration (without instance keys),
	// e.g. module.app.terraform_data.migrate[0].
	Address string `cel:"address" json:"address"`
	// Kind is provisioner or data-source.
	Kind string `cel:"kind" json:"kind"`
	// Type is the provisioner's type (local-exec, remote-exec, file) or the
	// data source's (external).
	Type string `cel:"type" json:"type"`
}

// ResourceChange is one resource the plan changes.
type ResourceChange struct {
	// Address is the resource's full address, e.g.
	// module.net.aws_iam_role.ci[0].
	Address string `cel:"address" json:"address"`
	// Module is the module's address ("" in the root module).
	Module string `cel:"module" json:"module"`
	// Mode is managed or data.
	Mode string `cel:"mode" json:"mode"`
	Type string `cel:"type" json:"type"`
	Name string `cel:"name" json:"name"`
	// Provider is the provider's source address, e.g.
	// registry.terraform.io/hashicorp/aws.
	Provider string `cel:"provider" json:"provider"`
	// Actions are terraform's: create, update, delete; a replacement is
	// [delete, create] or [create, delete].
	Actions []string `cel:"actions" json:"actions"`
	// Replace is true for a replacement.
	Replace bool `cel:"replace" json:"replace"`
	// Importing is true when the plan imports the resource; ImportID is
	// the id it imports ("" when the import block gives an identity).
	Importing bool   `cel:"importing" json:"importing"`
	ImportID  string `cel:"importId" json:"importId,omitempty"`
	// PreviousAddress is the address the resource moves from ("" when it
	// does not move).
	PreviousAddress string `cel:"previousAddress" json:"previousAddress,omitempty"`
}

// OutputChange is one root output the plan changes.
type OutputChange struct {
	Name    string   `cel:"name" json:"name"`
	Actions []string `cel:"actions" json:"actions"`
}

// Run is what a condition sees as run.
type Run struct {
	Name      string `cel:"name" json:"name"`
	Namespace string `cel:"namespace" json:"namespace"`
	// Type is Apply or Destroy.
	Type string `cel:"type" json:"type"`
	// Trigger is why the run started: Created, SpecChange, RerunRequest,
	// Deletion, Schedule, SourceChange, Drift or DependencyChange.
	Trigger string `cel:"trigger" json:"trigger"`
	// Author is the user who last changed the spec; Authors everyone who
	// changed it since the last applied run.
	Author  string   `cel:"author" json:"author"`
	Authors []string `cel:"authors" json:"authors"`
}

// EvalTimeout bounds one evaluation of one condition; a condition that
// runs past it denies (fail closed).
//
// It was a CEL cost limit (Kubernetes' per-call 1,000,000) until issue 50:
// cel-go's runtime cost tracking made evaluation super-linear in the plan's
// size (the docs' rules took 2.2 s at 20,000 changed resources), and the
// limit denied every plan past about 60,000 changed resources, which a
// provider-wide default_tags change reaches. Without it the docs' rules are
// linear (BenchmarkDocRules, docs/performance.md: 49 ms at 20,000, 256 ms
// at 100,000), and the time bound still
// stops a condition that would never finish (nested comprehensions over a
// large plan). Conditions are written by policy admins, and their result
// is computed once per plan (the manager caches it).
var EvalTimeout = 20 * time.Second

// celEnv is made on first use: a manager whose runs have no rules never
// pays for it (make bench's P4 counts the manager's memory).
var celEnv = sync.OnceValue(func() *cel.Env {
	env, err := cel.NewEnv(
		ext.NativeTypes(reflect.TypeFor[Plan](), reflect.TypeFor[Run](), reflect.TypeFor[CodeRunner](), ext.ParseStructTags(true)),
		cel.Variable("plan", cel.ObjectType("planpolicy.Plan")),
		cel.Variable("run", cel.ObjectType("planpolicy.Run")),
		ext.Strings(), ext.Lists(), ext.Sets(),
	)
	if err != nil {
		panic(fmt.Sprintf("planpolicy: the CEL environment: %v", err))
	}
	return env
})

// Policy is a compiled list of rules.
type Policy struct {
	rules []compiled
}

type compiled struct {
	rule infrav1.ApprovalRule
	prg  cel.Program
}

// RuleError names the rule whose condition does not compile.
type RuleError struct {
	Index int
	Name  string
	Err   string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("spec.approval.rules[%d] (%s): the condition does not compile: %s", e.Index, e.Name, e.Err)
}

// Compile compiles rules; the error names the first rule that does not
// compile, with the compiler's message.
func Compile(rules []infrav1.ApprovalRule) (*Policy, error) {
	p := &Policy{}
	for i, r := range rules {
		ast, iss := celEnv().Compile(r.Condition)
		if iss.Err() != nil {
			return nil, &RuleError{Index: i, Name: r.Name, Err: iss.Err().Error()}
		}
		if !ast.OutputType().IsExactType(cel.BoolType) {
			return nil, &RuleError{Index: i, Name: r.Name, Err: fmt.Sprintf("it is of type %s; a condition must be a bool", ast.OutputType())}
		}
		// The program runs the parsed expression, not the checked one:
		// checked against the native types above (so a field that does not
		// exist, or a condition that is not a bool, is refused here), it
		// then reads plain maps and lists (activation), which cel-go reads
		// without reflection. Reading the native types took about 50
		// allocations per resource change and rule (BenchmarkDocRules).
		parsed, iss := celEnv().Parse(r.Condition)
		if iss.Err() != nil {
			return nil, &RuleError{Index: i, Name: r.Name, Err: iss.Err().Error()}
		}
		prg, err := celEnv().Program(parsed, cel.InterruptCheckFrequency(100))
		if err != nil {
			return nil, &RuleError{Index: i, Name: r.Name, Err: err.Error()}
		}
		p.rules = append(p.rules, compiled{rule: r, prg: prg})
	}
	return p, nil
}

// Decision is what the rules decide together.
type Decision string

const (
	// Deny: a Deny rule matched (or a condition failed to evaluate); the
	// plan is rejected.
	Deny Decision = "Deny"
	// Require: Require rules matched; each must be met.
	Require Decision = "Require"
	// AutoApprove: AutoApprove rules, and no other, matched.
	AutoApprove Decision = "AutoApprove"
	// Default: no rule matched; spec.approval decides as without rules.
	Default Decision = "Default"
)

// Match is one rule that matched, or whose condition failed.
type Match struct {
	Rule infrav1.ApprovalRule
	// Err is why the condition could not be evaluated: the rule then
	// counts as a Deny (fail closed).
	Err error
}

// Outcome is what the rules decided about one plan.
type Outcome struct {
	Decision Decision
	// Matched are the rules that matched, in order.
	Matched []Match
	// Deny is the rule that denies (the first), for Decision Deny.
	Deny *Match
	// Require are the Require rules that matched.
	Require []infrav1.ApprovalRule
	// AutoApprove is the first AutoApprove rule that matched.
	AutoApprove *infrav1.ApprovalRule
}

// Failed is the outcome when the rules cannot be evaluated at all (they
// do not compile, the plan cannot be read): they deny (fail closed).
func Failed(err error) Outcome {
	o := Outcome{Decision: Deny, Matched: []Match{{Err: err}}}
	o.Deny = &o.Matched[0]
	return o
}

// DenyMessage says why the plan is denied.
func (o Outcome) DenyMessage() string {
	if o.Deny == nil {
		return ""
	}
	if o.Deny.Err != nil && o.Deny.Rule.Name == "" {
		return fmt.Sprintf("spec.approval.rules could not be evaluated, so the plan is denied (fail closed): %v", o.Deny.Err)
	}
	if o.Deny.Err != nil {
		return fmt.Sprintf("rule %s could not be evaluated, so it denies (fail closed): %v", o.Deny.Rule.Name, o.Deny.Err)
	}
	msg := "denied by rule " + o.Deny.Rule.Name
	if o.Deny.Rule.Message != "" {
		msg += ": " + o.Deny.Rule.Message
	}
	return msg
}

// Evaluate runs every rule against plan and run and combines what
// matched: any Deny wins; otherwise the Require rules, each of which must
// be met (so the largest count binds); otherwise AutoApprove; otherwise
// Default. A condition that fails to evaluate (its time limit, an error)
// denies.
func (p *Policy) Evaluate(ctx context.Context, plan Plan, run Run) Outcome {
	var o Outcome
	vars := activation(plan, run)
	for _, c := range p.rules {
		val, err := evalOne(ctx, c.prg, vars)
		if err == nil && val.Type() != cel.BoolType {
			err = fmt.Errorf("it gave %v, not a bool", val)
		}
		if err != nil {
			o.Matched = append(o.Matched, Match{Rule: c.rule, Err: err})
			continue
		}
		if val.Value() == true {
			o.Matched = append(o.Matched, Match{Rule: c.rule})
		}
	}
	for i, m := range o.Matched {
		switch {
		case m.Err != nil || m.Rule.Effect == infrav1.RuleDeny:
			if o.Deny == nil {
				o.Deny = &o.Matched[i]
			}
		case m.Rule.Effect == infrav1.RuleRequire:
			o.Require = append(o.Require, m.Rule)
		case m.Rule.Effect == infrav1.RuleAutoApprove:
			if o.AutoApprove == nil {
				r := m.Rule
				o.AutoApprove = &r
			}
		}
	}
	switch {
	case o.Deny != nil:
		o.Decision = Deny
	case len(o.Require) > 0:
		o.Decision = Require
	case o.AutoApprove != nil:
		o.Decision = AutoApprove
	default:
		o.Decision = Default
	}
	return o
}

// activation is plan and run as the conditions read them: maps keyed by
// the fields' cel names (TestActivationHasEveryField keeps them in step
// with the types).
func activation(plan Plan, run Run) map[string]any {
	strs := func(l []string) []any {
		out := make([]any, len(l))
		for i, v := range l {
			out[i] = v
		}
		return out
	}
	rcs := make([]any, len(plan.ResourceChanges))
	for i, rc := range plan.ResourceChanges {
		rcs[i] = map[string]any{"address": rc.Address, "module": rc.Module, "mode": rc.Mode, "type": rc.Type, "name": rc.Name,
			"provider": rc.Provider, "actions": strs(rc.Actions), "replace": rc.Replace, "importing": rc.Importing,
			"importId": rc.ImportID, "previousAddress": rc.PreviousAddress}
	}
	ocs := make([]any, len(plan.OutputChanges))
	for i, oc := range plan.OutputChanges {
		ocs[i] = map[string]any{"name": oc.Name, "actions": strs(oc.Actions)}
	}
	code := make([]any, len(plan.RunsCode))
	for i, c := range plan.RunsCode {
		code[i] = map[string]any{"address": c.Address, "kind": c.Kind, "type": c.Type}
	}
	return map[string]any{
		"plan": map[string]any{"add": plan.Add, "change": plan.Change, "destroy": plan.Destroy, "replace": plan.Replace,
			"imports": plan.Imports, "forgets": plan.Forgets, "moves": plan.Moves, "actionInvocations": plan.ActionInvocations,
			"hasChanges": plan.HasChanges, "resourceChanges": rcs, "outputChanges": ocs, "runsCode": code},
		"run": map[string]any{"name": run.Name, "namespace": run.Namespace, "type": run.Type, "trigger": run.Trigger,
			"author": run.Author, "authors": strs(run.Authors)},
	}
}

// evalOne evaluates one condition within EvalTimeout.
func evalOne(ctx context.Context, prg cel.Program, vars map[string]any) (ref.Val, error) {
	ctx, cancel := context.WithTimeout(ctx, EvalTimeout)
	defer cancel()
	val, _, err := prg.ContextEval(ctx, vars)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("it ran past %s, the most one condition may take (planpolicy.EvalTimeout): %w", EvalTimeout, err)
	}
	return val, err
}

// tfPlan is the part of terraform's JSON plan (terraform show -json) the
// rules read.
type tfPlan struct {
	ResourceChanges []tfResourceChange        `json:"resource_changes"`
	OutputChanges   map[string]tfOutputChange `json:"output_changes"`
	// ActionInvocations: Terraform 1.14's plan JSON lists the actions a
	// plan invokes; only their number is read.
	ActionInvocations []json.RawMessage `json:"action_invocations"`
	Configuration     struct {
		RootModule tfModule `json:"root_module"`
	} `json:"configuration"`
}

// tfResourceChange is one of the plan's resource_changes.
type tfResourceChange struct {
	Address         string `json:"address"`
	PreviousAddress string `json:"previous_address"`
	ModuleAddress   string `json:"module_address"`
	Mode            string `json:"mode"`
	Type            string `json:"type"`
	Name            string `json:"name"`
	ProviderName    string `json:"provider_name"`
	Change          struct {
		Actions   []string `json:"actions"`
		Importing *struct {
			ID string `json:"id"`
		} `json:"importing"`
	} `json:"change"`
}

// tfOutputChange is one of the plan's output_changes.
type tfOutputChange struct {
	Actions []string `json:"actions"`
}

// tfModule is a module of the plan's configuration.
type tfModule struct {
	Resources []struct {
		Address      string `json:"address"`
		Mode         string `json:"mode"`
		Type         string `json:"type"`
		Provisioners []struct {
			Type string `json:"type"`
		} `json:"provisioners"`
	} `json:"resources"`
	ModuleCalls map[string]struct {
		Module tfModule `json:"module"`
	} `json:"module_calls"`
}

// maxModuleDepth bounds how deep FromJSON follows module calls (terraform
// itself refuses cycles; a plan is read from a record, so bound it).
const maxModuleDepth = 64

// codeRunners lists the provisioners and external data sources of m and
// the modules it calls, under prefix.
func codeRunners(m tfModule, prefix string, depth int, out *[]CodeRunner) {
	if depth > maxModuleDepth {
		return
	}
	for _, r := range m.Resources {
		addr := prefix + r.Address
		for _, p := range r.Provisioners {
			*out = append(*out, CodeRunner{Address: addr, Kind: "provisioner", Type: p.Type})
		}
		if r.Mode == "data" && r.Type == "external" {
			*out = append(*out, CodeRunner{Address: addr, Kind: "data-source", Type: r.Type})
		}
	}
	calls := make([]string, 0, len(m.ModuleCalls))
	for n := range m.ModuleCalls {
		calls = append(calls, n)
	}
	slices.Sort(calls)
	for _, n := range calls {
		codeRunners(m.ModuleCalls[n].Module, prefix+"module."+n+".", depth+1, out)
	}
}

// configAddress is an instance address without its instance keys
// (module.a["x"].terraform_data.y[0] is module.a.terraform_data.y); a key
// is a number or a quoted string, which may hold brackets.
func configAddress(addr string) string {
	var b strings.Builder
	depth, quoted, escaped := 0, false, false
	for _, r := range addr {
		switch {
		case depth > 0 && quoted && escaped:
			escaped = false
		case depth > 0 && quoted && r == '\\':
			escaped = true
		case depth > 0 && r == '"':
			quoted = !quoted
		case !quoted && r == '[':
			depth++
		case depth > 0 && !quoted && r == ']':
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// FromJSON reads a plan as terraform show -json prints it.
func FromJSON(b []byte) (Plan, error) {
	var tp tfPlan
	if err := json.Unmarshal(b, &tp); err != nil {
		return Plan{}, fmt.Errorf("reading the plan as JSON: %w", err)
	}
	var p Plan
	for _, rc := range tp.ResourceChanges {
		p.addResourceChange(rc)
	}
	p.outputChanges(tp.OutputChanges)
	p.ActionInvocations = int64(len(tp.ActionInvocations))
	p.runsCode(tp.Configuration.RootModule)
	p.HasChanges = len(p.ResourceChanges) > 0 || len(p.OutputChanges) > 0 || p.ActionInvocations > 0
	return p, nil
}

// addResourceChange counts one resource change of the plan JSON: reads
// and no-ops are left out, unless the no-op imports or moves a resource.
func (p *Plan) addResourceChange(rc tfResourceChange) {
	acts := rc.Change.Actions
	importing := rc.Change.Importing != nil
	moved := rc.PreviousAddress != "" && rc.PreviousAddress != rc.Address
	if len(acts) == 0 || slices.Equal(acts, []string{"read"}) || (slices.Equal(acts, []string{"no-op"}) && !importing && !moved) {
		return
	}
	c := ResourceChange{Address: rc.Address, Module: rc.ModuleAddress, Mode: rc.Mode, Type: rc.Type, Name: rc.Name,
		Provider: rc.ProviderName, Actions: acts, Replace: slices.Contains(acts, "create") && slices.Contains(acts, "delete"),
		Importing: importing}
	if importing {
		c.ImportID = rc.Change.Importing.ID
		p.Imports++
	}
	if moved {
		c.PreviousAddress = rc.PreviousAddress
		p.Moves++
	}
	p.ResourceChanges = append(p.ResourceChanges, c)
	if c.Replace {
		p.Replace++
	}
	for _, a := range acts {
		switch a {
		case "create":
			p.Add++
		case "update":
			p.Change++
		case "delete":
			p.Destroy++
		case "forget":
			p.Forgets++
		}
	}
}

// outputChanges keeps the outputs that change, by name.
func (p *Plan) outputChanges(changes map[string]tfOutputChange) {
	names := make([]string, 0, len(changes))
	for n := range changes {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		acts := changes[n].Actions
		if len(acts) == 0 || slices.Equal(acts, []string{"no-op"}) {
			continue
		}
		p.OutputChanges = append(p.OutputChanges, OutputChange{Name: n, Actions: acts})
	}
}

// runsCode lists the code the plan runs: data sources that run programs,
// and the provisioners of resources it creates or destroys.
func (p *Plan) runsCode(root tfModule) {
	var runners []CodeRunner
	codeRunners(root, "", 0, &runners)
	for _, cr := range runners {
		if cr.Kind != "provisioner" {
			p.RunsCode = append(p.RunsCode, cr)
			continue
		}
		for _, rc := range p.ResourceChanges {
			if configAddress(rc.Address) == cr.Address && (slices.Contains(rc.Actions, "create") || slices.Contains(rc.Actions, "delete")) {
				p.RunsCode = append(p.RunsCode, CodeRunner{Address: rc.Address, Kind: cr.Kind, Type: cr.Type})
			}
		}
	}
}

// RunOf is what a condition sees of run: its current run's type, trigger
// and authors.
func RunOf(tr *infrav1.TerraformRun) Run {
	r := Run{Name: tr.Name, Namespace: tr.Namespace}
	if cur := tr.Status.Run; cur != nil {
		r.Type, r.Trigger, r.Author = string(cur.Type), string(cur.Trigger), cur.Author
		r.Authors = append([]string{}, cur.Authors...)
		if len(r.Authors) == 0 && cur.Author != "" {
			r.Authors = []string{cur.Author}
		}
	}
	return r
}

// Describe says what one rule did, for kubectl tfrun policy test.
func (o Outcome) Describe(rules []infrav1.ApprovalRule) []string {
	var out []string
	for _, r := range rules {
		i := slices.IndexFunc(o.Matched, func(m Match) bool { return m.Rule.Name == r.Name })
		switch {
		case i < 0:
			out = append(out, fmt.Sprintf("%s: no match", r.Name))
		case o.Matched[i].Err != nil:
			out = append(out, fmt.Sprintf("%s: error, counts as Deny: %v", r.Name, o.Matched[i].Err))
		default:
			out = append(out, fmt.Sprintf("%s: matched, %s", r.Name, effectText(r)))
		}
	}
	return out
}

func effectText(r infrav1.ApprovalRule) string {
	switch r.Effect {
	case infrav1.RuleRequire:
		s := fmt.Sprintf("Require %d approvals", r.Require.Approvals)
		if a := r.Require.Approvers; a != nil {
			var who []string
			if len(a.Users) > 0 {
				who = append(who, "users "+strings.Join(a.Users, ", "))
			}
			if len(a.Groups) > 0 {
				who = append(who, "groups "+strings.Join(a.Groups, ", "))
			}
			s += " from " + strings.Join(who, " or ")
		}
		return s
	case infrav1.RuleDeny:
		if r.Message != "" {
			return "Deny: " + r.Message
		}
	}
	return string(r.Effect)
}
