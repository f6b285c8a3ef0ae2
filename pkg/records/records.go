// Package records keeps what a run leaves for people to read after its
// pods and engine objects are gone: each step's log and the plan, readable
// and as JSON, for every run in a TerraformRun's history. The stores sit
// behind one small interface: in the run's namespace, TerraformRunRecords
// (ResourceStore) for what people who may not read Secrets may read (the
// logs, the readable plan, the plan as JSON masked) and Secrets
// (SecretStore) for the plan as JSON in clear, both chunked and owned by
// the TerraformRun, a Router sending each kind to its store; and an
// S3-compatible object store (objects encrypted with AES-256-GCM before
// they leave the process) that finished runs' records may move to.
//
// Logs are stored as the step printed them: already redacted. The readable
// plan is redacted like the log and the plan as JSON masked; the plan as
// JSON in clear is a kind of its own (KindPlanJSONSensitive), which is
// never stored in clear outside a Secret.
package records

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Kind is what a record holds.
type Kind string

const (
	// KindLog is a step's log, redacted as the step printed it.
	KindLog Kind = "log"
	// KindPlanText is the readable plan (terraform show), whole.
	KindPlanText Kind = "plan.txt"
	// KindPlanJSON is the plan as JSON (terraform show -json) with its
	// sensitive values masked: every value terraform marks sensitive, and
	// every secret the plan step registered, is "(sensitive value)"
	// (pkg/step MaskPlanJSON). It is what kubectl tfrun plan --json shows,
	// and the only JSON plan checks read.
	KindPlanJSON Kind = "plan.json"
	// KindPlanJSONSensitive is the plan as JSON exactly as terraform wrote
	// it, sensitive values in clear. The plan step writes it only to the
	// run's records store (Secrets in the run's namespace, or encrypted
	// objects), for those who may read Secrets, never to the checks'
	// input; kubectl tfrun plan --json --show-sensitive is the explicit
	// way to read it.
	KindPlanJSONSensitive Kind = "plan-sensitive.json"
	// KindErroredState is a state terraform could not save to its backend
	// (errored.tfstate), which the apply or destroy step keeps for the
	// next run of the TerraformRun to push (pkg/step RestoreState). It is
	// no part of a run's history but work left for the next run: it is
	// kept only in Secrets (a state holds secrets), never moved to the
	// object store nor pruned with the history, and deleted once pushed.
	KindErroredState Kind = "errored.tfstate"
)

// Kinds are every kind of record of a run's history: what the manager
// moves to the object store and prunes. KindErroredState is not one.
var Kinds = []Kind{KindLog, KindPlanText, KindPlanJSON, KindPlanJSONSensitive}

// History says whether records of kind k belong to a run's history (move
// to the object store, leave with the history): every kind but
// KindErroredState.
func History(k Kind) bool { return k != KindErroredState }

// Key names one record.
type Key struct {
	// Namespace and Run are the TerraformRun's.
	Namespace, Run string
	// RunID is the run's id: its engine object's name (status.run.id).
	RunID string
	// Step is the step's name (plan, apply, check-policy, ...).
	Step string
	// Kind is what the record holds.
	Kind Kind
}

func (k Key) String() string {
	return fmt.Sprintf("%s/%s run %s step %s %s", k.Namespace, k.Run, k.RunID, k.Step, k.Kind)
}

var (
	nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	kinds  = map[Kind]bool{KindLog: true, KindPlanText: true, KindPlanJSON: true, KindPlanJSONSensitive: true, KindErroredState: true}
)

// Validate checks that every part of the key is a name the stores can use
// in object names, labels and object keys.
func (k Key) Validate() error {
	for what, v := range map[string]string{"namespace": k.Namespace, "run": k.Run, "run id": k.RunID, "step": k.Step} {
		if len(v) > 63 || !nameRE.MatchString(v) {
			return fmt.Errorf("records: the %s %q is not a DNS label", what, v)
		}
	}
	if !kinds[k.Kind] {
		return fmt.Errorf("records: unknown kind %q", k.Kind)
	}
	return nil
}

// Record describes one stored record.
type Record struct {
	Key
	// Size is the record's size in bytes, as written.
	Size int64
	// Stored is when it was written.
	Stored time.Time
	// Restored is true for a copy brought back from the object store for a
	// while (SecretStore only).
	Restored bool
	// Owners are the uids of the objects that own every part of the
	// record (SecretStore only): the TerraformRun, for a record a step
	// wrote.
	Owners []types.UID `json:",omitempty"`
}

// RecordDeleter is an optional interface of the stores that delete one
// record (a kept state, once pushed), not every record of a run.
type RecordDeleter interface {
	// DeleteRecord removes record k; a record that is not there is no
	// error.
	DeleteRecord(ctx context.Context, k Key) error
}

// ErrNotFound is a record that is not stored (never written, pruned, or
// expired).
var ErrNotFound = errors.New("record not found")

// ErrTooLarge is a record that inflates past MaxRecordSize when read: it
// is refused, whether a step wrote it that large (a plan of a large
// configuration) or someone else wrote a gzip bomb in its place. Reading
// it again gives the same answer.
var ErrTooLarge = errors.New("refused, too large to read")

// Store keeps records. Implementations must be safe for concurrent use.
type Store interface {
	// Put stores data under k, replacing what an earlier attempt of the
	// same step stored.
	Put(ctx context.Context, k Key, data []byte) error
	// Get returns the record k, or an error wrapping ErrNotFound.
	Get(ctx context.Context, k Key) ([]byte, error)
	// List returns the records of a TerraformRun, sorted by run id, step
	// and kind.
	List(ctx context.Context, namespace, run string) ([]Record, error)
	// Delete removes the records of the given run ids of a TerraformRun
	// but their kept states (KindErroredState: work left for a later run,
	// which RecordDeleter removes once done); with no run ids, every
	// record of the TerraformRun, kept states included.
	Delete(ctx context.Context, namespace, run string, runIDs ...string) error
}

// Restorable is a store of the cluster that the manager brings records
// back into from the object store, for a while (pkg/controller
// reconcileObjectStore).
type Restorable interface {
	Store
	// Restoring is the store that writes copies brought back from the
	// object store, owned by owner (the TerraformRun), which
	// ExpireRestored removes.
	Restoring(owner *metav1.OwnerReference) Store
	// ExpireRestored deletes the copies brought back from the object
	// store of a TerraformRun that were written before the given time,
	// and returns how many objects it deleted.
	ExpireRestored(ctx context.Context, namespace, run string, before time.Time) (int, error)
}

// RunNumber is the number at the end of a run id (hello-3, hello-drift-4),
// or -1.
func RunNumber(runID string) int64 {
	for i := len(runID) - 1; i >= 0; i-- {
		if runID[i] == '-' {
			n, err := strconv.ParseInt(runID[i+1:], 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// Prune deletes the records of a TerraformRun's runs that left its
// history: those numbered up to newest (its newest recorded run) that keep
// does not hold. A run being written now always has a higher number than
// every recorded one, so it is never touched. It returns the run ids it
// deleted.
func Prune(ctx context.Context, s Store, namespace, run string, newest int64, keep map[string]bool) ([]string, error) {
	recs, err := s.List(ctx, namespace, run)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var gone []string
	for _, r := range recs {
		if !History(r.Kind) {
			continue // work left for a later run, not history
		}
		if n := RunNumber(r.RunID); n >= 0 && n <= newest && !keep[r.RunID] && !seen[r.RunID] {
			seen[r.RunID] = true
			gone = append(gone, r.RunID)
		}
	}
	if len(gone) == 0 {
		return nil, nil
	}
	sort.Strings(gone)
	return gone, s.Delete(ctx, namespace, run, gone...)
}

// KindLister is an optional interface of the stores that list the records
// of one kind of a TerraformRun without reading the others.
type KindLister interface {
	// ListKind returns the records of kind k of a TerraformRun.
	ListKind(ctx context.Context, namespace, run string, k Kind) ([]Record, error)
}

// ListKind returns the records of kind k of a TerraformRun in s: through
// KindLister when s is one, else from List.
func ListKind(ctx context.Context, s Store, namespace, run string, k Kind) ([]Record, error) {
	if l, ok := s.(KindLister); ok {
		return l.ListKind(ctx, namespace, run, k)
	}
	recs, err := s.List(ctx, namespace, run)
	if err != nil {
		return nil, err
	}
	out := recs[:0]
	for _, r := range recs {
		if r.Kind == k {
			out = append(out, r)
		}
	}
	return out, nil
}

// KeptStates are the states earlier runs kept because their backend did
// not take them (KindErroredState), among a TerraformRun's records, owned
// by the TerraformRun whose uid is owner (any, when empty), oldest first:
// by when they were stored, then by run number, run id and step.
func KeptStates(recs []Record, owner types.UID) []Record {
	var out []Record
	for _, r := range recs {
		if r.Kind == KindErroredState && (owner == "" || slices.Contains(r.Owners, owner)) {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.Stored.Equal(b.Stored) {
			return a.Stored.Before(b.Stored)
		}
		if na, nb := RunNumber(a.RunID), RunNumber(b.RunID); na != nb {
			return na < nb
		}
		if a.RunID != b.RunID {
			return a.RunID < b.RunID
		}
		return a.Step < b.Step
	})
	return out
}

// SortRecords sorts records by run id, step and kind.
func SortRecords(recs []Record) {
	sort.Slice(recs, func(i, j int) bool {
		a, b := recs[i], recs[j]
		if a.RunID != b.RunID {
			return a.RunID < b.RunID
		}
		if a.Step != b.Step {
			return a.Step < b.Step
		}
		return a.Kind < b.Kind
	})
}

// Digest is the digest a plan step records of what it keeps (status.plan's
// textDigest, jsonDigest, sensitiveJSONDigest): "sha256:<hex>". Whoever
// reads a kept plan checks it against the recorded one before trusting it.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
