package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// apiServer records what reached it.
type apiServer struct {
	mu   sync.Mutex
	seen []*http.Request
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.seen = append(a.seen, r.Clone(r.Context()))
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"kind":"PipelineRunList","path":"`+r.URL.Path+`","query":"`+r.URL.RawQuery+`"}`)
}

func (a *apiServer) requests() []*http.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*http.Request(nil), a.seen...)
}

func setup(t *testing.T) (*httptest.Server, *apiServer) {
	t.Helper()
	api := &apiServer{}
	backend := httptest.NewServer(api)
	t.Cleanup(backend.Close)
	static := t.TempDir()
	if err := os.WriteFile(filepath.Join(static, "index.html"), []byte("<html>the page</html>"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(static, "index-abc123.js"), []byte("console.log(1)"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := handler(&rest.Config{Host: backend.URL, BearerToken: "service-account-token"}, static)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	return front, api
}

func do(t *testing.T, method, url string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

func TestReadsReachTheAPIServerAsTheServiceAccount(t *testing.T) {
	front, api := setup(t)
	res, body := do(t, http.MethodGet, front.URL+"/apis/tekton.dev/v1/namespaces/e2e/pipelineruns?labelSelector=infra.opr8r.io%2Frun%3Dx",
		map[string]string{"Authorization": "Bearer the-browsers-own", "Cookie": "session=1", "Impersonate-User": "system:admin"})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET through the proxy: %d %s", res.StatusCode, body)
	}
	if !strings.Contains(body, `"path":"/apis/tekton.dev/v1/namespaces/e2e/pipelineruns"`) || !strings.Contains(body, `labelSelector=infra.opr8r.io%2Frun%3Dx`) {
		t.Errorf("the API server saw another path or query: %s", body)
	}
	seen := api.requests()
	if len(seen) != 1 {
		t.Fatalf("the API server saw %d requests, want 1", len(seen))
	}
	r := seen[0]
	if got := r.Header.Get("Authorization"); got != "Bearer service-account-token" {
		t.Errorf("Authorization at the API server = %q, want the service account's token", got)
	}
	if r.Header.Get("Cookie") != "" || r.Header.Get("Impersonate-User") != "" {
		t.Errorf("the browser's cookie or impersonation reached the API server: %v", r.Header)
	}
	res, _ = do(t, http.MethodGet, front.URL+"/api/v1/namespaces/e2e/pods/p/log?container=step-plan", nil)
	if res.StatusCode != http.StatusOK {
		t.Errorf("GET pod log through the proxy: %d", res.StatusCode)
	}
}

func TestWritesAreRefused(t *testing.T) {
	front, api := setup(t)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		res, body := do(t, m, front.URL+"/apis/tekton.dev/v1beta1/namespaces/e2e/customruns/x-approve", nil)
		if res.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s: %d, want 405", m, res.StatusCode)
		}
		if !strings.Contains(body, "read-only") || !strings.Contains(body, "kubectl tfrun approve") {
			t.Errorf("%s: the refusal does not say what to do instead: %q", m, body)
		}
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("the API server saw %d writes, want none", n)
	}
}

func TestThePage(t *testing.T) {
	front, _ := setup(t)
	for _, p := range []string{"/", "/pipelineruns", "/no/such/file.js"} {
		res, body := do(t, http.MethodGet, front.URL+p, nil)
		if res.StatusCode != http.StatusOK || body != "<html>the page</html>" {
			t.Errorf("GET %s: %d %q, want the page", p, res.StatusCode, body)
		}
		if cc := res.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q, want no-cache", p, cc)
		}
	}
	res, body := do(t, http.MethodGet, front.URL+"/index-abc123.js", nil)
	if res.StatusCode != http.StatusOK || body != "console.log(1)" {
		t.Errorf("GET the asset: %d %q", res.StatusCode, body)
	}
	if cc := res.Header.Get("Cache-Control"); !strings.Contains(cc, "immutable") {
		t.Errorf("the asset's Cache-Control = %q, want immutable", cc)
	}
	res, _ = do(t, http.MethodGet, front.URL+"/healthz", nil)
	if res.StatusCode != http.StatusOK {
		t.Errorf("healthz: %d", res.StatusCode)
	}
}

func TestNoPageNoServer(t *testing.T) {
	if _, err := handler(&rest.Config{Host: "https://127.0.0.1:1"}, t.TempDir()); err == nil || !strings.Contains(err.Error(), "no built page") {
		t.Errorf("handler without index.html: %v, want an error naming the missing page", err)
	}
}
