package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/egress"
)

// fakeAPI is a fake API server holding a notifier and its Secret per
// (namespace, address).
func fakeAPI(t *testing.T, dest map[string][]string) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var objs []client.Object
	for ns, addrs := range dest {
		for i, addr := range addrs {
			name := fmt.Sprintf("n%d", i)
			objs = append(objs,
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{AddressKey: []byte(addr)}},
				&infrav1.TerraformRunNotifier{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
					Spec: infrav1.TerraformRunNotifierSpec{Type: infrav1.NotifierWebhook, SecretRef: infrav1.LocalObjectReference{Name: name}}})
		}
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&infrav1.TerraformRunNotifier{}).Build()
}

// runIn is a run of a namespace, number i.
func runIn(ns string, i int) *infrav1.TerraformRun {
	run := sampleRun()
	run.Namespace, run.Name, run.UID = ns, fmt.Sprintf("r%d", i), types.UID("u-"+ns+fmt.Sprint(i))
	return run
}

// TestFairness: a namespace whose destinations never answer (and that
// floods its queue) does not delay another namespace's notices, and its
// overflow is dropped from its own queue only.
func TestFairness(t *testing.T) {
	stop := make(chan struct{})
	var held atomic.Int32
	blackHole := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held.Add(1)
		defer held.Add(-1)
		<-stop
	}))
	defer blackHole.Close()
	defer close(stop)
	var mu sync.Mutex
	got := map[string]bool{}
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n Notice
		_ = json.NewDecoder(r.Body).Decode(&n)
		mu.Lock()
		defer mu.Unlock()
		got[n.Namespace+"/"+n.Name] = true
	}))
	defer fast.Close()

	api := fakeAPI(t, map[string][]string{
		"slow": {blackHole.URL + "/a", blackHole.URL + "/b", blackHole.URL + "/c"},
		"fast": {fast.URL + "/x"},
	})
	d := &Dispatcher{Cache: api, API: api, Client: api, HTTP: egress.Client(true), Backoff: []time.Duration{time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = d.Start(ctx) }()

	droppedBefore := testutil.ToFloat64(dropped.WithLabelValues("slow"))
	// The slow namespace floods: far more than the whole dispatcher's
	// slots and queue.
	for i := range 2000 {
		d.Notify(runIn("slow", i), infrav1.NotifyApplied, "applied")
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	for i := range 5 {
		d.Notify(runIn("fast", i), infrav1.NotifyApplied, "applied")
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fast namespace got %d of 5 notices in %s, behind the slow namespace's black holes", n, time.Since(start))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the fast namespace's 5 notices delivered in %s while %d deliveries of the slow one hang", time.Since(start), held.Load())
	if h := held.Load(); h == 0 || h > DefaultPerNamespace {
		t.Errorf("%d deliveries of the slow namespace under way, want 1 to its share of %d", h, DefaultPerNamespace)
	}
	// The drops are the slow namespace's, counted and shown on its
	// notifiers; none are the fast one's.
	// At most one notice was taken from the queue before it was full.
	if got := testutil.ToFloat64(dropped.WithLabelValues("slow")) - droppedBefore; got < 2000-DefaultQueueSize-1 || got > 2000-DefaultQueueSize {
		t.Errorf("dropped in the slow namespace: %v, want %d or one less", got, 2000-DefaultQueueSize)
	}
	if got := testutil.ToFloat64(dropped.WithLabelValues("fast")); got != 0 {
		t.Errorf("dropped in the fast namespace: %v", got)
	}
	wantDropped := map[string]bool{"slow/n0": true, "slow/n1": true, "slow/n2": true, "fast/n0": false}
	deadline = time.Now().Add(3 * time.Second)
	for {
		got := map[string]bool{}
		var list infrav1.TerraformRunNotifierList
		if err := api.List(context.Background(), &list); err != nil {
			t.Fatal(err)
		}
		for _, nf := range list.Items {
			c := apimeta.FindStatusCondition(nf.Status.Conditions, DroppedCondition)
			got[nf.Namespace+"/"+nf.Name] = c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "queue of 256 was full")
		}
		diff := cmp.Diff(wantDropped, got)
		if diff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("notifiers showing drops (-want +got):\n%s", diff)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDeliveryStatus: a notifier's status, Events and logs show the
// destination's status code and a fixed reason, never its answer's body,
// and a redirect elsewhere is not followed.
func TestDeliveryStatus(t *testing.T) {
	var elsewhereHit atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhereHit.Add(1)
		_, _ = w.Write([]byte("kind: WorkflowTemplate secret-of-another-namespace"))
	}))
	defer elsewhere.Close()
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			_, _ = w.Write([]byte("thanks secret-body"))
		case "/500":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte("secret-body"))
		case "/404":
			http.Error(w, "secret-body", http.StatusNotFound)
		case "/303":
			http.Redirect(w, r, elsewhere.URL+"/api/v1/workflow-templates", http.StatusSeeOther)
		case "/307":
			http.Redirect(w, r, elsewhere.URL+"/x", http.StatusTemporaryRedirect)
		}
	}))
	defer dest.Close()

	cases := map[string]struct {
		path          string
		wantSucceeded bool
		wantMessage   string
	}{
		"2xx":                         {path: "/ok", wantSucceeded: true, wantMessage: "HTTP 200 OK"},
		"5xx":                         {path: "/500", wantMessage: "HTTP 500 Internal Server Error"},
		"4xx":                         {path: "/404", wantMessage: "HTTP 404 Not Found"},
		"303 to another host":         {path: "/303", wantMessage: "redirect refused: to another host or port"},
		"307 to another host or port": {path: "/307", wantMessage: "redirect refused: to another host or port"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			api := fakeAPI(t, map[string][]string{"team-a": {dest.URL + tc.path}})
			d := &Dispatcher{Cache: api, API: api, Client: api, HTTP: egress.Client(true), Backoff: []time.Duration{time.Millisecond}}
			d.init()
			var nf infrav1.TerraformRunNotifier
			if err := api.Get(context.Background(), client.ObjectKey{Namespace: "team-a", Name: "n0"}, &nf); err != nil {
				t.Fatal(err)
			}
			d.deliver(context.Background(), &nf, NoticeOf(sampleRun(), infrav1.NotifyApplied, "applied", time.Now()))
			if err := api.Get(context.Background(), client.ObjectKeyFromObject(&nf), &nf); err != nil {
				t.Fatal(err)
			}
			del := nf.Status.LastDelivery
			if del == nil {
				t.Fatal("no lastDelivery")
			}
			if diff := cmp.Diff(tc.wantMessage, del.Message); diff != "" {
				t.Errorf("lastDelivery.message (-want +got):\n%s", diff)
			}
			if del.Succeeded != tc.wantSucceeded {
				t.Errorf("succeeded %v, want %v", del.Succeeded, tc.wantSucceeded)
			}
			c := apimeta.FindStatusCondition(nf.Status.Conditions, infrav1.ReadyCondition)
			if c == nil || strings.Contains(c.Message, "secret") || strings.Contains(c.Message, "127.0.0.1") {
				t.Errorf("Ready: %+v", c)
			}
		})
	}
	if n := elsewhereHit.Load(); n != 0 {
		t.Errorf("a redirect to another host was followed %d times", n)
	}
}
