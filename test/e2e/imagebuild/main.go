// Command imagebuild writes a single-layer container image as a docker-archive
// tarball (what `ctr images import` and `docker load` read) from files on the
// host. The e2e cluster has no registry and no image builder, so every image
// it runs (pause, the engines' controllers, argoexec, Tekton's helpers,
// Terraform, opr8r) is assembled here from locally built static binaries.
//
//	imagebuild -ref quay.io/argoproj/argoexec:v3.7.18 -out argoexec.tar \
//	  -file bin/e2e/argo-3.7.18/argoexec:/bin/argoexec -entrypoint /bin/argoexec
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var files, envs, links multi
	ref := flag.String("ref", "", "image reference, e.g. localhost/opr8r/opr8r:e2e")
	out := flag.String("out", "", "docker-archive tarball to write")
	entrypoint := flag.String("entrypoint", "", "entrypoint, space-separated")
	cmd := flag.String("cmd", "", "default arguments, space-separated")
	user := flag.String("user", "", "user, e.g. 65532:65532")
	workdir := flag.String("workdir", "", "working directory")
	flag.Var(&files, "file", "HOSTPATH:IMAGEPATH, repeatable (mode kept from the host file)")
	flag.Var(&links, "symlink", "LINKPATH:TARGET, repeatable")
	flag.Var(&envs, "env", "KEY=VALUE, repeatable")
	flag.Parse()
	if *ref == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "imagebuild: -ref and -out are required")
		os.Exit(2)
	}
	if err := build(*ref, *out, *entrypoint, *cmd, *user, *workdir, files, links, envs); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

// epoch keeps the archive reproducible: the same inputs give the same digest.
var epoch = time.Unix(0, 0)

func build(ref, out, entrypoint, cmd, user, workdir string, files, links, envs []string) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	dirs := map[string]bool{}
	addDir := func(d string, mode int64) error {
		if d == "/" || d == "." || dirs[d] {
			return nil
		}
		dirs[d] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: mode, ModTime: epoch})
	}
	parents := func(p string) error {
		var chain []string
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			chain = append(chain, d)
		}
		for i := len(chain) - 1; i >= 0; i-- {
			if err := addDir(chain[i], 0o755); err != nil {
				return err
			}
		}
		return nil
	}
	// A writable /tmp and an /etc/passwd with a non-root user, as distroless has.
	if err := addDir("/tmp", 0o1777); err != nil {
		return err
	}
	if err := addDir("/etc", 0o755); err != nil {
		return err
	}
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group := "root:x:0:\nnonroot:x:65532:\n"
	for name, body := range map[string]string{"etc/passwd": passwd, "etc/group": group} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			return err
		}
	}
	if err := addDir("/home/nonroot", 0o755); err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		src, dst, ok := strings.Cut(f, ":")
		if !ok || !path.IsAbs(dst) {
			return fmt.Errorf("-file %q: want HOSTPATH:/ABSOLUTE/IMAGE/PATH", f)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		st, err := os.Stat(src)
		if err != nil {
			return err
		}
		if err := parents(dst); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(dst, "/"), Mode: int64(st.Mode().Perm()), Size: int64(len(data)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	for _, l := range links {
		name, target, ok := strings.Cut(l, ":")
		if !ok || !path.IsAbs(name) {
			return fmt.Errorf("-symlink %q: want /LINK/PATH:TARGET", l)
		}
		if err := parents(name); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(name, "/"), Linkname: target, Mode: 0o777, ModTime: epoch}); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer.Bytes())
	layerHex := hex.EncodeToString(layerSum[:])

	cfg := map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      epoch.UTC().Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": fields(entrypoint),
			"Cmd":        fields(cmd),
			"Env":        append([]string{"PATH=/usr/local/bin:/usr/bin:/bin:/ko-app"}, envs...),
			"User":       user,
			"WorkingDir": workdir,
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerHex}},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cfgSum := sha256.Sum256(cfgJSON)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   cfgName,
		"RepoTags": []string{ref},
		"Layers":   []string{layerHex + "/layer.tar"},
	}})
	if err != nil {
		return err
	}

	f, err := os.Create(out + ".tmp")
	if err != nil {
		return err
	}
	aw := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		data []byte
	}{{cfgName, cfgJSON}, {layerHex + "/layer.tar", layer.Bytes()}, {"manifest.json", manifest}} {
		if err := aw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := aw.Write(e.data); err != nil {
			return err
		}
	}
	if err := aw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(out+".tmp", out)
}

func fields(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Fields(s)
}
