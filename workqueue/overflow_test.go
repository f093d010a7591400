package workqueue

import (
	"math/rand/v2"
	"slices"
	"testing"
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
