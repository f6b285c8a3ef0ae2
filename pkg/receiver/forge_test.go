package receiver

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

var token = []byte("0123456789abcdef-webhook-token")

func sample(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// signed makes the headers each forge sends with a payload signed with key.
func signed(typ infrav1.ReceiverType, event string, body, key []byte) http.Header {
	h := http.Header{}
	switch typ {
	case infrav1.ReceiverGitea:
		h.Set("X-Gitea-Event", event)
		h.Set("X-Gitea-Signature", Sign(body, key))
	case infrav1.ReceiverGitHub:
		h.Set("X-GitHub-Event", event)
		h.Set("X-Hub-Signature-256", "sha256="+Sign(body, key))
	case infrav1.ReceiverGitLab:
		h.Set("X-Gitlab-Event", event)
		h.Set("X-Gitlab-Token", string(key))
	}
	return h
}

func TestSamplePayloads(t *testing.T) {
	for _, tc := range []struct {
		typ                infrav1.ReceiverType
		file, event        string
		kind               Kind
		ref, commit, repos string
	}{
		{infrav1.ReceiverGitea, "gitea-push.json", "push", Push, "develop", "bffeb74224043ba2feb48d137756c8a9331c449a",
			"http://localhost:3000/gitea/webhooks.git ssh://gitea@localhost:2222/gitea/webhooks.git http://localhost:3000/gitea/webhooks"},
		{infrav1.ReceiverGitHub, "github-push.json", "push", Push, "main", "a10867b14bb761a232cd80139fbd4c0d33264240",
			"https://github.com/Codertocat/Hello-World.git git@github.com:Codertocat/Hello-World.git https://github.com/Codertocat/Hello-World git://github.com/Codertocat/Hello-World.git"},
		{infrav1.ReceiverGitHub, "github-push-tag-deleted.json", "push", Tag, "simple-tag", "",
			"https://github.com/Codertocat/Hello-World.git git@github.com:Codertocat/Hello-World.git https://github.com/Codertocat/Hello-World git://github.com/Codertocat/Hello-World.git"},
		{infrav1.ReceiverGitLab, "gitlab-push.json", "Push Hook", Push, "master", "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
			"http://example.com/mike/diaspora.git git@example.com:mike/diaspora.git http://example.com/mike/diaspora"},
		{infrav1.ReceiverGitLab, "gitlab-tag-push.json", "Tag Push Hook", Tag, "v1.0.0", "82b3d5ae55f7080f1e6022629cdb57bfae7cccc7",
			"http://example.com/jsmith/example.git git@example.com:jsmith/example.git http://example.com/jsmith/example"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			body := sample(t, tc.file)
			f, err := ForgeOf(tc.typ)
			if err != nil {
				t.Fatal(err)
			}
			h := signed(tc.typ, tc.event, body, token)
			if err := f.Verify(h, body, token); err != nil {
				t.Fatalf("a correctly signed sample is refused: %v", err)
			}
			ev, err := f.Parse(h, body)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Kind != tc.kind || ev.Ref != tc.ref || ev.Commit != tc.commit || strings.Join(ev.Repos, " ") != tc.repos {
				t.Errorf("got %+v, want kind %s ref %s commit %q repos %s", ev, tc.kind, tc.ref, tc.commit, tc.repos)
			}
		})
	}
}

// TestForgedPayloads: every way a request may not be the forge's is
// refused, for each forge.
func TestForgedPayloads(t *testing.T) {
	for _, typ := range []infrav1.ReceiverType{infrav1.ReceiverGitea, infrav1.ReceiverGitHub, infrav1.ReceiverGitLab} {
		f, _ := ForgeOf(typ)
		body := sample(t, map[infrav1.ReceiverType]string{infrav1.ReceiverGitea: "gitea-push.json", infrav1.ReceiverGitHub: "github-push.json", infrav1.ReceiverGitLab: "gitlab-push.json"}[typ])
		event := "push"
		if typ == infrav1.ReceiverGitLab {
			event = "Push Hook"
		}
		t.Run(string(typ)+"/unsigned", func(t *testing.T) {
			h := http.Header{}
			h.Set("X-Gitea-Event", event)
			h.Set("X-GitHub-Event", event)
			h.Set("X-Gitlab-Event", event)
			if err := f.Verify(h, body, token); err != ErrUnsigned {
				t.Errorf("unsigned: got %v, want ErrUnsigned", err)
			}
		})
		t.Run(string(typ)+"/wrong key", func(t *testing.T) {
			if err := f.Verify(signed(typ, event, body, []byte("another-token-of-16+chars")), body, token); err == nil {
				t.Error("a request signed with another key is taken")
			}
		})
		t.Run(string(typ)+"/body changed after signing", func(t *testing.T) {
			h := signed(typ, event, body, token)
			changed := []byte(strings.Replace(string(body), `"ref": "refs/heads/`, `"ref": "refs/heads/x`, 1))
			err := f.Verify(h, changed, token)
			if typ == infrav1.ReceiverGitLab {
				// GitLab sends the token, not a signature of the body: a
				// changed body with the token is the forge's word (TLS
				// keeps it whole on the way).
				if err != nil {
					t.Errorf("gitlab: %v", err)
				}
				return
			}
			if err == nil {
				t.Error("a body changed after signing is taken")
			}
		})
	}
	h := http.Header{}
	h.Set("X-Hub-Signature-256", Sign([]byte("{}"), token))
	if err := (github{}).Verify(h, []byte("{}"), token); err == nil || !strings.Contains(err.Error(), "sha256=") {
		t.Errorf("a GitHub signature without sha256= : %v", err)
	}
	h.Set("X-Hub-Signature-256", "sha256=zz")
	if err := (github{}).Verify(h, []byte("{}"), token); err == nil {
		t.Error("a signature that is not hex is taken")
	}
}

func TestParseRefusesOddPayloads(t *testing.T) {
	h := http.Header{}
	h.Set("X-Gitea-Event", "push")
	for body, want := range map[string]string{
		`{"ref":"refs/pull/1/head","after":"bffeb74224043ba2feb48d137756c8a9331c449a","repository":{"clone_url":"http://x/y.git"}}`: "neither a branch",
		`{"ref":"refs/heads/main","after":"not-a-sha","repository":{"clone_url":"http://x/y.git"}}`:                                 "not a SHA",
		`{"ref":"refs/heads/main","after":"bffeb74224043ba2feb48d137756c8a9331c449a"}`:                                              "no repository URL",
		`{"ref":`: "push payload",
	} {
		if _, err := (gitea{}).Parse(h, []byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", body, err, want)
		}
	}
	h.Set("X-Gitea-Event", "issues")
	if ev, err := (gitea{}).Parse(h, []byte(`{}`)); err != nil || ev.Kind != Other {
		t.Errorf("an issue event: %+v %v, want Other", ev, err)
	}
}

func TestRepoKey(t *testing.T) {
	same := [][]string{
		{"https://github.com/Codertocat/Hello-World.git", "git@github.com:Codertocat/Hello-World.git", "https://github.com/codertocat/hello-world", "ssh://git@github.com/Codertocat/Hello-World.git", "git://github.com/Codertocat/Hello-World.git", "https://user@github.com/Codertocat/Hello-World/"},
		{"http://localhost:3000/gitea/webhooks.git", "ssh://gitea@localhost:2222/gitea/webhooks.git", "http://localhost:3000/gitea/webhooks"},
	}
	for _, group := range same {
		for _, u := range group[1:] {
			if RepoKey(u) != RepoKey(group[0]) {
				t.Errorf("RepoKey(%s) = %s, RepoKey(%s) = %s: want the same", u, RepoKey(u), group[0], RepoKey(group[0]))
			}
		}
	}
	if RepoKey("https://github.com/a/b.git") == RepoKey("https://github.com/a/bc.git") || RepoKey("https://github.com/a/b") == RepoKey("https://gitlab.com/a/b") {
		t.Error("different repositories have the same key")
	}
}

func TestTracks(t *testing.T) {
	ev := Event{Kind: Push, Ref: "main", Commit: "a10867b14bb761a232cd80139fbd4c0d33264240", Repos: []string{"https://github.com/Codertocat/Hello-World.git", "git@github.com:Codertocat/Hello-World.git"}}
	run := func(url, ref string) *infrav1.TerraformRun {
		r := &infrav1.TerraformRun{}
		r.Spec.Source.Git = &infrav1.GitSource{URL: url, Ref: ref}
		return r
	}
	if !Tracks(run("git@github.com:codertocat/hello-world.git", "main"), ev) {
		t.Error("the ssh form of the pushed repository, same branch: not tracked")
	}
	if !Tracks(run("https://github.com/Codertocat/Hello-World", ""), ev) {
		t.Error("no ref (main by default): not tracked")
	}
	if Tracks(run("https://github.com/Codertocat/Hello-World", "release"), ev) {
		t.Error("another branch is tracked")
	}
	if Tracks(run("https://github.com/Codertocat/Other", "main"), ev) {
		t.Error("another repository is tracked")
	}
	inline := &infrav1.TerraformRun{}
	inline.Spec.Source.Inline = &infrav1.InlineSource{}
	if Tracks(inline, ev) {
		t.Error("an inline source is tracked")
	}
}

func TestPath(t *testing.T) {
	p := Path(token, "r", "ns")
	if !strings.HasPrefix(p, "/hook/") || len(p) != len("/hook/")+64 {
		t.Fatalf("path %s", p)
	}
	if p == Path([]byte("another-token-of-16+chars"), "r", "ns") || p == Path(token, "r", "ns2") || p == Path(token, "r2", "ns") {
		t.Error("the path does not depend on token, name and namespace")
	}
}

func TestPullRequestPayloads(t *testing.T) {
	for _, tc := range []struct {
		typ                                 infrav1.ReceiverType
		file                                string
		number                              int64
		action, base, head, api, owner, url string
	}{
		{infrav1.ReceiverGitea, "gitea-pull-request.json", 7, PROpened, "master", "3f1e2d9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e", "http://localhost:3000", "gitea", "http://localhost:3000/gitea/webhooks/pulls/7"},
		{infrav1.ReceiverGitHub, "github-pull-request.json", 2, PROpened, "master", "ec26c3e57ca3a959ca5aad62de7213c562f8c821", "https://github.com", "Codertocat", "https://github.com/Codertocat/Hello-World/pull/2"},
		{infrav1.ReceiverGitLab, "gitlab-merge-request.json", 1, PROpened, "master", "da1560886d4f094c3e6c9ef40349f7d38b5d27d7", "http://example.com", "gitlabhq", "http://example.com/diaspora/merge_requests/1"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			body := sample(t, tc.file)
			f, _ := ForgeOf(tc.typ)
			event := "pull_request"
			if tc.typ == infrav1.ReceiverGitLab {
				event = "Merge Request Hook"
			}
			h := signed(tc.typ, event, body, token)
			if err := f.Verify(h, body, token); err != nil {
				t.Fatal(err)
			}
			ev, err := f.Parse(h, body)
			if err != nil {
				t.Fatal(err)
			}
			pr := ev.PR
			if ev.Kind != PullRequest || pr == nil || pr.Number != tc.number || pr.Action != tc.action || ev.Ref != tc.base || pr.HeadSHA != tc.head || pr.API != tc.api || pr.Owner != tc.owner || pr.URL != tc.url {
				t.Fatalf("got %+v %+v", ev, pr)
			}
			if len(pr.HeadRepos) == 0 || RepoKey(pr.HeadRepos[0]) != RepoKey(ev.Repos[0]) {
				t.Errorf("head repos %v, base repos %v: want the same repository", pr.HeadRepos, ev.Repos)
			}
		})
	}
	// A GitLab update that is not a push (a title edited): ignored.
	gl := signed(infrav1.ReceiverGitLab, "Merge Request Hook", nil, token)
	if ev, err := (gitlab{}).Parse(gl, []byte(strings.Replace(string(sample(t, "gitlab-merge-request.json")), `"action": "open"`, `"action": "update"`, 1))); err != nil || ev.PR.Action != "" {
		t.Errorf("a GitLab merge request edited: %+v %v, want an action opr8r ignores", ev.PR, err)
	}
	if ev, err := (gitlab{}).Parse(gl, []byte(strings.Replace(string(sample(t, "gitlab-merge-request.json")), `"action": "open"`, `"action": "merge"`, 1))); err != nil || ev.PR.Action != PRClosed {
		t.Errorf("a GitLab merge request merged: %+v %v, want closed", ev.PR, err)
	}
	h := signed(infrav1.ReceiverGitea, "pull_request", nil, token)
	ev, err := (gitea{}).Parse(h, []byte(`{"action":"label_updated","number":3,"pull_request":{"head":{"sha":"x"}},"repository":{"clone_url":"http://x/y.git"}}`))
	if err != nil || ev.PR.Action != "" {
		t.Errorf("a label change: %+v %v, want an action opr8r ignores", ev.PR, err)
	}
	if _, err := (gitea{}).Parse(h, []byte(`{"action":"opened","number":3,"pull_request":{"head":{"sha":"not-a-sha"}},"repository":{"clone_url":"http://x/y.git"}}`)); err == nil {
		t.Error("a pull request whose head is not a SHA is taken")
	}
}

func TestPreviewName(t *testing.T) {
	if got := PreviewName("network", 12); got != "network-pr12" {
		t.Errorf("PreviewName = %s", got)
	}
	long := strings.Repeat("a", 38) + "-b"
	if got := PreviewName(long, 12345); len(got) > 40 || !strings.HasSuffix(got, "-pr12345") {
		t.Errorf("PreviewName of a 40-character name = %s (%d)", got, len(got))
	}
}

// TestPreviewSpec: a preview plans the pull request's head against the
// tracked run's own state, never applies, has no approval policy, no
// schedule, and destroys nothing.
func TestPreviewSpec(t *testing.T) {
	run := &infrav1.TerraformRun{}
	run.Name = "db-1"
	run.Spec.Source.Git = &infrav1.GitSource{URL: "https://x/y.git", Ref: "main"}
	run.Spec.Approval = infrav1.ApprovalSpec{Mode: infrav1.ApprovalAuto}
	run.Spec.DriftRemediation = infrav1.DriftApply
	s := previewSpec(run, "3f1e2d9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e")
	if !s.PlanOnly || s.Source.Git.Ref != "3f1e2d9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e" || s.Approval.Mode != "" || s.DriftRemediation != "" || s.Interval != nil || s.DeletionPolicy != infrav1.DeletionRetain {
		t.Errorf("preview spec %+v", s)
	}
	if s.Backend == nil || s.Backend.Kubernetes == nil || s.Backend.Kubernetes.SecretSuffix != "db-1-state" {
		t.Errorf("preview backend %+v: want the tracked run's state Secret", s.Backend)
	}
	if run.Spec.Source.Git.Ref != "main" || run.Spec.Backend != nil {
		t.Error("previewSpec changed the tracked run")
	}
}

func TestDashboardLink(t *testing.T) {
	rcv := &infrav1.TerraformRunReceiver{}
	run := &infrav1.TerraformRun{}
	run.Namespace = "team-a"
	run.Status.Run = &infrav1.RunStatus{Engine: infrav1.EngineArgo, Child: infrav1.ChildReference{Name: "net-pr4-plan-1"}}
	if got := dashboardLink(rcv, run); got != "" {
		t.Errorf("no previews: %q", got)
	}
	rcv.Spec.Previews = &infrav1.ReceiverPreviews{DashboardURLs: map[string]string{"argo": "https://argo.example.com/workflows/{namespace}/{child}"}}
	if got := dashboardLink(rcv, run); got != "https://argo.example.com/workflows/team-a/net-pr4-plan-1" {
		t.Errorf("argo: %q", got)
	}
	run.Status.Run.Engine = infrav1.EngineTekton
	if got := dashboardLink(rcv, run); got != "" {
		t.Errorf("an engine without a URL: %q", got)
	}
}
