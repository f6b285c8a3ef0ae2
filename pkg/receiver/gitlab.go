package receiver

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	glapi "gitlab.com/gitlab-org/api/client-go/v2"
	"golang.org/x/time/rate"
)

// gitlabReporter reports through GitLab's official Go client
// (gitlab.com/gitlab-org/api/client-go): a commit status and one merge
// request note. The client's own retries and rate limiter are off: they
// wait inside a reconcile; a RateLimitedError requeues instead.
type gitlabReporter struct {
	c   *glapi.Client
	now func() time.Time
	me  int64
}

func newGitLabReporter(api, token string, hc *http.Client) (*gitlabReporter, error) {
	c, err := glapi.NewClient(token, glapi.WithBaseURL(api), glapi.WithHTTPClient(hc),
		glapi.WithoutRetries(), glapi.WithCustomLimiter(rate.NewLimiter(rate.Inf, 0)))
	if err != nil {
		return nil, fmt.Errorf("GitLab client: %w", err)
	}
	return &gitlabReporter{c: c, now: time.Now}, nil
}

// gitlabStates maps opr8r's states to GitLab's commit status states.
var gitlabStates = map[string]glapi.BuildStateValue{
	"pending": glapi.Pending, "success": glapi.Success, "failure": glapi.Failed, "error": glapi.Canceled,
}

// project is GitLab's project ID for owner/repo (its path with namespace;
// the client escapes it).
func project(owner, repo string) string { return owner + "/" + repo }

func (g *gitlabReporter) Status(ctx context.Context, owner, repo, sha, context, state, description, target string) error {
	st, ok := gitlabStates[state]
	if !ok {
		return fmt.Errorf("no GitLab commit status for %q", state)
	}
	opt := &glapi.SetCommitStatusOptions{State: st, Name: &context, Description: &description}
	if target != "" {
		opt.TargetURL = &target
	}
	_, resp, err := g.c.Commits.SetCommitStatus(project(owner, repo), sha, opt, glapi.WithContext(ctx))
	return rateLimited(gitlabHTTP(resp), err, g.now())
}

func (g *gitlabReporter) Comment(ctx context.Context, owner, repo string, number, id int64, body string) (int64, error) {
	pid := project(owner, repo)
	if id > 0 {
		n, resp, err := g.c.Notes.UpdateMergeRequestNote(pid, number, id, &glapi.UpdateMergeRequestNoteOptions{Body: &body}, glapi.WithContext(ctx))
		if err == nil {
			return n.ID, nil
		}
		if resp == nil || (resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusForbidden) {
			return id, rateLimited(gitlabHTTP(resp), err, g.now())
		}
		// Deleted by someone: make another.
	}
	n, resp, err := g.c.Notes.CreateMergeRequestNote(pid, number, &glapi.CreateMergeRequestNoteOptions{Body: &body}, glapi.WithContext(ctx))
	if err != nil {
		return 0, rateLimited(gitlabHTTP(resp), err, g.now())
	}
	return n.ID, nil
}

func (g *gitlabReporter) FindComment(ctx context.Context, owner, repo string, number int64, marker string) (int64, error) {
	if g.me == 0 {
		u, resp, err := g.c.Users.CurrentUser(glapi.WithContext(ctx))
		if err != nil {
			return 0, rateLimited(gitlabHTTP(resp), fmt.Errorf("the token's user: %w", err), g.now())
		}
		g.me = u.ID
	}
	orderBy, sort := "created_at", "asc"
	opt := &glapi.ListMergeRequestNotesOptions{ListOptions: glapi.ListOptions{PerPage: 100}, OrderBy: &orderBy, Sort: &sort}
	for range maxCommentPages {
		ns, resp, err := g.c.Notes.ListMergeRequestNotes(project(owner, repo), number, opt, glapi.WithContext(ctx))
		if err != nil {
			return 0, rateLimited(gitlabHTTP(resp), err, g.now())
		}
		for _, n := range ns {
			if !n.System && n.Author.ID == g.me && strings.Contains(n.Body, marker) {
				return n.ID, nil
			}
		}
		if resp.NextPage == 0 {
			break
		}
		opt.Page = resp.NextPage
	}
	return 0, nil
}

func gitlabHTTP(r *glapi.Response) *http.Response {
	if r == nil {
		return nil
	}
	return r.Response
}
