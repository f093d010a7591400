package reflector

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Fields a Shard can hash. The first two are KEP-5866's shardRange fields,
// which a server with the ShardedListAndWatch gate filters by;
// ShardByControllerUID is ctrlkit's own, filtered by the reflector only.
const (
	ShardByUID       = "object.metadata.uid"
	ShardByNamespace = "object.metadata.namespace"
	// ShardByControllerUID hashes the UID of the object's controller (its
	// ownerReference with controller: true), so that children land in the
	// shard of their owner sharded ByUID; an object without a controller
	// hashes "". The server cannot filter by it: the reflector receives the
	// whole collection and keeps its shard.
	ShardByControllerUID = "object.metadata.ownerReferences.controller.uid"
)

// Shard restricts a reflector to the objects whose Field hashes (64-bit
// FNV-1a, as k8s.io/apimachinery/pkg/sharding) into one of its Ranges:
// server-side sharded list and watch (KEP-5866, alpha in Kubernetes 1.36
// behind the ShardedListAndWatch feature gate). The reflector sends the
// ranges as ListOptions.ShardSelector and also filters what it receives, so
// that it holds only its shard from a server that ignores the selector (the
// gate off, or an older server); Health.ShardFiltering says which of the two
// filtered. The zero Shard is no sharding: every object. A Shard with a Field
// and no Ranges is the empty shard: no object. A reflector of the empty shard
// neither lists nor watches its collection (it reads the collection's
// resourceVersion with one LIST of at most one object): a replica that holds
// no slot yet costs the server nothing, even where the server does not filter.
type Shard struct {
	// Field is the hashed field: ShardByUID, ShardByNamespace or
	// ShardByControllerUID.
	Field string
	// Ranges are the hash ranges of the shard, each [Start, End).
	Ranges []Range
}

// Range is a range of the 64-bit hash space: Start inclusive, End exclusive,
// with End 0 meaning 2^64 (the end of the space).
type Range struct{ Start, End uint64 }

// IsZero reports whether s is the zero Shard (no sharding).
func (s Shard) IsZero() bool { return s.Field == "" && len(s.Ranges) == 0 }

// isEmpty reports whether s is the empty shard: a Field and no Ranges.
func (s *Shard) isEmpty() bool { return s.Field != "" && len(s.Ranges) == 0 }

// ServerFiltered reports whether a server with sharded list and watch can
// filter by the shard's Field.
func (s Shard) ServerFiltered() bool { return s.Field == ShardByUID || s.Field == ShardByNamespace }

// Selector returns the shard as a ListOptions.ShardSelector: "" for the zero
// Shard and for a Field the server cannot filter by; for the empty shard, the
// hash range [0, 1), which no object is in practice (the reflector drops one
// that is).
func (s Shard) Selector() string {
	if s.IsZero() || !s.ServerFiltered() {
		return ""
	}
	if len(s.Ranges) == 0 {
		return fmt.Sprintf("shardRange(%s, '0x%016x', '0x%016x')", s.Field, 0, 1)
	}
	var b strings.Builder
	for i, r := range s.Ranges {
		if i > 0 {
			b.WriteString(" || ")
		}
		end := fmt.Sprintf("0x%016x", r.End)
		if r.End == 0 {
			end = "0x10000000000000000"
		}
		fmt.Fprintf(&b, "shardRange(%s, '0x%016x', '%s')", s.Field, r.Start, end)
	}
	return b.String()
}

// Contains reports whether an object of this namespace and UID is in the
// shard. For ShardByControllerUID, uid is the controller's UID.
func (s Shard) Contains(namespace, uid string) bool {
	if s.IsZero() {
		return true
	}
	v := uid
	if s.Field == ShardByNamespace {
		v = namespace
	}
	return s.ContainsHash(Hash(v))
}

// ContainsObject reports whether obj is in the shard, by the shard's Field.
func (s Shard) ContainsObject(obj metav1.Object) bool {
	if s.IsZero() {
		return true
	}
	switch s.Field {
	case ShardByNamespace:
		return s.ContainsHash(Hash(obj.GetNamespace()))
	case ShardByControllerUID:
		return s.ContainsHash(Hash(string(ControllerUID(obj))))
	}
	return s.ContainsHash(Hash(string(obj.GetUID())))
}

// ControllerUID returns the UID of obj's controller (its ownerReference with
// controller: true), "" if it has none.
func ControllerUID(obj metav1.Object) types.UID {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller {
			return ref.UID
		}
	}
	return ""
}

// ContainsHash reports whether a hash (see Hash) is in the shard.
func (s Shard) ContainsHash(h uint64) bool {
	if s.IsZero() {
		return true
	}
	for _, r := range s.Ranges {
		if h >= r.Start && (r.End == 0 || h < r.End) {
			return true
		}
	}
	return false
}

// Hash is the hash a Shard places a field's value by: 64-bit FNV-1a,
// computed without allocating.
func Hash(value string) uint64 {
	h := uint64(14695981039346656037) // FNV-1a's offset basis
	for i := 0; i < len(value); i++ {
		h ^= uint64(value[i])
		h *= 1099511628211 // FNV's 64-bit prime
	}
	return h
}

func (s Shard) validate() error {
	if s.IsZero() {
		return nil
	}
	if s.Field != ShardByUID && s.Field != ShardByNamespace && s.Field != ShardByControllerUID {
		return fmt.Errorf("reflector: Shard.Field %q: want %q, %q or %q", s.Field, ShardByUID, ShardByNamespace, ShardByControllerUID)
	}
	for _, r := range s.Ranges {
		if r.End != 0 && r.End <= r.Start {
			return fmt.Errorf("reflector: Shard range [%#x, %#x) is empty: End must be above Start (0 for 2^64)", r.Start, r.End)
		}
	}
	return nil
}

// SplitShards divides the hash space of field into n equal single-range
// shards, for n replicas: shard i of n is SplitShards(field, n)[i].
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
		out[i] = Shard{Field: field, Ranges: []Range{{Start: uint64(i) * step, End: uint64(i+1) * step}}}
	}
	out[n-1].Ranges[0].End = 0
	return out
}

// Shard filtering modes, as Health.ShardFiltering reports them.
const (
	ShardFilteringServer = "server" // the server filtered: its lists carry ShardInfo
	ShardFilteringClient = "client" // the server sent objects outside the shard; the reflector filters
)
