package results

import (
	"encoding/json"
	"fmt"
	"sort"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// The export step's raw outputs, and how the manager and the kubectl plugin
// project them into the user's outputs Secret.

// RawOutputsKey is the key of the raw outputs Secret that holds
// `terraform output -json`.
const RawOutputsKey = "outputs.json"

// tfOutput is one entry of `terraform output -json`.
type tfOutput struct {
	Sensitive bool            `json:"sensitive"`
	Value     json.RawMessage `json:"value"`
}

// Output is one selected terraform output.
type Output struct {
	// Name is terraform's output name; Key is the Secret key it is written
	// under (after rename).
	Name, Key string
	// Sensitive is terraform's sensitive flag.
	Sensitive bool
	// Value is the Secret value: strings as they are, other values as JSON.
	Value []byte
}

// SelectOutputs applies include, exclude and rename to terraform's outputs and
// returns the Secret data.
func SelectOutputs(spec infrav1.OutputsSpec, raw []byte) (map[string][]byte, error) {
	outs, err := Outputs(spec, raw)
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{}
	for _, o := range outs {
		data[o.Key] = o.Value
	}
	return data, nil
}

// Outputs applies include, exclude and rename to `terraform output -json`,
// sorted by Secret key.
func Outputs(spec infrav1.OutputsSpec, raw []byte) ([]Output, error) {
	var outs map[string]tfOutput
	if err := json.Unmarshal(raw, &outs); err != nil {
		return nil, fmt.Errorf("the export step's outputs are not terraform output -json: %w", err)
	}
	include := map[string]bool{}
	for _, n := range spec.Include {
		include[n] = true
	}
	exclude := map[string]bool{}
	for _, n := range spec.Exclude {
		exclude[n] = true
	}
	seen := map[string]bool{}
	var out []Output
	for name, o := range outs {
		if (len(include) > 0 && !include[name]) || exclude[name] {
			continue
		}
		key := name
		if k, ok := spec.Rename[name]; ok {
			key = string(k)
		}
		if seen[key] {
			return nil, fmt.Errorf("spec.outputs.rename maps two outputs to the Secret key %q", key)
		}
		seen[key] = true
		v := []byte(o.Value)
		var s string
		if err := json.Unmarshal(o.Value, &s); err == nil {
			v = []byte(s)
		}
		out = append(out, Output{Name: name, Key: key, Sensitive: o.Sensitive, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}
