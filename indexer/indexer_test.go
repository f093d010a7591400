package indexer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func cm(ns, name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
}

func mustValidate(t *testing.T, x *Indexer[*item]) {
	t.Helper()
	if err := x.validate(); err != nil {
		t.Fatal(err)
	}
}

func mustIndexKeys(t *testing.T, x *Indexer[*item], name, value string) []string {
	t.Helper()
	keys, err := x.IndexKeys(name, value)
	if err != nil {
		t.Fatal(err)
	}
	return sorted(keys)
}

func TestStoreAndRead(t *testing.T) {
	x := newItemIndexer()
	a := &item{Key: "a", Group: "g1", Tags: []string{"x", "y", "x"}}
	b := &item{Key: "b", Group: "g1"}
	for _, it := range []*item{a, b} {
		if err := x.Add(it); err != nil {
			t.Fatal(err)
		}
	}
	if got, ok := x.Get("a"); !ok || got != a {
		t.Fatalf("Get(a) = %v, %v; want the stored pointer", got, ok)
	}
	if got := mustIndexKeys(t, x, "group", "g1"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("group g1 = %v", got)
	}
	if got := mustIndexKeys(t, x, "tags", "x"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("repeated tag x indexed as %v, want [a] once", got)
	}

	// Moving a to another group and other tags updates every index.
	a2 := &item{Key: "a", Group: "g2", Tags: []string{"z"}}
	if err := x.Update(a2); err != nil {
		t.Fatal(err)
	}
	if got := mustIndexKeys(t, x, "group", "g1"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("group g1 after move = %v", got)
	}
	vals, _ := x.IndexValues("tags")
	if !slices.Equal(sorted(vals), []string{"z"}) {
		t.Fatalf("tag values after move = %v; emptied values must be forgotten", vals)
	}
	if got, _ := x.ByIndex("group", "g2"); len(got) != 1 || got[0] != a2 {
		t.Fatalf("ByIndex(group, g2) = %v", got)
	}

	if err := x.Delete(&item{Key: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := x.DeleteKey("missing"); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}
	if got := sorted(x.ListKeys()); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("ListKeys = %v", got)
	}
	vals, _ = x.IndexValues("group")
	if !slices.Equal(vals, []string{"g2"}) {
		t.Fatalf("group values = %v", vals)
	}
	if got, ok, err := x.GetByObject(&item{Key: "a"}); err != nil || !ok || got != a2 {
		t.Fatalf("GetByObject = %v, %v, %v", got, ok, err)
	}
	mustValidate(t, x)
}

func TestIndexFailureLeavesStoreUnchanged(t *testing.T) {
	x := newItemIndexer()
	old := &item{Key: "a", Group: "g1", Tags: []string{"t"}}
	if err := x.Add(old); err != nil {
		t.Fatal(err)
	}
	// "strict" sorts after "group", so group's value is computed before the failure.
	err := x.Update(&item{Key: "a", Group: "g2", Tags: []string{"u"}, Bad: true})
	var ie *IndexError
	if !errors.As(err, &ie) || ie.Index != "strict" || ie.Key != "a" || !errors.Is(err, errBad) {
		t.Fatalf("err = %v, want an IndexError for index strict on a wrapping errBad", err)
	}
	if got, _ := x.Get("a"); got != old {
		t.Fatalf("Get(a) = %+v after a failed update, want the old object", got)
	}
	if got := mustIndexKeys(t, x, "group", "g1"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("group g1 = %v after a failed update", got)
	}
	if got := mustIndexKeys(t, x, "group", "g2"); len(got) != 0 {
		t.Fatalf("group g2 = %v after a failed update", got)
	}
	if err := x.Add(&item{Key: "b", Bad: true}); !errors.Is(err, errBad) {
		t.Fatalf("adding a bad item: %v", err)
	}
	if _, ok := x.Get("b"); ok {
		t.Fatal("a failed add stored the object")
	}
	mustValidate(t, x)
}

func TestBadInput(t *testing.T) {
	x := newItemIndexer()
	if err := x.Add(nil); !errors.Is(err, ErrNilObject) {
		t.Errorf("Add(nil) = %v", err)
	}
	if err := x.Update(nil); !errors.Is(err, ErrNilObject) {
		t.Errorf("Update(nil) = %v", err)
	}
	if err := x.Delete(nil); !errors.Is(err, ErrNilObject) {
		t.Errorf("Delete(nil) = %v", err)
	}
	if _, _, err := x.GetByObject(nil); !errors.Is(err, ErrNilObject) {
		t.Errorf("GetByObject(nil) = %v", err)
	}
	if err := x.Add(&item{}); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("Add(keyless) = %v", err)
	}
	if err := x.DeleteKey(""); !errors.Is(err, ErrEmptyKey) {
		t.Errorf(`DeleteKey("") = %v`, err)
	}
	var ke *KeyError
	if err := x.Add(&item{Key: "error"}); !errors.As(err, &ke) || !errors.Is(err, errBad) {
		t.Errorf("Add with failing key function = %v", err)
	}
	if err := x.Replace([]*item{{Key: "a"}, nil}); !errors.Is(err, ErrNilObject) {
		t.Errorf("Replace with a nil item = %v", err)
	}
	for _, name := range []string{"nope", ""} {
		if _, err := x.ByIndex(name, "v"); !errors.Is(err, ErrUnknownIndex) {
			t.Errorf("ByIndex(%q) = %v", name, err)
		}
		if _, err := x.IndexKeys(name, "v"); !errors.Is(err, ErrUnknownIndex) {
			t.Errorf("IndexKeys(%q) = %v", name, err)
		}
		if _, err := x.IndexValues(name); !errors.Is(err, ErrUnknownIndex) {
			t.Errorf("IndexValues(%q) = %v", name, err)
		}
	}
	if x.Len() != 0 {
		t.Fatalf("bad input stored %d objects", x.Len())
	}

	// An interface type parameter holding a typed nil pointer is nil too.
	y := New(Config[metav1.Object]{})
	var nilCM *corev1.ConfigMap
	if err := y.Add(nilCM); !errors.Is(err, ErrNilObject) {
		t.Errorf("Add(typed nil) = %v", err)
	}
	if err := y.Add(cm("", "", nil)); err == nil {
		t.Error("Add of a nameless object succeeded")
	}
}

func TestNewPanicsOnMisconfiguration(t *testing.T) {
	for name, fn := range map[string]func(){
		"no key function for a non-meta type": func() { New(Config[*item]{}) },
		"nil index function": func() {
			New(Config[*corev1.ConfigMap]{Indexers: Indexers[*corev1.ConfigMap]{"x": nil}})
		},
		"mutation detector without deep copy": func() {
			New(Config[*item]{KeyFunc: func(*item) (string, error) { return "k", nil }, DetectMutations: true})
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: New did not panic", name)
				}
			}()
			fn()
		}()
	}
}

func TestZeroConfigKeysByNamespaceAndName(t *testing.T) {
	x := New(Config[*corev1.ConfigMap]{})
	for _, o := range []*corev1.ConfigMap{cm("ns", "a", nil), cm("", "cluster", nil)} {
		if err := x.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	if got := sorted(x.ListKeys()); !slices.Equal(got, []string{"cluster", "ns/a"}) {
		t.Fatalf("keys = %v", got)
	}
}

func TestAddIndexes(t *testing.T) {
	x := newItemIndexer()
	for i := range 10 {
		if err := x.Add(&item{Key: fmt.Sprint("k", i), Group: fmt.Sprint("g", i%3), Tags: make([]string, i%2)}); err != nil {
			t.Fatal(err)
		}
	}
	late := lateIndexers()
	if err := x.AddIndexes(Indexers[*item]{"ntags": late["ntags"]}); err != nil {
		t.Fatal(err)
	}
	if got := mustIndexKeys(t, x, "ntags", "1"); !slices.Equal(got, []string{"k1", "k3", "k5", "k7", "k9"}) {
		t.Fatalf("ntags=1 = %v", got)
	}
	if err := x.AddIndexes(Indexers[*item]{"ntags": late["ntags"]}); !errors.Is(err, ErrIndexExists) {
		t.Fatalf("adding an existing index: %v", err)
	}
	if err := x.AddIndexes(Indexers[*item]{"nil": nil}); err == nil {
		t.Fatal("adding a nil index function succeeded")
	}
	// g3-hater fails on objects of group g3: store one.
	if err := x.Add(&item{Key: "k3", Group: "g3"}); err != nil {
		t.Fatal(err)
	}
	if err := x.AddIndexes(Indexers[*item]{"g3-hater": late["g3-hater"], "other": late["ntags"]}); !errors.Is(err, errBad) {
		t.Fatalf("adding an index failing on a stored object: %v", err)
	}
	if slices.Contains(x.IndexNames(), "other") || slices.Contains(x.IndexNames(), "g3-hater") {
		t.Fatalf("a failed AddIndexes added indexes: %v", x.IndexNames())
	}
	if err := x.DeleteKey("k3"); err != nil {
		t.Fatal(err)
	}
	if err := x.AddIndexes(Indexers[*item]{"g3-hater": late["g3-hater"]}); err != nil {
		t.Fatal(err)
	}
	mustValidate(t, x)
}

// TestAddIndexesWhileWriting adds an index while other goroutines keep writing; the
// new index must end up exactly right (validate recomputes it).
func TestAddIndexesWhileWriting(t *testing.T) {
	for round := range 20 {
		x := newItemIndexer()
		for i := range 500 {
			_ = x.Add(&item{Key: fmt.Sprint("k", i), Tags: make([]string, i%3)})
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := range 2 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					k := fmt.Sprint("k", (i*7+w)%600)
					if i%5 == 0 {
						_ = x.DeleteKey(k)
					} else {
						_ = x.Update(&item{Key: k, Tags: make([]string, (i+round)%4)})
					}
				}
			})
		}
		err := x.AddIndexes(Indexers[*item]{"ntags": lateIndexers()["ntags"]})
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		mustValidate(t, x)
	}
}

func TestReplace(t *testing.T) {
	for _, start := range []int{0, 3, 40} { // build aside, and update in place
		t.Run(fmt.Sprint("from ", start), func(t *testing.T) {
			x := newItemIndexer()
			for i := range start {
				_ = x.Add(&item{Key: fmt.Sprint("old", i), Group: "old"})
			}
			_ = x.Add(&item{Key: "keep", Group: "old"})
			list := []*item{
				{Key: "keep", Group: "new"},
				{Key: "n1", Group: "new", Tags: []string{"a", "b"}},
				{Key: "n1", Group: "newer"}, // the last of a key wins
			}
			for i := range 10 {
				list = append(list, &item{Key: fmt.Sprint("old", i), Group: "new"})
			}
			if err := x.Replace(list); err != nil {
				t.Fatal(err)
			}
			if x.Len() != 12 {
				t.Fatalf("Len = %d, want 12", x.Len())
			}
			if got, _ := x.Get("n1"); got != list[2] {
				t.Fatalf("n1 = %+v, want the last one given", got)
			}
			if got := mustIndexKeys(t, x, "group", "old"); len(got) != 0 {
				t.Fatalf("old group still indexes %v", got)
			}
			if got := mustIndexKeys(t, x, "tags", "a"); len(got) != 0 {
				t.Fatalf("tag a (of an overridden duplicate) indexes %v", got)
			}
			mustValidate(t, x)

			// A failing Replace changes nothing.
			before := sorted(x.ListKeys())
			bad := append(slices.Clone(list[:1]), &item{Key: "zz", Bad: true})
			if err := x.Replace(bad); !errors.Is(err, errBad) {
				t.Fatalf("Replace with a bad item = %v", err)
			}
			if got := sorted(x.ListKeys()); !slices.Equal(got, before) {
				t.Fatalf("failed Replace changed keys to %v", got)
			}
			if err := x.Replace(nil); err != nil || x.Len() != 0 {
				t.Fatalf("Replace(nil) = %v, Len %d", err, x.Len())
			}
			mustValidate(t, x)
		})
	}
}

// TestChurnDoesNotLeak churns a million distinct index values and keys through a
// store that never holds more than a few objects; the bookkeeping must stay small.
func TestChurnDoesNotLeak(t *testing.T) {
	x := newItemIndexer()
	const live = 8
	for i := range 1_000_000 {
		it := &item{Key: fmt.Sprint("k", i), Group: fmt.Sprint("g", i), Tags: []string{fmt.Sprint("t", i), "shared"}}
		if err := x.Add(it); err != nil {
			t.Fatal(err)
		}
		if i >= live {
			if err := x.DeleteKey(fmt.Sprint("k", i-live)); err != nil {
				t.Fatal(err)
			}
		}
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if n := len(x.c.objs); n > live+1 {
		t.Errorf("%d slots for %d objects", n, live)
	}
	for j, ix := range x.c.idx {
		if len(ix.ids) > 2*live || len(ix.vals) > 2*live+1 || len(ix.multi)-len(ix.freeMulti) > live || len(ix.multi) > 2*live {
			t.Errorf("index %d: %d ids, %d value entries, %d multi slots after churn", j, len(ix.ids), len(ix.vals), len(ix.multi))
		}
		for i := range ix.vals {
			if e := &ix.vals[i]; cap(e.members) > 64 {
				t.Errorf("index %d keeps a member list of capacity %d", j, cap(e.members))
			}
		}
	}
}

func TestCompactsWhenMostlyEmpty(t *testing.T) {
	x := newItemIndexer()
	for i := range 5000 {
		_ = x.Add(&item{Key: fmt.Sprint("k", i), Group: fmt.Sprint("g", i%7), Tags: []string{"a", fmt.Sprint(i % 3)}})
	}
	for i := range 4000 {
		_ = x.DeleteKey(fmt.Sprint("k", i))
	}
	x.mu.RLock()
	n := len(x.c.objs)
	x.mu.RUnlock()
	if n > 2500 {
		t.Fatalf("%d slots hold 1000 objects; the store did not compact", n)
	}
	mustValidate(t, x)
	if got := mustIndexKeys(t, x, "tags", "a"); len(got) != 1000 {
		t.Fatalf("tag a has %d members, want 1000", len(got))
	}
}

func TestMutationDetector(t *testing.T) {
	x := New(Config[*corev1.ConfigMap]{DetectMutations: true})
	a, b := cm("ns", "a", map[string]string{"x": "1"}), cm("ns", "b", nil)
	_ = x.Add(a)
	_ = x.Add(b)
	if err := x.CheckMutations(); err != nil {
		t.Fatalf("no mutation yet: %v", err)
	}
	got, _ := x.Get("ns/a")
	got.Labels["x"] = "2" // the bug the detector exists for
	err := x.CheckMutations()
	var me *MutationError
	if !errors.Is(err, ErrMutation) || !errors.As(err, &me) || !slices.Equal(me.Keys, []string{"ns/a"}) {
		t.Fatalf("CheckMutations = %v, want ns/a mutated", err)
	}

	// A mutation followed by an update (or delete) is reported, not lost.
	b.Data = map[string]string{"k": "v"}
	_ = x.Update(cm("ns", "b", nil))
	_ = x.Delete(a)
	if err := x.CheckMutations(); !errors.As(err, &me) || !slices.Equal(me.Keys, []string{"ns/a", "ns/b"}) {
		t.Fatalf("CheckMutations = %v, want ns/a and ns/b", err)
	}
	if err := x.CheckMutations(); err != nil {
		t.Fatalf("reported mutations are reported once: %v", err)
	}
	// Objects dropped by Replace are checked too.
	c := cm("ns", "c", nil)
	_ = x.Replace([]*corev1.ConfigMap{c})
	c.Name = "changed"
	_ = x.Replace(nil)
	if err := x.CheckMutations(); !errors.As(err, &me) || !slices.Equal(me.Keys, []string{"ns/c"}) {
		t.Fatalf("CheckMutations after Replace = %v", err)
	}

	off := New(Config[*corev1.ConfigMap]{})
	_ = off.Add(a)
	a.Name = "zzz"
	if err := off.CheckMutations(); err != nil {
		t.Fatalf("detector off: %v", err)
	}
}

// TestConcurrentUse runs readers and writers together under the race detector.
func TestConcurrentUse(t *testing.T) {
	x := newItemIndexer()
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := range 2000 {
				k := fmt.Sprint("k", (i+w)%50)
				switch i % 4 {
				case 0, 1:
					_ = x.Update(&item{Key: k, Group: fmt.Sprint("g", i%5), Tags: []string{"t"}})
				case 2:
					_ = x.DeleteKey(k)
				case 3:
					if i%400 == 3 {
						_ = x.Replace([]*item{{Key: k, Group: "g1"}})
					}
				}
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for i := range 2000 {
				objs, _ := x.ByIndex("group", fmt.Sprint("g", i%5))
				for _, o := range objs {
					if o.Group != fmt.Sprint("g", i%5) {
						t.Errorf("ByIndex(g%d) returned an object of %s", i%5, o.Group)
						return
					}
				}
				_ = x.List()
				_, _ = x.IndexValues("tags")
			}
		})
	}
	wg.Go(func() {
		_ = x.AddIndexes(Indexers[*item]{"ntags": lateIndexers()["ntags"]})
	})
	wg.Wait()
	mustValidate(t, x)
}

func TestSwap(t *testing.T) {
	x := newItemIndexer()
	a1 := &item{Key: "a", Group: "g1"}
	if old, had, err := x.Swap(a1); err != nil || had || old != nil {
		t.Fatalf("Swap into an empty store = %v, %v, %v; want nil, false, nil", old, had, err)
	}
	a2 := &item{Key: "a", Group: "g2"}
	if old, had, err := x.Swap(a2); err != nil || !had || old != a1 {
		t.Fatalf("Swap = %v, %v, %v; want the first object", old, had, err)
	}
	if got, _ := x.Get("a"); got != a2 {
		t.Fatalf("Get after Swap = %+v, want the new object", got)
	}
	if g1, g2 := mustIndexKeys(t, x, "group", "g1"), mustIndexKeys(t, x, "group", "g2"); len(g1) != 0 || !slices.Equal(g2, []string{"a"}) {
		t.Fatalf("after Swap group g1 = %v, g2 = %v; want the object moved to g2", g1, g2)
	}
	// A failed Swap changes nothing and returns no old object.
	for _, bad := range []*item{{Key: "a", Group: "g3", Bad: true}, {Key: "error"}, nil} {
		old, had, err := x.Swap(bad)
		if err == nil || had || old != nil {
			t.Fatalf("Swap(%+v) = %v, %v, %v; want an error only", bad, old, had, err)
		}
	}
	if got, _ := x.Get("a"); got != a2 || x.Len() != 1 {
		t.Fatalf("a failed Swap changed the store: Get(a) = %+v, Len = %d", got, x.Len())
	}
	mustValidate(t, x)

	// With MetaKey keys too.
	m := New(Config[*corev1.ConfigMap]{})
	c1, c2 := cm("ns", "c", nil), cm("ns", "c", nil)
	if _, had, err := m.Swap(c1); err != nil || had {
		t.Fatalf("Swap of a new ConfigMap: had %v, err %v", had, err)
	}
	if old, had, err := m.Swap(c2); err != nil || !had || old != c1 {
		t.Fatalf("Swap of ns/c = %p, %v, %v; want %p", old, had, err, c1)
	}
	if _, _, err := m.Swap(cm("ns", "", nil)); !errors.As(err, new(*KeyError)) {
		t.Fatalf("Swap of a nameless object: %v, want a KeyError", err)
	}
}

// TestUpdateKeepingMultiValues: an update whose object keeps its values of a
// multi-valued index (in any order) keeps its memberships and their places, and the
// value lists hand out the new object; one that changes them, or drops them all,
// moves it, and an index without multi-valued objects left keeps no state for them.
func TestUpdateKeepingMultiValues(t *testing.T) {
	x := newItemIndexer()
	a1 := &item{Key: "a", Tags: []string{"x", "y", "z"}}
	b := &item{Key: "b", Tags: []string{"y", "z", "w"}}
	for _, it := range []*item{a1, b} {
		if err := x.Add(it); err != nil {
			t.Fatal(err)
		}
	}
	byTag := func(tag string) []*item {
		t.Helper()
		objs, err := x.ByIndex("tags", tag)
		if err != nil {
			t.Fatal(err)
		}
		mustValidate(t, x)
		return objs
	}
	if got := byTag("y"); !slices.Equal(got, []*item{a1, b}) {
		t.Fatalf("y: %v", got)
	}
	a2 := &item{Key: "a", Tags: []string{"z", "x", "y"}}
	if err := x.Update(a2); err != nil {
		t.Fatal(err)
	}
	// Rebuilding a's memberships would have moved it behind b.
	if got := byTag("y"); !slices.Equal(got, []*item{a2, b}) {
		t.Fatalf("y after an update keeping a's values: %v, want a2 then b", got)
	}
	if got := byTag("x"); !slices.Equal(got, []*item{a2}) {
		t.Fatalf("x after an update keeping a's values: %v", got)
	}

	a3 := &item{Key: "a", Tags: []string{"x", "v"}}
	if err := x.Update(a3); err != nil {
		t.Fatal(err)
	}
	if got := byTag("y"); !slices.Equal(got, []*item{b}) {
		t.Fatalf("y after a left it: %v", got)
	}
	if got := byTag("v"); !slices.Equal(got, []*item{a3}) {
		t.Fatalf("v: %v", got)
	}
	if err := x.Update(&item{Key: "a"}); err != nil {
		t.Fatal(err)
	}
	if got := byTag("x"); len(got) != 0 {
		t.Fatalf("x after a dropped every tag: %v", got)
	}
	if err := x.Delete(b); err != nil {
		t.Fatal(err)
	}
	mustValidate(t, x)
	x.mu.RLock()
	defer x.mu.RUnlock()
	for j, ix := range x.c.idx {
		if ix.multi != nil || ix.freeMulti != nil {
			t.Errorf("index %d keeps %d multi entries (%d free) with no multi-valued object", j, len(ix.multi), len(ix.freeMulti))
		}
	}
}

// TestManyValuesPerObject stores objects indexed under dozens of values each, drawn from
// a shared pool (so that removing one membership moves another object's), some given
// twice or one value many times, and updates them with the same values reordered,
// with other values, deletes and re-adds them,
// validating the store and comparing IndexKeys with a model after every step.
func TestManyValuesPerObject(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 55))
	x := newItemIndexer()
	model := map[string][]string{} // key -> tags
	pool := make([]string, 90)
	for i := range pool {
		pool[i] = fmt.Sprint("t", i)
	}
	randomTags := func() []string {
		n := r.IntN(60)
		if r.IntN(4) == 0 {
			n = r.IntN(sortedMin + 2) // around the threshold too
		}
		tags := slices.Clone(pool)
		r.Shuffle(len(tags), func(i, j int) { tags[i], tags[j] = tags[j], tags[i] })
		tags = tags[:n]
		switch r.IntN(6) {
		case 0: // repeated values (an index function may return them)
			for range 1 + r.IntN(12) {
				if len(tags) > 0 {
					tags = append(tags, tags[r.IntN(len(tags))])
				}
			}
			r.Shuffle(len(tags), func(i, j int) { tags[i], tags[j] = tags[j], tags[i] })
		case 1: // one value, repeated
			tags = slices.Repeat([]string{pool[r.IntN(len(pool))]}, 2+r.IntN(20))
		}
		return tags
	}
	for step := range 1500 {
		key := fmt.Sprint("k", r.IntN(40))
		switch op := r.IntN(10); {
		case op < 4:
			tags := randomTags()
			if err := x.Update(&item{Key: key, Group: "g", Tags: tags}); err != nil {
				t.Fatal(err)
			}
			model[key] = tags
		case op < 7: // the same values in another order
			tags, ok := model[key]
			if !ok {
				continue
			}
			tags = slices.Clone(tags)
			r.Shuffle(len(tags), func(i, j int) { tags[i], tags[j] = tags[j], tags[i] })
			if err := x.Update(&item{Key: key, Group: "g", Tags: tags}); err != nil {
				t.Fatal(err)
			}
			model[key] = tags
		default:
			if err := x.Delete(&item{Key: key}); err != nil {
				t.Fatal(err)
			}
			delete(model, key)
		}
		if step%10 != 0 {
			continue
		}
		mustValidate(t, x)
		for _, tag := range pool[:20] {
			var want []string
			for k, tags := range model {
				if slices.Contains(tags, tag) {
					want = append(want, k)
				}
			}
			if got := mustIndexKeys(t, x, "tags", tag); !slices.Equal(got, sorted(want)) {
				t.Fatalf("step %d: IndexKeys(tags, %s) = %v, want %v", step, tag, got, sorted(want))
			}
		}
	}
}
