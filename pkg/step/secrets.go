package step

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Redaction. Every secret a step can see is registered with AddSecret, in
// every form terraform, a provider or a tool may print it, before
// terraform runs; Redact then replaces them in all the step prints, in its
// failure summary and in the plans it keeps.

const (
	// MinSecret is the shortest secret value redacted: a shorter value is
	// too likely to be ordinary text ("true", "1", "dev").
	MinSecret = 4
	// MinSecretPiece is the shortest derived form registered (an encoding,
	// a line or a word of a secret): shorter pieces are too likely to be
	// ordinary text.
	MinSecretPiece = 8
	// maxSecretPieces bounds the lines and words one value registers, so a
	// large mounted file cannot make every line of the log slow to redact.
	maxSecretPieces = 2048
)

// Redacted is what a secret becomes in a step's log and failure summary.
const Redacted = "***"

// base64Alphabets are the encodings a secret is registered in: standard
// and URL-safe, each padded and raw (unpadded).
var base64Alphabets = []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding}

// SecretForms returns a secret value (without surrounding whitespace) and
// every form of it that is registered for redaction: base64 of the value
// and of the value with a trailing newline (standard, URL-safe, padded and
// raw), the part of its base64 that shows whatever precedes it in a longer
// encoded text (so a token inside an encoded "user:token" or a kubeconfig
// is caught too), its JSON-escaped (with and without HTML escapes) and
// URL-escaped forms, each of its lines
// and each whitespace-separated word (so a PEM key or a multi-line token
// printed in part is caught; not PEM armor, "-----BEGIN ...", which is not
// secret). A value shorter than MinSecret gives nothing; a derived form
// shorter than MinSecretPiece is left out.
func SecretForms(v string) []string {
	v = strings.TrimSpace(v)
	if len(v) < MinSecret {
		return nil
	}
	f := formSet{seen: map[string]bool{v: true}, out: []string{v}}
	for _, raw := range []string{v, v + "\n"} {
		for _, enc := range base64Alphabets {
			f.add(enc.EncodeToString([]byte(raw)))
		}
	}
	for offset := range 3 {
		core := base64Core(v, offset)
		f.add(core)
		f.add(strings.NewReplacer("+", "-", "/", "_").Replace(core))
	}
	for _, q := range jsonEscaped(v) {
		f.add(q)
	}
	f.add(url.QueryEscape(v))
	pieces := 0
	for _, p := range append(strings.Split(v, "\n"), strings.Fields(v)...) {
		if pieces++; pieces > maxSecretPieces {
			break
		}
		// PEM armor ("-----BEGIN RSA PRIVATE KEY-----") is not secret.
		if p = strings.TrimSpace(p); !strings.HasPrefix(p, "-----") && !strings.HasSuffix(p, "-----") {
			f.add(p)
		}
	}
	return f.out
}

// jsonEscaped is v as inside a JSON string, with and without the escaping
// of <, > and & that Go's encoder (and so terraform's JSON) applies.
func jsonEscaped(v string) []string {
	var out []string
	for _, html := range []bool{true, false} {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if err := enc.Encode(v); err == nil {
			q := strings.TrimSuffix(b.String(), "\n")
			out = append(out, q[1:len(q)-1])
		}
	}
	return out
}

// formSet collects distinct forms of a secret.
type formSet struct {
	seen map[string]bool
	out  []string
}

func (f *formSet) add(s string) {
	if len(s) < MinSecretPiece || f.seen[s] {
		return
	}
	f.seen[s] = true
	f.out = append(f.out, s)
}

// base64Core is the part of the standard base64 of v, found after offset
// bytes of something else, that depends on v alone: the characters that
// are the same whatever comes before and after v in a longer encoded text.
func base64Core(v string, offset int) string {
	enc := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x00", offset) + v))
	start := []int{0, 2, 3}[offset]
	n := offset + len(v)
	end := 4*(n/3) + []int{0, 1, 2}[n%3]
	if end <= start {
		return ""
	}
	return enc[start:end]
}

// AddSecret registers a secret value, in all the forms SecretForms gives,
// to redact from everything the step prints, from its failure summary and
// from the plans it keeps. Every secret a step reads goes through it.
func (r *Runner) AddSecret(v string) {
	r.addForms(SecretForms(v)...)
}

// addForms registers exact strings to redact.
func (r *Runner) addForms(forms ...string) {
	if len(forms) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.known == nil {
		r.known = map[string]bool{}
	}
	for _, f := range forms {
		if !r.known[f] {
			r.known[f] = true
			r.secrets = append(r.secrets, f)
		}
	}
	r.replacers = nil
}

// Redact replaces every registered secret in s with Redacted.
func (r *Runner) Redact(s string) string { return r.redactWith(s, Redacted) }

// redactWith replaces every registered secret in s with repl. At each
// place the longest secret that starts there is replaced whole.
func (r *Runner) redactWith(s, repl string) string {
	r.mu.Lock()
	rep := r.replacers[repl]
	if rep == nil && len(r.secrets) > 0 {
		rep = replacer(r.secrets, repl)
		if r.replacers == nil {
			r.replacers = map[string]*strings.Replacer{}
		}
		r.replacers[repl] = rep
	}
	r.mu.Unlock()
	if rep == nil {
		return s
	}
	return rep.Replace(s)
}

// secretList is every registered secret and form.
func (r *Runner) secretList() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.secrets...)
}

// maskPlan masks the plan as JSON (MaskPlanJSON) with every registered
// secret, and registers the strings terraform marked sensitive (as they
// are: they come from the plan, not from a mount) so the readable plan
// and the log redact them from then on.
func (r *Runner) maskPlan(plan []byte) ([]byte, error) {
	masked, found, err := MaskPlanJSON(plan, r.secretList())
	if err != nil {
		return nil, err
	}
	r.addForms(found...)
	return masked, nil
}

// LoadSecretFiles registers the content of every file in the given
// directories (spec.terraform.files: Secrets mounted at their mountPath,
// every key a file) as a secret. A directory that does not exist adds
// nothing; a file that cannot be read fails the step before terraform
// runs with a secret it could not redact.
func (r *Runner) LoadSecretFiles(dirs []string) error {
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("--secret-files %s: %w", dir, err)
		}
		for _, e := range entries {
			// A mounted Secret's ..data bookkeeping holds the same files.
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			p := filepath.Join(dir, e.Name())
			if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
				continue
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("--secret-files %s: %w", dir, err)
			}
			r.AddSecret(string(b))
		}
	}
	return nil
}

// LoadBackendConfig registers the values of a backend configuration file
// (the configSecretRef Secret's HCL "key = value" settings, as init passes
// it to -backend-config) as secrets: every quoted string value, not the
// keys, and not the numbers and booleans.
func (r *Runner) LoadBackendConfig(path string) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--backend-config-file: %w", err)
	}
	for _, v := range BackendConfigValues(string(b)) {
		r.AddSecret(v)
	}
	return nil
}

// BackendConfigValues returns the quoted string values of an HCL backend
// configuration, line by line ("key = \"value\"", also inside blocks and
// before a comment).
func BackendConfigValues(hcl string) []string {
	var out []string
	for _, line := range strings.Split(hcl, "\n") {
		_, val, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		if !strings.HasPrefix(val, `"`) {
			continue
		}
		q, err := strconv.QuotedPrefix(val)
		if err != nil {
			// Not a Go-compatible escape: everything up to the last quote.
			if i := strings.LastIndex(val, `"`); i > 0 {
				out = append(out, val[1:i])
			}
			continue
		}
		if s, err := strconv.Unquote(q); err == nil {
			out = append(out, s)
		}
	}
	return out
}
