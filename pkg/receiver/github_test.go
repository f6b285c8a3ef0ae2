package receiver

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-cmp/cmp"
)

// TestGitHubApp: as an App installation, the reporter signs a JWT with the
// App's key, reads the App's bot login and an installation token, keeps
// the token until shortly before it expires, and uses it for the API.
func TestGitHubApp(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	statuses := "/repos/octocat/Hello-World/statuses/" + sha
	comments := "/repos/octocat/Hello-World/issues/7/comments"
	f := newFakeForge(t, map[string][]answerOf{
		"GET /app": {{file: "github-app.json"}},
		"POST /app/installations/42/access_tokens": {{code: 201, file: "github-installation-token.json"}},
		"POST " + statuses:                         {{code: 201, file: "github-status.json"}},
		"GET " + comments:                          {{body: `[{"id":10,"body":"` + mark + `","user":{"login":"mallory"}},{"id":11,"body":"` + mark + `","user":{"login":"octoapp[bot]"}}]`}},
	})
	g, err := newGitHubReporter(f.srv.URL, Credentials{App: &GitHubApp{AppID: 7, InstallationID: 42, PrivateKey: pemKey}}, f.srv.Client(), &appTokenCache{})
	if err != nil {
		t.Fatal(err)
	}
	expires := time.Date(2016, 7, 11, 22, 14, 10, 0, time.UTC) // the documented token's expires_at
	now := expires.Add(-time.Hour)
	g.now = func() time.Time { return now }
	ctx := context.Background()
	if err := g.Status(ctx, "octocat", "Hello-World", sha, "c", "pending", "d", ""); err != nil {
		t.Fatal(err)
	}
	id, err := g.FindComment(ctx, "octocat", "Hello-World", 7, mark)
	if err != nil || id != 11 {
		t.Errorf("FindComment = %d, %v; want 11, the App bot's", id, err)
	}
	now = expires.Add(-4 * time.Minute) // within the margin: a new token
	if err := g.Status(ctx, "octocat", "Hello-World", sha, "c", "pending", "d", ""); err != nil {
		t.Fatal(err)
	}
	const tok = "Bearer ghs_16C7e42F292c6912E7710c838347Ae178B4a"
	var got []string
	for _, c := range f.took(false) {
		auth := c.Auth
		if auth != tok {
			auth = "Bearer <jwt>"
			checkAppJWT(t, strings.TrimPrefix(c.Auth, "Bearer "), &key.PublicKey)
		}
		got = append(got, c.Method+" "+c.Path+" "+auth)
	}
	want := []string{
		"GET /app Bearer <jwt>",
		"POST /app/installations/42/access_tokens Bearer <jwt>",
		"POST " + statuses + " " + tok,
		"GET " + comments + " " + tok, // the token and login from the cache
		"GET /app Bearer <jwt>",
		"POST /app/installations/42/access_tokens Bearer <jwt>",
		"POST " + statuses + " " + tok,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func checkAppJWT(t *testing.T, s string, pub *rsa.PublicKey) {
	t.Helper()
	var claims jwt.RegisteredClaims
	tok, err := jwt.ParseWithClaims(s, &claims, func(*jwt.Token) (any, error) { return pub, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithoutClaimsValidation())
	if err != nil || !tok.Valid {
		t.Fatalf("the App's JWT %q: %v", s, err)
	}
	if claims.Issuer != "7" || claims.ExpiresAt.Sub(claims.IssuedAt.Time) != 10*time.Minute {
		t.Errorf("JWT claims: iss %q, lifetime %s; want 7 and 10m", claims.Issuer, claims.ExpiresAt.Sub(claims.IssuedAt.Time))
	}
}
