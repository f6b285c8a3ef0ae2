// Package s3 is the records store in an S3-compatible object store, apart
// from pkg/records so the step runner, which writes only Secrets, does not
// carry an S3 client.
package s3

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/opr8r/opr8r/pkg/records"
)

// Config configures the object store: an S3-compatible endpoint, a
// bucket, static credentials and the encryption key.
type Config struct {
	// Endpoint is host[:port], without a scheme.
	Endpoint string
	// Insecure speaks plain HTTP (a server in the cluster or on localhost).
	Insecure bool
	// Bucket holds the records; it must exist.
	Bucket string
	// Region of the bucket (us-east-1 when empty).
	Region string
	// Prefix starts every object key, for example "opr8r/".
	Prefix string
	// AccessKey and SecretKey are the store's credentials.
	AccessKey, SecretKey string
	// Key is the 32-byte AES-256 key objects are encrypted with.
	Key []byte
}

// Store keeps records as objects <prefix><namespace>/<run>/<run id>/<step>/<kind>,
// each gzipped and then encrypted with AES-256-GCM before it is sent
// (a random nonce per object; the object's key is the additional data, so
// an object copied under another key does not decrypt). The server never
// sees a plan or a log in clear.
type Store struct {
	c      *minio.Client
	bucket string
	prefix string
	aead   cipher.AEAD
}

var _ records.Store = &Store{}

// objectMagic starts every object: the format's name and version.
const objectMagic = "opr8r-record-v1\n"

// sizeMeta is the user metadata with the record's size in clear bytes.
const sizeMeta = "Opr8r-Size"

// New connects to the object store. It does not contact the
// server; Check does.
func New(cfg Config) (*Store, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, errors.New("records: the object store needs an endpoint and a bucket")
	}
	if strings.Contains(cfg.Endpoint, "://") {
		return nil, fmt.Errorf("records: the object store endpoint %q must be host[:port], without a scheme (use insecure for plain HTTP)", cfg.Endpoint)
	}
	if len(cfg.Key) != 32 {
		return nil, fmt.Errorf("records: the encryption key must be 32 bytes (AES-256), not %d", len(cfg.Key))
	}
	block, err := aes.NewCipher(cfg.Key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: !cfg.Insecure,
		Region: region,
	})
	if err != nil {
		return nil, fmt.Errorf("records: the object store: %w", err)
	}
	return &Store{c: c, bucket: cfg.Bucket, prefix: cfg.Prefix, aead: aead}, nil
}

// Check says whether the bucket exists and the credentials can reach it.
func (s *Store) Check(ctx context.Context) error {
	ok, err := s.c.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("records: the object store's bucket %s: %w", s.bucket, err)
	}
	if !ok {
		return fmt.Errorf("records: the object store has no bucket %s: create it first", s.bucket)
	}
	return nil
}

// ObjectName is the object key of record k.
func (s *Store) ObjectName(k records.Key) string {
	return s.prefix + k.Namespace + "/" + k.Run + "/" + k.RunID + "/" + k.Step + "/" + string(k.Kind)
}

func (s *Store) runPrefix(namespace, run string) string {
	return s.prefix + namespace + "/" + run + "/"
}

// seal gzips and encrypts data for the object name.
func (s *Store) seal(name string, data []byte) ([]byte, error) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := append([]byte(objectMagic), nonce...)
	return s.aead.Seal(out, nonce, z.Bytes(), []byte(name)), nil
}

// open decrypts and gunzips an object.
func (s *Store) open(name string, obj []byte) ([]byte, error) {
	if !bytes.HasPrefix(obj, []byte(objectMagic)) || len(obj) < len(objectMagic)+s.aead.NonceSize() {
		return nil, fmt.Errorf("records: object %s is not an opr8r record", name)
	}
	obj = obj[len(objectMagic):]
	nonce, sealed := obj[:s.aead.NonceSize()], obj[s.aead.NonceSize():]
	z, err := s.aead.Open(nil, nonce, sealed, []byte(name))
	if err != nil {
		return nil, fmt.Errorf("records: object %s does not decrypt with the configured key (another key, or tampered with)", name)
	}
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

// Put encrypts and uploads record k.
func (s *Store) Put(ctx context.Context, k records.Key, data []byte) error {
	if err := k.Validate(); err != nil {
		return err
	}
	name := s.ObjectName(k)
	obj, err := s.seal(name, data)
	if err != nil {
		return err
	}
	_, err = s.c.PutObject(ctx, s.bucket, name, bytes.NewReader(obj), int64(len(obj)), minio.PutObjectOptions{
		ContentType:  "application/octet-stream",
		UserMetadata: map[string]string{sizeMeta: strconv.Itoa(len(data))},
	})
	if err != nil {
		return fmt.Errorf("storing %s in bucket %s: %w", k, s.bucket, err)
	}
	return nil
}

// Get downloads and decrypts record k.
func (s *Store) Get(ctx context.Context, k records.Key) ([]byte, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	name := s.ObjectName(k)
	o, err := s.c.GetObject(ctx, s.bucket, name, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.err(k, err)
	}
	defer o.Close()
	obj, err := io.ReadAll(o)
	if err != nil {
		return nil, s.err(k, err)
	}
	return s.open(name, obj)
}

func (s *Store) err(k records.Key, err error) error {
	if minio.ToErrorResponse(err).Code == "NoSuchKey" {
		return fmt.Errorf("%s: %w", k, records.ErrNotFound)
	}
	return fmt.Errorf("reading %s from bucket %s: %w", k, s.bucket, err)
}

// List returns the records of a TerraformRun.
func (s *Store) List(ctx context.Context, namespace, run string) ([]records.Record, error) {
	var out []records.Record
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.runPrefix(namespace, run), Recursive: true, WithMetadata: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("listing the records of %s/%s: %w", namespace, run, o.Err)
		}
		k, ok := s.keyOf(o.Key)
		if !ok || k.Namespace != namespace || k.Run != run {
			continue
		}
		out = append(out, records.Record{Key: k, Size: s.size(ctx, o), Stored: o.LastModified})
	}
	records.SortRecords(out)
	return out, nil
}

// size is a record's size in clear bytes, from the object's metadata; a
// server that lists no metadata (an extension of MinIO's) is asked per
// object.
func (s *Store) size(ctx context.Context, o minio.ObjectInfo) int64 {
	for _, m := range []string{sizeMeta, "X-Amz-Meta-" + sizeMeta} {
		if v, ok := o.UserMetadata[m]; ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	st, err := s.c.StatObject(ctx, s.bucket, o.Key, minio.StatObjectOptions{})
	if err != nil {
		return -1
	}
	n, _ := strconv.ParseInt(st.UserMetadata[sizeMeta], 10, 64)
	return n
}

func (s *Store) keyOf(name string) (records.Key, bool) {
	p := strings.Split(strings.TrimPrefix(name, s.prefix), "/")
	if !strings.HasPrefix(name, s.prefix) || len(p) != 5 {
		return records.Key{}, false
	}
	k := records.Key{Namespace: p[0], Run: p[1], RunID: p[2], Step: p[3], Kind: records.Kind(p[4])}
	return k, k.Validate() == nil
}

// Delete removes the objects of the given runs (every run, with none).
func (s *Store) Delete(ctx context.Context, namespace, run string, runIDs ...string) error {
	want := map[string]bool{}
	for _, id := range runIDs {
		want[id] = true
	}
	var names []string
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.runPrefix(namespace, run), Recursive: true}) {
		if o.Err != nil {
			return fmt.Errorf("listing the records of %s/%s: %w", namespace, run, o.Err)
		}
		if k, ok := s.keyOf(o.Key); ok && (len(want) == 0 || want[k.RunID]) {
			names = append(names, o.Key)
		}
	}
	return s.remove(ctx, names)
}

func (s *Store) remove(ctx context.Context, names []string) error {
	for _, n := range names {
		if err := s.c.RemoveObject(ctx, s.bucket, n, minio.RemoveObjectOptions{}); err != nil {
			return fmt.Errorf("deleting %s from bucket %s: %w", n, s.bucket, err)
		}
	}
	return nil
}

// Expire deletes every record stored before the given time, and every
// record of a TerraformRun that gone(namespace, run) reports deleted: the
// retention period, enforced by the manager rather than a bucket lifecycle
// rule, which not every S3-compatible server honours. It returns how many
// objects it deleted.
func (s *Store) Expire(ctx context.Context, before time.Time, gone func(namespace, run string) bool) (int, error) {
	var names []string
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix, Recursive: true}) {
		if o.Err != nil {
			return 0, fmt.Errorf("listing bucket %s: %w", s.bucket, o.Err)
		}
		k, ok := s.keyOf(o.Key)
		if !ok {
			continue
		}
		if o.LastModified.Before(before) || (gone != nil && gone(k.Namespace, k.Run)) {
			names = append(names, o.Key)
		}
	}
	return len(names), s.remove(ctx, names)
}

// Raw returns an object as the server stores it (tests: nothing in clear).
func (s *Store) Raw(ctx context.Context, k records.Key) ([]byte, error) {
	o, err := s.c.GetObject(ctx, s.bucket, s.ObjectName(k), minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer o.Close()
	return io.ReadAll(o)
}
