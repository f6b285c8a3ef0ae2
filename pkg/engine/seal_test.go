package engine

import (
	"strings"
	"testing"
)

func TestMAC(t *testing.T) {
	key := Seals{Key: []byte(strings.Repeat("k", 32))}
	mac, err := key.MAC("preview", "a", "bc")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		seals  Seals
		domain string
		parts  []string
		want   bool
	}{
		"the same parts":        {seals: key, domain: "preview", parts: []string{"a", "bc"}, want: true},
		"parts cut elsewhere":   {seals: key, domain: "preview", parts: []string{"ab", "c"}},
		"another domain":        {seals: key, domain: "comment", parts: []string{"a", "bc"}},
		"another key":           {seals: Seals{Key: []byte(strings.Repeat("x", 32))}, domain: "preview", parts: []string{"a", "bc"}},
		"no key":                {seals: Seals{}, domain: "preview", parts: []string{"a", "bc"}},
		"one part more (empty)": {seals: key, domain: "preview", parts: []string{"a", "bc", ""}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.seals.VerifyMAC(mac, tc.domain, tc.parts...); got != tc.want {
				t.Errorf("VerifyMAC = %v, want %v", got, tc.want)
			}
		})
	}
}
