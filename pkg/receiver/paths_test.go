package receiver

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// commits are a payload's commits, each changing files (added, modified,
// removed).
func commits(files ...[3][]string) []any {
	var out []any
	for i, f := range files {
		out = append(out, map[string]any{"id": fmt.Sprintf("%040d", i+1), "message": "m", "added": f[0], "modified": f[1], "removed": f[2]})
	}
	return out
}

func files(added, modified, removed []string) [3][]string {
	return [3][]string{added, modified, removed}
}

// TestPushFiles: what each forge's push payload says of the files it
// changed, and when that is all of them. Anything short of a complete
// list (a truncated list of commits, commits without file lists, a new
// ref, a force push, a payload that does not say whether it was forced)
// is not known, and the runs plan.
func TestPushFiles(t *testing.T) {
	two := commits(files([]string{"stacks/net/a.tf"}, nil, nil), files(nil, []string{"docs/x.md"}, []string{"stacks/net/a.tf"}))
	twenty := make([]any, 20)
	for i := range twenty {
		twenty[i] = commits(files(nil, []string{"docs/x.md"}, nil))[0]
	}
	cases := map[string]struct {
		forge     infrav1.ReceiverType
		sample    string
		event     string
		set       map[string]any
		wantFiles []string
		wantKnown bool
	}{
		"GitHub: every file of every commit, once": {forge: infrav1.ReceiverGitHub, sample: "github-push.json", event: "push",
			set: map[string]any{"commits": two, "forced": false}, wantFiles: []string{"stacks/net/a.tf", "docs/x.md"}, wantKnown: true},
		"GitHub: a force push": {forge: infrav1.ReceiverGitHub, sample: "github-push.json", event: "push",
			set: map[string]any{"commits": two, "forced": true}},
		"GitHub: 20 commits, maybe cut": {forge: infrav1.ReceiverGitHub, sample: "github-push.json", event: "push",
			set: map[string]any{"commits": twenty, "forced": false}},
		"GitHub: a new branch": {forge: infrav1.ReceiverGitHub, sample: "github-push.json", event: "push",
			set: map[string]any{"commits": two, "forced": false, "before": strings.Repeat("0", 40)}},
		"GitHub: commits without file lists (the sample)": {forge: infrav1.ReceiverGitHub, sample: "github-push.json", event: "push"},
		"GitHub: no commits": {forge: infrav1.ReceiverGitHub, sample: "github-push.json", event: "push",
			set: map[string]any{"commits": []any{}, "forced": false}},
		"Gitea: no forced field, so never known": {forge: infrav1.ReceiverGitea, sample: "gitea-push.json", event: "push",
			set: map[string]any{"commits": two, "total_commits": 2}},
		"Gitea (a version that says forced: false), all listed": {forge: infrav1.ReceiverGitea, sample: "gitea-push.json", event: "push",
			set: map[string]any{"commits": two, "total_commits": 2, "forced": false}, wantFiles: []string{"stacks/net/a.tf", "docs/x.md"}, wantKnown: true},
		"Gitea: more commits than listed": {forge: infrav1.ReceiverGitea, sample: "gitea-push.json", event: "push",
			set: map[string]any{"commits": two, "total_commits": 7, "forced": false}},
		"GitLab: the sample, 4 commits counted, 1 listed": {forge: infrav1.ReceiverGitLab, sample: "gitlab-push.json", event: "Push Hook",
			set: map[string]any{"forced": false}},
		"GitLab: all listed, forced false": {forge: infrav1.ReceiverGitLab, sample: "gitlab-push.json", event: "Push Hook",
			set: map[string]any{"commits": two, "total_commits_count": 2, "forced": false}, wantFiles: []string{"stacks/net/a.tf", "docs/x.md"}, wantKnown: true},
		"GitLab: all listed, no forced field": {forge: infrav1.ReceiverGitLab, sample: "gitlab-push.json", event: "Push Hook",
			set: map[string]any{"commits": two, "total_commits_count": 2}},
		"GitLab: a force push": {forge: infrav1.ReceiverGitLab, sample: "gitlab-push.json", event: "Push Hook",
			set: map[string]any{"commits": two, "total_commits_count": 2, "forced": true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var p map[string]any
			if err := json.Unmarshal(sample(t, tc.sample), &p); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.set {
				p[k] = v
			}
			body, _ := json.Marshal(p)
			f, _ := ForgeOf(tc.forge)
			ev, err := f.Parse(signed(tc.forge, tc.event, body, token), body)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantFiles, ev.Files); diff != "" || ev.FilesKnown != tc.wantKnown {
				t.Errorf("files (-want +got):\n%s\nknown %v, want %v", diff, ev.FilesKnown, tc.wantKnown)
			}
		})
	}
}

// TestDecidePaths: a push wakes a run with spec.source.git.paths without a
// plan only when its payload shows every file it changed, from the commit
// the run is at, and none of them matches; anything else plans.
func TestDecidePaths(t *testing.T) {
	const a, b, c = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222", "3333333333333333333333333333333333333333"
	run := func(paths ...infrav1.PathPattern) *infrav1.TerraformRun {
		r := &infrav1.TerraformRun{}
		r.Spec.Source.Git = &infrav1.GitSource{URL: "https://git.example.com/x.git", Ref: "main", Paths: paths}
		r.Status.Run = &infrav1.RunStatus{Commit: a}
		r.Annotations = map[string]string{infrav1.SourcePushAnnotation: a}
		r.Status.LastHandledPush = a
		return r
	}
	push := func(before, after string, known bool, files ...string) infrav1.ReceivedPush {
		return infrav1.ReceivedPush{Ref: "main", Before: before, Commit: after, Files: files, FilesKnown: known}
	}
	net := []infrav1.PathPattern{"stacks/network/**", "modules/**", "!**/*.md"}
	pending := run(net...)
	pending.Annotations[infrav1.SourcePushAnnotation] = b
	skippedB := run(net...)
	skippedB.Annotations[infrav1.SourcePushAnnotation] = b
	skippedB.Annotations[infrav1.SourcePushSkippedAnnotation] = b + " no path matched"
	handledB := run(net...)
	handledB.Status.LastHandledPush = b
	cases := map[string]struct {
		run      *infrav1.TerraformRun
		push     infrav1.ReceivedPush
		wantPlan bool
		wantWhy  string
	}{
		"no paths: every push plans":      {run(), push(a, b, true, "docs/x.md"), true, "no spec.source.git.paths"},
		"a matched file":                  {run(net...), push(a, b, true, "docs/x.md", "modules/vpc/main.tf"), true, "it changed modules/vpc/main.tf"},
		"only other paths":                {run(net...), push(a, b, true, "docs/x.md", "stacks/dns/main.tf"), false, "no path matched: the push changed docs/x.md, stacks/dns/main.tf"},
		"only excluded files":             {run(net...), push(a, b, true, "stacks/network/README.md"), false, "no path matched"},
		"a removed file under the stack":  {run(net...), push(a, b, true, "stacks/network/old.tf"), true, "it changed stacks/network/old.tf"},
		"files not known":                 {run(net...), push(a, b, false), true, "does not show every file"},
		"from another commit":             {run(net...), push(c, b, true, "docs/x.md"), true, "does not start from the commit the run is at"},
		"a new ref (no before)":           {run(net...), push("", b, true, "docs/x.md"), true, "does not start from the commit the run is at"},
		"an earlier push not planned yet": {pending, push(b, c, true, "docs/x.md"), true, "an earlier push is not planned yet"},
		"after a skip not yet taken":      {skippedB, push(b, c, true, "docs/y.md"), false, "no path matched"},
		"after a skip taken":              {handledB, push(b, c, true, "docs/y.md"), false, "no path matched"},
		"after a skip, a matched file":    {skippedB, push(b, c, true, "stacks/network/main.tf"), true, "it changed stacks/network/main.tf"},
		"many files summed up":            {run(net...), push(a, b, true, "a", "b", "c", "d", "e"), false, "the push changed a, b, c and 2 more"},
		"a bad pattern plans (fail open)": {run("stacks/[net"), push(a, b, true, "docs/x.md"), true, "it changed docs/x.md"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := DecidePaths(tc.push, tc.run)
			if got.Plan != tc.wantPlan || !strings.Contains(got.Why, tc.wantWhy) {
				t.Errorf("DecidePaths = %+v, want plan %v and a reason with %q", got, tc.wantPlan, tc.wantWhy)
			}
		})
	}
}

// TestMarkPatch: a skip is said beside the mark; a planned push removes an
// earlier skip.
func TestMarkPatch(t *testing.T) {
	const sha = "2222222222222222222222222222222222222222"
	cases := map[string]struct {
		v    PathVerdict
		want string
	}{
		"planned": {PathVerdict{Plan: true, Why: "it changed x"}, `{"metadata":{"annotations":{"infra.opr8r.io/source-push":"` + sha + `","infra.opr8r.io/source-push-skipped":null}}}`},
		"skipped": {PathVerdict{Why: "no path matched: the push changed docs/x.md"}, `{"metadata":{"annotations":{"infra.opr8r.io/source-push":"` + sha + `","infra.opr8r.io/source-push-skipped":"` + sha + ` no path matched: the push changed docs/x.md"}}}`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, string(markPatch(sha, tc.v))); diff != "" {
				t.Errorf("markPatch (-want +got):\n%s", diff)
			}
		})
	}
}
