package step_test

import (
	"bytes"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opr8r/opr8r/pkg/step"
)

// stateAPIDown is the address of a state API that is not listening yet
// (a manager restarting), and the certificate the one started there by
// up will have (httptest's servers all have the same).
func stateAPIDown(t *testing.T) (addr, ca string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = l.Addr().String()
	_ = l.Close()
	s := httptest.NewTLSServer(http.NotFoundHandler())
	ca = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw}))
	s.Close()
	return addr, ca
}

// up starts the state API at addr with h.
func up(t *testing.T, addr string, h http.Handler) {
	t.Helper()
	var l net.Listener
	var err error
	for range 50 { // the port was just freed; another test may hold it for a moment
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(h)
	s.Listener = l
	s.StartTLS()
	t.Cleanup(s.Close)
}

func proxyTo(t *testing.T, addr, ca string, patience time.Duration) (string, string) {
	t.Helper()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := step.NewStateProxy("https://"+addr, ca, token)
	if err != nil {
		t.Fatal(err)
	}
	p.Patience = patience
	var log bytes.Buffer
	p.Log = &log
	local, err := p.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return local, token
}

func call(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A manager restart: calls made while the state API is down (reads and
// writes: nothing was sent) wait for it and then go through, with the
// token as it is in its file at that moment.
func TestStateProxyWaitsOutARestart(t *testing.T) {
	addr, ca := stateAPIDown(t)
	local, token := proxyTo(t, addr, ca, time.Minute)
	var got atomic.Value
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(r.Method + " " + r.URL.RequestURI() + " " + r.Header.Get("Authorization") + " " + string(b))
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"kind":"Secret"}`)
	})
	done := make(chan struct{})
	var code int
	var body string
	go func() {
		defer close(done)
		code, body = call(t, http.MethodPost, local+"/api/v1/namespaces/e2e/secrets?fieldManager=x", `{"a":1}`)
	}()
	time.Sleep(700 * time.Millisecond)
	if err := os.WriteFile(token, []byte("renewed"), 0o600); err != nil {
		t.Fatal(err)
	}
	up(t, addr, h)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not go through after the state API came back")
	}
	if code != http.StatusCreated || body != `{"kind":"Secret"}` {
		t.Fatalf("got %d %q, want 201 and the state API's body", code, body)
	}
	if want := `POST /api/v1/namespaces/e2e/secrets?fieldManager=x Bearer renewed {"a":1}`; got.Load() != want {
		t.Fatalf("the state API got %q, want %q", got.Load(), want)
	}
}

// What the state API refused before doing it (429, 503) is sent again; a
// read whose upstream failed (502) too; a write that reached the state API
// and broke is not: it may have been done.
func TestStateProxyRetriesOnlyWhatWasNotDone(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		first        func(w http.ResponseWriter)
		wantCode     int
		wantCalls    int32
	}{
		{"429 then done", http.MethodPut, func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}, http.StatusOK, 2},
		{"503 then done", http.MethodPost, func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) }, http.StatusOK, 2},
		{"a read's 502 then done", http.MethodGet, func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) }, http.StatusOK, 2},
		{"a write's 502 is the answer", http.MethodPut, func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) }, http.StatusBadGateway, 1},
		{"a write's 409 is the answer", http.MethodPut, func(w http.ResponseWriter) { w.WriteHeader(http.StatusConflict) }, http.StatusConflict, 1},
		{"a write broken after it was sent", http.MethodPut, func(w http.ResponseWriter) {
			c, _, _ := w.(http.Hijacker).Hijack()
			_ = c.Close()
		}, http.StatusBadGateway, 1},
		{"a read broken after it was sent", http.MethodGet, func(w http.ResponseWriter) {
			c, _, _ := w.(http.Hijacker).Hijack()
			_ = c.Close()
		}, http.StatusOK, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, ca := stateAPIDown(t)
			var calls atomic.Int32
			up(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					tc.first(w)
					return
				}
				w.WriteHeader(http.StatusOK)
			}))
			local, _ := proxyTo(t, addr, ca, time.Minute)
			code, _ := call(t, tc.method, local+"/api/v1/namespaces/e2e/secrets/x", `{}`)
			if code != tc.wantCode || calls.Load() != tc.wantCalls {
				t.Fatalf("got %d after %d calls, want %d after %d", code, calls.Load(), tc.wantCode, tc.wantCalls)
			}
		})
	}
}

// A state API that does not come back within the proxy's patience gets a
// 503 that says so.
func TestStateProxyGivesUp(t *testing.T) {
	addr, ca := stateAPIDown(t)
	local, _ := proxyTo(t, addr, ca, 1500*time.Millisecond)
	code, body := call(t, http.MethodGet, local+"/api/v1/namespaces/e2e/secrets", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "did not answer within") {
		t.Fatalf("got %d %q, want 503 saying the state API did not answer", code, body)
	}
}

// A stopping step (SIGTERM, its timeout) waits only briefly: terraform,
// writing its last state, hears that it cannot and keeps it in
// errored.tfstate before the pod is killed.
func TestStateProxyStoppingWaitsBriefly(t *testing.T) {
	addr, ca := stateAPIDown(t)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := step.NewStateProxy("https://"+addr, ca, token)
	if err != nil {
		t.Fatal(err)
	}
	p.Log = io.Discard
	local, err := p.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Stop()
	began := time.Now()
	code, body := call(t, http.MethodPut, local+"/api/v1/namespaces/e2e/secrets/tfstate-default-web", `{}`)
	if took := time.Since(began); code != http.StatusServiceUnavailable || took > 20*time.Second || !strings.Contains(body, "did not answer") {
		t.Fatalf("got %d %q after %s, want 503 within 20s of the stop", code, body, took)
	}
}

// A token that cannot be read fails the call before anything is sent: it
// is waited out like a state API that is down, never reported as a write
// that may have been done.
func TestStateProxyUnreadableTokenIsNotSent(t *testing.T) {
	addr, ca := stateAPIDown(t)
	var calls atomic.Int32
	up(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	p, err := step.NewStateProxy("https://"+addr, ca, filepath.Join(t.TempDir(), "missing"))
	if err != nil {
		t.Fatal(err)
	}
	p.Log, p.Patience = io.Discard, time.Second
	local, err := p.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	code, body := call(t, http.MethodPut, local+"/api/v1/namespaces/e2e/secrets/x", `{}`)
	if code != http.StatusServiceUnavailable || strings.Contains(body, "may have been done") || calls.Load() != 0 {
		t.Fatalf("got %d %q with %d calls sent, want 503 and nothing sent", code, body, calls.Load())
	}
}
