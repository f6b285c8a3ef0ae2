package step_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// TestCachedPackageSwappedAfterVerification: init links the
// module's provider into the shared cache (.terraform/providers/... is a
// symlink to /opr8r/provider-cache/...), and every terraform command
// checks the package's checksum once, when it starts, then executes the
// binary later, through the link. Module code of another run of the
// namespace (a pull request's preview, an editor's plan: every terraform
// step mounts the cache read-write) that swaps the binary once terraform
// has read it (inotify on the node; a RWX volume: a loop) gets its binary
// executed by this run's step: an apply runs it as the runner, with its
// cloud identity. The verified package must be what executes.
func TestCachedPackageSwappedAfterVerification(t *testing.T) {
	for name, bin := range binaries(t) {
		t.Run(name, func(t *testing.T) {
			m := newMirror(t)
			dir, out, err := initModule(t, bin, m, t.TempDir(), "")
			if err != nil {
				t.Fatalf("init: %v\n%s", err, out)
			}
			lock := readLock(t, dir)
			cache := t.TempDir()
			victim, out, err := initModule(t, bin, m, cache, lock)
			if err != nil {
				t.Fatalf("the victim's init: %v\n%s", err, out)
			}
			// The package came from the cache, and the module holds a copy
			// of it, checked against the lock file: no link into the cache.
			if strings.Contains(out, "could not be used") {
				t.Fatalf("the victim's init left the cache out:\n%s", out)
			}
			if fi, err := os.Lstat(filepath.Join(victim, ".terraform", "providers", "example.com", "opr8r", "fake", "1.0.0", "linux_amd64")); err != nil || fi.Mode()&os.ModeSymlink != 0 {
				t.Fatalf("the victim's package is not its own copy: %v %v", fi, err)
			}
			pkgDir := filepath.Join(cache, "example.com", "opr8r", "fake", "1.0.0", "linux_amd64")
			binPath := filepath.Join(pkgDir, "terraform-provider-fake_v1.0.0")
			marker := filepath.Join(t.TempDir(), "ran")
			fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
			if err != nil {
				t.Fatal(err)
			}
			defer syscall.Close(fd)
			if _, err := syscall.InotifyAddWatch(fd, binPath, syscall.IN_CLOSE_NOWRITE); err != nil {
				t.Fatal(err)
			}
			// The attacker, in another pod mounting the cache: once terraform
			// read the package to hash it, it swaps the binary. It stops
			// when the test does (before the cache's directory is removed,
			// which it would race).
			done, stopped := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(stopped)
				buf := make([]byte, 4096)
				for {
					n, err := syscall.Read(fd, buf)
					if err == nil && n >= syscall.SizeofInotifyEvent {
						ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[0]))
						if ev.Mask&syscall.IN_CLOSE_NOWRITE != 0 {
							break
						}
					}
					select {
					case <-done:
						return
					case <-time.After(time.Millisecond):
					}
				}
				tmp := filepath.Join(pkgDir, ".swap")
				os.WriteFile(tmp, []byte("#!/bin/sh\ntouch "+marker+"\nexit 1\n"), 0o755)
				os.Rename(tmp, binPath)
			}()
			time.Sleep(50 * time.Millisecond)
			cmd := exec.Command(bin, "validate", "-no-color")
			cmd.Dir = victim
			cmd.Env = append(os.Environ(), "TF_PLUGIN_CACHE_DIR="+cache)
			o, _ := cmd.CombinedOutput()
			close(done)
			<-stopped
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("a binary put in the shared cache after init verified the package was executed by the run's terraform:\n%s", o)
			}
		})
	}
}

// TestCacheChangedBetweenInitAndApply: a package changed in the
// shared cache after a run's init (hours may pass at the approval gate)
// makes that run's plan or apply fail ("does not match any of the
// checksums recorded in the dependency lock file"): any run's module code
// fails every other run of the namespace that is between init and apply.
func TestCacheChangedBetweenInitAndApply(t *testing.T) {
	m := newMirror(t)
	dir, out, err := initModule(t, "", m, t.TempDir(), "")
	if err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	lock := readLock(t, dir)
	cache := t.TempDir()
	victim, out, err := initModule(t, "", m, cache, lock)
	if err != nil {
		t.Fatalf("the victim's init: %v\n%s", err, out)
	}
	poisonCache(t, cache)
	cmd := exec.Command("terraform", "validate", "-no-color")
	cmd.Dir = victim
	cmd.Env = append(os.Environ(), "TF_PLUGIN_CACHE_DIR="+cache)
	o, _ := cmd.CombinedOutput()
	if strings.Contains(string(o), "does not match any of the checksums") {
		t.Errorf("a package changed in the shared cache after init fails the run's later steps:\n%s", o)
	}
}

// TestCacheShapesStopNoInit: module code (or an init of a
// pull request's module) that leaves the cache in a shape terraform cannot
// write over makes every later init of the namespace fail until an admin
// empties the claim: the init lock made a directory, a provider's path
// made a file, its binary made a directory. Only OpenTofu's "existing
// cached package" error is healed.
func TestCacheShapesStopNoInit(t *testing.T) {
	m := newMirror(t)
	dir, out, err := initModule(t, "", m, t.TempDir(), "")
	if err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	lock := readLock(t, dir)
	for name, shape := range map[string]func(cache string){
		"the init lock is a directory": func(c string) { os.MkdirAll(filepath.Join(c, ".opr8r-init.lock"), 0o755) },
		"the provider's path is a file": func(c string) {
			os.MkdirAll(filepath.Join(c, "example.com", "opr8r"), 0o755)
			os.WriteFile(filepath.Join(c, "example.com", "opr8r", "fake"), nil, 0o644)
		},
		"the binary is a directory": func(c string) {
			os.MkdirAll(filepath.Join(c, "example.com", "opr8r", "fake", "1.0.0", "linux_amd64", "terraform-provider-fake_v1.0.0"), 0o755)
		},
	} {
		cache := t.TempDir()
		shape(cache)
		_, out, err := initModule(t, "", m, cache, lock)
		if err != nil {
			t.Errorf("%s: a real run's init fails: %v\n%s", name, err, out)
			continue
		}
		if !strings.Contains(out, "could not be used") || !strings.Contains(out, "without it") {
			t.Errorf("%s: the step's log does not say the shared cache was left out:\n%s", name, out)
		}
	}
}
