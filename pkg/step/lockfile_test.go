package step_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opr8r/opr8r/pkg/inputs"
	"github.com/opr8r/opr8r/pkg/step"
)

// configMapDir lays files out as the kubelet mounts a ConfigMap: each key
// a link into ..data, a link to the timestamped directory that holds them.
func configMapDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	ts := "..2026_12_07_04_00_00.000000001"
	for k, v := range files {
		write(t, filepath.Join(dir, ts, k), v)
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(ts, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLockFileReachesTerraformFromEverySource: a module's committed
// .terraform.lock.hcl comes through the clone step from a git repository,
// an OCI artifact, an inline source (spec.source.inline.files, carried in
// the child or in the inputs ConfigMap, which is mounted like any
// ConfigMap) and a ConfigMap (spec.source.configMapRef, whose keys the
// kubelet mounts as links), and terraform's init then reads it: the
// provider comes from the package the lock file names, and the poisoned
// one in the shared cache is not installed. Other dot files of a
// ConfigMap stay out, as before; the lock file counts in the revision.
func TestLockFileReachesTerraformFromEverySource(t *testing.T) {
	m := newMirror(t)
	dir, out, err := initModule(t, "", m, t.TempDir(), "")
	if err != nil {
		t.Fatalf("the lock file's init: %v\n%s", err, out)
	}
	lock, genuine := readLock(t, dir), installed(t, dir)
	files := map[string]string{"main.tf": fakeProviderModule, ".terraform.lock.hcl": lock}

	repo := t.TempDir()
	git(t, repo, "init", "-q", "-b", "main")
	for k, v := range files {
		write(t, filepath.Join(repo, k), v)
	}
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-q", "-m", "a module and its lock file")

	reg := newTestRegistry(t, "", "")
	reg.push(t, "modules/fake", "1", fluxArtifact(t, files))

	enc, err := inputs.Encode(inputs.Inputs{Vars: "{}", Files: files})
	if err != nil {
		t.Fatal(err)
	}
	cmFiles := map[string]string{".hidden": "not the module's"}
	for k, v := range files {
		cmFiles[k] = v
	}

	revisions := map[string]string{}
	for name, o := range map[string]step.CloneOptions{
		"git":       {Source: "git", URL: "file://" + repo, Ref: "main"},
		"oci":       {Source: "oci", URL: reg.url("modules/fake"), Ref: "1"},
		"inline":    {Source: "inline", Inputs: enc, VarsOut: filepath.Join(t.TempDir(), "vars.json")},
		"configMap": {Source: "dir", From: configMapDir(t, cmFiles)},
	} {
		t.Run(name, func(t *testing.T) {
			var cloneOut bytes.Buffer
			r := &step.Runner{Out: &cloneOut, ResultsDir: t.TempDir()}
			o.Dest = filepath.Join(t.TempDir(), "src")
			if err := r.Clone(context.Background(), o); err != nil {
				t.Fatalf("clone: %v\n%s", err, cloneOut.String())
			}
			if got, err := os.ReadFile(filepath.Join(o.Dest, ".terraform.lock.hcl")); err != nil || string(got) != lock {
				t.Fatalf("the checkout's lock file: %v, %q; want the module's", err, got)
			}
			if _, err := os.Stat(filepath.Join(o.Dest, ".hidden")); err == nil {
				t.Error("a ConfigMap's other dot file came into the module")
			}
			rev, _ := os.ReadFile(filepath.Join(r.ResultsDir, "commit"))
			revisions[name] = string(rev)

			cache := t.TempDir()
			poisonCache(t, cache)
			out, err := initDir(t, "", m, cache, o.Dest)
			if err != nil {
				t.Fatalf("init: %v\n%s", err, out)
			}
			if !strings.Contains(out, "from the dependency lock file") {
				t.Errorf("init did not read the module's lock file:\n%s", out)
			}
			if installed(t, o.Dest) != genuine {
				t.Errorf("the poisoned cached package was installed:\n%s", out)
			}
		})
	}

	t.Run("the lock file is part of the revision", func(t *testing.T) {
		if revisions["inline"] == "" || revisions["inline"] != revisions["configMap"] {
			t.Fatalf("revisions of the same files, inline %q and from a ConfigMap %q: want one", revisions["inline"], revisions["configMap"])
		}
		without := configMapDir(t, map[string]string{"main.tf": fakeProviderModule})
		r := &step.Runner{Out: &bytes.Buffer{}, ResultsDir: t.TempDir()}
		if err := r.Clone(context.Background(), step.CloneOptions{Source: "dir", From: without, Dest: filepath.Join(t.TempDir(), "src")}); err != nil {
			t.Fatal(err)
		}
		if rev, _ := os.ReadFile(filepath.Join(r.ResultsDir, "commit")); string(rev) == revisions["configMap"] {
			t.Fatalf("the module with and without its lock file have one revision %s", rev)
		}
	})
}
