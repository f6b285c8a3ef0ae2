package manager

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/opr8r/opr8r/pkg/controller"
	"github.com/opr8r/opr8r/pkg/queue"
	"github.com/opr8r/opr8r/test/envtestutil"
)

// freeAddress is a loopback address with a port nothing listens on.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// installRole creates the ClusterRole of a file of config/rbac and binds
// it to the service account ns/sa.
func installRole(t *testing.T, admin kubernetes.Interface, file, ns, sa string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "rbac", file))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(b, role); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name + "-" + sa},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	envtestutil.AwaitGrant(t, admin, "", "system:serviceaccount:"+ns+":"+sa, nil, role.Rules)
}

// serviceAccountToken creates the service account ns/name and returns a
// token of it.
func serviceAccountToken(t *testing.T, admin kubernetes.Interface, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// startMetrics starts a manager that serves only metrics, as o says,
// with the rights of cfg, and returns the endpoint's URL once it answers.
func startMetrics(t *testing.T, cfg *rest.Config, o MetricsOptions) string {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Metrics: o.ServerOptions()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	scheme := "http"
	if o.Secure {
		scheme = "https"
	}
	url := fmt.Sprintf("%s://%s/metrics", scheme, o.BindAddress)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("tcp", o.BindAddress); err == nil {
			c.Close()
			return url
		}
	}
	t.Fatalf("the metrics endpoint %s never answered", url)
	return ""
}

// scrape gets url with the bearer token (none when empty) and returns the
// status code and the body.
func scrape(t *testing.T, url, token string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the endpoint's self-signed certificate
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMetricsNeedAReaderToken serves /metrics as the manager does, on a
// real API server, with the manager's rights for it and nothing else
// (config/rbac/metrics_auth_role.yaml): a request without a token, with a
// token that is not one, or with the token of a service account that may
// not read metrics is refused; the token of one bound to
// opr8r-metrics-reader (config/rbac/metrics_reader_role.yaml) reads
// opr8r's metrics. --metrics-secure=false serves anyone, over HTTP.
func TestMetricsNeedAReaderToken(t *testing.T) {
	cfg := startEnvtest(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	const ns = "opr8r-system"
	if _, err := admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	serviceAccountToken(t, admin, ns, "opr8r-manager")
	installRole(t, admin, "metrics_auth_role.yaml", ns, "opr8r-manager")
	reader, stranger := serviceAccountToken(t, admin, ns, "prometheus"), serviceAccountToken(t, admin, ns, "stranger")
	installRole(t, admin, "metrics_reader_role.yaml", ns, "prometheus")
	asManager := rest.CopyConfig(cfg)
	asManager.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":opr8r-manager"}
	controller.RegisterMetrics()
	queue.RegisterMetrics()

	secure := startMetrics(t, asManager, MetricsOptions{BindAddress: freeAddress(t), Secure: true})
	plain := startMetrics(t, asManager, MetricsOptions{BindAddress: freeAddress(t)})
	if !strings.HasPrefix(secure, "https://") {
		t.Fatalf("the secure endpoint is %s", secure)
	}
	cases := map[string]struct {
		url, token string
		wantCode   int
	}{
		"no token": {url: secure, wantCode: http.StatusUnauthorized},
		// The API server does not authenticate it: 401 (controller-runtime's
		// filter, used before MetricsAuth, answered 500).
		"not a token":                    {url: secure, token: "not-a-token", wantCode: http.StatusUnauthorized},
		"a token that may not read":      {url: secure, token: stranger, wantCode: http.StatusForbidden},
		"a token bound to the reader":    {url: secure, token: reader, wantCode: http.StatusOK},
		"insecure, for development only": {url: plain, wantCode: http.StatusOK},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, body := scrape(t, tc.url, tc.token)
			if code != tc.wantCode {
				t.Fatalf("GET %s: %d, want %d: %s", tc.url, code, tc.wantCode, body)
			}
			if code == http.StatusOK && !strings.Contains(body, "opr8r_active_runs") {
				t.Errorf("GET %s: no opr8r metrics in:\n%s", tc.url, body)
			}
			if code != http.StatusOK && strings.Contains(body, "opr8r_") {
				t.Errorf("GET %s: refused, but metrics in the answer:\n%s", tc.url, body)
			}
		})
	}
	t.Run("answers are kept: a user for a minute, an allowed request for 5", func(t *testing.T) {
		metricsAuthKeepsAnswers(t, asManager, reader, stranger)
	})
}

// metricsAuthKeepsAnswers checks MetricsAuth's cache against the API
// server's reviews, counted: the reader's second scrape asks nothing, a
// minute later only the TokenReview again, after 5 minutes both; a denied
// user is asked again after 30 seconds.
func metricsAuthKeepsAnswers(t *testing.T, cfg *rest.Config, reader, stranger string) {
	var reviews []string
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	a := &metricsAuth{now: func() time.Time { return now },
		users: map[string]reviewed[authenticationv1.UserInfo]{}, grants: map[string]reviewed[bool]{},
		c: countingClient{Client: c, seen: &reviews}}
	h, err := a.filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	if err != nil {
		t.Fatal(err)
	}
	get := func(token string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	steps := []struct {
		after       time.Duration
		token       string
		wantCode    int
		wantReviews string
	}{
		{0, reader, http.StatusOK, "TokenReview SubjectAccessReview"},
		{10 * time.Second, reader, http.StatusOK, ""},
		{time.Minute, reader, http.StatusOK, "TokenReview"},
		{5 * time.Minute, reader, http.StatusOK, "TokenReview SubjectAccessReview"},
		{0, stranger, http.StatusForbidden, "TokenReview SubjectAccessReview"},
		{20 * time.Second, stranger, http.StatusForbidden, ""},
		{20 * time.Second, stranger, http.StatusForbidden, "SubjectAccessReview"},
		{0, "not-a-token", http.StatusUnauthorized, "TokenReview"},
		{0, "not-a-token", http.StatusUnauthorized, ""},
	}
	for i, s := range steps {
		now = now.Add(s.after)
		reviews = nil
		if code := get(s.token); code != s.wantCode {
			t.Errorf("step %d: %d, want %d", i, code, s.wantCode)
		}
		if got := strings.Join(reviews, " "); got != s.wantReviews {
			t.Errorf("step %d: the API server was asked %q, want %q", i, got, s.wantReviews)
		}
	}
}

// countingClient records the kind of every object it creates.
type countingClient struct {
	client.Client
	seen *[]string
}

func (c countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	kind := fmt.Sprintf("%T", obj)
	*c.seen = append(*c.seen, kind[strings.LastIndex(kind, ".")+1:])
	return c.Client.Create(ctx, obj, opts...)
}
