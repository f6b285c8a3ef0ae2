package inputs_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/opr8r/opr8r/pkg/inputs"
)

func TestRoundTripAndDeterminism(t *testing.T) {
	in := inputs.Inputs{Vars: `{"a":1,"b":"x"}`, Files: map[string]string{"main.tf": "variable \"a\" {}\n", "b.tf": strings.Repeat("# c\n", 100)}}
	a, err := inputs.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if b, _ := inputs.Encode(inputs.Inputs{Vars: in.Vars, Files: map[string]string{"b.tf": in.Files["b.tf"], "main.tf": in.Files["main.tf"]}}); b != a {
			t.Fatalf("encoding twice gave two texts")
		}
	}
	got, err := inputs.Decode(a)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}
