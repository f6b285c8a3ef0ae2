package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/egress"
	"github.com/opr8r/opr8r/pkg/receiver"
)

func sampleRun() *infrav1.TerraformRun {
	run := &infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Name: "net", Namespace: "team-a", UID: "u-1", Labels: map[string]string{"tier": "prod"}}}
	run.Status.Run = &infrav1.RunStatus{ID: "net-3", Type: infrav1.RunApply, Trigger: infrav1.TriggerSourceChange, Commit: "abc"}
	run.Status.Plan = &infrav1.PlanStatus{Add: 1, Change: 2, Destroy: 3, Digest: "sha256:d"}
	return run
}

var key = []byte("hmac-key")

func TestRequestBodies(t *testing.T) {
	n := NoticeOf(sampleRun(), infrav1.NotifyApprovalRequired, "plan +1 ~2 -3 waits", time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	ctx := context.Background()

	t.Run("Webhook", func(t *testing.T) {
		req, err := Request(ctx, infrav1.NotifierWebhook, "https://hooks.example.com/x", key, n)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(req.Body)
		if got, want := req.Header.Get(SignatureHeader), "sha256="+receiver.Sign(body, key); got != want {
			t.Errorf("signature %s, want %s", got, want)
		}
		var back Notice
		if err := json.Unmarshal(body, &back); err != nil {
			t.Fatal(err)
		}
		if back.Event != infrav1.NotifyApprovalRequired || back.RunID != "net-3" || back.Plan.Destroy != 3 || !strings.Contains(back.Hint, "kubectl tfrun approve net -n team-a") {
			t.Errorf("body %s", body)
		}
		if strings.Contains(string(body), "tier") {
			t.Error("the run's labels are sent")
		}
	})

	t.Run("CloudEvents", func(t *testing.T) {
		req, err := Request(ctx, infrav1.NotifierCloudEvents, "https://sink.example.com/", key, n)
		if err != nil {
			t.Fatal(err)
		}
		for h, want := range map[string]string{
			"Ce-Specversion": "1.0", "Ce-Type": "io.opr8r.terraformrun.approvalrequired", "Ce-Source": EventSource,
			"Ce-Subject": "team-a/net", "Content-Type": "application/json",
		} {
			if got := req.Header.Get(h); got != want {
				t.Errorf("%s: %q, want %q", h, got, want)
			}
		}
		// The CloudEvents SDK reads it back: a valid CloudEvent, with
		// every attribute.
		ev, err := cehttp.NewEventFromHTTPRequest(req)
		if err != nil {
			t.Fatal(err)
		}
		if err := ev.Validate(); err != nil {
			t.Fatal(err)
		}
		if ev.SpecVersion() != "1.0" || ev.ID() != n.UID+"-"+n.RunID+"-ApprovalRequired-"+n.Time.Format("20060102T150405.000") ||
			ev.Source() != EventSource || ev.Type() != "io.opr8r.terraformrun.approvalrequired" || ev.Subject() != "team-a/net" ||
			!ev.Time().Equal(n.Time) || ev.DataContentType() != "application/json" {
			t.Errorf("the SDK read %s", ev)
		}
		var back Notice
		if err := ev.DataAs(&back); err != nil || back.Name != "net" {
			t.Errorf("data %s: %v", ev.Data(), err)
		}
		if got, want := req.Header.Get(SignatureHeader), "sha256="+receiver.Sign(ev.Data(), key); got != want {
			t.Errorf("signature %s, want %s", got, want)
		}
	})

	t.Run("Slack", func(t *testing.T) {
		req, err := Request(ctx, infrav1.NotifierSlack, "https://hooks.slack.com/services/T/B/X", nil, n)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Text   string           `json:"text"`
			Blocks []map[string]any `json:"blocks"`
		}
		b, _ := io.ReadAll(req.Body)
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(body.Text, "*ApprovalRequired* TerraformRun `team-a/net` run `net-3` (plan +1 ~2 -3)") || len(body.Blocks) != 1 {
			t.Errorf("slack body %s", b)
		}
		if req.Header.Get(SignatureHeader) != "" {
			t.Error("signed without a token")
		}
	})

	if _, err := Request(ctx, "Teams", "https://x", nil, n); err == nil || !strings.Contains(err.Error(), "spec.type") {
		t.Errorf("an unknown type: %v", err)
	}
}

func TestWants(t *testing.T) {
	n := NoticeOf(sampleRun(), infrav1.NotifyFailed, "failed", time.Now())
	nf := &infrav1.TerraformRunNotifier{}
	if !Wants(nf, n) {
		t.Error("a notifier without events or selector does not want a notice")
	}
	nf.Spec.Events = []infrav1.NotifyEvent{infrav1.NotifyApplied}
	if Wants(nf, n) {
		t.Error("a notice of an event the notifier does not list is wanted")
	}
	nf.Spec.Events = nil
	nf.Spec.RunSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "dev"}}
	if Wants(nf, n) {
		t.Error("a run the selector does not select is wanted")
	}
	nf.Spec.RunSelector.MatchLabels["tier"] = "prod"
	if !Wants(nf, n) {
		t.Error("a run the selector selects is not wanted")
	}
	nf.Spec.Suspend = true
	if Wants(nf, n) {
		t.Error("a suspended notifier wants a notice")
	}
}

// TestDeliveryRetries: a destination that fails with 5xx is tried again
// with the backoff, one that refuses with 4xx is not.
func TestDeliveryRetries(t *testing.T) {
	calls := 0
	codes := []int{500, 503, 200}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(codes[min(calls, len(codes)-1)])
		calls++
	}))
	defer srv.Close()
	d := &Dispatcher{HTTP: egress.Client(true), Backoff: []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}}
	d.init()
	n := NoticeOf(sampleRun(), infrav1.NotifyApplied, "applied", time.Now())
	attempts, _, err := d.sendWithRetries(context.Background(), infrav1.NotifierWebhook, srv.URL, key, n)
	if err != nil || calls != 3 || attempts != 3 {
		t.Errorf("after 500, 503, 200: err %v, calls %d, attempts %d", err, calls, attempts)
	}
	codes, calls = []int{502}, 0
	if attempts, answer, err := d.sendWithRetries(context.Background(), infrav1.NotifierWebhook, srv.URL, key, n); err == nil || attempts != 4 || calls != 4 || answer != "HTTP 502 Bad Gateway" {
		t.Errorf("always 502: err %v, attempts %d, calls %d, answer %q", err, attempts, calls, answer)
	}
	codes, calls = []int{400}, 0
	if attempts, _, err := d.sendWithRetries(context.Background(), infrav1.NotifierWebhook, srv.URL, key, n); !permanent(err) || attempts != 1 {
		t.Errorf("a 400: %v after %d attempts, want one permanent failure", err, attempts)
	}
}

// TestSlackNamesNobody: a failed run's message is terraform's error, which
// a pull request's author writes (a precondition's error_message): in a
// Slack body it mentions nobody and links nowhere (issue 49's attack
// review).
func TestSlackNamesNobody(t *testing.T) {
	n := Notice{Event: infrav1.NotifyFailed, Namespace: "team", Name: "web-pr7", RunID: "web-pr7-1",
		Message: "Error: <!channel> approve at <https://evil.example|opr8r approval> & <@U123>", Hint: "kubectl tfrun logs <x>"}
	b := slackBody(n)
	text := b["text"].(string)
	for _, bad := range []string{"<!channel>", "<https://evil.example", "<@U123>", "<x>"} {
		if strings.Contains(text, bad) {
			t.Errorf("the Slack text carries %q unescaped: %s", bad, text)
		}
	}
	if !strings.Contains(text, "&lt;!channel&gt; approve at &lt;https://evil.example|opr8r approval&gt; &amp; &lt;@U123&gt;") {
		t.Errorf("the message is not escaped as Slack asks: %s", text)
	}
	block := b["blocks"].([]any)[0].(map[string]any)["text"].(map[string]any)["text"].(string)
	if block != text {
		t.Errorf("the mrkdwn block differs from the text: %q", block)
	}
}
