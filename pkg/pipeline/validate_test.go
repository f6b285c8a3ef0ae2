package pipeline

import (
	"strings"
	"testing"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// TestValidate covers the manager's own check of map keys, which stalls a
// run as InvalidSpec where the admission policy opr8r-spec-rules is not
// installed (or the object was stored before it).
func TestValidate(t *testing.T) {
	run := func(files map[string]infrav1.FileContent, rename map[string]infrav1.SecretDataKey) *infrav1.TerraformRun {
		r := &infrav1.TerraformRun{}
		r.Spec.Source.Inline = &infrav1.InlineSource{Files: files}
		r.Spec.Outputs.Rename = rename
		return r
	}
	cases := map[string]struct {
		run  *infrav1.TerraformRun
		want string
	}{
		"good":                   {run(map[string]infrav1.FileContent{"main.tf": "x", "vars.auto.tfvars": "y"}, map[string]infrav1.SecretDataKey{"id": "ID", "name": "NAME"}), ""},
		"a directory":            {run(map[string]infrav1.FileContent{"../escape.tf": "x"}, nil), `spec.source.inline.files: "../escape.tf" is not a plain file name`},
		"a hidden file":          {run(map[string]infrav1.FileContent{".vars.json": "x"}, nil), `".vars.json" is not a plain file name`},
		"the lock file":          {run(map[string]infrav1.FileContent{"main.tf": "x", ".terraform.lock.hcl": "y"}, nil), ""},
		"a lock file elsewhere":  {run(map[string]infrav1.FileContent{"x.terraform.lock.hcl.": "y", ".terraform.lock.hcl.bak": "z"}, nil), `".terraform.lock.hcl.bak" is not a plain file name`},
		"not an output name":     {run(map[string]infrav1.FileContent{"main.tf": "x"}, map[string]infrav1.SecretDataKey{"1st": "a"}), `spec.outputs.rename: "1st" is not a Terraform output name`},
		"two renamed to one key": {run(map[string]infrav1.FileContent{"main.tf": "x"}, map[string]infrav1.SecretDataKey{"a": "k", "b": "k"}), `outputs "a" and "b" are both renamed to "k"`},
	}
	withPaths := func(paths ...infrav1.PathPattern) *infrav1.TerraformRun {
		r := &infrav1.TerraformRun{}
		r.Spec.Source.Git = &infrav1.GitSource{URL: "https://git.example.com/x.git", Paths: paths}
		return r
	}
	cases["paths"] = struct {
		run  *infrav1.TerraformRun
		want string
	}{withPaths("stacks/network/**", "!**/*.md", "stacks/net[0-9]/*.tf"), ""}
	cases["a path with an unbalanced ["] = struct {
		run  *infrav1.TerraformRun
		want string
	}{withPaths("stacks/[net/**"), `spec.source.git.paths: "stacks/[net/**": "[net" is not a glob pattern`}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := Validate(tc.run)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestSpecHashLeavesOutPaths: spec.source.git.paths say which pushes wake
// a plan, not what it runs: changing them starts no run.
func TestSpecHashLeavesOutPaths(t *testing.T) {
	run := &infrav1.TerraformRun{}
	run.Spec.Source.Git = &infrav1.GitSource{URL: "https://git.example.com/x.git", Ref: "main"}
	before := SpecHash(run)
	run.Spec.Source.Git.Paths = []infrav1.PathPattern{"stacks/network/**"}
	if got := SpecHash(run); got != before {
		t.Errorf("SpecHash with paths = %s, want %s (as without)", got, before)
	}
	if len(run.Spec.Source.Git.Paths) != 1 {
		t.Error("SpecHash changed the run's paths")
	}
}
