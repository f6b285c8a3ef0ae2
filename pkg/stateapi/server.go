package stateapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	kjson "sigs.k8s.io/json"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/names"
)

// MaxBody bounds a request's body: a state Secret holds at most 1 MiB,
// base64 in JSON a third more.
const MaxBody = 4 << 20

// Identity is who called, as the API server vouches for their token.
type Identity struct {
	// Namespace and Account are the service account's.
	Namespace, Account string
	// Pod is the pod the token is bound to.
	Pod string
	// Audience is the token's state audience (names.StateAudience).
	Audience string
}

// Authenticator checks a bearer token.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// GrantSource is the grant of an identity: Server.grant with the
// manager's cache.
type GrantSource interface {
	Grant(ctx context.Context, id Identity) (Grant, error)
}

// Server serves the state API over TLS.
type Server struct {
	// Addr is where it listens (":9444"); "" or "0" disables it.
	Addr string
	// TLS is the serving certificate.
	TLS    *tls.Config
	Auth   Authenticator
	Grants GrantSource
	// Upstream is the API server, with the manager's own credentials:
	// every call allowed is made as the manager.
	Upstream *rest.Config

	// MaxInFlight bounds the calls served at once (DefaultMaxInFlight),
	// MaxPerChild one child's (DefaultMaxPerChild): a module's code that
	// floods the API slows only itself.
	MaxInFlight, MaxPerChild int

	once      sync.Once
	slots     chan struct{}
	mu        sync.Mutex
	perChild  map[string]int
	transport http.RoundTripper
	host      *url.URL
	err       error
}

// The defaults of Server.MaxInFlight and MaxPerChild.
const (
	DefaultMaxInFlight = 64
	DefaultMaxPerChild = 8
)

// admit takes a slot for child: false when the child has as many calls in
// flight as it may (it is answered 429, and client-go waits and retries),
// or ctx ends while every slot is taken.
func (s *Server) admit(ctx context.Context, child string) (release func(), ok bool) {
	s.init()
	per := s.MaxPerChild
	if per <= 0 {
		per = DefaultMaxPerChild
	}
	s.mu.Lock()
	if s.perChild[child] >= per {
		s.mu.Unlock()
		return nil, false
	}
	s.perChild[child]++
	s.mu.Unlock()
	done := func() {
		s.mu.Lock()
		if s.perChild[child]--; s.perChild[child] <= 0 {
			delete(s.perChild, child)
		}
		s.mu.Unlock()
	}
	select {
	case s.slots <- struct{}{}:
		return func() { <-s.slots; done() }, true
	case <-ctx.Done():
		done()
		return nil, false
	}
}

func (s *Server) init() {
	s.once.Do(func() {
		n := s.MaxInFlight
		if n <= 0 {
			n = DefaultMaxInFlight
		}
		s.slots = make(chan struct{}, n)
		s.perChild = map[string]int{}
		if s.Upstream == nil {
			s.err = errors.New("no API server")
			return
		}
		s.transport, s.err = rest.TransportFor(s.Upstream)
		if s.err == nil {
			s.host, s.err = url.Parse(strings.TrimSuffix(s.Upstream.Host, "/"))
		}
	})
}

// NeedLeaderElection: every replica serves (a step may reach any).
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx is done.
func (s *Server) Start(ctx context.Context) error {
	if s.Addr == "" || s.Addr == "0" {
		return nil
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("state API: %w", err)
	}
	srv := &http.Server{Handler: s, TLSConfig: s.TLS, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: 2 * time.Minute}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.FromContext(ctx).Info("serving the state API", "address", s.Addr)
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	// ServeTLS returns as soon as Shutdown begins; the calls in flight
	// (a step's state write, its lock's release) finish before Start
	// returns and the manager exits. Returning at once let a stopping
	// manager (make e2e TestChaos: the pod deleted with a grace period of
	// 1 s) cut a lock's release after it was sent, which the step cannot
	// safely send again: its plan failed with "Error releasing the state
	// lock".
	<-drained
	return nil
}

// call is one parsed request.
type call struct {
	Request
	group   string // "" or coordination.k8s.io
	version string
}

// parse maps a path and method to a call: the core Secrets and the
// coordination.k8s.io/v1 Leases, by name or the collection.
func parse(r *http.Request) (call, error) {
	p := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var c call
	var rest []string
	switch {
	case len(p) >= 4 && p[0] == "api" && p[1] == "v1" && p[2] == "namespaces":
		c.version, rest = "v1", p[3:]
	case len(p) >= 5 && p[0] == "apis" && p[1] == "coordination.k8s.io" && p[2] == "v1" && p[3] == "namespaces":
		c.group, c.version, rest = "coordination.k8s.io", "v1", p[4:]
	default:
		return c, forbid("%s %s: the state API serves only Secrets and Leases in a namespace", r.Method, r.URL.Path)
	}
	if len(rest) < 2 || len(rest) > 3 {
		return c, forbid("%s %s: not served (no subresources)", r.Method, r.URL.Path)
	}
	c.Namespace, c.Resource = rest[0], Resource(rest[1])
	// Names are joined into the API server's path unescaped: a name that
	// is not a DNS subdomain (e.g. "x?k=v", sent as x%3Fk=v) would be
	// decided as one object and reach the API server as another.
	if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
		return c, forbid("%s %s: the namespace is not a DNS label", r.Method, r.URL.Path)
	}
	if len(rest) == 3 {
		if errs := validation.IsDNS1123Subdomain(rest[2]); len(errs) > 0 {
			return c, forbid("%s %s: the name is not a DNS subdomain", r.Method, r.URL.Path)
		}
	}
	if (c.group == "" && c.Resource != Secrets) || (c.group != "" && c.Resource != Leases) {
		return c, forbid("%s %s: the state API serves only Secrets and Leases", r.Method, r.URL.Path)
	}
	named := len(rest) == 3
	if named {
		c.Name = rest[2]
	}
	if r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1" {
		return c, forbid("watch is not served")
	}
	switch {
	case r.Method == http.MethodGet && named:
		c.Verb = Get
	case r.Method == http.MethodGet:
		c.Verb = List
	case r.Method == http.MethodPost && !named:
		c.Verb = Create
	case r.Method == http.MethodPut && named:
		c.Verb = Update
	case r.Method == http.MethodDelete && named:
		c.Verb = Delete
	default:
		return c, forbid("%s %s: not served (patch and collection deletes are not)", r.Method, r.URL.Path)
	}
	return c, nil
}

// queryKept are the query parameters passed on; any other is dropped.
var queryKept = []string{"labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "resourceVersionMatch", "dryRun", "fieldManager", "fieldValidation", "propagationPolicy", "gracePeriodSeconds"}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	token, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "the state API takes a step's projected token (Authorization: Bearer)")
		return
	}
	id, err := s.Auth.Authenticate(ctx, token)
	if err != nil {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, err.Error())
		return
	}
	c, err := parse(r)
	if err != nil {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, err.Error())
		return
	}
	g, err := s.Grants.Grant(ctx, id)
	if err != nil {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, err.Error())
		return
	}
	release, ok := s.admit(ctx, g.Namespace+"/"+g.Child)
	if !ok {
		w.Header().Set("Retry-After", "1")
		writeStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, "too many calls in flight for "+g.Child)
		return
	}
	defer release()
	var body []byte
	if c.Verb == Create || c.Verb == Update {
		if body, ok = readObject(w, r, &c); !ok {
			return
		}
	}
	if err := s.serve(ctx, w, r, g, c, body); err != nil {
		var f *Forbidden
		if errors.As(err, &f) {
			log.FromContext(ctx).V(1).Info("state API call refused", "child", g.Child, "reason", f.Reason)
			writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, f.Reason)
			return
		}
		writeStatus(w, http.StatusBadGateway, metav1.StatusReasonServiceUnavailable, "state API: "+err.Error())
	}
}

// readObject reads the object of a create or an update: JSON only, at most
// MaxBody bytes, decoded as the API server decodes it (case-sensitive,
// strict), named and namespaced as the path; what was decided on is what
// is sent, so no second reading of the same bytes can differ. It answers
// the refusal itself, and says whether to go on.
func readObject(w http.ResponseWriter, r *http.Request, c *call) ([]byte, bool) {
	if r.Header.Get("Content-Type") != "" && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		writeStatus(w, http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, "the state API takes JSON only")
		return nil, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil || len(body) > MaxBody {
		writeStatus(w, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, fmt.Sprintf("a body of at most %d bytes", MaxBody))
		return nil, false
	}
	meta, typ, checked, err := decodeObject(c.Resource, body)
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "reading the object: "+err.Error())
		return nil, false
	}
	if c.Verb == Create {
		c.Name = meta.Name
	} else if meta.Name != c.Name {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the object's name is not the path's")
		return nil, false
	}
	if ns := meta.Namespace; ns != "" && ns != c.Namespace {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the object's namespace is not the path's")
		return nil, false
	}
	c.Object, c.Type = meta, typ
	return checked, true
}

// serve decides the call, makes it as the manager, and returns the API
// server's answer: a get's and a list's only once their objects are
// checked.
func (s *Server) serve(ctx context.Context, w http.ResponseWriter, in *http.Request, g Grant, c call, body []byte) error {
	foreign := c.Namespace != g.Namespace
	// Calls decided on their names and bodies alone: the lock, a
	// dependency's outputs, and a create.
	if c.Resource == Leases || foreign || c.Verb == Create {
		if err := g.Decide(c.Request); err != nil {
			return err
		}
		return s.forward(ctx, w, in, c, body, nil)
	}
	switch c.Verb {
	case Update, Delete:
		return s.serveChange(ctx, w, in, g, c, body)
	case Get:
		return s.forward(ctx, w, in, c, nil, func(code int, got []byte) ([]byte, error) {
			if code == http.StatusNotFound && g.State != "" && c.Name == g.State {
				return got, nil // a state not written yet
			}
			if code == http.StatusNotFound {
				// Say not found only of a name the child may have.
				return got, g.Decide(Request{Verb: Create, Resource: c.Resource, Namespace: c.Namespace, Name: c.Name,
					Object: &metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "TerraformRun", Name: g.Run, UID: g.RunUID}}}})
			}
			if code != http.StatusOK {
				return got, nil
			}
			m, err := metaOf(got)
			if err != nil {
				return nil, err
			}
			c.Stored = m
			return got, g.Decide(c.Request)
		})
	case List:
		return s.forward(ctx, w, in, c, nil, func(code int, got []byte) ([]byte, error) {
			if code != http.StatusOK {
				return got, nil
			}
			return filterList(got, g, c)
		})
	}
	return forbid("not served")
}

// serveChange serves an update or a delete, decided on the stored object,
// fetched first (one that does not exist is decided as a create).
func (s *Server) serveChange(ctx context.Context, w http.ResponseWriter, in *http.Request, g Grant, c call, body []byte) error {
	code, got, err := s.do(ctx, http.MethodGet, s.path(c, true), nil, nil)
	if err != nil {
		return err
	}
	if code == http.StatusNotFound {
		if err := g.Decide(Request{Verb: Create, Resource: c.Resource, Namespace: c.Namespace, Name: c.Name, Object: c.Object}); err != nil {
			return err
		}
		return s.forward(ctx, w, in, c, body, nil)
	}
	m, err := metaOf(got)
	if err != nil {
		return err
	}
	c.Stored = m
	if err := g.Decide(c.Request); err != nil {
		return err
	}
	return s.forward(ctx, w, in, c, body, nil)
}

// decodeObject reads a Secret or a Lease as the API server does
// (case-sensitive keys, unknown and duplicate fields refused), and
// returns its metadata, its type and the object encoded again.
func decodeObject(res Resource, body []byte) (*metav1.ObjectMeta, string, []byte, error) {
	var obj interface {
		GetObjectMeta() metav1.Object
	}
	var typ func() string
	switch res {
	case Secrets:
		s := &corev1.Secret{}
		obj, typ = s, func() string { return string(s.Type) }
	case Leases:
		l := &coordinationv1.Lease{}
		obj, typ = l, func() string { return "" }
	default:
		return nil, "", nil, fmt.Errorf("not served")
	}
	strict, err := kjson.UnmarshalStrict(body, obj)
	if err != nil {
		return nil, "", nil, err
	}
	if len(strict) > 0 {
		return nil, "", nil, fmt.Errorf("%v", errors.Join(strict...))
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, "", nil, err
	}
	var meta *metav1.ObjectMeta
	switch o := obj.(type) {
	case *corev1.Secret:
		meta = &o.ObjectMeta
	case *coordinationv1.Lease:
		meta = &o.ObjectMeta
	}
	return meta, typ(), out, nil
}

// filterList keeps the items of a list the grant lets the child get.
func filterList(got []byte, g Grant, c call) ([]byte, error) {
	var list map[string]json.RawMessage
	if err := json.Unmarshal(got, &list); err != nil {
		return nil, err
	}
	var items []json.RawMessage
	if raw, ok := list["items"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, err
		}
	}
	kept := []json.RawMessage{}
	for _, it := range items {
		m, err := metaOf(it)
		if err != nil {
			return nil, err
		}
		if g.Decide(Request{Verb: Get, Resource: c.Resource, Namespace: c.Namespace, Name: m.Name, Stored: m}) == nil {
			kept = append(kept, it)
		}
	}
	raw, err := json.Marshal(kept)
	if err != nil {
		return nil, err
	}
	list["items"] = raw
	return json.Marshal(list)
}

func metaOf(b []byte) (*metav1.ObjectMeta, error) {
	var obj struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, fmt.Errorf("reading the API server's answer: %w", err)
	}
	return &obj.Metadata, nil
}

func (s *Server) path(c call, named bool) string {
	p := "/api/v1/namespaces/" + c.Namespace + "/" + string(c.Resource)
	if c.group != "" {
		p = "/apis/" + c.group + "/" + c.version + "/namespaces/" + c.Namespace + "/" + string(c.Resource)
	}
	if named {
		p += "/" + c.Name
	}
	return p
}

// forward makes the call as the manager and writes the answer, through
// check when set (a get's or a list's objects).
func (s *Server) forward(ctx context.Context, w http.ResponseWriter, in *http.Request, c call, body []byte, check func(int, []byte) ([]byte, error)) error {
	q := url.Values{}
	for _, k := range queryKept {
		if v, ok := in.URL.Query()[k]; ok {
			q[k] = v
		}
	}
	p := s.path(c, c.Verb != List && c.Verb != Create)
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	} else if c.Verb == Delete {
		// A delete's options (propagation, preconditions) ride in its body.
		b, err := io.ReadAll(io.LimitReader(in.Body, 64<<10))
		if err != nil {
			return err
		}
		if len(b) > 0 {
			rd = bytes.NewReader(b)
		}
	}
	code, got, err := s.do(ctx, in.Method, p, rd, nil)
	if err != nil {
		return err
	}
	if check != nil {
		if got, err = check(code, got); err != nil {
			return err
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(got)
	return nil
}

// do makes one request to the API server as the manager.
func (s *Server) do(ctx context.Context, method, path string, body io.Reader, _ http.Header) (int, []byte, error) {
	s.init()
	if s.err != nil {
		return 0, nil, s.err
	}
	u := *s.host
	full, err := url.Parse(u.String() + path)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, full.String(), body)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.transport.RoundTrip(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, b, err
}

func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	st := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: int32(code), Reason: reason,
		Message: "opr8r state API: " + msg}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(st)
}

// TokenReviewer authenticates step tokens with the API server: the token's
// audience (read from it, then checked by the API server) must be a
// state audience, and the token bound to a pod. Answers are kept for a
// short while, as a terraform command makes several calls.
type TokenReviewer struct {
	Client authnclient.TokenReviewInterface
	TTL    time.Duration
	// Limit bounds the reviews of tokens not in the cache (any pod can
	// send made-up tokens): DefaultReviewLimit when nil.
	Limit *rate.Limiter
	now   func() time.Time

	mu    sync.Mutex
	cache map[[32]byte]cached
}

type cached struct {
	id  Identity
	err error
	at  time.Time
}

// maxCached bounds the cache.
const maxCached = 4096

// The default rate of reviews of new tokens: a run's steps bring a few
// tokens an hour each.
const (
	DefaultReviewLimit = rate.Limit(50)
	DefaultReviewBurst = 200
)

func (t *TokenReviewer) Authenticate(ctx context.Context, token string) (Identity, error) {
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	if t.now != nil {
		now = t.now()
	}
	ttl := t.TTL
	if ttl == 0 {
		ttl = 30 * time.Second
	}
	t.mu.Lock()
	if c, ok := t.cache[key]; ok && now.Sub(c.at) < ttl {
		t.mu.Unlock()
		return c.id, c.err
	}
	t.mu.Unlock()
	t.mu.Lock()
	if t.Limit == nil {
		t.Limit = rate.NewLimiter(DefaultReviewLimit, DefaultReviewBurst)
	}
	lim := t.Limit
	t.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := lim.Wait(wctx)
	cancel()
	if err != nil {
		return Identity{}, errors.New("too many new tokens to review; try again")
	}
	id, err := t.review(ctx, token)
	if err != nil && !isAnswer(err) {
		return id, err // an API server that did not answer is asked again
	}
	t.mu.Lock()
	if t.cache == nil {
		t.cache = map[[32]byte]cached{}
	}
	if len(t.cache) >= maxCached {
		// The expired go first; a cache still full of live answers (a
		// flood of made-up tokens) loses its refusals, then half the rest.
		for k, c := range t.cache {
			if now.Sub(c.at) >= ttl || c.err != nil {
				delete(t.cache, k)
			}
		}
		for k := range t.cache {
			if len(t.cache) < maxCached/2 {
				break
			}
			delete(t.cache, k)
		}
	}
	t.cache[key] = cached{id: id, err: err, at: now}
	t.mu.Unlock()
	return id, err
}

// refusal is a token the API server refused: kept like an answer.
type refusal struct{ msg string }

func (r refusal) Error() string { return r.msg }

func isAnswer(err error) bool {
	var r refusal
	return errors.As(err, &r)
}

func (t *TokenReviewer) review(ctx context.Context, token string) (Identity, error) {
	aud, err := stateAudience(token)
	if err != nil {
		return Identity{}, refusal{err.Error()}
	}
	tr, err := t.Client.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{aud}}}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("TokenReview: %w", err)
	}
	st := tr.Status
	if !st.Authenticated {
		return Identity{}, refusal{"the token is not valid for the state API (" + st.Error + ")"}
	}
	if !contains(st.Audiences, aud) {
		return Identity{}, refusal{"the token is not meant for the state API"}
	}
	ns, sa, ok := serviceAccount(st.User.Username)
	if !ok {
		return Identity{}, refusal{"the token is not a service account's: " + st.User.Username}
	}
	pod := st.User.Extra["authentication.kubernetes.io/pod-name"]
	if len(pod) != 1 || pod[0] == "" {
		return Identity{}, refusal{"the token is bound to no pod (the state API takes a step's projected token)"}
	}
	return Identity{Namespace: ns, Account: sa, Pod: pod[0], Audience: aud}, nil
}

// stateAudience reads, without verifying it (the API server does), the
// state audience a token claims.
func stateAudience(token string) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", errors.New("the token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", errors.New("the token's payload is not base64url")
	}
	var claims struct {
		Aud json.RawMessage `json:"aud"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", errors.New("the token's payload is not JSON")
	}
	var auds []string
	var one string
	if json.Unmarshal(claims.Aud, &one) == nil {
		auds = []string{one}
	} else if err := json.Unmarshal(claims.Aud, &auds); err != nil {
		return "", errors.New("the token has no audience")
	}
	for _, a := range auds {
		if strings.HasPrefix(a, names.StateAudiencePrefix) {
			return a, nil
		}
	}
	return "", errors.New("the token's audience is not the state API's (" + names.StateAudiencePrefix + "…)")
}

func serviceAccount(user string) (ns, name string, ok bool) {
	rest, found := strings.CutPrefix(user, "system:serviceaccount:")
	if !found {
		return "", "", false
	}
	ns, name, ok = strings.Cut(rest, ":")
	return ns, name, ok && ns != "" && name != ""
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// Grants computes grants from the TerraformRuns the tokens name.
type Grants struct {
	Runs client.Reader
	// IsRunner says whether an account is one of the install's runner
	// accounts (engine.Config.IsRunnerAccount).
	IsRunner func(account string) bool
	// Dependencies are the outputs Secrets ("namespace/name") in other
	// namespaces that a child of the run reads: those the manager would
	// resolve now, with the install's and the dependency's consent.
	Dependencies func(ctx context.Context, run *infrav1.TerraformRun, child string) []string
}

// Grant checks the identity against its audience and the run it names.
func (s *Grants) Grant(ctx context.Context, id Identity) (Grant, error) {
	aud, ok := names.ParseStateAudience(id.Audience)
	if !ok {
		return Grant{}, forbid("the token's audience is not a state audience")
	}
	if aud.Namespace != id.Namespace {
		return Grant{}, forbid("the token of %s/%s names namespace %s", id.Namespace, id.Account, aud.Namespace)
	}
	if !s.IsRunner(id.Account) {
		return Grant{}, forbid("service account %s is not one of the install's runner service accounts", id.Account)
	}
	if !strings.HasPrefix(id.Pod, aud.Child+"-") {
		return Grant{}, forbid("pod %s is not a pod of %s", id.Pod, aud.Child)
	}
	run := &infrav1.TerraformRun{}
	if err := s.Runs.Get(ctx, types.NamespacedName{Namespace: aud.Namespace, Name: aud.Run}, run); err != nil {
		if apierrors.IsNotFound(err) {
			return Grant{}, forbid("TerraformRun %s/%s is gone", aud.Namespace, aud.Run)
		}
		return Grant{}, err
	}
	if string(run.UID) != aud.UID {
		return Grant{}, forbid("TerraformRun %s/%s is not the one this token was made for (uid %s)", aud.Namespace, aud.Run, aud.UID)
	}
	var deps []string
	if s.Dependencies != nil {
		deps = s.Dependencies(ctx, run, aud.Child)
	}
	g, err := GrantFor(run, aud.Child, Role(aud.Role), deps)
	if err != nil {
		return Grant{}, forbid("%s", err.Error())
	}
	return g, nil
}
