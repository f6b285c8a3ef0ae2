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

// initWith runs the init step in a fresh module directory (a run's own
// workspace) with the shared plugin cache and the mirror, as a step pod
// of an install with --provider-mirror-url and --provider-cache-claim.
func initWith(t *testing.T, m *mirror, cache string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(fakeProviderModule), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "backend.hcl")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("path = %q\n", filepath.Join(dir, "state.tfstate"))), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	r := &step.Runner{Out: &out, Env: map[string]string{"TF_PLUGIN_CACHE_DIR": cache, "TF_PLUGIN_CACHE_MAY_BREAK_DEPENDENCY_LOCK_FILE": "true"}}
	if err := r.UseProviders(step.Providers{Mirror: m.URL + "/providers", MirrorCA: m.ca()}, filepath.Join(dir, "providers")); err != nil {
		t.Fatal(err)
	}
	err := r.Init(context.Background(), step.Module{Dir: dir}, step.Backend{Type: "local", ConfigFile: cfg})
	return out.String(), err
}

// TestProviderMirrorAndSharedCache: init installs from the install's
// mirror over TLS with its private CA (the module names a provider that
// only the mirror has), and a later run's init, in another workspace,
// takes it from the shared cache without downloading it again.
func TestProviderMirrorAndSharedCache(t *testing.T) {
	m := newMirror(t)
	cache := t.TempDir()
	out, err := initWith(t, m, cache)
	if err != nil {
		t.Fatalf("first init: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Installed example.com/opr8r/fake v1.0.0") || m.downloads.Load() != 1 {
		t.Fatalf("first init: %d downloads, want 1 and the provider installed:\n%s", m.downloads.Load(), out)
	}
	out, err = initWith(t, m, cache)
	if err != nil {
		t.Fatalf("second init: %v\n%s", err, out)
	}
	if !strings.Contains(out, "from the shared cache directory") || m.downloads.Load() != 1 {
		t.Fatalf("second init: %d downloads, want still 1 and the provider from the shared cache:\n%s", m.downloads.Load(), out)
	}
}

// TestSharedCacheConcurrentInits: inits of several runs at once fill the
// cache one at a time (the cache's lock), so the provider is downloaded
// once and every init succeeds; terraform's own cache has no lock.
func TestSharedCacheConcurrentInits(t *testing.T) {
	m := newMirror(t)
	m.slow = 500 * time.Millisecond
	cache := t.TempDir()
	const n = 4
	var wg sync.WaitGroup
	outs, errs := make([]string, n), make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = initWith(t, m, cache)
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
