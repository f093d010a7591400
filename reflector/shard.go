package reflector

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Fields a Shard can hash. The first two are KEP-5866's shardRange fields,
// which a server with the ShardedListAndWatch gate filters by; the last two
// are ctrlkit's own, filtered by the reflector only (it receives the whole
// collection and keeps its shard).
const (
	ShardByUID       = "object.metadata.uid"
	ShardByNamespace = "object.metadata.namespace"
	// ShardByName hashes the object's key: "namespace/name", or "name" for
	// a cluster-scoped object. A key keeps its place across a delete and
	// re-create (a new UID), so that a controller whose keys are names can
	// own them by this placement alone.
	ShardByName = "object.metadata.namespace/name"
	// ShardByControllerName hashes the key of the object's controller (its
	// ownerReference with controller: true) as the controller's own
	// ShardByName would: "namespace/<controller name>", or "<controller
	// name>" for a cluster-scoped object. Children land with their owner,
	// also with an owner deleted and re-created under the same name. An
	// object without a controller hashes its own key.
	ShardByControllerName = "object.metadata.ownerReferences.controller.name"
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
	// Field is the hashed field: ShardByUID, ShardByNamespace, ShardByName
	// or ShardByControllerName.
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

// Contains reports whether an object of this namespace and UID is in a
// shard of Field ShardByUID or ShardByNamespace; see ContainsKey for the
// placements by name.
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

// ContainsKey reports whether the key namespace/name ("name" when namespace
// is "") is in a shard of Field ShardByName, ShardByControllerName (the key
// is then the controller's) or ShardByNamespace. It depends on nothing but
// the key: every replica computes the same from the same shard, whatever it
// caches. A shard of Field ShardByUID contains no key: a UID is no function of
// a name.
func (s Shard) ContainsKey(namespace, name string) bool {
	switch {
	case s.IsZero():
		return true
	case s.Field == ShardByNamespace:
		return s.ContainsHash(Hash(namespace))
	case s.Field == ShardByName || s.Field == ShardByControllerName:
		return s.ContainsHash(HashKey(namespace, name))
	}
	return false
}

// ContainsObject reports whether obj is in the shard, by the shard's Field.
func (s Shard) ContainsObject(obj metav1.Object) bool {
	if s.IsZero() {
		return true
	}
	switch s.Field {
	case ShardByNamespace:
		return s.ContainsHash(Hash(obj.GetNamespace()))
	case ShardByName:
		return s.ContainsHash(HashKey(obj.GetNamespace(), obj.GetName()))
	case ShardByControllerName:
		name := obj.GetName()
		if ref := controllerOf(obj); ref != nil {
			name = ref.Name
		}
		return s.ContainsHash(HashKey(obj.GetNamespace(), name))
	}
	return s.ContainsHash(Hash(string(obj.GetUID())))
}

// ControllerUID returns the UID of obj's controller (its ownerReference with
// controller: true), "" if it has none.
func ControllerUID(obj metav1.Object) types.UID {
	if ref := controllerOf(obj); ref != nil {
		return ref.UID
	}
	return ""
}

// controllerOf returns obj's ownerReference with controller: true, nil if it
// has none.
func controllerOf(obj metav1.Object) *metav1.OwnerReference {
	refs := obj.GetOwnerReferences()
	for i := range refs {
		if refs[i].Controller != nil && *refs[i].Controller {
			return &refs[i]
		}
	}
	return nil
}

// HashKey is the hash ShardByName places a key by: 64-bit FNV-1a of
// "namespace/name" (of name alone when namespace is ""), then mixed so that
// every bit of it moves with every byte. FNV-1a alone barely moves its high
// bits with the last bytes, and names often differ only there (web-1,
// web-2): unmixed, they would crowd into one shard.
func HashKey(namespace, name string) uint64 {
	h := uint64(14695981039346656037)
	if namespace != "" {
		h = hashOn(h, namespace)
		h = hashOn(h, "/")
	}
	h = hashOn(h, name)
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
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
	return hashOn(14695981039346656037, value) // FNV-1a's offset basis
}

// hashOn goes on hashing value from h.
func hashOn(h uint64, value string) uint64 {
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
	switch s.Field {
	case ShardByUID, ShardByNamespace, ShardByName, ShardByControllerName:
	default:
		return fmt.Errorf("reflector: Shard.Field %q: want %q, %q, %q or %q", s.Field, ShardByUID, ShardByNamespace, ShardByName, ShardByControllerName)
	}
	for _, r := range s.Ranges {
		if r.End != 0 && r.End <= r.Start {
			return fmt.Errorf("reflector: Shard range [%#x, %#x) is empty: End must be above Start (0 for 2^64)", r.Start, r.End)
		}
	}
	return nil
}

// Covers reports whether every object of shard t is in s: s is the zero
// Shard, or both have the same Field and each range of t lies in a range of
// s. A Shard's ranges are compared one by one: adjacent ranges of s must be
// merged for a range of t spanning them to count.
func (s Shard) Covers(t Shard) bool {
	if s.IsZero() {
		return true
	}
	if t.IsZero() || s.Field != t.Field {
		return false
	}
	for _, tr := range t.Ranges {
		in := false
		for _, sr := range s.Ranges {
			if tr.Start >= sr.Start && (sr.End == 0 || (tr.End != 0 && tr.End <= sr.End)) {
				in = true
				break
			}
		}
		if !in {
			return false
		}
	}
	return true
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
