package step_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/opr8r/opr8r/pkg/results"
	"github.com/opr8r/opr8r/pkg/step"
)

// testRegistry is go-containerregistry's registry (the distribution API,
// in memory) served on 127.0.0.1; with a password it answers like a
// registry behind htpasswd: 401 with a Basic challenge unless the request
// carries user:password.
type testRegistry struct {
	host, user, password string
	// swap serves other bytes for the blobs of these digests, as a
	// compromised or broken registry would.
	swap map[string][]byte
}

func newTestRegistry(t *testing.T, user, password string) *testRegistry {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	tr := &testRegistry{user: user, password: password}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tr.password != "" {
			u, p, ok := r.BasicAuth()
			if !ok || u != tr.user || p != tr.password {
				w.Header().Set("WWW-Authenticate", `Basic realm="opr8r-test"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				fmt.Fprint(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
		}
		for d, b := range tr.swap {
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+d) {
				w.Header().Set("Content-Type", "application/octet-stream")
				_, _ = w.Write(b)
				return
			}
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	tr.host = strings.TrimPrefix(srv.URL, "http://")
	return tr
}

func (tr *testRegistry) url(repo string) string { return "oci://" + tr.host + "/" + repo }

// push writes an artifact under repo:tag and returns its manifest digest.
func (tr *testRegistry) push(t *testing.T, repo, tag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(tr.host + "/" + repo + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: tr.user, Password: tr.password})); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// tarball is a tar of files (path -> content), gzipped when gz.
func tarball(t *testing.T, gz bool, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	var tw *tar.Writer
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		tw = tar.NewWriter(zw)
	} else {
		tw = tar.NewWriter(&buf)
	}
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names) // the same files make the same layer
	for _, p := range names {
		c := files[p]
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// artifact is a one-layer OCI artifact with the given config and layer
// media types, the way `flux push artifact` or `oras push` make them.
func artifact(t *testing.T, configType, layerType string, layer []byte) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.MediaType(configType))
	img, err := mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(layer, types.MediaType(layerType))})
	if err != nil {
		t.Fatal(err)
	}
	return mutate.Annotations(img, map[string]string{"org.opencontainers.image.source": "opr8r-test"}).(v1.Image)
}

func fluxArtifact(t *testing.T, files map[string]string) v1.Image {
	return artifact(t, step.FluxConfigMediaType, step.FluxContentMediaType, tarball(t, true, files))
}

func cloneOCI(t *testing.T, o step.CloneOptions) (string, string, error) {
	t.Helper()
	var out bytes.Buffer
	r := &step.Runner{Out: &out, ResultsDir: t.TempDir()}
	o.Source = "oci"
	if o.Dest == "" {
		o.Dest = filepath.Join(t.TempDir(), "src")
	}
	err := r.Clone(context.Background(), o)
	commit := ""
	if b, rerr := os.ReadFile(filepath.Join(r.ResultsDir, results.Commit)); rerr == nil {
		commit = string(b)
	}
	if err == nil {
		b, rerr := os.ReadFile(filepath.Join(o.Dest, "stacks", "net", "main.tf"))
		if rerr != nil {
			return out.String(), commit, rerr
		}
		return string(b), commit, nil
	}
	return out.String(), commit, err
}

func TestCloneOCI(t *testing.T) {
	reg := newTestRegistry(t, "", "")
	v1Digest := reg.push(t, "modules/net", "stable", fluxArtifact(t, map[string]string{"stacks/net/main.tf": "# v1\n", "README.md": "v1"}))
	reg.push(t, "modules/net", "v1.0.0", fluxArtifact(t, map[string]string{"stacks/net/main.tf": "# v1\n", "README.md": "v1"}))
	plainDigest := reg.push(t, "modules/plain", "1", artifact(t, "application/vnd.oci.empty.v1+json", step.OCILayerTarMediaType,
		tarball(t, false, map[string]string{"stacks/net/main.tf": "# plain tar\n"})))
	gzDigest := reg.push(t, "modules/plain", "gz", artifact(t, "application/vnd.unknown.config.v1+json", step.OCILayerTarGzipMediaType,
		tarball(t, true, map[string]string{"stacks/net/main.tf": "# plain tar+gzip\n"})))

	cases := map[string]struct {
		repo, ref  string
		wantFile   string
		wantCommit string
	}{
		"flux artifact by tag":          {repo: "modules/net", ref: "stable", wantFile: "# v1\n", wantCommit: v1Digest},
		"flux artifact by digest":       {repo: "modules/net", ref: v1Digest, wantFile: "# v1\n", wantCommit: v1Digest},
		"plain tar layer":               {repo: "modules/plain", ref: "1", wantFile: "# plain tar\n", wantCommit: plainDigest},
		"plain tar+gzip layer (oras)":   {repo: "modules/plain", ref: "gz", wantFile: "# plain tar+gzip\n", wantCommit: gzDigest},
		"same content, same digest tag": {repo: "modules/net", ref: "v1.0.0", wantFile: "# v1\n", wantCommit: v1Digest},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, commit, err := cloneOCI(t, step.CloneOptions{URL: reg.url(tc.repo), Ref: tc.ref})
			if err != nil {
				t.Fatalf("clone: %v\n%s", err, got)
			}
			if got != tc.wantFile {
				t.Fatalf("stacks/net/main.tf = %q, want %q", got, tc.wantFile)
			}
			if commit != tc.wantCommit {
				t.Fatalf("commit result = %q, want the manifest digest %q", commit, tc.wantCommit)
			}
		})
	}
}

// A tag that moves gives a new revision (the commit result), which is
// what the scheduled checks compare with the last applied one; the digest
// still fetches the old artifact.
func TestCloneOCIMovedTagAndDigestPinning(t *testing.T) {
	reg := newTestRegistry(t, "", "")
	d1 := reg.push(t, "modules/net", "stable", fluxArtifact(t, map[string]string{"stacks/net/main.tf": "# v1\n"}))
	_, before, err := cloneOCI(t, step.CloneOptions{URL: reg.url("modules/net"), Ref: "stable"})
	if err != nil || before != d1 {
		t.Fatalf("before the move: commit %q, err %v; want %s", before, err, d1)
	}
	d2 := reg.push(t, "modules/net", "stable", fluxArtifact(t, map[string]string{"stacks/net/main.tf": "# v2\n"}))
	if d1 == d2 {
		t.Fatal("the test pushed the same artifact twice")
	}
	got, after, err := cloneOCI(t, step.CloneOptions{URL: reg.url("modules/net"), Ref: "stable"})
	if err != nil || got != "# v2\n" || after != d2 {
		t.Fatalf("after the move: file %q, commit %q, err %v; want # v2 and %s", got, after, err, d2)
	}
	got, pinned, err := cloneOCI(t, step.CloneOptions{URL: reg.url("modules/net"), Ref: d1})
	if err != nil || got != "# v1\n" || pinned != d1 {
		t.Fatalf("pinned to %s: file %q, commit %q, err %v; want # v1", d1, got, pinned, err)
	}
}

// A registry that serves other bytes for the layer of a digest-pinned
// artifact gets nothing unpacked: the layer's digest is checked before the
// first file is written (a tar ends at its end marker, before the reader
// that verifies the digest at EOF is drained).
func TestCloneOCIVerifiesTheLayerBeforeUnpacking(t *testing.T) {
	reg := newTestRegistry(t, "", "")
	img := fluxArtifact(t, map[string]string{"stacks/net/main.tf": "# v1\n"})
	pinned := reg.push(t, "modules/net", "v1", img)
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	layer, err := layers[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	evil := tarball(t, true, map[string]string{"stacks/net/main.tf": "# evil\n", "stacks/net/evil.tf": "resource \"x\" \"y\" {}\n"})
	for name, body := range map[string][]byte{
		"other bytes":                   evil,
		"other bytes, then the padding": append(evil, make([]byte, 4096)...),
	} {
		t.Run(name, func(t *testing.T) {
			reg.swap = map[string][]byte{layer.String(): body}
			dest := filepath.Join(t.TempDir(), "src")
			_, _, err := cloneOCI(t, step.CloneOptions{URL: reg.url("modules/net"), Ref: pinned, Dest: dest})
			if err == nil || !strings.Contains(err.Error(), layer.String()) || !strings.Contains(err.Error(), "nothing was unpacked") {
				t.Fatalf("clone of a layer served with other bytes: %v; want an error naming layer %s that says nothing was unpacked", err, layer)
			}
			var files []string
			_ = filepath.Walk(dest, func(p string, info os.FileInfo, err error) error {
				if err == nil && !info.IsDir() {
					files = append(files, p)
				}
				return nil
			})
			if len(files) > 0 {
				t.Fatalf("unpacked %v from bytes that are not the pinned layer", files)
			}
		})
	}
	reg.swap = nil
	if got, _, err := cloneOCI(t, step.CloneOptions{URL: reg.url("modules/net"), Ref: pinned}); err != nil || got != "# v1\n" {
		t.Fatalf("the right bytes: file %q, err %v", got, err)
	}
}

func credsDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for k, v := range files {
		write(t, filepath.Join(dir, k), v)
	}
	return dir
}

func TestCloneOCICredentials(t *testing.T) {
	const user, password = "robot", "s3cr3t-registry-pa55word"
	reg := newTestRegistry(t, user, password)
	d := reg.push(t, "private/net", "v1", fluxArtifact(t, map[string]string{"stacks/net/main.tf": "# private\n"}))
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	wrongAuth := base64.StdEncoding.EncodeToString([]byte(user + ":wrong-pa55word-1234"))

	ok := map[string]map[string]string{
		"username and password keys": {"username": user, "password": password + "\n"},
		"dockerconfigjson auth":      {".dockerconfigjson": fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, reg.host, auth)},
		"dockerconfigjson URL key":   {".dockerconfigjson": fmt.Sprintf(`{"auths":{"http://%s/v1/":{"username":%q,"password":%q}}}`, reg.host, user, password)},
	}
	for name, files := range ok {
		t.Run(name, func(t *testing.T) {
			got, commit, err := cloneOCI(t, step.CloneOptions{URL: reg.url("private/net"), Ref: "v1", CredentialsDir: credsDir(t, files)})
			if err != nil || got != "# private\n" || commit != d {
				t.Fatalf("file %q, commit %q, err %v", got, commit, err)
			}
		})
	}

	bad := map[string]struct {
		files   map[string]string
		wantErr string
	}{
		"no credentials":         {wantErr: "HTTP 401"},
		"wrong password":         {files: map[string]string{"username": user, "password": "wrong-pa55word-1234"}, wantErr: "HTTP 401"},
		"wrong dockerconfigjson": {files: map[string]string{".dockerconfigjson": fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, reg.host, wrongAuth)}, wantErr: "HTTP 401"},
		"other registry only":    {files: map[string]string{".dockerconfigjson": fmt.Sprintf(`{"auths":{"ghcr.io":{"auth":%q}}}`, auth)}, wantErr: "no entry for registry " + reg.host},
		"no usable key":          {files: map[string]string{"token": password}, wantErr: `nor the keys "username" and "password"`},
		"dockerconfigjson junk":  {files: map[string]string{".dockerconfigjson": `{"auths": ` + password}, wantErr: "not valid JSON"},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			o := step.CloneOptions{URL: reg.url("private/net"), Ref: "v1"}
			if tc.files != nil {
				o.CredentialsDir = credsDir(t, tc.files)
			}
			var out bytes.Buffer
			r := &step.Runner{Out: &out, ResultsDir: t.TempDir()}
			o.Source, o.Dest = "oci", filepath.Join(t.TempDir(), "src")
			err := r.Clone(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
			if strings.Contains(tc.wantErr, "401") && !strings.Contains(err.Error(), "credentialsSecretRef") {
				t.Fatalf("err = %v, want it to point at spec.source.oci.credentialsSecretRef", err)
			}
			for _, s := range []string{password, "wrong-pa55word-1234", auth, wrongAuth} {
				if strings.Contains(err.Error(), s) || strings.Contains(out.String(), s) || strings.Contains(r.Redact(err.Error()), s) {
					t.Fatalf("a credential leaked into the error or log:\n%v\n%s", err, out.String())
				}
			}
			t.Logf("%s: %v", name, r.Redact(err.Error()))
		})
	}
}

func TestCloneOCIRefusesWhatIsNotAModule(t *testing.T) {
	reg := newTestRegistry(t, "", "")
	image, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	reg.push(t, "images/app", "1", mutate.MediaType(image, types.OCIManifestSchema1))
	reg.push(t, "charts/app", "1", artifact(t, "application/vnd.cncf.helm.config.v1+json", "application/vnd.cncf.helm.chart.content.v1.tar+gzip", tarball(t, true, map[string]string{"app/Chart.yaml": "name: app\n"})))
	reg.push(t, "other/blob", "1", artifact(t, "application/vnd.oci.empty.v1+json", "application/vnd.example.sbom.v1+json", []byte(`{}`)))
	two := fluxArtifact(t, map[string]string{"main.tf": "#\n"})
	two, err = mutate.Append(two, mutate.Addendum{Layer: static.NewLayer(tarball(t, true, map[string]string{"b.tf": "#\n"}), step.FluxContentMediaType)})
	if err != nil {
		t.Fatal(err)
	}
	reg.push(t, "other/two", "1", two)
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: image})
	ref, _ := name.ParseReference(reg.host + "/images/multi:1")
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}

	cases := map[string]struct{ repo, want string }{
		"a container image": {repo: "images/app", want: "is a container image (config application/vnd.docker.container.image.v1+json)"},
		"a Helm chart":      {repo: "charts/app", want: "is a Helm chart (config application/vnd.cncf.helm.config.v1+json)"},
		"another layer":     {repo: "other/blob", want: "has a layer of type application/vnd.example.sbom.v1+json"},
		"two layers":        {repo: "other/two", want: "has 2 layers"},
		"an image index":    {repo: "images/multi", want: "is an image index"},
		"a missing tag":     {repo: "modules/none", want: "not found in registry"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := cloneOCI(t, step.CloneOptions{URL: reg.url(tc.repo), Ref: "1"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if tc.repo != "modules/none" && (!errors.Is(err, step.ErrNotAModule) || !strings.Contains(err.Error(), "flux push artifact")) {
				t.Fatalf("err = %v, want ErrNotAModule with how to publish a module", err)
			}
		})
	}
}

// rawTar builds a tar from headers (and contents for regular files).
func rawTar(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = "x"
			h.Size = 1
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Unpacking is safe: nothing lands outside the checkout.
func TestCloneOCIUnpacksSafely(t *testing.T) {
	reg := newTestRegistry(t, "", "")
	cases := map[string]struct {
		entries []tar.Header
		want    string
	}{
		"dot-dot path":          {entries: []tar.Header{{Name: "../escape.tf", Typeflag: tar.TypeReg}}, want: "points outside the module"},
		"absolute path":         {entries: []tar.Header{{Name: "/etc/escape.tf", Typeflag: tar.TypeReg}}, want: "absolute"},
		"link out":              {entries: []tar.Header{{Name: "a/l", Typeflag: tar.TypeSymlink, Linkname: "../../x"}}, want: "outside the module"},
		"absolute link":         {entries: []tar.Header{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}}, want: "absolute path"},
		"write through a link":  {entries: []tar.Header{{Name: "d", Typeflag: tar.TypeSymlink, Linkname: "."}, {Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: ".."}}, want: "under the link"},
		"hard link":             {entries: []tar.Header{{Name: "main.tf", Typeflag: tar.TypeReg}, {Name: "h", Typeflag: tar.TypeLink, Linkname: "main.tf"}}, want: "hard link"},
		"device":                {entries: []tar.Header{{Name: "dev", Typeflag: tar.TypeChar}}, want: "character device"},
		"no files":              {entries: []tar.Header{{Name: "empty/", Typeflag: tar.TypeDir}}, want: "no files"},
		"link inside (allowed)": {entries: []tar.Header{{Name: "stacks/net/real.tf", Typeflag: tar.TypeReg}, {Name: "stacks/net/main.tf", Typeflag: tar.TypeSymlink, Linkname: "real.tf"}}},
	}
	i := 0
	for name, tc := range cases {
		i++
		tag := fmt.Sprintf("c%d", i)
		reg.push(t, "hostile/m", tag, artifact(t, step.FluxConfigMediaType, step.OCILayerTarMediaType, rawTar(t, tc.entries...)))
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			dest := filepath.Join(parent, "src")
			got, _, err := cloneOCI(t, step.CloneOptions{URL: reg.url("hostile/m"), Ref: tag, Dest: dest})
			if tc.want == "" {
				if err != nil || got != "x" {
					t.Fatalf("file %q, err %v; want the link inside the module followed", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			entries, _ := os.ReadDir(parent)
			for _, e := range entries {
				if e.Name() != "src" {
					t.Fatalf("%s was written outside the checkout", e.Name())
				}
			}
		})
	}
}
