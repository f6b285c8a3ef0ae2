package stateapi

import (
	"context"
	"encoding/base64"
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// TestAdmitBoundsAChild: a child gets MaxPerChild calls in flight, then
// 429s, while another child still gets its own; a call's slot comes back.
func TestAdmitBoundsAChild(t *testing.T) {
	s := &Server{MaxInFlight: 4, MaxPerChild: 2, Upstream: &rest.Config{Host: "https://127.0.0.1:1"}}
	ctx := context.Background()
	r1, ok1 := s.admit(ctx, "ns/app-1")
	_, ok2 := s.admit(ctx, "ns/app-1")
	_, ok3 := s.admit(ctx, "ns/app-1")
	if !ok1 || !ok2 || ok3 {
		t.Fatalf("one child's calls: %v %v %v, want two admitted, the third refused", ok1, ok2, ok3)
	}
	if _, ok := s.admit(ctx, "ns/db-1"); !ok {
		t.Fatal("another child was refused while the first held its share")
	}
	r1()
	if _, ok := s.admit(ctx, "ns/app-1"); !ok {
		t.Fatal("a released slot did not come back")
	}
	if _, ok := s.admit(ctx, "ns/web-1"); !ok {
		t.Fatal("the fourth slot was refused")
	}
	// Every slot taken (4): a fifth waits until its context ends.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, ok := s.admit(short, "ns/net-1"); ok {
		t.Fatal("a call was admitted past MaxInFlight")
	}
}

// TestReviewsOfNewTokensAreLimited: made-up tokens cost a TokenReview each
// only at the limit's rate; a refused token is answered from the cache.
func TestReviewsOfNewTokensAreLimited(t *testing.T) {
	cs := fake.NewClientset()
	reviews := 0
	cs.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		reviews++
		return true, &authenticationv1.TokenReview{Status: authenticationv1.TokenReviewStatus{Authenticated: false}}, nil
	})
	tr := &TokenReviewer{Client: cs.AuthenticationV1().TokenReviews(), Limit: rate.NewLimiter(rate.Every(time.Hour), 3)}
	ctx := context.Background()
	tok := func(i int) string {
		return "eyJhbGciOiJSUzI1NiJ9." + b64(`{"aud":["opr8r.io/state/ns/app/uid/app-1/runner"],"n":`+itoa(i)+`}`) + ".sig"
	}
	for i := 0; i < 3; i++ {
		if _, err := tr.Authenticate(ctx, tok(i)); err == nil {
			t.Fatal("a refused token authenticated")
		}
	}
	if _, err := tr.Authenticate(ctx, tok(0)); err == nil || reviews != 3 {
		t.Fatalf("a token refused before: %v, %d reviews", err, reviews)
	}
	if _, err := tr.Authenticate(ctx, tok(9)); err == nil || reviews != 3 {
		t.Fatalf("a fourth new token past the limit: %v, %d reviews (want no review)", err, reviews)
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
func itoa(i int) string   { return strconv.Itoa(i) }
