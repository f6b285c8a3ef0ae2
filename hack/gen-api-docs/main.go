// Command gen-api-docs writes docs/api-reference.md from the generated CRD's
// OpenAPI schema, so the reference says exactly what `kubectl explain` and
// the API server's validation say. make verify checks it is up to date.
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	crd, err := read("config/crd/bases/infra.opr8r.io_terraformruns.yaml")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	v := crd.Spec.Versions[0]
	fmt.Printf("# TerraformRun API reference (`%s/%s`)\n\n", crd.Spec.Group, v.Name)
	fmt.Println("Generated from the CRDs' schemas by `hack/gen-api-docs` (`make verify` keeps it current); do not edit.")
	kind(crd, []string{"spec", "status"}, "##")
	approval, err := read("config/crd/bases/infra.opr8r.io_terraformrunapprovals.yaml")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("\n## TerraformRunApproval\n")
	kind(approval, []string{"spec"}, "###")
	record, err := read("config/crd/bases/infra.opr8r.io_terraformrunrecords.yaml")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("\n## TerraformRunRecord\n")
	kind(record, []string{"spec"}, "###")
	for _, k := range []struct{ file, name string }{
		{"config/crd/bases/infra.opr8r.io_terraformrunreceivers.yaml", "TerraformRunReceiver"},
		{"config/crd/bases/infra.opr8r.io_terraformrunnotifiers.yaml", "TerraformRunNotifier"},
		{"config/crd/bases/infra.opr8r.io_terraformrunpolicies.yaml", "TerraformRunPolicy"},
		{"config/crd/bases/infra.opr8r.io_clusterterraformrunpolicies.yaml", "ClusterTerraformRunPolicy"},
	} {
		c, err := read(k.file)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("\n## %s\n", k.name)
		kind(c, []string{"spec", "status"}, "###")
	}
}

func read(path string) (*apiextensionsv1.CustomResourceDefinition, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(b, crd); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return crd, nil
}

// kind prints one CRD's fields under the given top-level properties.
func kind(crd *apiextensionsv1.CustomResourceDefinition, tops []string, h string) {
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	fmt.Printf("\nShort names: %s. %s\n", strings.Join(crd.Spec.Names.ShortNames, ", "), oneLine(root.Description))
	for _, top := range tops {
		fmt.Printf("\n%s %s\n\n| field | type | description | validation |\n| --- | --- | --- | --- |\n", h, top)
		walk(top, root.Properties[top], root.Properties[top].Required)
		for _, r := range root.Properties[top].XValidations {
			fmt.Printf("\n- %s\n", r.Message)
		}
	}
	if len(root.XValidations) > 0 {
		fmt.Printf("\n%s Object rules\n\n", h)
		for _, r := range root.XValidations {
			fmt.Printf("- %s\n", r.Message)
		}
	}
}

func walk(path string, s apiextensionsv1.JSONSchemaProps, _ []string) {
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	for _, n := range names {
		p := s.Properties[n]
		fp := path + "." + n
		typ := p.Type
		child := p
		if p.Type == "array" && p.Items != nil && p.Items.Schema != nil {
			typ = "[]" + p.Items.Schema.Type
			child = *p.Items.Schema
			fp += "[]"
		}
		if p.Type == "object" && p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil {
			typ = "map[string]" + p.AdditionalProperties.Schema.Type
		}
		if p.XPreserveUnknownFields != nil && *p.XPreserveUnknownFields && typ == "" {
			typ = "any JSON"
		}
		var rules []string
		if required[n] {
			rules = append(rules, "required")
		}
		if p.Default != nil {
			rules = append(rules, "default `"+string(p.Default.Raw)+"`")
		}
		for _, e := range p.Enum {
			rules = append(rules, "`"+string(e.Raw)+"`")
		}
		if p.Pattern != "" {
			rules = append(rules, "pattern `"+strings.ReplaceAll(p.Pattern, "|", `\|`)+"`")
		}
		if p.MaxLength != nil {
			rules = append(rules, fmt.Sprintf("max length %d", *p.MaxLength))
		}
		if p.MaxItems != nil {
			rules = append(rules, fmt.Sprintf("max items %d", *p.MaxItems))
		}
		if p.MaxProperties != nil {
			rules = append(rules, fmt.Sprintf("max entries %d", *p.MaxProperties))
		}
		for _, x := range p.XValidations {
			rules = append(rules, "rule: "+x.Message)
		}
		if p.Type == "array" {
			for _, x := range child.XValidations {
				rules = append(rules, "rule: "+x.Message)
			}
		}
		if p.Minimum != nil {
			rules = append(rules, fmt.Sprintf("min %g", *p.Minimum))
		}
		if p.Maximum != nil {
			rules = append(rules, fmt.Sprintf("max %g", *p.Maximum))
		}
		fmt.Printf("| `%s` | %s | %s | %s |\n", fp, typ, oneLine(p.Description), strings.ReplaceAll(strings.Join(rules, "; "), "|", `\|`))
		if len(child.Properties) > 0 && !strings.HasSuffix(fp, "resources") && !strings.Contains(fp, "tolerations") && !strings.HasSuffix(fp, "conditions[]") {
			walk(fp, child, nil)
		}
	}
}

func oneLine(s string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "|", `\|`)
}
