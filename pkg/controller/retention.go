package controller

import (
	"context"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
	"github.com/opr8r/opr8r/pkg/records"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=delete
// +kubebuilder:rbac:groups=infra.opr8r.io,resources=terraformrunrecords,verbs=get;list;create;update;delete

// reconcileRetention moves the records of finished runs to the object store
// and brings them back on request when one is configured
// (reconcileObjectStore), and prunes the records (step logs and plans, pkg/records)
// of runs that have left status.history: those numbered below the oldest
// run the stored history keeps. It lists a TerraformRun's records only
// when its oldest kept run has moved since the last prune, so a pass of a
// run whose history did not change costs nothing. A failed prune is
// logged and tried again on a later pass; it never holds a run back.
// It sets no conditions.
func (r *TerraformRunReconciler) reconcileRetention(ctx context.Context, run *infrav1.TerraformRun, st *passState) (ctrl.Result, error) {
	if r.Records == nil {
		return ctrl.Result{}, nil
	}
	var res ctrl.Result
	if r.ObjectStore != nil {
		res = r.reconcileObjectStore(ctx, run, st)
	}
	h := st.persisted.History
	if !historyFull(h, limitsOf(run, st.eff.Spec)) {
		return res, nil // nothing has left a history that is not full
	}
	kept := map[string]bool{}
	newest := h[0].Number
	for _, rec := range h {
		kept[rec.ID] = true
		newest = max(newest, rec.Number)
	}
	if done, ok := r.recordsPruned.Load(run.UID); ok && done.(int64) >= newest {
		return res, nil
	}
	for _, s := range []records.Store{r.Records, r.ObjectStore} {
		if s == nil {
			continue
		}
		gone, err := records.Prune(ctx, s, run.Namespace, run.Name, newest, kept)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "pruning the records of runs that left the history; trying again later")
			return res, nil
		}
		if len(gone) > 0 {
			ctrl.LoggerFrom(ctx).V(1).Info("pruned the records of runs that left the history", "runs", gone)
		}
	}
	r.recordsPruned.Store(run.UID, newest)
	return res, nil
}

// historyFull says whether runs or checks may have left the history: it
// holds as many of either as it keeps.
func historyFull(h []infrav1.RunRecord, keep historyLimits) bool {
	var runs, checks int32
	for _, rec := range h {
		if rec.Type == infrav1.RunDrift {
			checks++
		} else {
			runs++
		}
	}
	return runs >= keep.runs || checks >= keep.checks
}

// forgetRecords deletes every record of a TerraformRun that is going away.
// The records in the cluster are owned by it, so the garbage collector would also
// remove them; deleting them here makes that immediate, and is what removes
// them from an object store. A store that fails is logged, not waited for:
// deletion is never held up by records (the object store's retention sweep
// removes what is left).
func (r *TerraformRunReconciler) forgetRecords(ctx context.Context, run *infrav1.TerraformRun) {
	r.recordsPruned.Delete(run.UID)
	r.recordsMoved.Delete(run.UID)
	r.recordsRestores.Delete(run.UID)
	for _, s := range []records.Store{r.Records, r.ObjectStore} {
		if s == nil {
			continue
		}
		if err := s.Delete(ctx, run.Namespace, run.Name); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "deleting the records of a deleted TerraformRun")
		}
	}
}

// DefaultRestoreTTL is how long records brought back stay.
const DefaultRestoreTTL = 10 * time.Minute

// restoreState is what the reconciler remembers of a TerraformRun's
// records requests.
type restoreState struct {
	handled string
	at      time.Time
}

// reconcileObjectStore moves the records of finished runs from the
// cluster's stores the steps wrote (TerraformRunRecords and Secrets) into
// the object store, and brings a run's records back when the TerraformRun
// asks (infrav1.RecordsRequestAnnotation), for RestoreTTL, each kind into
// its store (records.Router). Records of a run move once it is in the
// stored history; the cluster's copies are deleted only after every record
// of the run is in the object store.
func (r *TerraformRunReconciler) reconcileObjectStore(ctx context.Context, run *infrav1.TerraformRun, st *passState) ctrl.Result {
	log := ctrl.LoggerFrom(ctx)
	if err := r.moveRecords(ctx, run, st); err != nil {
		log.Error(err, "moving records to the object store; trying again later")
	}
	cluster, ok := r.Records.(records.Restorable)
	if !ok {
		return ctrl.Result{}
	}
	ttl := r.RestoreTTL
	if ttl == 0 {
		ttl = DefaultRestoreTTL
	}
	var res ctrl.Result
	prev, seen := r.recordsRestores.Load(run.UID)
	state, _ := prev.(restoreState)
	if req := run.Annotations[infrav1.RecordsRequestAnnotation]; req != "" && req != state.handled {
		runID, _, _ := strings.Cut(req, "@")
		if n, err := r.restoreRecords(ctx, run, st, runID, cluster.Restoring(ownerOf(run))); err != nil {
			log.Error(err, "bringing records back from the object store", "run", runID)
			return ctrl.Result{RequeueAfter: 5 * time.Second}
		} else if n > 0 {
			log.V(1).Info("brought records back from the object store", "run", runID, "records", n, "for", ttl)
		}
		state = restoreState{handled: req, at: r.now()}
		r.recordsRestores.Store(run.UID, state)
		return ctrl.Result{RequeueAfter: ttl}
	}
	// Copies outlive their TTL only across a manager restart: look once.
	if !seen || (!state.at.IsZero() && r.now().After(state.at.Add(ttl))) {
		if _, err := cluster.ExpireRestored(ctx, run.Namespace, run.Name, r.now().Add(-ttl)); err != nil {
			log.Error(err, "deleting records brought back from the object store")
			return ctrl.Result{RequeueAfter: ttl}
		}
		state.at = time.Time{}
		r.recordsRestores.Store(run.UID, state)
	} else if !state.at.IsZero() {
		res.RequeueAfter = time.Until(state.at.Add(ttl)) + time.Second
	}
	return res
}

// moveRecords copies the records of the runs in the stored history that
// are still in the cluster into the object store, then deletes them there.
// It lists a TerraformRun's records (their metadata) only when its history
// has a run newer than the last one moved, and holds one record at a time.
func (r *TerraformRunReconciler) moveRecords(ctx context.Context, run *infrav1.TerraformRun, st *passState) error {
	inHistory := map[string]bool{}
	var newest int64
	for _, h := range st.persisted.History {
		inHistory[h.ID] = true
		newest = max(newest, h.Number)
	}
	if len(inHistory) == 0 {
		return nil
	}
	if done, ok := r.recordsMoved.Load(run.UID); ok && done.(int64) >= newest {
		return nil
	}
	recs, err := r.Records.List(ctx, run.Namespace, run.Name)
	if err != nil {
		return err
	}
	byRun := map[string][]records.Record{}
	for _, rec := range recs {
		// A kept state (records.KindErroredState) is work left for the
		// next run's restore-state step, which reads it in the cluster.
		if inHistory[rec.RunID] && !rec.Restored && records.History(rec.Kind) {
			byRun[rec.RunID] = append(byRun[rec.RunID], rec)
		}
	}
	for id, rs := range byRun {
		for _, rec := range rs {
			b, err := r.Records.Get(ctx, rec.Key)
			if err != nil {
				return err
			}
			if err := r.ObjectStore.Put(ctx, rec.Key, b); err != nil {
				return err
			}
		}
		if err := r.Records.Delete(ctx, run.Namespace, run.Name, id); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).V(1).Info("moved a run's records to the object store", "run", id, "records", len(rs))
	}
	r.recordsMoved.Store(run.UID, newest)
	return nil
}

// restoreRecords writes the object store's records of one run of the
// history into the cluster's store of restored copies.
func (r *TerraformRunReconciler) restoreRecords(ctx context.Context, run *infrav1.TerraformRun, st *passState, runID string, to records.Store) (int, error) {
	found := false
	for _, h := range st.persisted.History {
		found = found || h.ID == runID
	}
	if !found {
		return 0, nil // not a run of the history: nothing to bring back
	}
	recs, err := r.ObjectStore.List(ctx, run.Namespace, run.Name)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, rec := range recs {
		if rec.RunID != runID {
			continue
		}
		b, err := r.ObjectStore.Get(ctx, rec.Key)
		if err != nil {
			return n, err
		}
		if err := to.Put(ctx, rec.Key, b); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func ownerOf(run *infrav1.TerraformRun) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformRun", Name: run.Name, UID: run.UID}
}
