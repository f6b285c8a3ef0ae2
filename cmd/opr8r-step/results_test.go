package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// results is the last container of Argo's plan pod: it names what the steps
// before it wrote, and refuses when they wrote nothing or no directory was
// given (the pod then fails instead of handing Argo empty outputs).
func TestPublishResults(t *testing.T) {
	dir := t.TempDir()
	for name, v := range map[string]string{"digest": "sha256:00", "has-changes": "true"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if code := run([]string{"results", "--results-dir=" + dir}, &out); code != 0 {
		t.Fatalf("results exited %d: %s", code, out.String())
	}
	if !strings.Contains(out.String(), "opr8r-step: results published: digest, has-changes") {
		t.Errorf("results said %q, want the names of both results", out.String())
	}

	out.Reset()
	if code := run([]string{"results", "--results-dir=" + t.TempDir()}, &out); code == 0 || !strings.Contains(out.String(), "no step wrote a result") {
		t.Errorf("an empty results directory: exit %d, %q; want a failure naming it", code, out.String())
	}
	out.Reset()
	if code := run([]string{"results"}, &out); code == 0 || !strings.Contains(out.String(), "results needs --results-dir") {
		t.Errorf("no --results-dir: exit %d, %q; want a failure naming the flag", code, out.String())
	}
}
