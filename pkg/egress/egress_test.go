package egress

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// install is a guard as an install configures it: the manager's own pod
// addresses, the default cluster ranges, one more range denied, and one
// in-cluster sink allowed.
func install(t *testing.T) *Guard {
	t.Helper()
	g := &Guard{Own: []netip.Addr{netip.MustParseAddr("10.244.1.7"), netip.MustParseAddr("fd00:10:244::7"), netip.MustParseAddr("198.51.100.7")}}
	var err error
	if g.Service, err = ParseCIDRs(DefaultServiceCIDRs); err != nil {
		t.Fatal(err)
	}
	if g.Pods, err = ParseCIDRs(DefaultPodCIDRs); err != nil {
		t.Fatal(err)
	}
	if g.Deny, err = ParseCIDRs("172.16.0.0/12, 203.0.113.66"); err != nil {
		t.Fatal(err)
	}
	if g.Allow, err = ParseCIDRs("10.96.40.2,10.244.1.0/24,172.16.5.0/24,169.254.169.254/32"); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestRefused: every address class the guard refuses, by its rule, and
// what it lets through.
func TestRefused(t *testing.T) {
	g := install(t)
	cases := map[string]struct {
		ip       string
		wantRule string
	}{
		"loopback":                   {ip: "127.0.0.1", wantRule: RuleLoopback},
		"loopback 127/8":             {ip: "127.8.9.10", wantRule: RuleLoopback},
		"IPv6 loopback":              {ip: "::1", wantRule: RuleLoopback},
		"IPv4-mapped loopback":       {ip: "::ffff:127.0.0.1", wantRule: RuleLoopback},
		"IPv4-compatible loopback":   {ip: "::127.0.0.1", wantRule: RuleReserved},
		"NAT64 of metadata":          {ip: "64:ff9b::a9fe:a9fe", wantRule: RuleLinkLocal},
		"NAT64 of Alibaba metadata":  {ip: "64:ff9b::6464:64c8", wantRule: RuleMetadata},
		"unspecified":                {ip: "0.0.0.0", wantRule: RuleThisNetwork},
		"this network 0/8":           {ip: "0.1.2.3", wantRule: RuleThisNetwork},
		"IPv6 unspecified":           {ip: "::", wantRule: RuleThisNetwork},
		"AWS/GCP/Azure metadata":     {ip: "169.254.169.254", wantRule: RuleLinkLocal},
		"IPv4-mapped metadata":       {ip: "::ffff:169.254.169.254", wantRule: RuleLinkLocal},
		"ECS task metadata":          {ip: "169.254.170.2", wantRule: RuleLinkLocal},
		"EKS Pod Identity":           {ip: "169.254.170.23", wantRule: RuleLinkLocal},
		"Tencent metadata":           {ip: "169.254.0.23", wantRule: RuleLinkLocal},
		"OpenStack IPv6 metadata":    {ip: "fe80::a9fe:a9fe", wantRule: RuleLinkLocal},
		"AWS IPv6 metadata":          {ip: "fd00:ec2::254", wantRule: RuleMetadata},
		"AWS IPv6 EKS Pod Identity":  {ip: "fd00:ec2::23", wantRule: RuleMetadata},
		"GCP IPv6 metadata":          {ip: "fd20:ce::254", wantRule: RuleMetadata},
		"Alibaba metadata":           {ip: "100.100.100.200", wantRule: RuleMetadata},
		"Oracle metadata":            {ip: "192.0.0.192", wantRule: RuleMetadata},
		"Azure WireServer":           {ip: "168.63.129.16", wantRule: RuleMetadata},
		"multicast":                  {ip: "239.1.2.3", wantRule: RuleMulticast},
		"link-local multicast":       {ip: "224.0.0.1", wantRule: RuleLinkLocal},
		"broadcast":                  {ip: "255.255.255.255", wantRule: RuleMulticast},
		"IPv6 multicast":             {ip: "ff02::1", wantRule: RuleLinkLocal},
		"reserved 240/4":             {ip: "240.0.0.1", wantRule: RuleReserved},
		"own pod address":            {ip: "10.244.1.7", wantRule: RuleOwn},
		"own IPv6 pod address":       {ip: "fd00:10:244::7", wantRule: RuleOwn},
		"own address outside ranges": {ip: "198.51.100.7", wantRule: RuleOwn},
		"Service IP (kubeadm)":       {ip: "10.96.0.1", wantRule: RuleService},
		"Service IP (k3s)":           {ip: "10.43.0.10", wantRule: RuleService},
		"Service IP (EKS)":           {ip: "172.20.0.10", wantRule: RuleService},
		"Service IP (GKE)":           {ip: "34.118.224.10", wantRule: RuleService},
		"IPv6 Service IP (kind)":     {ip: "fd00:10:96::1", wantRule: RuleService},
		"pod IP (flannel)":           {ip: "10.244.3.4", wantRule: RulePod},
		"pod IP (Calico)":            {ip: "192.168.7.8", wantRule: RulePod},
		"denied range":               {ip: "172.31.0.9", wantRule: RuleDenied},
		"denied address":             {ip: "203.0.113.66", wantRule: RuleDenied},
		"allowed Service IP":         {ip: "10.96.40.2"},
		"allowed pod range":          {ip: "10.244.1.8"},
		"allowed part of denied":     {ip: "172.16.5.9"},
		"metadata despite allow":     {ip: "169.254.169.254", wantRule: RuleLinkLocal},
		"private elsewhere":          {ip: "10.200.0.5"},
		"public":                     {ip: "203.0.113.9"},
		"public IPv6":                {ip: "2606:4700::1111"},
		"IPv4-mapped Service IP":     {ip: "::ffff:10.96.0.1", wantRule: RuleService},
		"zoned link-local":           {ip: "fe80::1%eth0", wantRule: RuleLinkLocal},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.wantRule, g.Refused(netip.MustParseAddr(tc.ip))); diff != "" {
				t.Errorf("Refused(%s) (-want +got):\n%s", tc.ip, diff)
			}
		})
	}
}

// TestGuard: the client refuses loopback (the manager's own endpoints) on
// the address dialled, a name resolving to it too, with a fixed reason.
func TestGuard(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	cases := map[string]struct {
		url           string
		allowLoopback bool
		wantReason    string
	}{
		"loopback":            {url: srv.URL, wantReason: "refused by the egress guard: " + RuleLoopback},
		"name of loopback":    {url: strings.Replace(srv.URL, "127.0.0.1", "localhost", 1), wantReason: "refused by the egress guard: " + RuleLoopback},
		"loopback in a test":  {url: srv.URL, allowLoopback: true},
		"metadata (no route)": {url: "http://[fd00:ec2::254]/latest/meta-data/", wantReason: "refused by the egress guard: " + RuleMetadata},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			resp, err := (&Guard{AllowLoopback: tc.allowLoopback}).Client().Post(tc.url, "application/json", strings.NewReader("{}"))
			if err == nil {
				_ = resp.Body.Close()
			}
			if diff := cmp.Diff(tc.wantReason, Describe(err)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got := IsRefused(err); got != (tc.wantReason != "") {
				t.Errorf("IsRefused %v", got)
			}
		})
	}
}

// TestRedirects: a redirect to another host, port or scheme is not
// followed, nor one that would turn a POST into a GET; a same-host 307 or
// 308, which keeps the method and body, is.
func TestRedirects(t *testing.T) {
	var otherHit atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherHit.Add(1)
		_, _ = w.Write([]byte("internal"))
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/303-other":
			http.Redirect(w, r, other.URL+"/secret", http.StatusSeeOther)
		case "/307-other":
			http.Redirect(w, r, other.URL+"/secret", http.StatusTemporaryRedirect)
		case "/307-name":
			http.Redirect(w, r, strings.Replace(other.URL, "127.0.0.1", "localhost", 1)+"/secret", http.StatusTemporaryRedirect)
		case "/308-https":
			http.Redirect(w, r, strings.Replace(r.Host, "", "https://", 1)+"/x", http.StatusPermanentRedirect)
		case "/303-same":
			http.Redirect(w, r, "/landing", http.StatusSeeOther)
		case "/307-same":
			http.Redirect(w, r, "/landing", http.StatusTemporaryRedirect)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusTemporaryRedirect)
		case "/landing":
			b, _ := io.ReadAll(r.Body)
			_, _ = w.Write([]byte(r.Method + " " + string(b)))
		}
	}))
	defer srv.Close()
	cases := map[string]struct {
		path       string
		wantReason string
		wantBody   string
	}{
		"303 to another host":   {path: "/303-other", wantReason: "redirect refused: to another host or port"},
		"307 to another port":   {path: "/307-other", wantReason: "redirect refused: to another host or port"},
		"307 to another name":   {path: "/307-name", wantReason: "redirect refused: to another host or port"},
		"308 to another scheme": {path: "/308-https", wantReason: "redirect refused: to another scheme"},
		"303 on the same host":  {path: "/303-same", wantReason: "redirect refused: it would turn a POST into a GET"},
		"307 on the same host":  {path: "/307-same", wantBody: "POST {}"},
		"a loop":                {path: "/loop", wantReason: "redirect refused: too many redirects"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			resp, err := (&Guard{AllowLoopback: true}).Client().Post(srv.URL+tc.path, "application/json", strings.NewReader("{}"))
			var body []byte
			if err == nil {
				body, _ = io.ReadAll(resp.Body)
				_ = resp.Body.Close()
			}
			if diff := cmp.Diff(tc.wantReason, Describe(err)); diff != "" {
				t.Errorf("reason (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantBody, string(body)); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
			var re *RedirectError
			if tc.wantReason != "" && (!errors.As(err, &re) || !IsRefused(err)) {
				t.Errorf("error %v is not a refused redirect", err)
			}
		})
	}
	if n := otherHit.Load(); n != 0 {
		t.Errorf("the other host was reached %d times", n)
	}
}

// TestParse: the flags' lists.
func TestParse(t *testing.T) {
	got, err := ParseCIDRs(" 10.0.0.0/8,fd00::1, 192.168.1.9/24,")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::1/128"), netip.MustParsePrefix("192.168.1.0/24")}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := ParseCIDRs("10.0.0.0/33"); err == nil {
		t.Error("a bad CIDR is taken")
	}
	if _, err := ParseAddrs("10.1.2.3,fd00::1,nope"); err == nil {
		t.Error("a bad address is taken")
	}
}
