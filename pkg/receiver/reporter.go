package receiver

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	giteasdk "code.gitea.io/sdk/gitea"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/egress"
)

// Reporter is what a preview tells its forge: one small interface, one
// implementation per forge.
type Reporter interface {
	// Status sets a commit status (pending, success, failure) under a
	// context of its own, linking to target ("" for none).
	Status(ctx context.Context, owner, repo, sha, context, state, description, target string) error
	// Comment edits comment id on pull request number, or makes one when
	// id is 0 (or gone), and returns its id.
	Comment(ctx context.Context, owner, repo string, number, id int64, body string) (int64, error)
	// FindComment is the id of the comment on pull request number whose
	// body contains marker (0: none), so that a preview whose comment's id
	// was not recorded still edits its one comment.
	FindComment(ctx context.Context, owner, repo string, number int64, marker string) (int64, error)
}

// NewReporter is the reporter of a forge type at its API base URL,
// connecting through hc (nil: egress.Client, whose guard refuses the
// manager itself, the cluster's ranges, metadata services and cross-host
// redirects: the API's address comes from a webhook, and is
// kept on the preview TerraformRun, which the namespace's editors may
// write).
func NewReporter(t infrav1.ReceiverType, api, token string, hc *http.Client) (Reporter, error) {
	if hc == nil {
		hc = egress.Client(false)
	}
	switch t {
	case infrav1.ReceiverGitea:
		if api == "" {
			return nil, fmt.Errorf("the webhook named no repository page to find Gitea's API from")
		}
		return &giteaReporter{api: api, token: token, hc: hc}, nil
	}
	return nil, fmt.Errorf("previews report to Gitea (and Forgejo) only; %s is not built yet", t)
}

// giteaReporter reports through Gitea's official Go SDK.
type giteaReporter struct {
	api, token string
	hc         *http.Client
}

func (g *giteaReporter) client(ctx context.Context) (*giteasdk.Client, error) {
	return giteasdk.NewClient(g.api, giteasdk.SetToken(g.token), giteasdk.SetContext(ctx),
		giteasdk.SetHTTPClient(g.hc))
}

func (g *giteaReporter) Status(ctx context.Context, owner, repo, sha, context, state, description, target string) error {
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	_, _, err = c.CreateStatus(owner, repo, sha, giteasdk.CreateStatusOption{State: giteasdk.StatusState(state), Description: description, Context: context, TargetURL: target})
	return err
}

func (g *giteaReporter) Comment(ctx context.Context, owner, repo string, number, id int64, body string) (int64, error) {
	c, err := g.client(ctx)
	if err != nil {
		return 0, err
	}
	if id > 0 {
		cm, resp, err := c.EditIssueComment(owner, repo, id, giteasdk.EditIssueCommentOption{Body: body})
		if err == nil {
			return cm.ID, nil
		}
		if resp == nil || resp.StatusCode != http.StatusNotFound {
			return id, err
		}
		// Deleted by someone: make another.
	}
	cm, _, err := c.CreateIssueComment(owner, repo, number, giteasdk.CreateIssueCommentOption{Body: body})
	if err != nil {
		return 0, err
	}
	return cm.ID, nil
}

func (g *giteaReporter) FindComment(ctx context.Context, owner, repo string, number int64, marker string) (int64, error) {
	c, err := g.client(ctx)
	if err != nil {
		return 0, err
	}
	for page := 1; page <= 20; page++ {
		cs, _, err := c.ListIssueComments(owner, repo, number, giteasdk.ListIssueCommentOptions{ListOptions: giteasdk.ListOptions{Page: page, PageSize: 50}})
		if err != nil {
			return 0, err
		}
		for _, cm := range cs {
			if strings.Contains(cm.Body, marker) {
				return cm.ID, nil
			}
		}
		if len(cs) < 50 {
			break
		}
	}
	return 0, nil
}
