package receiver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

const (
	sha     = "6dcb09b5b57875f334f61aebed695e2e4193db5e"
	mark    = "<!-- opr8r-preview team-a/net -->"
	resetAt = 2000000000 // the X-RateLimit-Reset of the rate-limit answers
)

// clock is the reporters' time in these tests: two minutes before the
// rate limits reset.
var clock = time.Unix(resetAt-120, 0)

// act is what a case asks of a reporter; it returns a comment's id (0
// for a status).
type act func(ctx context.Context, r Reporter) (int64, error)

func status(ctx context.Context, r Reporter) (int64, error) {
	return 0, r.Status(ctx, "octocat", "Hello-World", sha, "opr8r/team-a/net-pr7", "pending", "opr8r is planning 6dcb09b5b578", "https://argo.example.com/w")
}

func comment(id int64) act {
	return func(ctx context.Context, r Reporter) (int64, error) {
		return r.Comment(ctx, "octocat", "Hello-World", 7, id, "hello")
	}
}

func find(ctx context.Context, r Reporter) (int64, error) {
	return r.FindComment(ctx, "octocat", "Hello-World", 7, mark)
}

// forgeCase is one exchange with a forge replayed from its documented
// answers.
type forgeCase struct {
	routes    map[string][]answerOf
	act       act
	wantCalls []call
	wantID    int64
	wantWait  time.Duration // a RateLimitedError asking to wait this long
	wantErr   bool
}

func runForgeCases(t *testing.T, typ infrav1.ReceiverType, cases map[string]forgeCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFakeForge(t, tc.routes)
			rep := testReporter(t, typ, f.srv.URL, Credentials{Token: "tok"}, f.srv.Client())
			id, err := tc.act(context.Background(), rep)
			checkOutcome(t, err, tc.wantErr, tc.wantWait)
			if id != tc.wantID {
				t.Errorf("id = %d, want %d", id, tc.wantID)
			}
			got := f.took(true)
			for i := range got {
				if got[i].Body != "" {
					got[i].Body = jsonBody(t, got[i].Body)
				}
			}
			if diff := cmp.Diff(tc.wantCalls, got); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

// testReporter is a reporter on the fake forge's clock.
func testReporter(t *testing.T, typ infrav1.ReceiverType, api string, creds Credentials, hc *http.Client) Reporter {
	t.Helper()
	switch typ {
	case infrav1.ReceiverGitHub:
		g, err := newGitHubReporter(api, creds, hc, &appTokenCache{})
		if err != nil {
			t.Fatal(err)
		}
		g.now = func() time.Time { return clock }
		return g
	case infrav1.ReceiverGitLab:
		g, err := newGitLabReporter(api, creds.Token, hc)
		if err != nil {
			t.Fatal(err)
		}
		g.now = func() time.Time { return clock }
		return g
	}
	rep, err := NewReporter(typ, api, creds, hc)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func checkOutcome(t *testing.T, err error, wantErr bool, wantWait time.Duration) {
	t.Helper()
	var rl *RateLimitedError
	switch {
	case wantWait > 0:
		if !errors.As(err, &rl) || rl.After.Round(time.Second) != wantWait {
			t.Errorf("error %v, want a RateLimitedError after %s", err, wantWait)
		}
	case wantErr:
		if err == nil || errors.As(err, &rl) {
			t.Errorf("error %v, want an error that is not a rate limit", err)
		}
	case err != nil:
		t.Errorf("error %v", err)
	}
}

func TestGitHubReporter(t *testing.T) {
	statuses := "/repos/octocat/Hello-World/statuses/" + sha
	comments := "/repos/octocat/Hello-World/issues/7/comments"
	statusBody := `{"context":"opr8r/team-a/net-pr7","description":"opr8r is planning 6dcb09b5b578","state":"pending","target_url":"https://argo.example.com/w"}`
	statusCall := call{Method: "POST", Path: statuses, Auth: "Bearer tok", Body: statusBody}
	limited := map[string]string{"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "0", "X-RateLimit-Used": "5000", "X-RateLimit-Reset": fmt.Sprint(resetAt)}
	page1 := `[{"id":10,"body":"` + strings.ReplaceAll(mark, `"`, `\"`) + ` mallory's","user":{"login":"mallory","id":66}},{"id":12,"body":"other","user":{"login":"octocat","id":1}}]`
	page2 := `[{"id":11,"body":"` + mark + ` ours","user":{"login":"octocat","id":1}}]`
	runForgeCases(t, infrav1.ReceiverGitHub, map[string]forgeCase{
		"a commit status": {
			routes:    map[string][]answerOf{"POST " + statuses: {{code: 201, file: "github-status.json"}}},
			act:       status,
			wantCalls: []call{statusCall},
		},
		"a comment made": {
			routes:    map[string][]answerOf{"POST " + comments: {{code: 201, file: "github-comment.json"}}},
			act:       comment(0),
			wantCalls: []call{{Method: "POST", Path: comments, Auth: "Bearer tok", Body: `{"body":"hello"}`}},
			wantID:    1,
		},
		"a comment edited": {
			routes:    map[string][]answerOf{"PATCH /repos/octocat/Hello-World/issues/comments/5": {{code: 200, file: "github-comment.json"}}},
			act:       comment(5),
			wantCalls: []call{{Method: "PATCH", Path: "/repos/octocat/Hello-World/issues/comments/5", Auth: "Bearer tok", Body: `{"body":"hello"}`}},
			wantID:    1,
		},
		"a deleted comment made again": {
			routes: map[string][]answerOf{"POST " + comments: {{code: 201, file: "github-comment.json"}}},
			act:    comment(5),
			wantCalls: []call{
				{Method: "PATCH", Path: "/repos/octocat/Hello-World/issues/comments/5", Auth: "Bearer tok", Body: `{"body":"hello"}`},
				{Method: "POST", Path: comments, Auth: "Bearer tok", Body: `{"body":"hello"}`},
			},
			wantID: 1,
		},
		"the token user's comment found on the second page (Link), not the marker's first author's": {
			routes: map[string][]answerOf{
				"GET /user": {{file: "github-user.json"}},
				"GET " + comments: {
					{body: page1, headers: map[string]string{"Link": `<{url}` + comments + `?page=2&per_page=100>; rel="next", <{url}` + comments + `?page=2&per_page=100>; rel="last"`}},
					{body: page2},
				},
			},
			act: find,
			wantCalls: []call{
				{Method: "GET", Path: "/user", Auth: "Bearer tok"},
				{Method: "GET", Path: comments, Query: "per_page=100", Auth: "Bearer tok"},
				{Method: "GET", Path: comments, Query: "page=2&per_page=100", Auth: "Bearer tok"},
			},
			wantID: 11,
		},
		"the primary rate limit (403, X-RateLimit-Reset)": {
			routes:    map[string][]answerOf{"POST " + statuses: {{code: 403, headers: limited, file: "github-rate-limit.json"}}},
			act:       status,
			wantCalls: []call{statusCall},
			wantWait:  2 * time.Minute,
		},
		"the secondary rate limit (403, Retry-After)": {
			routes:    map[string][]answerOf{"POST " + statuses: {{code: 403, headers: map[string]string{"Retry-After": "60"}, file: "github-secondary-rate-limit.json"}}},
			act:       status,
			wantCalls: []call{statusCall},
			wantWait:  time.Minute,
		},
		"429 with Retry-After": {
			routes:    map[string][]answerOf{"POST " + comments: {{code: 429, headers: map[string]string{"Retry-After": "30"}, file: "github-secondary-rate-limit.json"}}},
			act:       comment(0),
			wantCalls: []call{{Method: "POST", Path: comments, Auth: "Bearer tok", Body: `{"body":"hello"}`}},
			wantWait:  30 * time.Second,
		},
		"a 502": {
			routes:    map[string][]answerOf{"POST " + statuses: {{code: 502, body: `{"message":"Server Error"}`}}},
			act:       status,
			wantCalls: []call{statusCall},
			wantErr:   true,
		},
		"a 403 that is no rate limit (no permission)": {
			routes:    map[string][]answerOf{"POST " + statuses: {{code: 403, body: `{"message":"Resource not accessible by integration","documentation_url":"https://docs.github.com/rest/commits/statuses#create-a-commit-status"}`}}},
			act:       status,
			wantCalls: []call{statusCall},
			wantErr:   true,
		},
	})
}

func TestGitLabReporter(t *testing.T) {
	statuses := "/api/v4/projects/octocat%2FHello-World/statuses/" + sha
	notes := "/api/v4/projects/octocat%2FHello-World/merge_requests/7/notes"
	statusBody := `{"description":"opr8r is planning 6dcb09b5b578","name":"opr8r/team-a/net-pr7","state":"pending","target_url":"https://argo.example.com/w"}`
	statusCall := call{Method: "POST", Path: statuses, Auth: "tok", Body: statusBody}
	page1 := `[{"id":20,"body":"` + mark + ` mallory's","author":{"id":66,"username":"mallory"},"system":false},{"id":21,"body":"` + mark + `","author":{"id":1,"username":"john_smith"},"system":true}]`
	page2 := `[{"id":22,"body":"` + mark + ` ours","author":{"id":1,"username":"john_smith"},"system":false}]`
	runForgeCases(t, infrav1.ReceiverGitLab, map[string]forgeCase{
		"a commit status": {
			routes:    map[string][]answerOf{"POST " + statuses: {{code: 201, file: "gitlab-status.json"}}},
			act:       status,
			wantCalls: []call{statusCall},
		},
		"a note made": {
			routes:    map[string][]answerOf{"POST " + notes: {{code: 201, file: "gitlab-note.json"}}},
			act:       comment(0),
			wantCalls: []call{{Method: "POST", Path: notes, Auth: "tok", Body: `{"body":"hello"}`}},
			wantID:    302,
		},
		"a note edited": {
			routes:    map[string][]answerOf{"PUT " + notes + "/5": {{code: 200, file: "gitlab-note.json"}}},
			act:       comment(5),
			wantCalls: []call{{Method: "PUT", Path: notes + "/5", Auth: "tok", Body: `{"body":"hello"}`}},
			wantID:    302,
		},
		"a deleted note made again": {
			routes: map[string][]answerOf{"PUT " + notes + "/5": {{code: 404, body: `{"message":"404 Not found"}`}}, "POST " + notes: {{code: 201, file: "gitlab-note.json"}}},
			act:    comment(5),
			wantCalls: []call{
				{Method: "PUT", Path: notes + "/5", Auth: "tok", Body: `{"body":"hello"}`},
				{Method: "POST", Path: notes, Auth: "tok", Body: `{"body":"hello"}`},
			},
			wantID: 302,
		},
		"the token user's note found on the second page (X-Next-Page)": {
			routes: map[string][]answerOf{
				"GET /api/v4/user": {{file: "gitlab-user.json"}},
				"GET " + notes: {
					{body: page1, headers: map[string]string{"X-Next-Page": "2", "X-Page": "1", "X-Per-Page": "100", "X-Total-Pages": "2"}},
					{body: page2, headers: map[string]string{"X-Next-Page": "", "X-Page": "2", "X-Per-Page": "100", "X-Total-Pages": "2"}},
				},
			},
			act: find,
			wantCalls: []call{
				{Method: "GET", Path: "/api/v4/user", Auth: "tok"},
				{Method: "GET", Path: notes, Query: "order_by=created_at&per_page=100&sort=asc", Auth: "tok"},
				{Method: "GET", Path: notes, Query: "order_by=created_at&page=2&per_page=100&sort=asc", Auth: "tok"},
			},
			wantID: 22,
		},
		"429 with Retry-After and RateLimit-Reset, not retried inside": {
			routes: map[string][]answerOf{"POST " + statuses: {{code: 429, body: "Retry later", headers: map[string]string{
				"RateLimit-Limit": "60", "RateLimit-Observed": "67", "RateLimit-Remaining": "0", "RateLimit-Reset": fmt.Sprint(resetAt), "Retry-After": "30"}}}},
			act:       status,
			wantCalls: []call{statusCall},
			wantWait:  30 * time.Second,
		},
		"429 with RateLimit-Reset only": {
			routes: map[string][]answerOf{"POST " + statuses: {{code: 429, body: "Retry later", headers: map[string]string{
				"RateLimit-Limit": "60", "RateLimit-Remaining": "0", "RateLimit-Reset": fmt.Sprint(resetAt)}}}},
			act:       status,
			wantCalls: []call{statusCall},
			wantWait:  2 * time.Minute,
		},
		"a 500, not retried inside": {
			routes:    map[string][]answerOf{"POST " + statuses: {{code: 500, body: `{"message":"500 Internal Server Error"}`}}},
			act:       status,
			wantCalls: []call{statusCall},
			wantErr:   true,
		},
	})
}

func TestGiteaReporterFindsItsOwnComment(t *testing.T) {
	comments := "/api/v1/repos/octocat/Hello-World/issues/7/comments"
	f := newFakeForge(t, map[string][]answerOf{
		"GET /api/v1/version": {{body: `{"version":"1.25.4"}`}},
		"GET /api/v1/user":    {{body: `{"id":1,"login":"opr8r-bot"}`}},
		"GET " + comments: {{body: `[{"id":10,"body":"` + mark + ` mallory's","user":{"id":66,"login":"mallory"}},` +
			`{"id":11,"body":"` + mark + ` ours","user":{"id":1,"login":"opr8r-bot"}}]`}},
	})
	rep := testReporter(t, infrav1.ReceiverGitea, f.srv.URL, Credentials{Token: "tok"}, f.srv.Client())
	id, err := find(context.Background(), rep)
	if err != nil || id != 11 {
		t.Errorf("FindComment = %d, %v; want 11 (the token user's, not mallory's who posted the marker first)", id, err)
	}
}

func TestAPIURL(t *testing.T) {
	cases := map[string]struct {
		typ     infrav1.ReceiverType
		apiURL  string
		want    string
		wantErr bool
	}{
		"GitHub by default":        {typ: infrav1.ReceiverGitHub, want: "https://api.github.com"},
		"GitLab by default":        {typ: infrav1.ReceiverGitLab, want: "https://gitlab.com"},
		"GitHub Enterprise":        {typ: infrav1.ReceiverGitHub, apiURL: "https://ghe.example.com/api/v3/", want: "https://ghe.example.com/api/v3"},
		"Gitea, given":             {typ: infrav1.ReceiverGitea, apiURL: "https://gitea.example.com", want: "https://gitea.example.com"},
		"Gitea without an address": {typ: infrav1.ReceiverGitea, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rcv := &infrav1.TerraformRunReceiver{Spec: infrav1.TerraformRunReceiverSpec{Type: tc.typ, Previews: &infrav1.ReceiverPreviews{APIURL: tc.apiURL}}}
			got, err := APIURL(rcv)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("APIURL = %q, %v; want %q (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestGiteaReporterWithoutReadUser: a token without Gitea's read:user scope
// may not ask who it is (GET /api/v1/user: 403, seen in make e2e on Gitea
// 1.25.4 with a write:repository and write:issue token). The reporter then
// searches no comment (one that carries the marker may be anyone's) and
// makes its own, whose id the preview records.
func TestGiteaReporterWithoutReadUser(t *testing.T) {
	comments := "/api/v1/repos/octocat/Hello-World/issues/7/comments"
	f := newFakeForge(t, map[string][]answerOf{
		"GET /api/v1/version": {{body: `{"version":"1.25.4"}`}},
		"GET /api/v1/user":    {{code: http.StatusForbidden, body: `{"message":"token does not have at least one of required scope(s): [read:user]"}`}},
		"GET " + comments:     {{body: `[{"id":10,"body":"` + mark + ` mallory's","user":{"id":66,"login":"mallory"}}]`}},
	})
	rep := testReporter(t, infrav1.ReceiverGitea, f.srv.URL, Credentials{Token: "tok"}, f.srv.Client())
	id, err := find(context.Background(), rep)
	if err != nil || id != 0 {
		t.Errorf("FindComment = %d, %v; want 0 and no error (no identity: search nothing, make a comment)", id, err)
	}
}
