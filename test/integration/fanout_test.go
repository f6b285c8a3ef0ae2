package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/receiver"
	"github.com/opr8r/opr8r/pkg/testutil"
	"github.com/opr8r/opr8r/test/envtestutil"
)

// fanOutRuns is how many TerraformRuns track the pushed branch.
const fanOutRuns = 1000

// forgeTimeout is how long Gitea waits for an answer (GitHub: 10 s).
const forgeTimeout = 5 * time.Second

// TestReceiverFanOutThousand: one signed push wakes all of 1,000
// TerraformRuns tracking its branch, though the forge hangs up after 5 s:
// the server answers 202 after recording the push, and the receiver's
// reconciler wakes the runs after the answer. A replay of the delivery
// changes nothing. Only the receiver's parts run (no TerraformRun
// reconciler), with the manager's default client rate (--kube-api-qps 50,
// --kube-api-burst 100). Run alone: go test ./test/integration -run
// TestReceiverFanOutThousand -v.
func TestReceiverFanOutThousand(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set")
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	env, cfg, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	setup := *cfg
	setup.QPS, setup.Burst = 500, 1000
	c, err := client.New(&setup, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := "fanout"
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	start := time.Now()
	for i := range fanOutRuns {
		w := testutil.MakeRun(fmt.Sprintf("stack-%04d", i), ns).Git(pushRepo, "main", "", "")
		w.UID = ""
		must(t, c.Create(ctx, w.Obj()))
	}
	t.Logf("created %d TerraformRuns tracking main in %s", fanOutRuns, time.Since(start).Round(time.Millisecond))

	srv := startReceiverManager(t, cfg, scheme)
	must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: ns}, StringData: map[string]string{"token": pushToken}}))
	must(t, c.Create(ctx, &infrav1.TerraformRunReceiver{ObjectMeta: metav1.ObjectMeta{Name: "forge", Namespace: ns},
		Spec: infrav1.TerraformRunReceiverSpec{Type: infrav1.ReceiverGitea, SecretRef: infrav1.LocalObjectReference{Name: "hook"}}}))
	path := waitFor(t, 30*time.Second, func() string {
		var r infrav1.TerraformRunReceiver
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "forge"}, &r))
		return r.Status.WebhookPath
	})

	body, err := json.Marshal(map[string]any{"ref": "refs/heads/main", "before": commitA, "after": commitB,
		"repository": map[string]any{"clone_url": pushRepo}})
	must(t, err)
	sent := time.Now()
	code, answer := postGitea(t, srv.Address(), path, body, "delivery-1")
	answered := time.Since(sent)
	if code != http.StatusAccepted {
		t.Fatalf("the push: %d %s, want 202 within the forge's %s", code, answer, forgeTimeout)
	}
	woken := 0
	waitFor(t, 2*time.Minute, func() string {
		var runs infrav1.TerraformRunList
		must(t, c.List(ctx, &runs, client.InNamespace(ns)))
		woken = 0
		for _, r := range runs.Items {
			if r.Annotations[infrav1.SourcePushAnnotation] == commitB {
				woken++
			}
		}
		if woken < fanOutRuns {
			return ""
		}
		return "all"
	})
	all := time.Since(sent)
	t.Logf("one push of main: answered 202 in %s (the forge hangs up at %s); woke %d of %d TerraformRuns in %s",
		answered.Round(time.Millisecond), forgeTimeout, woken, fanOutRuns, all.Round(time.Millisecond))

	var rcv infrav1.TerraformRunReceiver
	waitFor(t, 30*time.Second, func() string {
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "forge"}, &rcv))
		if len(rcv.Status.Pushes) != 1 || rcv.Status.Pushes[0].State != infrav1.PushDone {
			return ""
		}
		return "done"
	})
	if p := rcv.Status.Pushes[0]; p.Woken != fanOutRuns || p.Delivery != "delivery-1" {
		t.Errorf("status.pushes[0]: woken %d delivery %q, want %d delivery-1", p.Woken, p.Delivery, fanOutRuns)
	}

	versions := runVersions(t, c, ns)
	for _, delivery := range []string{"delivery-1", "a-fresh-id"} {
		if code, answer := postGitea(t, srv.Address(), path, body, delivery); code != http.StatusOK || !strings.Contains(answer, `"result":"duplicate"`) {
			t.Errorf("a replay of the push as %s: %d %s, want 200 duplicate", delivery, code, answer)
		}
	}
	time.Sleep(2 * time.Second)
	if got := runVersions(t, c, ns); got != versions {
		t.Errorf("a replayed delivery changed TerraformRuns")
	}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "forge"}, &rcv))
	if len(rcv.Status.Pushes) != 1 {
		t.Errorf("a replayed delivery was recorded: %d pushes, want 1", len(rcv.Status.Pushes))
	}
	t.Logf("two replays of the delivery (its id, and a fresh id): answered 200 duplicate, no TerraformRun changed")
}

// startReceiverManager starts a manager with only the receivers' parts,
// at the manager's default client rate, and returns its webhook server.
func startReceiverManager(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme) *receiver.Server {
	t.Helper()
	rc := *cfg
	rc.QPS, rc.Burst = 50, 100
	mgr, err := ctrl.NewManager(&rc, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, Controller: ctrlConfigSkipNameValidation()})
	must(t, err)
	srv := &receiver.Server{Addr: "127.0.0.1:0"}
	must(t, receiver.Setup(mgr, srv))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, 30*time.Second, srv.Address)
	return srv
}

func postGitea(t *testing.T, addr, path string, body []byte, delivery string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, bytes.NewReader(body))
	must(t, err)
	req.Header.Set("X-Gitea-Event", "push")
	req.Header.Set("X-Gitea-Delivery", delivery)
	req.Header.Set("X-Gitea-Signature", receiver.Sign(body, []byte(pushToken)))
	resp, err := (&http.Client{Timeout: forgeTimeout}).Do(req)
	if err != nil {
		t.Fatalf("the forge gave up: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// runVersions is the resource versions of the namespace's runs, joined.
func runVersions(t *testing.T, c client.Client, ns string) string {
	t.Helper()
	var runs infrav1.TerraformRunList
	must(t, c.List(context.Background(), &runs, client.InNamespace(ns)))
	var b strings.Builder
	for _, r := range runs.Items {
		b.WriteString(r.ResourceVersion + ",")
	}
	return b.String()
}

func waitFor(t *testing.T, timeout time.Duration, f func() string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if v := f(); v != "" {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
