package step

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/mod/sumdb/dirhash"

	"github.com/opr8r/opr8r/pkg/names"
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
	wait := cmp.Or(r.CacheLockWait, DefaultCacheLockWait)
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
		if time.Since(began) > wait {
			f.Close()
			return nil, fmt.Errorf("another init held the plugin cache's lock for more than %s", wait)
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

// DefaultCacheLockWait is how long init waits for the shared plugin
// cache's lock before it installs the providers without the cache.
const DefaultCacheLockWait = 5 * time.Minute

// initWithSharedCache runs terraform init with the namespace's shared
// plugin cache, then makes the run's packages its own (privateProviders):
// the cache is written by the inits of every run of the namespace, and
// what terraform links from it could change after terraform checked it.
// Any error means the cache could not be used; Init then installs the
// providers without it.
func (r *Runner) initWithSharedCache(ctx context.Context, dir string, args []string) error {
	unlock, err := r.lockPluginCache(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	_, _, err = r.tf(ctx, dir, false, nil, args...)
	if stale := r.staleCachedPackage(err); stale != "" {
		// OpenTofu refuses a cached package that differs from the one it
		// downloaded and verified; terraform leaves it and installs the
		// verified one. Either way the cached one is not what the mirror
		// or the registry serves: drop it, and init again, once.
		r.logf("the plugin cache's %s is not the package the mirror serves (changed by someone): removing it", stale)
		if rmErr := os.RemoveAll(stale); rmErr != nil {
			return fmt.Errorf("removing the changed cached package %s: %w", stale, rmErr)
		}
		_, _, err = r.tf(ctx, dir, false, nil, args...)
	}
	if err != nil {
		return err
	}
	if _, err := privateProviders(dir); err != nil {
		return err
	}
	return verifyProviders(dir)
}

// initWithoutSharedCache installs the providers with no plugin cache at
// all: terraform downloads and checks each one into the module's
// .terraform/providers, which only this run's steps write.
func (r *Runner) initWithoutSharedCache(ctx context.Context, dir string, args []string) error {
	if err := os.RemoveAll(filepath.Join(dir, ".terraform", "providers")); err != nil {
		return fmt.Errorf("removing the providers the shared cache gave: %w", err)
	}
	prev, had := r.Env["TF_PLUGIN_CACHE_DIR"]
	if r.Env == nil {
		r.Env = map[string]string{}
	}
	// Empty is unset for terraform and OpenTofu, and wins over the
	// container's own environment.
	r.Env["TF_PLUGIN_CACHE_DIR"] = ""
	defer func() {
		if had {
			r.Env["TF_PLUGIN_CACHE_DIR"] = prev
		} else {
			delete(r.Env, "TF_PLUGIN_CACHE_DIR")
		}
	}()
	if _, _, err := r.tf(ctx, dir, false, nil, args...); err != nil {
		return err
	}
	_, err := privateProviders(dir)
	return err
}

// providersDir is where terraform installs a module's providers:
// <host>/<namespace>/<type>/<version>/<os>_<arch> under it is a package.
func providersDir(dir string) string { return filepath.Join(dir, ".terraform", "providers") }

// privateProviders replaces every symbolic link under the module's
// .terraform/providers (terraform links each package it takes from a
// plugin cache) with a copy of what it points to, and returns the paths
// it replaced. Later terraform commands, in this step and the next, then
// execute a copy only this run writes, never the shared cache's package,
// which any run's init may change once terraform checked it.
func privateProviders(dir string) ([]string, error) {
	var links []string
	root := providersDir(dir)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && path == root {
				return filepath.SkipDir
			}
			return err
		}
		if d.Type()&os.ModeSymlink != 0 {
			links = append(links, path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the module's providers: %w", err)
	}
	for _, l := range links {
		tmp := l + ".opr8r-copy"
		if err := os.RemoveAll(tmp); err != nil {
			return nil, err
		}
		if err := copyTree(l, tmp, 0); err != nil {
			os.RemoveAll(tmp)
			return nil, fmt.Errorf("copying the provider package %s from the plugin cache: %w", l, err)
		}
		if err := os.Remove(l); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, l); err != nil {
			return nil, err
		}
	}
	return links, nil
}

// maxCopyDepth bounds copyTree, which follows links (a loop of them).
const maxCopyDepth = 32

// copyTree copies src (followed if a link) to dst: directories and
// regular files only, with their permission bits. Anything else (a FIFO,
// which would block the read; a device) is an error.
func copyTree(src, dst string, depth int) error {
	if depth > maxCopyDepth {
		return fmt.Errorf("%s: too deep (a loop of links?)", src)
	}
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := copyTree(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), depth+1); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		return copyPackageFile(src, dst)
	default:
		return fmt.Errorf("%s is not a file or a directory (%s)", src, fi.Mode().Type())
	}
}

func copyPackageFile(src, dst string) error {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s)", src, fi.Mode().Type())
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm()|0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// lockProviderRE begins a provider block of a dependency lock file;
// lockH1RE is one of its h1 checksums (the hash of an unpacked package
// directory, dirhash.Hash1, as terraform and OpenTofu compute it).
var (
	lockProviderRE = regexp.MustCompile(`(?m)^\s*provider\s+"([^"]+)"\s*\{`)
	lockH1RE       = regexp.MustCompile(`"(h1:[A-Za-z0-9+/=]+)"`)
)

// lockH1Hashes are the h1 checksums the module's lock file lists, by
// provider address (lower case, host/namespace/type).
func lockH1Hashes(dir string) (map[string][]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, names.LockFile))
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	blocks := lockProviderRE.FindAllSubmatchIndex(b, -1)
	for i, m := range blocks {
		end := len(b)
		if i+1 < len(blocks) {
			end = blocks[i+1][0]
		}
		addr := strings.ToLower(string(b[m[2]:m[3]]))
		for _, h := range lockH1RE.FindAllSubmatch(b[m[1]:end], -1) {
			out[addr] = append(out[addr], string(h[1]))
		}
	}
	return out, nil
}

// verifyProviders checks every package of the module (privateProviders'
// copies) against the module's lock file, which init wrote or checked: its
// h1 checksum must be one the lock file lists for that provider. A package that changed in the cache while
// terraform linked it, or between terraform's check and the copy, is then
// an error, and Init installs again without the cache.
func verifyProviders(dir string) error {
	locked, err := lockH1Hashes(dir)
	if err != nil {
		return fmt.Errorf("reading the lock file to check the providers taken from the plugin cache: %w", err)
	}
	root := providersDir(dir)
	pkgs, err := filepath.Glob(filepath.Join(root, "*", "*", "*", "*", "*"))
	if err != nil {
		return err
	}
	for _, pkg := range pkgs {
		fi, err := os.Lstat(pkg)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, pkg)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		addr := strings.ToLower(strings.Join(parts[:3], "/"))
		if !fi.IsDir() {
			return fmt.Errorf("the provider package %s (%s %s) from the plugin cache is not a directory", rel, addr, parts[3])
		}
		sum, err := dirhash.HashDir(pkg, "", dirhash.Hash1)
		if err != nil {
			return fmt.Errorf("hashing the provider package %s: %w", rel, err)
		}
		if !slices.Contains(locked[addr], sum) {
			return fmt.Errorf("the provider package %s %s taken from the plugin cache has checksum %s, which the module's lock file does not list for it (the cache's package changed once terraform checked it)", addr, parts[3], sum)
		}
	}
	return nil
}
