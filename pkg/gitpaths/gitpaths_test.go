package gitpaths

import (
	"testing"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

func TestMatch(t *testing.T) {
	cases := map[string]struct {
		patterns []infrav1.PathPattern
		file     string
		want     bool
	}{
		"a stack's file":                   {[]infrav1.PathPattern{"stacks/network/**"}, "stacks/network/main.tf", true},
		"deep under the stack":             {[]infrav1.PathPattern{"stacks/network/**"}, "stacks/network/a/b/c.tf", true},
		"another stack":                    {[]infrav1.PathPattern{"stacks/network/**"}, "stacks/dns/main.tf", false},
		"a prefix that is not a directory": {[]infrav1.PathPattern{"stacks/net"}, "stacks/network/main.tf", false},
		"a directory stands for its files": {[]infrav1.PathPattern{"stacks/network"}, "stacks/network/main.tf", true},
		"a file named exactly":             {[]infrav1.PathPattern{".terraform.lock.hcl"}, ".terraform.lock.hcl", true},
		"* stays within a name":            {[]infrav1.PathPattern{"*.tf"}, "stacks/main.tf", false},
		"** at the start":                  {[]infrav1.PathPattern{"**/*.tf"}, "stacks/network/main.tf", true},
		"** for no directory":              {[]infrav1.PathPattern{"**/*.tf"}, "main.tf", true},
		"** in the middle":                 {[]infrav1.PathPattern{"stacks/**/vars/*.tfvars"}, "stacks/network/eu/vars/prod.tfvars", true},
		"? and a class":                    {[]infrav1.PathPattern{"stacks/net[0-9]/m?in.tf"}, "stacks/net1/main.tf", true},
		"excluded by a later !":            {[]infrav1.PathPattern{"stacks/network/**", "!**/*.md"}, "stacks/network/README.md", false},
		"! first, then taken again":        {[]infrav1.PathPattern{"!**/*.md", "stacks/network/**"}, "stacks/network/README.md", true},
		"! keeps the rest":                 {[]infrav1.PathPattern{"stacks/network/**", "!**/*.md"}, "stacks/network/main.tf", true},
		"a bad pattern matches all":        {[]infrav1.PathPattern{"stacks/[net"}, "docs/x.md", true},
		"a bad exclusion excludes nothing": {[]infrav1.PathPattern{"**", "!stacks/[net"}, "stacks/net/x.tf", true},
		"no patterns":                      {nil, "main.tf", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Match(tc.patterns, tc.file); got != tc.want {
				t.Errorf("Match(%q, %q) = %v, want %v", tc.patterns, tc.file, got, tc.want)
			}
		})
	}
}

func TestValid(t *testing.T) {
	cases := map[string]struct {
		pattern string
		wantErr bool
	}{
		"glob":                {"stacks/**/*.tf", false},
		"class":               {"stacks/net[0-9]/**", false},
		"negated":             {"!**/*.md", false},
		"unbalanced [":        {"stacks/[net/**", true},
		"a backslash":         {`stacks\network`, true},
		"a negated bad class": {"![a", true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if err := Valid(tc.pattern); (err != nil) != tc.wantErr {
				t.Errorf("Valid(%q) = %v, want error %v", tc.pattern, err, tc.wantErr)
			}
		})
	}
}
