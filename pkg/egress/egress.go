// Package egress is how the manager connects to destinations that tenants
// choose (notifiers' URLs, a forge's API for previews): never to its own
// loopback or to link-local addresses (cloud metadata services).
package egress

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"
)

// errGuard is a destination the guard refused.
type errGuard struct{ error }

// Client is an HTTP client whose connections refuse the addresses a
// tenant must not make the manager reach: loopback (the manager's own
// endpoints), link-local (cloud metadata services), unspecified and
// multicast, checked on the address actually dialled (after DNS, on every
// redirect). allowLoopback lets the tests reach a server on 127.0.0.1.
func Client(allowLoopback bool) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip := net.ParseIP(host)
		if ip == nil {
			return errGuard{fmt.Errorf("refusing %s: not an IP address", host)}
		}
		if reason := Refused(ip, allowLoopback); reason != "" {
			return errGuard{fmt.Errorf("refusing to send to %s: %s", ip, reason)}
		}
		return nil
	}}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = dialer.DialContext
	return &http.Client{Transport: tr, Timeout: 10 * time.Second, CheckRedirect: func(_ *http.Request, via []*http.Request) error {
		if len(via) >= 3 {
			return errors.New("too many redirects")
		}
		return nil
	}}
}

// Refused says why an address is refused as a destination, or "".
func Refused(ip net.IP, allowLoopback bool) string {
	switch {
	case ip.IsLoopback() && !allowLoopback:
		return "a loopback address (the manager itself)"
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return "a link-local address (such as a cloud metadata service)"
	case ip.IsUnspecified():
		return "the unspecified address"
	case ip.IsMulticast():
		return "a multicast address"
	}
	return ""
}

// IsRefused says whether err is a destination the guard refused.
func IsRefused(err error) bool {
	var g errGuard
	return errors.As(err, &g)
}
