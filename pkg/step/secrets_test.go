package step_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/pkg/step"
)

// TestSecretForms: a secret is registered with its base64 forms, its lines
// and its words; short values and short pieces are left out.
func TestSecretForms(t *testing.T) {
	// ">>>" and "???" encode to base64 with "+" and "/", so the URL-safe
	// forms differ from the standard ones.
	const pem = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nshort\n-----END KEY-----"
	cases := map[string]struct {
		value     string
		wantIn    []string
		wantNotIn []string
	}{
		"too short to redact safely": {value: " ab1 ", wantNotIn: []string{"ab1"}},
		"a token": {
			value: "tok>>>en???-9f\n",
			wantIn: []string{
				"tok>>>en???-9f",
				base64.StdEncoding.EncodeToString([]byte("tok>>>en???-9f")),
				base64.URLEncoding.EncodeToString([]byte("tok>>>en???-9f")),
				base64.RawStdEncoding.EncodeToString([]byte("tok>>>en???-9f")),
				base64.RawURLEncoding.EncodeToString([]byte("tok>>>en???-9f")),
				base64.StdEncoding.EncodeToString([]byte("tok>>>en???-9f\n")),
			},
		},
		"a PEM key: its lines, not its armor nor short lines": {
			value:     pem,
			wantIn:    []string{pem, "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", base64.StdEncoding.EncodeToString([]byte(pem))},
			wantNotIn: []string{"-----BEGIN KEY-----", "-----BEGIN", "short", "KEY-----"},
		},
		"words of a multi-word value, at least 8 long": {
			value:     "user=admin password=Sup3rS3cret0 x=1",
			wantIn:    []string{"user=admin", "password=Sup3rS3cret0"},
			wantNotIn: []string{"x=1"},
		},
		"a 4-character value: itself and its long enough encodings only": {
			value:     "abcd",
			wantIn:    []string{"abcd", "YWJjZA==", "YWJjZAo="},
			wantNotIn: []string{"YWJjZA"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := step.SecretForms(tc.value)
			for _, w := range tc.wantIn {
				if !slices.Contains(got, w) {
					t.Errorf("forms lack %q: %q", w, got)
				}
			}
			for _, w := range tc.wantNotIn {
				if slices.Contains(got, w) {
					t.Errorf("forms hold %q: %q", w, got)
				}
			}
			for i, f := range got {
				if i > 0 && len(f) < step.MinSecretPiece {
					t.Errorf("derived form %q is shorter than %d", f, step.MinSecretPiece)
				}
			}
		})
	}
}

// TestRedactCatchesEveryForm: what a tool may print of a registered secret
// is redacted: the secret, its encodings alone or inside a longer encoded
// text (basic auth, a docker config's auth), a line or a word of it.
func TestRedactCatchesEveryForm(t *testing.T) {
	const secret = "tok>>>en???-9f second-word-4411\nline-two-of-it"
	cases := map[string]string{
		"the value":                secret,
		"base64":                   base64.StdEncoding.EncodeToString([]byte(secret)),
		"URL-safe base64":          base64.URLEncoding.EncodeToString([]byte(secret)),
		"unpadded base64":          base64.RawStdEncoding.EncodeToString([]byte(secret)),
		"base64 with its newline":  base64.StdEncoding.EncodeToString([]byte(secret + "\n")),
		"a line":                   "line-two-of-it",
		"a word":                   "second-word-4411",
		"JSON-escaped":             `tok\u003e\u003e\u003een???-9f second-word-4411\nline-two-of-it`,
		"inside base64 (offset 1)": base64.StdEncoding.EncodeToString([]byte("u" + secret + ":x")),
		"inside base64 (offset 2)": base64.URLEncoding.EncodeToString([]byte("u:" + secret)),
		"inside base64 (offset 0)": base64.RawStdEncoding.EncodeToString([]byte("usr" + secret + "tail")),
	}
	r := &step.Runner{}
	r.AddSecret(secret)
	for name, printed := range cases {
		t.Run(name, func(t *testing.T) {
			got := r.Redact("before " + printed + " after")
			if !strings.Contains(got, step.Redacted) {
				t.Fatalf("nothing redacted in %q", got)
			}
			// What is left of an encoded text holds at most the two
			// characters on each side that mix the secret with its
			// neighbours: no four characters of the secret's encodings.
			for _, f := range step.SecretForms(secret) {
				if len(f) >= 4 && strings.Contains(got, f) {
					t.Errorf("%q is still in %q", f, got)
				}
			}
			if strings.Contains(got, "line-two") || strings.Contains(got, "second-word") {
				t.Errorf("part of the secret is still in %q", got)
			}
		})
	}
}

// TestBackendConfigValues: the values of a backend configuration are
// secrets, its keys, numbers and booleans are not.
func TestBackendConfigValues(t *testing.T) {
	hcl := "bucket = \"state-bucket\"\nkey    = \"a/b.tfstate\" # the object\nskip_credentials_validation = true\nmax_retries = 5\n" +
		"assume_role {\n  role_arn = \"arn:aws:iam::1:role/x\"\n}\nsecret_key = \"multi\\nline \\\"quoted\\\"\"\n"
	want := []string{"state-bucket", "a/b.tfstate", "arn:aws:iam::1:role/x", "multi\nline \"quoted\""}
	if diff := cmp.Diff(want, step.BackendConfigValues(hcl)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestLoadSecretFiles: every file of a Secret mounted as files is a
// secret (not the mount's ..data bookkeeping twice, not a missing mount).
func TestLoadSecretFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "..2026_11_26", "credentials"), "[default]\naws_secret_access_key = FILE-SECRET-LINE-91\n")
	if err := os.Symlink("..2026_11_26/credentials", filepath.Join(dir, "credentials")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "token"), "FILE-TOKEN-VALUE-3b")
	r := &step.Runner{}
	if err := r.LoadSecretFiles([]string{dir, filepath.Join(t.TempDir(), "missing")}); err != nil {
		t.Fatal(err)
	}
	got := r.Redact("key FILE-SECRET-LINE-91, token " + base64.StdEncoding.EncodeToString([]byte("FILE-TOKEN-VALUE-3b")))
	if want := "key ***, token ***"; got != want {
		t.Errorf("Redact = %q, want %q", got, want)
	}
}

// TestFailureSummary: a failure summary is redacted, one line, at most
// MaxFailureSummary characters, cut with "…", and says where the whole
// text is.
func TestFailureSummary(t *testing.T) {
	const secret = "SUMMARY-SECRET-5d0c"
	long := "Error: Resource precondition failed: " + strings.Repeat("ünïcode words ", 60)
	cases := map[string]struct {
		key        records.Key
		msg        string
		wantPrefix string
		wantCut    bool
		wantWhere  string
	}{
		"short, with records": {
			key:        records.Key{Namespace: "team-a", Run: "net", RunID: "net-3", Step: "plan"},
			msg:        "Error: Invalid value\n\n  for " + secret + "\n",
			wantPrefix: "Error: Invalid value for ***",
			wantWhere:  "(whole text: kubectl tfrun logs net --run net-3 --step plan)",
		},
		"long, cut": {
			key:        records.Key{Namespace: "team-a", Run: "net", RunID: "net-3", Step: "check-policy"},
			msg:        long,
			wantPrefix: "Error: Resource precondition failed: ünïcode words",
			wantCut:    true,
			wantWhere:  "(whole text: kubectl tfrun logs net --run net-3 --step check-policy)",
		},
		"a secret cut by the bound is still redacted": {
			// Cut first, a part of the encoded secret would be left.
			msg:        strings.Repeat("x", 250) + " " + base64.StdEncoding.EncodeToString([]byte(secret)) + " tail",
			wantPrefix: strings.Repeat("x", 250) + " *** tail",
			wantWhere:  "(whole text: this step's log)",
		},
		"no records, colour codes and control characters": {
			msg:        "\x1b[31mError:\x1b[0m bad\r\tthing",
			wantPrefix: "Error: bad thing",
			wantWhere:  "(whole text: this step's log)",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := &step.Runner{RecordKey: tc.key}
			r.AddSecret(secret)
			got := r.FailureSummary(tc.msg)
			if n := utf8.RuneCountInString(got); n > step.MaxFailureSummary {
				t.Errorf("%d characters, more than %d: %q", n, step.MaxFailureSummary, got)
			}
			if strings.ContainsAny(got, "\n\r\t\x1b") {
				t.Errorf("not one plain line: %q", got)
			}
			if !strings.HasPrefix(got, tc.wantPrefix) || !strings.HasSuffix(got, " "+tc.wantWhere) {
				t.Errorf("summary = %q, want %q ... %q", got, tc.wantPrefix, tc.wantWhere)
			}
			if cut := strings.HasSuffix(strings.TrimSuffix(got, " "+tc.wantWhere), "…"); cut != tc.wantCut {
				t.Errorf("cut = %v, want %v: %q", cut, tc.wantCut, got)
			}
			for _, f := range step.SecretForms(secret) {
				if strings.Contains(got, f) {
					t.Errorf("the summary holds %q: %q", f, got)
				}
			}
		})
	}
}
