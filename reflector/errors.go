package reflector

import (
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Sentinel errors. An *AccessError matches ErrForbidden or ErrUnauthorized with
// errors.Is, according to the server's answer.
var (
	// ErrForbidden matches an *AccessError caused by an HTTP 403 answer: the
	// credentials are valid but RBAC does not grant the verb on the resource.
	ErrForbidden = errors.New("reflector: forbidden")
	// ErrUnauthorized matches an *AccessError caused by an HTTP 401 answer:
	// the server did not accept the credentials.
	ErrUnauthorized = errors.New("reflector: unauthorized")
	// ErrAlreadyStarted is returned by Run when it was called before on the
	// same Reflector. A Reflector runs once.
	ErrAlreadyStarted = errors.New("reflector: Run called more than once")
)

// AccessError reports that the API server refused a list or watch because of
// authentication or authorization. The reflector keeps retrying with backoff
// (RBAC can be fixed while it runs); the error is visible in Health().LastError
// and passed to Config.OnError as soon as the server answers.
type AccessError struct {
	// Name is the reflector's Config.Name.
	Name string
	// Verb is the refused request: "list" or "watch".
	Verb string
	// Reason is metav1.StatusReasonForbidden or metav1.StatusReasonUnauthorized.
	Reason metav1.StatusReason
	// Err is the error returned by the ListerWatcher, usually an
	// *apierrors.StatusError carrying the server's message.
	Err error
}

func (e *AccessError) Error() string {
	return fmt.Sprintf("reflector: %s: %s refused (%s): %v", e.Name, e.Verb, e.Reason, e.Err)
}

// Unwrap returns the underlying error, so apierrors.IsForbidden and friends
// keep working on an *AccessError.
func (e *AccessError) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel matching e.Reason.
func (e *AccessError) Is(target error) bool {
	switch target {
	case ErrForbidden:
		return e.Reason == metav1.StatusReasonForbidden
	case ErrUnauthorized:
		return e.Reason == metav1.StatusReasonUnauthorized
	}
	return false
}

// failureKind is how the state machine reacts to an error.
type failureKind int

const (
	// failTransient: back off and retry the same step.
	failTransient failureKind = iota
	// failExpired: the resourceVersion is older than the server keeps (410
	// Gone / Expired): relist, no backoff.
	failExpired
	// failTooLarge: the resourceVersion is newer than this server has seen:
	// relist with a consistent read, no backoff.
	failTooLarge
	// failAccess: 401/403, reported as *AccessError, then backoff.
	failAccess
	// failUnsupported: the server rejected the request's options (422/400),
	// which for a watch-list means the server cannot stream lists.
	failUnsupported
	// failStoreRead: the server could not read an object from its storage
	// (StoreReadError), as after the unsafe deletion of a corrupt object,
	// which no watch from before the deletion can get past: relist at the
	// most recent resourceVersion.
	failStoreRead
)

func classify(err error) failureKind {
	switch {
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		return failExpired
	case isTooLargeResourceVersion(err):
		return failTooLarge
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return failAccess
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return failUnsupported
	case apierrors.IsStoreReadError(err):
		return failStoreRead
	}
	return failTransient
}

// isTooLargeResourceVersion recognises the answer of a server asked for a
// resourceVersion it has not observed yet. Current servers mark it with a
// status cause; servers before 1.19 only said so in a timeout's message.
func isTooLargeResourceVersion(err error) bool {
	if apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		return true
	}
	if !apierrors.IsTimeout(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	const legacy = "too large resource version"
	s := status.Status()
	if strings.Contains(strings.ToLower(s.Message), legacy) {
		return true
	}
	if s.Details != nil {
		for _, c := range s.Details.Causes {
			if strings.Contains(strings.ToLower(c.Message), legacy) {
				return true
			}
		}
	}
	return false
}

// RefusedError reports an object the reflector could not store: Config.Transform
// failed on it, returned nil or panicked, or the ListerWatcher could not decode it
// but could read its key (FromREST does). The reflector treats the object as
// absent: it leaves it out of lists, drops the store's copy of its key on a watch
// event (see Refuser), moves on to the next event, and reports the error to
// Config.OnError; Health().Stats.Refused counts them. The object comes back as soon
// as the server sends a version of it that can be stored. A refusal is not a
// failure: the reflector does not back off for it.
type RefusedError struct {
	// Name is the reflector's Config.Name.
	Name string
	// Key is the object's "namespace/name", or "name" for a cluster-scoped one.
	Key string
	// ResourceVersion is the resourceVersion the server sent with the object.
	ResourceVersion string
	// Err says why: the Transform's error, a *PanicError, or the decoding error.
	Err error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("reflector: %s: object %s (resourceVersion %s) refused: %v", e.Name, e.Key, e.ResourceVersion, e.Err)
}

// Unwrap returns the cause.
func (e *RefusedError) Unwrap() error { return e.Err }

// PanicError is a panic recovered from user code the reflector calls
// (Config.Transform), turned into an error.
type PanicError struct {
	// Value is what was passed to panic.
	Value any
	// Stack is the panicking goroutine's stack.
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }
