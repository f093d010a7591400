package workqueue

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// checkOverflow verifies the overflow heap's invariants: chunk count and size, and heap
// order.
func checkOverflow(t *testing.T, h *overflow) {
	t.Helper()
	used := (h.n + overSize - 1) / overSize
	if len(h.chunks) < used || len(h.chunks) > used+1 {
		t.Fatalf("%d chunks for %d elements", len(h.chunks), h.n)
	}
	for i, ch := range h.chunks {
		if len(ch) != overSize {
			t.Fatalf("chunk %d has %d elements", i, len(ch))
		}
	}
	for i := 1; i < h.n; i++ {
		if cmpDelayed(*h.at((i - 1) / 4), *h.at(i)) > 0 {
			t.Fatalf("heap order broken at %d", i)
		}
	}
}

// TestOverflowRandom drives the chunked heap with random pushes, pops and deletions
// across several chunks, against a sorted slice as the model.
func TestOverflowRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var h overflow
	var model []delayed
	seq := uint32(0)
	for step := range 20000 {
		switch op := r.IntN(10); {
		case op < 6 || len(model) == 0:
			for range 1 + r.IntN(200) {
				seq++
				el := delayed{at: r.Int64N(5000), slot: int32(seq), seq: seq}
				h.push(el)
				model = append(model, el)
			}
		case op < 9:
			slices.SortFunc(model, cmpDelayed)
			for range min(1+r.IntN(300), len(model)) {
				if got := h.min(); got != model[0] {
					t.Fatalf("step %d: min %+v, want %+v", step, got, model[0])
				}
				h.pop()
				model = model[1:]
			}
		default:
			m := int32(2 + r.IntN(5))
			drop := func(el delayed) bool { return el.slot%m == 0 }
			h.deleteFunc(drop)
			model = slices.DeleteFunc(model, drop)
		}
		if h.len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, h.len(), len(model))
		}
		checkOverflow(t, &h)
	}
	slices.SortFunc(model, cmpDelayed)
	for _, want := range model {
		if got := h.min(); got != want {
			t.Fatalf("drain: min %+v, want %+v", got, want)
		}
		h.pop()
	}
	checkOverflow(t, &h)
	if len(h.chunks) > 1 {
		t.Fatalf("%d chunks kept when empty, want at most 1", len(h.chunks))
	}
}

// TestOverflowMonotonic: deadlines pushed in increasing order (a stream of equal delays)
// come out in the same order, across chunk boundaries.
func TestOverflowMonotonic(t *testing.T) {
	var h overflow
	const n = 3*overSize + 7
	for i := range n {
		h.push(delayed{at: int64(i / 3), slot: int32(i), seq: uint32(i)})
	}
	checkOverflow(t, &h)
	for i := range n {
		if got := h.min(); got.slot != int32(i) {
			t.Fatalf("pop %d: slot %d", i, got.slot)
		}
		h.pop()
	}
}

// TestScheduleRingStartsAtPresent: a ring that was empty starts at the present (or an
// earlier deadline), not at the deadline that arrives first: a far deadline scheduled
// first must not pull the near ones scheduled after it into the current bucket.
func TestScheduleRingStartsAtPresent(t *testing.T) {
	q := New(Config[string]{})
	defer q.ShutDown()
	q.mu.Lock()
	defer q.mu.Unlock()
	c := &q.c
	now := int64(1) << 40
	c.addAt("far", tagOf(q.seed, "far"), now+int64(time.Hour), 0, "", now)
	if c.sched.cur > now>>wheelBits {
		t.Fatalf("ring starts at bucket %d, after the present %d", c.sched.cur, now>>wheelBits)
	}
	for i := range 100 {
		k := fmt.Sprint("near-", i)
		c.addAt(k, tagOf(q.seed, k), now+int64(time.Millisecond)+int64(i)<<wheelBits, 0, "", now)
	}
	if n := len(c.sched.ring[c.sched.cur&wheelMask].els); n != 0 {
		t.Fatalf("%d deadlines in the current bucket, want 0", n)
	}
	for i := range 100 {
		k := (now+int64(time.Millisecond))>>wheelBits + int64(i)
		if n := len(c.sched.ring[k&wheelMask].els); n != 1 {
			t.Fatalf("bucket %d holds %d deadlines, want 1", k, n)
		}
	}
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	if moved, _ := c.fire(now+int64(time.Millisecond)+50<<wheelBits, 1000); moved != 51 {
		t.Fatalf("%d fired, want 51", moved)
	}
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
}
