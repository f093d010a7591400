package workqueue

import (
	"fmt"
	"testing"
)

// TestDoneLeavesUnrelatedStagedAdds: a Done that staged adds cannot affect leaves them
// staged (no second take of the staging lock), and they still apply in order.
func TestDoneLeavesUnrelatedStagedAdds(t *testing.T) {
	q := New(Config[string]{})
	defer q.ShutDown()
	y := "y"
	for i := 0; tagOf(q.seed, y)%64 == tagOf(q.seed, "x")%64; i++ {
		y = fmt.Sprint("y", i) // one whose bit in staged is not x's
	}
	q.Add("x")
	mustGet(t, q, "x")
	q.Add(y) // staged: no Get waits
	if n := q.nadds.Load(); n != 1 {
		t.Fatalf("%d adds staged, want 1", n)
	}
	q.Done("x")
	if n := q.nadds.Load(); n != 1 {
		t.Fatal("Done applied an unrelated staged add")
	}
	checkInvariants(t, q)
	mustGet(t, q, y)
	q.Done(y)
	if n := q.Len(); n != 0 {
		t.Fatalf("%d ready, want 0", n)
	}
}

// TestDoneAppliesRelatedStagedAdds: a Done applies the staged adds before anything else
// when the item was added again (staged or applied) during its processing, so the item is
// queued behind the adds made before the Done.
func TestDoneAppliesRelatedStagedAdds(t *testing.T) {
	for _, applied := range []bool{false, true} {
		q := New(Config[string]{})
		q.Add("x")
		mustGet(t, q, "x")
		q.Add("x") // added again during processing
		if applied {
			q.Len() // applies it: x is redirty
		}
		q.Add("y")
		q.Add("z")
		q.Done("x")
		checkInvariants(t, q)
		for _, want := range []string{"y", "z", "x"} {
			mustGet(t, q, want)
			q.Done(want)
		}
		if n := q.Len(); n != 0 {
			t.Fatalf("applied %v: %d ready at the end", applied, n)
		}
		q.ShutDown()
	}
}
