package receiver

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Token reads a receiver's token from its Secret, without leading and
// trailing whitespace (a Secret made with --from-file ends in a newline the
// forge never sends).
func Token(ctx context.Context, c client.Reader, rcv *infrav1.TerraformRunReceiver) ([]byte, error) {
	var sec corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: rcv.Namespace, Name: rcv.Spec.SecretRef.Name}, &sec); err != nil {
		return nil, fmt.Errorf("spec.secretRef: reading Secret %s: %w", rcv.Spec.SecretRef.Name, err)
	}
	tok := bytes.TrimSpace(sec.Data[TokenKey])
	if len(tok) < MinTokenLength {
		return nil, fmt.Errorf("spec.secretRef: Secret %s has no key %q of at least %d characters; set one, for example with: kubectl create secret generic %s --from-literal=token=$(head -c 24 /dev/urandom | base64)", sec.Name, TokenKey, MinTokenLength, sec.Name)
	}
	return tok, nil
}

// Default lifetimes of the token cache.
const (
	// DefaultTokenTTL is how long a token read is used before it is read
	// again.
	DefaultTokenTTL = 30 * time.Second
	// DefaultTokenRefresh is how soon after a read a failed verification
	// reads the token again (a rotated token): at most one read a second
	// per Secret, however many forged requests come.
	DefaultTokenRefresh = time.Second
)

// tokenCache keeps the receivers' tokens briefly, so that a request reads
// no Secret from the API server, and a forged one at most one a second.
type tokenCache struct {
	// API reads the Secrets.
	API client.Reader
	// TTL and Refresh: see DefaultTokenTTL and DefaultTokenRefresh.
	TTL, Refresh time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu   sync.Mutex
	byNS map[types.NamespacedName]cachedToken
}

type cachedToken struct {
	token []byte
	err   error
	at    time.Time
}

// get is the receiver's token: the cached one while younger than TTL, or,
// with stale (a verification failed), younger than Refresh.
func (c *tokenCache) get(ctx context.Context, rcv *infrav1.TerraformRunReceiver, stale bool) ([]byte, error) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	key := types.NamespacedName{Namespace: rcv.Namespace, Name: rcv.Spec.SecretRef.Name}
	maxAge := c.TTL
	if stale {
		maxAge = c.Refresh
	}
	c.mu.Lock()
	e, ok := c.byNS[key]
	c.mu.Unlock()
	if ok && now().Sub(e.at) < maxAge {
		return e.token, e.err
	}
	tok, err := Token(ctx, c.API, rcv)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byNS == nil {
		c.byNS = map[types.NamespacedName]cachedToken{}
	}
	c.byNS[key] = cachedToken{token: tok, err: err, at: now()}
	return tok, err
}
