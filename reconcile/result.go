package reconcile

import (
	"context"
	"errors"
	"time"
)

// Reconciler brings the world in line with the desired state of one key.
//
// Reconcile is called with a key whose state may have changed (or whose periodic
// resync is due); it should read the current state from a cache, compare it with
// the desired state and act. A key whose object is gone means "clean up". It is
// never called for the same key by two workers at once, but different keys are
// reconciled concurrently (Config.Workers), so implementations must be safe for
// concurrent use.
//
// The outcome means one thing:
//   - nil error, zero Result: done; the key's backoff is forgotten and the key
//     comes back only with a change or the next resync.
//   - nil error, Result.RequeueAfter > 0: done for now, look again after that
//     duration (the backoff is forgotten too).
//   - an error made with Terminal: give up on this change; no retry until the key
//     changes again or is resynced.
//   - any other error: retry with the controller's rate limiter (exponential
//     backoff by default); Result is ignored.
type Reconciler[K comparable] interface {
	Reconcile(ctx context.Context, key K) (Result, error)
}

// Func adapts a function to a Reconciler.
type Func[K comparable] func(ctx context.Context, key K) (Result, error)

// Reconcile calls f(ctx, key).
func (f Func[K]) Reconcile(ctx context.Context, key K) (Result, error) { return f(ctx, key) }

// Result is what a successful Reconcile asks for.
type Result struct {
	// RequeueAfter, if positive, reconciles the key again after this duration
	// (earlier if it changes meanwhile). Zero or negative means no requeue.
	RequeueAfter time.Duration
}

// ErrTerminal matches (errors.Is) every error made by Terminal.
var ErrTerminal = errors.New("reconcile: terminal error")

// Terminal marks err as terminal: the controller does not retry the key. The
// result wraps err (errors.Is and errors.As see through it) and matches
// ErrTerminal. Terminal(nil) returns ErrTerminal itself.
func Terminal(err error) error {
	if err == nil {
		return ErrTerminal
	}
	return &terminalError{err: err}
}

type terminalError struct{ err error }

func (e *terminalError) Error() string        { return "terminal: " + e.err.Error() }
func (e *terminalError) Unwrap() error        { return e.err }
func (e *terminalError) Is(target error) bool { return target == ErrTerminal }
