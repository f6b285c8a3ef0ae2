// Package providers checks an install's provider mirror settings, for the
// manager at its start and for opr8r-step before terraform reads them.
package providers

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// MirrorURL checks a provider network mirror's URL and returns it as
// terraform wants it: https (terraform installs from no other mirror),
// ending in a slash.
func MirrorURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("provider mirror %q: terraform installs from a network mirror over https only; give an https:// URL without a query", raw)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u.String(), nil
}

// CheckCA accepts text that holds at least one certificate and nothing
// else.
func CheckCA(text string) error {
	rest, n := []byte(text), 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("the provider mirror's CA holds a %s block; give only PEM certificates", b.Type)
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Errorf("the provider mirror's CA: %w", err)
		}
		n++
	}
	if n == 0 || strings.TrimSpace(string(rest)) != "" {
		return errors.New("the provider mirror's CA is not PEM certificates")
	}
	return nil
}
