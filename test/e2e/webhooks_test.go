//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// The forge of the push-webhook scenario: a real Gitea (built from the
// module proxy by test/e2e/build.sh), run on the host beside the cluster,
// as an unprivileged user (Gitea refuses root), with its SQLite database.
// Step pods clone from it at the node's address; it delivers its webhooks
// to the manager's webhook Service.
const (
	giteaUser     = "opr8r"
	giteaPassword = "e2e-Passw0rd!"
	hookToken     = "e2e-receiver-token-0123456789abcdef"
	notifyToken   = "e2e-notifier-hmac-key"
)

type forge struct {
	url  string // http://<node IP>:<port>
	api  *gitea.Client
	stop func()
}

// startGitea runs Gitea from OPR8R_E2E_GITEA (its binary and static
// files) in a directory of its own, and makes its admin user.
func startGitea(t *testing.T, nodeIP string) *forge {
	t.Helper()
	src := mustEnv(t, "OPR8R_E2E_GITEA")
	dir, err := os.MkdirTemp("/var/tmp", "opr8r-e2e-gitea-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The cache is under root's home, which the unprivileged user cannot
	// read: copy the binary and its templates and options.
	if out, err := exec.Command("cp", "-r", filepath.Join(src, "gitea"), filepath.Join(src, "static"), dir+"/").CombinedOutput(); err != nil {
		t.Fatalf("copying gitea: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	url := fmt.Sprintf("http://%s:%d", nodeIP, port)
	ini := fmt.Sprintf(`APP_NAME = opr8r e2e
RUN_MODE = prod
RUN_USER = nobody
WORK_PATH = %[1]s
[server]
PROTOCOL = http
HTTP_ADDR = 0.0.0.0
HTTP_PORT = %[2]d
ROOT_URL = %[3]s/
DISABLE_SSH = true
OFFLINE_MODE = true
STATIC_ROOT_PATH = %[1]s/static
APP_DATA_PATH = %[1]s/data
LFS_START_SERVER = false
[database]
DB_TYPE = sqlite3
PATH = %[1]s/data/gitea.db
[security]
INSTALL_LOCK = true
SECRET_KEY = opr8r-e2e-gitea-secret-key
[service]
DISABLE_REGISTRATION = true
[webhook]
; the manager's webhook Service is on a private address
ALLOWED_HOST_LIST = *
DELIVER_TIMEOUT = 10
[log]
MODE = console
LEVEL = info
[repository]
ROOT = %[1]s/repos
[indexer]
ISSUE_INDEXER_TYPE = db
[mailer]
ENABLED = false
[actions]
ENABLED = false
`, dir, port, url)
	if err := os.MkdirAll(filepath.Join(dir, "custom", "conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "custom", "conf", "app.ini")
	if err := os.WriteFile(conf, []byte(ini), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", "-R", "65534:65534", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v\n%s", err, out)
	}
	giteaCmd := func(args ...string) *exec.Cmd {
		cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", filepath.Join(dir, "gitea"), "--config", conf}, args...)...)
		cmd.Dir = dir
		cmd.Env = []string{"HOME=" + dir, "GITEA_WORK_DIR=" + dir, "GITEA_CUSTOM=" + filepath.Join(dir, "custom"), "PATH=" + os.Getenv("PATH")}
		return cmd
	}
	logf, err := os.Create(filepath.Join(dir, "gitea.log"))
	if err != nil {
		t.Fatal(err)
	}
	web := giteaCmd("web")
	web.Stdout, web.Stderr = logf, logf
	if err := web.Start(); err != nil {
		t.Fatalf("starting gitea: %v", err)
	}
	f := &forge{url: url, stop: func() {
		_ = web.Process.Kill()
		_, _ = web.Process.Wait()
		_ = logf.Close()
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		} else {
			t.Logf("gitea's files and log are kept in %s", dir)
		}
	}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url + "/api/v1/version")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Logf("gitea %s at %s", strings.TrimSpace(string(b)), url)
				break
			}
		}
		if time.Now().After(deadline) {
			f.stop()
			log, _ := os.ReadFile(filepath.Join(dir, "gitea.log"))
			t.Fatalf("gitea did not answer at %s within 60s: %v\n%s", url, err, log)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if out, err := giteaCmd("admin", "user", "create", "--username", giteaUser, "--password", giteaPassword, "--email", "opr8r@example.com", "--admin", "--must-change-password=false").CombinedOutput(); err != nil {
		f.stop()
		t.Fatalf("gitea admin user create: %v\n%s", err, out)
	}
	if f.api, err = gitea.NewClient(url, gitea.SetBasicAuth(giteaUser, giteaPassword)); err != nil {
		f.stop()
		t.Fatal(err)
	}
	return f
}

// nodeIP is the node's InternalIP, where pods reach the host's servers.
func (e *env) nodeIP(t *testing.T) string {
	var nodes corev1.NodeList
	if err := e.c.List(context.Background(), &nodes); err != nil || len(nodes.Items) == 0 {
		t.Fatalf("listing nodes: %v", err)
	}
	for _, a := range nodes.Items[0].Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	t.Fatal("the node has no InternalIP")
	return ""
}

// webhookAddress is the manager's webhook Service, host:port.
func (e *env) webhookAddress(t *testing.T) string {
	var svcs corev1.ServiceList
	if err := e.c.List(context.Background(), &svcs, client.InNamespace("opr8r-system")); err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		for _, p := range s.Spec.Ports {
			if p.Name == "webhook" {
				return fmt.Sprintf("%s:%d", s.Spec.ClusterIP, p.Port)
			}
		}
	}
	t.Fatal("no Service with a webhook port in opr8r-system")
	return ""
}

// delivery is one notice the sink got.
type delivery struct {
	Event  infrav1.NotifyEvent `json:"event"`
	Name   string              `json:"name"`
	RunID  string              `json:"runID"`
	Commit string              `json:"commit"`
	Plan   *struct {
		Add, Change, Destroy int32
	} `json:"plan"`
	signed bool
	body   string
}

// notifySink is the notifier's destination: a server of the test process
// on the node's address, which records each delivery and checks its
// signature.
type notifySink struct {
	mu  sync.Mutex
	got []delivery
	url string
}

func startSink(t *testing.T, nodeIP string) *notifySink {
	s := &notifySink{}
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	s.url = fmt.Sprintf("http://%s:%d/opr8r", nodeIP, l.Addr().(*net.TCPAddr).Port)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		m := hmac.New(sha256.New, []byte(notifyToken))
		m.Write(b)
		d := delivery{body: string(b), signed: r.Header.Get("X-Opr8r-Signature") == "sha256="+hex.EncodeToString(m.Sum(nil))}
		_ = json.Unmarshal(b, &d)
		s.mu.Lock()
		s.got = append(s.got, d)
		s.mu.Unlock()
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

func (s *notifySink) of(name string) []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []delivery
	for _, d := range s.got {
		if d.Name == name {
			out = append(out, d)
		}
	}
	return out
}

const gitModule = `resource "terraform_data" "release" { input = "%s" }
output "release" { value = terraform_data.release.output }
`

// TestPushWebhooks: a real Gitea's push webhook reaches the manager's
// receiver, and the TerraformRuns tracking the branch plan and apply the
// new commit within seconds, with spec.interval unset; Gitea's redelivery
// of a push of the commit already applied starts nothing; forged webhooks
// are refused; each run's happenings reach a notifier's destination,
// signed. The receiver and the notifier are made by mallory, an editor of
// the namespace (a tenant).
func TestPushWebhooks(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ip := e.nodeIP(t)
	f := startGitea(t, ip)
	// After the parallel subtests, which run once this function returns.
	t.Cleanup(f.stop)
	sink := startSink(t, ip)
	hook := e.webhookAddress(t)
	// The manager's own pod address, which mallory aims a notifier at.
	var pods corev1.PodList
	if err := e.c.List(context.Background(), &pods, client.InNamespace("opr8r-system"), client.MatchingLabels{"app.kubernetes.io/name": "opr8r"}); err != nil || len(pods.Items) == 0 || pods.Items[0].Status.PodIP == "" {
		t.Fatalf("the manager's pod: %v (%d pods)", err, len(pods.Items))
	}
	managerIP := pods.Items[0].Status.PodIP

	// The receiver and the notifier, as a tenant.
	out, err := e.as(mallory, fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: e2e-forge-webhook, namespace: %[1]s}
stringData: {token: %[2]s}
---
apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRunReceiver
metadata: {name: e2e-gitea, namespace: %[1]s}
spec:
  type: Gitea
  secretRef: {name: e2e-forge-webhook}
  runSelector: {matchLabels: {e2e-webhooks: "on"}}
---
apiVersion: v1
kind: Secret
metadata: {name: e2e-notifier, namespace: %[1]s}
stringData: {address: %[3]s, token: %[4]s}
---
apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRunNotifier
metadata: {name: e2e-team, namespace: %[1]s}
spec:
  type: Webhook
  secretRef: {name: e2e-notifier}
  runSelector: {matchLabels: {e2e-webhooks: "on"}}
---
# mallory's attempts to make the manager reach what she must not: its own
# endpoints (loopback) and a cloud metadata service (link-local).
apiVersion: v1
kind: Secret
metadata: {name: e2e-notifier-loopback, namespace: %[1]s}
stringData: {address: "http://127.0.0.1:8081/healthz"}
---
apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRunNotifier
metadata: {name: e2e-loopback, namespace: %[1]s}
spec:
  type: Webhook
  secretRef: {name: e2e-notifier-loopback}
  events: [Applied]
  runSelector: {matchLabels: {e2e-webhooks: "on"}}
---
apiVersion: v1
kind: Secret
metadata: {name: e2e-notifier-metadata, namespace: %[1]s}
stringData: {address: "http://169.254.169.254/latest/meta-data/"}
---
apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRunNotifier
metadata: {name: e2e-metadata, namespace: %[1]s}
spec:
  type: Slack
  secretRef: {name: e2e-notifier-metadata}
  events: [Applied]
  runSelector: {matchLabels: {e2e-webhooks: "on"}}
---
# ... the manager's own pod address (its health port) ...
apiVersion: v1
kind: Secret
metadata: {name: e2e-notifier-ownpod, namespace: %[1]s}
stringData: {address: "http://%[5]s:8081/healthz"}
---
apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRunNotifier
metadata: {name: e2e-ownpod, namespace: %[1]s}
spec:
  type: Webhook
  secretRef: {name: e2e-notifier-ownpod}
  events: [Applied]
  runSelector: {matchLabels: {e2e-webhooks: "on"}}
---
# ... and a ClusterIP Service of the cluster (the state API's).
apiVersion: v1
kind: Secret
metadata: {name: e2e-notifier-clusterip, namespace: %[1]s}
stringData: {address: "https://%[6]s:9444/api/v1/namespaces/%[1]s/secrets"}
---
apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRunNotifier
metadata: {name: e2e-clusterip, namespace: %[1]s}
spec:
  type: Webhook
  secretRef: {name: e2e-notifier-clusterip}
  events: [Applied]
  runSelector: {matchLabels: {e2e-webhooks: "on"}}
`, ns, hookToken, sink.url, notifyToken, managerIP, stateAPIIP), e.kubectl, "apply", "-f", "-")
	t.Logf("$ (as %s) kubectl apply receiver and notifier\n%s", mallory, out)
	if err != nil {
		t.Fatalf("an editor of the namespace could not make a receiver and a notifier: %v", err)
	}
	var rcv infrav1.TerraformRunReceiver
	deadline := time.Now().Add(time.Minute)
	for {
		if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "e2e-gitea"}, &rcv); err == nil && rcv.Status.WebhookPath != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver has no path after a minute: %+v", rcv.Status)
		}
		time.Sleep(time.Second)
	}
	if !apimeta.IsStatusConditionTrue(rcv.Status.Conditions, infrav1.ReadyCondition) {
		t.Fatalf("receiver not Ready: %+v", rcv.Status.Conditions)
	}
	hookURL := "http://" + hook + rcv.Status.WebhookPath

	t.Run("forged webhooks are refused", func(t *testing.T) {
		body := []byte(`{"ref":"refs/heads/main","after":"` + strings.Repeat("a", 40) + `","repository":{"clone_url":"` + f.url + `/opr8r/push-argo.git"}}`)
		for what, sig := range map[string]string{"unsigned": "", "signed with another key": sign(body, "not-the-receiver-token-at-all")} {
			code, answer := postWebhook(t, hookURL, body, sig)
			t.Logf("%s: %d %s", what, code, answer)
			if code != http.StatusUnauthorized || !strings.Contains(answer, `"result":"refused"`) {
				t.Errorf("%s webhook: %d %s, want 401 refused", what, code, answer)
			}
		}
		if code, _ := postWebhook(t, "http://"+hook+"/hook/"+strings.Repeat("0", 64), body, sign(body, hookToken)); code != http.StatusNotFound {
			t.Errorf("a webhook to an unknown path: %d, want 404", code)
		}
	})

	t.Run("engines", func(t *testing.T) {
		for _, engine := range allEngines() {
			t.Run(engine, func(t *testing.T) {
				t.Parallel()
				pushScenario(t, e, f, sink, hookURL, engine)
			})
		}
	})

	// The applies were also for mallory's loopback and metadata notifiers:
	// the manager refused to connect, and says so in their status.
	for name, want := range map[string]string{"e2e-loopback": "a loopback address", "e2e-metadata": "a link-local address",
		"e2e-ownpod": "the manager's own pod address", "e2e-clusterip": "the cluster's Service range"} {
		var nf infrav1.TerraformRunNotifier
		if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &nf); err != nil {
			t.Fatal(err)
		}
		c := apimeta.FindStatusCondition(nf.Status.Conditions, infrav1.ReadyCondition)
		if c == nil || c.Status != "False" || c.Reason != "DeliveryFailed" || !strings.Contains(c.Message, want) || nf.Status.LastDelivery == nil || nf.Status.LastDelivery.Attempts != 1 {
			t.Errorf("notifier %s: %+v, last delivery %+v; want Ready False, DeliveryFailed: %s, after one attempt", name, c, nf.Status.LastDelivery, want)
		} else {
			t.Logf("notifier %s: %s", name, c.Message)
		}
	}
}

// stateAPIIP is the state API Service's fixed address on the e2e cluster
// (test/e2e/cluster.sh STATE_API_IP).
const stateAPIIP = "10.96.200.202"

func sign(body []byte, key string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// postDelivery posts a Gitea push with a delivery id, as Gitea does.
func postDelivery(t *testing.T, url string, body []byte, sig, delivery string) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("X-Gitea-Event", "push")
	req.Header.Set("X-Gitea-Delivery", delivery)
	req.Header.Set("X-Gitea-Signature", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("posting to the receiver: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func postWebhook(t *testing.T, url string, body []byte, sig string) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("X-Gitea-Event", "push")
	if sig != "" {
		req.Header.Set("X-Gitea-Signature", sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("posting to the receiver: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func pushScenario(t *testing.T, e *env, f *forge, sink *notifySink, hookURL, engine string) {
	repo, name := "push-"+engine, "push-"+engine
	if _, _, err := f.api.CreateRepo(gitea.CreateRepoOption{Name: repo, AutoInit: true, DefaultBranch: "main"}); err != nil {
		t.Fatalf("creating the repository: %v", err)
	}
	first, _, err := f.api.CreateFile(giteaUser, repo, "main.tf", gitea.CreateFileOptions{
		FileOptions: gitea.FileOptions{Message: "release 1", BranchName: "main"},
		Content:     base64.StdEncoding.EncodeToString(fmt.Appendf(nil, gitModule, "1")),
	})
	if err != nil {
		t.Fatalf("committing main.tf: %v", err)
	}
	h, _, err := f.api.CreateRepoHook(giteaUser, repo, gitea.CreateHookOption{
		Type: gitea.HookTypeGitea, Active: true, Events: []string{"push"}, BranchFilter: "*",
		Config: map[string]string{"url": hookURL, "content_type": "json", "secret": hookToken},
	})
	if err != nil {
		t.Fatalf("adding the webhook: %v", err)
	}
	e.sh(t, fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: %s, namespace: %s, labels: {e2e-webhooks: "on"}}
spec:
  engine: %s
  source: {git: {url: %s/%s/%s.git, ref: main}}
  approval: {mode: Auto}
  deletionPolicy: Retain
  runner: {workspace: {size: 64Mi}}
`, name, ns, engine, f.url, giteaUser, repo), e.kubectl, "apply", "-f", "-")
	defer e.sh(t, "", e.kubectl, "delete", "terraformrun", name, "-n", ns, "--wait=false")
	run := e.waitFor(t, name, "the first commit applied", 10*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.Phase == infrav1.RunSucceeded
	})
	if run.Status.Run.Commit != first.Commit.SHA {
		t.Fatalf("the first run applied %s, want Gitea's commit %s", run.Status.Run.Commit, first.Commit.SHA)
	}
	firstID := run.Status.Run.ID

	// Gitea's test delivery sends a push of the branch's head: the commit
	// already applied. It is taken, and starts nothing.
	resp, err := http.Post(fmt.Sprintf("%s/api/v1/repos/%s/%s/hooks/%d/tests", strings.Replace(f.url, "://", "://"+giteaUser+":"+strings.ReplaceAll(giteaPassword, "!", "%21")+"@", 1), giteaUser, repo, h.ID), "application/json", nil)
	if err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("gitea's test delivery: %v %v", err, resp)
	}
	_ = resp.Body.Close()
	e.waitFor(t, name, "Gitea's push of the applied commit handled", time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.LastHandledPush == first.Commit.SHA
	})
	time.Sleep(5 * time.Second)
	if got := e.get(t, name).Status.Run.ID; got != firstID {
		t.Fatalf("a push of the commit already applied started run %s", got)
	}

	// A commit on main: Gitea's webhook, not an interval, starts the run.
	content, _, err := f.api.GetContents(giteaUser, repo, "main", "main.tf")
	if err != nil {
		t.Fatal(err)
	}
	pushed := time.Now()
	second, _, err := f.api.UpdateFile(giteaUser, repo, "main.tf", gitea.UpdateFileOptions{
		FileOptions: gitea.FileOptions{Message: "release 2", BranchName: "main"}, SHA: content.SHA,
		Content: base64.StdEncoding.EncodeToString(fmt.Appendf(nil, gitModule, "2")),
	})
	if err != nil {
		t.Fatalf("committing release 2: %v", err)
	}
	run = e.waitFor(t, name, "a run of the pushed commit", 2*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.ID != firstID
	})
	started := run.Status.Run.StartedAt.Time
	if run.Status.Run.Trigger != infrav1.TriggerSourceChange || !strings.Contains(run.Status.Run.TriggerDetail, second.Commit.SHA[:12]) {
		t.Errorf("the new run's trigger %s (%s), want SourceChange naming %s", run.Status.Run.Trigger, run.Status.Run.TriggerDetail, second.Commit.SHA[:12])
	}
	run = e.waitFor(t, name, "the pushed commit applied", 10*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.ID != firstID && r.Status.Run.Phase == infrav1.RunSucceeded
	})
	if run.Status.Run.Commit != second.Commit.SHA {
		t.Errorf("the run applied %s, want the pushed commit %s", run.Status.Run.Commit, second.Commit.SHA)
	}
	t.Logf("PUSH %s: push → run started %.1fs, → applied %.1fs (spec.interval unset)", engine,
		started.Sub(pushed).Seconds(), run.Status.Run.FinishedAt.Sub(pushed).Seconds())
	if d := started.Sub(pushed); d > 30*time.Second {
		t.Errorf("the push took %s to start a run, want seconds", d)
	}

	// Someone who captured signed deliveries replays one, and sends the
	// first push late, after the second: neither moves the run back nor
	// starts a run.
	cloneURL := f.url + "/" + giteaUser + "/" + repo + ".git"
	late := []byte(fmt.Sprintf(`{"ref":"refs/heads/main","before":%q,"after":%q,"repository":{"clone_url":%q},"commits":[{"id":%q}]}`,
		first.Commit.Parents[0].SHA, first.Commit.SHA, cloneURL, first.Commit.SHA))
	code, answer := postDelivery(t, hookURL, late, sign(late, hookToken), "late-"+engine)
	t.Logf("the first push, late: %d %s", code, answer)
	if !strings.Contains(answer, `"result":"stale"`) {
		t.Errorf("a late push of the first commit after the second: %d %s, want stale", code, answer)
	}
	code, answer = postDelivery(t, hookURL, late, sign(late, hookToken), "late-"+engine)
	t.Logf("the same delivery, replayed: %d %s", code, answer)
	if code != http.StatusOK || !strings.Contains(answer, `"result":"duplicate"`) {
		t.Errorf("a replayed delivery: %d %s, want 200 duplicate", code, answer)
	}
	time.Sleep(5 * time.Second)
	if r := e.get(t, name); r.Status.Run.ID != run.Status.Run.ID || r.Status.LastHandledPush != second.Commit.SHA {
		t.Errorf("after a late and a replayed push: run %s, last handled push %s; want run %s, %s", r.Status.Run.ID, r.Status.LastHandledPush, run.Status.Run.ID, second.Commit.SHA)
	}

	// The notifier's destination got each apply, signed, with its plan.
	deadline := time.Now().Add(time.Minute)
	for len(sink.of(name)) < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Second)
	}
	got := sink.of(name)
	if len(got) != 2 {
		t.Fatalf("the notifier delivered %d notices for %s, want 2 (Applied, Applied): %+v", len(got), name, got)
	}
	for i, d := range got {
		wantID, wantCommit := firstID, first.Commit.SHA
		if i == 1 {
			wantID, wantCommit = run.Status.Run.ID, second.Commit.SHA
		}
		if d.Event != infrav1.NotifyApplied || !d.signed || d.RunID != wantID || d.Commit != wantCommit || d.Plan == nil || d.Plan.Add+d.Plan.Change == 0 {
			t.Errorf("notice %d: %s", i, d.body)
		}
		if strings.Contains(d.body, hookToken) || strings.Contains(d.body, notifyToken) {
			t.Errorf("notice %d carries a secret: %s", i, d.body)
		}
	}
	var nf infrav1.TerraformRunNotifier
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "e2e-team"}, &nf); err != nil {
		t.Fatal(err)
	}
	if !apimeta.IsStatusConditionTrue(nf.Status.Conditions, infrav1.ReadyCondition) {
		t.Errorf("notifier not Ready: %+v", nf.Status)
	}
}

// TestPullRequestPreviews: the pull-request flow on a real Gitea. A pull
// request against a tracked branch gets a plan-only preview of its head:
// a commit status and exactly one comment with the plan's summary and the
// resources it changes; a push to it updates that comment and the status;
// closing another pull request removes its preview and marks its comment
// closed; merging is a push to the branch, which the tracked run plans at
// once and applies under its approval policy (Manual: kubectl tfrun
// approve).
func TestPullRequestPreviews(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ip := e.nodeIP(t)
	f := startGitea(t, ip)
	t.Cleanup(f.stop)
	hook := e.webhookAddress(t)
	sink := startSink(t, ip)
	tok, _, err := f.api.CreateAccessToken(gitea.CreateAccessTokenOption{Name: "opr8r-previews", Scopes: []gitea.AccessTokenScope{"write:repository", "write:issue"}})
	if err != nil {
		t.Fatalf("making the previews' API token: %v", err)
	}
	out, err := e.as(mallory, fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: e2e-pr-webhook, namespace: %[1]s}
stringData: {token: %[2]s}
---
apiVersion: v1
kind: Secret
metadata: {name: e2e-pr-api, namespace: %[1]s}
stringData: {token: %[3]s}
---
apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRunReceiver
metadata: {name: e2e-gitea-prs, namespace: %[1]s}
spec:
  type: Gitea
  events: [push, pull_request]
  secretRef: {name: e2e-pr-webhook}
  previews:
    apiURL: %[8]s
    tokenSecretRef: {name: e2e-pr-api}
    dashboardURLs:
      argo: "%[4]s/workflows/{namespace}/{child}"
      tekton: "%[5]s/#/namespaces/{namespace}/pipelineruns/{child}"
  runSelector: {matchLabels: {e2e-previews: "on"}}
---
apiVersion: v1
kind: Secret
metadata: {name: e2e-pr-notifier, namespace: %[1]s}
stringData: {address: %[6]s, token: %[7]s}
---
# The previews' failures, to the team's hook.
apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRunNotifier
metadata: {name: e2e-previews, namespace: %[1]s}
spec:
  type: Webhook
  secretRef: {name: e2e-pr-notifier}
  events: [Failed]
  runSelector: {matchExpressions: [{key: preview.opr8r.io/of, operator: Exists}]}
---
# The tracked runs' plans waiting and applies.
apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRunNotifier
metadata: {name: e2e-tracked, namespace: %[1]s}
spec:
  type: Webhook
  secretRef: {name: e2e-pr-notifier}
  events: [ApprovalRequired, Applied]
  runSelector: {matchLabels: {e2e-previews: "on"}}
`, ns, hookToken, tok.Token, mustEnv(t, "OPR8R_E2E_ARGO_UI"), mustEnv(t, "OPR8R_E2E_TEKTON_VIEW"), sink.url, notifyToken, f.url), e.kubectl, "apply", "-f", "-")
	t.Logf("$ (as %s) kubectl apply the previews' receiver\n%s", mallory, out)
	if err != nil {
		t.Fatalf("an editor of the namespace could not make a receiver: %v", err)
	}
	var rcv infrav1.TerraformRunReceiver
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "e2e-gitea-prs"}, &rcv); err == nil && rcv.Status.WebhookPath != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver has no path after a minute: %+v", rcv.Status)
		}
	}
	for _, engine := range []string{"argo", "tekton"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			previewScenario(t, e, f, sink, "http://"+hook+rcv.Status.WebhookPath, engine, tok.Token)
		})
	}
}

// previewComments are the comments opr8r made on a pull request.
func previewComments(t *testing.T, f *forge, repo string, number int64) []*gitea.Comment {
	cs, _, err := f.api.ListIssueComments(giteaUser, repo, number, gitea.ListIssueCommentOptions{})
	if err != nil {
		t.Fatalf("listing the comments of #%d: %v", number, err)
	}
	var out []*gitea.Comment
	for _, c := range cs {
		if strings.Contains(c.Body, "<!-- opr8r-preview ") {
			out = append(out, c)
		}
	}
	return out
}

// waitStatus waits for opr8r's commit status on sha to be state, and
// returns its description.
func waitStatus(t *testing.T, f *forge, repo, sha, context, state string) string {
	t.Helper()
	deadline := time.Now().Add(8 * time.Minute)
	var last string
	for {
		sts, _, err := f.api.ListStatuses(giteaUser, repo, sha, gitea.ListStatusesOption{})
		if err == nil {
			for _, s := range sts { // newest first
				if s.Context == context {
					last = string(s.State) + ": " + s.Description
					if string(s.State) == state {
						return s.Description
					}
					break
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("commit status %s on %s: %q after 8 minutes, want %s", context, sha[:12], last, state)
		}
		time.Sleep(2 * time.Second)
	}
}

func commitFile(t *testing.T, f *forge, repo, branch, newBranch, release string) string {
	t.Helper()
	content, _, err := f.api.GetContents(giteaUser, repo, branch, "main.tf")
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := f.api.UpdateFile(giteaUser, repo, "main.tf", gitea.UpdateFileOptions{
		FileOptions: gitea.FileOptions{Message: "release " + release, BranchName: branch, NewBranchName: newBranch}, SHA: content.SHA,
		Content: base64.StdEncoding.EncodeToString(fmt.Appendf(nil, gitModule, release)),
	})
	if err != nil {
		t.Fatalf("committing release %s: %v", release, err)
	}
	return r.Commit.SHA
}

func previewScenario(t *testing.T, e *env, f *forge, sink *notifySink, hookURL, engine, apiToken string) {
	repo, name := "pr-"+engine, "pr-"+engine
	if _, _, err := f.api.CreateRepo(gitea.CreateRepoOption{Name: repo, AutoInit: true, DefaultBranch: "main"}); err != nil {
		t.Fatalf("creating the repository: %v", err)
	}
	if _, _, err := f.api.CreateFile(giteaUser, repo, "main.tf", gitea.CreateFileOptions{
		FileOptions: gitea.FileOptions{Message: "release 1", BranchName: "main"},
		Content:     base64.StdEncoding.EncodeToString(fmt.Appendf(nil, gitModule, "1")),
	}); err != nil {
		t.Fatalf("committing main.tf: %v", err)
	}
	if _, _, err := f.api.CreateRepoHook(giteaUser, repo, gitea.CreateHookOption{
		Type: gitea.HookTypeGitea, Active: true, Events: []string{"push", "pull_request", "pull_request_sync"}, BranchFilter: "*",
		Config: map[string]string{"url": hookURL, "content_type": "json", "secret": hookToken},
	}); err != nil {
		t.Fatalf("adding the webhook: %v", err)
	}
	e.sh(t, fmt.Sprintf(`apiVersion: infra.opr8r.io/v1alpha1
kind: TerraformRun
metadata: {name: %s, namespace: %s, labels: {e2e-previews: "on"}}
spec:
  engine: %s
  source: {git: {url: %s/%s/%s.git, ref: main}}
  approval: {mode: Manual}
  deletionPolicy: Retain
  runner: {workspace: {size: 64Mi}}
`, name, ns, engine, f.url, giteaUser, repo), e.kubectl, "apply", "-f", "-")
	defer e.sh(t, "", e.kubectl, "delete", "terraformrun", name, "-n", ns, "--wait=false")
	// (On a cluster kept from an earlier run, its state is there already:
	// no changes, nothing to approve.)
	if r := e.waitFor(t, name, "the first plan", 10*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && (r.Status.Run.Phase == infrav1.RunAwaitingApproval || r.Status.Run.Phase == infrav1.RunSucceeded)
	}); r.Status.Run.Phase == infrav1.RunAwaitingApproval {
		e.sh(t, "", e.tfrun, "approve", name, "-n", ns)
	}
	first := e.waitFor(t, name, "release 1 applied", 10*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.Phase == infrav1.RunSucceeded
	})

	// Pull request 1: release 2 on a branch.
	head := commitFile(t, f, repo, "main", "feature", "2")
	pr1, _, err := f.api.CreatePullRequest(giteaUser, repo, gitea.CreatePullRequestOption{Head: "feature", Base: "main", Title: "release 2"})
	if err != nil {
		t.Fatalf("opening pull request 1: %v", err)
	}
	p1 := previewNameOf(name, pr1.Index)
	ctx1 := "opr8r/" + ns + "/" + p1
	desc := waitStatus(t, f, repo, head, ctx1, "success")
	if desc != "plan +0 ~1 -0" {
		t.Errorf("the preview's status says %q, want plan +0 ~1 -0", desc)
	}
	// The status and the comment are two writes to the forge, the status
	// first: the comment may still say "Planning…" a moment after the
	// status says success (a clean-clone CI run on 2026-12-07).
	cs := previewComments(t, f, repo, pr1.Index)
	hasPlan := func() bool {
		return len(cs) == 1 && strings.Contains(cs[0].Body, "**Plan: 0 to add, 1 to change, 0 to destroy**") && strings.Contains(cs[0].Body, "| update | ` terraform_data.release ` |") && strings.Contains(cs[0].Body, head[:12])
	}
	for deadline := time.Now().Add(30 * time.Second); !hasPlan() && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		cs = previewComments(t, f, repo, pr1.Index)
	}
	if !hasPlan() {
		t.Fatalf("comments on #%d: %d, want one with the plan: %v", pr1.Index, len(cs), commentBodies(cs))
	}
	t.Logf("comment on #%d:\n%s", pr1.Index, cs[0].Body)
	link := map[string]string{"argo": os.Getenv("OPR8R_E2E_ARGO_UI") + "/workflows/" + ns + "/" + p1 + "-plan-", "tekton": os.Getenv("OPR8R_E2E_TEKTON_VIEW") + "/#/namespaces/" + ns + "/pipelineruns/" + p1 + "-plan-"}[engine]
	if !strings.Contains(cs[0].Body, "[The run in the "+engine+" dashboard](<"+link) {
		t.Errorf("the comment does not link to the run in the %s dashboard (%s…)", engine, link)
	}
	commentID := cs[0].ID
	if got := e.get(t, name).Status.Run.ID; got != first.Status.Run.ID {
		t.Fatalf("a pull request started a run of the tracked run: %s", got)
	}

	// A push to the pull request: the same comment, edited; the status
	// follows the new head.
	head2 := commitFile(t, f, repo, "feature", "", "3")
	waitStatus(t, f, repo, head2, ctx1, "success")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Second) {
		cs = previewComments(t, f, repo, pr1.Index)
		if len(cs) == 1 && strings.Contains(cs[0].Body, head2[:12]) && strings.Contains(cs[0].Body, "**Plan: 0 to add, 1 to change") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a push to #%d: comments %v, want the one comment edited for %s", pr1.Index, commentBodies(cs), head2[:12])
		}
	}
	if cs[0].ID != commentID {
		t.Errorf("the push made comment %d, want comment %d edited", cs[0].ID, commentID)
	}

	// Pull request 3 breaks the module: its status fails with terraform's
	// error, its comment says so, and the previews' notifier is told.
	broken := commitBroken(t, f, repo, "broken")
	pr3, _, err := f.api.CreatePullRequest(giteaUser, repo, gitea.CreatePullRequestOption{Head: "broken", Base: "main", Title: "a typo"})
	if err != nil {
		t.Fatalf("opening pull request 3: %v", err)
	}
	p3 := previewNameOf(name, pr3.Index)
	failed := waitStatus(t, f, repo, broken, "opr8r/"+ns+"/"+p3, "failure")
	cs3 := previewComments(t, f, repo, pr3.Index)
	for deadline := time.Now().Add(30 * time.Second); !(len(cs3) == 1 && strings.Contains(cs3[0].Body, "**The plan failed**")) && time.Now().Before(deadline); {
		time.Sleep(time.Second) // the comment follows the status (above)
		cs3 = previewComments(t, f, repo, pr3.Index)
	}
	if !strings.Contains(failed, "Unsupported argument") || len(cs3) != 1 || !strings.Contains(cs3[0].Body, "**The plan failed**") || !strings.Contains(cs3[0].Body, "Unsupported argument") {
		t.Errorf("a broken pull request: status %q, comments %v; want terraform's error in both", failed, commentBodies(cs3))
	}
	for deadline := time.Now().Add(time.Minute); len(sink.of(p3)) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Second)
	}
	if got := sink.of(p3); len(got) != 1 || got[0].Event != infrav1.NotifyFailed || !got[0].signed {
		t.Errorf("the previews' notifier got %+v for %s, want one signed Failed", got, p3)
	}

	// Pull request 4 is an attack: its module reads the forge token's
	// Secret with the step pod's own token and with the state API's, and
	// would print it. The preview fails with "forbidden", the token goes
	// nowhere, and the tracked run's state is untouched.
	stateName := "tfstate-default-" + name
	var before, after corev1.Secret
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: stateName}, &before); err != nil {
		t.Fatalf("the tracked run's state: %v", err)
	}
	evil := commitModule(t, f, repo, "evil", fmt.Sprintf(attackModule, ns, "e2e-pr-api"))
	pr4, _, err := f.api.CreatePullRequest(giteaUser, repo, gitea.CreatePullRequestOption{Head: "evil", Base: "main", Title: "read the namespace's Secrets"})
	if err != nil {
		t.Fatalf("opening pull request 4: %v", err)
	}
	p4 := previewNameOf(name, pr4.Index)
	attacked := waitStatus(t, f, repo, evil, "opr8r/"+ns+"/"+p4, "failure")
	cs4 := previewComments(t, f, repo, pr4.Index)
	for deadline := time.Now().Add(30 * time.Second); !(len(cs4) == 1 && strings.Contains(cs4[0].Body, "**The plan failed**")) && time.Now().Before(deadline); {
		time.Sleep(time.Second)
		cs4 = previewComments(t, f, repo, pr4.Index)
	}
	t.Logf("the attacking pull request #%d: status %q\n%s", pr4.Index, attacked, commentBodies(cs4))
	if len(cs4) != 1 || !strings.Contains(strings.ToLower(cs4[0].Body), "forbidden") {
		t.Errorf("pull request #%d read the namespace's Secrets, or failed otherwise: %v", pr4.Index, commentBodies(cs4))
	}
	for _, c := range cs4 {
		if strings.Contains(c.Body, apiToken) || strings.Contains(c.Body, hookToken) {
			t.Errorf("the forge token reached the forge through pull request #%d", pr4.Index)
		}
	}
	if strings.Contains(attacked, apiToken) {
		t.Errorf("the forge token is in the commit status of #%d", pr4.Index)
	}
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: stateName}, &after); err != nil || after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the tracked run's state changed while pull request #%d planned: %v", pr4.Index, err)
	}
	// The preview's child plans without the state lock.
	child := e.get(t, p4).Status.Run
	if child == nil {
		t.Fatalf("preview %s has no run", p4)
	}
	if obj := e.sh(t, "", e.kubectl, "get", strings.ToLower(child.Child.Kind), child.Child.Name, "-n", ns, "-o", "json"); !strings.Contains(obj, "--no-state-lock") {
		t.Errorf("preview %s's %s %s does not plan without the state lock", p4, child.Child.Kind, child.Child.Name)
	}

	// Pull request 2, closed without merging: its preview goes, its
	// comment says so.
	other := commitFile(t, f, repo, "main", "other", "9")
	pr2, _, err := f.api.CreatePullRequest(giteaUser, repo, gitea.CreatePullRequestOption{Head: "other", Base: "main", Title: "release 9"})
	if err != nil {
		t.Fatalf("opening pull request 2: %v", err)
	}
	p2 := previewNameOf(name, pr2.Index)
	waitStatus(t, f, repo, other, "opr8r/"+ns+"/"+p2, "success")
	closed := gitea.StateClosed
	if _, _, err := f.api.EditPullRequest(giteaUser, repo, pr2.Index, gitea.EditPullRequestOption{State: &closed}); err != nil {
		t.Fatalf("closing pull request 2: %v", err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(2 * time.Second) {
		err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: p2}, &infrav1.TerraformRun{})
		cs2 := previewComments(t, f, repo, pr2.Index)
		if client.IgnoreNotFound(err) == nil && err != nil && len(cs2) == 1 && strings.Contains(cs2[0].Body, ": closed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after closing #%d: preview %s still there (%v) or comments %v", pr2.Index, p2, err, commentBodies(cs2))
		}
	}

	// Merging pull request 1 is a push to main: the tracked run plans the
	// merged commit at once (no interval), and applies it once approved.
	var merged bool
	var pushed time.Time
	for deadline := time.Now().Add(time.Minute); !merged; time.Sleep(2 * time.Second) {
		pushed = time.Now()
		if merged, _, err = f.api.MergePullRequest(giteaUser, repo, pr1.Index, gitea.MergePullRequestOption{Style: gitea.MergeStyleMerge}); err != nil || !merged {
			if time.Now().After(deadline) {
				t.Fatalf("merging #%d: %v", pr1.Index, err)
			}
		}
	}
	br, _, err := f.api.GetRepoBranch(giteaUser, repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	run := e.waitFor(t, name, "the merged commit planned", 5*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.ID != first.Status.Run.ID && r.Status.Run.Phase == infrav1.RunAwaitingApproval
	})
	t.Logf("PREVIEW %s: merge → run started %.1fs, → plan waiting %.1fs", engine, run.Status.Run.StartedAt.Sub(pushed).Seconds(), time.Since(pushed).Seconds())
	if run.Status.Run.Commit != br.Commit.ID || run.Status.Run.Trigger != infrav1.TriggerSourceChange {
		t.Errorf("the run after the merge planned %s (%s), want the merge commit %s (SourceChange)", run.Status.Run.Commit, run.Status.Run.Trigger, br.Commit.ID)
	}
	if d := run.Status.Run.StartedAt.Sub(pushed); d > 30*time.Second {
		t.Errorf("the merge took %s to start a run, want seconds", d)
	}
	e.sh(t, "", e.tfrun, "approve", name, "-n", ns)
	e.waitFor(t, name, "the merged commit applied", 10*time.Minute, func(r *infrav1.TerraformRun) bool {
		return r.Status.Run != nil && r.Status.Run.ID == run.Status.Run.ID && r.Status.Run.Phase == infrav1.RunSucceeded
	})
	// The tracked run's notifier: each plan waiting and each apply, signed.
	var evs []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		evs = evs[:0]
		for _, d := range sink.of(name) {
			evs = append(evs, fmt.Sprintf("%s/%s/signed=%v", d.Event, d.RunID, d.signed))
		}
		if len(evs) >= 2 || time.Now().After(deadline) {
			break
		}
	}
	want := []string{fmt.Sprintf("ApprovalRequired/%s/signed=true", run.Status.Run.ID), fmt.Sprintf("Applied/%s/signed=true", run.Status.Run.ID)}
	if len(evs) < 2 || strings.Join(evs[len(evs)-2:], " ") != strings.Join(want, " ") {
		t.Errorf("the tracked run's notifier got %v, want it to end with %v", evs, want)
	}
	// The merged pull request's preview is gone too.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Second) {
		if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: p1}, &infrav1.TerraformRun{}); client.IgnoreNotFound(err) == nil && err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the preview %s of the merged pull request is still there", p1)
		}
	}
	// Nothing secret reached the forge.
	for _, n := range []int64{pr1.Index, pr2.Index} {
		for _, c := range previewComments(t, f, repo, n) {
			if strings.Contains(c.Body, hookToken) || strings.Contains(c.Body, apiToken) {
				t.Errorf("a comment on #%d carries a secret", n)
			}
		}
	}
}

// attackModule is a pull request's module that reads a Secret of the
// namespace (%[1]s, Secret %[2]s) with the step pod's own token (in-cluster) and with
// the state API's kubeconfig, and prints it.
const attackModule = `terraform {
  required_providers {
    kubernetes = { source = "hashicorp/kubernetes" }
  }
}
provider "kubernetes" {
  alias            = "pod"
  load_config_file = false
}
provider "kubernetes" {
  alias            = "state"
  load_config_file = true
  config_path      = "/tmp/opr8r-state/kubeconfig"
}
data "kubernetes_secret" "pod" {
  provider = kubernetes.pod
  metadata {
    name      = "%[2]s"
    namespace = "%[1]s"
  }
}
data "kubernetes_secret" "state" {
  provider = kubernetes.state
  metadata {
    name      = "%[2]s"
    namespace = "%[1]s"
  }
}
output "pod" { value = data.kubernetes_secret.pod.data }
output "state" { value = data.kubernetes_secret.state.data }
`

// commitModule commits main.tf with content to a new branch from main.
func commitModule(t *testing.T, f *forge, repo, branch, content string) string {
	t.Helper()
	cur, _, err := f.api.GetContents(giteaUser, repo, "main", "main.tf")
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := f.api.UpdateFile(giteaUser, repo, "main.tf", gitea.UpdateFileOptions{
		FileOptions: gitea.FileOptions{Message: "read the namespace's Secrets", BranchName: "main", NewBranchName: branch}, SHA: cur.SHA,
		Content: base64.StdEncoding.EncodeToString([]byte(content)),
	})
	if err != nil {
		t.Fatalf("committing to %s: %v", branch, err)
	}
	return r.Commit.SHA
}

// commitBroken commits a main.tf with an argument terraform_data does not
// have to a new branch.
func commitBroken(t *testing.T, f *forge, repo, branch string) string {
	t.Helper()
	content, _, err := f.api.GetContents(giteaUser, repo, "main", "main.tf")
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := f.api.UpdateFile(giteaUser, repo, "main.tf", gitea.UpdateFileOptions{
		FileOptions: gitea.FileOptions{Message: "a typo", BranchName: "main", NewBranchName: branch}, SHA: content.SHA,
		Content: base64.StdEncoding.EncodeToString([]byte("resource \"terraform_data\" \"release\" {\n  inptu = \"4\"\n}\n")),
	})
	if err != nil {
		t.Fatalf("committing the typo: %v", err)
	}
	return r.Commit.SHA
}

func previewNameOf(run string, number int64) string { return fmt.Sprintf("%s-pr%d", run, number) }

func commentBodies(cs []*gitea.Comment) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Body)
	}
	return out
}
