package receiver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

const testRepo = "https://git.example.com/team/infra.git"

// countingReader counts the Secrets read through it.
type countingReader struct {
	client.Reader
	secrets atomic.Int32
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		c.secrets.Add(1)
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}

// fakeClock is a settable clock.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// testServer is a Server over a fake API with one Gitea receiver "forge"
// whose Secret holds secret, and its path.
type testServer struct {
	*Server
	c     client.Client
	api   *countingReader
	clock *fakeClock
	path  string
}

func newTestServer(t *testing.T, secret string) *testServer {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	path := Path(bytes.TrimSpace([]byte(secret)), "forge", "team")
	rcv := &infrav1.TerraformRunReceiver{ObjectMeta: metav1.ObjectMeta{Name: "forge", Namespace: "team"},
		Spec:   infrav1.TerraformRunReceiverSpec{Type: infrav1.ReceiverGitea, SecretRef: infrav1.LocalObjectReference{Name: "hook"}},
		Status: infrav1.TerraformRunReceiverStatus{WebhookPath: path}}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: "team"}, Data: map[string][]byte{TokenKey: []byte(secret)}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(rcv, sec).
		WithStatusSubresource(&infrav1.TerraformRunReceiver{}).
		WithIndex(&infrav1.TerraformRunReceiver{}, PathIndex, func(o client.Object) []string {
			return []string{o.(*infrav1.TerraformRunReceiver).Status.WebhookPath}
		}).Build()
	api := &countingReader{Reader: c}
	clk := &fakeClock{now: t0}
	return &testServer{Server: &Server{Cache: c, API: api, Writer: c, Status: c.Status(), Rate: rate.Every(time.Hour), Burst: 3, Now: clk.Now},
		c: c, api: api, clock: clk, path: path}
}

// giteaBody is a Gitea push of main from before to after.
func giteaBody(t *testing.T, before, after string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"ref": "refs/heads/main", "before": before, "after": after,
		"repository": map[string]any{"clone_url": testRepo}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// post sends body to the server with headers h and returns the code and
// the answer's result.
func (s *testServer) post(t *testing.T, body []byte, h http.Header) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, s.path, bytes.NewReader(body))
	req.Header = h
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	var a answer
	if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
		t.Fatalf("answer %q: %v", w.Body.String(), err)
	}
	return w.Code, a.Result
}

func giteaHeaders(body []byte, key, delivery string) http.Header {
	h := http.Header{}
	h.Set("X-Gitea-Event", "push")
	h.Set("X-Gitea-Delivery", delivery)
	if key != "" {
		h.Set("X-Gitea-Signature", Sign(body, []byte(key)))
	}
	return h
}

func (s *testServer) pushes(t *testing.T) []string {
	t.Helper()
	var rcv infrav1.TerraformRunReceiver
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: "team", Name: "forge"}, &rcv); err != nil {
		t.Fatal(err)
	}
	return states(rcv.Status.Pushes)
}

const testToken = "a-receiver-token-of-32-characters"

// TestServeTakesADeliveryOnce: a redelivery, a replay under a fresh
// delivery id and a late older push wake nothing; the status records each
// delivery once.
func TestServeTakesADeliveryOnce(t *testing.T) {
	s := newTestServer(t, testToken)
	s.Burst = 10
	first, second := giteaBody(t, shaOf("0"), shaOf("1")), giteaBody(t, shaOf("1"), shaOf("2"))
	steps := []struct {
		body     []byte
		delivery string
		want     string
	}{
		{second, "d2", "202 accepted"},
		{second, "d2", "200 duplicate"},       // the forge redelivers
		{second, "replayed", "200 duplicate"}, // a replay under a fresh id
		{first, "d1", "202 stale"},            // a late push of the commit before
		{giteaBody(t, shaOf("2"), shaOf("3")), "d3", "202 accepted"},
	}
	var want, got []string
	for _, st := range steps {
		s.clock.now = s.clock.now.Add(time.Second)
		code, result := s.post(t, st.body, giteaHeaders(st.body, testToken, st.delivery))
		want, got = append(want, st.want), append(got, fmt.Sprintf("%d %s", code, result))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"d2=Pending", "d1=Stale", "d3=Pending"}, s.pushes(t)); diff != "" {
		t.Errorf("status.pushes (-want +got):\n%s", diff)
	}
}

// TestServeLimitsUnverifiedApart: requests that fail verification neither
// use up the forge's budget nor read the Secret each time.
func TestServeLimitsUnverifiedApart(t *testing.T) {
	s := newTestServer(t, testToken)
	forged := giteaBody(t, shaOf("1"), shaOf("2"))
	codes := map[int]int{}
	for range 50 {
		code, _ := s.post(t, forged, giteaHeaders(forged, "", "x"))
		codes[code]++
		code, _ = s.post(t, forged, giteaHeaders(forged, "another-token-of-32-characters!!", "y"))
		codes[code]++
	}
	if diff := cmp.Diff(map[int]int{http.StatusUnauthorized: 3, http.StatusTooManyRequests: 97}, codes); diff != "" {
		t.Errorf("answers to forged requests by code (-want +got):\n%s", diff)
	}
	if n := s.api.secrets.Load(); n > 2 {
		t.Errorf("100 forged requests read the Secret %d times, want at most 2", n)
	}
	for i, d := range []string{"a", "b", "c"} {
		body := giteaBody(t, shaOf("1"), shaOf(string(rune('2'+i))))
		if code, result := s.post(t, body, giteaHeaders(body, testToken, d)); code != http.StatusAccepted {
			t.Errorf("the forge's push %d after a flood of forged ones: %d %s, want 202", i, code, result)
		}
	}
}

// TestServeToken: the token is read without surrounding whitespace, and a
// rotated one takes effect at once at the same path.
func TestServeToken(t *testing.T) {
	s := newTestServer(t, testToken+"\n")
	body := giteaBody(t, shaOf("1"), shaOf("2"))
	if code, result := s.post(t, body, giteaHeaders(body, testToken, "d1")); code != http.StatusAccepted {
		t.Fatalf("a token with a --from-file newline: %d %s, want 202", code, result)
	}
	rotated := "a-rotated-token-of-32-characters!"
	var sec corev1.Secret
	ctx := context.Background()
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "hook"}, &sec); err != nil {
		t.Fatal(err)
	}
	sec.Data[TokenKey] = []byte(rotated)
	if err := s.c.Update(ctx, &sec); err != nil {
		t.Fatal(err)
	}
	s.clock.now = s.clock.now.Add(2 * DefaultTokenRefresh)
	body = giteaBody(t, shaOf("2"), shaOf("3"))
	if code, result := s.post(t, body, giteaHeaders(body, rotated, "d2")); code != http.StatusAccepted {
		t.Errorf("signed with the rotated token, at once, at the old path: %d %s, want 202", code, result)
	}
	body = giteaBody(t, shaOf("3"), shaOf("4"))
	if code, result := s.post(t, body, giteaHeaders(body, testToken, "d3")); code != http.StatusUnauthorized {
		t.Errorf("signed with the token rotated out: %d %s, want 401", code, result)
	}
}

// TestReconcileKeepsThePath: the receiver's path is made once; a rotated
// token, or a Secret gone for a while, keeps it.
func TestReconcileKeepsThePath(t *testing.T) {
	s := newTestServer(t, testToken)
	ctx := context.Background()
	r := &Reconciler{Client: s.c, API: s.c}
	key := client.ObjectKey{Namespace: "team", Name: "forge"}
	var sec corev1.Secret
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "hook"}, &sec); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tok := range []string{testToken, "a-rotated-token-of-32-characters!", "short", "a-third-token-of-32-characters!!"} {
		sec.Data[TokenKey] = []byte(tok)
		if err := s.c.Update(ctx, &sec); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		var rcv infrav1.TerraformRunReceiver
		if err := s.c.Get(ctx, key, &rcv); err != nil {
			t.Fatal(err)
		}
		got = append(got, rcv.Status.WebhookPath)
	}
	if diff := cmp.Diff([]string{s.path, s.path, s.path, s.path}, got); diff != "" {
		t.Errorf("status.webhookPath after each token (-want +got):\n%s", diff)
	}
}
