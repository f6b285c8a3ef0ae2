package step_test

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opr8r/opr8r/pkg/step"
)

// mirror is a provider network mirror (the protocol terraform defines for
// network_mirror) over TLS, serving one provider, example.com/opr8r/fake
// 1.0.0, whose package is a script: init installs a provider without
// running it. It counts the package's downloads (GET).
type mirror struct {
	*httptest.Server
	downloads atomic.Int32
	// slow makes each download take a while, so inits that start
	// together are all fetching at the same moment.
	slow time.Duration
}

func newMirror(t *testing.T) *mirror {
	t.Helper()
	var pkg bytes.Buffer
	zw := zip.NewWriter(&pkg)
	h := &zip.FileHeader{Name: "terraform-provider-fake_v1.0.0", Method: zip.Deflate}
	h.SetMode(0o755)
	w, err := zw.CreateHeader(h)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(w, "#!/bin/sh\nexit 1\n")
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(pkg.Bytes())
	m := &mirror{}
	mux := http.NewServeMux()
	base := "/providers/example.com/opr8r/fake/"
	mux.HandleFunc(base+"index.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"versions":{"1.0.0":{}}}`)
	})
	mux.HandleFunc(base+"1.0.0.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"archives":{"linux_amd64":{"url":"fake_1.0.0_linux_amd64.zip","hashes":["zh:%s"]}}}`, hex.EncodeToString(sum[:]))
	})
	mux.HandleFunc(base+"fake_1.0.0_linux_amd64.zip", func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet { // terraform asks HEAD first
			m.downloads.Add(1)
			time.Sleep(m.slow)
		}
		w.Write(pkg.Bytes())
	})
	m.Server = httptest.NewTLSServer(mux)
	t.Cleanup(m.Close)
	return m
}

func (m *mirror) ca() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.Certificate().Raw}))
}

const fakeProviderModule = `terraform {
  required_providers {
    fake = { source = "example.com/opr8r/fake", version = "1.0.0" }
  }
}
`

// initModule runs the init step in a fresh module directory (a run's own
// workspace) with the shared plugin cache and the mirror, as a step pod
// of an install with --provider-mirror-url and --provider-cache-claim,
// with terraform or OpenTofu (bin; empty: terraform on PATH), in a module
// that commits the lock file lock (empty: none). It returns the module's
// directory and init's output.
func initModule(t *testing.T, bin string, m *mirror, cache, lock string) (string, string, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(fakeProviderModule), 0o644); err != nil {
		t.Fatal(err)
	}
	if lock != "" {
		if err := os.WriteFile(filepath.Join(dir, ".terraform.lock.hcl"), []byte(lock), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := initDir(t, bin, m, cache, dir)
	return dir, out, err
}

// initDir runs the init step, as initModule does, in a module already in
// dir (a clone step's checkout).
func initDir(t *testing.T, bin string, m *mirror, cache, dir string) (string, error) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "backend.hcl")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("path = %q\n", filepath.Join(dir, "state.tfstate"))), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r := &step.Runner{Terraform: bin, Out: &out, Env: map[string]string{"TF_PLUGIN_CACHE_DIR": cache}}
	if err := r.UseProviders(step.Providers{Mirror: m.URL + "/providers", MirrorCA: m.ca()}, filepath.Join(t.TempDir(), "providers")); err != nil {
		t.Fatal(err)
	}
	err := r.Init(context.Background(), step.Module{Dir: dir}, step.Backend{Type: "local", ConfigFile: cfg})
	return out.String(), err
}

// TestProviderMirrorAndSharedCache: init installs from the install's
// mirror over TLS with its private CA (the module names a provider that
// only the mirror has), and a later run's init, in another workspace,
// takes it from the shared cache without downloading it again when its
// module commits the lock file that lists the package's checksum. A
// module without one downloads every time: terraform uses a cached
// package only when a lock file vouches for it
// (TestSharedCacheVerifiesPackages).
func TestProviderMirrorAndSharedCache(t *testing.T) {
	m := newMirror(t)
	cache := t.TempDir()
	dir, out, err := initModule(t, "", m, cache, "")
	if err != nil {
		t.Fatalf("first init: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Installed example.com/opr8r/fake v1.0.0") || m.downloads.Load() != 1 {
		t.Fatalf("first init: %d downloads, want 1 and the provider installed:\n%s", m.downloads.Load(), out)
	}
	lock := readLock(t, dir)
	_, out, err = initModule(t, "", m, cache, lock)
	if err != nil {
		t.Fatalf("second init: %v\n%s", err, out)
	}
	if !strings.Contains(out, "from the shared cache directory") || m.downloads.Load() != 1 {
		t.Fatalf("second init, with the lock file: %d downloads, want still 1 and the provider from the shared cache:\n%s", m.downloads.Load(), out)
	}
	if _, out, err = initModule(t, "", m, cache, ""); err != nil || m.downloads.Load() != 2 {
		t.Fatalf("third init, without a lock file: %v, %d downloads, want 2 (a package no lock file lists is not taken from the cache):\n%s", err, m.downloads.Load(), out)
	}
}

// readLock is the lock file init wrote in a module's directory.
func readLock(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ".terraform.lock.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSharedCacheConcurrentInits: inits of several runs at once fill the
// cache one at a time (opr8r-step's lock: terraform's cache has no lock of
// its own; OpenTofu's has), so the provider is downloaded once and every
// init succeeds.
func TestSharedCacheConcurrentInits(t *testing.T) {
	m := newMirror(t)
	dir, out, err := initModule(t, "", m, t.TempDir(), "")
	if err != nil {
		t.Fatalf("the lock file's init: %v\n%s", err, out)
	}
	lock := readLock(t, dir)
	m.downloads.Store(0)
	m.slow = 500 * time.Millisecond
	cache := t.TempDir()
	const n = 4
	var wg sync.WaitGroup
	outs, errs := make([]string, n), make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, outs[i], errs[i] = initModule(t, "", m, cache, lock)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("init %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	if got := m.downloads.Load(); got != 1 {
		t.Fatalf("%d inits at once downloaded the provider %d times, want 1:\n%s", n, got, strings.Join(outs, "\n----\n"))
	}
}

// TestProviderMirrorRefusesBadSettings: a mirror that is not https (which
// terraform refuses) and a CA that is not PEM certificates are errors that
// say what to give instead, before terraform runs.
func TestProviderMirrorRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct {
		p    step.Providers
		want string
	}{
		{step.Providers{Mirror: "http://mirror.example/"}, "give an https:// URL"},
		{step.Providers{Mirror: "https://"}, "give an https:// URL"},
		{step.Providers{MirrorCA: "not a certificate"}, "not PEM certificates"},
		{step.Providers{MirrorCA: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}, "give only PEM certificates"},
	} {
		r := &step.Runner{}
		err := r.UseProviders(tc.p, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error with %q", tc.p, err, tc.want)
		}
		if r.Env["TF_CLI_CONFIG_FILE"] != "" {
			t.Errorf("%+v: terraform was pointed at a CLI config after an error", tc.p)
		}
	}
}

// poisonCache puts, where terraform's plugin cache keeps
// example.com/opr8r/fake 1.0.0, a package of someone else's: a script
// that is not the mirror's.
func poisonCache(t *testing.T, cache string) {
	t.Helper()
	d := filepath.Join(cache, "example.com", "opr8r", "fake", "1.0.0", "linux_amd64")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "terraform-provider-fake_v1.0.0"), []byte(poisoned), 0o755); err != nil {
		t.Fatal(err)
	}
}

const poisoned = "#!/bin/sh\necho POISONED\n"

// installed is the package init installed in a module's workspace.
func installed(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ".terraform", "providers", "example.com", "opr8r", "fake", "1.0.0", "linux_amd64", "terraform-provider-fake_v1.0.0"))
	if err != nil {
		t.Fatalf("the installed provider: %v", err)
	}
	return string(b)
}

// TestSharedCacheVerifiesPackages: a package someone put in the shared
// cache (a run's module code can write there) is never what a later run
// installs. Without TF_PLUGIN_CACHE_MAY_BREAK_DEPENDENCY_LOCK_FILE, which
// opr8r does not set, terraform and OpenTofu take a cached package only
// when the module's lock file lists its checksum; otherwise they download
// from the mirror and check the package against the lock file or, without
// one, against the hashes the mirror publishes. Terraform then leaves the
// changed package in the cache, unused; OpenTofu refuses to init over it,
// so the init step removes it and inits again: the cache heals.
func TestSharedCacheVerifiesPackages(t *testing.T) {
	for name, bin := range binaries(t) {
		t.Run(name, func(t *testing.T) {
			m := newMirror(t)
			// The lock file a module commits: what init writes from the
			// mirror, in a clean cache.
			dir, out, err := initModule(t, bin, m, t.TempDir(), "")
			if err != nil {
				t.Fatalf("clean init: %v\n%s", err, out)
			}
			lock, genuine := readLock(t, dir), installed(t, dir)
			if genuine == poisoned {
				t.Fatal("the mirror serves the poisoned package")
			}
			for _, tc := range []struct {
				name string
				lock string
			}{
				{"with a lock file", lock},
				{"without a lock file", ""},
			} {
				cache := t.TempDir()
				poisonCache(t, cache)
				before := m.downloads.Load()
				dir, out, err := initModule(t, bin, m, cache, tc.lock)
				if err != nil {
					t.Fatalf("%s: init: %v\n%s", tc.name, err, out)
				}
				if installed(t, dir) != genuine {
					t.Errorf("%s: the poisoned package from the cache was installed:\n%s", tc.name, out)
				}
				// OpenTofu's refused init downloaded it once already.
				want := map[string]int32{"terraform": 1, "tofu": 2}[name]
				if got := m.downloads.Load() - before; got != want {
					t.Errorf("%s: %d downloads from the mirror, want %d (the package verified, not the cached one):\n%s", tc.name, got, want, out)
				}
				if name == "tofu" && cached(t, cache) != genuine {
					t.Errorf("%s: the cache still holds the poisoned package after OpenTofu's init:\n%s", tc.name, out)
				}
				if name == "tofu" && !strings.Contains(out, "not the package the mirror serves") {
					t.Errorf("%s: the init step did not say it removed the changed package:\n%s", tc.name, out)
				}
				if tc.lock != "" && readLock(t, dir) != tc.lock {
					t.Errorf("%s: init changed the committed lock file:\n%s", tc.name, readLock(t, dir))
				}
			}
		})
	}
}

// cached is the package the plugin cache holds for example.com/opr8r/fake.
func cached(t *testing.T, cache string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cache, "example.com", "opr8r", "fake", "1.0.0", "linux_amd64", "terraform-provider-fake_v1.0.0"))
	if err != nil {
		t.Fatalf("the cached provider: %v", err)
	}
	return string(b)
}
