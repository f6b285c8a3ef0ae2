// Package receiver takes forges' webhooks (TerraformRunReceiver): it checks
// each request's signature with the receiver's secret, reads which
// repository and branch or tag moved to which commit, and marks the
// TerraformRuns of the receiver's namespace that track them
// (infra.opr8r.io/source-push), so that they run now rather than at their
// next spec.interval. It parses the few fields it needs itself, rather than
// with each forge's client library, to keep the manager's binary small
// (docs/performance.md, P4); the tests read the forges' documented sample
// payloads.
package receiver

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Kind is what a webhook tells.
type Kind string

const (
	// Push moved a branch.
	Push Kind = "push"
	// Tag pushed or moved a tag.
	Tag Kind = "tag"
	// PullRequest opened, pushed to, reopened or closed a pull request.
	PullRequest Kind = "pull_request"
	// Other is any other event (a ping, a pull request, an issue): verified
	// and answered without effect.
	Other Kind = "other"
)

// Event is what opr8r reads of a verified webhook.
type Event struct {
	// Kind of the event.
	Kind Kind
	// Name is the forge's name of the event (push, Push Hook, ping, ...).
	Name string
	// Ref is the branch or tag's short name (main, v1.2.0).
	Ref string
	// Commit is the commit the ref moved to; empty when the ref was deleted.
	Commit string
	// Repos are the repository's URLs (clone, ssh, web), as the forge gives
	// them; of a pull request, the base repository's.
	Repos []string
	// PR is the pull request of a PullRequest event.
	PR *PullRequestEvent
	// Before is the commit a push moved the ref from; empty when it created
	// the ref.
	Before string
	// Delivery is the forge's id of the delivery (not signed).
	Delivery string
	// Files are the files a push's commits added, modified or removed;
	// FilesKnown says whether they are all of them (not a truncated list of
	// commits, nor a push that lists none, nor a force push or a new ref).
	Files      []string
	FilesKnown bool
}

// PR actions opr8r acts on.
const (
	PROpened = "opened" // opened, reopened, or pushed to
	PRClosed = "closed" // closed or merged
)

// PullRequestEvent is what opr8r reads of a pull request event.
type PullRequestEvent struct {
	// Number of the pull request.
	Number int64
	// Action is PROpened or PRClosed; "" for one opr8r ignores (a label, a
	// review).
	Action string
	// Base is the branch it merges into (Event.Ref is the same).
	Base string
	// HeadSHA is its head commit; HeadRepos the URLs of the repository the
	// head is in (a fork's, or the base's).
	HeadSHA   string
	HeadRepos []string
	// URL is its web page.
	URL string
	// Owner and Repo name the base repository on the forge; API is the
	// forge's base URL (Gitea: the web root, from the repository's page).
	Owner, Repo, API string
}

// Forge verifies and reads one forge's webhooks.
type Forge interface {
	// Verify checks that the request was made with the token: an HMAC
	// signature of the body or the token itself, compared in constant time.
	Verify(h http.Header, body, token []byte) error
	// Parse reads a verified request.
	Parse(h http.Header, body []byte) (Event, error)
}

// ForgeOf is the forge of a receiver type.
func ForgeOf(t infrav1.ReceiverType) (Forge, error) {
	switch t {
	case infrav1.ReceiverGitea:
		return gitea{}, nil
	case infrav1.ReceiverGitHub:
		return github{}, nil
	case infrav1.ReceiverGitLab:
		return gitlab{}, nil
	}
	return nil, fmt.Errorf("unknown receiver type %q: use Gitea, GitHub or GitLab", t)
}

// ErrUnsigned is a request without the forge's signature header.
var ErrUnsigned = errors.New("unsigned")

// verifyHMAC checks a hex HMAC-SHA256 of body under token.
func verifyHMAC(sig string, body, token []byte) error {
	if sig == "" {
		return ErrUnsigned
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return fmt.Errorf("signature is not hex: %w", err)
	}
	m := hmac.New(sha256.New, token)
	m.Write(body)
	if !hmac.Equal(got, m.Sum(nil)) {
		return errors.New("signature does not match the body and the receiver's token")
	}
	return nil
}

// Sign is the hex HMAC-SHA256 of body under token, as Gitea and GitHub
// sign (GitHub with a sha256= prefix); the tests and the notifiers use it.
func Sign(body, token []byte) string {
	m := hmac.New(sha256.New, token)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// pushCommit is a commit of a push, with the files it changed.
type pushCommit struct {
	Added    []string `json:"added"`
	Modified []string `json:"modified"`
	Removed  []string `json:"removed"`
}

// githubMaxCommits is where GitHub may cut a push's list of commits, which
// has no total to compare with: a list this long is taken as truncated.
const githubMaxCommits = 20

// changedFiles are the files a push's commits changed, and whether they are
// all of them: total is the forge's count of the push's commits (0: none
// given), limit the length at which a list without a total is taken as
// cut.
// forced is nil when the payload does not say whether the push was forced
// (Gitea's never does; GitLab's only in recent versions): a force push
// lists only the commits it added, never the files of the commits it
// dropped, so such a payload's files are not known.
func changedFiles(commits []pushCommit, total, limit int, before string, forced *bool) ([]string, bool) {
	if len(commits) == 0 || total > len(commits) || (total == 0 && len(commits) >= limit) || before == "" || forced == nil || *forced {
		return nil, false
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range commits {
		if c.Added == nil && c.Modified == nil && c.Removed == nil {
			return nil, false
		}
		for _, f := range slices.Concat(c.Added, c.Modified, c.Removed) {
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	return out, true
}

// noCommit is "" for a commit of zeros (a ref created or deleted).
func noCommit(sha string) string {
	if strings.Trim(sha, "0") == "" {
		return ""
	}
	return sha
}

// pushPayload is the part of a push that Gitea, Forgejo, Gogs and GitHub
// share: the ref, the commits before and after, the commits' files, and
// the repository's URLs.
type pushPayload struct {
	Ref          string       `json:"ref"`
	Before       string       `json:"before"`
	After        string       `json:"after"`
	Deleted      bool         `json:"deleted"`
	Forced       *bool        `json:"forced"`
	Commits      []pushCommit `json:"commits"`
	TotalCommits int          `json:"total_commits"`
	HeadCommit   *struct {
		ID string `json:"id"`
	} `json:"head_commit"`
	Repository struct {
		CloneURL string `json:"clone_url"`
		SSHURL   string `json:"ssh_url"`
		HTMLURL  string `json:"html_url"`
		GitURL   string `json:"git_url"`
	} `json:"repository"`
}

func (p pushPayload) event(name string) (Event, error) {
	e, err := refEvent(name, p.Ref, p.After)
	if err != nil {
		return e, err
	}
	if p.Deleted {
		e.Commit = ""
	} else if e.Kind == Tag && p.HeadCommit != nil && isSHA(p.HeadCommit.ID) {
		// An annotated tag's after is the tag object; the commit it
		// points to is what a checkout resolves to.
		e.Commit = p.HeadCommit.ID
	}
	e.Repos = nonEmpty(p.Repository.CloneURL, p.Repository.SSHURL, p.Repository.HTMLURL, p.Repository.GitURL)
	if len(e.Repos) == 0 {
		return e, errors.New("payload names no repository URL")
	}
	e.Before = noCommit(p.Before)
	e.Files, e.FilesKnown = changedFiles(p.Commits, p.TotalCommits, githubMaxCommits, e.Before, p.Forced)
	return e, nil
}

// refEvent reads a full ref (refs/heads/x, refs/tags/x) and the commit it
// moved to; a commit of zeros (a deletion) is none.
func refEvent(name, ref, after string) (Event, error) {
	e := Event{Name: name, Commit: after}
	switch {
	case strings.HasPrefix(ref, "refs/heads/"):
		e.Kind, e.Ref = Push, strings.TrimPrefix(ref, "refs/heads/")
	case strings.HasPrefix(ref, "refs/tags/"):
		e.Kind, e.Ref = Tag, strings.TrimPrefix(ref, "refs/tags/")
	default:
		return e, fmt.Errorf("ref %q is neither a branch (refs/heads/) nor a tag (refs/tags/)", ref)
	}
	if strings.Trim(after, "0") == "" {
		e.Commit = ""
	} else if !isSHA(after) {
		return e, fmt.Errorf("commit %q is not a SHA", after)
	}
	return e, nil
}

func isSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// gitea verifies Gitea's, Forgejo's and Gogs's webhooks: X-Gitea-Signature
// (or X-Forgejo-Signature, X-Gogs-Signature), the hex HMAC-SHA256 of the
// body; X-Gitea-Event (X-Forgejo-Event, X-Gogs-Event) names the event.
type gitea struct{}

func (gitea) Verify(h http.Header, body, token []byte) error {
	return verifyHMAC(first(h, "X-Gitea-Signature", "X-Forgejo-Signature", "X-Gogs-Signature"), body, token)
}

func (gitea) Parse(h http.Header, body []byte) (Event, error) {
	// A tag's creation also comes as a push of refs/tags/...
	e, err := parseHub(first(h, "X-Gitea-Event", "X-Forgejo-Event", "X-Gogs-Event"), body, "synchronized")
	e.Delivery = first(h, "X-Gitea-Delivery", "X-Forgejo-Delivery", "X-Gogs-Delivery")
	return e, err
}

// github verifies GitHub's webhooks: X-Hub-Signature-256 is sha256= and
// the hex HMAC-SHA256 of the body (the SHA-1 X-Hub-Signature is not
// accepted); X-GitHub-Event names the event.
type github struct{}

func (github) Verify(h http.Header, body, token []byte) error {
	sig := h.Get("X-Hub-Signature-256")
	if sig == "" {
		return ErrUnsigned
	}
	hexSig, ok := strings.CutPrefix(sig, "sha256=")
	if !ok {
		return errors.New("X-Hub-Signature-256 does not start with sha256=")
	}
	return verifyHMAC(hexSig, body, token)
}

func (github) Parse(h http.Header, body []byte) (Event, error) {
	e, err := parseHub(h.Get("X-GitHub-Event"), body, "synchronize")
	e.Delivery = h.Get("X-GitHub-Delivery")
	return e, err
}

// parseHub reads the events Gitea, Forgejo and GitHub send alike: a push,
// and a pull request, whose push to its head each names its own way (sync).
func parseHub(name string, body []byte, sync string) (Event, error) {
	switch name {
	case "pull_request":
		return parsePR(name, body, map[string]string{"opened": PROpened, "reopened": PROpened, sync: PROpened, "closed": PRClosed})
	case "push":
		var p pushPayload
		if err := json.Unmarshal(body, &p); err != nil {
			return Event{}, fmt.Errorf("push payload: %w", err)
		}
		return p.event(name)
	}
	return Event{Kind: Other, Name: name}, nil
}

// gitlab verifies GitLab's webhooks, which carry the secret token itself in
// X-Gitlab-Token; X-Gitlab-Event names the event (Push Hook, Tag Push
// Hook).
type gitlab struct{}

func (gitlab) Verify(h http.Header, body, token []byte) error {
	got := h.Get("X-Gitlab-Token")
	if got == "" {
		return ErrUnsigned
	}
	if subtle.ConstantTimeCompare([]byte(got), token) != 1 {
		return errors.New("X-Gitlab-Token is not the receiver's token")
	}
	return nil
}

func (gitlab) Parse(h http.Header, body []byte) (Event, error) {
	e, err := parseGitLab(h.Get("X-Gitlab-Event"), body)
	e.Delivery = first(h, "Idempotency-Key", "X-Gitlab-Event-UUID")
	return e, err
}

// parseGitLab reads GitLab's push, tag push and merge request events.
func parseGitLab(name string, body []byte) (Event, error) {
	if name == "Merge Request Hook" {
		return parseMR(name, body)
	}
	if name != "Push Hook" && name != "Tag Push Hook" {
		return Event{Kind: Other, Name: name}, nil
	}
	var p struct {
		Ref          string       `json:"ref"`
		Before       string       `json:"before"`
		After        string       `json:"after"`
		CheckoutSHA  string       `json:"checkout_sha"`
		Commits      []pushCommit `json:"commits"`
		TotalCommits int          `json:"total_commits_count"`
		Forced       *bool        `json:"forced"`
		Project      struct {
			GitHTTPURL string `json:"git_http_url"`
			GitSSHURL  string `json:"git_ssh_url"`
			WebURL     string `json:"web_url"`
		} `json:"project"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return Event{}, fmt.Errorf("push payload: %w", err)
	}
	e, err := refEvent(name, p.Ref, p.After)
	if err != nil {
		return e, err
	}
	if e.Commit != "" && isSHA(p.CheckoutSHA) {
		// The commit an annotated tag points to (after is the tag object).
		e.Commit = p.CheckoutSHA
	}
	e.Repos = nonEmpty(p.Project.GitHTTPURL, p.Project.GitSSHURL, p.Project.WebURL)
	if len(e.Repos) == 0 {
		return e, errors.New("payload names no project URL")
	}
	e.Before = noCommit(p.Before)
	// GitLab lists at most 20 commits, and counts them all.
	e.Files, e.FilesKnown = changedFiles(p.Commits, p.TotalCommits, githubMaxCommits, e.Before, p.Forced)
	return e, nil
}

// prPayload is the part of a pull request event that Gitea, Forgejo and
// GitHub share.
type prPayload struct {
	Action      string `json:"action"`
	Number      int64  `json:"number"`
	PullRequest struct {
		HTMLURL string `json:"html_url"`
		Head    struct {
			Ref  string `json:"ref"`
			SHA  string `json:"sha"`
			Repo *struct {
				CloneURL string `json:"clone_url"`
				SSHURL   string `json:"ssh_url"`
				HTMLURL  string `json:"html_url"`
			} `json:"repo"`
		} `json:"head"`
		Base struct {
			Ref string `json:"ref"`
		} `json:"base"`
	} `json:"pull_request"`
	Repository struct {
		Name     string `json:"name"`
		FullName string `json:"full_name"`
		CloneURL string `json:"clone_url"`
		SSHURL   string `json:"ssh_url"`
		HTMLURL  string `json:"html_url"`
		Owner    struct {
			Login string `json:"login"`
		} `json:"owner"`
	} `json:"repository"`
}

func parsePR(name string, body []byte, actions map[string]string) (Event, error) {
	var p prPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return Event{}, fmt.Errorf("pull request payload: %w", err)
	}
	pr := &PullRequestEvent{Number: p.Number, Action: actions[p.Action], Base: p.PullRequest.Base.Ref, HeadSHA: p.PullRequest.Head.SHA,
		URL: p.PullRequest.HTMLURL, Owner: p.Repository.Owner.Login, Repo: p.Repository.Name}
	if h := p.PullRequest.Head.Repo; h != nil {
		pr.HeadRepos = nonEmpty(h.CloneURL, h.SSHURL, h.HTMLURL)
	}
	if web := p.Repository.HTMLURL; web != "" && p.Repository.FullName != "" {
		pr.API = strings.TrimSuffix(strings.TrimSuffix(web, "/"), "/"+p.Repository.FullName)
	}
	e := Event{Kind: PullRequest, Name: name, Ref: pr.Base, Commit: pr.HeadSHA, PR: pr,
		Repos: nonEmpty(p.Repository.CloneURL, p.Repository.SSHURL, p.Repository.HTMLURL)}
	switch {
	case pr.Number <= 0:
		return e, errors.New("pull request payload has no number")
	case pr.Action != "" && !isSHA(pr.HeadSHA):
		return e, fmt.Errorf("head commit %q is not a SHA", pr.HeadSHA)
	case len(e.Repos) == 0:
		return e, errors.New("payload names no repository URL")
	}
	return e, nil
}

// parseMR reads GitLab's merge request event: open and reopen, update when
// it carries oldrev (a push to the source branch, not an edit of the
// title), close and merge.
func parseMR(name string, body []byte) (Event, error) {
	type project struct {
		WebURL            string `json:"web_url"`
		GitSSHURL         string `json:"git_ssh_url"`
		GitHTTPURL        string `json:"git_http_url"`
		PathWithNamespace string `json:"path_with_namespace"`
	}
	var p struct {
		Project project `json:"project"`
		Attrs   struct {
			IID          int64   `json:"iid"`
			Action       string  `json:"action"`
			TargetBranch string  `json:"target_branch"`
			URL          string  `json:"url"`
			OldRev       string  `json:"oldrev"`
			Source       project `json:"source"`
			LastCommit   struct {
				ID string `json:"id"`
			} `json:"last_commit"`
		} `json:"object_attributes"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return Event{}, fmt.Errorf("merge request payload: %w", err)
	}
	a := p.Attrs
	action := map[string]string{"open": PROpened, "reopen": PROpened, "close": PRClosed, "merge": PRClosed}[a.Action]
	if a.Action == "update" && a.OldRev != "" {
		action = PROpened
	}
	pr := &PullRequestEvent{Number: a.IID, Action: action, Base: a.TargetBranch, HeadSHA: a.LastCommit.ID, URL: a.URL,
		HeadRepos: nonEmpty(a.Source.GitHTTPURL, a.Source.GitSSHURL, a.Source.WebURL)}
	if owner, repo, ok := strings.Cut(p.Project.PathWithNamespace, "/"); ok {
		pr.Owner, pr.Repo = owner, repo
		pr.API = strings.TrimSuffix(strings.TrimSuffix(p.Project.WebURL, "/"), "/"+p.Project.PathWithNamespace)
	}
	e := Event{Kind: PullRequest, Name: name, Ref: pr.Base, Commit: pr.HeadSHA, PR: pr,
		Repos: nonEmpty(p.Project.GitHTTPURL, p.Project.GitSSHURL, p.Project.WebURL)}
	switch {
	case pr.Number <= 0:
		return e, errors.New("merge request payload has no iid")
	case pr.Action != "" && !isSHA(pr.HeadSHA):
		return e, fmt.Errorf("last commit %q is not a SHA", pr.HeadSHA)
	case len(e.Repos) == 0:
		return e, errors.New("payload names no project URL")
	}
	return e, nil
}

func first(h http.Header, keys ...string) string {
	for _, k := range keys {
		if v := h.Get(k); v != "" {
			return v
		}
	}
	return ""
}
