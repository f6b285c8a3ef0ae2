package results

import (
	"fmt"
	"strings"
)

// DependencyVar is the value of the plan step's --dependency-var flag: one
// variable taken from a dependency's outputs (spec.dependsOn), and where
// the step reads its value. It is defined here, once, for the pipeline that
// writes it and the step runner that reads it. It carries names only.
//
// The form is VAR,run=RUN,output=KEY,file=PATH (the dependency's outputs
// Secret mounted in the pod) or VAR,run=NS/RUN,output=KEY,secret=NS/NAME
// (read through the API, for a dependency in another namespace), with
// ",sensitive" when Terraform marked the output sensitive.
type DependencyVar struct {
	// Variable is the Terraform variable.
	Variable string
	// Run names the dependency, for messages: its name, or namespace/name.
	Run string
	// Output is the key of the dependency's outputs Secret.
	Output string
	// File is where the mounted value is; empty when Secret is set.
	File string
	// Secret is the namespace/name of the outputs Secret to read through
	// the API; empty when File is set.
	Secret string
	// Sensitive says the output is sensitive.
	Sensitive bool
}

// String is the flag's value.
func (d DependencyVar) String() string {
	s := d.Variable + ",run=" + d.Run + ",output=" + d.Output
	if d.File != "" {
		s += ",file=" + d.File
	} else {
		s += ",secret=" + d.Secret
	}
	if d.Sensitive {
		s += ",sensitive"
	}
	return s
}

// ParseDependencyVar reads a --dependency-var value.
func ParseDependencyVar(s string) (DependencyVar, error) {
	parts := strings.Split(s, ",")
	d := DependencyVar{Variable: parts[0]}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "run":
			d.Run = v
		case "output":
			d.Output = v
		case "file":
			d.File = v
		case "secret":
			d.Secret = v
		case "sensitive":
			d.Sensitive = true
		default:
			return d, fmt.Errorf("--dependency-var %q: unknown field %q", s, k)
		}
	}
	switch {
	case d.Variable == "" || d.Run == "" || d.Output == "":
		return d, fmt.Errorf("--dependency-var %q: want VAR,run=RUN,output=KEY,file=PATH or ...,secret=NS/NAME", s)
	case (d.File == "") == (d.Secret == ""):
		return d, fmt.Errorf("--dependency-var %q: set exactly one of file and secret", s)
	case d.Secret != "" && strings.Count(d.Secret, "/") != 1:
		return d, fmt.Errorf("--dependency-var %q: secret must be NAMESPACE/NAME", s)
	}
	return d, nil
}
