package step_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opr8r/opr8r/pkg/step"
)

// gitRepo is a real repository made with the git CLI.
type gitRepo struct {
	dir     string
	commits map[string]string // label -> sha
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// makeRepo makes: commit "v1" on main, tagged v1.0.0; commit "v2" on main;
// commit "feature" on branch feature. stacks/net/main.tf says which.
func makeRepo(t *testing.T) *gitRepo {
	t.Helper()
	dir := t.TempDir()
	r := &gitRepo{dir: dir, commits: map[string]string{}}
	git(t, dir, "init", "-q", "-b", "main")
	for _, label := range []string{"v1", "v2"} {
		write(t, filepath.Join(dir, "stacks", "net", "main.tf"), "# "+label+"\n")
		write(t, filepath.Join(dir, "README.md"), label)
		git(t, dir, "add", "-A")
		git(t, dir, "commit", "-q", "-m", label)
		r.commits[label] = git(t, dir, "rev-parse", "HEAD")
		if label == "v1" {
			git(t, dir, "tag", "v1.0.0")
		}
	}
	git(t, dir, "checkout", "-q", "-b", "feature")
	write(t, filepath.Join(dir, "stacks", "net", "main.tf"), "# feature\n")
	git(t, dir, "commit", "-q", "-am", "feature")
	r.commits["feature"] = git(t, dir, "rev-parse", "HEAD")
	git(t, dir, "checkout", "-q", "main")
	return r
}

func TestCloneRefs(t *testing.T) {
	repo := makeRepo(t)
	cases := map[string]struct {
		ref        string
		wantLabel  string
		wantCommit string
	}{
		"branch main":    {ref: "main", wantLabel: "v2", wantCommit: repo.commits["v2"]},
		"branch feature": {ref: "feature", wantLabel: "feature", wantCommit: repo.commits["feature"]},
		"tag":            {ref: "v1.0.0", wantLabel: "v1", wantCommit: repo.commits["v1"]},
		"full commit":    {ref: repo.commits["v1"], wantLabel: "v1", wantCommit: repo.commits["v1"]},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dest, results := filepath.Join(t.TempDir(), "src"), t.TempDir()
			var out bytes.Buffer
			r := &step.Runner{Out: &out, ResultsDir: results}
			err := r.Clone(context.Background(), step.CloneOptions{Source: "git", URL: "file://" + repo.dir, Ref: tc.ref, Dest: dest})
			if err != nil {
				t.Fatalf("Clone: %v\n%s", err, out.String())
			}
			got, _ := os.ReadFile(filepath.Join(dest, "stacks", "net", "main.tf"))
			if want := "# " + tc.wantLabel + "\n"; string(got) != want {
				t.Errorf("stacks/net/main.tf = %q, want %q", got, want)
			}
			commit, _ := os.ReadFile(filepath.Join(results, "commit"))
			if string(commit) != tc.wantCommit {
				t.Errorf("commit result = %q, want %q", commit, tc.wantCommit)
			}
		})
	}
	t.Run("unknown ref", func(t *testing.T) {
		r := &step.Runner{Out: &bytes.Buffer{}}
		err := r.Clone(context.Background(), step.CloneOptions{Source: "git", URL: "file://" + repo.dir, Ref: "nope", Dest: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), `no branch or tag named "nope"`) {
			t.Fatalf("err = %v, want a clear unknown-ref error", err)
		}
	})
}

const tokenMarker = "ghp_T0KEN-MARKER-5e1d9a"

// authGitServer serves repo over git's smart HTTP (git http-backend, a CGI
// program) on 127.0.0.1, requiring the token as basic-auth password.
func authGitServer(t *testing.T, repo *gitRepo) *httptest.Server {
	t.Helper()
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(repo.dir)
	backend := &cgi.Handler{
		Path: gitPath,
		Args: []string{"http-backend"},
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_GLOBAL=/dev/null"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if _, pass, ok := req.BasicAuth(); !ok || pass != tokenMarker {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestCloneHTTPTokenNeverLeaks(t *testing.T) {
	repo := makeRepo(t)
	srv := authGitServer(t, repo)
	url := srv.URL + "/" + filepath.Base(repo.dir)

	creds := t.TempDir()
	write(t, filepath.Join(creds, "token"), tokenMarker+"\n")

	t.Run("without credentials the server refuses", func(t *testing.T) {
		r := &step.Runner{Out: &bytes.Buffer{}}
		if err := r.Clone(context.Background(), step.CloneOptions{Source: "git", URL: url, Ref: "main", Dest: t.TempDir()}); err == nil {
			t.Fatal("clone without credentials succeeded; the test server does not check auth")
		}
	})

	dest, results := filepath.Join(t.TempDir(), "src"), t.TempDir()
	var out bytes.Buffer
	r := &step.Runner{Out: &out, ResultsDir: results}
	if err := r.Clone(context.Background(), step.CloneOptions{Source: "git", URL: url, Ref: "v1.0.0", CredentialsDir: creds, Dest: dest}); err != nil {
		t.Fatalf("Clone with token: %v\n%s", err, out.String())
	}
	if got, _ := os.ReadFile(filepath.Join(results, "commit")); string(got) != repo.commits["v1"] {
		t.Errorf("commit = %q, want %q", got, repo.commits["v1"])
	}
	if strings.Contains(out.String(), tokenMarker) {
		t.Errorf("the step's output contains the token:\n%s", out.String())
	}
	// No file the step wrote (the checkout, .git/config, results) holds it.
	for _, dir := range []string{dest, results} {
		_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() {
				return err
			}
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(tokenMarker)) {
				t.Errorf("%s contains the token", p)
			}
			return nil
		})
	}

	t.Run("a wrong token fails without echoing what was sent", func(t *testing.T) {
		bad := t.TempDir()
		write(t, filepath.Join(bad, "token"), "wrong-"+tokenMarker)
		var out bytes.Buffer
		r := &step.Runner{Out: &out}
		err := r.Clone(context.Background(), step.CloneOptions{Source: "git", URL: url, Ref: "main", CredentialsDir: bad, Dest: t.TempDir()})
		if err == nil {
			t.Fatal("clone with a wrong token succeeded")
		}
		if strings.Contains(err.Error()+out.String(), tokenMarker) {
			t.Errorf("the error or output contains the token: %v", err)
		}
	})
}

func TestCloneDirSource(t *testing.T) {
	from := t.TempDir()
	write(t, filepath.Join(from, "main.tf"), "# inline\n")
	// What a mounted ConfigMap looks like: ..data bookkeeping and symlinks.
	if err := os.Mkdir(filepath.Join(from, "..2026_11_23"), 0o755); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "src")
	r := &step.Runner{Out: &bytes.Buffer{}}
	if err := r.Clone(context.Background(), step.CloneOptions{Source: "dir", From: from, Dest: dest}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dest)
	if len(entries) != 1 || entries[0].Name() != "main.tf" {
		t.Errorf("dest has %v, want only main.tf", entries)
	}
}

// TestCloneCommitShallow: a commit SHA (a preview's head) is fetched alone,
// at depth 1, from a server that allows a reachable commit to be asked for
// (Gitea's, GitHub's and GitLab's default); a server that refuses gets the
// whole clone, said in the step's log.
func TestCloneCommitShallow(t *testing.T) {
	cases := map[string]struct {
		allow       bool
		wantCommits string
		wantLog     string
	}{
		"the server gives the commit alone": {allow: true, wantCommits: "1", wantLog: "alone (depth 1)"},
		"the server refuses: a whole clone": {allow: false, wantCommits: "2", wantLog: "cloning the whole repository instead"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			repo := makeRepo(t)
			git(t, repo.dir, "config", "uploadpack.allowReachableSHA1InWant", map[bool]string{true: "true", false: "false"}[tc.allow])
			srv := authGitServer(t, repo)
			creds := t.TempDir()
			write(t, filepath.Join(creds, "token"), tokenMarker)
			dest, results := filepath.Join(t.TempDir(), "src"), t.TempDir()
			var out bytes.Buffer
			r := &step.Runner{Out: &out, ResultsDir: results}
			sha := repo.commits["v2"]
			if err := r.Clone(context.Background(), step.CloneOptions{Source: "git", URL: srv.URL + "/" + filepath.Base(repo.dir), Ref: sha, CredentialsDir: creds, Dest: dest}); err != nil {
				t.Fatalf("Clone: %v\n%s", err, out.String())
			}
			if got := git(t, dest, "rev-parse", "HEAD"); got != sha {
				t.Errorf("HEAD = %s, want %s", got, sha)
			}
			if got, _ := os.ReadFile(filepath.Join(dest, "stacks", "net", "main.tf")); string(got) != "# v2\n" {
				t.Errorf("stacks/net/main.tf = %q, want the commit's", got)
			}
			if got := git(t, dest, "rev-list", "--count", "HEAD"); got != tc.wantCommits {
				t.Errorf("commits in the clone = %s, want %s", got, tc.wantCommits)
			}
			if commit, _ := os.ReadFile(filepath.Join(results, "commit")); string(commit) != sha {
				t.Errorf("commit result = %q, want %q", commit, sha)
			}
			if !strings.Contains(out.String(), tc.wantLog) {
				t.Errorf("log lacks %q:\n%s", tc.wantLog, out.String())
			}
			t.Log(out.String())
			if strings.Contains(out.String(), tokenMarker) {
				t.Errorf("the log holds the token:\n%s", out.String())
			}
		})
	}
}
