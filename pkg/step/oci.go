package step

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Media types of the OCI artifacts a module may be published as.
const (
	// FluxConfigMediaType is the config of an artifact made by `flux push
	// artifact`.
	FluxConfigMediaType = "application/vnd.cncf.flux.config.v1+json"
	// FluxContentMediaType is the one layer of a Flux artifact: a gzipped
	// tarball of the pushed directory.
	FluxContentMediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"
	// OCILayerTarMediaType and OCILayerTarGzipMediaType are plain tarball
	// layers (oras push module.tar.gz:application/vnd.oci.image.layer.v1.tar+gzip).
	OCILayerTarMediaType     = "application/vnd.oci.image.layer.v1.tar"
	OCILayerTarGzipMediaType = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// moduleLayerTypes are the layer media types a module artifact's one layer
// may have.
var moduleLayerTypes = map[string]bool{
	FluxContentMediaType:     true,
	OCILayerTarMediaType:     true,
	OCILayerTarGzipMediaType: true,
}

// refusedConfigs are artifacts that are something else than a module, by
// their config media type, with what to call them in the error.
var refusedConfigs = map[string]string{
	"application/vnd.oci.image.config.v1+json":       "a container image",
	"application/vnd.docker.container.image.v1+json": "a container image",
	"application/vnd.cncf.helm.config.v1+json":       "a Helm chart",
}

// Limits of what an artifact may unpack to, so a hostile or mistaken
// artifact cannot fill the run's workspace.
const (
	// MaxModuleLayer is the largest layer (as stored, compressed) fetched.
	MaxModuleLayer = 256 << 20
	// MaxModuleBytes is the most a module may unpack to.
	MaxModuleBytes = 512 << 20
	// MaxModuleFiles is the most entries a module may have.
	MaxModuleFiles = 20000
)

// The limits in force; tests lower them.
var (
	maxModuleBytes int64 = MaxModuleBytes
	maxModuleFiles       = MaxModuleFiles
)

// ErrNotAModule is an OCI artifact that is not a module opr8r can unpack.
var ErrNotAModule = errors.New("not a module artifact")

// cloneOCI fetches the artifact o.URL at o.Ref (a tag or a digest), checks
// that it is a module, unpacks its layer into o.Dest and returns the
// manifest's digest, which is the run's revision.
func (r *Runner) cloneOCI(ctx context.Context, o CloneOptions) (string, error) {
	ref, err := ociReference(o.URL, o.Ref, o.Insecure)
	if err != nil {
		return "", err
	}
	auth, err := r.registryAuth(ref.Context().RegistryStr(), o.CredentialsDir)
	if err != nil {
		return "", err
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth), remote.WithUserAgent("opr8r-step")}
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return "", r.registryError(ref, err)
	}
	if desc.MediaType.IsIndex() {
		return "", fmt.Errorf("%w: %s is an image index (%s), a multi-platform image, not a module artifact; %s", ErrNotAModule, ref, desc.MediaType, publishHint)
	}
	m, err := v1.ParseManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		return "", fmt.Errorf("%w: %s: the manifest (%s) cannot be read: %v", ErrNotAModule, ref, desc.MediaType, err)
	}
	layer, err := moduleLayer(ref, m)
	if err != nil {
		return "", err
	}
	blob, err := remote.Layer(ref.Context().Digest(layer.Digest.String()), opts...)
	if err != nil {
		return "", r.registryError(ref, err)
	}
	verified, err := r.fetchLayer(ref, blob, layer, filepath.Dir(o.Dest))
	if err != nil {
		return "", err
	}
	defer func() { _ = verified.Close(); _ = os.Remove(verified.Name()) }()
	n, err := unpackModule(verified, o.Dest)
	if err != nil {
		return "", fmt.Errorf("unpacking %s (layer %s): %w", ref, layer.Digest, err)
	}
	r.logf("unpacked %d files of %s (%s, layer %s)", n, ref, m.Config.MediaType, layer.MediaType)
	return desc.Digest.String(), nil
}

// fetchLayer reads the whole layer into a file in dir and checks its
// digest and size against the manifest's before anything is unpacked: a tar
// ends at its end marker, so a reader that verifies the digest at EOF would
// let other bytes be unpacked before it ever checked them.
func (r *Runner) fetchLayer(ref name.Reference, blob v1.Layer, layer v1.Descriptor, dir string) (*os.File, error) {
	refuse := func(format string, a ...any) (*os.File, error) {
		return nil, fmt.Errorf("layer %s of %s: %s; nothing was unpacked", layer.Digest, ref, fmt.Sprintf(format, a...))
	}
	if layer.Digest.Algorithm != "sha256" {
		return refuse("digest algorithm %s is not sha256", layer.Digest.Algorithm)
	}
	if layer.Size > MaxModuleLayer {
		return refuse("the manifest says it is %d bytes, more than the %d a module layer may be", layer.Size, MaxModuleLayer)
	}
	rc, err := blob.Compressed()
	if err != nil {
		return nil, r.registryError(ref, err)
	}
	defer rc.Close()
	f, err := os.CreateTemp(dir, ".opr8r-layer-*")
	if err != nil {
		return nil, err
	}
	keep := false
	defer func() {
		if !keep {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(rc, MaxModuleLayer+1))
	switch got := "sha256:" + hex.EncodeToString(h.Sum(nil)); {
	case n > MaxModuleLayer:
		return refuse("the registry sent more than the %d bytes a module layer may be", MaxModuleLayer)
	case got != layer.Digest.String():
		return refuse("the registry served %d bytes whose digest is %s", n, got)
	case n != layer.Size:
		return refuse("the registry served %d bytes, the manifest says %d", n, layer.Size)
	case err != nil:
		return refuse("reading it: %v", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	keep = true
	return f, nil
}

const publishHint = "publish the module with `flux push artifact`, or as an artifact whose one layer is a tar or tar+gzip of the module (" + OCILayerTarGzipMediaType + ")"

// moduleLayer returns the one layer of a module artifact, or says what the
// artifact is instead.
func moduleLayer(ref name.Reference, m *v1.Manifest) (v1.Descriptor, error) {
	cfg := string(m.Config.MediaType)
	if what, ok := refusedConfigs[cfg]; ok {
		return v1.Descriptor{}, fmt.Errorf("%w: %s is %s (config %s); %s", ErrNotAModule, ref, what, cfg, publishHint)
	}
	if len(m.Layers) != 1 {
		return v1.Descriptor{}, fmt.Errorf("%w: %s has %d layers (config %s); a module artifact has exactly one; %s", ErrNotAModule, ref, len(m.Layers), cfg, publishHint)
	}
	l := m.Layers[0]
	if !moduleLayerTypes[string(l.MediaType)] {
		return v1.Descriptor{}, fmt.Errorf("%w: %s has a layer of type %s (config %s), not a tar or tar+gzip of a module; %s", ErrNotAModule, ref, l.MediaType, cfg, publishHint)
	}
	if l.Size > MaxModuleLayer {
		return v1.Descriptor{}, fmt.Errorf("%w: %s's layer is %d bytes, over the limit of %d", ErrNotAModule, ref, l.Size, MaxModuleLayer)
	}
	return l, nil
}

// ociReference parses oci://registry/repository and a tag or digest.
func ociReference(url, ref string, insecure bool) (name.Reference, error) {
	repo, ok := strings.CutPrefix(url, "oci://")
	if !ok || repo == "" {
		return nil, fmt.Errorf("--url %q: want oci://<registry>/<repository>", url)
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	s := repo + ":" + ref
	if strings.HasPrefix(ref, "sha256:") {
		s = repo + "@" + ref
	}
	r, err := name.ParseReference(s, append(opts, name.StrictValidation)...)
	if err != nil {
		return nil, fmt.Errorf("the OCI reference %s: %w", s, err)
	}
	return r, nil
}

// registryError turns a registry's answer into a message that says what to
// fix; credentials are redacted from it.
func (r *Runner) registryError(ref name.Reference, err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("registry %s refused access to %s (HTTP %d): check the credentials in spec.source.oci.credentialsSecretRef (%s)",
				ref.Context().RegistryStr(), ref.Context().RepositoryStr(), te.StatusCode, r.Redact(te.Error()))
		case http.StatusNotFound:
			return fmt.Errorf("%s not found in registry %s (HTTP 404): check spec.source.oci's url, tag and digest (%s)", ref, ref.Context().RegistryStr(), r.Redact(te.Error()))
		}
	}
	return fmt.Errorf("fetching %s: %s", ref, r.Redact(err.Error()))
}

// registryAuth reads the registry's credentials from the mounted Secret:
// a .dockerconfigjson (the entry for host), or username and password.
// Every credential is registered for redaction, in all its forms
// (AddSecret), with user:password, which basic auth encodes.
func (r *Runner) registryAuth(host, dir string) (authn.Authenticator, error) {
	if dir == "" {
		return authn.Anonymous, nil
	}
	read := func(name string) (string, bool, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		return string(b), true, nil
	}
	if raw, ok, err := read(".dockerconfigjson"); err != nil {
		return nil, fmt.Errorf("registry credentials: %w", err)
	} else if ok {
		cfg, err := dockerConfigEntry(raw, host)
		if err != nil {
			return nil, err
		}
		for _, v := range []string{cfg.Password, cfg.Auth, cfg.IdentityToken, cfg.RegistryToken} {
			r.AddSecret(v)
		}
		if cfg.Password != "" {
			r.AddSecret(cfg.Username + ":" + cfg.Password)
		}
		return authn.FromConfig(cfg), nil
	}
	user, uok, err := read("username")
	if err != nil {
		return nil, fmt.Errorf("registry credentials: %w", err)
	}
	pass, pok, err := read("password")
	if err != nil {
		return nil, fmt.Errorf("registry credentials: %w", err)
	}
	if !uok || !pok {
		return nil, errors.New(`registry credentials: the Secret has neither a ".dockerconfigjson" key (a kubernetes.io/dockerconfigjson Secret) nor the keys "username" and "password"`)
	}
	pass = strings.TrimRight(pass, "\r\n")
	r.AddSecret(pass)
	// What basic auth and a docker config's auth hold: base64 of
	// user:password (AddSecret adds it).
	r.AddSecret(strings.TrimRight(user, "\r\n") + ":" + pass)
	return authn.FromConfig(authn.AuthConfig{Username: strings.TrimRight(user, "\r\n"), Password: pass}), nil
}

// dockerConfigEntry finds host's entry in a .dockerconfigjson. Keys may be
// a bare host or a URL (https://host/v1/), as docker login writes them.
func dockerConfigEntry(raw, host string) (authn.AuthConfig, error) {
	var f struct {
		Auths map[string]struct {
			authn.AuthConfig
			Auth string `json:"auth"`
		} `json:"auths"`
	}
	if err := json.Unmarshal([]byte(raw), &f); err != nil {
		// The JSON error may quote part of the Secret; say only where.
		return authn.AuthConfig{}, errors.New("registry credentials: .dockerconfigjson is not valid JSON of the form {\"auths\": {...}}")
	}
	for key, e := range f.Auths {
		k := key
		if i := strings.Index(k, "://"); i >= 0 {
			k = k[i+3:]
		}
		k, _, _ = strings.Cut(k, "/")
		if k != host && !(host == name.DefaultRegistry && (k == "docker.io" || k == "registry-1.docker.io")) {
			continue
		}
		cfg := e.AuthConfig
		cfg.Auth = e.Auth
		if cfg.Auth != "" && cfg.Username == "" {
			dec, err := base64.StdEncoding.DecodeString(cfg.Auth)
			if err != nil {
				return authn.AuthConfig{}, fmt.Errorf("registry credentials: the auth of %s in .dockerconfigjson is not base64", key)
			}
			u, p, ok := strings.Cut(string(dec), ":")
			if !ok {
				return authn.AuthConfig{}, fmt.Errorf("registry credentials: the auth of %s in .dockerconfigjson is not user:password", key)
			}
			cfg.Username, cfg.Password = u, p
		}
		return cfg, nil
	}
	return authn.AuthConfig{}, fmt.Errorf("registry credentials: .dockerconfigjson has no entry for registry %s", host)
}

// unpackModule unpacks a tar or gzipped tar into dest: regular files,
// directories, and symbolic links that stay inside dest. Absolute paths,
// '..', links out of dest, writes through a link, hard links and device
// files are refused; so is more than MaxModuleBytes or MaxModuleFiles.
func unpackModule(in io.Reader, dest string) (int, error) {
	br := bufio.NewReader(in)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return 0, fmt.Errorf("the layer is not valid gzip: %w", err)
		}
		defer zr.Close()
		src = zr
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return 0, err
	}
	u := unpacker{dest: dest}
	tr := tar.NewReader(src)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return u.files, fmt.Errorf("the layer is not a valid tar: %w", err)
		}
		if err := u.entry(h, tr); err != nil {
			return u.files, err
		}
	}
	if u.files == 0 {
		return 0, errors.New("the artifact holds no files")
	}
	return u.files, nil
}

// unpacker writes a module's tar entries under dest, counting what it
// wrote against the module's limits.
type unpacker struct {
	dest           string
	files, entries int
	total          int64
}

// entry writes one tar entry, or refuses it.
func (u *unpacker) entry(h *tar.Header, body io.Reader) error {
	if u.entries++; u.entries > maxModuleFiles {
		return fmt.Errorf("more than %d entries", maxModuleFiles)
	}
	if h.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	rel, err := entryPath(h.Name)
	if err != nil || rel == "." {
		return err
	}
	target := filepath.Join(u.dest, filepath.FromSlash(rel))
	if err := noLinkInPath(u.dest, rel); err != nil {
		return err
	}
	switch h.Typeflag {
	case tar.TypeDir:
		return os.MkdirAll(target, 0o755)
	case tar.TypeReg:
		n, err := writeEntry(target, h.Mode, io.LimitReader(body, maxModuleBytes-u.total+1))
		if err != nil {
			return err
		}
		if u.total += n; u.total > maxModuleBytes {
			return fmt.Errorf("the module unpacks to more than %d bytes", maxModuleBytes)
		}
		u.files++
		return nil
	case tar.TypeSymlink:
		if err := linkInside(rel, h.Linkname); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		_ = os.Remove(target)
		return os.Symlink(h.Linkname, target)
	}
	return fmt.Errorf("entry %q is a %s, which a module may not contain (only files, directories and links inside the module)", h.Name, typeName(h.Typeflag))
}

// entryPath cleans a tar entry's name; it refuses an absolute path or one
// that leaves the module.
func entryPath(n string) (string, error) {
	if strings.HasPrefix(n, "/") || strings.Contains(n, `\`) {
		return "", fmt.Errorf("entry %q has an absolute or Windows path; a module's paths are relative", n)
	}
	c := path.Clean(n)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("entry %q points outside the module", n)
	}
	return c, nil
}

// linkInside refuses a symbolic link whose target leaves the module.
func linkInside(rel, target string) error {
	if path.IsAbs(target) {
		return fmt.Errorf("entry %q is a link to the absolute path %q; links must stay inside the module", rel, target)
	}
	j := path.Join(path.Dir(rel), target)
	if j == ".." || strings.HasPrefix(j, "../") {
		return fmt.Errorf("entry %q is a link to %q, outside the module", rel, target)
	}
	return nil
}

// noLinkInPath refuses an entry under a directory that is a symbolic link:
// writing through a link could leave dest even when every link points
// inside it on paper.
func noLinkInPath(dest, rel string) error {
	dir := dest
	parts := strings.Split(rel, "/")
	for _, p := range parts[:len(parts)-1] {
		dir = filepath.Join(dir, p)
		st, err := os.Lstat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("entry %q is under the link %q; a module may not write through a link", rel, p)
		}
	}
	return nil
}

func writeEntry(target string, mode int64, r io.Reader) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return 0, err
	}
	// Never open through a link an earlier entry made.
	if st, err := os.Lstat(target); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		if err := os.Remove(target); err != nil {
			return 0, err
		}
	}
	perm := os.FileMode(0o644)
	if mode&0o111 != 0 {
		perm = 0o755
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

func typeName(t byte) string {
	switch t {
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "named pipe"
	}
	return fmt.Sprintf("tar entry of type %q", t)
}
