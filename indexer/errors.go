package indexer

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrNilObject is returned when a nil object is stored or deleted.
	ErrNilObject = errors.New("indexer: nil object")
	// ErrEmptyKey is returned when the key function gives an object the empty key.
	ErrEmptyKey = errors.New("indexer: empty key")
	// ErrUnknownIndex is returned (wrapped, with the name) for an index name that is
	// not registered.
	ErrUnknownIndex = errors.New("indexer: unknown index")
	// ErrIndexExists is returned (wrapped, with the name) by AddIndexes for a name that
	// is already registered.
	ErrIndexExists = errors.New("indexer: index already exists")
	// ErrMutation matches a *MutationError with errors.Is.
	ErrMutation = errors.New("indexer: cached object was mutated")
)

// KeyError reports that the key function failed for an object.
type KeyError struct {
	Err error
}

func (e *KeyError) Error() string { return "indexer: key function: " + e.Err.Error() }
func (e *KeyError) Unwrap() error { return e.Err }

// IndexError reports that an index function failed; the store was left unchanged.
type IndexError struct {
	Index string // name of the index whose function failed
	Key   string // key of the object it failed on
	Err   error  // what the index function returned
}

func (e *IndexError) Error() string {
	return fmt.Sprintf("indexer: index %q on object %q: %v", e.Index, e.Key, e.Err)
}
func (e *IndexError) Unwrap() error { return e.Err }

// MutationError lists the keys of cached objects that a caller modified after storing
// them (or after reading them), and the ByIndex results (shared snapshots) whose
// elements a caller changed. Only an Indexer with Config.DetectMutations reports it.
type MutationError struct {
	Keys      []string     // sorted
	Snapshots []IndexValue // sorted by Index, then Value
}

// IndexValue names one value of one index: a ByIndex(Index, Value) result.
type IndexValue struct {
	Index, Value string
}

func (e *MutationError) Error() string {
	var b strings.Builder
	b.WriteString("indexer: ")
	if len(e.Keys) > 0 {
		fmt.Fprintf(&b, "%d cached object(s) were mutated: %s", len(e.Keys), strings.Join(e.Keys, ", "))
	}
	if len(e.Snapshots) > 0 {
		if len(e.Keys) > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%d ByIndex result(s) were modified:", len(e.Snapshots))
		for i, s := range e.Snapshots {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, " %s=%q", s.Index, s.Value)
		}
	}
	return b.String()
}

// Is makes errors.Is(err, ErrMutation) true.
func (e *MutationError) Is(target error) bool { return target == ErrMutation }
