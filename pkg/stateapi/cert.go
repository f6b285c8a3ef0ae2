package stateapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// CertValidity is how long the state API's self-signed certificate is
// valid; a manager that finds it within a tenth of that of its end makes
// a new one.
const CertValidity = 5 * 365 * 24 * time.Hour

// EnsureCertificate returns the state API's serving certificate, kept in
// the Secret namespace/name (kubernetes.io/tls) so every replica serves
// the same one, and makes it (self-signed, for dnsNames) when the Secret
// is missing, or its certificate is unreadable, near its end or not for
// dnsNames (host names or IP addresses). The certificate's PEM is what steps trust (names.EnvStateAPICA).
func EnsureCertificate(ctx context.Context, cs kubernetes.Interface, namespace, name string, dnsNames []string, now time.Time) (tls.Certificate, []byte, error) {
	secrets := cs.CoreV1().Secrets(namespace)
	s, err := secrets.Get(ctx, name, metav1.GetOptions{})
	found := err == nil
	switch {
	case found:
		if c, ok := usable(s, dnsNames, now); ok {
			return c, s.Data[corev1.TLSCertKey], nil
		}
	case !apierrors.IsNotFound(err):
		return tls.Certificate{}, nil, fmt.Errorf("reading the state API's certificate Secret %s/%s: %w", namespace, name, err)
	}
	certPEM, keyPEM, err := selfSigned(dnsNames, now)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	data := map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}
	if !found {
		s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "opr8r"}},
			Type: corev1.SecretTypeTLS, Data: data}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			if apierrors.IsAlreadyExists(err) {
				// Another replica made it first: serve that one.
				return EnsureCertificate(ctx, cs, namespace, name, dnsNames, now)
			}
			return tls.Certificate{}, nil, fmt.Errorf("keeping the state API's certificate in Secret %s/%s: %w", namespace, name, err)
		}
	} else {
		s.Data = data
		if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return tls.Certificate{}, nil, fmt.Errorf("renewing the state API's certificate in Secret %s/%s: %w", namespace, name, err)
		}
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	return c, certPEM, err
}

func usable(s *corev1.Secret, dnsNames []string, now time.Time) (tls.Certificate, bool) {
	c, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return c, false
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil || now.After(leaf.NotAfter.Add(-CertValidity/10)) {
		return c, false
	}
	for _, n := range dnsNames {
		if leaf.VerifyHostname(n) != nil {
			return c, false
		}
	}
	return c, true
}

func selfSigned(dnsNames []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	var hostNames []string
	var ips []net.IP
	for _, n := range dnsNames {
		if ip := net.ParseIP(n); ip != nil {
			ips = append(ips, ip)
		} else {
			hostNames = append(hostNames, n)
		}
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "opr8r state API"},
		DNSNames:     hostNames,
		IPAddresses:  ips,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(CertValidity),
		// A leaf, trusted as itself (the steps' only root): it signs no
		// other certificate, whoever holds its key.
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}
