package informer

import "errors"

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
)
