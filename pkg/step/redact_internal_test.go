package step

import (
	"context"
	"os"
	"path/filepath"
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
	if got := out.String(); got != "first line\nlast line with ***\n" {
		t.Fatalf("after Flush: %q", got)
	}
}

// TestTerraformOutputWithoutFinalNewlineIsLogged runs a command through
// Runner.tf whose output ends without a newline: the line reaches the log,
// on a line of its own. The text is built by the command (printf with %s),
// so the logged command line itself cannot satisfy the check.
func TestTerraformOutputWithoutFinalNewlineIsLogged(t *testing.T) {
	var out strings.Builder
	r := &Runner{Out: &out, Terraform: "/bin/sh"}
	if _, _, err := r.tf(context.Background(), t.TempDir(), false, nil, "-c", "printf 'X%sY' 'AAA'; printf 'E%sF' 'BBB' >&2"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	for _, want := range []string{"XAAAY", "EBBBF"} {
		found := false
		for _, l := range lines {
			found = found || l == want
		}
		if !found {
			t.Errorf("log %q lacks the line %q", out.String(), want)
		}
	}
}

// TestDigestsTellChangesApart: the source digest follows the files, the
// inputs digest follows every variable value and the salt, and neither
// depends on file order or a ConfigMap mount's ..data bookkeeping.
func TestDigestsTellChangesApart(t *testing.T) {
	write := func(dir string, files map[string]string) string {
		for n, c := range files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, n)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	tree := func(files map[string]string) string {
		d, err := TreeDigest(write(t.TempDir(), files))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a := tree(map[string]string{"main.tf": "a", "b.tf": "b"})
	if a != tree(map[string]string{"b.tf": "b", "main.tf": "a", "..data/x": "bookkeeping"}) {
		t.Error("the source digest depends on order or ..data")
	}
	if a == tree(map[string]string{"main.tf": "a2", "b.tf": "b"}) {
		t.Error("an edited file does not change the source digest")
	}
	inputs := func(salt, vars, secret string) string {
		d := t.TempDir()
		o := PlanOptions{VarsFile: filepath.Join(write(d, map[string]string{"vars.json": vars}), "vars.json"),
			VarsDirs: []string{write(t.TempDir(), map[string]string{"db_password": secret})}, InputsSalt: salt}
		got, err := InputsDigest(o)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	base := inputs("uid-1", `{"n":1}`, "s3cret")
	for name, other := range map[string]string{
		"a var changed":      inputs("uid-1", `{"n":2}`, "s3cret"),
		"a varsFrom changed": inputs("uid-1", `{"n":1}`, "s3cret2"),
		"another salt":       inputs("uid-2", `{"n":1}`, "s3cret"),
	} {
		if other == base {
			t.Errorf("%s: the inputs digest did not change", name)
		}
	}
	if base != inputs("uid-1", `{"n":1}`, "s3cret") || strings.Contains(base, "s3cret") {
		t.Error("the inputs digest is not stable, or shows a value")
	}
}
