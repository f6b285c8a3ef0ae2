package step

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opr8r/opr8r/pkg/records"
)

// StateKeeper keeps a state its backend did not take where it outlives
// the run's pods and workspace: a record of the TerraformRun of its own
// kind (records.KindErroredState), which the records store keeps gzipped
// and in chunks in Secrets owned by the TerraformRun, whatever its size.
// The next run's restore-state step, as the runner, pushes it to the
// backend before anything plans (RestoreState).
type StateKeeper struct {
	// Records keeps the state: the run's records store (records.Router),
	// which keeps KindErroredState in Secrets only.
	Records records.Store
	// Key names what the apply keeps (its Kind is set): the TerraformRun,
	// the child that keeps it, which begins its Secrets' names, and the
	// step. RestoreState reads Key's Namespace and Run only.
	Key records.Key
	// Owner is the TerraformRun's reference: RestoreState pushes only the
	// kept states it owns.
	Owner *metav1.OwnerReference
}

func (k *StateKeeper) key() records.Key {
	key := k.Key
	key.Kind = records.KindErroredState
	return key
}

// where says where a kept state is, for people: its Secrets.
func where(k records.Key) string {
	return fmt.Sprintf("Secrets %s/%s-rec-…, labelled %s=%s,%s=%s", k.Namespace, k.RunID, records.RunIDLabel, k.RunID, records.KindLabel, k.Kind)
}

// keep saves the errored state file as the run's kept state and says
// where it is.
func (k *StateKeeper) keep(ctx context.Context, file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	key := k.key()
	if err := k.Records.Put(ctx, key, b); err != nil {
		return "", fmt.Errorf("keeping the state as %s: %w", key, err)
	}
	return where(key), nil
}

// ErrNoKeeper is a restore-state step that was not told which
// TerraformRun's kept states to push.
var ErrNoKeeper = errors.New("restore-state needs --records-run, --records-run-uid and --records-run-id: the TerraformRun whose kept states it pushes")

// RestoreState pushes to the backend, oldest first, the states earlier
// runs of the TerraformRun kept because their backend did not take them,
// and deletes each once its state is in the backend. It is the
// restore-state step, which runs as the runner before the run's plan
// (pkg/pipeline): the planner never pushes a state. It runs terraform in
// a directory of its own that holds only opr8r's backend configuration,
// never the run's module. terraform state push takes the lock (waiting
// up to the lock timeout), and refuses a state older than the backend's
// (a lower serial, another lineage): then the step fails, naming the
// kept state, and a person decides.
func (r *Runner) RestoreState(ctx context.Context, workspace string, b Backend) error {
	k := r.KeptStates
	if k == nil || k.Records == nil || k.Key.Run == "" {
		return ErrNoKeeper
	}
	recs, err := records.ListKind(ctx, k.Records, k.Key.Namespace, k.Key.Run, records.KindErroredState)
	if err != nil {
		return fmt.Errorf("looking for states earlier runs of %s kept: %w", k.Key.Run, err)
	}
	// Those the TerraformRun does not own are named, not pushed.
	kept := records.KeptStates(recs, "")
	if len(kept) == 0 {
		r.logf("no state an earlier run kept is left to push (another run pushed it, or it was deleted)")
		return nil
	}
	dir, err := os.MkdirTemp("", "opr8r-restore-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := r.initBackendOnly(ctx, dir, workspace, b); err != nil {
		return err
	}
	for _, rec := range kept {
		if err := r.pushKept(ctx, dir, rec); err != nil {
			return err
		}
	}
	return nil
}

// initBackendOnly initializes the backend, and selects the workspace, in
// dir, which holds nothing but the backend's configuration.
func (r *Runner) initBackendOnly(ctx context.Context, dir, workspace string, b Backend) error {
	if err := writeBackendOverride(dir, b); err != nil {
		return err
	}
	// The backend block alone is the configuration (no override of a
	// module: there is none).
	if err := os.Rename(filepath.Join(dir, BackendOverrideFile), filepath.Join(dir, "opr8r_backend.tf")); err != nil {
		return err
	}
	args := []string{"init", "-input=false", "-no-color", r.lockTimeoutArg()}
	if b.ConfigFile != "" {
		args = append(args, "-backend-config="+b.ConfigFile)
	}
	if _, _, err := r.tf(ctx, dir, false, nil, args...); err != nil {
		return err
	}
	if workspace != "" && workspace != "default" {
		if _, _, err := r.tf(ctx, dir, false, nil, "workspace", "select", "-or-create", "-no-color", workspace); err != nil {
			return err
		}
	}
	return nil
}

// pushKept pushes one kept state and deletes it.
func (r *Runner) pushKept(ctx context.Context, dir string, rec records.Record) error {
	k := r.KeptStates
	at := where(rec.Key)
	if k.Owner != nil && !slices.Contains(rec.Owners, k.Owner.UID) {
		r.logf("warning: the %s are labelled as a state an earlier run of %s kept, but that TerraformRun does not own them: not pushed", at, rec.Run)
		return nil
	}
	b, err := k.Records.Get(ctx, rec.Key)
	if errors.Is(err, records.ErrNotFound) {
		r.logf("the state an earlier run kept in the %s is gone (another run pushed it)", at)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the state an earlier run kept in the %s: %w", at, err)
	}
	file := filepath.Join(dir, ErroredStateFile)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return err
	}
	_, _, err = r.tf(ctx, dir, true, nil, "state", "push", r.lockTimeoutArg(), file)
	_ = os.Remove(file)
	if err != nil {
		return fmt.Errorf("the state an earlier run kept in the %s, because its backend did not take it, could not be pushed: %w; if the backend holds it already, delete those Secrets; if not, push it with terraform state push (-force if it is older than the backend's): kubectl tfrun kept-state %s -n %s > %s", at, err, rec.Run, rec.Namespace, ErroredStateFile)
	}
	d, ok := k.Records.(records.RecordDeleter)
	if !ok {
		return fmt.Errorf("the state kept in the %s is pushed, but the records store deletes no single record", at)
	}
	if err := d.DeleteRecord(ctx, rec.Key); err != nil {
		return fmt.Errorf("the state kept in the %s is pushed, but could not be deleted: %w", at, err)
	}
	r.logf("pushed the state an earlier run kept in the %s (%d bytes) to the backend, and deleted it", at, len(b))
	return nil
}
