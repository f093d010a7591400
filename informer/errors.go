package informer

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors, matched with errors.Is. Errors that carry values wrap them.
var (
	// ErrAlreadyStarted is returned by Run when it was called before on the same
	// Informer. An Informer runs once.
	ErrAlreadyStarted = errors.New("informer: Run called more than once")
	// ErrStopped is returned by AddHandler once Run has returned, and by the wait
	// methods when Run returns (or the handler is removed) before what they wait for.
	ErrStopped = errors.New("informer: stopped")
	// ErrNilHandler is returned by AddHandler for a nil Handler.
	ErrNilHandler = errors.New("informer: nil handler")
	// ErrInvalidOptions is returned, wrapped with the offending value, by AddHandler
	// for HandlerOptions out of range.
	ErrInvalidOptions = errors.New("informer: invalid handler options")
	// ErrUnknownRegistration is returned by RemoveHandler for a nil Registration or
	// one from another Informer.
	ErrUnknownRegistration = errors.New("informer: registration does not belong to this informer")
	// ErrInvalidResourceVersion is returned, wrapped with the value and the reason, by
	// WaitForResourceVersion when a resourceVersion is not a positive decimal
	// integer, the only form that can be compared.
	ErrInvalidResourceVersion = errors.New("informer: resourceVersion is not comparable")
	// ErrShutdownTimeout is wrapped by the error of a Run that stopped waiting
	// for user code which did not return within its shutdown timeout: a
	// *ShutdownError here. Package reconcile's ErrShutdownTimeout is this same
	// error, so one errors.Is test covers informers, controllers and managers.
	ErrShutdownTimeout = errors.New("shutdown timed out")
)

// ShutdownError is returned by Run when handler calls in progress did not
// return within Config.ShutdownTimeout after Run's context ended. Run returns
// anyway and abandons them. It wraps ErrShutdownTimeout.
type ShutdownError struct {
	// Informer is the informer's name.
	Informer string
	// Timeout is Config.ShutdownTimeout.
	Timeout time.Duration
	// Handlers counts the handlers still in a call.
	Handlers int
}

func (e *ShutdownError) Error() string {
	return fmt.Sprintf("informer: %s: %d handlers still in a call %v after Run's context ended, abandoned", e.Informer, e.Handlers, e.Timeout)
}

// Unwrap returns ErrShutdownTimeout.
func (e *ShutdownError) Unwrap() error { return ErrShutdownTimeout }

// PanicError is a panic recovered from a handler (or an index function), turned
// into an error and reported to Config.OnError and the Logger. The informer and
// the other handlers are not affected.
type PanicError struct {
	// Informer is the informer's name.
	Informer string
	// Key is the key of the object being handled or indexed.
	Key string
	// Call is the method that panicked: "OnAdd", "OnUpdate", "OnDelete", or
	// "index <name>" for an index function.
	Call string
	// Value is what was passed to panic.
	Value any
	// Stack is the panicking goroutine's stack.
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("informer: %s: %s of %s panicked: %v", e.Informer, e.Call, e.Key, e.Value)
}
