package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/notify"
	"github.com/opr8r/opr8r/pkg/receiver"
	"github.com/opr8r/opr8r/pkg/testutil"
)

const (
	pushRepo   = "https://git.example.com/team/infra.git"
	pushToken  = "a-receiver-token-of-32-characters"
	commitA    = "1111111111111111111111111111111111111111"
	commitB    = "2222222222222222222222222222222222222222"
	commitC    = "3333333333333333333333333333333333333333"
	notifyHMAC = "a-notifier-hmac-key"
)

// giteaPush is a Gitea push of ref to commit in repo, as Gitea sends it
// (the fields opr8r reads, and a few around them).
func giteaPush(repo, ref, commit string) []byte {
	b, err := json.Marshal(map[string]any{
		"ref": "refs/heads/" + ref, "before": strings.Repeat("0", 40), "after": commit,
		"repository": map[string]any{"clone_url": repo, "html_url": strings.TrimSuffix(repo, ".git"), "full_name": "team/infra"},
		"pusher":     map[string]any{"login": "dev"},
	})
	Expect(err).NotTo(HaveOccurred())
	return b
}

// postHook POSTs a webhook to the suite's receiver server and returns the
// status code and the answer.
func postHook(path string, body []byte, header map[string]string) (int, string) {
	addr := suiteReceiver.Address()
	Expect(addr).NotTo(BeEmpty())
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, bytes.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// giteaPushFrom is a Gitea push of ref from before ("": a new branch) to
// after.
func giteaPushFrom(repo, ref, before, after string) []byte {
	if before == "" {
		before = strings.Repeat("0", 40)
	}
	b, err := json.Marshal(map[string]any{
		"ref": "refs/heads/" + ref, "before": before, "after": after,
		"repository": map[string]any{"clone_url": repo, "html_url": strings.TrimSuffix(repo, ".git"), "full_name": "team/infra"},
	})
	Expect(err).NotTo(HaveOccurred())
	return b
}

// signedGiteaDelivery signs body with the suite's token, as delivery.
func signedGiteaDelivery(body []byte, delivery string) map[string]string {
	h := signedGitea(body, pushToken)
	h["X-Gitea-Delivery"] = delivery
	return h
}

func signedGitea(body []byte, key string) map[string]string {
	return map[string]string{"X-Gitea-Event": "push", "X-Gitea-Signature": receiver.Sign(body, []byte(key))}
}

// makeReceiver creates a Gitea receiver and its Secret, and waits for its
// path.
func makeReceiver(ns string) string {
	ctx := context.Background()
	Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: ns}, StringData: map[string]string{"token": pushToken}})).To(Succeed())
	Expect(k8sClient.Create(ctx, &infrav1.TerraformRunReceiver{ObjectMeta: metav1.ObjectMeta{Name: "forge", Namespace: ns},
		Spec: infrav1.TerraformRunReceiverSpec{Type: infrav1.ReceiverGitea, SecretRef: infrav1.LocalObjectReference{Name: "hook"}}})).To(Succeed())
	var path string
	Eventually(func() string {
		var r infrav1.TerraformRunReceiver
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "forge"}, &r)).To(Succeed())
		path = r.Status.WebhookPath
		return path
	}, timeout, interval).Should(Equal(receiver.Path([]byte(pushToken), "forge", ns)))
	awaitServed(path)
	return path
}

// awaitServed waits until the webhook server finds a receiver at path: it
// looks receivers up by path in the manager's cache, which sees the status
// write a moment after the API server (a focused envtest run on 2026-12-07:
// 404 for a push sent at once). The probe is unsigned: refused, 401.
func awaitServed(path string) {
	GinkgoHelper()
	Eventually(func() int {
		code, _ := postHook(path, []byte(`{}`), map[string]string{"X-Gitea-Event": "push"})
		return code
	}, timeout, interval).ShouldNot(Equal(http.StatusNotFound))
}

// sink records what notifiers deliver.
type sink struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []notify.Notice
	sigs   []bool
	status int
}

func newSink() *sink {
	s := &sink{status: http.StatusOK}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.status != http.StatusOK {
			w.WriteHeader(s.status)
			_, _ = w.Write([]byte("sink says no"))
			return
		}
		var n notify.Notice
		Expect(json.Unmarshal(b, &n)).To(Succeed())
		s.got = append(s.got, n)
		s.sigs = append(s.sigs, r.Header.Get(notify.SignatureHeader) == "sha256="+receiver.Sign(b, []byte(notifyHMAC)))
	}))
	return s
}

// events are the happenings the sink got for a run, each with whether its
// signature was good.
func (s *sink) events(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for i, n := range s.got {
		if n.Name == name {
			out = append(out, fmt.Sprintf("%s signed=%v", n.Event, s.sigs[i]))
		}
	}
	return out
}

func (s *sink) notice(name string, ev infrav1.NotifyEvent) notify.Notice {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.got {
		if n.Name == name && n.Event == ev {
			return n
		}
	}
	return notify.Notice{}
}

func makeNotifier(ns, name, address string, events ...infrav1.NotifyEvent) {
	ctx := context.Background()
	Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: map[string]string{"address": address, "token": notifyHMAC}})).To(Succeed())
	Expect(k8sClient.Create(ctx, &infrav1.TerraformRunNotifier{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: infrav1.TerraformRunNotifierSpec{Type: infrav1.NotifierWebhook, SecretRef: infrav1.LocalObjectReference{Name: name}, Events: events}})).To(Succeed())
}

// pushes is the conformance suite's part on receivers and notifiers: a
// push reaches a run in seconds without spec.interval, a push of the
// commit already applied starts nothing, forged webhooks start nothing,
// and what happens to runs reaches a notifier, signed.
func pushes(g given) {
	It("starts a run when a signed push moves the tracked branch, and none for the commit already applied or a forged push", func() {
		ns := newNamespace()
		sk := newSink()
		defer sk.srv.Close()
		makeNotifier(ns, "team", sk.srv.URL)
		ctx := context.Background()
		w := g.run("pushed", ns).Auto().Git(pushRepo, "main", "", "")
		Expect(k8sClient.Create(ctx, w.Obj())).To(Succeed())
		s := g.active(ns, "pushed")
		s.StartAt(commitA)
		s.Plan(1, 0, 0, digestOf("pushed-a"))
		s.FinishApply(`{}`)
		Eventually(condReason(ns, "pushed", infrav1.ReadyCondition), timeout, interval).Should(Equal("True/Succeeded"))
		first := getRun(ns, "pushed").Status.Run.ID
		Eventually(func() []string { return sk.events("pushed") }, timeout, interval).Should(Equal([]string{"Applied signed=true"}))
		n := sk.notice("pushed", infrav1.NotifyApplied)
		Expect(n.RunID).To(Equal(first))
		Expect(n.Commit).To(Equal(commitA))
		Expect(n.Plan).To(Equal(&notify.Plan{Add: 1, Digest: digestOf("pushed-a")}))

		path := makeReceiver(ns)
		By("a push of the commit already applied: accepted, no run")
		code, body := postHook(path, giteaPush(pushRepo, "main", commitA), signedGitea(giteaPush(pushRepo, "main", commitA), pushToken))
		Expect(code).To(Equal(http.StatusAccepted), body)
		Expect(body).To(ContainSubstring(`"result":"accepted"`))
		Eventually(func() string { return getRun(ns, "pushed").Status.LastHandledPush }, timeout, interval).Should(Equal(commitA))
		Consistently(func() string { return getRun(ns, "pushed").Status.Run.ID }, 2*time.Second, interval).Should(Equal(first))

		By("forged pushes: refused, no run")
		forged := giteaPush(pushRepo, "main", commitB)
		for _, h := range []map[string]string{
			signedGitea(forged, "another-token-of-32-characters!!"),      // wrong key
			{"X-Gitea-Event": "push"},                                    // unsigned
			signedGitea(giteaPush(pushRepo, "main", commitA), pushToken), // a signature of another body
		} {
			code, body := postHook(path, forged, h)
			Expect(code).To(Equal(http.StatusUnauthorized), body)
			Expect(body).To(ContainSubstring(`"result":"refused"`))
		}
		code, _ = postHook("/hook/"+strings.Repeat("0", 64), forged, signedGitea(forged, pushToken))
		Expect(code).To(Equal(http.StatusNotFound))
		Consistently(func() string { return getRun(ns, "pushed").Annotations[infrav1.SourcePushAnnotation] }, time.Second, interval).Should(Equal(commitA))

		By("a push of another branch or repository: no run")
		other := giteaPush(pushRepo, "release", commitB)
		code, body = postHook(path, other, signedGitea(other, pushToken))
		Expect(code).To(Equal(http.StatusAccepted))
		Expect(body).NotTo(ContainSubstring("pushed"))

		By("a push that moves the branch: a run at once, without spec.interval")
		moved := giteaPush("git@git.example.com:team/infra.git", "main", commitB)
		code, body = postHook(path, moved, signedGitea(moved, pushToken))
		Expect(code).To(Equal(http.StatusAccepted), body)
		s2 := g.nextRun(ns, "pushed", first)
		run := getRun(ns, "pushed")
		Expect(run.Status.Run.Trigger).To(Equal(infrav1.TriggerSourceChange))
		Expect(run.Status.Run.TriggerDetail).To(ContainSubstring(commitB[:12]))
		Expect(run.Status.LastHandledPush).To(Equal(commitB))
		s2.StartAt(commitB)
		s2.Plan(0, 1, 0, digestOf("pushed-b"))
		s2.FinishApply(`{}`)
		Eventually(func() string {
			r := getRun(ns, "pushed")
			if r.Status.LastApplied == nil {
				return ""
			}
			return r.Status.LastApplied.Revision
		}, timeout, interval).Should(Equal(commitB))
		Eventually(func() []string { return sk.events("pushed") }, timeout, interval).Should(Equal([]string{"Applied signed=true", "Applied signed=true"}))
		var rcv infrav1.TerraformRunReceiver
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "forge"}, &rcv)).To(Succeed())
		Expect(apimeta.IsStatusConditionTrue(rcv.Status.Conditions, infrav1.ReadyCondition)).To(BeTrue())
	})

	It("supersedes a plan waiting for approval when a push moves the branch", func() {
		ns := newNamespace()
		sk := newSink()
		defer sk.srv.Close()
		makeNotifier(ns, "approvers", sk.srv.URL, infrav1.NotifyApprovalRequired)
		w := g.run("waiting", ns).Git(pushRepo, "main", "", "")
		Expect(k8sClient.Create(context.Background(), w.Obj())).To(Succeed())
		s := g.active(ns, "waiting")
		s.StartAt(commitA)
		s.Plan(1, 0, 0, digestOf("waiting-a"))
		s.Suspend(digestOf("waiting-a"))
		Eventually(phase(ns, "waiting"), timeout, interval).Should(Equal(infrav1.RunAwaitingApproval))
		Eventually(func() []string { return sk.events("waiting") }, timeout, interval).Should(Equal([]string{"ApprovalRequired signed=true"}))
		Expect(sk.notice("waiting", infrav1.NotifyApprovalRequired).Hint).To(ContainSubstring("kubectl tfrun approve waiting -n " + ns))
		first := s.Key().Name
		path := makeReceiver(ns)
		moved := giteaPush(pushRepo, "main", commitB)
		code, body := postHook(path, moved, signedGitea(moved, pushToken))
		Expect(code).To(Equal(http.StatusAccepted), body)
		Eventually(condReason(ns, "waiting", infrav1.ApprovedCondition), timeout, interval).Should(Equal("False/Superseded"))
		Expect(cond(getRun(ns, "waiting"), infrav1.ApprovedCondition).Message).To(ContainSubstring("a push moved main to " + commitB[:12]))
		Eventually(s.CancelRequested, timeout, interval).Should(BeTrue())
		s.CompleteAfterGate()
		g.nextRun(ns, "waiting", first)
		Expect(getRun(ns, "waiting").Status.Run.Trigger).To(Equal(infrav1.TriggerSourceChange))
	})

	It("lets no replayed or late push supersede a plan waiting for approval", func() {
		ns := newNamespace()
		w := g.run("replayed", ns).Git(pushRepo, "main", "", "")
		Expect(k8sClient.Create(context.Background(), w.Obj())).To(Succeed())
		path := makeReceiver(ns)
		toA, toB := giteaPushFrom(pushRepo, "main", "", commitA), giteaPushFrom(pushRepo, "main", commitA, commitB)
		code, body := postHook(path, toA, signedGiteaDelivery(toA, "delivery-a"))
		Expect(code).To(Equal(http.StatusAccepted), body)
		code, body = postHook(path, toB, signedGiteaDelivery(toB, "delivery-b"))
		Expect(code).To(Equal(http.StatusAccepted), body)
		Eventually(func() string { return getRun(ns, "replayed").Annotations[infrav1.SourcePushAnnotation] }, timeout, interval).Should(Equal(commitB))
		s := g.active(ns, "replayed")
		s.StartAt(commitB)
		s.Plan(1, 0, 0, digestOf("replayed-b"))
		s.Suspend(digestOf("replayed-b"))
		Eventually(phase(ns, "replayed"), timeout, interval).Should(Equal(infrav1.RunAwaitingApproval))

		By("the push to A replayed, as sent and under a fresh delivery id, and the push to B replayed: duplicates")
		for _, h := range []map[string]string{signedGiteaDelivery(toA, "delivery-a"), signedGiteaDelivery(toA, "a-fresh-id")} {
			code, body = postHook(path, toA, h)
			Expect(code).To(Equal(http.StatusOK), body)
			Expect(body).To(ContainSubstring(`"result":"duplicate"`))
		}
		code, body = postHook(path, toB, signedGiteaDelivery(toB, "delivery-b"))
		Expect(code).To(Equal(http.StatusOK), body)

		By("a late push of the commit before B (never delivered before): stale")
		late := giteaPushFrom(pushRepo, "main", commitC, commitA)
		code, body = postHook(path, late, signedGiteaDelivery(late, "delivery-late"))
		Expect(code).To(Equal(http.StatusAccepted), body)
		Expect(body).To(ContainSubstring(`"result":"stale"`))

		Consistently(func() string {
			return getRun(ns, "replayed").Annotations[infrav1.SourcePushAnnotation] + " " + string(phase(ns, "replayed")())
		}, 3*time.Second, interval).Should(Equal(commitB + " " + string(infrav1.RunAwaitingApproval)))
		Expect(s.CancelRequested()).To(BeFalse(), "the plan waiting for approval is not superseded")
	})

	It("stops a planOnly run still planning when its source moves (a preview superseded by a push), and tells no notifier of it", func() {
		ns := newNamespace()
		sk := newSink()
		defer sk.srv.Close()
		makeNotifier(ns, "team", sk.srv.URL)
		w := g.run("preview", ns).Git(pushRepo, commitA, "", "")
		w.Spec.PlanOnly = true
		Expect(k8sClient.Create(context.Background(), w.Obj())).To(Succeed())
		s := g.active(ns, "preview")
		s.StartAt(commitA)
		patchRun(ns, "preview", func(r *infrav1.TerraformRun) { r.Spec.Source.Git.Ref = commitB })
		Eventually(s.CancelRequested, timeout, interval).Should(BeTrue(), "the plan of the old commit is stopped")
		// The pass asks the child to stop, then writes its status: the stop
		// is seen first (a focused envtest run on 2026-12-07 read Progressing
		// between the two writes on Tekton).
		Eventually(condReason(ns, "preview", infrav1.ReconcilingCondition), timeout, interval).Should(Equal("True/Superseded"))
		s.CompleteAfterGate()
		s2 := g.nextRun(ns, "preview", s.Key().Name)
		Expect(getRun(ns, "preview").Status.Run.Trigger).To(Equal(infrav1.TriggerSpecChange))
		s2.StartAt(commitB)
		s2.Plan(0, 1, 0, digestOf("preview-b"))
		s2.Complete()
		Eventually(condReason(ns, "preview", infrav1.ReadyCondition), timeout, interval).Should(Equal("True/PlannedOnly"))
		Consistently(func() []string { return sk.events("preview") }, time.Second, interval).Should(BeEmpty(), "a superseded run is no failure to tell anyone about")
	})

	It("reports a failed run to notifiers, and a destination that fails in the notifier, never in the run", func() {
		ns := newNamespace()
		good, bad := newSink(), newSink()
		defer good.srv.Close()
		defer bad.srv.Close()
		bad.status = http.StatusInternalServerError
		makeNotifier(ns, "good", good.srv.URL, infrav1.NotifyFailed)
		makeNotifier(ns, "bad", bad.srv.URL)
		Expect(k8sClient.Create(context.Background(), g.run("failing", ns).Auto().Obj())).To(Succeed())
		s := g.active(ns, "failing")
		s.Start()
		s.Fail("plan", "Error: Unsupported argument")
		Eventually(condReason(ns, "failing", infrav1.StalledCondition), timeout, interval).Should(Equal("True/RunFailed"))
		Eventually(func() []string { return good.events("failing") }, timeout, interval).Should(Equal([]string{"Failed signed=true"}))
		Expect(good.notice("failing", infrav1.NotifyFailed).Message).To(ContainSubstring("Unsupported argument"))
		Eventually(func() string {
			var nf infrav1.TerraformRunNotifier
			Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "bad"}, &nf)).To(Succeed())
			c := apimeta.FindStatusCondition(nf.Status.Conditions, infrav1.ReadyCondition)
			if c == nil || nf.Status.LastDelivery == nil {
				return ""
			}
			return fmt.Sprintf("%s/%s attempts=%d %s", c.Status, c.Reason, nf.Status.LastDelivery.Attempts, nf.Status.LastDelivery.Message)
		}, timeout, interval).Should(Equal("False/DeliveryFailed attempts=3 HTTP 500 Internal Server Error"))
		// A second notifier of the same namespace got its delivery all the same.
		var nf infrav1.TerraformRunNotifier
		Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "good"}, &nf)).To(Succeed())
		Expect(apimeta.IsStatusConditionTrue(nf.Status.Conditions, infrav1.ReadyCondition)).To(BeTrue())
	})
}

// giteaPR is a Gitea pull request event.
func giteaPR(action string, number int64, head, base string) []byte {
	repo := map[string]any{"clone_url": pushRepo, "html_url": "https://git.example.com/team/infra", "full_name": "team/infra", "name": "infra", "owner": map[string]any{"login": "team"}}
	b, err := json.Marshal(map[string]any{
		"action": action, "number": number,
		"pull_request": map[string]any{"number": number, "html_url": fmt.Sprintf("https://git.example.com/team/infra/pulls/%d", number),
			"head": map[string]any{"ref": "feature", "sha": head, "repo": repo}, "base": map[string]any{"ref": base, "repo": repo}},
		"repository": repo,
	})
	Expect(err).NotTo(HaveOccurred())
	return b
}

var _ = Describe("pull request previews", func() {
	It("makes a plan-only preview of a pull request's head against the run's own state, moves it on a push, and removes it when the pull request closes", func() {
		ctx := context.Background()
		ns := newNamespace()
		w := testutil.MakeRun("net", ns).Git(pushRepo, "main", "", "")
		w.UID = ""
		w.Labels = map[string]string{"team": "a"}
		w.Spec.Approval = infrav1.ApprovalSpec{Mode: infrav1.ApprovalAuto}
		w.Spec.Interval = &metav1.Duration{Duration: time.Hour}
		Expect(k8sClient.Create(ctx, w.Obj())).To(Succeed())
		tracked := getRun(ns, "net")
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: ns}, StringData: map[string]string{"token": pushToken}})).To(Succeed())
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: ns}, StringData: map[string]string{"token": "forge-api-token"}})).To(Succeed())
		Expect(k8sClient.Create(ctx, &infrav1.TerraformRunReceiver{ObjectMeta: metav1.ObjectMeta{Name: "forge", Namespace: ns},
			Spec: infrav1.TerraformRunReceiverSpec{Type: infrav1.ReceiverGitea, Events: []infrav1.ReceiverEvent{infrav1.ReceiverPush, infrav1.ReceiverPullRequest},
				SecretRef: infrav1.LocalObjectReference{Name: "hook"}, Previews: &infrav1.ReceiverPreviews{APIURL: "https://git.example.com", TokenSecretRef: &infrav1.LocalObjectReference{Name: "api"}}}})).To(Succeed())
		var path string
		Eventually(func() string {
			var r infrav1.TerraformRunReceiver
			Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "forge"}, &r)).To(Succeed())
			path = r.Status.WebhookPath
			return path
		}, timeout, interval).ShouldNot(BeEmpty())
		awaitServed(path)
		hdr := func(b []byte) map[string]string {
			return map[string]string{"X-Gitea-Event": "pull_request", "X-Gitea-Signature": receiver.Sign(b, []byte(pushToken))}
		}

		By("opened: a preview")
		opened := giteaPR("opened", 4, commitA, "main")
		code, body := postHook(path, opened, hdr(opened))
		Expect(code).To(Equal(http.StatusAccepted), body)
		Expect(body).To(ContainSubstring(`"runs":["net-pr4"]`))
		p := getRun(ns, "net-pr4")
		Expect(p.Labels).To(HaveKeyWithValue(infrav1.PreviewOfLabel, "net"))
		Expect(p.Labels).To(HaveKeyWithValue(infrav1.PullRequestLabel, "4"))
		Expect(p.OwnerReferences).To(ConsistOf(HaveField("UID", tracked.UID)))
		Expect(p.Spec.PlanOnly).To(BeTrue())
		Expect(p.Spec.Source.Git.Ref).To(Equal(commitA))
		Expect(p.Spec.Approval.Mode).To(Equal(infrav1.ApprovalManual), "no approval policy of the tracked run: planOnly never waits")
		Expect(p.Spec.Interval).To(BeNil())
		Expect(p.Spec.Backend.Kubernetes.SecretSuffix).To(Equal("net"), "the tracked run's state")
		Expect(p.Annotations[infrav1.PreviewAnnotation]).NotTo(ContainSubstring(`"api"`), "the forge's address is the receiver's, not the preview's")
		Expect(p.Annotations).To(HaveKey(infrav1.PreviewSealAnnotation))

		By("a fork's pull request: no preview")
		fork := giteaPR("opened", 5, commitB, "main")
		fork = bytes.Replace(fork, []byte(`"head":{"ref":"feature","repo":{"clone_url":"`+pushRepo), []byte(`"head":{"ref":"feature","repo":{"clone_url":"https://git.example.com/mallory/infra.git`), 1)
		Expect(string(fork)).To(ContainSubstring("mallory/infra.git"))
		code, body = postHook(path, fork, hdr(fork))
		Expect(code).To(Equal(http.StatusAccepted), body)
		Expect(body).NotTo(ContainSubstring("net-pr5"))

		By("synchronized: the preview moves to the new head")
		synced := giteaPR("synchronized", 4, commitB, "main")
		code, body = postHook(path, synced, hdr(synced))
		Expect(code).To(Equal(http.StatusAccepted), body)
		Expect(getRun(ns, "net-pr4").Spec.Source.Git.Ref).To(Equal(commitB))

		By("closed: the preview is removed")
		closed := giteaPR("closed", 4, commitB, "main")
		code, body = postHook(path, closed, hdr(closed))
		Expect(code).To(Equal(http.StatusAccepted), body)
		Eventually(func() bool {
			var r infrav1.TerraformRun
			err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "net-pr4"}, &r)
			return err != nil || r.DeletionTimestamp != nil
		}, timeout, interval).Should(BeTrue())
		Expect(getRun(ns, "net").Spec.Source.Git.Ref).To(Equal("main"), "the tracked run is untouched")
	})

	It("refuses dashboard links that are not an engine's http URL, naming the field", func() {
		ctx := context.Background()
		ns := newNamespace()
		for urls, want := range map[string]map[string]string{
			"the keys are engines": {"gitlab": "https://x.example.com/{child}"},
			"http or https URL":    {"argo": "javascript:alert(1)"},
		} {
			err := k8sClient.Create(ctx, &infrav1.TerraformRunReceiver{ObjectMeta: metav1.ObjectMeta{GenerateName: "bad-", Namespace: ns},
				Spec: infrav1.TerraformRunReceiverSpec{Type: infrav1.ReceiverGitea, SecretRef: infrav1.LocalObjectReference{Name: "hook"},
					Previews: &infrav1.ReceiverPreviews{APIURL: "https://git.example.com", TokenSecretRef: &infrav1.LocalObjectReference{Name: "api"}, DashboardURLs: want}}})
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(And(ContainSubstring("spec.previews.dashboardURLs"), ContainSubstring(urls)))
		}
		Expect(k8sClient.Create(ctx, &infrav1.TerraformRunReceiver{ObjectMeta: metav1.ObjectMeta{Name: "good", Namespace: ns},
			Spec: infrav1.TerraformRunReceiverSpec{Type: infrav1.ReceiverGitea, SecretRef: infrav1.LocalObjectReference{Name: "hook"},
				Previews: &infrav1.ReceiverPreviews{APIURL: "https://git.example.com", TokenSecretRef: &infrav1.LocalObjectReference{Name: "api"},
					DashboardURLs: map[string]string{"argo": "https://argo.example.com/workflows/{namespace}/{child}"}}}})).To(Succeed())
	})
})
