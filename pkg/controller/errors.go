package controller

import (
	"errors"
	"fmt"
	"time"
)

// Typed errors steer requeueing and the Stalled condition, after Flux's
// internal/error: each keeps its cause (Unwrap) and the condition reason it
// is reported under.

// StallingError is a problem no retry fixes without a person (a bad spec, a
// failed destroy): it sets Stalled with its reason and is not requeued.
type StallingError struct {
	// Reason is the Stalled (and Ready) condition's reason.
	Reason string
	// Err is the cause; its text is the condition's message.
	Err error
}

func (e *StallingError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *StallingError) Unwrap() error { return e.Err }

// WaitingError is a problem that may go away by itself (an engine whose CRD
// is not installed yet): it sets Stalled and looks again after RequeueAfter.
type WaitingError struct {
	// Reason is the Stalled (and Ready) condition's reason.
	Reason string
	// Err is the cause; its text is the condition's message.
	Err error
	// RequeueAfter is when to look again.
	RequeueAfter time.Duration
}

func (e *WaitingError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *WaitingError) Unwrap() error { return e.Err }

// GenericError is a transient failure (an API call that failed): it is
// returned to controller-runtime, which retries with backoff. Reason says
// what was being done, for logs.
type GenericError struct {
	// Reason says what failed, in PascalCase.
	Reason string
	// Err is the cause.
	Err error
}

func (e *GenericError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *GenericError) Unwrap() error { return e.Err }

// stalling returns a StallingError with a formatted message.
func stalling(reason, format string, args ...any) error {
	return &StallingError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// waiting returns a WaitingError with a formatted message.
func waiting(reason string, after time.Duration, format string, args ...any) error {
	return &WaitingError{Reason: reason, RequeueAfter: after, Err: fmt.Errorf(format, args...)}
}

// generic wraps a transient failure with what was being done.
func generic(reason string, err error, what string, args ...any) error {
	if err == nil {
		return nil
	}
	return &GenericError{Reason: reason, Err: fmt.Errorf(what+": %w", append(args, err)...)}
}

// withSuffix appends text to a stalling or waiting error's message, keeping
// its type, reason and cause; other errors are returned as they are.
func withSuffix(err error, suffix string) error {
	var w *WaitingError
	if errors.As(err, &w) {
		return &WaitingError{Reason: w.Reason, RequeueAfter: w.RequeueAfter, Err: fmt.Errorf("%w%s", w.Err, suffix)}
	}
	var s *StallingError
	if errors.As(err, &s) {
		return &StallingError{Reason: s.Reason, Err: fmt.Errorf("%w%s", s.Err, suffix)}
	}
	return err
}

// errStaleCache says the cached TerraformRun lags the API server: its status
// does not yet show the child an earlier write of this reconciler recorded.
// Reconcile then writes nothing, not even a status patch (the API server
// would refuse it, 409), and looks again after staleCacheRetry.
var errStaleCache = errors.New("the cached TerraformRun is older than its status on the API server")

const staleCacheRetry = 200 * time.Millisecond

// conflictRetry is when a pass whose status patch the API server refused
// (409: the cache lags) looks again.
const conflictRetry = time.Second

// errEnginesUnknown says the manager has just started and has not yet
// looked for the engines' CRDs: the pass writes nothing (no
// EngineUnavailable for an engine that is installed) and looks again soon.
var errEnginesUnknown = errors.New("the engines' CRDs have not been looked for yet")
