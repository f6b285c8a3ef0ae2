package receiver

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// call is one request a fake forge took.
type call struct {
	Method, Path, Query, Auth, Body string
}

// answerOf is one answer a fake forge gives: a status, headers and a body
// (a file of testdata/api, or text).
type answerOf struct {
	code    int
	headers map[string]string
	file    string
	body    string
}

// fakeForge is an httptest server that answers "METHOD path" from a
// queue of replies per route (the last one repeats) and records each
// request.
type fakeForge struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	calls  []call
	routes map[string][]answerOf
}

func newFakeForge(t *testing.T, routes map[string][]answerOf) *fakeForge {
	t.Helper()
	f := &fakeForge{t: t, routes: routes}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeForge) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.calls = append(f.calls, call{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Auth: r.Header.Get("Authorization") + r.Header.Get("Private-Token"), Body: string(b)})
	key := r.Method + " " + r.URL.EscapedPath()
	q := f.routes[key]
	var rp answerOf
	switch {
	case len(q) == 0:
		rp = answerOf{code: http.StatusNotFound, body: `{"message":"Not Found"}`}
	case len(q) == 1:
		rp = q[0]
	default:
		rp, f.routes[key] = q[0], q[1:]
	}
	f.mu.Unlock()
	body := []byte(rp.body)
	if rp.file != "" {
		var err error
		if body, err = os.ReadFile(filepath.Join("testdata", "api", rp.file)); err != nil {
			f.t.Error(err)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	for k, v := range rp.headers {
		w.Header().Set(k, strings.ReplaceAll(v, "{url}", f.srv.URL))
	}
	w.WriteHeader(max(rp.code, 200))
	_, _ = w.Write(body)
}

// took is the requests taken, without their bodies when bodies is false.
func (f *fakeForge) took(bodies bool) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]call, len(f.calls))
	for i, c := range f.calls {
		if !bodies {
			c.Body = ""
		}
		out[i] = c
	}
	return out
}

// jsonBody is a request body re-encoded with sorted keys, for comparing.
func jsonBody(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("body %q: %v", s, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
