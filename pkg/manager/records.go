package manager

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/records/s3"
)

// DefaultRecordsRetention is how long the object store keeps a record.
const DefaultRecordsRetention = 30 * 24 * time.Hour

// ObjectStoreConfig reads the object store's credentials and encryption
// key from a mounted Secret directory (keys access-key, secret-key and
// encryption-key: 32 bytes, as base64, hex or raw) into cfg.
func ObjectStoreConfig(cfg s3.Config, credentialsDir string) (s3.Config, error) {
	read := func(k string) (string, error) {
		b, err := os.ReadFile(filepath.Join(credentialsDir, k))
		if err != nil {
			return "", fmt.Errorf("the object store's credentials Secret has no key %s: %w", k, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	var err error
	if cfg.AccessKey, err = read("access-key"); err != nil {
		return cfg, err
	}
	if cfg.SecretKey, err = read("secret-key"); err != nil {
		return cfg, err
	}
	key, err := read("encryption-key")
	if err != nil {
		return cfg, err
	}
	cfg.Key, err = parseKey(key)
	return cfg, err
}

// parseKey reads a 32-byte key written as base64 (openssl rand -base64
// 32), hex (openssl rand -hex 32) or raw bytes.
func parseKey(s string) ([]byte, error) {
	if b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s)); err == nil && len(b) == 32 {
		return b, nil
	}
	if b, err := hex.DecodeString(strings.TrimSpace(s)); err == nil && len(b) == 32 {
		return b, nil
	}
	if len(s) == 32 {
		return []byte(s), nil
	}
	return nil, errors.New("the object store's encryption-key must be 32 bytes, as base64 (openssl rand -base64 32), hex or raw")
}

// RecordsExpirer enforces the object store's retention: every Period it
// deletes the records stored longer than Retention and those of
// TerraformRuns that no longer exist (a deletion while the store was
// unreachable). It runs on the leader only.
type RecordsExpirer struct {
	Store     *s3.Store
	Client    client.Reader
	Retention time.Duration
	Period    time.Duration
	Now       func() time.Time
}

// Start runs the expirer until ctx ends.
func (e *RecordsExpirer) Start(ctx context.Context) error {
	period := e.Period
	if period == 0 {
		period = time.Hour
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		e.expire(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (e *RecordsExpirer) expire(ctx context.Context) {
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	log := ctrl.LoggerFrom(ctx).WithName("records-expirer")
	gone := func(ns, name string) bool {
		err := e.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &infrav1.TerraformRun{})
		return apierrors.IsNotFound(err)
	}
	n, err := e.Store.Expire(ctx, now().Add(-e.Retention), gone)
	if err != nil {
		log.Error(err, "expiring records in the object store")
		return
	}
	if n > 0 {
		log.Info("expired records in the object store", "objects", n, "retention", e.Retention)
	}
}
