package manager

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// How long the metrics filter keeps the API server's answers, as
// controller-runtime's filters.WithAuthenticationAndAuthorization does: a
// token's user for a minute, an allowed request for 5 minutes, a denied
// one for 30 seconds.
const (
	tokenTTL   = time.Minute
	allowTTL   = 5 * time.Minute
	denyTTL    = 30 * time.Second
	cacheLimit = 1024 // entries per cache; a full cache is emptied
	reviewWait = 10 * time.Second
)

// MetricsAuth is the secure metrics endpoint's filter provider. A request
// passes only with a bearer token the API server authenticates
// (TokenReview) whose user may get the path (SubjectAccessReview on the
// non-resource URL, the ClusterRole opr8r-metrics-reader). It answers 401
// without a token or with one the API server does not authenticate, 403
// for a user who may not read, and 500 when the API server can't be asked.
//
// It does what controller-runtime's filters.WithAuthenticationAndAuthorization
// does, with the manager's own client: that filter links k8s.io/apiserver
// and client-go's informers, 5.5 MiB of the manager's resident memory at
// rest (docs/performance.md, P4). What it buys is that memory, and
// nothing else: it keeps the library's behaviour where it guards the
// endpoint. The scheme "Bearer" is matched case-insensitively (RFC 7235),
// as k8s.io/apiserver's bearer token authenticator does; an allowed or
// denied review is kept under the whole review it answered (user, UID,
// groups, extra, verb and path), as the library's caching authorizer keys
// on the whole attributes, so that a token whose user carries other extra
// (scopes, say) never reuses another token's allow; and the Authorization
// header is removed before the handler sees the request, as the library's
// authentication filter does. The price is keeping those in step by hand,
// with the tests of metricsauth_test.go.
func MetricsAuth(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	scheme := runtime.NewScheme()
	if err := authenticationv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := authorizationv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme, HTTPClient: httpClient})
	if err != nil {
		return nil, err
	}
	a := &metricsAuth{c: c, users: map[string]reviewed[authenticationv1.UserInfo]{}, grants: map[string]reviewed[bool]{}, now: time.Now}
	return a.filter, nil
}

type reviewed[T any] struct {
	v       T
	ok      bool // authenticated
	expires time.Time
}

type metricsAuth struct {
	c   client.Client
	now func() time.Time

	mu     sync.Mutex
	users  map[string]reviewed[authenticationv1.UserInfo] // by the token's SHA-256
	grants map[string]reviewed[bool]                      // by the SubjectAccessReview's spec (grantKey)
}

func (a *metricsAuth) filter(log logr.Logger, next http.Handler) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		token, found := bearerToken(req.Header.Get("Authorization"))
		if !found {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), reviewWait)
		defer cancel()
		user, ok, err := a.authenticate(ctx, token)
		if err != nil {
			log.Error(err, "Authentication failed")
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if !ok {
			log.V(4).Info("Authentication failed")
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		allowed, err := a.authorize(ctx, user, strings.ToLower(req.Method), req.URL.Path)
		if err != nil {
			msg := fmt.Sprintf("Authorization for user %s failed", user.Username)
			log.Error(err, msg)
			http.Error(w, msg, http.StatusInternalServerError)
			return
		}
		if !allowed {
			msg := fmt.Sprintf("Authorization denied for user %s", user.Username)
			log.V(4).Info(msg)
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		// The handler has no use for the token: it is not passed on, to
		// be logged or forwarded.
		req.Header.Del("Authorization")
		next.ServeHTTP(w, req)
	}), nil
}

// bearerToken is the token of an Authorization header of the Bearer
// scheme, whose name is matched case-insensitively (RFC 7235, section
// 2.1), with whitespace around and between scheme and token tolerated. A
// header of another scheme, without a token, or with more than one word
// after the scheme has none.
func bearerToken(header string) (string, bool) {
	f := strings.Fields(header)
	if len(f) != 2 || !strings.EqualFold(f[0], "bearer") {
		return "", false
	}
	return f[1], true
}

func (a *metricsAuth) authenticate(ctx context.Context, token string) (authenticationv1.UserInfo, bool, error) {
	key := fmt.Sprintf("%x", sha256.Sum256([]byte(token)))
	if r, hit := lookup(a, a.users, key); hit {
		return r.v, r.ok, nil
	}
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
	if err := a.c.Create(ctx, tr); err != nil {
		return authenticationv1.UserInfo{}, false, fmt.Errorf("TokenReview: %w", err)
	}
	ok := tr.Status.Authenticated && tr.Status.User.Username != ""
	store(a, a.users, key, reviewed[authenticationv1.UserInfo]{v: tr.Status.User, ok: ok, expires: a.now().Add(tokenTTL)})
	return tr.Status.User, ok, nil
}

func (a *metricsAuth) authorize(ctx context.Context, u authenticationv1.UserInfo, verb, path string) (bool, error) {
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}}
	key, err := grantKey(sar.Spec)
	if err != nil {
		return false, err
	}
	if r, hit := lookup(a, a.grants, key); hit {
		return r.v, nil
	}
	if err := a.c.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	ttl := denyTTL
	if sar.Status.Allowed {
		ttl = allowTTL
	}
	store(a, a.grants, key, reviewed[bool]{v: sar.Status.Allowed, expires: a.now().Add(ttl)})
	return sar.Status.Allowed, nil
}

// grantKey is what an answer to the review spec is kept under: the whole
// review, user, UID, groups (sorted: their order does not change the
// answer), extra and the non-resource attributes, as JSON, whose
// encoding of a map sorts its keys, so that the same review always has
// the same key, hashed to bound the cache's memory. Extra values keep
// their order: two orders are two keys, which costs a review, never a
// wrong answer.
func grantKey(spec authorizationv1.SubjectAccessReviewSpec) (string, error) {
	spec.Groups = slices.Sorted(slices.Values(spec.Groups))
	b, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("SubjectAccessReview: %w", err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b)), nil
}

func lookup[T any](a *metricsAuth, m map[string]reviewed[T], key string) (reviewed[T], bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, hit := m[key]
	if hit && a.now().After(r.expires) {
		delete(m, key)
		return r, false
	}
	return r, hit
}

func store[T any](a *metricsAuth, m map[string]reviewed[T], key string, r reviewed[T]) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(m) >= cacheLimit {
		clear(m)
	}
	m[key] = r
}
