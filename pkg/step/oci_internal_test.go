package step

import (
	"archive/tar"
	"bytes"
	"strings"
	"testing"
)

// The size and entry limits hold however the tar is built.
func TestUnpackModuleLimits(t *testing.T) {
	defer func(b int64, f int) { maxModuleBytes, maxModuleFiles = b, f }(maxModuleBytes, maxModuleFiles)
	maxModuleBytes, maxModuleFiles = 1000, 5
	tarOf := func(sizes ...int) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for i, n := range sizes {
			_ = tw.WriteHeader(&tar.Header{Name: strings.Repeat("f", i+1) + ".tf", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(n)})
			_, _ = tw.Write(bytes.Repeat([]byte("#"), n))
		}
		_ = tw.Close()
		return buf.Bytes()
	}
	cases := map[string]struct {
		tar  []byte
		want string
	}{
		"within the limits": {tar: tarOf(400, 500)},
		"too many bytes":    {tar: tarOf(600, 600), want: "more than 1000 bytes"},
		"too many entries":  {tar: tarOf(1, 1, 1, 1, 1, 1), want: "more than 5 entries"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := unpackModule(bytes.NewReader(tc.tar), t.TempDir())
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
