package reflector

import (
	"errors"
	"fmt"
	"hash/fnv"
)

// Fields a Shard can hash, as KEP-5866's shardRange names them.
const (
	ShardByUID       = "object.metadata.uid"
	ShardByNamespace = "object.metadata.namespace"
)

// Shard restricts a reflector to the objects whose Field hashes (64-bit
// FNV-1a, as k8s.io/apimachinery/pkg/sharding) into [Start, End): server-side
// sharded list and watch (KEP-5866, alpha in Kubernetes 1.36 behind the
// ShardedListAndWatch feature gate). The reflector sends the range as
// ListOptions.ShardSelector and also filters what it receives, so that it
// holds only its shard from a server that ignores the selector (the gate off,
// or an older server); Health.ShardFiltering says which of the two filtered.
// The zero Shard is none: every object.
type Shard struct {
	// Field is the hashed field: ShardByUID or ShardByNamespace.
	Field string
	// Start is the range's inclusive lower bound; End its exclusive upper
	// bound, with 0 meaning 2^64 (the end of the hash space).
	Start, End uint64
}

// IsZero reports whether s is the zero Shard (no sharding).
func (s Shard) IsZero() bool { return s == Shard{} }

// Selector returns the range as a ListOptions.ShardSelector, "" for the zero
// Shard.
func (s Shard) Selector() string {
	if s.IsZero() {
		return ""
	}
	end := fmt.Sprintf("0x%016x", s.End)
	if s.End == 0 {
		end = "0x10000000000000000"
	}
	return fmt.Sprintf("shardRange(%s, '0x%016x', '%s')", s.Field, s.Start, end)
}

// Contains reports whether an object of this namespace and UID is in the
// shard.
func (s Shard) Contains(namespace, uid string) bool {
	if s.IsZero() {
		return true
	}
	v := uid
	if s.Field == ShardByNamespace {
		v = namespace
	}
	h := fnv.New64a()
	h.Write([]byte(v))
	sum := h.Sum64()
	return sum >= s.Start && (s.End == 0 || sum < s.End)
}

func (s Shard) validate() error {
	if s.IsZero() {
		return nil
	}
	if s.Field != ShardByUID && s.Field != ShardByNamespace {
		return fmt.Errorf("reflector: Shard.Field %q: want %q or %q", s.Field, ShardByUID, ShardByNamespace)
	}
	if s.End != 0 && s.End <= s.Start {
		return errors.New("reflector: Shard range is empty: End must be above Start (0 for 2^64)")
	}
	return nil
}

// SplitShards divides the hash space of field into n equal ranges, for n
// replicas: shard i of n is SplitShards(field, n)[i].
func SplitShards(field string, n int) []Shard {
	if n < 1 {
		return nil
	}
	out := make([]Shard, n)
	step := ^uint64(0)/uint64(n) + 1
	if n == 1 {
		step = 0
	}
	for i := range out {
		out[i] = Shard{Field: field, Start: uint64(i) * step, End: uint64(i+1) * step}
	}
	out[n-1].End = 0
	return out
}

// Shard filtering modes, as Health.ShardFiltering reports them.
const (
	ShardFilteringServer = "server" // the server filtered: its lists carry ShardInfo
	ShardFilteringClient = "client" // the server sent objects outside the shard; the reflector filters
)
