package workqueue

import "hash/maphash"

// index is the core's item → slot table: open addressing with linear probing, and deletion
// by shifting the following run back (no tombstones). A queue inserts and deletes items
// all the time; a Go map under such churn fills with tombstones that lengthen every probe
// until the next rehash, and it needs a lookup before each insert. Here a miss returns the
// bucket where the item goes, so an insert costs one probe, and probes stay short.
//
// A bucket packs a 32-bit hash tag of the item (high half) and slot+1 (low half); 0 is an
// empty bucket. The home bucket of a tag is its top log2(len(b)) bits, so growing moves
// buckets without hashing items again. Items are compared only when tags match.
//
// Invariants: len(b) is 0 or a power of two >= minBuckets; n is the number of non-empty
// buckets and n <= len(b)·maxLoad; every item's bucket is reached from its home bucket
// through non-empty buckets only; shift == 32 - log2(len(b)).
type index struct {
	b     []uint64
	n     int
	shift uint
}

const (
	minBuckets = 16
	// maxLoadNum/maxLoadDen is the highest fill before the table doubles. Linear probing
	// needs about (1+1/(1-a)²)/2 probes per miss at fill a: 8.5 at 3/4.
	maxLoadNum, maxLoadDen = 3, 4
)

// itemSeed hashes items for every index of the package: a queue and its built-in rate
// limiters then hash an item once per AddRateLimited (one seed per process, random, so
// hash-flooding inputs cannot be prepared in advance).
var itemSeed = maphash.MakeSeed()

// tagOf hashes item for the index.
func tagOf[T comparable](seed maphash.Seed, item T) uint32 {
	return uint32(maphash.Comparable(seed, item) >> 32)
}

// home returns the home bucket of tag. Requires len(x.b) > 0.
func (x *index) home(tag uint32) int { return int(uint64(tag) >> x.shift) }

// emptyFrom returns the first empty bucket at or after tag's home. Requires a non-full table.
func (x *index) emptyFrom(tag uint32) int {
	mask := len(x.b) - 1
	i := x.home(tag)
	for x.b[i] != 0 {
		i = (i + 1) & mask
	}
	return i
}

// put stores slot s with tag in bucket pos, which must be the empty bucket a failed lookup
// of the item returned (-1 when the table has no buckets yet). It grows the table first
// if needed, which moves the insertion point.
func (x *index) put(tag uint32, pos int, s int32) {
	if pos < 0 || (x.n+1)*maxLoadDen > len(x.b)*maxLoadNum {
		x.grow()
		pos = x.emptyFrom(tag)
	}
	x.b[pos] = uint64(tag)<<32 | uint64(uint32(s)+1)
	x.n++
}

// grow doubles the table (or makes the first one).
func (x *index) grow() {
	old := x.b
	n := max(2*len(old), minBuckets)
	x.b = make([]uint64, n)
	x.shift = 32
	for m := n; m > 1; m >>= 1 {
		x.shift--
	}
	for _, v := range old {
		if v != 0 {
			x.b[x.emptyFrom(uint32(v>>32))] = v
		}
	}
}

// del removes slot s, indexed with tag. The slot must be in the table.
func (x *index) del(tag uint32, s int32) {
	mask := len(x.b) - 1
	want := uint64(tag)<<32 | uint64(uint32(s)+1)
	i := x.home(tag)
	for x.b[i] != want {
		i = (i + 1) & mask
	}
	// Close the hole at i: a later bucket of the run moves into it unless its home lies
	// cyclically in (i, j], where it would no longer be reachable from its home.
	for j := (i + 1) & mask; x.b[j] != 0; j = (j + 1) & mask {
		h := x.home(uint32(x.b[j] >> 32))
		if i <= j {
			if i < h && h <= j {
				continue
			}
		} else if i < h || h <= j {
			continue
		}
		x.b[i] = x.b[j]
		i = j
	}
	x.b[i] = 0
	x.n--
}

// lookup returns the slot of item, whose tag is tag, or none and the empty bucket where it
// would be put (-1 if the table has no buckets).
func (c *core[T]) lookup(item T, tag uint32) (int32, int) {
	x := &c.idx
	if len(x.b) == 0 {
		return none, -1
	}
	mask := len(x.b) - 1
	for i := x.home(tag); ; i = (i + 1) & mask {
		v := x.b[i]
		if v == 0 {
			return none, i
		}
		if uint32(v>>32) == tag {
			if s := int32(uint32(v)) - 1; c.e(s).item == item {
				return s, i
			}
		}
	}
}

// find returns the slot of item, or none.
func (c *core[T]) find(item T) int32 {
	s, _ := c.lookup(item, tagOf(c.seed, item))
	return s
}

// emptyOrNone returns the first empty bucket at or after tag's home, or -1 if the table has
// no buckets (what put expects for an item known to be absent).
func (x *index) emptyOrNone(tag uint32) int {
	if len(x.b) == 0 {
		return -1
	}
	return x.emptyFrom(tag)
}
