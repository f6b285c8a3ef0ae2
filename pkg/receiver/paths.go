package receiver

import (
	"fmt"
	"strings"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/gitpaths"
)

// PathVerdict is what spec.source.git.paths make of a push, for one run.
type PathVerdict struct {
	// Plan says the run plans the push; false: it takes it without a plan.
	Plan bool
	// Why says which rule decided, for the push's message and the run's
	// status.
	Why string
}

// DecidePaths is whether push p, which would mark run, must plan it given
// the run's spec.source.git.paths: a pure function of the run and the
// push. It fails open: anything short of a complete list of the push's
// files, read from the commit the run is known to be at, plans.
func DecidePaths(p infrav1.ReceivedPush, run *infrav1.TerraformRun) PathVerdict {
	g := run.Spec.Source.Git
	switch {
	case g == nil || len(g.Paths) == 0:
		return PathVerdict{Plan: true, Why: "no spec.source.git.paths"}
	case !p.FilesKnown:
		return PathVerdict{Plan: true, Why: "the payload does not show every file the push changed (a truncated or missing list of commits, a new ref, or a push that may have been forced)"}
	case pendingPush(run):
		return PathVerdict{Plan: true, Why: "an earlier push is not planned yet"}
	case !at(run, p.Before):
		return PathVerdict{Plan: true, Why: "the push does not start from the commit the run is at (" + short(p.Before) + ")"}
	}
	for _, f := range p.Files {
		if gitpaths.Match(g.Paths, f) {
			return PathVerdict{Plan: true, Why: "it changed " + f}
		}
	}
	return PathVerdict{Plan: false, Why: fmt.Sprintf("no path matched: %s", filesSummary(p.Files))}
}

// pendingPush says whether the run is marked with a push that no run has
// covered and no skip took: a later push must not hide it.
func pendingPush(run *infrav1.TerraformRun) bool {
	marked := run.Annotations[infrav1.SourcePushAnnotation]
	if marked == "" || marked == run.Status.LastHandledPush {
		return false
	}
	if cur := run.Status.Run; cur != nil && cur.Commit == marked {
		return false
	}
	return !skipped(run, marked)
}

// skipped says whether the run's skip annotation names commit.
func skipped(run *infrav1.TerraformRun, commit string) bool {
	sha, _, _ := strings.Cut(run.Annotations[infrav1.SourcePushSkippedAnnotation], " ")
	return sha != "" && sha == commit
}

// at says whether commit is the one the run is known to be at: the commit
// its latest run cloned, the push it last took (planned or skipped), or
// the push it is marked to skip and has not taken yet.
func at(run *infrav1.TerraformRun, commit string) bool {
	if commit == "" {
		return false
	}
	if run.Annotations[infrav1.SourcePushAnnotation] == commit && skipped(run, commit) {
		return true
	}
	if cur := run.Status.Run; cur != nil && cur.Commit == commit {
		return true
	}
	return run.Status.LastHandledPush == commit
}

// filesSummary names at most three files and counts the rest.
func filesSummary(files []string) string {
	if len(files) == 0 {
		return "the push changed no file"
	}
	n := min(len(files), 3)
	s := "the push changed " + strings.Join(files[:n], ", ")
	if len(files) > n {
		s += fmt.Sprintf(" and %d more", len(files)-n)
	}
	return s
}
