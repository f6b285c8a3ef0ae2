package egress

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestGuard: the client refuses loopback (the manager's own endpoints) and
// link-local (metadata services) destinations, on the address dialled.
func TestGuard(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	_, err := Client(false).Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("loopback: %v", err)
	}
	// A name that resolves to loopback is refused the same.
	_, err = Client(false).Post(strings.Replace(srv.URL, "127.0.0.1", "localhost", 1), "application/json", strings.NewReader("{}"))
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("localhost: %v", err)
	}
	if resp, err := Client(true).Post(srv.URL, "application/json", strings.NewReader("{}")); err != nil {
		t.Errorf("loopback allowed: %v", err)
	} else {
		_ = resp.Body.Close()
	}
	for ip, refused := range map[string]bool{"169.254.169.254": true, "fe80::1": true, "0.0.0.0": true, "224.0.0.1": true, "10.0.0.5": false, "192.168.1.1": false, "203.0.113.9": false} {
		if got := Refused(net.ParseIP(ip), false) != ""; got != refused {
			t.Errorf("%s refused=%v, want %v", ip, got, refused)
		}
	}
}
