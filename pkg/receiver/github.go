package receiver

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	ghapi "github.com/google/go-github/v84/github"
)

// githubReporter reports through GitHub's official Go client
// (google/go-github): a commit status and one issue comment on the pull
// request, as a token's user or as a GitHub App's installation.
type githubReporter struct {
	base   *url.URL
	hc     *http.Client
	token  string
	app    *GitHubApp
	tokens *appTokenCache
	now    func() time.Time
	login  string
}

func newGitHubReporter(api string, creds Credentials, hc *http.Client, tokens *appTokenCache) (*githubReporter, error) {
	base, err := url.Parse(strings.TrimSuffix(api, "/") + "/")
	if err != nil {
		return nil, fmt.Errorf("GitHub API address: %w", err)
	}
	return &githubReporter{base: base, hc: hc, token: creds.Token, app: creds.App, tokens: tokens, now: time.Now}, nil
}

// client is a go-github client at the reporter's API address that
// authenticates with tok.
func (g *githubReporter) client(tok string) *ghapi.Client {
	c := ghapi.NewClient(g.hc).WithAuthToken(tok)
	c.BaseURL = g.base
	return c
}

// authed is a client as the token's user or the App's installation.
func (g *githubReporter) authed(ctx context.Context) (*ghapi.Client, error) {
	if g.app == nil {
		return g.client(g.token), nil
	}
	tok, _, err := g.installation(ctx)
	if err != nil {
		return nil, err
	}
	return g.client(tok), nil
}

func (g *githubReporter) Status(ctx context.Context, owner, repo, sha, context, state, description, target string) error {
	c, err := g.authed(ctx)
	if err != nil {
		return err
	}
	st := ghapi.RepoStatus{State: &state, Description: &description, Context: &context}
	if target != "" {
		st.TargetURL = &target
	}
	_, resp, err := c.Repositories.CreateStatus(ctx, owner, repo, sha, st)
	return rateLimited(githubHTTP(resp), err, g.now())
}

func (g *githubReporter) Comment(ctx context.Context, owner, repo string, number, id int64, body string) (int64, error) {
	c, err := g.authed(ctx)
	if err != nil {
		return 0, err
	}
	if id > 0 {
		cm, resp, err := c.Issues.EditComment(ctx, owner, repo, id, &ghapi.IssueComment{Body: &body})
		if err == nil {
			return cm.GetID(), nil
		}
		if resp == nil || (resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusForbidden) || isLimit(err) {
			return id, rateLimited(githubHTTP(resp), err, g.now())
		}
		// Deleted by someone: make another.
	}
	cm, resp, err := c.Issues.CreateComment(ctx, owner, repo, int(number), &ghapi.IssueComment{Body: &body})
	if err != nil {
		return 0, rateLimited(githubHTTP(resp), err, g.now())
	}
	return cm.GetID(), nil
}

func (g *githubReporter) FindComment(ctx context.Context, owner, repo string, number int64, marker string) (int64, error) {
	login, err := g.identity(ctx)
	if err != nil {
		return 0, err
	}
	c, err := g.authed(ctx)
	if err != nil {
		return 0, err
	}
	opts := &ghapi.IssueListCommentsOptions{ListOptions: ghapi.ListOptions{PerPage: 100}}
	for range maxCommentPages {
		cs, resp, err := c.Issues.ListComments(ctx, owner, repo, int(number), opts)
		if err != nil {
			return 0, rateLimited(githubHTTP(resp), err, g.now())
		}
		for _, cm := range cs {
			if strings.EqualFold(cm.GetUser().GetLogin(), login) && strings.Contains(cm.GetBody(), marker) {
				return cm.GetID(), nil
			}
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	return 0, nil
}

// identity is the login the reporter's comments are written by: the
// token's user (GET /user), or the App's bot (GET /app: <slug>[bot]).
func (g *githubReporter) identity(ctx context.Context) (string, error) {
	if g.login != "" {
		return g.login, nil
	}
	if g.app != nil {
		_, login, err := g.installation(ctx)
		g.login = login
		return login, err
	}
	u, resp, err := g.client(g.token).Users.Get(ctx, "")
	if err != nil {
		return "", rateLimited(githubHTTP(resp), fmt.Errorf("the token's user: %w", err), g.now())
	}
	g.login = u.GetLogin()
	if g.login == "" {
		return "", errors.New("GitHub named no login for the token's user")
	}
	return g.login, nil
}

// installation is the App installation's token and bot login, from the
// cache until a few minutes before the token expires.
func (g *githubReporter) installation(ctx context.Context) (string, string, error) {
	key := g.tokens.key(g.base.String(), g.app)
	if t, ok := g.tokens.get(key, g.now()); ok {
		return t.token, t.login, nil
	}
	jwtTok, err := appJWT(g.app, g.now())
	if err != nil {
		return "", "", err
	}
	c := g.client(jwtTok)
	app, resp, err := c.Apps.Get(ctx, "")
	if err != nil {
		return "", "", rateLimited(githubHTTP(resp), fmt.Errorf("GitHub App %d: %w", g.app.AppID, err), g.now())
	}
	it, resp, err := c.Apps.CreateInstallationToken(ctx, g.app.InstallationID, nil)
	if err != nil {
		return "", "", rateLimited(githubHTTP(resp), fmt.Errorf("GitHub App %d's installation %d: %w", g.app.AppID, g.app.InstallationID, err), g.now())
	}
	t := appToken{token: it.GetToken(), login: app.GetSlug() + "[bot]", expires: it.GetExpiresAt().Time}
	g.tokens.put(key, t)
	return t.token, t.login, nil
}

// appJWT is the App's JSON Web Token (RS256, valid nine minutes, issued a
// minute back against clock drift), as GitHub documents for
// authenticating as an App.
func appJWT(app *GitHubApp, now time.Time) (string, error) {
	key, err := jwt.ParseRSAPrivateKeyFromPEM(app.PrivateKey)
	if err != nil {
		return "", fmt.Errorf("spec.previews.githubApp: the private key: %w", err)
	}
	claims := jwt.RegisteredClaims{
		Issuer:    strconv.FormatInt(app.AppID, 10),
		IssuedAt:  jwt.NewNumericDate(now.Add(-time.Minute)),
		ExpiresAt: jwt.NewNumericDate(now.Add(9 * time.Minute)),
	}
	return jwt.NewWithClaims(jwt.SigningMethodRS256, claims).SignedString(key)
}

// tokenMargin is how long before it expires an installation token is
// renewed.
const tokenMargin = 5 * time.Minute

// appToken is an installation's token and its App's bot login.
type appToken struct {
	token, login string
	expires      time.Time
}

// appTokenCache keeps installation tokens (an hour's worth each, by GitHub)
// across reports, by API address, installation and key.
type appTokenCache struct {
	mu sync.Mutex
	m  map[string]appToken
}

// installationTokens is the process's cache, shared by the webhook server
// and the preview reporter.
var installationTokens = &appTokenCache{}

func (c *appTokenCache) key(api string, app *GitHubApp) string {
	h := sha256.Sum256(app.PrivateKey)
	return fmt.Sprintf("%s\x00%d\x00%d\x00%x", api, app.AppID, app.InstallationID, h)
}

func (c *appTokenCache) get(key string, now time.Time) (appToken, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.m[key]
	if !ok || !now.Add(tokenMargin).Before(t.expires) {
		return appToken{}, false
	}
	return t, true
}

func (c *appTokenCache) put(key string, t appToken) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]appToken{}
	}
	c.m[key] = t
}

func githubHTTP(r *ghapi.Response) *http.Response {
	if r == nil {
		return nil
	}
	return r.Response
}

// isLimit says whether err is one of go-github's rate-limit errors.
func isLimit(err error) bool {
	var rl *ghapi.RateLimitError
	var ab *ghapi.AbuseRateLimitError
	return errors.As(err, &rl) || errors.As(err, &ab)
}
