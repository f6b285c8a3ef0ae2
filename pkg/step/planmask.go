package step

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// SensitiveValue is what a masked value of the plan as JSON becomes: what
// terraform's readable plan prints in its place.
const SensitiveValue = "(sensitive value)"

// MaskPlanJSON returns the plan as JSON (terraform show -json, Terraform
// 1.11 or OpenTofu 1.12, format 1.2) with its sensitive values masked, and
// the strings it masked by terraform's own marks:
//   - by terraform's marks: resource_changes, resource_drift and
//     deferred_changes[].resource_change (before/after by
//     before_sensitive/after_sensitive); output_changes (by their flags,
//     and before also when prior_state had the output sensitive);
//     planned_values and prior_state.values (outputs by their sensitive
//     flag, resources' values by sensitive_values, through child modules);
//     variables whose declaration is sensitive or ephemeral, or that the
//     root module does not declare; in configuration, the defaults of
//     sensitive variables, the module inputs that feed a sensitive
//     variable of the module, and the expressions of sensitive outputs;
//   - by value: every string in secrets and every string masked by the
//     marks (at least MinSecret long, and not "true", "false" or "null"),
//     wherever it appears, as or in any string and in keys: terraform
//     leaves some sensitive values unmarked (a provider-computed copy of a
//     sensitive input, a sensitive remote state output, a check's message).
//
// A masked value keeps its shape: objects and arrays stay, each leaf
// (string, number, bool or null) becomes SensitiveValue. relevant_attributes,
// addresses and after_unknown hold no values. Literal expressions of the
// configuration (constant_value) other than those above are the module's
// source, which checks read anyway, and are kept. The strings masked by
// the marks are returned, for the caller to redact elsewhere.
func MaskPlanJSON(plan []byte, secrets []string) ([]byte, []string, error) {
	doc, err := decodeJSON(plan)
	if err != nil {
		return nil, nil, err
	}
	m := &masker{}
	m.plan(doc)
	found := sweepable(m.found)
	var out any = doc
	if all := append(append([]string(nil), secrets...), found...); len(all) > 0 {
		rep := replacer(all, SensitiveValue)
		out = sweepStrings(doc, rep.Replace)
	}
	b, err := encodeJSON(out)
	return b, found, err
}

// sweepable are the distinct strings masked by marks that are long enough
// to look for elsewhere.
func sweepable(found []string) []string {
	seen := map[string]bool{"true": true, "false": true, "null": true, SensitiveValue: true}
	var out []string
	for _, s := range found {
		if len(s) >= MinSecret && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// decodeJSON reads a plan as JSON, numbers kept exact.
func decodeJSON(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("reading the plan as JSON: %w", err)
	}
	return doc, nil
}

// encodeJSON writes v as compact JSON, without escaping HTML characters.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// masker masks the plan in place and keeps the strings it masked.
type masker struct {
	found []string
}

// plan masks every place of the plan where terraform marks a value
// sensitive.
func (m *masker) plan(doc map[string]any) {
	cfg := obj(doc["configuration"])
	declared := obj(obj(cfg["root_module"])["variables"])
	m.moduleConfig(obj(cfg["root_module"]))
	for name, v := range obj(doc["variables"]) {
		d, ok := declared[name]
		if !ok || truthy(obj(d)["sensitive"]) || truthy(obj(d)["ephemeral"]) {
			m.maskKey(obj(v), "value")
		}
	}
	prior := obj(obj(doc["prior_state"])["values"])
	priorOutputs := obj(prior["outputs"])
	m.values(obj(doc["planned_values"]))
	m.values(prior)
	for _, key := range []string{"resource_changes", "resource_drift"} {
		for _, rc := range arr(doc[key]) {
			m.change(obj(obj(rc)["change"]))
		}
	}
	for _, d := range arr(doc["deferred_changes"]) {
		m.change(obj(obj(obj(d)["resource_change"])["change"]))
	}
	for name, oc := range obj(doc["output_changes"]) {
		m.outputChange(obj(oc), truthy(obj(priorOutputs[name])["sensitive"]))
	}
}

// outputChange masks an output's change by its marks; before also when
// the output was sensitive in the prior state (terraform marks both sides
// with the output's current setting).
func (m *masker) outputChange(c map[string]any, wasSensitive bool) {
	all := truthy(c["sensitive"])
	if all || wasSensitive {
		m.maskKey(c, "before")
	}
	if all {
		m.maskKey(c, "after")
	}
	m.change(c)
}

// moduleConfig masks, in a module's configuration and its module calls'
// (recursively), the defaults of sensitive variables, the expressions of
// sensitive outputs, and it returns the module's sensitive variables.
func (m *masker) moduleConfig(mod map[string]any) map[string]bool {
	sensitive := map[string]bool{}
	for name, v := range obj(mod["variables"]) {
		if d := obj(v); truthy(d["sensitive"]) || truthy(d["ephemeral"]) {
			sensitive[name] = true
			m.maskKey(d, "default")
		}
	}
	for _, o := range obj(mod["outputs"]) {
		if d := obj(o); truthy(d["sensitive"]) {
			m.maskConstants(d["expression"])
		}
	}
	for _, call := range obj(mod["module_calls"]) {
		c := obj(call)
		inner := m.moduleConfig(obj(c["module"]))
		exprs := obj(c["expressions"])
		for name := range inner {
			m.maskConstants(exprs[name])
		}
	}
	return sensitive
}

// values masks a values representation (planned_values,
// prior_state.values): outputs by their flag, resources by their
// sensitive_values, through child modules.
func (m *masker) values(v map[string]any) {
	for _, o := range obj(v["outputs"]) {
		if out := obj(o); truthy(out["sensitive"]) {
			m.maskKey(out, "value")
		}
	}
	m.module(obj(v["root_module"]))
}

// module masks a module's resources and its child modules'.
func (m *masker) module(mod map[string]any) {
	for _, res := range arr(mod["resources"]) {
		r := obj(res)
		if _, ok := r["values"]; ok {
			r["values"] = m.mask(r["values"], r["sensitive_values"])
		}
	}
	for _, c := range arr(mod["child_modules"]) {
		m.module(obj(c))
	}
}

// change masks a resource change's before and after by their marks.
func (m *masker) change(c map[string]any) {
	for _, side := range []string{"before", "after"} {
		if v, ok := c[side]; ok {
			c[side] = m.mask(v, c[side+"_sensitive"])
		}
	}
}

// mask masks the parts of v that terraform's mark says are sensitive: true
// masks all of v, false or null nothing, and an object or array shaped
// like v marks its parts.
func (m *masker) mask(v, mark any) any {
	switch mk := mark.(type) {
	case bool:
		if mk {
			return m.maskAll(v)
		}
	case map[string]any:
		vo, ok := v.(map[string]any)
		if !ok {
			return v
		}
		for k, sub := range mk {
			if _, ok := vo[k]; ok {
				vo[k] = m.mask(vo[k], sub)
			}
		}
	case []any:
		va, ok := v.([]any)
		if !ok {
			return v
		}
		for i := range min(len(mk), len(va)) {
			va[i] = m.mask(va[i], mk[i])
		}
	}
	return v
}

// maskAll masks every leaf of v, keeping objects and arrays, and keeps
// the strings it masked.
func (m *masker) maskAll(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, sub := range t {
			t[k] = m.maskAll(sub)
		}
		return t
	case []any:
		for i := range t {
			t[i] = m.maskAll(t[i])
		}
		return t
	case string:
		if t != SensitiveValue {
			m.found = append(m.found, t)
		}
	}
	return SensitiveValue
}

// maskKey masks o[key], when present.
func (m *masker) maskKey(o map[string]any, key string) {
	if v, ok := o[key]; ok {
		o[key] = m.maskAll(v)
	}
}

// maskConstants masks every constant_value in a configuration expression
// (and in its nested block expressions).
func (m *masker) maskConstants(expr any) {
	switch t := expr.(type) {
	case map[string]any:
		for k, sub := range t {
			if k == "constant_value" {
				t[k] = m.maskAll(sub)
			} else {
				m.maskConstants(sub)
			}
		}
	case []any:
		for _, sub := range t {
			m.maskConstants(sub)
		}
	}
}

// sweepStrings applies sweep to every string and key in v.
func sweepStrings(v any, sweep func(string) string) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, sub := range t {
			out[sweep(k)] = sweepStrings(sub, sweep)
		}
		return out
	case []any:
		for i := range t {
			t[i] = sweepStrings(t[i], sweep)
		}
		return t
	case string:
		return sweep(t)
	}
	return v
}

// obj is v as a JSON object, or an empty one.
func obj(v any) map[string]any {
	if o, ok := v.(map[string]any); ok {
		return o
	}
	return map[string]any{}
}

// arr is v as a JSON array, or nil.
func arr(v any) []any {
	a, _ := v.([]any)
	return a
}

// truthy says whether a JSON value is true, or a mark that is not empty
// (an object or array marking some part).
func truthy(v any) bool {
	switch t := v.(type) {
	case bool:
		return t
	case map[string]any:
		return len(t) > 0
	case []any:
		return len(t) > 0
	}
	return false
}

// replacer replaces each of the strings with repl; at each place the
// longest string that starts there is replaced whole.
func replacer(strs []string, repl string) *strings.Replacer {
	sorted := append([]string(nil), strs...)
	sort.SliceStable(sorted, func(i, j int) bool { return len(sorted[i]) > len(sorted[j]) })
	pairs := make([]string, 0, 2*len(sorted))
	for _, v := range sorted {
		pairs = append(pairs, v, repl)
	}
	return strings.NewReplacer(pairs...)
}
