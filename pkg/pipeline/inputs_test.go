package pipeline_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/inputs"
	"github.com/opr8r/opr8r/pkg/pipeline"
	"github.com/opr8r/opr8r/pkg/testutil"
)

// incompressible is n bytes of hex that gzip cannot shrink below half.
func incompressible(n int) string {
	var b strings.Builder
	sum := sha256.Sum256([]byte("opr8r"))
	for b.Len() < n {
		b.WriteString(hex.EncodeToString(sum[:]))
		sum = sha256.Sum256(sum[:])
	}
	return b.String()[:n]
}

// TestWhereInputsTravel: small inputs travel in the child; past
// MaxEmbeddedInputs encoded, or past what a ConfigMap holds however well
// they compress, they go in the inputs ConfigMap (which the API server
// refuses past 1 MiB, with the reconciler's clear error).
func TestWhereInputsTravel(t *testing.T) {
	cases := map[string]struct {
		file         string
		wantEmbedded bool
	}{
		"a small module":                               {file: "output \"x\" { value = 1 }\n", wantEmbedded: true},
		"60 KiB of Terraform-like text":                {file: strings.Repeat("resource \"terraform_data\" \"x\" {\n  input = var.name\n}\n", 1200), wantEmbedded: true},
		"40 KiB that does not compress":                {file: incompressible(40 << 10)},
		"over 1 MiB that compresses to almost nothing": {file: strings.Repeat("#", 1<<20)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			run := testutil.MakeRun("r", "ns").Obj()
			run.Spec.Source.Inline.Files = map[string]infrav1.FileContent{"main.tf": infrav1.FileContent(tc.file)}
			run.Spec.Terraform.Vars = []infrav1.Variable{{Name: "name", Value: apiextensionsv1.JSON{Raw: []byte(`"demo"`)}}}
			enc, embedded, err := pipeline.EmbeddedInputs(run)
			if err != nil {
				t.Fatal(err)
			}
			if embedded != tc.wantEmbedded {
				t.Fatalf("embedded = %v (%d bytes encoded), want %v", embedded, len(enc), tc.wantEmbedded)
			}
			cms, err := pipeline.InputObjects(run, "r-1")
			if err != nil {
				t.Fatal(err)
			}
			if embedded {
				if len(cms) != 0 {
					t.Fatalf("embedded inputs and %d ConfigMaps", len(cms))
				}
				in, err := inputs.Decode(enc)
				if err != nil || in.Vars != `{"name":"demo"}` || in.Files["main.tf"] != tc.file {
					t.Fatalf("decoded inputs differ (%v): vars %s", err, in.Vars)
				}
				return
			}
			if len(cms) != 1 || cms[0].Data[pipeline.VarsKey] != `{"name":"demo"}` || cms[0].Data["main.tf"] != tc.file {
				t.Fatalf("want one inputs ConfigMap with the vars and the file, got %d", len(cms))
			}
		})
	}
}
