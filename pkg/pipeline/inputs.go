package pipeline

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/inputs"
	"github.com/opr8r/opr8r/pkg/names"
)

// MaxEmbeddedInputs is the largest encoded size of inputs that travel in
// the child instead of a ConfigMap. Every copy of the child's step carries
// them: the child itself, the engine's copy of its spec in status (Tekton's
// PipelineRun and TaskRun), the pod, and on Argo the executor's
// ARGO_TEMPLATE variable, which holds the whole template in one environment
// string, and Linux refuses to start a process with any one environment
// string over 128 KiB. At 16 KiB (gzip shrinks Terraform's text four to
// six times: 60-100 KiB of inline module and vars) a run stores at most
// about 80 KiB more across its objects, far from etcd's 1.5 MiB per object,
// and the step's environment stays far from the kernel's limit. Past it,
// the inputs go in a ConfigMap, one write more.
const MaxEmbeddedInputs = 16 << 10

// maxConfigMapData is the API server's limit on a ConfigMap's data: keys
// and values together.
const maxConfigMapData = 1 << 20

// runInputs returns the run's inputs: vars.json, a JSON object of
// spec.terraform.vars, and the inline source's files.
func runInputs(run *infrav1.TerraformRun) (inputs.Inputs, error) {
	vars := map[string]json.RawMessage{}
	for _, v := range run.Spec.Terraform.Vars {
		vars[v.Name] = json.RawMessage(v.Value.Raw)
	}
	vb, err := json.Marshal(vars)
	if err != nil {
		return inputs.Inputs{}, fmt.Errorf("spec.terraform.vars: %w", err)
	}
	in := inputs.Inputs{Vars: string(vb)}
	if src := run.Spec.Source.Inline; src != nil {
		in.Files = make(map[string]string, len(src.Files))
		for k, v := range src.Files {
			in.Files[k] = string(v)
		}
	}
	return in, nil
}

// EmbeddedInputs returns the run's inputs encoded for the clone step's
// InputsEnv, and whether they travel in the child: when their encoded size
// is at most MaxEmbeddedInputs and a ConfigMap could hold them. Then
// starting a run writes no ConfigMap.
func EmbeddedInputs(run *infrav1.TerraformRun) (string, bool, error) {
	in, err := runInputs(run)
	if err != nil {
		return "", false, err
	}
	enc, err := inputs.Encode(in)
	if err != nil {
		return "", false, fmt.Errorf("encoding the inputs: %w", err)
	}
	// Inputs a ConfigMap could not hold are never embedded, however well
	// they compress: the rule a user meets stays one (under 1 MiB
	// together), with the ConfigMap's clear refusal.
	raw := len(VarsKey) + len(in.Vars)
	for k, v := range in.Files {
		raw += len(k) + len(v)
	}
	return enc, len(enc) <= MaxEmbeddedInputs && raw <= maxConfigMapData, nil
}

// InputObjects returns the ConfigMaps a child needs besides user objects:
// none when the inputs travel in the child (EmbeddedInputs), else one,
// holding vars.json and the inline source's files. The reconciler creates
// it owned by the child, so it goes away with it.
func InputObjects(run *infrav1.TerraformRun, child string) ([]*corev1.ConfigMap, error) {
	if _, embedded, err := EmbeddedInputs(run); err != nil || embedded {
		return nil, err
	}
	in, err := runInputs(run)
	if err != nil {
		return nil, err
	}
	data := map[string]string{VarsKey: in.Vars}
	for k, v := range in.Files {
		if k == VarsKey {
			return nil, fmt.Errorf("spec.source.inline.files: %q is reserved", k)
		}
		data[k] = v
	}
	labels := map[string]string{
		infrav1.ManagedByLabel: infrav1.ManagedByValue,
		infrav1.RunNameLabel:   run.Name,
		infrav1.ComponentLabel: infrav1.ComponentInputs,
	}
	return []*corev1.ConfigMap{{
		ObjectMeta: metav1.ObjectMeta{Name: names.InputsConfigMapName(child), Namespace: run.Namespace, Labels: labels},
		Data:       data,
		Immutable:  ptr.To(true),
	}}, nil
}
