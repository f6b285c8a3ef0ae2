package receiver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	giteasdk "code.gitea.io/sdk/gitea"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/egress"
)

// Reporter is what a preview tells its forge: one small interface, one
// implementation per forge. States are Gitea's and GitHub's: pending,
// success, failure, error.
type Reporter interface {
	// Status sets a commit status (pending, success, failure, error) under
	// a context of its own, linking to target ("" for none).
	Status(ctx context.Context, owner, repo, sha, context, state, description, target string) error
	// Comment edits comment id on pull request number, or makes one when
	// id is 0 (or gone), and returns its id.
	Comment(ctx context.Context, owner, repo string, number, id int64, body string) (int64, error)
	// FindComment is the id of the comment on pull request number that the
	// reporter's own identity wrote and whose body contains marker (0:
	// none), so that a preview whose comment's id was not recorded still
	// edits its one comment, and never someone else's that carries the
	// marker.
	FindComment(ctx context.Context, owner, repo string, number int64, marker string) (int64, error)
}

// Credentials are what a reporter authenticates with: a token, or (GitHub)
// an App installation.
type Credentials struct {
	// Token is a forge API token.
	Token string
	// App is a GitHub App installation, used instead of Token.
	App *GitHubApp
}

// GitHubApp is a GitHub App installation a reporter acts as.
type GitHubApp struct {
	// AppID and InstallationID name the installation.
	AppID, InstallationID int64
	// PrivateKey is the App's private key (PEM).
	PrivateKey []byte
}

// PrivateKeyKey is the key of a githubApp's Secret that holds the App's
// private key.
const PrivateKeyKey = "privateKey"

// RateLimitedError is a forge's answer that asks to wait (429, or 403
// with its rate-limit headers): the preview reporter tries again After,
// rather than at once.
type RateLimitedError struct {
	After time.Duration
	Err   error
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("rate limited by the forge, retry in %s: %v", e.After.Round(time.Second), e.Err)
}

func (e *RateLimitedError) Unwrap() error { return e.Err }

// rateLimited wraps err in a RateLimitedError when resp asks to wait:
// 429, or 403 with Retry-After or an exhausted rate limit (GitHub's
// X-RateLimit-Remaining: 0 and X-RateLimit-Reset, GitLab's
// RateLimit-Remaining and RateLimit-Reset); otherwise it is err.
func rateLimited(resp *http.Response, err error, now time.Time) error {
	if err == nil || resp == nil || (resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusForbidden) {
		return err
	}
	h := resp.Header
	if s := h.Get("Retry-After"); s != "" {
		if n, perr := strconv.Atoi(s); perr == nil {
			return &RateLimitedError{After: time.Duration(max(n, 1)) * time.Second, Err: err}
		}
		if t, perr := http.ParseTime(s); perr == nil {
			return &RateLimitedError{After: max(t.Sub(now), time.Second), Err: err}
		}
	}
	remaining := first(h, "X-RateLimit-Remaining", "RateLimit-Remaining")
	if reset := first(h, "X-RateLimit-Reset", "RateLimit-Reset"); reset != "" && (remaining == "0" || resp.StatusCode == http.StatusTooManyRequests) {
		if n, perr := strconv.ParseInt(reset, 10, 64); perr == nil {
			return &RateLimitedError{After: min(max(time.Unix(n, 0).Sub(now), time.Second), time.Hour), Err: err}
		}
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		return &RateLimitedError{After: time.Minute, Err: err}
	}
	return err
}

// APIURL is where a receiver's previews reach the forge's API: its
// spec.previews.apiURL, or the forge's public API (GitHub, GitLab). Never
// an address from a webhook or a preview TerraformRun: the forge's token
// goes there.
func APIURL(rcv *infrav1.TerraformRunReceiver) (string, error) {
	if p := rcv.Spec.Previews; p != nil && p.APIURL != "" {
		return strings.TrimSuffix(p.APIURL, "/"), nil
	}
	switch rcv.Spec.Type {
	case infrav1.ReceiverGitHub:
		return infrav1.DefaultGitHubAPIURL, nil
	case infrav1.ReceiverGitLab:
		return infrav1.DefaultGitLabAPIURL, nil
	}
	return "", fmt.Errorf("spec.previews.apiURL: required for %s", rcv.Spec.Type)
}

// NewReporter is the reporter of a forge type at its API base URL,
// connecting through hc (nil: egress.Client, whose guard refuses the
// manager itself, the cluster's ranges, metadata services and cross-host
// redirects). The address is the receiver's spec.previews.apiURL, never one
// a webhook or a preview named.
func NewReporter(t infrav1.ReceiverType, api string, creds Credentials, hc *http.Client) (Reporter, error) {
	if hc == nil {
		hc = egress.Client(false)
	}
	if api == "" {
		return nil, errors.New("no forge API address (spec.previews.apiURL)")
	}
	if creds.App != nil && t != infrav1.ReceiverGitHub {
		return nil, fmt.Errorf("spec.previews.githubApp: only for GitHub, not %s", t)
	}
	switch t {
	case infrav1.ReceiverGitea:
		return &giteaReporter{api: api, token: creds.Token, hc: hc}, nil
	case infrav1.ReceiverGitHub:
		return newGitHubReporter(api, creds, hc, installationTokens)
	case infrav1.ReceiverGitLab:
		return newGitLabReporter(api, creds.Token, hc)
	}
	return nil, fmt.Errorf("previews cannot report to %s", t)
}

// reporterFor is the reporter of a receiver's previews: its forge, at its
// spec.previews.apiURL, with its credentials, read from the API server.
func reporterFor(ctx context.Context, c client.Reader, rcv *infrav1.TerraformRunReceiver, hc *http.Client) (Reporter, error) {
	if rcv.Spec.Previews == nil {
		return nil, fmt.Errorf("receiver %s has no spec.previews", rcv.Name)
	}
	api, err := APIURL(rcv)
	if err != nil {
		return nil, err
	}
	creds, err := credentials(ctx, c, rcv)
	if err != nil {
		return nil, err
	}
	return NewReporter(rcv.Spec.Type, api, creds, hc)
}

// credentials reads a receiver's forge credentials from its Secret.
func credentials(ctx context.Context, c client.Reader, rcv *infrav1.TerraformRunReceiver) (Credentials, error) {
	p := rcv.Spec.Previews
	if app := p.GitHubApp; app != nil {
		key, err := secretKey(ctx, c, rcv.Namespace, app.PrivateKeySecretRef.Name, PrivateKeyKey, "spec.previews.githubApp.privateKeySecretRef")
		if err != nil {
			return Credentials{}, err
		}
		return Credentials{App: &GitHubApp{AppID: app.AppID, InstallationID: app.InstallationID, PrivateKey: []byte(key)}}, nil
	}
	if p.TokenSecretRef == nil {
		return Credentials{}, errors.New("spec.previews: neither tokenSecretRef nor githubApp")
	}
	tok, err := secretKey(ctx, c, rcv.Namespace, p.TokenSecretRef.Name, TokenKey, "spec.previews.tokenSecretRef")
	return Credentials{Token: tok}, err
}

func secretKey(ctx context.Context, c client.Reader, namespace, name, key, field string) (string, error) {
	var sec corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &sec); err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	v := strings.TrimSpace(string(sec.Data[key]))
	if v == "" {
		return "", fmt.Errorf("%s: Secret %s has no key %q", field, sec.Name, key)
	}
	return v, nil
}

// maxCommentPages bounds the pages of comments read to find the preview's.
const maxCommentPages = 20

// giteaReporter reports through Gitea's official Go SDK.
type giteaReporter struct {
	api, token string
	hc         *http.Client
	me         int64
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
	_, resp, err := c.CreateStatus(owner, repo, sha, giteasdk.CreateStatusOption{State: giteasdk.StatusState(state), Description: description, Context: context, TargetURL: target})
	return rateLimited(giteaHTTP(resp), err, time.Now())
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
		if resp == nil || (resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusForbidden) {
			return id, rateLimited(giteaHTTP(resp), err, time.Now())
		}
		// Deleted by someone: make another.
	}
	cm, resp, err := c.CreateIssueComment(owner, repo, number, giteasdk.CreateIssueCommentOption{Body: body})
	if err != nil {
		return 0, rateLimited(giteaHTTP(resp), err, time.Now())
	}
	return cm.ID, nil
}

func (g *giteaReporter) FindComment(ctx context.Context, owner, repo string, number int64, marker string) (int64, error) {
	c, err := g.client(ctx)
	if err != nil {
		return 0, err
	}
	if g.me == 0 {
		u, resp, err := c.GetMyUserInfo()
		if err != nil {
			err = rateLimited(giteaHTTP(resp), fmt.Errorf("the token's user: %w", err), time.Now())
			var rl *RateLimitedError
			if r := giteaHTTP(resp); !errors.As(err, &rl) && r != nil && (r.StatusCode == http.StatusUnauthorized || r.StatusCode == http.StatusForbidden) {
				// A token without Gitea's read:user scope may not ask who
				// it is (seen in make e2e on Gitea 1.25): no comment is
				// searched for, since one by another author must never
				// be edited; a new one is made, and its id recorded.
				return 0, nil
			}
			return 0, err
		}
		g.me = u.ID
	}
	for page := 1; page <= maxCommentPages; page++ {
		cs, resp, err := c.ListIssueComments(owner, repo, number, giteasdk.ListIssueCommentOptions{ListOptions: giteasdk.ListOptions{Page: page, PageSize: 50}})
		if err != nil {
			return 0, rateLimited(giteaHTTP(resp), err, time.Now())
		}
		for _, cm := range cs {
			if cm.Poster != nil && cm.Poster.ID == g.me && strings.Contains(cm.Body, marker) {
				return cm.ID, nil
			}
		}
		if len(cs) < 50 {
			break
		}
	}
	return 0, nil
}

func giteaHTTP(r *giteasdk.Response) *http.Response {
	if r == nil {
		return nil
	}
	return r.Response
}
