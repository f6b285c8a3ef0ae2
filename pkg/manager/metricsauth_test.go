package manager

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// reviewer answers the filter's TokenReviews from tokens and its
// SubjectAccessReviews with allow, counting them; it serves nothing else.
type reviewer struct {
	client.Client
	tokens  map[string]authenticationv1.UserInfo
	allow   func(authorizationv1.SubjectAccessReviewSpec) bool
	reviews int // SubjectAccessReviews asked
}

func (r *reviewer) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	switch o := obj.(type) {
	case *authenticationv1.TokenReview:
		u, ok := r.tokens[o.Spec.Token]
		o.Status = authenticationv1.TokenReviewStatus{Authenticated: ok, User: u}
	case *authorizationv1.SubjectAccessReview:
		r.reviews++
		o.Status.Allowed = r.allow(o.Spec)
	default:
		return fmt.Errorf("unexpected %T", obj)
	}
	return nil
}

// filtered is the metrics filter over a handler that records the
// Authorization header it sees, answering 200.
func filtered(t *testing.T, rv *reviewer) (http.Handler, *[]string) {
	t.Helper()
	var seen []string
	a := &metricsAuth{c: rv, now: func() time.Time { return metricsNow },
		users: map[string]reviewed[authenticationv1.UserInfo]{}, grants: map[string]reviewed[bool]{}}
	h, err := a.filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		seen = append(seen, req.Header.Get("Authorization"))
		w.WriteHeader(http.StatusOK)
	}))
	if err != nil {
		t.Fatal(err)
	}
	return h, &seen
}

var metricsNow = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func scrapeWith(h http.Handler, authorization string) int {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	h.ServeHTTP(rec, req)
	return rec.Code
}

// The scheme is matched case-insensitively (RFC 7235), with whitespace
// around it tolerated, and the handler never sees the Authorization
// header.
func TestMetricsAuthBearerScheme(t *testing.T) {
	cases := map[string]struct {
		header   string
		wantCode int
	}{
		"Bearer":                         {header: "Bearer reader-token", wantCode: http.StatusOK},
		"bearer":                         {header: "bearer reader-token", wantCode: http.StatusOK},
		"BEARER":                         {header: "BEARER reader-token", wantCode: http.StatusOK},
		"whitespace around and between":  {header: "  Bearer \t reader-token  ", wantCode: http.StatusOK},
		"no header":                      {wantCode: http.StatusUnauthorized},
		"another scheme":                 {header: "Basic reader-token", wantCode: http.StatusUnauthorized},
		"no token":                       {header: "Bearer  ", wantCode: http.StatusUnauthorized},
		"no space after the scheme":      {header: "Bearerreader-token", wantCode: http.StatusUnauthorized},
		"two words after the scheme":     {header: "Bearer reader-token x", wantCode: http.StatusUnauthorized},
		"a token the API server refuses": {header: "bearer other", wantCode: http.StatusUnauthorized},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rv := &reviewer{
				tokens: map[string]authenticationv1.UserInfo{"reader-token": {Username: "prometheus"}},
				allow:  func(authorizationv1.SubjectAccessReviewSpec) bool { return true },
			}
			h, seen := filtered(t, rv)
			if got := scrapeWith(h, tc.header); got != tc.wantCode {
				t.Errorf("GET /metrics with Authorization %q: %d, want %d", tc.header, got, tc.wantCode)
			}
			var want []string
			if tc.wantCode == http.StatusOK {
				want = []string{""} // served once, with no Authorization header
			}
			if diff := cmp.Diff(want, *seen); diff != "" {
				t.Errorf("Authorization headers the handler saw (-want +got):\n%s", diff)
			}
		})
	}
}

// An answer is kept under the whole review it answered: a token whose
// user has the same name but other extra (a scoped token), UID or groups
// is reviewed again, never let through by another token's allow.
func TestMetricsAuthKeysGrantsOnTheWholeReview(t *testing.T) {
	alice := authenticationv1.UserInfo{Username: "alice", UID: "u1", Groups: []string{"readers", "system:authenticated"}}
	with := func(f func(*authenticationv1.UserInfo)) authenticationv1.UserInfo {
		u := alice
		u.Groups = append([]string(nil), alice.Groups...)
		u.Extra = map[string]authenticationv1.ExtraValue{}
		for k, v := range alice.Extra {
			u.Extra[k] = v
		}
		f(&u)
		return u
	}
	scoped := with(func(u *authenticationv1.UserInfo) { u.Extra["scopes"] = authenticationv1.ExtraValue{"user:info"} })
	twoExtra := with(func(u *authenticationv1.UserInfo) {
		u.Extra["a"] = authenticationv1.ExtraValue{"1"}
		u.Extra["b"] = authenticationv1.ExtraValue{"2"}
		u.Extra["c"] = authenticationv1.ExtraValue{"3"}
	})
	cases := map[string]struct {
		first, second authenticationv1.UserInfo
		wantCode      int // of the second token's scrape
		wantReviews   int // SubjectAccessReviews asked for both
	}{
		"the same review: the allow is reused": {
			first: alice, second: alice, wantCode: http.StatusOK, wantReviews: 1,
		},
		"a scoped token of the same user: reviewed again, and denied": {
			first: alice, second: scoped, wantCode: http.StatusForbidden, wantReviews: 2,
		},
		"the unscoped token after a scoped one's denial: reviewed again, and allowed": {
			first: scoped, second: alice, wantCode: http.StatusOK, wantReviews: 2,
		},
		"other extra values: reviewed again": {
			first: scoped, second: with(func(u *authenticationv1.UserInfo) { u.Extra["scopes"] = authenticationv1.ExtraValue{"user:full"} }),
			wantCode: http.StatusOK, wantReviews: 2,
		},
		"another UID: reviewed again": {
			first: alice, second: with(func(u *authenticationv1.UserInfo) { u.UID = "u2" }), wantCode: http.StatusOK, wantReviews: 2,
		},
		"other groups: reviewed again": {
			first: alice, second: with(func(u *authenticationv1.UserInfo) { u.Groups = []string{"system:authenticated"} }), wantCode: http.StatusOK, wantReviews: 2,
		},
		"the same groups in another order: reused": {
			first: alice, second: with(func(u *authenticationv1.UserInfo) { u.Groups = []string{"system:authenticated", "readers"} }), wantCode: http.StatusOK, wantReviews: 1,
		},
		"the same extra of several keys: one stable key, reused": {
			first: twoExtra, second: with(func(u *authenticationv1.UserInfo) { u.Extra = twoExtra.Extra }), wantCode: http.StatusOK, wantReviews: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rv := &reviewer{
				tokens: map[string]authenticationv1.UserInfo{"first": tc.first, "second": tc.second},
				allow: func(s authorizationv1.SubjectAccessReviewSpec) bool {
					return s.User == "alice" && len(s.Extra["scopes"]) == 0 || slicesEqual(s.Extra["scopes"], []string{"user:full"})
				},
			}
			h, _ := filtered(t, rv)
			scrapeWith(h, "Bearer first")
			if got := scrapeWith(h, "Bearer second"); got != tc.wantCode {
				t.Errorf("second token: %d, want %d", got, tc.wantCode)
			}
			if rv.reviews != tc.wantReviews {
				t.Errorf("SubjectAccessReviews asked: %d, want %d", rv.reviews, tc.wantReviews)
			}
		})
	}
}

func slicesEqual(a authorizationv1.ExtraValue, b []string) bool {
	return cmp.Equal([]string(a), b)
}
