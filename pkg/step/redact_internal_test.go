package step

import (
	"context"
	"strings"
	"testing"
)

// TestRedactingWriterFlushesTheLastLine: a last line without a newline is
// still written, redacted. (Flush was never called: such a line was lost.)
func TestRedactingWriterFlushesTheLastLine(t *testing.T) {
	var out strings.Builder
	r := &Runner{Out: &out}
	r.AddSecret("hunter22")
	w := &redactingWriter{r: r, w: &out}
	if _, err := w.Write([]byte("first line\nlast line with hunter22")); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "first line\n" {
		t.Fatalf("before Flush: %q", got)
	}
	w.Flush()
	if got := out.String(); got != "first line\nlast line with ***" {
		t.Fatalf("after Flush: %q", got)
	}
}

// TestTerraformOutputWithoutFinalNewlineIsLogged runs a command through
// Runner.tf whose output ends without a newline: the line reaches the log.
func TestTerraformOutputWithoutFinalNewlineIsLogged(t *testing.T) {
	var out strings.Builder
	r := &Runner{Out: &out, Terraform: "/bin/sh"}
	if _, _, err := r.tf(context.Background(), t.TempDir(), false, nil, "-c", "printf 'no newline at the end'; printf 'err tail' >&2"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"no newline at the end", "err tail"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("log %q lacks %q", out.String(), want)
		}
	}
}
