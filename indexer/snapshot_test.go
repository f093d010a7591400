package indexer

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// sameArray reports whether a and b share their first element's address: the same
// backing array.
func sameArray[T any](a, b []T) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
}

func mustByIndex(t *testing.T, x *Indexer[*item], name, value string) []*item {
	t.Helper()
	got, err := x.ByIndex(name, value)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestByIndexSnapshot checks the snapshot contract: repeated calls share one clipped
// slice without allocating, a write to the value's bucket (and only such a write)
// replaces it, and a slice already returned never changes.
func TestByIndexSnapshot(t *testing.T) {
	x := newItemIndexer()
	a, b, c := &item{Key: "a", Group: "g1"}, &item{Key: "b", Group: "g1"}, &item{Key: "c", Group: "g2"}
	for _, it := range []*item{a, b, c} {
		if err := x.Add(it); err != nil {
			t.Fatal(err)
		}
	}
	first := mustByIndex(t, x, "group", "g1")
	if len(first) != 2 || cap(first) != len(first) {
		t.Fatalf("ByIndex(g1) = len %d cap %d; want 2 objects, clipped", len(first), cap(first))
	}
	if again := mustByIndex(t, x, "group", "g1"); !sameArray(first, again) {
		t.Fatal("a repeated ByIndex of an unchanged value built a new slice")
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = x.ByIndex("group", "g1") }); n != 0 {
		t.Fatalf("repeated ByIndex allocates %v times, want 0", n)
	}
	if got := mustByIndex(t, x, "group", "none"); got != nil {
		t.Fatalf("ByIndex of an unknown value = %v, want nil", got)
	}

	// Appending to the result copies: the store does not see it.
	grown := append(first, &item{Key: "intruder", Group: "g1"})
	if sameArray(grown, first) {
		t.Fatal("append to a snapshot wrote into its array")
	}
	if got := mustByIndex(t, x, "group", "g1"); len(got) != 2 {
		t.Fatalf("after a caller's append ByIndex(g1) has %d objects", len(got))
	}

	// A write elsewhere keeps the snapshot.
	if err := x.Update(&item{Key: "c", Group: "g2", Tags: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	if got := mustByIndex(t, x, "group", "g1"); !sameArray(first, got) {
		t.Fatal("an update of another value dropped the g1 snapshot")
	}

	// Updating a member in place (same value) replaces the snapshot; the old one
	// still shows the old state.
	a2 := &item{Key: "a", Group: "g1", Tags: []string{"new"}}
	if err := x.Update(a2); err != nil {
		t.Fatal(err)
	}
	second := mustByIndex(t, x, "group", "g1")
	if sameArray(first, second) || !slices.Contains(second, a2) || slices.Contains(second, a) {
		t.Fatalf("after updating a in g1: %v, want a new snapshot holding the new a", keysOf(second))
	}
	if !slices.Contains(first, a) || slices.Contains(first, a2) || len(first) != 2 {
		t.Fatal("a snapshot already returned changed")
	}

	// Moving out, moving in, deleting, replacing: each is seen.
	steps := []struct {
		desc string
		do   func() error
		want []string
	}{
		{"move b to g2", func() error { return x.Update(&item{Key: "b", Group: "g2"}) }, []string{"a"}},
		{"move c to g1", func() error { return x.Update(&item{Key: "c", Group: "g1"}) }, []string{"a", "c"}},
		{"delete a", func() error { return x.DeleteKey("a") }, []string{"c"}},
		{"replace", func() error {
			return x.Replace([]*item{{Key: "c", Group: "g1"}, {Key: "d", Group: "g1"}, {Key: "e", Group: "g3"}})
		}, []string{"c", "d"}},
		{"add an index", func() error { return x.AddIndexes(Indexers[*item]{"ntags": lateIndexers()["ntags"]}) }, []string{"c", "d"}},
	}
	prev := mustByIndex(t, x, "group", "g1")
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.desc, err)
		}
		got := mustByIndex(t, x, "group", "g1")
		if k := sorted(keysOf(got)); !slices.Equal(k, st.want) {
			t.Fatalf("after %s: ByIndex(g1) = %v, want %v", st.desc, k, st.want)
		}
		if st.desc != "add an index" && sameArray(prev, got) {
			t.Fatalf("after %s: the old snapshot was returned", st.desc)
		}
		prev = got
		mustValidate(t, x)
	}
	// The last member leaving forgets the value and its snapshot.
	if err := x.Replace(nil); err != nil {
		t.Fatal(err)
	}
	if got := mustByIndex(t, x, "group", "g1"); got != nil {
		t.Fatalf("ByIndex of an emptied value = %v", keysOf(got))
	}

	// AppendByIndex fills the caller's slice, from the snapshot when there is one.
	_ = x.Add(&item{Key: "f", Group: "g4"})
	snap := mustByIndex(t, x, "group", "g4")
	buf := make([]*item, 0, 4)
	out, err := x.AppendByIndex(buf, "group", "g4")
	if err != nil || len(out) != 1 || out[0] != snap[0] || !sameArray(out, buf[:1]) {
		t.Fatalf("AppendByIndex = %v, %v; want f in the caller's buffer", keysOf(out), err)
	}
	if _, err := x.ByIndex("nope", "x"); !errors.Is(err, ErrUnknownIndex) {
		t.Fatalf("ByIndex of an unknown index: %v", err)
	}
}

// TestByIndexSnapshotConcurrent runs readers that share snapshots with writers that
// move objects in and out of the read values, under the race detector. Every result
// must be one consistent state of its value, and no result may change after it was
// returned.
func TestByIndexSnapshotConcurrent(t *testing.T) {
	x := newItemIndexer()
	const keys = 40
	for i := range keys {
		_ = x.Add(&item{Key: fmt.Sprint("k", i), Group: fmt.Sprint("g", i%4)})
	}
	type sample struct {
		value string
		got   []*item
		copy  []*item
	}
	var mu sync.Mutex
	var samples []sample
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := range 3000 {
				k := fmt.Sprint("k", (i*7+w)%keys)
				switch i % 5 {
				case 0, 1, 2:
					_ = x.Update(&item{Key: k, Group: fmt.Sprint("g", (i+w)%4)})
				case 3:
					_ = x.DeleteKey(k)
				case 4:
					_ = x.Add(&item{Key: k, Group: "g0"})
				}
			}
		})
	}
	for r := range 4 {
		wg.Go(func() {
			for i := range 3000 {
				v := fmt.Sprint("g", (i+r)%4)
				got, err := x.ByIndex("group", v)
				if err != nil {
					t.Error(err)
					return
				}
				seen := map[string]bool{}
				for _, o := range got {
					if o.Group != v || seen[o.Key] {
						t.Errorf("ByIndex(%s) holds %+v (duplicate: %v)", v, o, seen[o.Key])
						return
					}
					seen[o.Key] = true
				}
				if i%50 == 0 {
					mu.Lock()
					samples = append(samples, sample{v, got, slices.Clone(got)})
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, s := range samples {
		if !slices.Equal(s.got, s.copy) {
			t.Fatalf("a ByIndex(%s) result changed after it was returned", s.value)
		}
	}
	mustValidate(t, x)

	// Readers that build the same snapshot at once all end up with the one published.
	_ = x.Update(&item{Key: "k0", Group: "g0", Tags: []string{"fresh"}})
	start := make(chan struct{})
	results := make([][]*item, 8)
	for i := range results {
		wg.Go(func() {
			<-start
			results[i], _ = x.ByIndex("group", "g0")
		})
	}
	close(start)
	wg.Wait()
	for i, r := range results {
		if !sameArray(r, results[0]) {
			t.Fatalf("reader %d got its own snapshot of g0, not the shared one", i)
		}
	}
}

// TestMutationDetectorSnapshots checks that the detector reports a caller that
// changed a ByIndex snapshot, whether the snapshot is still cached or was dropped by
// a later write or a Replace, and does not report untouched ones.
func TestMutationDetectorSnapshots(t *testing.T) {
	newX := func() *Indexer[*item] {
		x := New(Config[*item]{
			KeyFunc:         func(it *item) (string, error) { return it.Key, nil },
			Indexers:        itemIndexers(),
			DetectMutations: true,
			DeepCopy: func(it *item) *item {
				c := *it
				c.Tags = slices.Clone(it.Tags)
				return &c
			},
		})
		for i := range 6 {
			_ = x.Add(&item{Key: fmt.Sprint("k", i), Group: fmt.Sprint("g", i%2), Tags: []string{"t"}})
		}
		return x
	}
	wantSnaps := func(t *testing.T, x *Indexer[*item], want ...IndexValue) {
		t.Helper()
		err := x.CheckMutations()
		var me *MutationError
		if len(want) == 0 {
			if err != nil {
				t.Fatalf("CheckMutations = %v, want nil", err)
			}
			return
		}
		if !errors.Is(err, ErrMutation) || !errors.As(err, &me) || !slices.Equal(me.Snapshots, want) || len(me.Keys) != 0 {
			t.Fatalf("CheckMutations = %v, want snapshots %v", err, want)
		}
	}
	g0 := IndexValue{Index: "group", Value: "g0"}

	t.Run("untouched", func(t *testing.T) {
		x := newX()
		got := mustByIndex(t, x, "group", "g0")
		sortedCopy := slices.Clone(got)
		slices.SortFunc(sortedCopy, func(a, b *item) int { return -compareKeys(a, b) })
		_ = append(got, &item{Key: "x"}) // copies: cap == len
		_ = x.Update(&item{Key: "k0", Group: "g0"})
		mustByIndex(t, x, "tags", "t")
		wantSnaps(t, x)
	})
	t.Run("reordered", func(t *testing.T) {
		x := newX()
		got := mustByIndex(t, x, "group", "g0")
		got[0], got[1] = got[1], got[0]
		wantSnaps(t, x, g0)
		// Reported once; the snapshot is still the changed one, so it is reported
		// again while it is cached.
		wantSnaps(t, x, g0)
	})
	t.Run("overwritten", func(t *testing.T) {
		x := newX()
		got := mustByIndex(t, x, "tags", "t")
		got[2] = &item{Key: "k2", Tags: []string{"t"}}
		wantSnaps(t, x, IndexValue{Index: "tags", Value: "t"})
	})
	t.Run("filtered in place then dropped by a write", func(t *testing.T) {
		x := newX()
		got := mustByIndex(t, x, "group", "g0")
		drop, kept := got[0].Key, got[:0]
		for _, o := range got {
			if o.Key != drop {
				kept = append(kept, o)
			}
		}
		_ = kept
		// The write drops the snapshot; the detector checks it as it goes.
		_ = x.Update(&item{Key: "k0", Group: "g1"})
		if fresh := mustByIndex(t, x, "group", "g0"); sameArray(fresh, got) {
			t.Fatal("the write did not drop the snapshot")
		}
		wantSnaps(t, x, g0)
		wantSnaps(t, x)
	})
	t.Run("dropped by Replace", func(t *testing.T) {
		x := newX()
		got := mustByIndex(t, x, "group", "g1")
		got[0] = nil
		// Replacing 6 objects by 20 new ones builds a new store aside.
		list := make([]*item, 20)
		for i := range list {
			list[i] = &item{Key: fmt.Sprint("n", i), Group: "g1"}
		}
		if err := x.Replace(list); err != nil {
			t.Fatal(err)
		}
		wantSnaps(t, x, IndexValue{Index: "group", Value: "g1"})
	})
	t.Run("detector off", func(t *testing.T) {
		x := newItemIndexer()
		_ = x.Add(&item{Key: "a", Group: "g"})
		got := mustByIndex(t, x, "group", "g")
		got[0] = nil
		if err := x.CheckMutations(); err != nil {
			t.Fatalf("detector off: %v", err)
		}
	})
}

func compareKeys(a, b *item) int {
	switch {
	case a.Key < b.Key:
		return -1
	case a.Key > b.Key:
		return 1
	}
	return 0
}

// TestListerNamespaceListIsFresh checks that the per-namespace listing, which reads
// the namespace's ByIndex snapshot, returns a slice of the caller's: changing or
// filtering it leaves the snapshot and later listings intact.
func TestListerNamespaceListIsFresh(t *testing.T) {
	x := New(Config[*corev1.ConfigMap]{
		Indexers:        Indexers[*corev1.ConfigMap]{NamespaceIndexName: NamespaceIndex[*corev1.ConfigMap]},
		DetectMutations: true,
	})
	for i := range 6 {
		_ = x.Add(cm("ns", fmt.Sprint("c", i), map[string]string{"odd": fmt.Sprint(i%2 == 1)}))
	}
	l := NewLister(x)
	snap, _ := x.ByIndex(NamespaceIndexName, "ns")
	want := slices.Clone(snap)
	all, err := l.Namespace("ns").List(labels.Everything())
	if err != nil || len(all) != 6 || sameArray(all, snap) {
		t.Fatalf("Namespace(ns).List = %d objects, %v, shared with the snapshot: %v", len(all), err, sameArray(all, snap))
	}
	all[0], all[5] = all[5], all[0]
	odd, err := l.Namespace("ns").List(labels.SelectorFromSet(labels.Set{"odd": "true"}))
	if err != nil || len(odd) != 3 {
		t.Fatalf("Namespace(ns).List(odd) = %d objects, %v", len(odd), err)
	}
	if !slices.Equal(snap, want) {
		t.Fatal("listing changed the namespace's snapshot")
	}
	if got, _ := x.ByIndex(NamespaceIndexName, "ns"); !sameArray(got, snap) {
		t.Fatal("listing dropped the namespace's snapshot")
	}
	if err := x.CheckMutations(); err != nil {
		t.Fatalf("CheckMutations after listing: %v", err)
	}
}
