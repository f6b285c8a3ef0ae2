package inputs_test

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
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

// gzipBase64 is data gzipped and base64-encoded, as Encode frames it.
func gzipBase64(t *testing.T, data []byte) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

// TestDecodeBoundsInflation: Decode takes inputs as large as the manager
// embeds (1 MiB of content, however JSON escapes it) and refuses what
// inflates past them, before it is held whole, or holds more content.
func TestDecodeBoundsInflation(t *testing.T) {
	vars := `{"a":1}`
	// The content the manager still embeds: vars.json and one file, 1 MiB
	// together; "<" is escaped to six bytes of JSON.
	atLimit := inputs.Inputs{Vars: vars, Files: map[string]string{"main.tf": strings.Repeat("<", inputs.MaxContent-len(".vars.json")-len(vars)-len("main.tf"))}}
	pastLimit := inputs.Inputs{Vars: vars, Files: map[string]string{"main.tf": atLimit.Files["main.tf"] + "#"}}
	encode := func(in inputs.Inputs) string {
		s, err := inputs.Encode(in)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cases := map[string]struct {
		encoded string
		want    inputs.Inputs
		wantErr string
	}{
		"1 MiB of content, escaped sixfold": {encoded: encode(atLimit), want: atLimit},
		"a byte more content than a ConfigMap holds": {encoded: encode(pastLimit),
			wantErr: "the embedded inputs hold 1048577 bytes of vars and files, past the 1048576 a ConfigMap holds"},
		"a gzip bomb": {encoded: gzipBase64(t, make([]byte, 64<<20)),
			wantErr: "the embedded inputs inflate past 7340096 bytes"},
		"not gzip": {encoded: base64.StdEncoding.EncodeToString([]byte("plain")), wantErr: "not gzip"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := inputs.Decode(tc.encoded)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Decode() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Decode() (-want +got):\n%s", diff)
			}
		})
	}
}
