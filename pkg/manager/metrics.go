package manager

import (
	"crypto/tls"

	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// DefaultMetricsAddress is where the manager serves /metrics: over HTTPS,
// the port kubebuilder's scaffold uses.
const DefaultMetricsAddress = ":8443"

// MetricsOptions configures the metrics endpoint.
type MetricsOptions struct {
	// BindAddress is the address to serve on ("0": no metrics endpoint).
	BindAddress string
	// Secure serves over HTTPS and lets a request through only with a
	// bearer token the API server authenticates (TokenReview) whose user
	// may get the path (SubjectAccessReview: nonResourceURLs /metrics,
	// the ClusterRole opr8r-metrics-reader). Insecure is plain HTTP that
	// anyone who reaches the port may read, for local development.
	Secure bool
	// CertDir holds tls.crt and tls.key (a cert-manager Certificate's
	// Secret, mounted), reloaded when they change; empty or without them,
	// a self-signed certificate made in memory at every start.
	CertDir string
}

// ServerOptions are controller-runtime's options for o, as kubebuilder
// scaffolds a secure metrics endpoint: an authentication and
// authorisation filter (MetricsAuth, which does what controller-runtime's
// does without linking k8s.io/apiserver), and HTTP/1.1 only (HTTP/2's rapid reset,
// CVE-2023-44487, needs no mitigation then).
func (o MetricsOptions) ServerOptions() metricsserver.Options {
	s := metricsserver.Options{BindAddress: o.BindAddress}
	if !o.Secure {
		return s
	}
	s.SecureServing = true
	s.FilterProvider = MetricsAuth
	s.CertDir = o.CertDir
	s.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	return s
}
