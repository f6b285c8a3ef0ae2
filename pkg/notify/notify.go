// Package notify sends what happens to TerraformRuns to the destinations of
// their namespace's TerraformRunNotifiers: a signed JSON webhook, a
// CloudEvent over HTTP, or a Slack-compatible incoming webhook. The
// reconciler hands it a Notice and goes on; deliveries run in the
// background, are retried with backoff, and a destination that keeps
// failing shows in its notifier's Ready condition and an Event, never in a
// run.
package notify

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/egress"
	"github.com/opr8r/opr8r/pkg/receiver"
	"github.com/opr8r/opr8r/pkg/results"
)

// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformrunnotifiers,verbs=get;list;watch
// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformrunnotifiers/status,verbs=get;update;patch

// Keys of a notifier's Secret.
const (
	AddressKey = "address"
	TokenKey   = "token"
)

// SignatureHeader carries the HMAC-SHA256 of the body under the Secret's
// token: sha256=<hex>, as GitHub signs.
const SignatureHeader = "X-Opr8r-Signature"

// EventSource is the CloudEvents source of every event.
const EventSource = "opr8r.io/terraformruns"

// Notice is one happening of one TerraformRun: the body every destination
// gets (Slack's as text). It carries names, counts and opr8r's own
// messages, never a variable's or an output's value.
type Notice struct {
	Event     infrav1.NotifyEvent `json:"event"`
	Namespace string              `json:"namespace"`
	Name      string              `json:"name"`
	UID       string              `json:"uid"`
	// RunID is the run (its child's name); for DriftDetected, the
	// TerraformRun's latest run.
	RunID   string            `json:"runID,omitempty"`
	Type    string            `json:"type,omitempty"`
	Trigger string            `json:"trigger,omitempty"`
	Commit  string            `json:"commit,omitempty"`
	Plan    *Plan             `json:"plan,omitempty"`
	Message string            `json:"message"`
	Hint    string            `json:"hint,omitempty"`
	Time    time.Time         `json:"time"`
	Labels  map[string]string `json:"-"`
}

// Plan is a plan's counts and digest.
type Plan struct {
	Add     int32 `json:"add"`
	Change  int32 `json:"change"`
	Destroy int32 `json:"destroy"`
	// Import, Forget, Move and Actions count what else the plan does to
	// what is managed: imports, removals from the state, moves, action
	// invocations.
	Import  int32  `json:"import,omitempty"`
	Forget  int32  `json:"forget,omitempty"`
	Move    int32  `json:"move,omitempty"`
	Actions int32  `json:"actions,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

// NoticeOf makes the notice of a run's happening now.
func NoticeOf(run *infrav1.TerraformRun, ev infrav1.NotifyEvent, msg string, now time.Time) Notice {
	n := Notice{Event: ev, Namespace: run.Namespace, Name: run.Name, UID: string(run.UID), Message: msg, Time: now.UTC(), Labels: run.Labels}
	if cur := run.Status.Run; cur != nil {
		n.RunID, n.Type, n.Trigger, n.Commit = cur.ID, string(cur.Type), string(cur.Trigger), cur.Commit
	}
	if p := run.Status.Plan; p != nil && ev != infrav1.NotifyDriftDetected {
		n.Plan = &Plan{Add: p.Add, Change: p.Change, Destroy: p.Destroy, Import: p.Import, Forget: p.Forget, Move: p.Move, Actions: p.Actions, Digest: p.Digest}
	}
	switch ev {
	case infrav1.NotifyApprovalRequired:
		n.Hint = fmt.Sprintf("kubectl tfrun plan %s -n %s; kubectl tfrun approve %s -n %s", run.Name, run.Namespace, run.Name, run.Namespace)
	case infrav1.NotifyFailed:
		n.Hint = fmt.Sprintf("kubectl tfrun logs %s -n %s", run.Name, run.Namespace)
	case infrav1.NotifyDriftDetected:
		n.Hint = fmt.Sprintf("kubectl tfrun rerun %s -n %s", run.Name, run.Namespace)
	}
	return n
}

var (
	deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opr8r_notifications_total",
		Help: "Notification deliveries by notifier type and result (delivered, failed after retries, dropped: its namespace's queue was full).",
	}, []string{"type", "result"})
	dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opr8r_notifications_dropped_total",
		Help: "Notices dropped because their namespace's queue was full (its destinations slow or dead), by namespace.",
	}, []string{"namespace"})
)

func init() { metrics.Registry.MustRegister(deliveries, dropped) }

// Defaults of the Dispatcher's bounds.
const (
	DefaultParallel     = 32
	DefaultPerNamespace = 2
	DefaultQueueSize    = 256
)

// DroppedCondition is True on a notifier while notices of its namespace
// were dropped because the namespace's queue was full (reason QueueFull):
// its destinations, or its neighbours', are slow or do not answer.
const DroppedCondition = "NotificationsDropped"

// Dispatcher delivers notices, fairly between namespaces: each namespace
// has its own bounded queue and at most PerNamespace deliveries under way,
// and the namespaces with work are served in turn, so that a namespace
// whose destinations are slow or dead delays and drops only its own
// notices. Notify never blocks.
type Dispatcher struct {
	// Cache lists the notifiers.
	Cache client.Reader
	// API reads their Secrets.
	API client.Reader
	// Client writes their status.
	Client client.Client
	// Recorder emits Events on notifiers and runs when a delivery fails.
	Recorder events.EventRecorder
	// HTTP sends; nil: egress.Client, the guard with its defaults.
	HTTP *http.Client
	// Backoff are the waits between attempts (nil: 1, 2, 4, 8 s: five
	// attempts).
	Backoff []time.Duration
	// Parallel bounds the deliveries under way in all (0:
	// DefaultParallel).
	Parallel int
	// PerNamespace bounds one namespace's deliveries under way (0:
	// DefaultPerNamespace).
	PerNamespace int
	// QueueSize bounds one namespace's notices waiting; more are dropped
	// (0: DefaultQueueSize).
	QueueSize int

	once   sync.Once
	wake   chan struct{}
	mu     sync.Mutex
	lanes  map[string]*lane
	order  []string
	cursor int
	active int
	seen   map[string]time.Time
}

// lane is one namespace's share: its waiting notices, the deliveries of
// the notice it is on, and its drops not yet shown.
type lane struct {
	notices   []Notice
	ready     []job
	active    int
	dropped   int
	reporting bool
}

// job is one delivery: a notice to a notifier.
type job struct {
	nf *infrav1.TerraformRunNotifier
	n  Notice
}

func (d *Dispatcher) init() {
	d.once.Do(func() {
		d.Parallel = cmp.Or(d.Parallel, DefaultParallel)
		d.PerNamespace = cmp.Or(d.PerNamespace, DefaultPerNamespace)
		d.QueueSize = cmp.Or(d.QueueSize, DefaultQueueSize)
		d.wake = make(chan struct{}, 1)
		d.lanes = map[string]*lane{}
		d.seen = map[string]time.Time{}
		if d.HTTP == nil {
			d.HTTP = egress.Client(false)
		}
		if d.Backoff == nil {
			d.Backoff = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
		}
	})
}

// Notify queues a notice for the notifiers of the run's namespace, or
// drops it when that namespace's queue is full. The same happening of the
// same run (a pass repeated after a conflict, or a failure that two
// conditions report) is sent once.
func (d *Dispatcher) Notify(run *infrav1.TerraformRun, ev infrav1.NotifyEvent, msg string) {
	d.init()
	n := NoticeOf(run, ev, msg, time.Now())
	if d.repeated(n, msg) {
		return
	}
	d.mu.Lock()
	l := d.laneOf(n.Namespace)
	full := len(l.notices) >= d.QueueSize
	if full {
		l.dropped++
	} else {
		l.notices = append(l.notices, n)
	}
	d.mu.Unlock()
	if full {
		deliveries.WithLabelValues("", "dropped").Inc()
		dropped.WithLabelValues(n.Namespace).Inc()
		ctrl.Log.WithName("notify").Info("notification dropped: the namespace's queue is full", "run", n.Namespace+"/"+n.Name, "event", ev, "queue", d.QueueSize)
	}
	d.poke()
}

// repeated says whether a notice was already queued, and remembers it.
func (d *Dispatcher) repeated(n Notice, msg string) bool {
	// A run's failure shows in two conditions (the step's and Stalled),
	// each with its Event: one notice per run and happening. Drift is
	// found by checks, which are not runs: their messages name them.
	key := strings.Join([]string{n.UID, string(n.Event), n.RunID}, "\x00")
	if n.Event == infrav1.NotifyDriftDetected {
		key += "\x00" + msg
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, dup := d.seen[key]; dup {
		return true
	}
	if len(d.seen) > 10000 {
		for k, t := range d.seen {
			if time.Since(t) > time.Hour {
				delete(d.seen, k)
			}
		}
	}
	d.seen[key] = time.Now()
	return false
}

// laneOf is a namespace's lane, made on first use; d.mu is held.
func (d *Dispatcher) laneOf(ns string) *lane {
	l, ok := d.lanes[ns]
	if !ok {
		l = &lane{}
		d.lanes[ns] = l
		d.order = append(d.order, ns)
	}
	return l
}

// poke wakes the dispatcher without blocking.
func (d *Dispatcher) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// NeedLeaderElection is true: notices come from the leader's reconciler.
func (d *Dispatcher) NeedLeaderElection() bool { return true }

// Start delivers queued notices until ctx ends.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.init()
	for {
		for {
			j, ok := d.next(ctx)
			if !ok {
				break
			}
			go d.run(ctx, j)
		}
		d.reportDrops(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-d.wake:
		}
	}
}

// next takes the next delivery to start, from the namespaces in turn,
// within the bounds; false when none may start now.
func (d *Dispatcher) next(ctx context.Context) (job, bool) {
	for ctx.Err() == nil {
		d.mu.Lock()
		ns, l := d.pick()
		if l == nil {
			d.mu.Unlock()
			return job{}, false
		}
		if len(l.ready) > 0 {
			j := l.ready[0]
			l.ready = l.ready[1:]
			l.active++
			d.active++
			d.mu.Unlock()
			return j, true
		}
		n := l.notices[0]
		l.notices = l.notices[1:]
		d.mu.Unlock()
		jobs := d.expand(ctx, n)
		d.mu.Lock()
		l = d.laneOf(ns)
		l.ready = append(l.ready, jobs...)
		d.mu.Unlock()
	}
	return job{}, false
}

// pick is the namespace after the cursor that has work and room, moving
// the cursor past it; d.mu is held.
func (d *Dispatcher) pick() (string, *lane) {
	if d.active >= d.Parallel {
		return "", nil
	}
	for i := range d.order {
		k := (d.cursor + i) % len(d.order)
		l := d.lanes[d.order[k]]
		if l.active < d.PerNamespace && (len(l.ready) > 0 || len(l.notices) > 0) {
			d.cursor = k + 1
			return d.order[k], l
		}
	}
	return "", nil
}

// expand is the deliveries of a notice: one to each notifier of its
// namespace that wants it.
func (d *Dispatcher) expand(ctx context.Context, n Notice) []job {
	var list infrav1.TerraformRunNotifierList
	if err := d.Cache.List(ctx, &list, client.InNamespace(n.Namespace)); err != nil {
		ctrl.Log.WithName("notify").Error(err, "listing notifiers", "namespace", n.Namespace)
		return nil
	}
	var jobs []job
	for i := range list.Items {
		if Wants(&list.Items[i], n) {
			jobs = append(jobs, job{nf: list.Items[i].DeepCopy(), n: n})
		}
	}
	return jobs
}

// run makes one delivery and gives its slots back.
func (d *Dispatcher) run(ctx context.Context, j job) {
	defer d.done(j.n.Namespace)
	d.deliver(ctx, j.nf, j.n)
}

// done gives a delivery's slots back, and forgets a namespace with nothing
// left.
func (d *Dispatcher) done(ns string) {
	d.mu.Lock()
	l := d.lanes[ns]
	l.active--
	d.active--
	d.forgetIdle(ns, l)
	d.mu.Unlock()
	d.poke()
}

// forgetIdle drops a namespace's lane when it holds nothing; d.mu is held.
func (d *Dispatcher) forgetIdle(ns string, l *lane) {
	if l.active > 0 || len(l.notices) > 0 || len(l.ready) > 0 || l.dropped > 0 || l.reporting {
		return
	}
	delete(d.lanes, ns)
	if i := slices.Index(d.order, ns); i >= 0 {
		d.order = slices.Delete(d.order, i, i+1)
		if d.cursor > i {
			d.cursor--
		}
	}
}

// reportDrops shows each namespace's new drops on its notifiers, one
// report under way per namespace.
func (d *Dispatcher) reportDrops(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for ns, l := range d.lanes {
		if l.dropped == 0 || l.reporting {
			continue
		}
		count := l.dropped
		l.dropped, l.reporting = 0, true
		go func() {
			d.recordDrops(ctx, ns, count)
			d.mu.Lock()
			l.reporting = false
			d.forgetIdle(ns, l)
			d.mu.Unlock()
		}()
	}
}

// recordDrops sets DroppedCondition on the notifiers of a namespace, with
// a Warning Event.
func (d *Dispatcher) recordDrops(ctx context.Context, ns string, count int) {
	var list infrav1.TerraformRunNotifierList
	if d.Client == nil || d.Cache.List(ctx, &list, client.InNamespace(ns)) != nil {
		return
	}
	msg := fmt.Sprintf("%d notices of this namespace dropped at %s: its queue of %d was full (its destinations are slow or do not answer)",
		count, time.Now().UTC().Format(time.RFC3339), d.QueueSize)
	for i := range list.Items {
		nf := &list.Items[i]
		if nf.Spec.Suspend || nf.DeletionTimestamp != nil {
			continue
		}
		cond := metav1.Condition{Type: DroppedCondition, Status: metav1.ConditionTrue, Reason: "QueueFull", ObservedGeneration: nf.Generation, Message: msg}
		d.patchStatus(ctx, nf, nil, cond)
		if d.Recorder != nil {
			d.Recorder.Eventf(nf, nil, corev1.EventTypeWarning, "NotificationsDropped", "Notify", "%s", msg)
		}
	}
}

// Wants says whether a notifier sends a notice.
func Wants(nf *infrav1.TerraformRunNotifier, n Notice) bool {
	if nf.Spec.Suspend || nf.DeletionTimestamp != nil || (len(nf.Spec.Events) > 0 && !slices.Contains(nf.Spec.Events, n.Event)) {
		return false
	}
	if nf.Spec.RunSelector == nil {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(nf.Spec.RunSelector)
	return err == nil && sel.Matches(labels.Set(n.Labels))
}

// deliver sends one notice to one notifier with retries, then records the
// outcome in the notifier's status. What it shows (status, Events, logs)
// is the destination's status code and a fixed reason, never anything
// else the destination sent, nor its URL.
func (d *Dispatcher) deliver(ctx context.Context, nf *infrav1.TerraformRunNotifier, n Notice) {
	log := ctrl.Log.WithName("notify").WithValues("notifier", nf.Namespace+"/"+nf.Name, "run", n.Name, "event", n.Event)
	var (
		attempts int32
		answer   string
	)
	addr, token, err := secretOf(ctx, d.API, nf)
	if err == nil {
		if attempts, answer, err = d.sendWithRetries(ctx, nf.Spec.Type, addr, token, n); ctx.Err() != nil {
			return
		}
	}
	del := infrav1.NotifierDelivery{Event: n.Event, Run: n.Name + "/" + n.RunID, At: metav1.Now(), Attempts: attempts, Succeeded: err == nil, Message: answer}
	cond := metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Delivered", ObservedGeneration: nf.Generation,
		Message: fmt.Sprintf("delivered %s of %s (attempt %d)", n.Event, n.Name, attempts)}
	if err != nil {
		del.Message = truncate(err.Error(), 256)
		cond.Status, cond.Reason = metav1.ConditionFalse, "DeliveryFailed"
		cond.Message = fmt.Sprintf("%s of %s not delivered after %d attempts: %s", n.Event, n.Name, attempts, truncate(err.Error(), 512))
		deliveries.WithLabelValues(string(nf.Spec.Type), "failed").Inc()
		log.Info("delivery failed", "attempts", attempts, "reason", err.Error())
		if d.Recorder != nil {
			d.Recorder.Eventf(nf, nil, corev1.EventTypeWarning, "DeliveryFailed", "Notify", "%s", cond.Message)
			run := &infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: n.Namespace, UID: types.UID(n.UID)}}
			run.SetGroupVersionKind(infrav1.GroupVersion.WithKind("TerraformRun"))
			d.Recorder.Eventf(run, nil, corev1.EventTypeWarning, "NotificationFailed", "Notify", "notifier %s: %s", nf.Name, cond.Message)
		}
	} else {
		deliveries.WithLabelValues(string(nf.Spec.Type), "delivered").Inc()
	}
	d.patchStatus(ctx, nf, &del, cond)
}

// patchStatus writes a condition, and a delivery's outcome when del is
// not nil, to the notifier's status.
func (d *Dispatcher) patchStatus(ctx context.Context, nf *infrav1.TerraformRunNotifier, del *infrav1.NotifierDelivery, cond metav1.Condition) {
	if d.Client == nil {
		return
	}
	var cur infrav1.TerraformRunNotifier
	if err := d.Client.Get(ctx, client.ObjectKeyFromObject(nf), &cur); err != nil {
		return
	}
	old := cur.DeepCopy()
	if del != nil {
		cur.Status.LastDelivery = del
	}
	cur.Status.ObservedGeneration = cur.Generation
	apimeta.SetStatusCondition(&cur.Status.Conditions, cond)
	if err := d.Client.Status().Patch(ctx, &cur, client.MergeFrom(old)); err != nil {
		ctrl.Log.WithName("notify").V(1).Info("recording a delivery", "error", err.Error())
	}
}

// sendWithRetries sends a notice, trying again after each wait of Backoff
// while the destination fails in a way a retry may mend (no answer, 429,
// 5xx). It returns the attempts made, the answer ("HTTP <code> <status
// text>") and the error, whose text is a fixed reason.
func (d *Dispatcher) sendWithRetries(ctx context.Context, typ infrav1.NotifierType, addr string, token []byte, n Notice) (int32, string, error) {
	for attempts := int32(1); ; attempts++ {
		answer, err := d.send(ctx, typ, addr, token, n)
		if err == nil || attempts > int32(len(d.Backoff)) || permanent(err) {
			return attempts, answer, err
		}
		ctrl.Log.WithName("notify").V(1).Info("delivery failed; retrying", "run", n.Namespace+"/"+n.Name, "event", n.Event, "attempt", attempts, "reason", err.Error())
		select {
		case <-time.After(d.Backoff[attempts-1]):
		case <-ctx.Done():
			return attempts, answer, ctx.Err()
		}
	}
}

// errPermanent marks a failure that a retry cannot mend.
type errPermanent struct{ error }

func permanent(err error) bool {
	var p errPermanent
	return errors.As(err, &p)
}

// secretOf reads a notifier's address and token.
func secretOf(ctx context.Context, c client.Reader, nf *infrav1.TerraformRunNotifier) (string, []byte, error) {
	var sec corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: nf.Namespace, Name: nf.Spec.SecretRef.Name}, &sec); err != nil {
		return "", nil, errPermanent{fmt.Errorf("spec.secretRef: reading Secret %s: %w", nf.Spec.SecretRef.Name, err)}
	}
	addr := strings.TrimSpace(string(sec.Data[AddressKey]))
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", nil, errPermanent{fmt.Errorf("spec.secretRef: Secret %s key %q must be an http or https URL", sec.Name, AddressKey)}
	}
	return addr, sec.Data[TokenKey], nil
}

// send POSTs one notice and returns the destination's answer as its
// status line. Its errors' text is a fixed reason (egress.Describe, or
// the status line): the body of the answer is read and thrown away, since
// a destination the tenant chose may be, or redirect to, an endpoint
// whose answer the tenant must not read.
func (d *Dispatcher) send(ctx context.Context, typ infrav1.NotifierType, addr string, token []byte, n Notice) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := Request(ctx, typ, addr, token, n)
	if err != nil {
		return "", errPermanent{fmt.Errorf("spec.type %q: no request could be made of the notice", typ)}
	}
	resp, err := d.HTTP.Do(req)
	if err != nil {
		reason := errors.New(egress.Describe(err))
		if egress.IsRefused(err) {
			return "", errPermanent{reason}
		}
		return "", reason
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	answer := StatusLine(resp.StatusCode)
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return answer, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return answer, errors.New(answer)
	}
	return answer, errPermanent{errors.New(answer)}
}

// StatusLine is how a destination's answer is shown: its code and Go's
// text for it, "HTTP 500 Internal Server Error".
func StatusLine(code int) string {
	return strings.TrimSpace(fmt.Sprintf("HTTP %d %s", code, http.StatusText(code)))
}

// Request makes the HTTP request of a notice for a notifier type.
func Request(ctx context.Context, typ infrav1.NotifierType, addr string, token []byte, n Notice) (*http.Request, error) {
	body, err := json.Marshal(n)
	if err != nil {
		return nil, err
	}
	var req *http.Request
	switch typ {
	case infrav1.NotifierWebhook:
		if req, err = http.NewRequestWithContext(ctx, http.MethodPost, addr, bytes.NewReader(body)); err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
	case infrav1.NotifierCloudEvents:
		// CloudEvents 1.0 in HTTP binary mode: the attributes as ce-
		// headers, the notice as the body. Written here rather than with
		// the CloudEvents SDK, which would bring its packages and their
		// logger into the manager for six headers (docs/performance.md,
		// P4); the tests read it back and validate it with the SDK.
		if req, err = http.NewRequestWithContext(ctx, http.MethodPost, addr, bytes.NewReader(body)); err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Ce-Specversion", "1.0")
		req.Header.Set("Ce-Id", n.UID+"-"+n.RunID+"-"+string(n.Event)+"-"+n.Time.Format("20060102T150405.000"))
		req.Header.Set("Ce-Source", EventSource)
		req.Header.Set("Ce-Type", "io.opr8r.terraformrun."+strings.ToLower(string(n.Event)))
		req.Header.Set("Ce-Subject", n.Namespace+"/"+n.Name)
		req.Header.Set("Ce-Time", n.Time.UTC().Format(time.RFC3339Nano))
	case infrav1.NotifierSlack:
		if body, err = json.Marshal(slackBody(n)); err != nil {
			return nil, err
		}
		if req, err = http.NewRequestWithContext(ctx, http.MethodPost, addr, bytes.NewReader(body)); err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
	default:
		return nil, fmt.Errorf("spec.type %q: use Webhook, CloudEvents or Slack", typ)
	}
	req.Header.Set("User-Agent", "opr8r-notifier")
	if len(token) > 0 {
		req.Header.Set(SignatureHeader, "sha256="+receiver.Sign(body, token))
	}
	return req, nil
}

// slackBody is a Slack incoming webhook's body: text for notifications and
// clients that show only it, and a section block.
func slackBody(n Notice) map[string]any {
	icon := map[infrav1.NotifyEvent]string{
		infrav1.NotifyApprovalRequired: ":hourglass:", infrav1.NotifyApplied: ":white_check_mark:", infrav1.NotifyFailed: ":x:",
		infrav1.NotifyDriftDetected: ":warning:", infrav1.NotifyDestroyed: ":wastebasket:",
	}[n.Event]
	text := fmt.Sprintf("%s *%s* TerraformRun `%s/%s`", icon, n.Event, n.Namespace, n.Name)
	if n.RunID != "" {
		text += " run `" + n.RunID + "`"
	}
	if n.Plan != nil {
		text += " (plan " + results.ShortAll(n.Plan.Add, n.Plan.Change, n.Plan.Destroy, n.Plan.Import, n.Plan.Forget, n.Plan.Move, n.Plan.Actions) + ")"
	}
	// The message may be terraform's error, which a pull request's author
	// writes (a precondition's error_message): escaped as Slack asks (&, <,
	// >), so it names nobody (<!channel>, <@U…>) and links nowhere.
	text += ": " + slackEscape(n.Message)
	if n.Hint != "" {
		text += "\n`" + slackEscape(n.Hint) + "`"
	}
	return map[string]any{
		"text":   text,
		"blocks": []any{map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": text}}},
	}
}

// slackEscape escapes the three characters Slack's mrkdwn reads as
// mentions and links (api.slack.com: "Escaping text").
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
