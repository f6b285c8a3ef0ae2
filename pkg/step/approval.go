package step

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	infrav1 "github.com/opr8r/opr8r/api/v1alpha1"
)

// ErrNotApproved refuses an apply whose approval opr8r has not recorded.
var ErrNotApproved = errors.New("opr8r has not recorded the approval of this plan")

// ApprovalCheck names where the apply step finds opr8r's record of the
// decision on its plan: the TerraformRun's status, which only opr8r's
// manager writes (its editors and approvers may not write status), never
// an engine object that tenants who may edit their namespace can write.
type ApprovalCheck struct {
	// Run and RunUID are the TerraformRun's name and uid; RunID is this
	// run's id (its engine object's name).
	Run, RunUID, RunID string
	// Wait is how long the step waits for the record (the manager records
	// an approval made in the engine, a resume, when it next sees it);
	// Poll how often it looks.
	Wait, Poll time.Duration
}

// AwaitApproval returns once the TerraformRun's status records that plan
// digest of this run is approved, or that the run was started without an
// approval gate (status.run.approvalMode Auto). It fails at once when the
// status records the plan rejected or refused, or names another run, and
// after Wait when it records nothing: the apply fails closed.
func (r *Runner) AwaitApproval(ctx context.Context, c ApprovalCheck, digest string) error {
	if c.Run == "" || c.RunID == "" {
		return fmt.Errorf("%w: --await-approval needs --records-run and --records-run-id (the TerraformRun and this run)", ErrNotApproved)
	}
	if r.Kube == nil {
		return fmt.Errorf("%w: no connection to the API server to read TerraformRun %s", ErrNotApproved, c.Run)
	}
	poll := c.Poll
	if poll <= 0 {
		poll = 2 * time.Second
	}
	deadline := time.Now().Add(c.Wait)
	for {
		done, err := r.approvalRecorded(ctx, c, digest)
		if done || err != nil {
			return err
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%w: TerraformRun %s's status records no approval of plan %s for run %s after %s; refusing to apply (an approval in the engine counts only once opr8r records it: see its Approved condition)", ErrNotApproved, c.Run, digest, c.RunID, c.Wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// approvalRecorded reads the TerraformRun once: done when the apply may go
// on, an error when it must not.
func (r *Runner) approvalRecorded(ctx context.Context, c ApprovalCheck, digest string) (bool, error) {
	run, err := r.getRun(ctx, c.Run)
	if apierrors.IsNotFound(err) {
		return false, fmt.Errorf("%w: TerraformRun %s is gone; refusing to apply", ErrNotApproved, c.Run)
	}
	if err != nil {
		r.logf("reading TerraformRun %s for its approval (retrying): %v", c.Run, err)
		return false, nil
	}
	if c.RunUID != "" && string(run.UID) != c.RunUID {
		return false, fmt.Errorf("%w: TerraformRun %s is not the one this run belongs to (uid %s, want %s); refusing to apply", ErrNotApproved, c.Run, run.UID, c.RunUID)
	}
	cur := run.Status.Run
	if cur == nil || cur.ID != c.RunID {
		return false, fmt.Errorf("%w: TerraformRun %s's current run is not %s; refusing to apply", ErrNotApproved, c.Run, c.RunID)
	}
	if cur.ApprovalMode == infrav1.ApprovalAuto {
		r.logf("run %s was started without an approval gate (approval mode Auto)", c.RunID)
		return true, nil
	}
	a := run.Status.Approval
	switch {
	case a == nil || a.Digest != digest:
		return false, nil
	case a.Approved:
		r.logf("plan %s approved (%s), as TerraformRun %s's status records", digest, a.Source, c.Run)
		return true, nil
	}
	return false, fmt.Errorf("%w: TerraformRun %s's status records plan %s as not approved: %s; refusing to apply", ErrNotApproved, c.Run, digest, r.Redact(a.Reason))
}

// getRun reads a TerraformRun in the step's namespace.
func (r *Runner) getRun(ctx context.Context, name string) (*infrav1.TerraformRun, error) {
	b, err := r.Kube.Client.CoreV1().RESTClient().Get().
		AbsPath("/apis", infrav1.GroupVersion.Group, infrav1.GroupVersion.Version, "namespaces", r.Kube.Namespace, "terraformruns", name).
		DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	run := &infrav1.TerraformRun{}
	if err := json.Unmarshal(b, run); err != nil {
		return nil, fmt.Errorf("reading TerraformRun %s: %w", name, err)
	}
	return run, nil
}
