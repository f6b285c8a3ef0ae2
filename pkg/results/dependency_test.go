package results

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDependencyVarRoundTrip(t *testing.T) {
	cases := map[string]DependencyVar{
		"mounted":                         {Variable: "vpc_id", Run: "network", Output: "vpc_id", File: "/opr8r/deps/0/vpc_id"},
		"read through the API, sensitive": {Variable: "db_password", Run: "platform/db", Output: "password", Secret: "platform/db-outputs", Sensitive: true},
	}
	for name, want := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseDependencyVar(want.String())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseDependencyVarRefuses(t *testing.T) {
	cases := map[string]string{
		"no source":        "x,run=a,output=b",
		"both sources":     "x,run=a,output=b,file=/f,secret=ns/s",
		"no output":        "x,run=a,file=/f",
		"a bare secret":    "x,run=a,output=b,secret=s",
		"an unknown field": "x,run=a,output=b,file=/f,mode=1",
	}
	for name, arg := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseDependencyVar(arg); err == nil || !strings.Contains(err.Error(), "--dependency-var") {
				t.Fatalf("ParseDependencyVar(%q) = %v, want an error naming the flag", arg, err)
			}
		})
	}
}
