package step

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/opr8r/opr8r/pkg/providers"
)

// Providers says where terraform installs providers from: set by the
// install's admin (the manager's --provider-* flags), never by a
// TerraformRun.
type Providers struct {
	// Mirror is the https URL of a provider network mirror; terraform
	// installs every provider from it and from nowhere else.
	Mirror string
	// MirrorCA is PEM trusted besides the image's roots.
	MirrorCA string
}

// systemCertDirs are the directories Go reads roots from on Linux when
// SSL_CERT_DIR is unset; setting it replaces them, so they are kept.
var systemCertDirs = []string{"/etc/ssl/certs", "/etc/pki/tls/certs"}

// UseProviders writes, under dir, the CLI configuration that points
// terraform at the mirror and the mirror's CA, and sets terraform's
// environment to read them. The image's own roots stay trusted (the CA is
// added to them), so backends and providers that speak TLS to public
// endpoints work as before.
func (r *Runner) UseProviders(p Providers, dir string) error {
	if p.Mirror == "" && p.MirrorCA == "" {
		return nil
	}
	mirror := ""
	if p.Mirror != "" {
		u, err := providers.MirrorURL(p.Mirror)
		if err != nil {
			return err
		}
		mirror = u
	}
	if p.MirrorCA != "" {
		if err := providers.CheckCA(p.MirrorCA); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	env := map[string]string{}
	if mirror != "" {
		cfg := fmt.Sprintf("# Written by opr8r: the install's provider network mirror.\nprovider_installation {\n  network_mirror {\n    url = %q\n  }\n}\n", mirror)
		f := filepath.Join(dir, "terraform.rc")
		if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
			return err
		}
		env["TF_CLI_CONFIG_FILE"] = f
	}
	if p.MirrorCA != "" {
		certs := filepath.Join(dir, "certs")
		if err := os.MkdirAll(certs, 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(certs, "provider-mirror-ca.pem"), []byte(p.MirrorCA), 0o600); err != nil {
			return err
		}
		env["SSL_CERT_DIR"] = strings.Join(append([]string{certs}, systemCertDirs...), ":")
	}
	if r.Env == nil {
		r.Env = map[string]string{}
	}
	maps.Copy(r.Env, env)
	return nil
}

// cacheLockFile is the lock init holds in the plugin cache: terraform
// writes into the cache without a lock of its own, and two inits filling
// it at once break each other ("text file busy", half-written
// packages).
const cacheLockFile = ".opr8r-init.lock"

// lockPluginCache takes the plugin cache's lock for one terraform init and
// returns its release; it logs a wait that anyone would notice.
func (r *Runner) lockPluginCache(ctx context.Context) (func(), error) {
	dir := r.envValue("TF_PLUGIN_CACHE_DIR")
	if dir == "" {
		return func() {}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the plugin cache %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, cacheLockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("the plugin cache's lock: %w", err)
	}
	began := time.Now()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking the plugin cache: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if w := time.Since(began); w >= time.Second {
		r.logf("waited %s for another init to finish with the plugin cache", w.Round(100*time.Millisecond))
	}
	return func() { f.Close() }, nil
}

// staleCachedPackageRE is OpenTofu's refusal of a cached package that
// does not match the package it downloaded and verified ("Error while
// installing <host>/<namespace>/<type> v<version>: existing cached
// package at ... does not match the content of the downloaded package").
var staleCachedPackageRE = regexp.MustCompile(`installing ([A-Za-z0-9.:_-]+)/([A-Za-z0-9_-]+)/([A-Za-z0-9_-]+) v([0-9A-Za-z.+_-]+): existing cached package`)

// staleCachedPackage is the directory, in the plugin cache, of the package
// an init error says does not match the verified download; empty for any
// other error.
func (r *Runner) staleCachedPackage(err error) string {
	var te *TerraformError
	cache := r.envValue("TF_PLUGIN_CACHE_DIR")
	if cache == "" || !errors.As(err, &te) {
		return ""
	}
	for _, e := range te.Errors {
		m := staleCachedPackageRE.FindStringSubmatch(e)
		if m == nil || slices.Contains(m[1:], "..") || slices.Contains(m[1:], ".") {
			continue
		}
		return filepath.Join(cache, m[1], m[2], m[3], m[4], runtime.GOOS+"_"+runtime.GOARCH)
	}
	return ""
}
