package workqueue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestAgingTwoLevels: with the high level never running dry, every low item is handed out
// after exactly AgingLimit high ones.
func TestAgingTwoLevels(t *testing.T) {
	const aging = 8
	q := New(Config[string]{AgingLimit: aging})
	defer q.ShutDown()
	for i := range 1000 {
		q.AddWithOptions(fmt.Sprintf("high-%d", i), AddOptions{Priority: 1})
	}
	for i := range 3 {
		q.AddWithOptions(fmt.Sprintf("low-%d", i), AddOptions{Priority: 0})
	}
	var lows []int
	for n := range 40 {
		item, _ := q.Get(doneCtx)
		q.Done(item)
		if strings.HasPrefix(item, "low") {
			lows = append(lows, n)
		}
	}
	want := []int{aging, 2*aging + 1, 3*aging + 2}
	if fmt.Sprint(lows) != fmt.Sprint(want) {
		t.Fatalf("low items handed out at %v, want %v", lows, want)
	}
	checkInvariants(t, q)
}

// TestStarvationBound: a steady flow of high-priority items (one added before every Get)
// cannot starve low-priority ones: the k-th low item (from 0) is handed out within
// (k+1)(A+L) handouts, L = 2 levels, as the package doc states.
func TestStarvationBound(t *testing.T) {
	for _, aging := range []int{1, 5, DefaultAgingLimit} {
		t.Run(fmt.Sprint(aging), func(t *testing.T) {
			q := New(Config[int]{AgingLimit: aging})
			defer q.ShutDown()
			const lows = 200
			for i := range lows {
				q.AddWithOptions(-1-i, AddOptions{Priority: -5}) // low items are negative
			}
			next, k := 0, 0
			for n := 1; k < lows; n++ {
				if bound := (k + 1) * (aging + 2); n > bound {
					t.Fatalf("low item %d not handed out within %d handouts", k, bound)
				}
				q.AddWithOptions(next, AddOptions{Priority: 5})
				next++
				item, _ := q.Get(doneCtx)
				q.Done(item)
				if item < 0 {
					k++
				}
			}
			checkInvariants(t, q)
		})
	}
}

// TestAgingBoundRandom drives random adds over several priorities and checks, at every
// handout, the documented bound (a waiting level sees at most A+L-1 handouts of other
// levels between its own) and that without an overdue level the highest priority is served.
func TestAgingBoundRandom(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 42))
		aging := 1 + r.IntN(10)
		levels := 2 + r.IntN(4)
		q := New(Config[string]{AgingLimit: aging, FairnessKey: byPrefix})
		waiting := make([]int, levels) // items waiting per priority
		gap := make([]int, levels)     // handouts of other levels since served or non-empty
		maxGap, next := 0, 0
		for range 3000 {
			for range r.IntN(3) {
				// The top priority is fed most, so lower ones would starve without aging.
				p := levels - 1
				if r.IntN(3) == 0 {
					p = r.IntN(levels)
				}
				if waiting[p] == 0 {
					gap[p] = 0
				}
				waiting[p]++
				q.AddWithOptions(fmt.Sprintf("k%d/%d/%d", r.IntN(3), p, next), AddOptions{Priority: p})
				next++
			}
			if q.Len() == 0 {
				continue
			}
			item, err := q.Get(doneCtx)
			if err != nil {
				t.Fatal(err)
			}
			q.Done(item)
			var p int
			fmt.Sscanf(strings.Split(item, "/")[1], "%d", &p)
			overdue, highest := false, -1
			for l := range levels {
				if waiting[l] > 0 {
					highest = l
					overdue = overdue || gap[l] >= aging
				}
			}
			if !overdue && p != highest {
				t.Fatalf("seed %d: served priority %d, highest waiting %d, none overdue", seed, p, highest)
			}
			waiting[p]--
			gap[p] = 0
			for l := range levels {
				if l != p && waiting[l] > 0 {
					gap[l]++
					maxGap = max(maxGap, gap[l])
					if gap[l] > aging+levels-1 {
						t.Fatalf("seed %d: priority %d waited through %d handouts, bound %d", seed, l, gap[l], aging+levels-1)
					}
				}
			}
		}
		if maxGap < aging {
			t.Fatalf("seed %d: aging never exercised (max gap %d < %d)", seed, maxGap, aging)
		}
		checkInvariants(t, q)
		q.ShutDown()
	}
}

// TestFairnessOneTurnPerKey: a key with 100,000 waiting items delays another key's single
// item by one handout; with many busy keys, a new key waits at most one turn per key.
func TestFairnessOneTurnPerKey(t *testing.T) {
	q := New(Config[string]{FairnessKey: byPrefix})
	defer q.ShutDown()
	for i := range 100_000 {
		q.Add(fmt.Sprintf("big/%d", i))
	}
	q.Add("small/0")
	first, _ := q.Get(doneCtx)
	second, _ := q.Get(doneCtx)
	if first != "big/0" || second != "small/0" {
		t.Fatalf("handed out %q, %q; want big/0 then small/0", first, second)
	}
	q.Done(first)
	q.Done(second)

	const keys = 10
	for k := range keys {
		for i := range 1000 {
			q.Add(fmt.Sprintf("key%d/%d", k, i))
		}
	}
	for range 37 { // rotate the round to an arbitrary point
		item, _ := q.Get(doneCtx)
		q.Done(item)
	}
	q.Add("late/0")
	active := keys + 1 // "big" still has items
	for n := 0; ; n++ {
		item, _ := q.Get(doneCtx)
		q.Done(item)
		if item == "late/0" {
			break
		}
		if n >= active {
			t.Fatalf("late/0 not handed out within %d handouts (one turn per active key)", active)
		}
	}
	// Keys take strict turns: any window of `active` handouts holds each key once.
	seen := map[string]bool{}
	for range active {
		item, _ := q.Get(doneCtx)
		q.Done(item)
		if k := byPrefix(item); seen[k] {
			t.Fatalf("key %s served twice in one round", k)
		} else {
			seen[k] = true
		}
	}
	checkInvariants(t, q)
}

// TestFairnessReaddedItemKeepsItsKey: an item added again while processing is re-queued
// in its key's lane, behind that key's waiting items.
func TestFairnessReaddedItemKeepsItsKey(t *testing.T) {
	q := New(Config[string]{FairnessKey: byPrefix})
	defer q.ShutDown()
	q.Add("a/1")
	item, _ := q.Get(context.Background())
	q.Add("a/1") // re-added while processing
	q.Add("a/2")
	q.Add("b/1")
	q.Done(item) // a/1 joins lane a behind a/2
	want := []string{"a/2", "b/1", "a/1"}
	for _, w := range want {
		got, _ := q.Get(doneCtx)
		if got != w {
			t.Fatalf("Get = %q, want %q", got, w)
		}
		q.Done(got)
	}
	checkInvariants(t, q)
}

// TestLaneReusedForAnotherKey: a lane freed and taken again by another (priority,
// fairness key) pair is not found for its former pair, though it was the last lane
// used; items keep their priority and their key's turn.
func TestLaneReusedForAnotherKey(t *testing.T) {
	q := New(Config[string]{FairnessKey: byPrefix})
	defer q.ShutDown()
	q.AddWithOptions("x/1", AddOptions{Priority: 1})
	mustGet(t, q, "x/1")
	q.Done("x/1") // lane (1, x) is freed
	q.AddWithOptions("y/1", AddOptions{Priority: 2})
	q.AddWithOptions("x/2", AddOptions{Priority: 1})
	q.AddWithOptions("y/2", AddOptions{Priority: 2})
	q.AddWithOptions("z/1", AddOptions{Priority: 3})
	q.AddWithOptions("x/3", AddOptions{Priority: 1})
	for _, want := range []string{"z/1", "y/1", "y/2", "x/2", "x/3"} {
		mustGet(t, q, want)
		q.Done(want)
	}
	checkInvariants(t, q)
}

// TestManyPrioritiesFollowModel hands out items over hundreds of priority levels at
// once (a priority drawn from a wide range per item, some shared), with adds that raise
// the priority of a waiting item (which may empty a level that is not on top), and
// checks every handout against a model of the documented order: the highest priority,
// unless the level that has waited longest (ties to the higher priority) has waited
// through AgingLimit handouts of other levels; FIFO within a level.
func TestManyPrioritiesFollowModel(t *testing.T) {
	type mlevel struct {
		items []int
		since uint64
	}
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 5647))
		aging := 1 + r.IntN(200)
		spread := []int{3, 8, 50, 1000, 1 << 40}[seed%5] // few shared levels .. all distinct
		// Odd seeds hand out more than they add: the queue keeps running down to one
		// level or none, and levels empty and fill again.
		adds := 5 - 2*int(seed%2)
		q := New(Config[int]{AgingLimit: aging})
		levels := map[int]*mlevel{}
		prioOf := map[int]int{} // waiting items
		var handouts uint64
		push := func(item, p int) {
			lv := levels[p]
			if lv == nil {
				lv = &mlevel{since: handouts}
				levels[p] = lv
			}
			lv.items = append(lv.items, item)
			prioOf[item] = p
		}
		next, gets := 0, 0
		for step := range 20000 {
			switch k := r.IntN(10); {
			case k < adds || len(prioOf) == 0: // a new item
				p := int(r.Int64N(int64(spread)))
				q.AddWithOptions(next, AddOptions{Priority: p})
				push(next, p)
				next++
			case k < adds+1: // a waiting item added again, at a higher priority or not
				item := next - 1 - r.IntN(min(next, 50))
				old, ok := prioOf[item]
				p := old + r.IntN(3) - 1
				if !ok {
					continue
				}
				q.AddWithOptions(item, AddOptions{Priority: p})
				if p > old {
					lv := levels[old]
					for i, it := range lv.items {
						if it == item {
							lv.items = append(lv.items[:i], lv.items[i+1:]...)
							break
						}
					}
					if len(lv.items) == 0 {
						delete(levels, old)
					}
					push(item, p)
				}
			default: // a handout
				best, oldest := 0, 0
				first := true
				for p, lv := range levels {
					if first || p > best {
						best = p
					}
					if o := levels[oldest]; first || lv.since < o.since || lv.since == o.since && p > oldest {
						oldest = p
					}
					first = false
				}
				if len(levels) > 1 && handouts-levels[oldest].since >= uint64(aging) {
					best = oldest
				}
				lv := levels[best]
				want := lv.items[0]
				lv.items = lv.items[1:]
				delete(prioOf, want)
				handouts++
				if len(lv.items) == 0 {
					delete(levels, best)
				} else {
					lv.since = handouts
				}
				item, err := q.Get(doneCtx)
				if err != nil {
					t.Fatal(err)
				}
				if item != want {
					t.Fatalf("seed %d, step %d: handed out %d, want %d (priority %d; %d levels)", seed, step, item, want, best, len(levels))
				}
				q.Done(item)
				gets++
			}
			if step%997 == 0 {
				checkInvariants(t, q)
			}
		}
		if adds == 5 && spread > 50 && len(levels) < 50 {
			t.Fatalf("seed %d: only %d levels at the end", seed, len(levels))
		}
		checkInvariants(t, q)
		q.ShutDown()
	}
}
