package manager_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/opr8r/opr8r/pkg/manager"
)

func TestStepBinaryFromImage(t *testing.T) {
	asked := false
	server := func(v string, err error) func() (string, error) {
		return func() (string, error) { asked = true; return v, err }
	}
	cases := []struct {
		mode, server string
		serverErr    error
		want         bool
		wantAsked    bool
		wantErr      string
	}{
		{mode: "image-volume", want: true},
		{mode: "init-container", want: false},
		{mode: "auto", server: "v1.36.3", want: true, wantAsked: true},
		{mode: "", server: "v1.37.0-alpha.1", want: true, wantAsked: true},
		{mode: "auto", server: "v1.35.2", want: false, wantAsked: true},
		{mode: "auto", server: "v1.30.0+k3s1", want: false, wantAsked: true},
		{mode: "auto", serverErr: errors.New("connection refused"), wantAsked: true, wantErr: "reading the API server's version: connection refused (set --step-binary=image-volume or init-container)"},
		{mode: "auto", server: "v1.36.1-eks-3025e55", want: true, wantAsked: true},
		{mode: "auto", server: "garbage", want: false, wantAsked: true},
		{mode: "volume", wantErr: `--step-binary="volume": want auto, image-volume or init-container`},
	}
	for _, tc := range cases {
		asked = false
		got, why, err := manager.StepBinaryFromImage(tc.mode, server(tc.server, tc.serverErr))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q on %q: error %v, want %q", tc.mode, tc.server, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want || why == "" || asked != tc.wantAsked {
			t.Errorf("%q on %q: %v (%q, %v), asked the server: %v; want %v, asked: %v", tc.mode, tc.server, got, why, err, asked, tc.want, tc.wantAsked)
		}
	}
}
