// Package gitpaths matches the files a push changed against a
// TerraformRun's spec.source.git.paths: glob patterns relative to the
// repository's root, read as Atlantis reads when_modified (and Docker
// .dockerignore): "*" and "?" within a name, "**" for any number of
// directories, a directory standing for what is under it, "!" to exclude,
// the last matching pattern deciding.
package gitpaths

import (
	"fmt"
	"path"
	"strings"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Valid checks a pattern of spec.source.git.paths as the
// matcher reads it: "*", "?" and "[classes]" within a name, "**" for any
// number of directories, no backslash (path.Match's escape, which the API
// does not take).
func Valid(p string) error {
	if strings.Contains(p, `\`) {
		return fmt.Errorf("%q: no backslash", p)
	}
	for _, seg := range strings.Split(strings.TrimPrefix(p, "!"), "/") {
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("%q: %q is not a glob pattern (an unbalanced '[')", p, seg)
		}
	}
	return nil
}

// Match says whether file (relative to the repository's root) is one
// the patterns take, as Atlantis' when_modified (and .dockerignore) reads
// them: the last pattern that matches the file, or one of its directories,
// decides; a pattern with "!" excludes. A pattern that is not valid
// (Valid) matches every file: a bad filter plans.
func Match(patterns []infrav1.PathPattern, file string) bool {
	matched := false
	for _, p := range patterns {
		pat, neg := strings.CutPrefix(string(p), "!")
		if Valid(string(p)) != nil {
			if !neg {
				matched = true
			}
			continue
		}
		if matchOrParent(strings.Split(pat, "/"), strings.Split(file, "/")) {
			matched = !neg
		}
	}
	return matched
}

// matchOrParent says whether the pattern's segments match the file's, or
// the segments of one of the file's directories.
func matchOrParent(pat, file []string) bool {
	for n := len(file); n > 0; n-- {
		if matchSegments(pat, file[:n]) {
			return true
		}
	}
	return false
}

// matchSegments matches path segments; "**" takes any number of them.
func matchSegments(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchSegments(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}
