package stateapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestEnsureCertificate: made once, kept, served and trusted by a client
// that trusts only its PEM (as a step does), renewed near its end or for
// other names.
func TestEnsureCertificate(t *testing.T) {
	cs := fake.NewClientset()
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	dns := []string{"opr8r-state.opr8r-system.svc", "10.96.200.202"}
	c1, pem1, err := EnsureCertificate(ctx, cs, "opr8r-system", "opr8r-state-tls", dns, now)
	if err != nil {
		t.Fatal(err)
	}
	_, pem2, err := EnsureCertificate(ctx, cs, "opr8r-system", "opr8r-state-tls", dns, now.Add(time.Hour))
	if err != nil || string(pem1) != string(pem2) {
		t.Fatalf("a second start made another certificate (%v)", err)
	}
	leaf, _ := x509.ParseCertificate(c1.Certificate[0])
	if leaf.IsCA || leaf.KeyUsage&x509.KeyUsageCertSign != 0 {
		t.Fatal("the serving certificate may sign others")
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{c1}}
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem1)
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "10.96.200.202"}}}
	resp, err := cl.Get(srv.URL)
	if err != nil {
		t.Fatalf("a client trusting only the certificate: %v", err)
	}
	resp.Body.Close()
	_, pem3, err := EnsureCertificate(ctx, cs, "opr8r-system", "opr8r-state-tls", dns, now.Add(CertValidity-CertValidity/20))
	if err != nil || string(pem3) == string(pem1) {
		t.Fatalf("not renewed near its end (%v)", err)
	}
	_, pem4, err := EnsureCertificate(ctx, cs, "opr8r-system", "opr8r-state-tls", []string{"opr8r-state.other.svc"}, now.Add(2*time.Hour))
	if err != nil || string(pem4) == string(pem3) {
		t.Fatalf("not renewed for other names (%v)", err)
	}
	if _, err := cs.CoreV1().Secrets("opr8r-system").Get(ctx, "opr8r-state-tls", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}
