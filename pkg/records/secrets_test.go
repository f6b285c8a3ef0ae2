package records

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// gzipped is data gzipped, as Put stores it.
func gzipped(t *testing.T, data []byte) []byte {
	t.Helper()
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return z.Bytes()
}

// TestGetBoundsInflation: a record's chunks are Secrets anyone who may
// write Secrets in the namespace can make; reading one inflates no more
// than its declared size, and never past MaxRecordSize, however small
// its gzip stream.
func TestGetBoundsInflation(t *testing.T) {
	k := Key{Namespace: "ns", Run: "hello", RunID: "hello-1", Step: "plan", Kind: KindLog}
	honest := []byte(strings.Repeat("terraform says hello\n", 100))
	cases := map[string]struct {
		data     []byte // what the only chunk inflates to (nil: as Put wrote it)
		declared string // the chunks' declared size ("" : as Put wrote it; "-": none)
		wantErr  string
		// wantTooLarge: the error is ErrTooLarge, which callers tell
		// from a read to retry.
		wantTooLarge bool
	}{
		"as a step wrote it": {},
		"more than it declares": {
			data: append(append([]byte{}, honest...), "and more"...), wantErr: "inflates past its declared size (2100 bytes)",
		},
		"a bomb that declares no size": {
			data: make([]byte, MaxRecordSize+1), declared: "-", wantErr: "inflates past 64 MiB, the most a record may hold", wantTooLarge: true,
		},
		"a bomb that declares more than the most": {
			data: make([]byte, MaxRecordSize+1), declared: strconv.Itoa(MaxRecordSize + 10), wantErr: "inflates past 64 MiB", wantTooLarge: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cs := fake.NewClientset()
			s := &SecretStore{Client: cs}
			ctx := context.Background()
			if err := s.Put(ctx, k, honest); err != nil {
				t.Fatal(err)
			}
			sec, err := cs.CoreV1().Secrets(k.Namespace).Get(ctx, SecretName(k, 0), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.data != nil {
				sec.Data[chunkKey] = gzipped(t, tc.data)
			}
			switch tc.declared {
			case "":
			case "-":
				delete(sec.Annotations, sizeAnnotation)
			default:
				sec.Annotations[sizeAnnotation] = tc.declared
			}
			if _, err := cs.CoreV1().Secrets(k.Namespace).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, k)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Get() error = %v, want %q", err, tc.wantErr)
				}
				if got := errors.Is(err, ErrTooLarge); got != tc.wantTooLarge {
					t.Errorf("Get() error %v is ErrTooLarge: %v, want %v", err, got, tc.wantTooLarge)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(honest), string(got)); diff != "" {
				t.Errorf("Get() (-want +got):\n%s", diff)
			}
		})
	}
}
