package testutil

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// update rewrites the golden files (go test ./engines/... -update, or
// make update-golden). Defined once here: every engine's golden test uses it.
var update = flag.Bool("update", false, "rewrite golden files")

// Golden compares got with testdata/<name>.golden.yaml (rewriting it first
// with -update) and reports a difference as a test error.
func Golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden.yaml")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run make update-golden): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got); run make update-golden if intended:\n%s", path, diff)
	}
}
