package records

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Router keeps each kind of record in its store of the cluster: the kinds
// people who may not read Secrets may read (InResource: log, plan.txt,
// plan.json) in Resources (TerraformRunRecords), the plan as JSON in clear
// (plan-sensitive.json) and kept states (errored.tfstate) in Secrets. It is what the steps write through,
// what kubectl tfrun reads through, and what the manager prunes, moves and
// restores through (a copy brought back comes back into the store of its
// kind).
//
// Records kept before TerraformRunRecords existed are in Secrets: Get
// falls back to Secrets for a record of Resources' kinds it does not find
// there, and List and Delete cover both stores. Put falls back to Secrets
// when the cluster does not serve TerraformRunRecords (CRDs not upgraded)
// or the writer may not write them (a runner Role not upgraded), and says
// so through Warn: the record is kept, readable by those who may read
// Secrets.
type Router struct {
	// Resources keeps the kinds for which InResource holds.
	Resources Store
	// Secrets keeps KindPlanJSONSensitive and KindErroredState, and what
	// Resources cannot.
	Secrets Store
	// Warn, when set, is told when a record went to Secrets instead of
	// Resources.
	Warn func(msg string)
}

var (
	_ Restorable    = &Router{}
	_ RecordDeleter = &Router{}
	_ KindLister    = &Router{}
)

// NewRouter is the Router of the cluster's two stores over one client:
// TerraformRunRecords and Secrets, each owned by owner when set.
func NewRouter(cs kubernetes.Interface, owner *metav1.OwnerReference) *Router {
	return &Router{Resources: &ResourceStore{Client: cs, Owner: owner}, Secrets: &SecretStore{Client: cs, Owner: owner}}
}

// StoreOf is the store that keeps records of kind k.
func (r *Router) StoreOf(k Kind) Store {
	if InResource(k) {
		return r.Resources
	}
	return r.Secrets
}

// unavailable is an error of Resources after which Secrets is tried: the
// kind is not served, or the caller may not use it.
func unavailable(err error) bool {
	return errors.Is(err, ErrNotServed) || apierrors.IsForbidden(err)
}

// Put stores data in the store of its kind.
func (r *Router) Put(ctx context.Context, k Key, data []byte) error {
	if !InResource(k.Kind) {
		return r.Secrets.Put(ctx, k, data)
	}
	err := r.Resources.Put(ctx, k, data)
	if err == nil || !unavailable(err) {
		return err
	}
	if serr := r.Secrets.Put(ctx, k, data); serr != nil {
		return fmt.Errorf("%w; and in a Secret: %w", err, serr)
	}
	if r.Warn != nil {
		r.Warn(fmt.Sprintf("%s was kept in a Secret, readable only by those who may read Secrets, not in a TerraformRunRecord: %v", k, err))
	}
	return nil
}

// Get reads record k from the store of its kind; a record of Resources'
// kinds that is not there is read from Secrets (kept before
// TerraformRunRecords, or by a Put that fell back). When Secrets may not
// be read either, the record is not found, and the error says so.
func (r *Router) Get(ctx context.Context, k Key) ([]byte, error) {
	if !InResource(k.Kind) {
		return r.Secrets.Get(ctx, k)
	}
	b, err := r.Resources.Get(ctx, k)
	if err == nil || !(errors.Is(err, ErrNotFound) || unavailable(err)) {
		return b, err
	}
	b, serr := r.Secrets.Get(ctx, k)
	switch {
	case serr == nil:
		return b, nil
	case errors.Is(serr, ErrNotFound):
		return nil, err
	case errors.Is(err, ErrNotFound) && apierrors.IsForbidden(serr):
		return nil, fmt.Errorf("%w (records kept in Secrets, by runs before TerraformRunRecords, could not be read: %v)", err, serr)
	case apierrors.IsForbidden(err):
		return nil, err // the refusal of the store of its kind says most
	}
	return nil, serr
}

// List returns the records of a TerraformRun in both stores (a record in
// both once, as Resources has it).
func (r *Router) List(ctx context.Context, namespace, run string) ([]Record, error) {
	recs, err := r.Resources.List(ctx, namespace, run)
	if err != nil && !errors.Is(err, ErrNotServed) {
		return nil, err
	}
	srecs, err := r.Secrets.List(ctx, namespace, run)
	if err != nil {
		return nil, err
	}
	seen := map[Key]bool{}
	for _, rec := range recs {
		seen[rec.Key] = true
	}
	for _, rec := range srecs {
		if !seen[rec.Key] {
			recs = append(recs, rec)
		}
	}
	SortRecords(recs)
	return recs, nil
}

// Delete removes the records of the given runs (every run, with none)
// from both stores.
func (r *Router) Delete(ctx context.Context, namespace, run string, runIDs ...string) error {
	err := r.Resources.Delete(ctx, namespace, run, runIDs...)
	if errors.Is(err, ErrNotServed) {
		err = nil
	}
	return errors.Join(err, r.Secrets.Delete(ctx, namespace, run, runIDs...))
}

// ListKind implements KindLister: the records of kind k, from the store
// of that kind.
func (r *Router) ListKind(ctx context.Context, namespace, run string, k Kind) ([]Record, error) {
	return ListKind(ctx, r.StoreOf(k), namespace, run, k)
}

// DeleteRecord implements RecordDeleter: it deletes record k from the
// store of its kind.
func (r *Router) DeleteRecord(ctx context.Context, k Key) error {
	d, ok := r.StoreOf(k.Kind).(RecordDeleter)
	if !ok {
		return fmt.Errorf("records: the store of %s deletes no single record", k.Kind)
	}
	return d.DeleteRecord(ctx, k)
}

// Restoring is the Router whose stores write copies brought back from the
// object store, owned by owner: each kind back into its store.
func (r *Router) Restoring(owner *metav1.OwnerReference) Store {
	out := &Router{Resources: r.Resources, Secrets: r.Secrets, Warn: r.Warn}
	if s, ok := r.Resources.(Restorable); ok {
		out.Resources = s.Restoring(owner)
	}
	if s, ok := r.Secrets.(Restorable); ok {
		out.Secrets = s.Restoring(owner)
	}
	return out
}

// ExpireRestored deletes the copies brought back from the object store of
// a TerraformRun written before the given time, in both stores.
func (r *Router) ExpireRestored(ctx context.Context, namespace, run string, before time.Time) (int, error) {
	n := 0
	var errs []error
	for _, s := range []Store{r.Resources, r.Secrets} {
		if e, ok := s.(Restorable); ok {
			m, err := e.ExpireRestored(ctx, namespace, run, before)
			if errors.Is(err, ErrNotServed) {
				err = nil
			}
			n += m
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}
