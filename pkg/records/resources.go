package records

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// ResourceKinds are the kinds a ResourceStore keeps: those made to be read
// by people who may not read Secrets (already redacted or masked by the
// step). KindPlanJSONSensitive and KindErroredState are not: they stay in
// Secrets.
var ResourceKinds = []Kind{KindLog, KindPlanText, KindPlanJSON}

// InResource says whether records of kind k are kept in
// TerraformRunRecords (a ResourceStore) rather than in Secrets.
func InResource(k Kind) bool { return slices.Contains(ResourceKinds, k) }

// MaxChunks is the most chunks a record read from TerraformRunRecords may
// have (the CRD refuses more): a record of MaxRecordSize in chunks of
// 64 KiB.
const MaxChunks = 1024

// ErrNotServed is a cluster that does not serve TerraformRunRecords (its
// CRDs predate them), or a namespace that does not exist.
var ErrNotServed = errors.New("TerraformRunRecords are not served")

const (
	recordResource = "terraformrunrecords"
	// metadataList asks the API server for the objects' metadata only.
	metadataList = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
	// listPage is how many objects' metadata one list request returns.
	listPage = 500
)

// ResourceStore keeps records in TerraformRunRecords in the TerraformRun's
// namespace, with the SecretStore's semantics: gzipped, split into chunks
// of ChunkSize, named <run id>-rec-<hash>-<n>, labelled by run, run id,
// step and kind, owned by the TerraformRun. It keeps only the kinds people
// who may not read Secrets may read (ResourceKinds); Put and Get refuse
// KindPlanJSONSensitive, and so does the CRD.
//
// It talks to the API server directly (through Client's REST client, no
// cache), reads a record chunk by chunk by name (get), and lists only
// metadata (List, Delete, ExpireRestored), so a reader never holds more
// than one record, bounded by MaxRecordSize.
type ResourceStore struct {
	Client kubernetes.Interface
	// Owner, when set, owns every object Put writes: the TerraformRun.
	Owner *metav1.OwnerReference
	// ChunkSize is the most gzipped bytes per object (DefaultChunkSize
	// when 0).
	ChunkSize int
	// Restored marks what Put writes as copies brought back from the
	// object store, which ExpireRestored removes.
	Restored bool
}

var _ Restorable = &ResourceStore{}

func (s *ResourceStore) chunkSize() int {
	if s.ChunkSize > 0 {
		return s.ChunkSize
	}
	return DefaultChunkSize
}

func (s *ResourceStore) rest() rest.Interface { return s.Client.CoreV1().RESTClient() }

func (s *ResourceStore) path(namespace string, name ...string) []string {
	return append([]string{"/apis", infrav1.GroupVersion.Group, infrav1.GroupVersion.Version, "namespaces", namespace, recordResource}, name...)
}

func refuseSensitive(k Key) error {
	if !InResource(k.Kind) {
		return fmt.Errorf("records: %s is kept in Secrets only, never in a TerraformRunRecord", k.Kind)
	}
	return nil
}

// Put gzips data, splits it into chunks and writes one TerraformRunRecord
// per chunk, then removes chunks an earlier, longer write left. A cluster
// that does not serve TerraformRunRecords gives an error wrapping
// ErrNotServed.
func (s *ResourceStore) Put(ctx context.Context, k Key, data []byte) error {
	if err := k.Validate(); err != nil {
		return err
	}
	if err := refuseSensitive(k); err != nil {
		return err
	}
	chunks, err := s.chunks(k, data)
	if err != nil {
		return err
	}
	labels := recordLabels(k)
	if s.Restored {
		labels[RestoredLabel] = "true"
	}
	sum := sha256.Sum256(data)
	oldChunks := 0
	for i, c := range chunks {
		rec := &infrav1.TerraformRunRecord{
			TypeMeta: metav1.TypeMeta{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRunRecord"},
			ObjectMeta: metav1.ObjectMeta{
				Name: SecretName(k, i), Namespace: k.Namespace, Labels: labels,
				// The size, for lists of metadata only (List).
				Annotations: map[string]string{sizeAnnotation: strconv.Itoa(len(data))},
			},
			Spec: infrav1.TerraformRunRecordSpec{
				Run: k.Run, RunID: k.RunID, Step: k.Step, Kind: infrav1.RecordKind(k.Kind),
				Chunk: int32(i), Chunks: int32(len(chunks)), Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), Data: c,
			},
		}
		if s.Owner != nil {
			rec.OwnerReferences = []metav1.OwnerReference{*s.Owner}
		}
		old, err := s.putChunk(ctx, rec)
		if apierrors.IsNotFound(err) {
			err = fmt.Errorf("%w: %w", ErrNotServed, err)
		}
		if err != nil {
			return fmt.Errorf("storing %s (TerraformRunRecord %s): %w", k, rec.Name, err)
		}
		if i == 0 && old != nil {
			oldChunks = int(old.Spec.Chunks)
		}
	}
	return s.pruneChunks(ctx, k, len(chunks), oldChunks)
}

// chunks is data gzipped and split into chunks of at most the chunk size.
func (s *ResourceStore) chunks(k Key, data []byte) ([][]byte, error) {
	chunks, err := gzipChunks(data, s.chunkSize())
	if err != nil {
		return nil, err
	}
	if len(chunks) > MaxChunks {
		return nil, fmt.Errorf("storing %s: %d chunks of %d bytes, over the most a record may have (%d)", k, len(chunks), s.chunkSize(), MaxChunks)
	}
	return chunks, nil
}

// putChunk creates rec, or replaces the record of its name, which it
// returns (nil when there was none).
func (s *ResourceStore) putChunk(ctx context.Context, rec *infrav1.TerraformRunRecord) (*infrav1.TerraformRunRecord, error) {
	body, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	err = s.rest().Post().AbsPath(s.path(rec.Namespace)...).SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
	if !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	old, err := s.get(ctx, rec.Namespace, rec.Name)
	if err != nil {
		return nil, err
	}
	rec.ResourceVersion = old.ResourceVersion
	if body, err = json.Marshal(rec); err != nil {
		return nil, err
	}
	return old, s.rest().Put().AbsPath(s.path(rec.Namespace, rec.Name)...).SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
}

// pruneChunks removes the chunks of the write this one replaced
// (oldChunks of them) past this write's: a write no shorter than the one it
// replaces deletes nothing, and needs no right to delete (check steps have
// none).
func (s *ResourceStore) pruneChunks(ctx context.Context, k Key, from, oldChunks int) error {
	for i := from; i < oldChunks; i++ {
		err := s.rest().Delete().AbsPath(s.path(k.Namespace, SecretName(k, i))...).Do(ctx).Error()
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("removing a stale chunk of %s: %w", k, err)
		}
	}
	return nil
}

func (s *ResourceStore) get(ctx context.Context, namespace, name string) (*infrav1.TerraformRunRecord, error) {
	b, err := s.rest().Get().AbsPath(s.path(namespace, name)...).SetHeader("Accept", "application/json").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	rec := &infrav1.TerraformRunRecord{}
	if err := json.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("reading TerraformRunRecord %s/%s: %w", namespace, name, err)
	}
	return rec, nil
}

// Get reads the chunks of record k one by one by name, checks that they
// are one whole write of that record, and returns its data. It holds at
// most the gzipped size a record of its declared size (and never more
// than MaxRecordSize) can have, and inflates no more than that size.
func (s *ResourceStore) Get(ctx context.Context, k Key) ([]byte, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	if err := refuseSensitive(k); err != nil {
		return nil, err
	}
	first, err := s.get(ctx, k.Namespace, SecretName(k, 0))
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s: %w", k, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", k, err)
	}
	sp := first.Spec
	if sp.Run != k.Run || sp.RunID != k.RunID || sp.Step != k.Step || string(sp.Kind) != string(k.Kind) {
		return nil, fmt.Errorf("%s: TerraformRunRecord %s holds another record (%s/%s %s %s)", k, first.Name, sp.Run, sp.RunID, sp.Step, sp.Kind)
	}
	if sp.Chunks < 1 || sp.Chunks > MaxChunks || sp.Size < 0 {
		return nil, fmt.Errorf("%s: TerraformRunRecord %s declares %d chunks of a record of %d bytes: refused", k, first.Name, sp.Chunks, sp.Size)
	}
	// A gzip stream is at most a little larger than what it holds.
	most := min(sp.Size, MaxRecordSize)
	most += most>>10 + 1<<10
	var z bytes.Buffer
	for i := range int(sp.Chunks) {
		c := first
		if i > 0 {
			if c, err = s.get(ctx, k.Namespace, SecretName(k, i)); apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("%s is incomplete or being written: chunk %d of %d is not there; try again", k, i, sp.Chunks)
			} else if err != nil {
				return nil, fmt.Errorf("reading %s: %w", k, err)
			}
		}
		cs := c.Spec
		if cs.Chunk != int32(i) || cs.Chunks != sp.Chunks || cs.SHA256 != sp.SHA256 || cs.Size != sp.Size ||
			cs.Run != k.Run || cs.RunID != k.RunID || cs.Step != k.Step || string(cs.Kind) != string(k.Kind) {
			return nil, fmt.Errorf("%s is being written (its chunks are of two writes); try again", k)
		}
		if int64(z.Len()+len(cs.Data)) > most {
			return nil, fmt.Errorf("%s: its chunks hold more than a gzipped record of %d bytes can (%d bytes at chunk %d): refused, they are not one write of a step's", k, sp.Size, z.Len()+len(cs.Data), i)
		}
		z.Write(cs.Data)
	}
	data, err := inflate(k, &z, strconv.FormatInt(sp.Size, 10))
	if err != nil {
		return nil, err
	}
	if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sp.SHA256 {
		return nil, fmt.Errorf("%s does not match its checksum", k)
	}
	return data, nil
}

// listMeta lists the metadata of the TerraformRunRecords of a TerraformRun
// (of the given run ids only, when there are any).
func (s *ResourceStore) listMeta(ctx context.Context, namespace, run string, runIDs []string) ([]metav1.PartialObjectMetadata, error) {
	sel := labels.SelectorFromSet(labels.Set{infrav1.ComponentLabel: ComponentRecord, infrav1.RunNameLabel: run})
	if len(runIDs) > 0 {
		req, err := labels.NewRequirement(RunIDLabel, selection.In, runIDs)
		if err != nil {
			return nil, err
		}
		sel = sel.Add(*req)
	}
	var out []metav1.PartialObjectMetadata
	cont := ""
	for {
		req := s.rest().Get().AbsPath(s.path(namespace)...).SetHeader("Accept", metadataList).
			Param("labelSelector", sel.String()).Param("limit", strconv.Itoa(listPage))
		if cont != "" {
			req = req.Param("continue", cont)
		}
		b, err := req.DoRaw(ctx)
		if apierrors.IsNotFound(err) {
			err = fmt.Errorf("%w: %w", ErrNotServed, err)
		}
		if err != nil {
			return nil, fmt.Errorf("listing the TerraformRunRecords of %s/%s: %w", namespace, run, err)
		}
		var l metav1.PartialObjectMetadataList
		if err := json.Unmarshal(b, &l); err != nil {
			return nil, fmt.Errorf("listing the TerraformRunRecords of %s/%s: %w", namespace, run, err)
		}
		out = append(out, l.Items...)
		if cont = l.Continue; cont == "" {
			return out, nil
		}
	}
}

// List returns the records of a TerraformRun, from their objects'
// metadata.
func (s *ResourceStore) List(ctx context.Context, namespace, run string) ([]Record, error) {
	items, err := s.listMeta(ctx, namespace, run, nil)
	if err != nil {
		return nil, err
	}
	byKey := map[Key]*Record{}
	for _, it := range items {
		l := it.Labels
		k := Key{Namespace: namespace, Run: run, RunID: l[RunIDLabel], Step: l[infrav1.StepLabel], Kind: Kind(l[KindLabel])}
		if k.Validate() != nil {
			continue // not labelled as a record: not one of ours
		}
		if byKey[k] == nil {
			size, _ := strconv.ParseInt(it.Annotations[sizeAnnotation], 10, 64)
			byKey[k] = &Record{Key: k, Size: size, Stored: it.CreationTimestamp.Time, Restored: l[RestoredLabel] == "true"}
		}
	}
	out := make([]Record, 0, len(byKey))
	for _, r := range byKey {
		out = append(out, *r)
	}
	SortRecords(out)
	return out, nil
}

func (s *ResourceStore) delete(ctx context.Context, namespace string, items []metav1.PartialObjectMetadata, keep func(metav1.PartialObjectMetadata) bool) (int, error) {
	var errs []string
	n := 0
	for _, it := range items {
		if keep != nil && keep(it) {
			continue
		}
		if err := s.rest().Delete().AbsPath(s.path(namespace, it.Name)...).Do(ctx).Error(); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err.Error())
			continue
		}
		n++
	}
	if len(errs) > 0 {
		return n, errors.New(strings.Join(errs, "; "))
	}
	return n, nil
}

// Delete removes the TerraformRunRecords of the given runs (every run,
// with none).
func (s *ResourceStore) Delete(ctx context.Context, namespace, run string, runIDs ...string) error {
	items, err := s.listMeta(ctx, namespace, run, runIDs)
	if err != nil {
		return err
	}
	if _, err := s.delete(ctx, namespace, items, nil); err != nil {
		return fmt.Errorf("deleting records of %s/%s: %w", namespace, run, err)
	}
	return nil
}

// Restoring is the store the copies brought back from the object store
// are written to, owned by owner.
func (s *ResourceStore) Restoring(owner *metav1.OwnerReference) Store {
	return &ResourceStore{Client: s.Client, Owner: owner, ChunkSize: s.ChunkSize, Restored: true}
}

// ExpireRestored deletes the copies brought back from the object store
// (Restored) of a TerraformRun that were written before the given time.
func (s *ResourceStore) ExpireRestored(ctx context.Context, namespace, run string, before time.Time) (int, error) {
	items, err := s.listMeta(ctx, namespace, run, nil)
	if err != nil {
		return 0, err
	}
	return s.delete(ctx, namespace, items, func(it metav1.PartialObjectMetadata) bool {
		return it.Labels[RestoredLabel] != "true" || !it.CreationTimestamp.Time.Before(before)
	})
}
