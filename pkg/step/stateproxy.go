package step

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// StateProxy is the step's door to the manager's state API, on the pod's
// loopback: terraform's kubernetes backend and the step's own clients call
// it, and it calls the state API with the step's projected token.
//
// It exists for one reason: the state API is served by the manager, and the
// manager restarts (an upgrade, a node drain, a crash). Terraform's
// kubernetes backend does not retry a call that cannot connect, so without
// the proxy a manager restart fails every plan, apply and destroy that
// reads or writes its state in those seconds (make e2e TestChaos saw it). The
// proxy waits for the state API to come back, for up to Patience per call,
// and retries only what it knows the state API has not done:
//   - a call that could not connect (nothing was sent);
//   - an answer of 429 or 503 (the state API refused it before doing it);
//   - for reads (GET), any failure, and the state API's 502 (its own call to
//     the API server failed).
//
// A write whose connection broke after it was sent is not retried: the
// state API may have done it, and terraform reports the error (and keeps
// its state in errored.tfstate, which opr8r keeps). The token is read from
// its file at each call, as the kubelet renews it. The proxy listens on
// 127.0.0.1 only: what can reach it (the step's own processes) can read the
// token file already.
type StateProxy struct {
	upstream  *url.URL
	client    *http.Client
	tokenFile string
	// Patience is how long one call waits for the state API to come back.
	Patience time.Duration
	// Log gets one line when a call waits for the state API, and one when it
	// is back.
	Log io.Writer

	listener net.Listener
	server   *http.Server
	mu       sync.Mutex
	waiting  bool
	stopped  time.Time // when Stop was called; zero before
}

// Stop tells the proxy the step is stopping: calls wait at most
// stopPatience more for the state API. The proxy keeps serving (terraform
// writes its last state through it).
func (p *StateProxy) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped.IsZero() {
		p.stopped = time.Now()
	}
}

// deadline is the latest a call that began at begun may wait.
func (p *StateProxy) deadline(begun time.Time) time.Time {
	d := begun.Add(p.Patience)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopped.IsZero() && p.stopped.Add(stopPatience).Before(d) {
		d = p.stopped.Add(stopPatience)
	}
	return d
}

// stateProxyPatience: a manager restart (a new pod, its cache, its
// certificate) takes tens of seconds; an upgrade's rollout a few minutes.
// It stays below DefaultInterruptGrace, so that an interrupted terraform
// that cannot write its state hears so before it is killed.
const stateProxyPatience = 3 * time.Minute

// stopPatience is how long a call waits for the state API once the step
// is stopping (Stop: SIGTERM, or its timeout): terraform is then writing
// its last state, and must hear quickly that it cannot, to keep it in
// errored.tfstate before the pod's grace period ends.
const stopPatience = 10 * time.Second

// attemptTimeout bounds one try, from its send to the state API's
// answer's headers (a state API that accepts the connection and never
// answers).
const attemptTimeout = 2 * time.Minute

// maxProxiedBody bounds what the proxy holds to be able to send a call
// again; the state API takes at most stateapi.MaxBody (4 MiB).
const maxProxiedBody = 16 << 20

// NewStateProxy is a proxy to the state API at upstream (an https URL),
// whose certificate is caPEM, authenticated with the token at tokenFile.
func NewStateProxy(upstream, caPEM, tokenFile string) (*StateProxy, error) {
	u, err := url.Parse(upstream)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("the state API's URL %q is not an http(s) URL", upstream)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the state API is in the cluster: never through HTTP(S)_PROXY
	if caPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(caPEM)) {
			return nil, errors.New("the state API's certificate holds no PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	tr.ResponseHeaderTimeout = attemptTimeout
	return &StateProxy{upstream: u, client: &http.Client{Transport: tr}, tokenFile: tokenFile, Patience: stateProxyPatience, Log: os.Stderr}, nil
}

// Start listens on a free port of 127.0.0.1 and serves until Close; it
// returns the URL to give clients.
func (p *StateProxy) Start() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("the state API's loopback proxy: %w", err)
	}
	p.listener = l
	p.server = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = p.server.Serve(l) }()
	return "http://" + l.Addr().String(), nil
}

// Close stops the proxy.
func (p *StateProxy) Close() error {
	if p.server == nil {
		return nil
	}
	return p.server.Close()
}

func (p *StateProxy) ServeHTTP(w http.ResponseWriter, in *http.Request) {
	body, err := io.ReadAll(io.LimitReader(in.Body, maxProxiedBody+1))
	if err != nil {
		http.Error(w, "opr8r-step state proxy: reading the call: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > maxProxiedBody {
		http.Error(w, fmt.Sprintf("opr8r-step state proxy: a body of at most %d bytes", maxProxiedBody), http.StatusRequestEntityTooLarge)
		return
	}
	read := in.Method == http.MethodGet || in.Method == http.MethodHead
	begun := time.Now()
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		resp, err := p.send(in, body)
		var why string
		switch {
		case err != nil && (read || notSent(err)):
			why = err.Error()
		case err != nil:
			p.back()
			http.Error(w, "opr8r-step state proxy: the state API's connection broke after the call was sent (it may have been done; not sent again): "+err.Error(), http.StatusBadGateway)
			return
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable ||
			(read && resp.StatusCode == http.StatusBadGateway):
			why = resp.Status
			if d := retryAfter(resp); d > wait {
				wait = d
			}
			_ = resp.Body.Close()
		default:
			p.back()
			copyResponse(w, resp)
			return
		}
		if time.Now().Add(wait).After(p.deadline(begun)) || in.Context().Err() != nil {
			http.Error(w, fmt.Sprintf("opr8r-step state proxy: the state API at %s did not answer within %s (%d tries): %s", p.upstream.Host, time.Since(begun).Round(time.Second), attempt, why), http.StatusServiceUnavailable)
			return
		}
		p.waitLine(why)
		select {
		case <-in.Context().Done():
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

func (p *StateProxy) send(in *http.Request, body []byte) (*http.Response, error) {
	u := *p.upstream
	u.Path = strings.TrimSuffix(p.upstream.Path, "/") + in.URL.Path
	u.RawPath = ""
	u.RawQuery = in.URL.RawQuery
	out, err := http.NewRequestWithContext(in.Context(), in.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for _, h := range []string{"Content-Type", "Accept", "User-Agent"} {
		if v := in.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	token, err := os.ReadFile(p.tokenFile)
	if err != nil {
		return nil, notSentError{fmt.Errorf("reading the step's token: %w", err)}
	}
	out.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	return p.client.Do(out)
}

// notSent: the call failed before a byte of it reached the state API (the
// connection was refused, timed out or had no route).
func notSent(err error) bool {
	if errors.As(err, new(notSentError)) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// notSentError is a failure before anything was sent.
type notSentError struct{ error }

func (e notSentError) Unwrap() error { return e.error }

func retryAfter(resp *http.Response) time.Duration {
	s, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || s <= 0 {
		return 0
	}
	return min(time.Duration(s)*time.Second, 10*time.Second)
}

func copyResponse(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (p *StateProxy) waitLine(why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.waiting && p.Log != nil {
		fmt.Fprintf(p.Log, "opr8r-step: the state API at %s is not answering (%s); waiting for it for up to %s\n", p.upstream.Host, why, p.Patience)
	}
	p.waiting = true
}

func (p *StateProxy) back() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting && p.Log != nil {
		fmt.Fprintf(p.Log, "opr8r-step: the state API at %s answers again\n", p.upstream.Host)
	}
	p.waiting = false
}
