package indexer_test

// The conformance suite of the store: the semantics of client-go's tools/cache store,
// indexer and thread-safe store tests (store_test.go, index_test.go,
// thread_safe_store_test.go, mutation_detector_test.go) that the indexer keeps,
// restated for its typed API. Where ctrlkit deliberately differs, the test checks
// ctrlkit's documented behaviour and says so.

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/indexer"
)

// entry is the plain object of the store tests: ID is its key, Val its one indexed
// value, Vals (comma-separated) its values in the multi-valued index.
type entry struct {
	ID, Val, Vals string
}

func entryKey(e entry) (string, error) { return e.ID, nil }

func newEntryStore(t *testing.T) *indexer.Indexer[entry] {
	t.Helper()
	return indexer.New(indexer.Config[entry]{
		KeyFunc: entryKey,
		Indexers: indexer.Indexers[entry]{
			"val": func(e entry) ([]string, error) { return []string{e.Val}, nil },
			"vals": func(e entry) ([]string, error) {
				if e.Vals == "" {
					return nil, nil
				}
				return strings.Split(e.Vals, ","), nil
			},
		},
	})
}

func confMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// confVals returns the Val of every object, sorted.
func confVals(objs []entry) []string {
	out := make([]string, len(objs))
	for i, e := range objs {
		out[i] = e.Val
	}
	sort.Strings(out)
	return out
}

// confIndexKeys returns the sorted keys indexed under value in the named index.
func confIndexKeys(t *testing.T, x *indexer.Indexer[entry], name, value string) []string {
	t.Helper()
	keys, err := x.IndexKeys(name, value)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	return keys
}

// TestConformanceStoreBasics covers client-go doTestStore (TestCache, TestFIFOCache,
// TestUndeltaStore): an added object can be read back by key and by object, an update
// replaces it, a delete removes it, List holds exactly what is stored, and Replace
// makes a list the whole contents.
func TestConformanceStoreBasics(t *testing.T) {
	x := newEntryStore(t)
	confMust(t, x.Add(entry{ID: "foo", Val: "bar"}))
	if got, ok := x.Get("foo"); !ok || got.Val != "bar" {
		t.Fatalf("Get(foo) after Add = %+v, %v; want Val bar", got, ok)
	}
	if got, ok, err := x.GetByObject(entry{ID: "foo"}); err != nil || !ok || got.Val != "bar" {
		t.Fatalf("GetByObject(foo) = %+v, %v, %v", got, ok, err)
	}
	confMust(t, x.Update(entry{ID: "foo", Val: "baz"}))
	if got, ok := x.Get("foo"); !ok || got.Val != "baz" {
		t.Fatalf("Get(foo) after Update = %+v, %v; want Val baz", got, ok)
	}
	confMust(t, x.Delete(entry{ID: "foo"}))
	if got, ok := x.Get("foo"); ok {
		t.Fatalf("Get(foo) after Delete found %+v", got)
	}

	for _, e := range []entry{{ID: "a", Val: "b"}, {ID: "c", Val: "d"}, {ID: "e", Val: "e"}} {
		confMust(t, x.Add(e))
	}
	if got := confVals(x.List()); !slices.Equal(got, []string{"b", "d", "e"}) {
		t.Fatalf("List = %v, want exactly b, d, e", got)
	}
	if x.Len() != 3 {
		t.Fatalf("Len = %d, want 3", x.Len())
	}

	confMust(t, x.Replace([]entry{{ID: "foo", Val: "foo"}, {ID: "bar", Val: "bar"}}))
	if got := confVals(x.List()); !slices.Equal(got, []string{"bar", "foo"}) {
		t.Fatalf("List after Replace = %v, want exactly bar, foo", got)
	}
	keys := x.ListKeys()
	sort.Strings(keys)
	if !slices.Equal(keys, []string{"bar", "foo"}) {
		t.Fatalf("ListKeys after Replace = %v", keys)
	}
	// Replace also re-indexes: the values of the replaced objects are gone.
	if got := confIndexKeys(t, x, "val", "b"); len(got) != 0 {
		t.Fatalf("ByIndex(val, b) after Replace = %v, want nothing", got)
	}
}

// TestConformanceIndexLookup covers client-go doTestIndex (TestIndex) and
// TestGetIndexFuncValues: objects are found under the value their index function
// gives, and IndexValues lists each value in use once.
func TestConformanceIndexLookup(t *testing.T) {
	x := newEntryStore(t)
	for _, e := range []entry{{ID: "a", Val: "b"}, {ID: "c", Val: "b"}, {ID: "e", Val: "f"}, {ID: "g", Val: "h"}} {
		confMust(t, x.Add(e))
	}
	want := map[string][]string{"b": {"a", "c"}, "f": {"e"}, "h": {"g"}}
	for val, keys := range want {
		objs, err := x.ByIndex("val", val)
		confMust(t, err)
		var got []string
		for _, o := range objs {
			got = append(got, o.ID)
		}
		sort.Strings(got)
		if !slices.Equal(got, keys) {
			t.Errorf("ByIndex(val, %s) = %v, want %v", val, got, keys)
		}
	}
	vals, err := x.IndexValues("val")
	confMust(t, err)
	sort.Strings(vals)
	if !slices.Equal(vals, []string{"b", "f", "h"}) {
		t.Errorf("IndexValues(val) = %v, want b, f, h (each once)", vals)
	}
}

// TestConformanceMultiValuedIndex covers client-go TestMultiIndexKeys and
// TestThreadSafeStoreIndexingFunctionsWithMultipleValues: an object indexed under
// several values is found under each; updates move it between values exactly; deletes
// take it out of all of them; a value no object has any more is forgotten.
func TestConformanceMultiValuedIndex(t *testing.T) {
	x := newEntryStore(t)
	type step struct {
		do   func() error
		want map[string][]string // value → keys; a missing value must be empty
	}
	put := func(id, vals string) func() error {
		return func() error { return x.Update(entry{ID: id, Vals: vals}) }
	}
	del := func(id string) func() error { return func() error { return x.DeleteKey(id) } }
	steps := []step{
		{put("key1", "foo"), map[string][]string{"foo": {"key1"}}},
		{put("key2", "bar"), map[string][]string{"foo": {"key1"}, "bar": {"key2"}}},
		{put("key2", "foo,bar"), map[string][]string{"foo": {"key1", "key2"}, "bar": {"key2"}}},
		{put("key1", "foo,bar"), map[string][]string{"foo": {"key1", "key2"}, "bar": {"key1", "key2"}}},
		{put("key3", "foo,bar,baz"), map[string][]string{"foo": {"key1", "key2", "key3"}, "bar": {"key1", "key2", "key3"}, "baz": {"key3"}}},
		{put("key1", "foo"), map[string][]string{"foo": {"key1", "key2", "key3"}, "bar": {"key2", "key3"}, "baz": {"key3"}}},
		{put("key2", "bar"), map[string][]string{"foo": {"key1", "key3"}, "bar": {"key2", "key3"}, "baz": {"key3"}}},
		{del("key1"), map[string][]string{"foo": {"key3"}, "bar": {"key2", "key3"}, "baz": {"key3"}}},
		{del("key3"), map[string][]string{"bar": {"key2"}}},
		// The upstream users example: repeated values count once.
		{put("one", "ernie,bert,ernie"), map[string][]string{"bar": {"key2"}, "ernie": {"one"}, "bert": {"one"}}},
	}
	for i, s := range steps {
		confMust(t, s.do())
		for _, v := range []string{"foo", "bar", "baz", "ernie", "bert", "elmo"} {
			if got := confIndexKeys(t, x, "vals", v); !slices.Equal(got, s.want[v]) {
				t.Errorf("step %d: IndexKeys(vals, %s) = %v, want %v", i, v, got, s.want[v])
			}
		}
		vals, err := x.IndexValues("vals")
		confMust(t, err)
		sort.Strings(vals)
		var wantVals []string
		for v := range s.want {
			wantVals = append(wantVals, v)
		}
		sort.Strings(wantVals)
		if !slices.Equal(vals, wantVals) {
			t.Errorf("step %d: IndexValues(vals) = %v, want %v (emptied values forgotten)", i, vals, wantVals)
		}
	}
	if got, err := x.ByIndex("vals", "elmo1"); err != nil || len(got) != 0 {
		t.Errorf("ByIndex of a value never used = %v, %v; want nothing", got, err)
	}
}

// TestConformanceEmptyValueForgotten covers client-go
// TestThreadSafeStoreDeleteRemovesEmptySetsFromIndex and
// TestThreadSafeStoreAddKeepsNonEmptySetPostDeleteFromIndex: deleting the last object
// of an index value forgets the value; deleting one of two keeps it with the other.
func TestConformanceEmptyValueForgotten(t *testing.T) {
	x := newEntryStore(t)
	confMust(t, x.Add(entry{ID: "only", Val: "alone"}))
	confMust(t, x.Add(entry{ID: "retain", Val: "shared"}))
	confMust(t, x.Add(entry{ID: "delete", Val: "shared"}))
	confMust(t, x.DeleteKey("only"))
	confMust(t, x.DeleteKey("delete"))
	vals, err := x.IndexValues("val")
	confMust(t, err)
	if !slices.Equal(vals, []string{"shared"}) {
		t.Fatalf("IndexValues = %v, want only shared (alone emptied)", vals)
	}
	if got := confIndexKeys(t, x, "val", "shared"); !slices.Equal(got, []string{"retain"}) {
		t.Fatalf("IndexKeys(val, shared) = %v, want retain", got)
	}
}

// TestConformanceKeyError covers client-go TestKeyError: a key function's error is
// wrapped, reachable with errors.Is through nested wrapping.
func TestConformanceKeyError(t *testing.T) {
	base := errors.New("error")
	ke := &indexer.KeyError{Err: base}
	if errors.Unwrap(ke) != base {
		t.Errorf("Unwrap(KeyError) = %v, want the key function's error", errors.Unwrap(ke))
	}
	nested := &indexer.KeyError{Err: ke}
	if !errors.Is(ke, base) || !errors.Is(nested, base) {
		t.Error("errors.Is does not reach the key function's error")
	}

	// And as the store returns it.
	x := indexer.New(indexer.Config[entry]{KeyFunc: func(e entry) (string, error) {
		if e.ID == "" {
			return "", base
		}
		return e.ID, nil
	}})
	err := x.Add(entry{Val: "keyless"})
	var got *indexer.KeyError
	if !errors.As(err, &got) || !errors.Is(err, base) || !strings.HasPrefix(err.Error(), "indexer:") {
		t.Errorf("Add with a failing key function = %v, want an indexer KeyError wrapping it", err)
	}
}

// TestConformanceWritesAreEachAtomic covers client-go
// TestCacheTransactionShouldIndexErrors. ctrlkit has no Transaction call (see the
// notes): each write is atomic on its own, so a batch of writes where some objects
// have no key stores exactly the others, and each failure leaves the store as it was;
// Replace, a batch of its own, is all or nothing.
func TestConformanceWritesAreEachAtomic(t *testing.T) {
	errNoKey := errors.New("no key")
	x := indexer.New(indexer.Config[entry]{KeyFunc: func(e entry) (string, error) {
		if strings.HasPrefix(e.ID, "fail") {
			return "", errNoKey
		}
		return e.ID, nil
	}})
	batch := []entry{{ID: "ok1"}, {ID: "fail1"}, {ID: "ok2"}, {ID: "fail2"}}
	var succeeded []int
	for i, e := range batch {
		if err := x.Add(e); err == nil {
			succeeded = append(succeeded, i)
		} else if !errors.Is(err, errNoKey) {
			t.Fatalf("Add(%s) = %v", e.ID, err)
		}
	}
	if !slices.Equal(succeeded, []int{0, 2}) {
		t.Errorf("writes that succeeded = %v, want 0 and 2", succeeded)
	}
	keys := x.ListKeys()
	sort.Strings(keys)
	if !slices.Equal(keys, []string{"ok1", "ok2"}) {
		t.Errorf("stored keys = %v, want ok1, ok2", keys)
	}
	if err := x.Replace(batch); !errors.Is(err, errNoKey) {
		t.Fatalf("Replace with unkeyable objects = %v", err)
	}
	keys = x.ListKeys()
	sort.Strings(keys)
	if !slices.Equal(keys, []string{"ok1", "ok2"}) {
		t.Errorf("a failed Replace changed the store to %v", keys)
	}
}

// TestConformanceMutationDetector covers client-go TestMutationDetector: a cached
// object changed in place by a reader is reported. ctrlkit checks when asked
// (CheckMutations) and when the object leaves the store, not from a background
// goroutine on a period (see the notes).
func TestConformanceMutationDetector(t *testing.T) {
	x := indexer.New(indexer.Config[*corev1.Pod]{DetectMutations: true})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "anything", Labels: map[string]string{"check": "foo"}}}
	confMust(t, x.Add(pod))
	if err := x.CheckMutations(); err != nil {
		t.Fatalf("CheckMutations before any change = %v", err)
	}
	got, _ := x.Get("anything")
	got.Labels["change"] = "true"
	err := x.CheckMutations()
	var me *indexer.MutationError
	if !errors.As(err, &me) || !errors.Is(err, indexer.ErrMutation) {
		t.Fatalf("CheckMutations after a change = %v, want a MutationError", err)
	}
	if diff := cmp.Diff([]string{"anything"}, me.Keys); diff != "" {
		t.Errorf("mutated keys (-want +got):\n%s", diff)
	}
	// The object that left the store mutated is reported too, once.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other"}}
	confMust(t, x.Add(other))
	other.Labels = map[string]string{"sneaky": "yes"}
	confMust(t, x.Delete(other))
	if err := x.CheckMutations(); !errors.As(err, &me) || !slices.Contains(me.Keys, "other") {
		t.Errorf("CheckMutations after a mutated object was deleted = %v, want other reported", err)
	}
}

// TestConformanceConcurrentReadersAndWriters is the store side of client-go
// TestHammerController: writers and readers at once, under the race detector; readers
// never see an object under a value it is not indexed by, and at the end every index
// agrees with the objects.
func TestConformanceConcurrentReadersAndWriters(t *testing.T) {
	x := newEntryStore(t)
	var writers, readers sync.WaitGroup
	stop := make(chan struct{})
	for w := range 3 {
		writers.Go(func() {
			for i := range 3000 {
				id := fmt.Sprint("k", (i*7+w)%40)
				if i%5 == 0 {
					_ = x.DeleteKey(id)
					continue
				}
				_ = x.Update(entry{ID: id, Val: fmt.Sprint(i % 6), Vals: fmt.Sprint("a,", i%3)})
			}
		})
	}
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for v := range 6 {
					objs, err := x.ByIndex("val", fmt.Sprint(v))
					if err != nil {
						t.Error(err)
						return
					}
					for _, o := range objs {
						if o.Val != fmt.Sprint(v) {
							t.Errorf("ByIndex(val, %d) returned %+v", v, o)
							return
						}
					}
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()

	total := 0
	vals, err := x.IndexValues("val")
	confMust(t, err)
	for _, v := range vals {
		for _, k := range confIndexKeys(t, x, "val", v) {
			total++
			if o, ok := x.Get(k); !ok || o.Val != v {
				t.Errorf("key %s is indexed under val %s but holds %+v (present %v)", k, v, o, ok)
			}
		}
	}
	if total != x.Len() {
		t.Errorf("the val index holds %d keys, the store %d objects", total, x.Len())
	}
}
