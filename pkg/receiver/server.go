package receiver

import (
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

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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
	Help: "Webhook requests by result: accepted, ignored, refused (bad or unsigned), limited, unknown (no receiver at the path), error.",
}, []string{"result"})

func init() { metrics.Registry.MustRegister(requests) }

// Server is the manager's webhook server. It runs on every replica (it
// needs no leadership: it only marks TerraformRuns, which the leader
// reconciles).
type Server struct {
	// Addr is the address it listens on.
	Addr string
	// Cache holds the receivers (indexed by PathIndex).
	Cache client.Reader
	// API reads Secrets and lists TerraformRuns from the API server (a
	// shard's cache holds only its own runs, and no tenant's Secret).
	API client.Reader
	// Writer marks the TerraformRuns.
	Writer client.Writer
	// Recorder emits Events on the receivers.
	Recorder events.EventRecorder
	// HTTP reaches the forges' APIs for previews (nil: egress.Client).
	HTTP *http.Client
	// Seals seals the previews the server makes or moves, under the
	// manager's key; the preview reporter reports no other.
	Seals engine.Seals
	// Rate and Burst limit each receiver's requests.
	Rate  rate.Limit
	Burst int

	mu       sync.Mutex
	limiters map[string]*rate.Limiter
	unknown  *rate.Limiter
	bound    string
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

func (s *Server) limiter(path string) *rate.Limiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limiters == nil {
		s.limiters = map[string]*rate.Limiter{}
	}
	r, b := s.Rate, s.Burst
	if r == 0 {
		r, b = rate.Every(time.Second), 10
	}
	if path == "" {
		if s.unknown == nil {
			s.unknown = rate.NewLimiter(r*5, b*5)
		}
		return s.unknown
	}
	l, ok := s.limiters[path]
	if !ok {
		l = rate.NewLimiter(r, b)
		s.limiters[path] = l
	}
	return l
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
// Event say the rest.
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	log := ctrl.Log.WithName("receiver").WithValues("path", req.URL.Path, "remote", req.RemoteAddr)
	if req.Method != http.MethodPost {
		reply(w, http.StatusMethodNotAllowed, answer{Result: "refused", Reason: "POST only"})
		return
	}
	if !strings.HasPrefix(req.URL.Path, "/hook/") {
		reply(w, http.StatusNotFound, answer{Result: "unknown", Reason: "no receiver at this path"})
		return
	}
	var list infrav1.TerraformRunReceiverList
	if err := s.Cache.List(req.Context(), &list, client.MatchingFields{PathIndex: req.URL.Path}); err != nil {
		log.Error(err, "listing receivers")
		reply(w, http.StatusInternalServerError, answer{Result: "error", Reason: "listing receivers"})
		return
	}
	if len(list.Items) != 1 {
		if !s.limiter("").Allow() {
			reply(w, http.StatusTooManyRequests, answer{Result: "limited", Reason: "too many requests"})
			return
		}
		log.Info("refused a webhook: no receiver at this path")
		reply(w, http.StatusNotFound, answer{Result: "unknown", Reason: "no receiver at this path"})
		return
	}
	rcv := &list.Items[0]
	log = log.WithValues("receiver", client.ObjectKeyFromObject(rcv).String())
	if !s.limiter(req.URL.Path).Allow() {
		log.Info("refused a webhook: rate limit")
		reply(w, http.StatusTooManyRequests, answer{Result: "limited", Reason: "too many requests for this receiver; retry later"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxBody))
	if err != nil {
		s.refuse(w, log, rcv, http.StatusRequestEntityTooLarge, fmt.Sprintf("body unreadable or over %d bytes: %v", MaxBody, err))
		return
	}
	ev, code, err := s.verify(req.Context(), rcv, req.Header, body)
	if err != nil {
		s.refuse(w, log, rcv, code, err.Error())
		return
	}
	if ev.Kind == PullRequest && slices.Contains(actsOn(rcv), infrav1.ReceiverPullRequest) && rcv.Spec.Previews != nil && ev.PR.Action != "" {
		previews, err := s.previews(req.Context(), rcv, ev)
		if err != nil {
			log.Error(err, "previews")
			reply(w, http.StatusInternalServerError, answer{Result: "error", Reason: "previews failed; the forge may redeliver", Runs: previews})
			return
		}
		msg := fmt.Sprintf("pull request #%d %s at %s: previews %s", ev.PR.Number, ev.PR.Action, short(ev.Commit), strings.Join(previews, ", "))
		log.Info("took a webhook", "event", ev.Name, "pullRequest", ev.PR.Number, "action", ev.PR.Action, "previews", previews)
		s.event(rcv, corev1.EventTypeNormal, "Received", msg)
		reply(w, http.StatusAccepted, answer{Result: "accepted", Event: ev.Name, Ref: ev.Ref, Commit: ev.Commit, Runs: previews})
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
	runs, err := s.mark(req.Context(), rcv, ev)
	if err != nil {
		log.Error(err, "marking TerraformRuns")
		reply(w, http.StatusInternalServerError, answer{Result: "error", Reason: "marking TerraformRuns failed; the forge may redeliver", Runs: runs})
		return
	}
	msg := fmt.Sprintf("%s %s moved to %s: %s", ev.Kind, ev.Ref, short(ev.Commit), wokeWhom(runs))
	log.Info("took a webhook", "event", ev.Name, "ref", ev.Ref, "commit", ev.Commit, "runs", runs)
	s.event(rcv, corev1.EventTypeNormal, "Received", msg)
	reply(w, http.StatusAccepted, answer{Result: "accepted", Event: ev.Name, Ref: ev.Ref, Commit: ev.Commit, Runs: runs})
}

func wokeWhom(runs []string) string {
	if len(runs) == 0 {
		return "no TerraformRun of this namespace tracks it"
	}
	return "woke TerraformRuns " + strings.Join(runs, ", ")
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
// it; the code is the answer's for an error.
func (s *Server) verify(ctx context.Context, rcv *infrav1.TerraformRunReceiver, h http.Header, body []byte) (Event, int, error) {
	forge, err := ForgeOf(rcv.Spec.Type)
	if err != nil {
		return Event{}, http.StatusInternalServerError, err
	}
	token, err := Token(ctx, s.API, rcv)
	if err != nil {
		return Event{}, http.StatusServiceUnavailable, err
	}
	if Path(token, rcv.Name, rcv.Namespace) != rcv.Status.WebhookPath {
		return Event{}, http.StatusNotFound, errors.New("the receiver's token changed since this path was made; use the path in its status")
	}
	if err := forge.Verify(h, body, token); err != nil {
		if errors.Is(err, ErrUnsigned) {
			return Event{}, http.StatusUnauthorized, fmt.Errorf("unsigned request: no %s signature or token header", rcv.Spec.Type)
		}
		return Event{}, http.StatusUnauthorized, err
	}
	ev, err := forge.Parse(h, body)
	if err != nil {
		return Event{}, http.StatusBadRequest, fmt.Errorf("signed, but unreadable: %w", err)
	}
	return ev, 0, nil
}

func (s *Server) refuse(w http.ResponseWriter, log interface {
	Info(string, ...any)
}, rcv *infrav1.TerraformRunReceiver, code int, reason string) {
	log.Info("refused a webhook", "reason", reason)
	s.event(rcv, corev1.EventTypeWarning, "Refused", "refused a webhook: "+reason)
	reply(w, code, answer{Result: "refused", Reason: reason})
}

func (s *Server) event(rcv *infrav1.TerraformRunReceiver, typ, reason, msg string) {
	if s.Recorder != nil {
		s.Recorder.Eventf(rcv, nil, typ, reason, "Webhook", "%s", msg)
	}
}

// Token reads a receiver's token from its Secret.
func Token(ctx context.Context, c client.Reader, rcv *infrav1.TerraformRunReceiver) ([]byte, error) {
	var sec corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: rcv.Namespace, Name: rcv.Spec.SecretRef.Name}, &sec); err != nil {
		return nil, fmt.Errorf("spec.secretRef: reading Secret %s: %w", rcv.Spec.SecretRef.Name, err)
	}
	tok := sec.Data[TokenKey]
	if len(tok) < MinTokenLength {
		return nil, fmt.Errorf("spec.secretRef: Secret %s has no key %q of at least %d characters; set one, for example with: kubectl create secret generic %s --from-literal=token=$(head -c 24 /dev/urandom | base64)", sec.Name, TokenKey, MinTokenLength, sec.Name)
	}
	return tok, nil
}

// mark sets the push annotation on each TerraformRun of the receiver's
// namespace that the receiver may wake and that tracks the pushed
// repository and ref. It lists from the API server, a page at a time.
func (s *Server) mark(ctx context.Context, rcv *infrav1.TerraformRunReceiver, ev Event) ([]string, error) {
	runs, err := s.tracking(ctx, rcv, ev)
	if err != nil {
		return nil, err
	}
	var woke []string
	for _, run := range runs {
		if run.Annotations[infrav1.SourcePushAnnotation] != ev.Commit {
			patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, infrav1.SourcePushAnnotation, ev.Commit)
			if err := s.Writer.Patch(ctx, run, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
				return woke, fmt.Errorf("marking %s: %w", run.Name, err)
			}
		}
		woke = append(woke, run.Name)
	}
	return woke, nil
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
