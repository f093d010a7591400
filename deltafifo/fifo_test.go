package deltafifo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// obj is the test object: Key is its key, V tells versions apart.
type obj struct {
	Key string
	V   int
}

func o(key string, v int) *obj { return &obj{Key: key, V: v} }

var errKey = errors.New("no key for you")

func objKey(x *obj) (string, error) {
	if x.Key == "bad" {
		return "", errKey
	}
	return x.Key, nil
}

// store is a KnownObjects that the test consumer applies batches to.
type store struct {
	mu   sync.Mutex
	objs map[string]*obj
}

func newStore(objs ...*obj) *store {
	s := &store{objs: map[string]*obj{}}
	for _, x := range objs {
		s.objs[x.Key] = x
	}
	return s
}

func (s *store) ListKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.objs))
	for k := range s.objs {
		keys = append(keys, k)
	}
	return keys
}

func (s *store) Get(key string) (*obj, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x, ok := s.objs[key]
	return x, ok
}

// absentStore is a store that is also an AbsentFinder.
type absentStore struct{ *store }

func (s absentStore) Absent(keys []string) ([]string, []*obj) {
	s.mu.Lock()
	defer s.mu.Unlock()
	listed := map[string]bool{}
	for _, k := range keys {
		listed[k] = true
	}
	var absent []string
	var objs []*obj
	for k, x := range s.objs {
		if !listed[k] {
			absent = append(absent, k)
			objs = append(objs, x)
		}
	}
	return absent, objs
}

// apply applies a batch the way an informer would.
func (s *store) apply(b Batch[*obj]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range b.Deltas {
		if d.Type == Deleted {
			delete(s.objs, d.Key)
		} else {
			s.objs[d.Key] = d.Object
		}
	}
}

func newFIFO(known KnownObjects[*obj]) *FIFO[*obj] {
	return New(Config[*obj]{KeyFunc: objKey, KnownObjects: known})
}

// describe renders deltas compactly: "Added a1", "Deleted? b2" (final state unknown).
func describe(ds []Delta[*obj]) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		s := d.Type.String()
		if d.FinalStateUnknown {
			s += "?"
		}
		out[i] = fmt.Sprintf("%s %s%d", s, d.Key, d.Object.V)
	}
	return out
}

// pop pops one batch, applying it to s (if not nil), and returns it described.
func pop(t *testing.T, f *FIFO[*obj], s *store) (Batch[*obj], []string) {
	t.Helper()
	var got Batch[*obj]
	var desc []string
	err := f.Pop(context.Background(), func(b Batch[*obj]) error {
		if s != nil {
			s.apply(b)
		}
		got = b
		desc = describe(b.Deltas)
		got.Deltas = slices.Clone(b.Deltas)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, desc
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestArrivalOrderAcrossKeys(t *testing.T) {
	f := newFIFO(nil)
	must(t, f.Add(o("a", 1)))
	must(t, f.Add(o("b", 1)))
	must(t, f.Update(o("a", 2)))
	must(t, f.Delete(o("b", 1)))
	must(t, f.Add(o("c", 1)))
	if f.Len() != 5 {
		t.Fatalf("Len = %d, want 5", f.Len())
	}
	b, got := pop(t, f, nil)
	want := []string{"Added a1", "Added b1", "Updated a2", "Deleted b1", "Added c1"}
	if !slices.Equal(got, want) || b.Relist || b.InitialList {
		t.Fatalf("batch = %v (relist %v), want %v", got, b.Relist, want)
	}
	if f.Len() != 0 {
		t.Fatalf("Len after pop = %d", f.Len())
	}
}

func TestMaxBatch(t *testing.T) {
	f := New(Config[*obj]{KeyFunc: objKey, MaxBatch: 2})
	for i := range 5 {
		must(t, f.Add(o("k", i)))
	}
	var sizes []int
	var all []string
	for f.Len() > 0 {
		_, got := pop(t, f, nil)
		sizes = append(sizes, len(got))
		all = append(all, got...)
		if len(sizes) == 1 {
			must(t, f.Add(o("late", 1))) // appending meanwhile must not clobber anything
		}
	}
	if !slices.Equal(sizes, []int{2, 2, 2}) {
		t.Fatalf("batch sizes = %v, want 2, 2, 2", sizes)
	}
	if want := []string{"Added k0", "Added k1", "Added k2", "Added k3", "Added k4", "Added late1"}; !slices.Equal(all, want) {
		t.Fatalf("deltas = %v, want %v", all, want)
	}
}

func TestRelistIsOneBatchWithTombstones(t *testing.T) {
	s := newStore(o("a", 1), o("b", 1), o("c", 1))
	f := newFIFO(s)
	must(t, f.Replace([]*obj{o("c", 2), o("d", 1)}, "42"))
	if f.HasSynced() {
		t.Fatal("synced before the first relist was popped")
	}
	b, got := pop(t, f, s)
	if !b.Relist || b.ResourceVersion != "42" || !b.InitialList {
		t.Fatalf("batch relist=%v rv=%q initial=%v", b.Relist, b.ResourceVersion, b.InitialList)
	}
	sort.Strings(got[:2])
	if want := []string{"Deleted? a1", "Deleted? b1", "Replaced c2", "Replaced d1"}; !slices.Equal(got, want) {
		t.Fatalf("relist batch = %v, want %v", got, want)
	}
	if b.Deltas[0].Object != s.objs["a"] && b.Deltas[0].Object.V != 1 {
		t.Fatal("a tombstone does not carry the last known object")
	}
	if !f.HasSynced() {
		t.Fatal("not synced after the first relist was processed")
	}
	// The second relist is not the initial list.
	must(t, f.Replace(nil, "43"))
	b, got = pop(t, f, s)
	sort.Strings(got)
	if b.InitialList || !slices.Equal(got, []string{"Deleted? c2", "Deleted? d1"}) {
		t.Fatalf("second relist = %v initial=%v", got, b.InitialList)
	}
}

// TestRelistSeesEarlierDeltas queues deltas and then a relist without popping in
// between: the deletions must account for what the earlier deltas did.
func TestRelistSeesEarlierDeltas(t *testing.T) {
	s := newStore(o("gone", 1), o("deleted", 1))
	f := newFIFO(s)
	must(t, f.Add(o("new", 1)))        // added then missed: needs a tombstone
	must(t, f.Delete(o("deleted", 1))) // already deleted: no second deletion
	must(t, f.Add(o("kept", 1)))       // listed again
	must(t, f.Replace([]*obj{o("kept", 2)}, "9"))
	_, first := pop(t, f, s)
	if want := []string{"Added new1", "Deleted deleted1", "Added kept1"}; !slices.Equal(first, want) {
		t.Fatalf("first batch = %v, want %v", first, want)
	}
	_, got := pop(t, f, s)
	sort.Strings(got[:2])
	if want := []string{"Deleted? gone1", "Deleted? new1", "Replaced kept2"}; !slices.Equal(got, want) {
		t.Fatalf("relist = %v, want %v", got, want)
	}
}

func TestFailedBatchIsRequeued(t *testing.T) {
	s := newStore(o("old", 1))
	f := newFIFO(s)
	must(t, f.Replace([]*obj{o("a", 1)}, "5"))
	must(t, f.Add(o("b", 1)))
	boom := errors.New("boom")
	var first []string
	err := f.Pop(context.Background(), func(b Batch[*obj]) error {
		first = describe(b.Deltas)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Pop = %v, want the function's error", err)
	}
	if f.HasSynced() {
		t.Fatal("synced although the initial relist failed")
	}
	// The store changes meanwhile; the requeued relist keeps its computed deletions.
	s.objs["other"] = o("other", 1)
	b, again := pop(t, f, s)
	if !slices.Equal(again, first) || !b.Relist || b.ResourceVersion != "5" || !b.InitialList {
		t.Fatalf("requeued batch = %v (relist %v rv %q), want %v", again, b.Relist, b.ResourceVersion, first)
	}
	if !f.HasSynced() {
		t.Fatal("not synced after the relist succeeded")
	}
	if _, got := pop(t, f, s); !slices.Equal(got, []string{"Added b1"}) {
		t.Fatalf("then %v", got)
	}

	// A panicking function loses nothing either.
	must(t, f.Add(o("c", 1)))
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic was swallowed")
			}
		}()
		_ = f.Pop(context.Background(), func(Batch[*obj]) error { panic("handler bug") })
	}()
	if _, got := pop(t, f, s); !slices.Equal(got, []string{"Added c1"}) {
		t.Fatalf("after a panic: %v", got)
	}
}

func TestResync(t *testing.T) {
	s := newStore(o("a", 1), o("b", 1), o("c", 1))
	f := newFIFO(s)
	must(t, f.Resync())
	must(t, f.Resync()) // merged with the pending one
	must(t, f.Update(o("b", 2)))
	b, got := pop(t, f, s)
	sort.Strings(got)
	if want := []string{"Sync a1", "Sync c1"}; !slices.Equal(got, want) || !b.Resync {
		t.Fatalf("resync = %v (Resync %v), want %v (b has a newer delta queued)", got, b.Resync, want)
	}
	if b, got := pop(t, f, s); !slices.Equal(got, []string{"Updated b2"}) || b.Resync {
		t.Fatalf("then %v (Resync %v)", got, b.Resync)
	}
	if f.Len() != 0 {
		t.Fatal("the second Resync was not merged")
	}

	// A resync of an empty store is an empty batch.
	empty := newFIFO(newStore())
	must(t, empty.Resync())
	must(t, empty.Add(o("x", 1)))
	if b, got := pop(t, empty, nil); len(got) != 0 || b.Relist || !b.Resync {
		t.Fatalf("empty resync delivered %v (Relist %v, Resync %v); want no delta, marked Resync", got, b.Relist, b.Resync)
	}
	if _, got := pop(t, empty, nil); !slices.Equal(got, []string{"Added x1"}) {
		t.Fatalf("after an empty resync: %v", got)
	}
	// Without known objects Resync does nothing.
	none := newFIFO(nil)
	must(t, none.Resync())
	if none.Len() != 0 || len(none.units) != 0 {
		t.Fatal("Resync without KnownObjects queued something")
	}
}

func TestHasSyncedWithoutRelist(t *testing.T) {
	f := newFIFO(nil)
	if f.HasSynced() {
		t.Fatal("synced before anything happened")
	}
	must(t, f.Add(o("a", 1)))
	if !f.HasSynced() {
		t.Fatal("an ordinary delta first means there is no initial list to wait for")
	}
}

func TestBadInput(t *testing.T) {
	f := newFIFO(nil)
	for name, err := range map[string]error{
		"Add(nil)":    f.Add(nil),
		"Update(nil)": f.Update(nil),
		"Delete(nil)": f.Delete(nil),
	} {
		if !errors.Is(err, ErrNilObject) {
			t.Errorf("%s = %v", name, err)
		}
	}
	if err := f.Add(o("", 1)); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("keyless Add = %v", err)
	}
	var ke *KeyError
	if err := f.Add(o("bad", 1)); !errors.As(err, &ke) || !errors.Is(err, errKey) {
		t.Errorf("Add with failing key = %v", err)
	}
	err := f.Replace([]*obj{o("a", 1), o("bad", 1)}, "1")
	if !errors.Is(err, errKey) || !strings.Contains(err.Error(), "replace item 1") {
		t.Errorf("Replace with a bad item = %v", err)
	}
	if err := f.Replace([]*obj{nil}, "1"); !errors.Is(err, ErrNilObject) {
		t.Errorf("Replace with nil = %v", err)
	}
	if f.Len() != 0 || len(f.units) != 0 || f.HasSynced() {
		t.Fatal("bad input queued something")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("New without a key function for a non-meta type did not panic")
			}
		}()
		New(Config[*obj]{})
	}()
}

func TestPopWaitsAndHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFIFO(nil)
		var got atomic.Value
		done := make(chan error)
		go func() {
			done <- f.Pop(context.Background(), func(b Batch[*obj]) error {
				got.Store(describe(b.Deltas))
				return nil
			})
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("Pop returned from an empty FIFO")
		default:
		}
		must(t, f.Add(o("a", 1)))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if d := got.Load().([]string); !slices.Equal(d, []string{"Added a1"}) {
			t.Fatalf("popped %v", d)
		}

		ctx, cancel := context.WithCancel(context.Background())
		go func() { done <- f.Pop(ctx, func(Batch[*obj]) error { return nil }) }()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Pop after cancel = %v", err)
		}
	})
}

func TestCloseUnblocksEveryone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFIFO(nil)
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- f.Pop(context.Background(), func(Batch[*obj]) error { return nil }) }()
		}
		synctest.Wait()
		f.Close()
		for range 2 {
			if err := <-errs; !errors.Is(err, ErrClosed) {
				t.Fatalf("blocked Pop after Close = %v", err)
			}
		}
		if err := f.Add(o("a", 1)); !errors.Is(err, ErrClosed) {
			t.Fatalf("Add after Close = %v", err)
		}
		if err := f.Replace(nil, "1"); !errors.Is(err, ErrClosed) {
			t.Fatalf("Replace after Close = %v", err)
		}
		if err := f.Resync(); !errors.Is(err, ErrClosed) {
			t.Fatalf("Resync after Close = %v", err)
		}
		f.Close() // idempotent
	})
}

// TestProducersDoNotWaitForConsumer blocks the consumer inside its function and checks
// that producers still get through (synctest reports a deadlock otherwise), and that a
// second Pop waits for the first batch to finish.
func TestProducersDoNotWaitForConsumer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		f := newFIFO(s)
		must(t, f.Add(o("a", 1)))
		release := make(chan struct{})
		var order []string
		var mu sync.Mutex
		record := func(b Batch[*obj]) {
			mu.Lock()
			order = append(order, describe(b.Deltas)...)
			mu.Unlock()
		}
		first := make(chan error)
		go func() {
			first <- f.Pop(context.Background(), func(b Batch[*obj]) error {
				<-release
				record(b)
				return nil
			})
		}()
		synctest.Wait() // the consumer is now blocked inside fn
		must(t, f.Add(o("b", 1)))
		must(t, f.Replace([]*obj{o("c", 1)}, "1"))
		must(t, f.Resync())
		second := make(chan error)
		go func() {
			second <- f.Pop(context.Background(), func(b Batch[*obj]) error {
				record(b)
				return nil
			})
		}()
		synctest.Wait()
		mu.Lock()
		n := len(order)
		mu.Unlock()
		if n != 0 {
			t.Fatal("a second batch was processed while the first was in flight")
		}
		close(release)
		must(t, <-first)
		must(t, <-second)
		if want := []string{"Added a1", "Added b1"}; !slices.Equal(order, want) {
			t.Fatalf("order = %v, want %v", order, want)
		}
	})
}

// TestConcurrentProducersAndConsumer runs producers and a consumer together under the
// race detector and checks that each producer's deltas arrive in its own order.
func TestConcurrentProducersAndConsumer(t *testing.T) {
	f := newFIFO(nil)
	const producers, each = 3, 2000
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				if err := f.Add(o(fmt.Sprint("p", p), i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	next := make([]int, producers)
	for seen := 0; seen < producers*each; {
		err := f.Pop(context.Background(), func(b Batch[*obj]) error {
			for _, d := range b.Deltas {
				p := int(d.Key[1] - '0')
				if d.Object.V != next[p] {
					return fmt.Errorf("producer %d: got %d, want %d", p, d.Object.V, next[p])
				}
				next[p]++
				seen++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

// panicky is a KnownObjects whose ListKeys panics once.
type panicky struct {
	*store
	armed bool
}

func (p *panicky) ListKeys() []string {
	if p.armed {
		p.armed = false
		panic("store bug")
	}
	return p.store.ListKeys()
}

// TestKnownObjectsPanicLosesNothing: a panic while a relist's deletions are computed
// leaves the relist queued and the FIFO usable.
func TestKnownObjectsPanicLosesNothing(t *testing.T) {
	s := &panicky{store: newStore(o("gone", 1)), armed: true}
	f := newFIFO(s)
	must(t, f.Replace([]*obj{o("a", 1)}, "3"))
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		_ = f.Pop(context.Background(), func(Batch[*obj]) error { return nil })
	}()
	b, got := pop(t, f, s.store)
	if want := []string{"Deleted? gone1", "Replaced a1"}; !slices.Equal(got, want) || !b.InitialList {
		t.Fatalf("after the panic: %v (initial %v), want %v", got, b.InitialList, want)
	}
}
