package receiver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/engine"
)

// PathIndex indexes TerraformRunReceivers by status.webhookPath.
const PathIndex = "status.webhookPath"

// TokenKey is the key of a receiver's Secret that holds its token.
const TokenKey = "token"

// MinTokenLength is the shortest token taken: a token is also part of the
// path, which must not be guessable.
const MinTokenLength = 16

// MaxBody is the largest payload read (GitHub caps its own at 25 MB, but a
// push's payload lists at most 20 commits).
const MaxBody = 4 << 20

// Path is a receiver's webhook path: /hook/ and the SHA-256 of its token,
// name and namespace, as Flux's notification-controller makes it.
func Path(token []byte, name, namespace string) string {
	h := sha256.New()
	h.Write(token)
	h.Write([]byte(name))
	h.Write([]byte(namespace))
	return "/hook/" + hex.EncodeToString(h.Sum(nil))
}

var requests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "opr8r_receiver_requests_total",
	Help: "Webhook requests by result: accepted, ignored, duplicate (a delivery taken before), stale (older than a push taken), refused (bad or unsigned), limited, unknown (no receiver at the path), error.",
}, []string{"result"})

func init() { metrics.Registry.MustRegister(requests) }

// Server is the manager's webhook server. It runs on every replica (it
// needs no leadership: it only records each verified push in its
// receiver's status, and the receiver's reconciler, on the leader, wakes
// the TerraformRuns).
type Server struct {
	// Addr is the address it listens on.
	Addr string
	// Cache holds the receivers (indexed by PathIndex).
	Cache client.Reader
	// API reads Secrets, receivers (after a conflict) and TerraformRuns
	// from the API server (a shard's cache holds only its own runs, and no
	// tenant's Secret).
	API client.Reader
	// Writer makes, moves and deletes previews.
	Writer client.Writer
	// Status records the pushes taken in the receivers' status.
	Status client.SubResourceWriter
	// Recorder emits Events on the receivers.
	Recorder events.EventRecorder
	// HTTP reaches the forges' APIs for previews (nil: egress.Client).
	HTTP *http.Client
	// Seals seals the previews the server makes or moves, under the
	// manager's key; the preview reporter reports no other.
	Seals engine.Seals
	// Rate and Burst limit each receiver's verified requests; requests
	// that fail verification have a budget of their own of the same size.
	Rate  rate.Limit
	Burst int
	// DeliveryTTL is how long a receiver's status keeps a delivery taken
	// (0: DefaultDeliveryTTL).
	DeliveryTTL time.Duration
	// TokenTTL is how long a token read is used (0: DefaultTokenTTL).
	TokenTTL time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu       sync.Mutex
	limiters map[string]*rate.Limiter
	unknown  *rate.Limiter
	bound    string
	tokens   *tokenCache
}

// Address is the address the server listens on, once it does ("" before).
func (s *Server) Address() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bound
}

// NeedLeaderElection is false: every replica serves webhooks.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	l, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("webhook receiver: %w", err)
	}
	s.mu.Lock()
	s.bound = l.Addr().String()
	s.mu.Unlock()
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	ctrl.Log.WithName("receiver").Info("serving webhooks", "address", l.Addr().String())
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// unverifiedPrefix keys the limiter of a path's requests that failed
// verification.
const unverifiedPrefix = "unverified:"

func (s *Server) limiter(key string) *rate.Limiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limiters == nil {
		s.limiters = map[string]*rate.Limiter{}
	}
	r, b := s.Rate, s.Burst
	if r == 0 {
		r, b = rate.Every(time.Second), 10
	}
	if key == "" {
		if s.unknown == nil {
			s.unknown = rate.NewLimiter(r*5, b*5)
		}
		return s.unknown
	}
	l, ok := s.limiters[key]
	if !ok {
		l = rate.NewLimiter(r, b)
		s.limiters[key] = l
	}
	return l
}

func (s *Server) tokenCache() *tokenCache {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tokens == nil {
		ttl := s.TokenTTL
		if ttl == 0 {
			ttl = DefaultTokenTTL
		}
		s.tokens = &tokenCache{API: s.API, TTL: ttl, Refresh: DefaultTokenRefresh, Now: s.Now}
	}
	return s.tokens
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// answer is the JSON body of every answer.
type answer struct {
	Result string   `json:"result"`
	Reason string   `json:"reason,omitempty"`
	Event  string   `json:"event,omitempty"`
	Ref    string   `json:"ref,omitempty"`
	Commit string   `json:"commit,omitempty"`
	Runs   []string `json:"runs,omitempty"`
}

func reply(w http.ResponseWriter, code int, a answer) {
	requests.WithLabelValues(a.Result).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(a)
}

// ServeHTTP takes one webhook. A refusal names its reason to the caller
// only as much as a forge's delivery log needs; the log and the receiver's
// Event say the rest. The signature is checked before the receiver's rate
// limit counts the request: requests that fail verification have a budget
// of their own, and cannot use up the forge's.
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	log := ctrl.Log.WithName("receiver").WithValues("path", req.URL.Path, "remote", req.RemoteAddr)
	if req.Method != http.MethodPost {
		reply(w, http.StatusMethodNotAllowed, answer{Result: "refused", Reason: "POST only"})
		return
	}
	rcv, ok := s.receiverAt(w, req, log)
	if !ok {
		return
	}
	log = log.WithValues("receiver", client.ObjectKeyFromObject(rcv).String())
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxBody))
	if err != nil {
		s.refuseUnverified(w, log, rcv, req.URL.Path, http.StatusRequestEntityTooLarge, fmt.Sprintf("body unreadable or over %d bytes: %v", MaxBody, err))
		return
	}
	ev, code, err := s.verify(req.Context(), rcv, req.Header, body)
	if err != nil {
		s.refuseUnverified(w, log, rcv, req.URL.Path, code, err.Error())
		return
	}
	if !s.limiter(req.URL.Path).Allow() {
		log.Info("refused a webhook: rate limit")
		reply(w, http.StatusTooManyRequests, answer{Result: "limited", Reason: "too many requests for this receiver; retry later"})
		return
	}
	s.take(w, req.Context(), log, rcv, ev, body)
}

// receiverAt finds the receiver at the request's path, or answers 404
// (limited, as a scan of paths).
func (s *Server) receiverAt(w http.ResponseWriter, req *http.Request, log logr.Logger) (*infrav1.TerraformRunReceiver, bool) {
	var list infrav1.TerraformRunReceiverList
	if strings.HasPrefix(req.URL.Path, "/hook/") {
		if err := s.Cache.List(req.Context(), &list, client.MatchingFields{PathIndex: req.URL.Path}); err != nil {
			log.Error(err, "listing receivers")
			reply(w, http.StatusInternalServerError, answer{Result: "error", Reason: "listing receivers"})
			return nil, false
		}
	}
	if len(list.Items) != 1 {
		if !s.limiter("").Allow() {
			reply(w, http.StatusTooManyRequests, answer{Result: "limited", Reason: "too many requests"})
			return nil, false
		}
		log.Info("refused a webhook: no receiver at this path")
		reply(w, http.StatusNotFound, answer{Result: "unknown", Reason: "no receiver at this path"})
		return nil, false
	}
	return &list.Items[0], true
}

// refuseUnverified answers a request that failed verification, within the
// budget of such requests at the path (429 beyond it, without an Event).
func (s *Server) refuseUnverified(w http.ResponseWriter, log logr.Logger, rcv *infrav1.TerraformRunReceiver, path string, code int, reason string) {
	if !s.limiter(unverifiedPrefix + path).Allow() {
		log.V(1).Info("refused a webhook: rate limit of unverified requests")
		reply(w, http.StatusTooManyRequests, answer{Result: "limited", Reason: "too many unverified requests"})
		return
	}
	s.refuse(w, log, rcv, code, reason)
}

// take acts on a verified event: a pull request's previews, or a push
// recorded in the receiver's status for its reconciler to fan out.
func (s *Server) take(w http.ResponseWriter, ctx context.Context, log logr.Logger, rcv *infrav1.TerraformRunReceiver, ev Event, body []byte) {
	if ev.Kind == PullRequest && slices.Contains(actsOn(rcv), infrav1.ReceiverPullRequest) && rcv.Spec.Previews != nil && ev.PR.Action != "" {
		s.takePR(w, ctx, log, rcv, ev, body)
		return
	}
	if ev.Kind == Other || ev.Kind == PullRequest || !slices.Contains(actsOn(rcv), infrav1.ReceiverEvent(ev.Kind)) {
		log.V(1).Info("ignored a webhook", "event", ev.Name)
		reply(w, http.StatusAccepted, answer{Result: "ignored", Reason: "this receiver does not act on this event", Event: ev.Name})
		return
	}
	if ev.Commit == "" {
		reply(w, http.StatusAccepted, answer{Result: "ignored", Reason: "the ref was deleted", Event: ev.Name, Ref: ev.Ref})
		return
	}
	p, err := s.record(ctx, rcv, receivedPush(ev, body, s.now()))
	if s.answerRecordErr(w, log, ev, err) {
		return
	}
	if p.State == infrav1.PushStale {
		log.Info("took a stale webhook", "event", ev.Name, "ref", ev.Ref, "commit", ev.Commit, "delivery", ev.Delivery, "why", p.Message)
		reply(w, http.StatusAccepted, answer{Result: "stale", Reason: p.Message, Event: ev.Name, Ref: ev.Ref, Commit: ev.Commit})
		return
	}
	log.Info("took a webhook", "event", ev.Name, "ref", ev.Ref, "commit", ev.Commit, "delivery", ev.Delivery)
	reply(w, http.StatusAccepted, answer{Result: "accepted", Reason: "recorded; the tracking TerraformRuns are woken after this answer", Event: ev.Name, Ref: ev.Ref, Commit: ev.Commit})
}

// takePR makes, moves or deletes a pull request's previews within the
// request, and then records the delivery, so that a replay is a duplicate.
func (s *Server) takePR(w http.ResponseWriter, ctx context.Context, log logr.Logger, rcv *infrav1.TerraformRunReceiver, ev Event, body []byte) {
	p := receivedPush(ev, body, s.now())
	p.State = infrav1.PushDone
	if dup := duplicateOf(rcv.Status.Pushes, p); dup != nil {
		s.answerRecordErr(w, log, ev, dup)
		return
	}
	previews, err := s.previews(ctx, rcv, ev)
	if err != nil {
		log.Error(err, "previews")
		reply(w, http.StatusInternalServerError, answer{Result: "error", Reason: "previews failed; the forge may redeliver", Runs: previews})
		return
	}
	_, err = s.record(ctx, rcv, p)
	if s.answerRecordErr(w, log, ev, err) {
		return
	}
	msg := fmt.Sprintf("pull request #%d %s at %s: previews %s", ev.PR.Number, ev.PR.Action, short(ev.Commit), strings.Join(previews, ", "))
	log.Info("took a webhook", "event", ev.Name, "pullRequest", ev.PR.Number, "action", ev.PR.Action, "previews", previews)
	s.event(rcv, corev1.EventTypeNormal, "Received", msg)
	reply(w, http.StatusAccepted, answer{Result: "accepted", Event: ev.Name, Ref: ev.Ref, Commit: ev.Commit, Runs: previews})
}

// answerRecordErr answers a delivery that could not be recorded, and says
// whether it did.
func (s *Server) answerRecordErr(w http.ResponseWriter, log logr.Logger, ev Event, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrDuplicate):
		log.Info("ignored a duplicate webhook", "event", ev.Name, "delivery", ev.Delivery, "reason", err.Error())
		reply(w, http.StatusOK, answer{Result: "duplicate", Reason: err.Error(), Event: ev.Name, Ref: ev.Ref, Commit: ev.Commit})
	case errors.Is(err, ErrBacklog):
		log.Info("refused a webhook: backlog", "event", ev.Name, "delivery", ev.Delivery)
		reply(w, http.StatusServiceUnavailable, answer{Result: "error", Reason: err.Error() + "; the forge may redeliver"})
	default:
		log.Error(err, "recording a webhook", "event", ev.Name, "delivery", ev.Delivery)
		reply(w, http.StatusInternalServerError, answer{Result: "error", Reason: "recording the push failed; the forge may redeliver"})
	}
	return true
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func actsOn(r *infrav1.TerraformRunReceiver) []infrav1.ReceiverEvent {
	if len(r.Spec.Events) == 0 {
		return []infrav1.ReceiverEvent{infrav1.ReceiverPush}
	}
	return r.Spec.Events
}

// verify checks the request against the receiver's current token and reads
// it; the code is the answer's for an error. The token is cached briefly; a
// request that fails verification reads it again (a rotated token), at most
// once every DefaultTokenRefresh.
func (s *Server) verify(ctx context.Context, rcv *infrav1.TerraformRunReceiver, h http.Header, body []byte) (Event, int, error) {
	forge, err := ForgeOf(rcv.Spec.Type)
	if err != nil {
		return Event{}, http.StatusInternalServerError, err
	}
	tokens := s.tokenCache()
	token, err := tokens.get(ctx, rcv, false)
	if err != nil {
		if token, err = tokens.get(ctx, rcv, true); err != nil {
			return Event{}, http.StatusServiceUnavailable, err
		}
	}
	if err := forge.Verify(h, body, token); err != nil {
		if fresh, ferr := tokens.get(ctx, rcv, true); ferr == nil && !bytes.Equal(fresh, token) {
			err = forge.Verify(h, body, fresh)
		}
		if errors.Is(err, ErrUnsigned) {
			return Event{}, http.StatusUnauthorized, fmt.Errorf("unsigned request: no %s signature or token header", rcv.Spec.Type)
		}
		if err != nil {
			return Event{}, http.StatusUnauthorized, err
		}
	}
	ev, err := forge.Parse(h, body)
	if err != nil {
		return Event{}, http.StatusBadRequest, fmt.Errorf("signed, but unreadable: %w", err)
	}
	return ev, 0, nil
}

func (s *Server) refuse(w http.ResponseWriter, log logr.Logger, rcv *infrav1.TerraformRunReceiver, code int, reason string) {
	log.Info("refused a webhook", "reason", reason)
	s.event(rcv, corev1.EventTypeWarning, "Refused", "refused a webhook: "+reason)
	reply(w, code, answer{Result: "refused", Reason: reason})
}

func (s *Server) event(rcv *infrav1.TerraformRunReceiver, typ, reason, msg string) {
	if s.Recorder != nil {
		s.Recorder.Eventf(rcv, nil, typ, reason, "Webhook", "%s", msg)
	}
}

// Tracks says whether a TerraformRun's source is the event's repository
// and ref.
func Tracks(run *infrav1.TerraformRun, ev Event) bool {
	g := run.Spec.Source.Git
	if g == nil {
		return false
	}
	ref := g.Ref
	if ref == "" {
		ref = "main"
	}
	if ref != ev.Ref {
		return false
	}
	key := RepoKey(g.URL)
	for _, r := range ev.Repos {
		if RepoKey(r) == key {
			return true
		}
	}
	return false
}

// RepoKey is a repository URL reduced to what names the repository: the
// host without port or user, and the path without .git, in lower case, so
// that its https, ssh and scp-like (git@host:path) forms are the same.
func RepoKey(raw string) string {
	s := strings.TrimSpace(raw)
	var host, path string
	if !strings.Contains(s, "://") {
		// user@host:path
		at := strings.LastIndex(s[:max(strings.Index(s, ":"), 0)], "@")
		rest := s[at+1:]
		host, path, _ = strings.Cut(rest, ":")
	} else if u, err := url.Parse(s); err == nil {
		host, path = u.Hostname(), u.Path
	} else {
		return strings.ToLower(s)
	}
	path = strings.Trim(path, "/")
	path = strings.TrimSuffix(path, ".git")
	return strings.ToLower(host + "/" + path)
}
