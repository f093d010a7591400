package deltafifo

// The conformance suite of the FIFO: the semantics of client-go's
// the_real_fifo_test.go and delta_fifo_test.go that the FIFO keeps, restated for its
// typed, batched API. The consumer applies every batch to the store given as
// KnownObjects, as an informer does (ctrlkit computes relist deletions and resyncs
// from that store when they are popped). Where ctrlkit deliberately differs, the test
// checks ctrlkit's documented behaviour and says so.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
)

// confBatch renders a batch: its kind, then its deltas (relist tombstones sorted, as
// their order is unspecified): "events: Added a1", "relist 7 initial: Deleted? b1,
// Replaced c2", "resync: Sync a1".
func confBatch(b Batch[*obj]) string {
	ds := describe(b.Deltas)
	var kind string
	switch {
	case b.Relist:
		kind = "relist " + b.ResourceVersion
		if b.InitialList {
			kind += " initial"
		}
		n := 0
		for n < len(ds) && strings.HasPrefix(ds[n], "Deleted? ") {
			n++
		}
		sort.Strings(ds[:n])
	case b.Resync:
		kind = "resync"
		sort.Strings(ds)
	default:
		kind = "events"
	}
	return kind + ": " + strings.Join(ds, ", ")
}

// confDrain pops every queued batch, applying each to s (if not nil), and renders
// them with confBatch.
func confDrain(t *testing.T, f *FIFO[*obj], s *store) []string {
	t.Helper()
	var out []string
	for {
		f.mu.Lock()
		n := len(f.units)
		f.mu.Unlock()
		if n == 0 {
			return out
		}
		b, _ := pop(t, f, s)
		out = append(out, confBatch(b))
	}
}

func confDiff(t *testing.T, what string, want, got []string) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// TestConformanceProducersKeepTheirOrder covers client-go TestRealFIFO_basic and
// TestDeltaFIFO_basic: two producers queue concurrently; every delta comes out once,
// and each producer's deltas in the order it queued them.
func TestConformanceProducersKeepTheirOrder(t *testing.T) {
	f := newFIFO(nil)
	const amount = 500
	var wg sync.WaitGroup
	for _, p := range []string{"a", "b"} {
		wg.Go(func() {
			for i := range amount {
				if err := f.Add(o(fmt.Sprint(p, i), i+1)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	last := map[byte]int{}
	for seen := 0; seen < 2*amount; {
		must(t, f.Pop(context.Background(), func(b Batch[*obj]) error {
			for _, d := range b.Deltas {
				p := d.Key[0]
				if d.Object.V != last[p]+1 {
					return fmt.Errorf("producer %c: got %d after %d", p, d.Object.V, last[p])
				}
				last[p] = d.Object.V
				seen++
			}
			return nil
		}))
	}
	wg.Wait()
	if f.Len() != 0 {
		t.Fatalf("Len = %d after every delta was popped", f.Len())
	}
}

// TestConformanceEveryDeltaInOrder covers client-go TestRealFIFO_addUpdate,
// TestRealFIFO_enqueueingNoLister, TestRealFIFO_enqueueingWithLister,
// TestRealFIFO_DeleteExistingNonPropagated and TestRealFIFO_detectLineJumpers (the
// RealFIFO side of their DeltaFIFO twins): nothing is coalesced per key, a deletion of
// a key nobody knows is queued like any other delta, and a key queued again after a pop
// does not jump ahead of the keys queued before it.
func TestConformanceEveryDeltaInOrder(t *testing.T) {
	s := newStore(o("foo", 5), o("bar", 6), o("baz", 7))
	f := newFIFO(s)
	must(t, f.Add(o("foo", 10)))
	must(t, f.Update(o("foo", 12)))
	must(t, f.Delete(o("foo", 15)))
	must(t, f.Update(o("bar", 15)))
	must(t, f.Add(o("qux", 17)))
	must(t, f.Delete(o("qux", 18)))
	must(t, f.Delete(o("nobody", 20))) // not known, not queued before: still queued
	if f.Len() != 7 {
		t.Fatalf("Len = %d, want all 7 deltas queued", f.Len())
	}
	confDiff(t, "batches", []string{
		"events: Added foo10, Updated foo12, Deleted foo15, Updated bar15, Added qux17, Deleted qux18, Deleted nobody20",
	}, confDrain(t, f, s))

	// Line jumpers: with a batch of at most one delta, foo queued again waits its turn.
	g := New(Config[*obj]{KeyFunc: objKey, MaxBatch: 1})
	for _, d := range []*obj{o("foo", 10), o("bar", 1), o("foo", 11), o("foo", 13), o("zab", 30)} {
		must(t, g.Add(d))
	}
	var got []string
	_, first := pop(t, g, nil)
	got = append(got, first...)
	must(t, g.Add(o("foo", 14)))
	for g.Len() > 0 {
		_, next := pop(t, g, nil)
		got = append(got, next...)
	}
	confDiff(t, "line jumpers", []string{"Added foo10", "Added bar1", "Added foo11", "Added foo13", "Added zab30", "Added foo14"}, got)
}

// TestConformanceReplaceAfterQueuedDelete covers client-go
// TestRealFIFO_replaceWithDeleteDeltaIn and TestDeltaFIFO_replaceWithDeleteDeltaIn
// (kubernetes issue 83810): an object deleted and then listed again by a relist is
// delivered by the relist, so that the informer sees it created again.
func TestConformanceReplaceAfterQueuedDelete(t *testing.T) {
	s := newStore(o("foo", 1))
	f := newFIFO(s)
	must(t, f.Delete(o("foo", 1)))
	must(t, f.Replace([]*obj{o("foo", 2)}, ""))
	confDiff(t, "batches", []string{
		"events: Deleted foo1",
		"relist : Replaced foo2",
	}, confDrain(t, f, s))
	if got, ok := s.Get("foo"); !ok || got.V != 2 {
		t.Fatalf("store after the relist holds %v, %v; want foo2", got, ok)
	}
}

// TestConformanceReplaceDeletesWhatOnlyTheQueueKnew covers client-go
// TestRealFIFOW_ReplaceMakesDeletionsForObjectsOnlyInQueue (and its DeltaFIFO twin):
// an object added by a queued delta and missing from a later relist gets exactly one
// tombstone carrying its newest state; one already deleted gets none.
func TestConformanceReplaceDeletesWhatOnlyTheQueueKnew(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  func(f *FIFO[*obj])
		want []string
	}{
		{"added then relisted without it", func(f *FIFO[*obj]) {
			must(t, f.Add(o("foo", 2)))
			must(t, f.Replace(nil, "0"))
		}, []string{"events: Added foo2", "relist 0: Deleted? foo2"}},
		{"added and deleted", func(f *FIFO[*obj]) {
			must(t, f.Add(o("foo", 2)))
			must(t, f.Delete(o("foo", 2)))
			must(t, f.Replace(nil, "0"))
		}, []string{"events: Added foo2, Deleted foo2", "relist 0: "}},
		{"listed twice, then not", func(f *FIFO[*obj]) {
			must(t, f.Add(o("foo", 2)))
			must(t, f.Replace([]*obj{o("foo", 2)}, "0"))
			must(t, f.Replace([]*obj{o("foo", 2)}, "0"))
			must(t, f.Replace(nil, "0"))
		}, []string{"events: Added foo2", "relist 0: Replaced foo2", "relist 0: Replaced foo2", "relist 0: Deleted? foo2"}},
		{"two relists without it", func(f *FIFO[*obj]) {
			must(t, f.Add(o("foo", 2)))
			must(t, f.Replace(nil, "0"))
			must(t, f.Replace(nil, "1"))
		}, []string{"events: Added foo2", "relist 0: Deleted? foo2", "relist 1: "}},
		{"added, deleted, added again", func(f *FIFO[*obj]) {
			must(t, f.Add(o("foo", 2)))
			must(t, f.Delete(o("foo", 2)))
			must(t, f.Add(o("foo", 3)))
			must(t, f.Replace(nil, "0"))
		}, []string{"events: Added foo2, Deleted foo2, Added foo3", "relist 0: Deleted? foo3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore()
			f := newFIFO(s)
			tc.ops(f)
			confDiff(t, "batches", tc.want, confDrain(t, f, s))
			if len(s.objs) != 0 {
				t.Errorf("store holds %v at the end, want nothing", s.objs)
			}
		})
	}
}

// TestConformanceReplaceMakesDeletions covers client-go
// TestRealFIFO_ReplaceMakesDeletions, TestRealFIFO_ReplaceMakesDeletionsReplaced,
// TestDeltaFIFO_ReplaceMakesDeletions and TestDeltaFIFO_ReplaceDeltaType: a relist
// deletes, with a tombstone holding the newest known state, every known key it does
// not list, before the Replaced deltas of what it lists (listed objects always come as
// Replaced). Both with a plain KnownObjects and with an AbsentFinder.
func TestConformanceReplaceMakesDeletions(t *testing.T) {
	known := func() []*obj { return []*obj{o("foo", 5), o("bar", 6), o("baz", 7)} }
	for _, tc := range []struct {
		name string
		ops  func(f *FIFO[*obj])
		want []string
	}{
		{"after a queued delete", func(f *FIFO[*obj]) {
			must(t, f.Delete(o("baz", 10)))
			must(t, f.Replace([]*obj{o("foo", 5)}, "0"))
		}, []string{"events: Deleted baz10", "relist 0: Deleted? bar6, Replaced foo5"}},
		{"listed with a new state", func(f *FIFO[*obj]) {
			must(t, f.Delete(o("baz", 10)))
			must(t, f.Replace([]*obj{o("foo", 6)}, "0"))
		}, []string{"events: Deleted baz10", "relist 0: Deleted? bar6, Replaced foo6"}},
		{"after a queued add", func(f *FIFO[*obj]) {
			must(t, f.Add(o("baz", 10)))
			must(t, f.Replace([]*obj{o("foo", 5)}, "0"))
		}, []string{"events: Added baz10", "relist 0: Deleted? bar6, Deleted? baz10, Replaced foo5"}},
		{"deleted and re-created in the queue", func(f *FIFO[*obj]) {
			must(t, f.Delete(o("bar", 6)))
			must(t, f.Add(o("bar", 100)))
			must(t, f.Replace([]*obj{o("foo", 5)}, "0"))
		}, []string{"events: Deleted bar6, Added bar100", "relist 0: Deleted? bar100, Deleted? baz7, Replaced foo5"}},
		{"two relists", func(f *FIFO[*obj]) {
			must(t, f.Replace([]*obj{o("bar", 100), o("foo", 5)}, "0"))
			must(t, f.Replace([]*obj{o("foo", 5)}, "0"))
		}, []string{"relist 0 initial: Deleted? baz7, Replaced bar100, Replaced foo5", "relist 0: Deleted? bar100, Replaced foo5"}},
		{"listed unchanged", func(f *FIFO[*obj]) {
			must(t, f.Replace(known(), "9"))
		}, []string{"relist 9 initial: Replaced foo5, Replaced bar6, Replaced baz7"}},
	} {
		for _, absent := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/absent=%v", tc.name, absent), func(t *testing.T) {
				s := newStore(known()...)
				var k KnownObjects[*obj] = s
				if absent {
					k = absentStore{s}
				}
				f := newFIFO(k)
				tc.ops(f)
				confDiff(t, "batches", tc.want, confDrain(t, f, s))
			})
		}
	}

	// Without KnownObjects there is nothing to delete from: a relist is its list only
	// (client-go's RealFIFO still tombstones what its own queue held; see the notes).
	f := newFIFO(nil)
	must(t, f.Add(o("baz", 10)))
	must(t, f.Replace([]*obj{o("foo", 5)}, "0"))
	confDiff(t, "batches without KnownObjects", []string{"events: Added baz10", "relist 0: Replaced foo5"}, confDrain(t, f, nil))
}

// TestConformanceResync covers client-go TestRealFIFO_Resync,
// TestRealFIFO_ResyncNonExisting, TestRealFIFO_UpdateResyncRace and their DeltaFIFO
// twins. A resync re-delivers each known object as Sync, never an object older than a
// delta queued for its key. ctrlkit computes the resync when it is popped: an update
// queued before the Resync call is applied first and then resynced in its new state
// (client-go skips the key instead; see the notes), and a deletion queued before it
// leaves nothing to resync.
func TestConformanceResync(t *testing.T) {
	s := newStore(o("foo", 5))
	f := newFIFO(s)
	must(t, f.Resync())
	confDiff(t, "plain resync", []string{"resync: Sync foo5"}, confDrain(t, f, s))

	s = newStore(o("foo", 5))
	f = newFIFO(s)
	must(t, f.Delete(o("foo", 10)))
	must(t, f.Resync())
	confDiff(t, "resync after a delete", []string{"events: Deleted foo10", "resync: "}, confDrain(t, f, s))

	s = newStore(o("foo", 5))
	f = newFIFO(s)
	must(t, f.Update(o("foo", 6)))
	must(t, f.Resync())
	confDiff(t, "resync after an update", []string{"events: Updated foo6", "resync: Sync foo6"}, confDrain(t, f, s))

	// An update queued after the Resync call, before the pop: the key is skipped, so
	// the resync cannot deliver foo5 after foo6 was queued.
	s = newStore(o("foo", 5), o("bar", 1))
	f = newFIFO(s)
	must(t, f.Resync())
	must(t, f.Update(o("foo", 6)))
	confDiff(t, "update racing a resync", []string{"resync: Sync bar1", "events: Updated foo6"}, confDrain(t, f, s))
}

// TestConformanceHasSynced covers client-go TestRealFIFO_HasSynced,
// TestDeltaFIFO_HasSynced, TestRealFIFO_HasSyncedCorrectOnDeletion and
// TestDeltaFIFO_HasSyncedCorrectOnDeletion. An ordinary delta first means there is no
// initial list to wait for. Otherwise the FIFO is synced once the first relist has
// been popped and processed: a relist is one batch, so one Pop does it, and an empty
// first relist counts only once popped too (client-go counts it at once; see the
// notes).
func TestConformanceHasSynced(t *testing.T) {
	popOnce := func(f *FIFO[*obj]) { pop(t, f, nil) }
	for i, tc := range []struct {
		ops  []func(f *FIFO[*obj])
		want bool
	}{
		{nil, false},
		{[]func(f *FIFO[*obj]){func(f *FIFO[*obj]) { must(t, f.Add(o("a", 1))) }}, true},
		{[]func(f *FIFO[*obj]){func(f *FIFO[*obj]) { must(t, f.Replace(nil, "0")) }}, false},
		{[]func(f *FIFO[*obj]){func(f *FIFO[*obj]) { must(t, f.Replace(nil, "0")) }, popOnce}, true},
		{[]func(f *FIFO[*obj]){func(f *FIFO[*obj]) { must(t, f.Replace([]*obj{o("a", 1), o("b", 2)}, "0")) }}, false},
		{[]func(f *FIFO[*obj]){func(f *FIFO[*obj]) { must(t, f.Replace([]*obj{o("a", 1), o("b", 2)}, "0")) }, popOnce}, true},
		{[]func(f *FIFO[*obj]){func(f *FIFO[*obj]) { must(t, f.Replace([]*obj{o("a", 1), o("a", 2)}, "0")) }, popOnce}, true},
		{[]func(f *FIFO[*obj]){
			func(f *FIFO[*obj]) { must(t, f.Replace([]*obj{o("a", 1)}, "0")) },
			func(f *FIFO[*obj]) { must(t, f.Add(o("b", 1))) }, // later deltas do not count
		}, false},
	} {
		f := newFIFO(newStore())
		for _, op := range tc.ops {
			op(f)
		}
		if got := f.HasSynced(); got != tc.want {
			t.Errorf("case %d: HasSynced = %v, want %v", i, got, tc.want)
		}
	}

	// A first relist that deletes known objects is one initial batch, tombstones
	// first; HasSynced turns true only after it was processed.
	s := newStore(o("foo", 5), o("bar", 6), o("baz", 7))
	f := newFIFO(s)
	must(t, f.Replace([]*obj{o("foo", 5)}, "0"))
	var during bool
	must(t, f.Pop(context.Background(), func(b Batch[*obj]) error {
		during = f.HasSynced()
		if got := confBatch(b); got != "relist 0 initial: Deleted? bar6, Deleted? baz7, Replaced foo5" {
			t.Errorf("initial batch = %s", got)
		}
		s.apply(b)
		return nil
	}))
	if during || !f.HasSynced() {
		t.Errorf("HasSynced during the initial batch = %v, after = %v; want false, true", during, f.HasSynced())
	}
}

// TestConformanceBatches covers client-go TestRealFIFO_PopMultipleDeltaInBatch,
// TestRealFIFO_ReplaceAtomic, TestRealFIFO_ReplaceAtomicPop and
// TestRealFIFO_ResyncAtomic. ctrlkit always delivers a relist as one batch (like
// client-go's atomic events) carrying its resourceVersion, never split by MaxBatch;
// each Replace and each Resync is a batch of its own, in call order, even when empty;
// ordinary deltas are batched up to MaxBatch, with repeated keys kept in one batch in
// their order (client-go splits there; see the notes).
func TestConformanceBatches(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxBatch int
		initial  []*obj
		ops      func(f *FIFO[*obj])
		want     []string
	}{
		{"unique items", 0, []*obj{o("foo1", 5), o("foo2", 5), o("foo3", 5)}, nil,
			[]string{"relist 123 initial: Replaced foo15, Replaced foo25, Replaced foo35"}},
		{"initial list then updates", 2, []*obj{o("foo1", 5), o("foo2", 5)}, func(f *FIFO[*obj]) {
			must(t, f.Update(o("foo3", 5)))
			must(t, f.Update(o("foo4", 5)))
		}, []string{"relist 123 initial: Replaced foo15, Replaced foo25", "events: Updated foo35, Updated foo45"}},
		{"repeated key", 0, []*obj{o("foo1", 5)}, func(f *FIFO[*obj]) {
			must(t, f.Update(o("foo1", 6)))
			must(t, f.Update(o("foo1", 7)))
		}, []string{"relist 123 initial: Replaced foo15", "events: Updated foo16, Updated foo17"}},
		{"relist never split", 2, []*obj{o("foo1", 5), o("foo2", 5), o("foo3", 5)}, func(f *FIFO[*obj]) {
			must(t, f.Update(o("foo4", 5)))
		}, []string{"relist 123 initial: Replaced foo15, Replaced foo25, Replaced foo35", "events: Updated foo45"}},
		{"events split by MaxBatch", 2, nil, func(f *FIFO[*obj]) {
			must(t, f.Update(o("foo1", 5)))
			must(t, f.Update(o("foo2", 5)))
			must(t, f.Update(o("foo3", 5)))
		}, []string{"relist 123 initial: ", "events: Updated foo15, Updated foo25", "events: Updated foo35"}},
		{"replaces in order", 0, nil, func(f *FIFO[*obj]) {
			must(t, f.Add(o("foo", 2)))
			must(t, f.Replace([]*obj{o("foo", 2)}, "10"))
			must(t, f.Replace([]*obj{o("foo", 2)}, "20"))
			must(t, f.Replace(nil, "56"))
		}, []string{"relist 123 initial: ", "events: Added foo2", "relist 10: Replaced foo2", "relist 20: Replaced foo2", "relist 56: Deleted? foo2"}},
		{"resync after an add", 0, nil, func(f *FIFO[*obj]) {
			must(t, f.Add(o("foo", 2)))
			must(t, f.Resync())
		}, []string{"relist 123 initial: ", "events: Added foo2", "resync: Sync foo2"}},
		{"resync of nothing", 0, nil, func(f *FIFO[*obj]) {
			must(t, f.Resync())
		}, []string{"relist 123 initial: ", "resync: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore()
			f := New(Config[*obj]{KeyFunc: objKey, KnownObjects: s, MaxBatch: tc.maxBatch})
			must(t, f.Replace(tc.initial, "123"))
			if tc.ops != nil {
				tc.ops(f)
			}
			confDiff(t, "batches", tc.want, confDrain(t, f, s))
		})
	}
}

// TestConformanceBadKeysRefused covers client-go TestRealFIFO_PopBrokenItemsInBatch
// and TestRealFIFO_KeyOf. ctrlkit refuses an object whose key cannot be computed when
// it is queued (client-go finds out when it pops it; see the notes), so a batch never
// holds one, and the objects queued around it flow as usual; every delta carries its
// key, tombstones included.
func TestConformanceBadKeysRefused(t *testing.T) {
	s := newStore(o("gone", 1))
	f := newFIFO(s)
	var ke *KeyError
	for _, x := range []*obj{o("ok1", 5), o("bad", 5), o("ok2", 5), o("bad", 6)} {
		err := f.Add(x)
		if x.Key == "bad" && (!errors.As(err, &ke) || !errors.Is(err, errKey)) {
			t.Errorf("Add of an unkeyable object = %v, want a KeyError", err)
		}
		if x.Key != "bad" && err != nil {
			t.Errorf("Add(%s) = %v", x.Key, err)
		}
	}
	if err := f.Replace([]*obj{o("ok1", 6), o("bad", 1)}, "3"); !errors.Is(err, errKey) {
		t.Errorf("Replace with an unkeyable object = %v", err)
	}
	must(t, f.Replace([]*obj{o("ok2", 6)}, "4"))
	var keys []string
	for f.Len() > 0 {
		b, _ := pop(t, f, s)
		for _, d := range b.Deltas {
			keys = append(keys, d.Type.String()+" "+d.Key)
		}
	}
	sort.Strings(keys) // the order of relist tombstones is unspecified
	confDiff(t, "delta keys", []string{"Added ok1", "Added ok2", "Deleted gone", "Deleted ok1", "Replaced ok2"}, keys)
}

// TestConformancePopUnblocksWhenClosed covers client-go
// TestRealFIFO_PopShouldUnblockWhenClosed and TestDeltaFIFO_PopShouldUnblockWhenClosed,
// and the shutdown interplay around them: every Pop waiting on an empty FIFO returns
// ErrClosed when it is closed; a batch in flight at Close completes and its Pop
// returns the function's result; later Pops, whatever their context, return ErrClosed;
// producers get ErrClosed and what was queued is dropped.
func TestConformancePopUnblocksWhenClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore(o("foo", 5))
		f := newFIFO(s)
		const jobs = 10
		errs := make(chan error, jobs)
		for range jobs {
			go func() { errs <- f.Pop(context.Background(), func(Batch[*obj]) error { return nil }) }()
		}
		synctest.Wait()
		f.Close()
		for range jobs {
			if err := <-errs; !errors.Is(err, ErrClosed) {
				t.Fatalf("waiting Pop after Close = %v, want ErrClosed", err)
			}
		}

		g := newFIFO(s)
		must(t, g.Add(o("a", 1)))
		must(t, g.Add(o("b", 1)))
		release := make(chan struct{})
		inFlight := make(chan error, 1)
		var delivered []string
		go func() {
			inFlight <- g.Pop(context.Background(), func(b Batch[*obj]) error {
				<-release
				delivered = describe(b.Deltas)
				return nil
			})
		}()
		synctest.Wait() // the batch is in flight
		must(t, g.Add(o("c", 1)))
		g.Close()
		close(release)
		if err := <-inFlight; err != nil {
			t.Fatalf("Pop of the batch in flight at Close = %v, want nil", err)
		}
		confDiff(t, "batch in flight at Close", []string{"Added a1", "Added b1"}, delivered)
		canceled, cancel := context.WithCancel(context.Background())
		cancel()
		for _, ctx := range []context.Context{context.Background(), canceled} {
			if err := g.Pop(ctx, func(Batch[*obj]) error { t.Error("a closed FIFO handed out a batch"); return nil }); !errors.Is(err, ErrClosed) {
				t.Errorf("Pop after Close = %v, want ErrClosed", err)
			}
		}
		if g.Len() != 0 {
			t.Errorf("Len after Close = %d, want 0 (queued deltas dropped)", g.Len())
		}
		for name, err := range map[string]error{
			"Add": g.Add(o("d", 1)), "Update": g.Update(o("d", 1)), "Delete": g.Delete(o("d", 1)),
			"Replace": g.Replace(nil, "1"), "Resync": g.Resync(),
		} {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close = %v, want ErrClosed", name, err)
			}
		}
	})
}

// TestConformanceFailedBatchIsRequeued is the counterpart of client-go's removed
// requeue option (TestDeltaFIFO_requeueOnPop, commented out in the RealFIFO tests):
// client-go's RealFIFO drops an item whose processing failed; ctrlkit puts the batch
// back in front, unchanged, and hands it out again (see the notes). Deltas queued
// after the failure come in a batch of their own, whether they were queued while the
// batch was in flight or after it failed.
func TestConformanceFailedBatchIsRequeued(t *testing.T) {
	s := newStore()
	f := newFIFO(s)
	must(t, f.Add(o("foo", 10)))
	must(t, f.Update(o("foo", 11)))
	boom := errors.New("apply failed")
	var failed string
	if err := f.Pop(context.Background(), func(b Batch[*obj]) error {
		failed = confBatch(b)
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Pop = %v, want the function's error", err)
	}
	must(t, f.Add(o("bar", 1)))
	confDiff(t, "batches after a failure", []string{failed, "events: Added bar1"}, confDrain(t, f, s))

	must(t, f.Add(o("baz", 1)))
	if err := f.Pop(context.Background(), func(Batch[*obj]) error {
		must(t, f.Add(o("during", 1)))
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Pop = %v, want the function's error", err)
	}
	must(t, f.Add(o("after", 1)))
	confDiff(t, "batches after a failure with deltas queued meanwhile",
		[]string{"events: Added baz1", "events: Added during1, Added after1"}, confDrain(t, f, s))
}

// TestConformanceFailedSpecialBatchesKeepTheirKind extends the requeue to relists and
// resyncs: a failed (or panicking) relist or resync batch is handed out again as the
// same kind of batch, with the same deltas and flags, even an empty resync, and a
// Resync call made meanwhile is a request of its own.
func TestConformanceFailedSpecialBatchesKeepTheirKind(t *testing.T) {
	boom := errors.New("apply failed")
	fail := func(t *testing.T, f *FIFO[*obj], panics bool) string {
		t.Helper()
		var got string
		fn := func(b Batch[*obj]) error {
			got = confBatch(b)
			if panics {
				panic("consumer bug")
			}
			return boom
		}
		func() {
			defer func() {
				if r := recover(); r != nil && !panics {
					panic(r)
				}
			}()
			if err := f.Pop(context.Background(), fn); !panics && !errors.Is(err, boom) {
				t.Fatalf("Pop = %v, want the function's error", err)
			}
		}()
		return got
	}
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprint("panics=", panics), func(t *testing.T) {
			s := newStore(o("a", 1), o("b", 1))
			f := newFIFO(s)
			must(t, f.Resync())
			first := fail(t, f, panics)
			if first != "resync: Sync a1, Sync b1" {
				t.Fatalf("resync batch = %s", first)
			}
			must(t, f.Resync())
			must(t, f.Add(o("c", 1)))
			confDiff(t, "after a failed resync", []string{first, "resync: Sync a1, Sync b1", "events: Added c1"}, confDrain(t, f, s))

			// An empty resync: every known key has a newer delta queued.
			must(t, f.Resync())
			must(t, f.Update(o("a", 2)))
			must(t, f.Update(o("b", 2)))
			must(t, f.Update(o("c", 2)))
			if got := fail(t, f, panics); got != "resync: " {
				t.Fatalf("empty resync batch = %q", got)
			}
			confDiff(t, "after a failed empty resync", []string{"resync: ", "events: Updated a2, Updated b2, Updated c2"}, confDrain(t, f, s))

			must(t, f.Replace([]*obj{o("a", 3)}, "9"))
			first = fail(t, f, panics)
			must(t, f.Add(o("d", 1)))
			confDiff(t, "after a failed relist", []string{first, "events: Added d1"}, confDrain(t, f, s))
			if first != "relist 9: Deleted? b2, Deleted? c2, Replaced a3" {
				t.Errorf("relist batch = %s", first)
			}
		})
	}
}
