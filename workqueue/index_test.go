package workqueue

import (
	"math/rand/v2"
	"testing"
)

// probeTag finds slot s stored with tag the way lookups do: from the tag's home bucket
// through non-empty buckets. It returns the bucket, or -1 if an empty bucket comes first.
func probeTag(x *index, tag uint32, s int32) int {
	want := uint64(tag)<<32 | uint64(uint32(s)+1)
	mask := len(x.b) - 1
	for i, n := x.home(tag), 0; n < len(x.b); i, n = (i+1)&mask, n+1 {
		switch x.b[i] {
		case want:
			return i
		case 0:
			return -1
		}
	}
	return -1
}

// TestIndexChurn drives the index with insertions and deletions whose tags crowd into a few
// home buckets, including the last ones so runs wrap around the end of the table, and
// checks after every step that each stored slot is still reached from its home bucket, that
// nothing else is stored, and that the load bound holds. Backward-shift deletion that moved
// the wrong bucket (or none) would leave an item unreachable.
func TestIndexChurn(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var x index
	tags := map[int32]uint32{} // stored slot → its tag
	next := int32(0)
	// A few tags per region: the top bits pick the home bucket.
	pick := func() uint32 {
		homes := []uint32{0, 1, 0xffffffff, 0xfffffff0, 0x80000000}
		return homes[r.IntN(len(homes))] - uint32(r.IntN(3))
	}
	for step := range 20000 {
		if len(tags) > 0 && r.IntN(2) == 0 {
			for s, tag := range tags { // a random stored slot
				x.del(tag, s)
				delete(tags, s)
				break
			}
		} else {
			tag := pick()
			pos := -1
			if len(x.b) > 0 {
				pos = x.emptyFrom(tag)
			}
			x.put(tag, pos, next)
			tags[next] = tag
			next++
		}
		if x.n != len(tags) || x.n*maxLoadDen > len(x.b)*maxLoadNum {
			t.Fatalf("step %d: n %d, want %d, %d buckets", step, x.n, len(tags), len(x.b))
		}
		for s, tag := range tags {
			if probeTag(&x, tag, s) < 0 {
				t.Fatalf("step %d: slot %d (tag %#x) unreachable", step, s, tag)
			}
		}
		used := 0
		for _, v := range x.b {
			if v != 0 {
				used++
				if s := int32(uint32(v)) - 1; tags[s] != uint32(v>>32) {
					t.Fatalf("step %d: bucket holds slot %d with tag %#x, not stored", step, s, v>>32)
				}
			}
		}
		if used != len(tags) {
			t.Fatalf("step %d: %d buckets used, %d slots stored", step, used, len(tags))
		}
	}
}

// TestFailuresChurn: the failure table counts per item, forgets exactly the forgotten item,
// and gives its memory back after a peak.
func TestFailuresChurn(t *testing.T) {
	var f failures[int]
	want := map[int]int{}
	r := rand.New(rand.NewPCG(3, 4))
	for range 50000 {
		item := r.IntN(3000)
		switch r.IntN(3) {
		case 0, 1:
			if got := f.inc(item); got != want[item] {
				t.Fatalf("inc(%d) = %d, want %d", item, got, want[item])
			}
			want[item]++
		default:
			f.forget(item)
			delete(want, item)
		}
		if got := f.get(item); got != want[item] {
			t.Fatalf("get(%d) = %d, want %d", item, got, want[item])
		}
	}
	if f.len() != len(want) {
		t.Fatalf("len %d, want %d", f.len(), len(want))
	}
	for item, n := range want {
		if got := f.get(item); got != n {
			t.Fatalf("get(%d) = %d, want %d", item, got, n)
		}
	}
	// A peak of many items, then all but a few forgotten: the table shrinks (below
	// shrinkMin items it is left alone, so it ends up at most that size).
	for i := range 4 * shrinkMin {
		f.inc(10000 + i)
	}
	for i := range 4*shrinkMin - 10 {
		f.forget(10000 + i)
	}
	for item := range want {
		f.forget(item)
	}
	if n, b, c := f.len(), len(f.idx.b), cap(f.recs); n != 10 || b > shrinkMin || c > shrinkMin {
		t.Fatalf("after forgetting: %d items, %d buckets, %d records kept", n, b, c)
	}
	for i := 4*shrinkMin - 10; i < 4*shrinkMin; i++ {
		if got := f.get(10000 + i); got != 1 {
			t.Fatalf("get(%d) = %d after shrink, want 1", 10000+i, got)
		}
	}
}
