package step

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErroredStateFile is where terraform keeps the state it could not save to
// its backend (the backend went away during the apply).
const ErroredStateFile = "errored.tfstate"

// DefaultStateRetry is how long the apply step keeps trying to save a
// state that terraform could not save: long enough for an API server or a
// state bucket to come back from a restart.
const DefaultStateRetry = 10 * time.Minute

// stateRetryWait is the pause between two tries.
var stateRetryWait = 2 * time.Second

// Diagnostics terraform reports when the apply itself succeeded but the
// backend did not answer at its end.
const (
	diagSaveState   = "Error: Failed to save state"
	diagPersist     = "Error: Failed to persist state"
	diagReleaseLock = "Error: Error releasing the state lock"
)

// recoverState handles an apply that failed only at its very end, because
// the state backend did not answer (an API server restarting, a bucket
// unreachable): the resources were changed, and the state that records
// them must not be lost.
//   - terraform kept the state in errored.tfstate: it is pushed to the
//     backend, again and again until the backend answers (StateRetry),
//     with -lock=false, since this run's own lock is the one still held
//     (the cleanup step releases it);
//   - the state was saved but the lock could not be released: the cleanup
//     step releases it.
//
// The apply then succeeded if the backend was its only error; any other
// error is returned, after the state was saved all the same.
func (r *Runner) recoverState(ctx context.Context, m Module, applyErr error) error {
	var te *TerraformError
	if !errors.As(applyErr, &te) {
		return applyErr
	}
	errored := filepath.Join(m.Dir, ErroredStateFile)
	_, statErr := os.Stat(errored)
	kept := statErr == nil
	if !kept && !onlyBackendErrors(te.Errors) {
		return applyErr
	}
	if kept {
		if err := r.pushState(ctx, m, errored); err != nil {
			return r.keepErrored(ctx, errored, fmt.Errorf("%w; and the state terraform kept in %s could not be saved to the backend: %v", applyErr, ErroredStateFile, err))
		}
	}
	if !onlyBackendErrors(te.Errors) {
		// The apply's own error, not the backend's, is what to show.
		for _, e := range te.Errors {
			if !backendError(e) {
				return &TerraformError{Args: te.Args, Code: te.Code, Summary: e, Errors: te.Errors}
			}
		}
		return applyErr
	}
	if !kept {
		r.logf("the apply succeeded and its state is saved, but the state lock could not be released (%s); the cleanup step releases it", te.Summary)
	}
	return nil
}

// keepErrored keeps a state the backend did not take where it outlives
// the pod (KeptStates), and says where it is and how it gets to the
// backend.
func (r *Runner) keepErrored(ctx context.Context, file string, err error) error {
	k := r.KeptStates
	if k == nil || k.Records == nil {
		return fmt.Errorf("%w (push it with terraform state push %s once the backend answers: it is on this run's workspace, which goes when the run ends)", err, ErroredStateFile)
	}
	// Not with the step's context: a step stopped at its timeout still
	// keeps the state.
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	at, kerr := k.keep(kctx, file)
	if kerr != nil {
		return fmt.Errorf("%w; and keeping it failed too: %v (push %s with terraform state push before the run's workspace goes)", err, kerr, ErroredStateFile)
	}
	return fmt.Errorf("%w; the state is kept in the %s: the next run of %s pushes it to the backend before it plans (kubectl tfrun rerun %s), or push it yourself: kubectl tfrun kept-state %s -n %s > %s && terraform state push %s",
		err, at, k.Key.Run, k.Key.Run, k.Key.Run, k.Key.Namespace, ErroredStateFile, ErroredStateFile)
}

// onlyBackendErrors says whether every error terraform reported is about
// saving the state or releasing its lock.
func onlyBackendErrors(errs []string) bool {
	if len(errs) == 0 {
		return false
	}
	for _, e := range errs {
		if !backendError(e) {
			return false
		}
	}
	return true
}

// backendError says whether an error diagnostic is about saving the state
// or releasing its lock.
func backendError(e string) bool {
	return strings.HasPrefix(e, diagSaveState) || strings.HasPrefix(e, diagPersist) || strings.HasPrefix(e, diagReleaseLock)
}

// pushState pushes the state file to the backend until it succeeds, the
// context ends, or StateRetry has passed.
func (r *Runner) pushState(ctx context.Context, m Module, file string) error {
	limit := r.StateRetry
	if limit == 0 {
		limit = DefaultStateRetry
	}
	r.logf("terraform could not save the state to its backend and kept it in %s: saving it again until the backend answers (up to %s)", ErroredStateFile, limit)
	deadline := time.Now().Add(limit)
	for attempt := 1; ; attempt++ {
		_, _, err := r.tf(ctx, m.Dir, true, nil, "state", "push", "-lock=false", file)
		if err == nil {
			r.logf("the state is saved (attempt %d)", attempt)
			return os.Remove(file)
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(stateRetryWait):
		}
	}
}
