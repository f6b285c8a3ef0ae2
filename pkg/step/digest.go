package step

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/opr8r/opr8r/pkg/names"
)

// InputsDigest is the digest of a plan's variables: the vars file and every
// varsFrom value, by name (and, in a plan, the values taken from
// dependencies), salted with o.InputsSalt. Scheduled checks compare
// it with the last apply's to tell changed inputs (a new desired state) from
// drift. The values themselves never leave the pod; the salt keeps the
// digest of a value from being compared across TerraformRuns.
func InputsDigest(o PlanOptions) (string, error) { return inputsDigest(o, nil) }

// inputsDigest is InputsDigest with the values of the variables taken from
// dependencies, by variable.
func inputsDigest(o PlanOptions, deps map[string]string) (string, error) {
	h := sha256.New()
	h.Write([]byte("opr8r inputs v1\x00" + o.InputsSalt + "\x00"))
	if o.VarsFile != "" {
		if err := hashFile(h, "vars", o.VarsFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	for i, dir := range o.VarsDirs {
		if err := hashDir(h, fmt.Sprintf("varsFrom/%d", i), dir); err != nil {
			return "", err
		}
	}
	names := slices.Sorted(maps.Keys(deps))
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%d\x00", "dependency/"+n, len(deps[n]))
		h.Write([]byte(deps[n]))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// TreeDigest is the digest of the regular files under dir, by relative
// path: the revision of a ConfigMap or inline source.
func TreeDigest(dir string) (string, error) {
	h := sha256.New()
	h.Write([]byte("opr8r tree v1\x00"))
	if err := hashDir(h, ".", dir); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// hashDir adds the regular files under dir (skipping a mounted ConfigMap's
// ..data bookkeeping and dot files but the lock file), sorted by path. A missing dir (an
// optional Secret or ConfigMap) adds nothing.
func hashDir(h hash.Hash, prefix, dir string) error {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !names.ModuleFileName(d.Name()) && p != dir {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, rel)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		if err := hashFile(h, prefix+"/"+f, filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	return nil
}

func hashFile(h hash.Hash, name, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
	h.Write(b)
	return nil
}
