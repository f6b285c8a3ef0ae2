package records

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// Labels and annotations of the record Secrets. The component label keeps
// them out of the manager's cache (it caches only the Secrets it reads on
// every pass), so a 5 MB plan never sits in the manager's memory.
const (
	ComponentRecord = "record"
	RunIDLabel      = "infra.opr8r.io/run-id"
	KindLabel       = "infra.opr8r.io/record-kind"
	// RestoredLabel marks a copy brought back from the object store.
	RestoredLabel   = "infra.opr8r.io/record-restored"
	chunkAnnotation = "infra.opr8r.io/record-chunk"
	countAnnotation = "infra.opr8r.io/record-chunks"
	sumAnnotation   = "infra.opr8r.io/record-sha256"
	sizeAnnotation  = "infra.opr8r.io/record-size"
	chunkKey        = "chunk"
)

// DefaultChunkSize is the most gzipped bytes one record Secret holds,
// well under the API server's 1 MiB limit on a Secret.
const DefaultChunkSize = 512 << 10

// SecretStore keeps records in Secrets in the TerraformRun's namespace:
// gzipped, split into chunks of ChunkSize, labelled by run, run id, step
// and kind, and owned by the TerraformRun, so they outlive the run's
// engine objects and go when the TerraformRun is deleted.
type SecretStore struct {
	Client kubernetes.Interface
	// Owner, when set, owns every Secret Put writes: the TerraformRun.
	Owner *metav1.OwnerReference
	// ChunkSize is the most gzipped bytes per Secret (DefaultChunkSize
	// when 0).
	ChunkSize int
	// Restored marks what Put writes as copies brought back from the
	// object store, which ExpireRestored removes.
	Restored bool
}

var (
	_ Restorable    = &SecretStore{}
	_ RecordDeleter = &SecretStore{}
	_ KindLister    = &SecretStore{}
)

func (s *SecretStore) chunkSize() int {
	if s.ChunkSize > 0 {
		return s.ChunkSize
	}
	return DefaultChunkSize
}

// gzipChunks is data gzipped and split into chunks of at most size bytes,
// as both stores keep a record.
func gzipChunks(data []byte, size int) ([][]byte, error) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return split(z.Bytes(), size), nil
}

// SecretName is the name of chunk i of record k.
func SecretName(k Key, i int) string {
	h := sha256.Sum256([]byte(k.RunID + "/" + k.Step + "/" + string(k.Kind)))
	return fmt.Sprintf("%s-rec-%s-%d", k.RunID, hex.EncodeToString(h[:])[:10], i)
}

func (s *SecretStore) labels(k Key) map[string]string {
	l := recordLabels(k)
	if s.Restored {
		l[RestoredLabel] = "true"
	}
	return l
}

func recordLabels(k Key) map[string]string {
	return map[string]string{
		infrav1.ManagedByLabel: infrav1.ManagedByValue,
		infrav1.ComponentLabel: ComponentRecord,
		infrav1.RunNameLabel:   k.Run,
		RunIDLabel:             k.RunID,
		infrav1.StepLabel:      k.Step,
		KindLabel:              string(k.Kind),
	}
}

// Put gzips data, splits it into chunks and writes one Secret per chunk,
// then removes chunks an earlier, longer write left.
func (s *SecretStore) Put(ctx context.Context, k Key, data []byte) error {
	if err := k.Validate(); err != nil {
		return err
	}
	chunks, err := gzipChunks(data, s.chunkSize())
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	secrets := s.Client.CoreV1().Secrets(k.Namespace)
	for i, c := range chunks {
		sec := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: SecretName(k, i), Namespace: k.Namespace, Labels: s.labels(k),
				Annotations: map[string]string{
					chunkAnnotation: strconv.Itoa(i), countAnnotation: strconv.Itoa(len(chunks)),
					sumAnnotation: hex.EncodeToString(sum[:]), sizeAnnotation: strconv.Itoa(len(data)),
				},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{chunkKey: c},
		}
		if s.Owner != nil {
			sec.OwnerReferences = []metav1.OwnerReference{*s.Owner}
		}
		_, err := secrets.Create(ctx, sec, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var old *corev1.Secret
			if old, err = secrets.Get(ctx, sec.Name, metav1.GetOptions{}); err == nil {
				sec.ResourceVersion = old.ResourceVersion
				_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("storing %s (Secret %s): %w", k, sec.Name, err)
		}
	}
	old, err := s.chunks(ctx, k)
	if err != nil {
		return err
	}
	for _, o := range old {
		if i, _ := strconv.Atoi(o.Annotations[chunkAnnotation]); i >= len(chunks) {
			if err := secrets.Delete(ctx, o.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("removing a stale chunk of %s: %w", k, err)
			}
		}
	}
	return nil
}

func split(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

// chunks lists the Secrets of record k.
func (s *SecretStore) chunks(ctx context.Context, k Key) ([]corev1.Secret, error) {
	sel := labels.SelectorFromSet(labels.Set{
		infrav1.ComponentLabel: ComponentRecord, infrav1.RunNameLabel: k.Run,
		RunIDLabel: k.RunID, infrav1.StepLabel: k.Step, KindLabel: string(k.Kind),
	})
	l, err := s.Client.CoreV1().Secrets(k.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("listing the Secrets of %s: %w", k, err)
	}
	return l.Items, nil
}

// Get reads the chunks of record k, checks that they are one whole write,
// and returns its data.
func (s *SecretStore) Get(ctx context.Context, k Key) ([]byte, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	items, err := s.chunks(ctx, k)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("%s: %w", k, ErrNotFound)
	}
	sort.Slice(items, func(i, j int) bool {
		a, _ := strconv.Atoi(items[i].Annotations[chunkAnnotation])
		b, _ := strconv.Atoi(items[j].Annotations[chunkAnnotation])
		return a < b
	})
	sum, count := items[0].Annotations[sumAnnotation], items[0].Annotations[countAnnotation]
	var z bytes.Buffer
	for i, it := range items {
		if it.Annotations[sumAnnotation] != sum || it.Annotations[countAnnotation] != count || it.Annotations[chunkAnnotation] != strconv.Itoa(i) {
			return nil, fmt.Errorf("%s is being written (its chunks are of two writes); try again", k)
		}
		z.Write(it.Data[chunkKey])
	}
	if strconv.Itoa(len(items)) != count {
		return nil, fmt.Errorf("%s is incomplete: %d of %s chunks", k, len(items), count)
	}
	data, err := inflate(k, &z, items[0].Annotations[sizeAnnotation])
	if err != nil {
		return nil, err
	}
	if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
		return nil, fmt.Errorf("%s does not match its checksum", k)
	}
	return data, nil
}

// MaxRecordSize is the most a record inflates to when it is read: the
// largest record a step writes, a log cut at 16 MiB (pkg/step MaxKeptLog)
// with its marker, four times over, for the plans, which the plan step
// keeps whole. A record's chunks are Secrets, or TerraformRunRecords,
// that others than its step may write (anyone who may write Secrets in the
// namespace; the runner service account), and a gzip stream inflates a
// thousandfold,
// so reading one (the manager moving records to the object store,
// kubectl tfrun logs and plan) never holds more than this.
const MaxRecordSize = 64 << 20

// inflate gunzips a record's chunks, refusing output past the size its
// chunks declare (their size) or past MaxRecordSize.
func inflate(k Key, z io.Reader, declared string) ([]byte, error) {
	limit := int64(MaxRecordSize)
	n, err := strconv.ParseInt(declared, 10, 64)
	hasSize := err == nil && n >= 0 && n < limit
	if hasSize {
		limit = n
	}
	zr, err := gzip.NewReader(z)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k, err)
	}
	var out bytes.Buffer
	if hasSize {
		out.Grow(int(limit) + 1)
	}
	if _, err := io.Copy(&out, io.LimitReader(zr, limit+1)); err != nil {
		return nil, fmt.Errorf("%s: %w", k, err)
	}
	switch {
	case int64(out.Len()) <= limit:
		return out.Bytes(), nil
	case hasSize:
		return nil, fmt.Errorf("%s inflates past its declared size (%d bytes): refused, its chunks are not one write of a step's", k, limit)
	}
	return nil, fmt.Errorf("%s inflates past %d MiB, the most a record may hold when read (records.MaxRecordSize): %w", k, MaxRecordSize>>20, ErrTooLarge)
}

// List returns the records of a TerraformRun.
func (s *SecretStore) List(ctx context.Context, namespace, run string) ([]Record, error) {
	items, err := s.list(ctx, namespace, run, nil)
	if err != nil {
		return nil, err
	}
	return s.records(namespace, run, items), nil
}

// ListKind implements KindLister: it lists only the Secrets of records of
// kind k.
func (s *SecretStore) ListKind(ctx context.Context, namespace, run string, k Kind) ([]Record, error) {
	sel := labels.SelectorFromSet(labels.Set{infrav1.ComponentLabel: ComponentRecord, infrav1.RunNameLabel: run, KindLabel: string(k)})
	l, err := s.Client.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("listing the %s record Secrets of %s/%s: %w", k, namespace, run, err)
	}
	return s.records(namespace, run, l.Items), nil
}

// records are the records whose chunks items are.
func (s *SecretStore) records(namespace, run string, items []corev1.Secret) []Record {
	byKey := map[Key]*Record{}
	for _, it := range items {
		l := it.Labels
		k := Key{Namespace: namespace, Run: run, RunID: l[RunIDLabel], Step: l[infrav1.StepLabel], Kind: Kind(l[KindLabel])}
		if byKey[k] == nil {
			size, _ := strconv.ParseInt(it.Annotations[sizeAnnotation], 10, 64)
			byKey[k] = &Record{Key: k, Size: size, Stored: it.CreationTimestamp.Time, Restored: l[RestoredLabel] == "true", Owners: ownerUIDs(it.OwnerReferences)}
			continue
		}
		// Owners own every chunk.
		rec, own := byKey[k], ownerUIDs(it.OwnerReferences)
		rec.Owners = slices.DeleteFunc(rec.Owners, func(u types.UID) bool { return !slices.Contains(own, u) })
	}
	out := make([]Record, 0, len(byKey))
	for _, r := range byKey {
		out = append(out, *r)
	}
	SortRecords(out)
	return out
}

func ownerUIDs(refs []metav1.OwnerReference) []types.UID {
	var out []types.UID
	for _, o := range refs {
		out = append(out, o.UID)
	}
	return out
}

func (s *SecretStore) list(ctx context.Context, namespace, run string, runIDs []string) ([]corev1.Secret, error) {
	sel := labels.SelectorFromSet(labels.Set{infrav1.ComponentLabel: ComponentRecord, infrav1.RunNameLabel: run})
	if len(runIDs) > 0 {
		req, err := labels.NewRequirement(RunIDLabel, selection.In, runIDs)
		if err != nil {
			return nil, err
		}
		sel = sel.Add(*req)
	}
	l, err := s.Client.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("listing the record Secrets of %s/%s: %w", namespace, run, err)
	}
	return l.Items, nil
}

// Delete removes the Secrets of the given runs but their kept states
// (every run, kept states included, with none).
func (s *SecretStore) Delete(ctx context.Context, namespace, run string, runIDs ...string) error {
	items, err := s.list(ctx, namespace, run, runIDs)
	if err != nil {
		return err
	}
	return s.deleteAll(ctx, namespace, run, items, len(runIDs) > 0)
}

// deleteAll deletes the given record Secrets (but kept states, with
// keepStates).
func (s *SecretStore) deleteAll(ctx context.Context, namespace, run string, items []corev1.Secret, keepStates bool) error {
	var errs []string
	for _, it := range items {
		if keepStates && Kind(it.Labels[KindLabel]) == KindErroredState {
			continue
		}
		if err := s.Client.CoreV1().Secrets(namespace).Delete(ctx, it.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("deleting records of %s/%s: %s", namespace, run, strings.Join(errs, "; "))
	}
	return nil
}

// DeleteRecord implements RecordDeleter: it deletes the Secrets of record
// k.
func (s *SecretStore) DeleteRecord(ctx context.Context, k Key) error {
	if err := k.Validate(); err != nil {
		return err
	}
	items, err := s.chunks(ctx, k)
	if err != nil {
		return err
	}
	return s.deleteAll(ctx, k.Namespace, k.Run, items, false)
}

// Restoring is the store the copies brought back from the object store
// are written to, owned by owner.
func (s *SecretStore) Restoring(owner *metav1.OwnerReference) Store {
	return &SecretStore{Client: s.Client, Owner: owner, ChunkSize: s.ChunkSize, Restored: true}
}

// ExpireRestored deletes the copies brought back from the object store
// (Restored) of a TerraformRun that were written before the given time.
func (s *SecretStore) ExpireRestored(ctx context.Context, namespace, run string, before time.Time) (int, error) {
	items, err := s.list(ctx, namespace, run, nil)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, it := range items {
		if it.Labels[RestoredLabel] != "true" || !it.CreationTimestamp.Time.Before(before) {
			continue
		}
		if err := s.Client.CoreV1().Secrets(namespace).Delete(ctx, it.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return n, err
		}
		n++
	}
	return n, nil
}
