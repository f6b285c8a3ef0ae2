// Package egress is how the manager connects to destinations that tenants
// choose (notifiers' URLs, a forge's API for previews): never to itself,
// to cloud metadata services, or to the cluster's own Service and pod
// ranges unless the install allows them, checked on the address actually
// dialled; and never following a redirect to another host.
package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"
)

// Default cluster ranges, refused unless the install says otherwise: the
// Service and pod ranges of kubeadm, kind and minikube (10.96.0.0/12,
// 10.244.0.0/16, and kind's IPv6 fd00:10:96::/112, fd00:10:244::/56),
// k3s and RKE2 (10.43.0.0/16, 10.42.0.0/16), EKS (10.100.0.0/16,
// 172.20.0.0/16), AKS (10.0.0.0/16), GKE's current Service range
// (34.118.224.0/20) and Calico's default pool (192.168.0.0/16).
const (
	DefaultServiceCIDRs = "10.96.0.0/12,10.43.0.0/16,10.100.0.0/16,172.20.0.0/16,10.0.0.0/16,34.118.224.0/20,fd00:10:96::/112"
	DefaultPodCIDRs     = "10.244.0.0/16,10.42.0.0/16,192.168.0.0/16,fd00:10:244::/56"
)

// Rules of the guard, as they appear in refusals.
const (
	RuleLoopback    = "a loopback address (the manager itself)"
	RuleThisNetwork = "an unspecified or this-network address (0.0.0.0/8, ::)"
	RuleMetadata    = "a cloud metadata address"
	RuleLinkLocal   = "a link-local address (such as a cloud metadata service)"
	RuleMulticast   = "a multicast or broadcast address"
	RuleReserved    = "a reserved address"
	RuleOwn         = "the manager's own pod address"
	RuleService     = "the cluster's Service range"
	RulePod         = "the cluster's pod range"
	RuleDenied      = "a range the install denies"
	RuleNotIP       = "not an IP address"
)

// metadata are the cloud metadata and instance-service addresses that are
// not link-local (169.254.0.0/16 and fe80::/10 are refused whole, which
// covers AWS's, GCP's, Azure's, OpenStack's, DigitalOcean's, Oracle's,
// Hetzner's, IBM's 169.254.169.254, AWS's ECS and EKS Pod Identity
// 169.254.170.2 and .23, and Tencent's 169.254.0.23).
var metadata = prefixes(
	"fd00:ec2::/32",      // AWS: IMDS fd00:ec2::254, EKS Pod Identity fd00:ec2::23, DNS, NTP
	"fd20:ce::254/128",   // GCP's metadata server over IPv6
	"100.100.100.200/32", // Alibaba Cloud
	"192.0.0.192/32",     // Oracle Cloud (legacy)
	"168.63.129.16/32",   // Azure's WireServer and host agent
)

// reserved are ranges no destination is in.
var reserved = prefixes(
	"240.0.0.0/4",   // reserved, and 255.255.255.255
	"::/96",         // IPv4-compatible IPv6 (::127.0.0.1)
	"100::/64",      // discard
	"2001:db8::/32", // documentation
)

// Guard says which addresses the manager refuses to connect to. Its zero
// value refuses only the fixed rules (loopback, unspecified, metadata,
// link-local, multicast, reserved).
type Guard struct {
	// AllowLoopback lets the tests reach a server on 127.0.0.1.
	AllowLoopback bool
	// Own are the manager's own pod addresses, refused always.
	Own []netip.Addr
	// Service and Pods are the cluster's ranges, refused unless in Allow.
	Service, Pods []netip.Prefix
	// Deny are more ranges the install refuses, unless in Allow.
	Deny []netip.Prefix
	// Allow are exceptions to Service, Pods and Deny (never to the fixed
	// rules or Own).
	Allow []netip.Prefix
}

// Refused says by which rule an address is refused as a destination, or
// "" when it is not.
func (g *Guard) Refused(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	if ip.IsLoopback() {
		if g.AllowLoopback {
			return ""
		}
		return RuleLoopback
	}
	if ip.Is6() && netip.MustParsePrefix("64:ff9b::/96").Contains(ip) {
		// NAT64: the IPv4 address it stands for decides.
		b := ip.As16()
		return g.Refused(netip.AddrFrom4([4]byte(b[12:])))
	}
	if r := fixed(ip); r != "" {
		return r
	}
	for _, o := range g.Own {
		if o.Unmap() == ip {
			return RuleOwn
		}
	}
	if contains(g.Allow, ip) {
		return ""
	}
	switch {
	case contains(g.Service, ip):
		return RuleService
	case contains(g.Pods, ip):
		return RulePod
	case contains(g.Deny, ip):
		return RuleDenied
	}
	return ""
}

// fixed are the rules no install loosens, besides loopback.
func fixed(ip netip.Addr) string {
	switch {
	case ip.IsUnspecified() || (ip.Is4() && ip.As4()[0] == 0):
		return RuleThisNetwork
	case contains(metadata, ip):
		return RuleMetadata
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return RuleLinkLocal
	case ip.IsMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return RuleMulticast
	case contains(reserved, ip):
		return RuleReserved
	}
	return ""
}

// Client is an HTTP client whose connections the guard checks on the
// address actually dialled (after DNS, on every redirect), that uses no
// proxy, and that follows a redirect only to the same scheme, host and
// port without changing the method.
func (g *Guard) Client() *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return &RefusedError{Rule: RuleNotIP}
		}
		if rule := g.Refused(ip); rule != "" {
			return &RefusedError{Rule: rule, Addr: ip}
		}
		return nil
	}}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = dialer.DialContext
	return &http.Client{Transport: tr, Timeout: 10 * time.Second, CheckRedirect: checkRedirect}
}

// Client is the guard's client with the default cluster ranges and the
// pod's own addresses found on its interfaces; allowLoopback lets the
// tests reach a server on 127.0.0.1.
func Client(allowLoopback bool) *http.Client {
	g := &Guard{AllowLoopback: allowLoopback, Own: InterfaceAddrs(),
		Service: prefixes(strings.Split(DefaultServiceCIDRs, ",")...), Pods: prefixes(strings.Split(DefaultPodCIDRs, ",")...)}
	return g.Client()
}

// RefusedError is a destination the guard refused, by which rule.
type RefusedError struct {
	Rule string
	Addr netip.Addr
}

func (e *RefusedError) Error() string { return "refused by the egress guard: " + e.Rule }

// RedirectError is a redirect the client did not follow, and why.
type RedirectError struct{ Why string }

func (e *RedirectError) Error() string { return "redirect refused: " + e.Why }

// checkRedirect follows a redirect only to the same scheme, host and port,
// with the same method (so a 301, 302 or 303 answer to a POST ends it),
// at most twice.
func checkRedirect(req *http.Request, via []*http.Request) error {
	first, last := via[0], via[len(via)-1]
	switch {
	case len(via) >= 3:
		return &RedirectError{Why: "too many redirects"}
	case !strings.EqualFold(req.URL.Scheme, first.URL.Scheme):
		return &RedirectError{Why: "to another scheme"}
	case hostPort(req) != hostPort(first):
		return &RedirectError{Why: "to another host or port"}
	case req.Method != last.Method:
		return &RedirectError{Why: "it would turn a " + last.Method + " into a " + req.Method}
	}
	return nil
}

func hostPort(r *http.Request) string {
	port := r.URL.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(r.URL.Scheme)]
	}
	return strings.ToLower(strings.TrimSuffix(r.URL.Hostname(), ".")) + ":" + port
}

// IsRefused says whether err is a destination the guard refused or a
// redirect the client did not follow: trying again will not mend it.
func IsRefused(err error) bool {
	var g *RefusedError
	var r *RedirectError
	return errors.As(err, &g) || errors.As(err, &r)
}

// Describe is a fixed description of an error of the client, safe to show
// to the tenant who chose the destination: the guard's rule, a refused
// redirect, or a category of network failure; never the URL, the address
// or anything the destination sent.
func Describe(err error) string {
	var (
		g   *RefusedError
		r   *RedirectError
		dns *net.DNSError
		ne  net.Error
		ca  x509.UnknownAuthorityError
		hn  x509.HostnameError
		ci  x509.CertificateInvalidError
		rh  tls.RecordHeaderError
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &g):
		return g.Error()
	case errors.As(err, &r):
		return r.Error()
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &dns):
		if dns.IsNotFound {
			return "name not found"
		}
		return "name resolution failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed by the destination"
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return "destination unreachable"
	case errors.As(err, &ca) || errors.As(err, &hn) || errors.As(err, &ci) || errors.As(err, &rh):
		return "TLS handshake failed"
	}
	return "connection failed"
}

// InterfaceAddrs are the addresses of the pod's network interfaces (every
// address of the manager's own pod, on every family).
func InterfaceAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		fmt.Fprintln(os.Stderr, "egress: listing the pod's addresses:", err)
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
}

// ParseCIDRs reads a comma-separated list of CIDRs or addresses (an
// address is its /32 or /128).
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("%q is neither a CIDR nor an address", f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// ParseAddrs reads a comma-separated list of addresses, such as the
// downward API's status.podIPs.
func ParseAddrs(s string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an address", f)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

func contains(ps []netip.Prefix, ip netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// prefixes parses constant CIDRs.
func prefixes(cidrs ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		out = append(out, netip.MustParsePrefix(c))
	}
	return out
}
