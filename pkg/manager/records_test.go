package manager

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/records"
	"github.com/opr8r/opr8r/pkg/records/s3"
	"github.com/opr8r/opr8r/test/envtestutil"
)

func TestObjectStoreConfig(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	cases := map[string]struct {
		encryptionKey string
		want          string
	}{
		"base64":    {encryptionKey: base64.StdEncoding.EncodeToString(key) + "\n"},
		"hex":       {encryptionKey: hex.EncodeToString(key)},
		"raw":       {encryptionKey: string(key)},
		"too short": {encryptionKey: "c2hvcnQ=", want: "must be 32 bytes"},
		"missing":   {want: "has no key encryption-key"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{"access-key": "AK\n", "secret-key": "SK"}
			if tc.encryptionKey != "" {
				files["encryption-key"] = tc.encryptionKey
			}
			for k, v := range files {
				if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfg, err := ObjectStoreConfig(s3.Config{Endpoint: "e", Bucket: "b"}, dir)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil || cfg.AccessKey != "AK" || cfg.SecretKey != "SK" || string(cfg.Key) != string(key) {
				t.Fatalf("cfg = %+v, err %v", cfg, err)
			}
		})
	}
}

// The expirer deletes what is older than the retention and what belongs
// to a TerraformRun that no longer exists, against a real S3 server.
func TestRecordsExpirer(t *testing.T) {
	srv, err := envtestutil.StartS3(t.TempDir(), "opr8r-records")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	store, err := s3.New(s3.Config{Endpoint: srv.Endpoint, Insecure: true, Bucket: srv.Bucket, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Key: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, run := range []string{"alive", "deleted"} {
		if err := store.Put(ctx, records.Key{Namespace: "team-a", Run: run, RunID: run + "-1", Step: "plan", Kind: records.KindLog}, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	scheme := runtime.NewScheme()
	_ = infrav1.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&infrav1.TerraformRun{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "alive"}}).Build()
	left := func() []string {
		var out []string
		for _, run := range []string{"alive", "deleted"} {
			recs, err := store.List(ctx, "team-a", run)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				out = append(out, r.RunID)
			}
		}
		return out
	}
	e := &RecordsExpirer{Store: store, Client: c, Retention: time.Hour}
	e.expire(ctx)
	if got := strings.Join(left(), ","); got != "alive-1" {
		t.Fatalf("after expiring within the retention: %s, want only the live TerraformRun's alive-1", got)
	}
	e.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	e.expire(ctx)
	if got := left(); len(got) != 0 {
		t.Fatalf("past the retention: %v left", got)
	}
}
