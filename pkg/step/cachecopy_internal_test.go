package step

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/mod/sumdb/dirhash"
)

// TestCachedCopyCheckedAgainstLockFile: what init copies from the shared
// cache must have an h1 checksum the module's lock file lists for that
// provider; a package changed in the cache after terraform checked it is
// an error (and Init installs again without the cache). Links in the
// module's providers become copies; a FIFO in the cache is refused, not
// read (it would block the step).
func TestCachedCopyCheckedAgainstLockFile(t *testing.T) {
	cache, mod := t.TempDir(), t.TempDir()
	pkg := filepath.Join(cache, "example.com", "opr8r", "fake", "1.0.0", "linux_amd64")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(pkg, "terraform-provider-fake_v1.0.0")
	if err := os.WriteFile(bin, []byte("genuine"), 0o755); err != nil {
		t.Fatal(err)
	}
	sum, err := dirhash.HashDir(pkg, "", dirhash.Hash1)
	if err != nil {
		t.Fatal(err)
	}
	lock := "provider \"example.com/opr8r/fake\" {\n  version = \"1.0.0\"\n  hashes = [\n    \"" + sum + "\",\n    \"zh:00\",\n  ]\n}\n"
	if err := os.WriteFile(filepath.Join(mod, ".terraform.lock.hcl"), []byte(lock), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(providersDir(mod), "example.com", "opr8r", "fake", "1.0.0", "linux_amd64")
	relink := func() {
		os.RemoveAll(providersDir(mod))
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(pkg, link); err != nil {
			t.Fatal(err)
		}
	}
	relink()
	if copied, err := privateProviders(mod); err != nil || len(copied) != 1 {
		t.Fatalf("copying: %v %v", copied, err)
	}
	if fi, err := os.Lstat(link); err != nil || !fi.IsDir() {
		t.Fatalf("the package is not a directory of the module's own: %v %v", fi, err)
	}
	if err := verifyProviders(mod); err != nil {
		t.Fatalf("the genuine copy: %v", err)
	}
	// Changed in the cache after terraform checked it.
	if err := os.WriteFile(bin, []byte("swapped"), 0o755); err != nil {
		t.Fatal(err)
	}
	relink()
	if _, err := privateProviders(mod); err != nil {
		t.Fatal(err)
	}
	if err := verifyProviders(mod); err == nil || !strings.Contains(err.Error(), "does not list") {
		t.Fatalf("a changed package: %v, want an error naming the lock file", err)
	}
	os.Remove(bin)
	if err := mkfifo(bin); err != nil {
		t.Fatal(err)
	}
	relink()
	if _, err := privateProviders(mod); err == nil || !strings.Contains(err.Error(), "not a file") {
		t.Fatalf("a FIFO in the cache: %v, want refused", err)
	}
}

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o644) }
