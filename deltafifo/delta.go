package deltafifo

import (
	"errors"
	"fmt"
	"strconv"
)

// DeltaType says what happened to an object.
type DeltaType uint8

const (
	// Added: the object was created (a watch ADDED event).
	Added DeltaType = iota + 1
	// Updated: the object changed (a watch MODIFIED event).
	Updated
	// Deleted: the object was deleted. Object is its last state: the one the watch
	// reported, or, with FinalStateUnknown, the last one the store knew.
	Deleted
	// Replaced: the object was listed by a relist (Replace). It may or may not have
	// changed since the store last saw it.
	Replaced
	// Sync: a periodic resync re-delivers the object the store holds, unchanged.
	Sync
)

func (t DeltaType) String() string {
	switch t {
	case Added:
		return "Added"
	case Updated:
		return "Updated"
	case Deleted:
		return "Deleted"
	case Replaced:
		return "Replaced"
	case Sync:
		return "Sync"
	}
	return "DeltaType(" + strconv.Itoa(int(t)) + ")"
}

// Delta is one change to one object.
type Delta[T any] struct {
	Type DeltaType
	// FinalStateUnknown is set only on Deleted deltas that a relist synthesized and
	// on those queued by DeleteKey. In a relist, the object is gone from the server
	// but its deletion was never seen (it happened while the watch was down), so
	// Object is the last state the store knew, which may be stale. From DeleteKey,
	// Object is the zero value: the last state is the consumer's to find in its
	// store. An informer hands either to OnDelete as a tombstone.
	FinalStateUnknown bool
	// Key is the object's key (Config.KeyFunc), computed when the delta was queued;
	// with the default key function, when it is popped (the same key, computed by the
	// consumer rather than the producer).
	Key string
	// Object is the object after the change (for Deleted: its last known state). It is
	// shared with the producer and the consumer: treat it as read-only.
	Object T
}

// Batch is what Pop hands to its function: either one whole relist, or a run of
// ordinary deltas in the order they arrived.
type Batch[T any] struct {
	// Deltas are the changes, oldest first. For a relist: first a Deleted delta with
	// FinalStateUnknown for every known key missing from the list, then one Replaced
	// delta per listed object, in list order. For a resync: one Sync delta per known
	// object without a newer delta queued. Otherwise Added, Updated and Deleted deltas
	// for any keys, in arrival order (a key may appear several times); a Deleted delta
	// with FinalStateUnknown there comes from DeleteKey and has the zero Object.
	//
	// The slice is only valid until the function returns: the FIFO reuses it.
	Deltas []Delta[T]
	// Relist is true when the batch is the result of one Replace call: the consumer
	// should apply it atomically. Deltas are then Deleted and Replaced only.
	Relist bool
	// ResourceVersion is the resourceVersion given to Replace (relist batches only).
	ResourceVersion string
	// InitialList is true for the batch of the first relist (before HasSynced).
	InitialList bool
	// Resync is true when the batch is the result of one Resync call. Its Deltas are
	// Sync deltas only, and there may be none at all: every known key had a newer
	// delta queued, or nothing was known, when the request was popped. Tell a resync
	// batch by this flag, never by its first delta.
	Resync bool
}

var (
	// ErrClosed is returned by Pop, and by every producer method, once the FIFO is
	// closed.
	ErrClosed = errors.New("deltafifo: closed")
	// ErrNilObject is returned when a nil object is queued.
	ErrNilObject = errors.New("deltafifo: nil object")
	// ErrEmptyKey is returned when the key function gives an object the empty key.
	ErrEmptyKey = errors.New("deltafifo: empty key")

	errNoName = errors.New("object has no name")
)

// KeyError reports that the key function failed; nothing was queued.
type KeyError struct {
	Err error
}

func (e *KeyError) Error() string { return "deltafifo: key function: " + e.Err.Error() }
func (e *KeyError) Unwrap() error { return e.Err }

// itemError wraps an error about the i-th object given to Replace.
func itemError(err error, i int) error {
	return fmt.Errorf("%w (replace item %d)", err, i)
}
