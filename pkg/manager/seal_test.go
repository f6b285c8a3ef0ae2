package manager_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/opr8r/opr8r/pkg/manager"
	"github.com/opr8r/opr8r/test/envtestutil"
)

// TestLoadSealKey: the first start makes the key, later starts (and other
// replicas) read the same one; a key too short is refused, not used.
func TestLoadSealKey(t *testing.T) {
	env, cfg, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "opr8r-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	first, err := manager.LoadSealKey(ctx, c, "opr8r-system", manager.DefaultSealKeySecret)
	if err != nil || len(first) != 32 {
		t.Fatalf("first start: %d bytes, %v", len(first), err)
	}
	again, err := manager.LoadSealKey(ctx, c, "opr8r-system", manager.DefaultSealKeySecret)
	if err != nil || !bytes.Equal(first, again) {
		t.Fatalf("a restart read another key (%v)", err)
	}
	short := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "opr8r-system", Name: "short"}, Data: map[string][]byte{"key": []byte("abc")}}
	if err := c.Create(ctx, short); err != nil {
		t.Fatal(err)
	}
	if _, err := manager.LoadSealKey(ctx, c, "opr8r-system", "short"); err == nil || !strings.Contains(err.Error(), "want at least 32") {
		t.Fatalf("a 3-byte key: %v, want it refused", err)
	}
}
