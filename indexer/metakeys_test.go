package indexer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMetaKeysMatchModel drives an Indexer of ConfigMaps keyed by the default MetaKey
// (keys read from the objects, not stored) through random writes, relists and
// deletions big enough to grow, shrink and compact its hash table, and checks every
// invariant and every read against a plain map after each step.
//
// It runs with keys read from the objects and with the same keys stored (an explicit
// KeyFunc), each also with hashes so weak that every probe sequence is long and wraps.
func TestMetaKeysMatchModel(t *testing.T) {
	type variant struct {
		name                       string
		stored, collide, noNSIndex bool
		// phases: stretches of steps write a single namespace (a sole namespace
		// index), others several.
		phases         bool
		maxSize, seeds int
	}
	for _, v := range []variant{
		{name: "derived", maxSize: 2000, seeds: 3},
		{name: "derived-namespace-phases", phases: true, maxSize: 2000, seeds: 3},
		{name: "derived-colliding-namespace-phases", phases: true, collide: true, maxSize: 150, seeds: 1},
		{name: "derived-without-namespace-index", noNSIndex: true, maxSize: 2000, seeds: 2},
		{name: "derived-colliding-without-namespace-index", collide: true, noNSIndex: true, maxSize: 150, seeds: 1},
		{name: "stored", stored: true, maxSize: 2000, seeds: 2},
		{name: "derived-colliding", collide: true, maxSize: 150, seeds: 2},
		{name: "stored-colliding", stored: true, collide: true, maxSize: 150, seeds: 2},
	} {
		for seed := range uint64(v.seeds) {
			t.Run(fmt.Sprint(v.name, "/seed", seed), func(t *testing.T) {
				metaKeysModel(t, seed, v.stored, v.collide, v.noNSIndex, v.phases, v.maxSize)
			})
		}
	}
}

func metaKeysModel(t *testing.T, seed uint64, stored, collide, noNSIndex, phases bool, maxSize int) {
	rng := rand.New(rand.NewPCG(seed, 42))
	cfg := Config[*corev1.ConfigMap]{Indexers: Indexers[*corev1.ConfigMap]{NamespaceIndexName: NamespaceIndex[*corev1.ConfigMap]}}
	if noNSIndex {
		// The same function wrapped: not recognized, so keys read their namespace
		// from the objects.
		cfg.Indexers[NamespaceIndexName] = func(o *corev1.ConfigMap) ([]string, error) { return NamespaceIndex(o) }
	}
	if stored {
		cfg.KeyFunc = MetaKey[*corev1.ConfigMap]
	}
	x := New(cfg)
	x.kf.collide = collide
	if (x.c.keys != nil) != stored {
		t.Fatalf("keys stored: %v, want %v", x.c.keys != nil, stored)
	}
	if wantNS := !stored && !noNSIndex; (x.c.nsIdx != nil) != wantNS {
		t.Fatalf("namespaces read from the namespace index: %v, want %v", x.c.nsIdx != nil, wantNS)
	}
	l := NewLister(x)
	model := map[string]*corev1.ConfigMap{}
	// Cluster-scoped names that look like namespaced keys must not be confused
	// with them: "a/b" in no namespace and "b" in namespace "a" share a MetaKey,
	// so the model keys by MetaKey too.
	namespaces := []string{"", "a", "ns-1", "a-much-longer-namespace-name-" + fmt.Sprint(seed)}
	only := -1 // with phases, the namespace every write goes to, or -1 for any
	random := func(n int) *corev1.ConfigMap {
		ns := namespaces[rng.IntN(len(namespaces))]
		if only >= 0 {
			ns = namespaces[only]
		}
		name := fmt.Sprint("cm-", rng.IntN(n))
		if rng.IntN(8) == 0 {
			// Names of 252 to 262 bytes: on both sides of the length the store keeps
			// (nameLong), beyond which it reads names from the objects.
			name = strings.Repeat("x", 248+rng.IntN(8)) + name
		}
		o := cm(ns, name, nil)
		o.ResourceVersion = fmt.Sprint(rng.Int())
		return o
	}
	key := func(o *corev1.ConfigMap) string {
		k, err := MetaKey(o)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	sole, materialized := 0, 0
	for step := range 150 {
		if phases && step%10 == 0 {
			// Phases alternate: any namespace, then one chosen at random, so
			// that both forms of the namespace index are exercised whatever
			// the random draws (map order changes them from run to run).
			only = -1
			if step/10%2 == 1 {
				only = rng.IntN(len(namespaces))
			}
			if only >= 0 {
				// Start the phase empty: an emptied store's namespace index is
				// sole again.
				if err := x.Replace(nil); err != nil {
					t.Fatal(err)
				}
				clear(model)
				if ix := x.c.nsIdx; ix != nil && !ix.sole {
					t.Fatalf("step %d: the emptied store's namespace index is not sole", step)
				}
			}
		}
		if ix := x.c.nsIdx; ix != nil && x.Len() > 0 {
			if ix.sole {
				sole++
			} else {
				materialized++
			}
		}
		size := 1 + rng.IntN(maxSize)
		switch op := rng.IntN(6); op {
		case 0, 1: // a burst of adds and updates
			for range rng.IntN(200) {
				o := random(size)
				if err := x.Update(o); err != nil {
					t.Fatal(err)
				}
				model[key(o)] = o
			}
		case 2: // deletions by key and by object
			for k := range model {
				if rng.IntN(3) == 0 {
					if err := x.DeleteKey(k); err != nil {
						t.Fatal(err)
					}
					delete(model, k)
				}
			}
			o := random(size)
			if err := x.Delete(o); err != nil {
				t.Fatal(err)
			}
			delete(model, key(o))
		case 3, 4: // a relist: some kept, some new, some gone
			var objs []*corev1.ConfigMap
			next := map[string]*corev1.ConfigMap{}
			for k, o := range model {
				if rng.IntN(4) > 0 {
					objs = append(objs, o)
					next[k] = o
				}
			}
			for range rng.IntN(size) {
				o := random(size)
				objs = append(objs, o)
				next[key(o)] = o // later duplicates win
			}
			if err := x.Replace(objs); err != nil {
				t.Fatal(err)
			}
			model = next
		case 5: // most of it goes: compaction
			for k := range model {
				if rng.IntN(10) > 0 {
					if err := x.DeleteKey(k); err != nil {
						t.Fatal(err)
					}
					delete(model, k)
				}
			}
		}
		if err := x.validate(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		checkMetaModel(t, x, l, model, namespaces, fmt.Sprint("step ", step))
	}
	// Only a namespace index over derived keys has the sole form.
	if phases && !stored && !noNSIndex && (sole == 0 || materialized == 0) {
		t.Errorf("the namespace index held objects sole at %d steps and not at %d: the phases do not exercise both forms", sole, materialized)
	}
}

func checkMetaModel(t *testing.T, x *Indexer[*corev1.ConfigMap], l *Lister[*corev1.ConfigMap], model map[string]*corev1.ConfigMap, namespaces []string, where string) {
	t.Helper()
	if x.Len() != len(model) {
		t.Fatalf("%s: Len = %d, want %d", where, x.Len(), len(model))
	}
	var want []string
	for k, o := range model {
		want = append(want, k)
		if got, ok := x.Get(k); !ok || got != o {
			t.Fatalf("%s: Get(%q) = %p, %v; want %p", where, k, got, ok, o)
		}
		if got, ok, err := x.GetByObject(o); err != nil || !ok || got != o {
			t.Fatalf("%s: GetByObject(%q) = %p, %v, %v; want %p", where, k, got, ok, err, o)
		}
		if got, err := l.Get(o.Namespace, o.Name); err != nil || got != o {
			t.Fatalf("%s: Lister.Get(%q, %q) = %p, %v; want %p", where, o.Namespace, o.Name, got, err, o)
		}
	}
	slices.Sort(want)
	got := x.ListKeys()
	slices.Sort(got)
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("%s: ListKeys (-want +got):\n%s", where, diff)
	}
	for _, ns := range namespaces {
		var wantNS []string
		for k, o := range model {
			if o.Namespace == ns {
				wantNS = append(wantNS, k)
			}
		}
		gotNS, err := x.IndexKeys(NamespaceIndexName, ns)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(wantNS)
		slices.Sort(gotNS)
		if !slices.Equal(wantNS, gotNS) {
			t.Fatalf("%s: namespace %q holds %q, want %q", where, ns, gotNS, wantNS)
		}
	}
	for _, k := range []string{"ns-1/absent", "absent", "a/", "/a", "ns-1/cm-0/x"} {
		if _, ok := model[k]; ok {
			continue
		}
		if got, ok := x.Get(k); ok {
			t.Fatalf("%s: Get(%q) found %s/%s", where, k, got.Namespace, got.Name)
		}
	}
	// Absent against a list of half the keys (twice each) and some unknown ones.
	var listed, wantAbsent []string
	for i, k := range want {
		if i%2 == 0 {
			listed = append(listed, k, k)
		} else {
			wantAbsent = append(wantAbsent, k)
		}
	}
	listed = append(listed, "ns-1/unknown", "unknown")
	absent, objs := x.Absent(listed)
	if len(absent) != len(objs) {
		t.Fatalf("%s: Absent returned %d keys and %d objects", where, len(absent), len(objs))
	}
	for i, k := range absent {
		if model[k] != objs[i] {
			t.Fatalf("%s: Absent paired key %q with another object", where, k)
		}
	}
	slices.Sort(absent)
	if !slices.Equal(absent, wantAbsent) {
		t.Fatalf("%s: Absent = %q, want %q", where, absent, wantAbsent)
	}
	if _, err := l.Get("ns-1", "absent"); !errors.IsNotFound(err) {
		t.Fatalf("%s: Lister.Get of an absent object: %v", where, err)
	}
}

// TestMetaKeysAllocationFree checks that reads by namespace and name or by object do
// not build keys when keys are derived from the objects.
func TestMetaKeysAllocationFree(t *testing.T) {
	x := New(Config[*corev1.ConfigMap]{})
	var objs []*corev1.ConfigMap
	for i := range 100 {
		o := cm("ns", fmt.Sprint("cm-", i), nil)
		objs = append(objs, o)
		if err := x.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	l := NewLister(x)
	probe := cm("ns", "cm-7", nil)
	if n := testing.AllocsPerRun(100, func() {
		if got, ok, _ := x.GetByObject(probe); !ok || got != objs[7] {
			t.Fatal("GetByObject missed")
		}
		if got, err := l.Get("ns", "cm-8"); err != nil || got != objs[8] {
			t.Fatal("Lister.Get missed")
		}
		if got, ok := x.Get("ns/cm-9"); !ok || got != objs[9] {
			t.Fatal("Get missed")
		}
	}); n != 0 {
		t.Errorf("reads allocate %v times", n)
	}
	// Delete by object does not build the key either.
	if n := testing.AllocsPerRun(100, func() {
		if err := x.Delete(objs[5]); err != nil {
			t.Fatal(err)
		}
		if err := x.Add(objs[5]); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Delete and Add of a stored object allocate %v times", n)
	}
	if got, ok := x.Get("ns/cm-5"); !ok || got != objs[5] || x.Len() != 100 {
		t.Fatalf("after Delete and Add: Get = %v, %v; Len %d", got, ok, x.Len())
	}
}

// TestMetaKeysSurviveRenamedObjects: a caller that renames a stored object in place
// breaks the read-only rule; the store must still neither hang nor corrupt the other
// keys, and with the mutation detector it keeps the key the object was stored under.
func TestMetaKeysSurviveRenamedObjects(t *testing.T) {
	for _, detect := range []bool{false, true} {
		t.Run(fmt.Sprint("detect=", detect), func(t *testing.T) {
			x := New(Config[*corev1.ConfigMap]{DetectMutations: detect})
			var objs []*corev1.ConfigMap
			for i := range 50 {
				o := cm("ns", fmt.Sprint("cm-", i), nil)
				objs = append(objs, o)
				if err := x.Add(o); err != nil {
					t.Fatal(err)
				}
			}
			objs[3].Name = "renamed"
			if err := x.DeleteKey("ns/cm-3"); err != nil {
				t.Fatal(err)
			}
			if err := x.Delete(objs[3]); err != nil {
				t.Fatal(err)
			}
			for i := range 50 {
				if i == 3 {
					continue
				}
				if got, ok := x.Get(fmt.Sprint("ns/cm-", i)); !ok || got != objs[i] {
					t.Fatalf("ns/cm-%d lost after a renamed object left", i)
				}
			}
			if detect {
				if err := x.validate(); err != nil {
					t.Fatal(err)
				}
				if x.Len() != 49 {
					t.Fatalf("Len = %d, want 49", x.Len())
				}
			}
		})
	}
}

// TestNamespaceIndexRecognized checks that an Indexer keyed by MetaKey recognizes
// NamespaceIndex, indexes namespaces without calling it (so an Update of a stored key
// allocates nothing), reads keys' namespaces from that index, and gives the same
// results as the same function wrapped, which it does not recognize.
func TestNamespaceIndexRecognized(t *testing.T) {
	wrapped := func(o *corev1.ConfigMap) ([]string, error) { return NamespaceIndex(o) }
	fast := New(Config[*corev1.ConfigMap]{Indexers: Indexers[*corev1.ConfigMap]{NamespaceIndexName: NamespaceIndex[*corev1.ConfigMap]}})
	slow := New(Config[*corev1.ConfigMap]{Indexers: Indexers[*corev1.ConfigMap]{NamespaceIndexName: wrapped}})
	late := New(Config[*corev1.ConfigMap]{})
	stored := New(Config[*corev1.ConfigMap]{
		KeyFunc:  MetaKey[*corev1.ConfigMap],
		Indexers: Indexers[*corev1.ConfigMap]{NamespaceIndexName: NamespaceIndex[*corev1.ConfigMap]},
	})
	all := []*Indexer[*corev1.ConfigMap]{fast, slow, late, stored}
	var objs []*corev1.ConfigMap
	for i := range 60 {
		objs = append(objs, cm(fmt.Sprint("ns-", i%3), fmt.Sprint("cm-", i), nil))
	}
	objs = append(objs, cm("", "cluster-scoped", nil))
	for _, x := range all {
		for _, o := range objs {
			if err := x.Add(o); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := late.AddIndexes(Indexers[*corev1.ConfigMap]{NamespaceIndexName: NamespaceIndex[*corev1.ConfigMap]}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, true, false} {
		x := all[i]
		if got := x.c.nsIdx != nil; got != want {
			t.Fatalf("indexer %d: NamespaceIndex recognized %v, want %v", i, got, want)
		}
		if err := x.validate(); err != nil {
			t.Fatalf("indexer %d: %v", i, err)
		}
	}
	// Move objects between namespaces (delete + add) and churn, then compare.
	for i, o := range objs[:20] {
		moved := cm("ns-moved", o.Name, nil)
		for _, x := range all {
			_ = x.Delete(o)
			_ = x.Add(moved)
			if i%4 == 0 {
				_ = x.Delete(moved)
			}
		}
	}
	for _, ns := range []string{"", "ns-0", "ns-1", "ns-2", "ns-moved", "none"} {
		want, _ := slow.IndexKeys(NamespaceIndexName, ns)
		for i, x := range all {
			got, err := x.IndexKeys(NamespaceIndexName, ns)
			if err != nil || !slices.Equal(sorted(got), sorted(want)) {
				t.Fatalf("indexer %d: namespace %q holds %v, %v; want %v", i, ns, sorted(got), err, sorted(want))
			}
			for _, k := range want {
				if _, ok := x.Get(k); !ok {
					t.Fatalf("indexer %d: Get(%q) missed", i, k)
				}
			}
		}
	}
	for i, x := range all {
		if err := x.validate(); err != nil {
			t.Fatalf("indexer %d after churn: %v", i, err)
		}
	}

	// An update of a stored key, indexed by the recognized NamespaceIndex only,
	// allocates nothing; the wrapped function's result slice costs one allocation.
	a, b := objs[30], objs[30].DeepCopy()
	for _, c := range []struct {
		x    *Indexer[*corev1.ConfigMap]
		want float64
	}{{fast, 0}, {slow, 1}} {
		n := 0
		got := testing.AllocsPerRun(100, func() {
			obj := a
			if n++; n%2 == 0 {
				obj = b
			}
			if err := c.x.Update(obj); err != nil {
				t.Fatal(err)
			}
		})
		if got != c.want {
			t.Errorf("Update allocates %v times, want %v", got, c.want)
		}
	}
}

// FuzzMetaKeys runs the MetaKey model with fuzzed seeds and variants: keys read from
// the objects (namespaces from the recognized NamespaceIndex or from the objects) or
// stored, with normal or colliding hashes.
func FuzzMetaKeys(f *testing.F) {
	f.Add(uint64(1), false, false, false, false)
	f.Add(uint64(2), false, true, true, false)
	f.Add(uint64(3), true, true, false, false)
	f.Add(uint64(4), false, false, false, true)
	f.Fuzz(func(t *testing.T, seed uint64, stored, collide, noNSIndex, phases bool) {
		metaKeysModel(t, seed, stored, collide, noNSIndex, phases, 300)
	})
}

// TestSoleNamespaceIndex: while every object is in one namespace (an informer of
// one namespace, or of a cluster-scoped resource), the namespace index keeps
// nothing per object and still answers every read; an object in a second
// namespace makes it keep its per-object state, and a Replace that rebuilds the
// store with one namespace drops that state again.
func TestSoleNamespaceIndex(t *testing.T) {
	for _, detect := range []bool{false, true} {
		t.Run(fmt.Sprint("detector=", detect), func(t *testing.T) {
			x := New(Config[*corev1.ConfigMap]{
				Indexers:        Indexers[*corev1.ConfigMap]{NamespaceIndexName: NamespaceIndex[*corev1.ConfigMap]},
				DetectMutations: detect,
			})
			check := func(where string, wantSole bool, want map[string][]string) {
				t.Helper()
				if err := x.validate(); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				ix := x.c.nsIdx
				if ix.sole != wantSole {
					t.Fatalf("%s: sole %v, want %v", where, ix.sole, wantSole)
				}
				if wantSole && (cap(ix.slotVal) != 0 || cap(ix.slotPos) != 0) {
					t.Fatalf("%s: a sole index keeps %d slot values", where, cap(ix.slotVal))
				}
				for _, ns := range []string{"", "a", "b"} {
					var names []string
					objs, err := x.ByIndex(NamespaceIndexName, ns)
					if err != nil {
						t.Fatal(err)
					}
					again, _ := x.ByIndex(NamespaceIndexName, ns)
					if len(objs) > 0 && &objs[0] != &again[0] {
						t.Fatalf("%s: ByIndex(%q) built its snapshot twice", where, ns)
					}
					for _, o := range objs {
						if o.Namespace != ns {
							t.Fatalf("%s: ByIndex(%q) holds %s/%s", where, ns, o.Namespace, o.Name)
						}
						names = append(names, o.Name)
					}
					appended, _ := x.AppendByIndex(make([]*corev1.ConfigMap, 1), NamespaceIndexName, ns)
					keys, _ := x.IndexKeys(NamespaceIndexName, ns)
					slices.Sort(names)
					slices.Sort(keys)
					var wantKeys []string
					for _, n := range want[ns] {
						k, _ := MetaKey(cm(ns, n, nil))
						wantKeys = append(wantKeys, k)
					}
					slices.Sort(wantKeys)
					if !slices.Equal(names, want[ns]) || len(appended) != 1+len(want[ns]) || !slices.Equal(keys, wantKeys) {
						t.Fatalf("%s: namespace %q: ByIndex %q, AppendByIndex %d, IndexKeys %q; want %q", where, ns, names, len(appended)-1, keys, want[ns])
					}
				}
				values, _ := x.IndexValues(NamespaceIndexName)
				if len(values) != len(want) {
					t.Fatalf("%s: IndexValues %q, want the namespaces of %v", where, values, want)
				}
			}
			check("empty", true, nil)
			for i := range 3 {
				if err := x.Add(cm("a", fmt.Sprint("cm-", i), nil)); err != nil {
					t.Fatal(err)
				}
			}
			check("3 in a", true, map[string][]string{"a": {"cm-0", "cm-1", "cm-2"}})
			x.ByIndex(NamespaceIndexName, "a") // a snapshot, which the next write drops
			if err := x.Update(cm("a", "cm-1", map[string]string{"x": "y"})); err != nil {
				t.Fatal(err)
			}
			if err := x.Delete(cm("a", "cm-0", nil)); err != nil {
				t.Fatal(err)
			}
			check("2 in a", true, map[string][]string{"a": {"cm-1", "cm-2"}})
			for _, n := range []string{"cm-1", "cm-2"} {
				if err := x.Delete(cm("a", n, nil)); err != nil {
					t.Fatal(err)
				}
			}
			check("emptied", true, nil)
			if err := x.Add(cm("", "node-1", nil)); err != nil {
				t.Fatal(err)
			}
			check("cluster-scoped", true, map[string][]string{"": {"node-1"}})
			if err := x.Add(cm("b", "cm-9", nil)); err != nil {
				t.Fatal(err)
			}
			check("two namespaces", false, map[string][]string{"": {"node-1"}, "b": {"cm-9"}})
			if err := x.Delete(cm("", "node-1", nil)); err != nil {
				t.Fatal(err)
			}
			check("back to one namespace", false, map[string][]string{"b": {"cm-9"}})
			var objs []*corev1.ConfigMap
			for i := range 5 {
				objs = append(objs, cm("a", fmt.Sprint("cm-", i), nil))
			}
			if err := x.Replace(objs); err != nil {
				t.Fatal(err)
			}
			check("replaced by 5 in a", true, map[string][]string{"a": {"cm-0", "cm-1", "cm-2", "cm-3", "cm-4"}})
			if err := x.CheckMutations(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// viaGeneric returns the namespace index from generic code, as an informer's
// constructor does.
func viaGeneric[T metav1.Object](recognizable bool) IndexFunc[T] {
	if recognizable {
		return NamespaceIndexFunc[T]()
	}
	return NamespaceIndex[T]
}

// TestNamespaceIndexFromGenericCode: NamespaceIndexFunc is recognized when the
// caller's T is a type parameter; a function value of NamespaceIndex[T] made there
// is a wrapper that is not (it still works, it is called).
func TestNamespaceIndexFromGenericCode(t *testing.T) {
	for _, recognizable := range []bool{true, false} {
		x := New(Config[*corev1.ConfigMap]{Indexers: Indexers[*corev1.ConfigMap]{NamespaceIndexName: viaGeneric[*corev1.ConfigMap](recognizable)}})
		if got := x.c.nsIdx != nil; got != recognizable {
			t.Errorf("recognizable %v: namespace index recognized %v", recognizable, got)
		}
		for _, o := range []*corev1.ConfigMap{cm("a", "x", nil), cm("b", "y", nil)} {
			if err := x.Add(o); err != nil {
				t.Fatal(err)
			}
		}
		if err := x.validate(); err != nil {
			t.Fatal(err)
		}
		if keys, _ := x.IndexKeys(NamespaceIndexName, "b"); !slices.Equal(keys, []string{"b/y"}) {
			t.Errorf("recognizable %v: namespace b holds %q", recognizable, keys)
		}
	}
	s := New(Config[*corev1.Secret]{Indexers: Indexers[*corev1.Secret]{NamespaceIndexName: viaGeneric[*corev1.Secret](true)}})
	if s.c.nsIdx == nil || !s.c.nsIdx.sole {
		t.Error("NamespaceIndexFunc of another type is not recognized")
	}
}

// TestListedKeysPacked checks the keys that ListKeys, IndexKeys and Absent build from
// the objects: right, unchanged by later listings, and built with a handful of
// allocations rather than one a key.
func TestListedKeysPacked(t *testing.T) {
	x := New(Config[*corev1.ConfigMap]{Indexers: Indexers[*corev1.ConfigMap]{NamespaceIndexName: NamespaceIndex[*corev1.ConfigMap]}})
	want := map[string]bool{}
	add := func(ns, name string) {
		t.Helper()
		if err := x.Add(cm(ns, name, nil)); err != nil {
			t.Fatal(err)
		}
		want[joinMetaKey(ns, name)] = true
	}
	for i := range 5000 {
		add(fmt.Sprint("namespace-", i%7), fmt.Sprint("cm-", i, strings.Repeat("x", i%40)))
	}
	for i := range 50 {
		add("", fmt.Sprint("cluster-scoped-", i))
	}
	long := strings.Repeat("n", keyChunk) // longer than a chunk's share: built on its own
	add("namespace-1", long)

	check := func(what string, keys []string, sub func(string) bool) {
		t.Helper()
		n := 0
		seen := map[string]bool{}
		for _, k := range keys {
			if !want[k] || !sub(k) || seen[k] {
				t.Fatalf("%s: unexpected or repeated key %.80q", what, k)
			}
			seen[k] = true
		}
		for k := range want {
			if sub(k) {
				n++
			}
		}
		if len(keys) != n {
			t.Fatalf("%s: %d keys, want %d", what, len(keys), n)
		}
	}
	all := func(string) bool { return true }
	first := x.ListKeys()
	check("ListKeys", first, all)
	kept := make([]string, len(first))
	for i, k := range first {
		kept[i] = strings.Clone(k)
	}
	inNS1 := func(k string) bool { return strings.HasPrefix(k, "namespace-1/") }
	for range 3 {
		check("ListKeys again", x.ListKeys(), all)
		keys, err := x.IndexKeys(NamespaceIndexName, "namespace-1")
		if err != nil {
			t.Fatal(err)
		}
		check("IndexKeys", keys, inNS1)
		absent, _ := x.Absent(nil)
		check("Absent", absent, all)
	}
	if !slices.Equal(first, kept) {
		t.Fatal("keys of an earlier ListKeys changed under later listings")
	}

	// About 130 KB of keys: a few chunks of keyChunk bytes, the long key, the slice
	// (a first listing, which builds every key and keeps none).
	if n := testing.AllocsPerRun(5, func() {
		x.mu.Lock()
		x.c.listed.reset()
		x.c.listed.again = false
		x.mu.Unlock()
		x.ListKeys()
	}); n > 16 {
		t.Errorf("ListKeys of %d keys allocates %v times", len(want), n)
	}
	if n := testing.AllocsPerRun(5, func() { x.IndexKeys(NamespaceIndexName, "namespace-2") }); n > 3 {
		t.Errorf("IndexKeys of 714 keys allocates %v times", n)
	}
}

// TestReplaceSizesNamespaceIndexOnce: a Replace whose objects span namespaces starts
// its namespace index sole and builds the per-object state on the second namespace;
// that state gets room for every object at once, not grown by doubling as the
// objects arrive (which left the peak heap of a 100k Replace 2 MB higher).
func TestReplaceSizesNamespaceIndexOnce(t *testing.T) {
	x := New(Config[*corev1.ConfigMap]{Indexers: Indexers[*corev1.ConfigMap]{NamespaceIndexName: NamespaceIndex[*corev1.ConfigMap]}})
	const n = 1000
	objs := make([]*corev1.ConfigMap, n)
	for i := range objs {
		objs[i] = cm(fmt.Sprint("ns-", i%10), fmt.Sprint("cm-", i), nil)
	}
	if err := x.Replace(objs); err != nil {
		t.Fatal(err)
	}
	if err := x.validate(); err != nil {
		t.Fatal(err)
	}
	ix := x.c.nsIdx
	if ix.sole {
		t.Fatal("the namespace index of 10 namespaces is sole")
	}
	if cap(ix.slotVal) != n || cap(ix.slotPos) != n {
		t.Fatalf("per-object state has room for %d and %d slots, want %d", cap(ix.slotVal), cap(ix.slotPos), n)
	}
	if got, _ := x.ByIndex(NamespaceIndexName, "ns-3"); len(got) != n/10 {
		t.Fatalf("ns-3 holds %d objects, want %d", len(got), n/10)
	}
}

// TestListKeysKeepsKeys: ListKeys keeps the keys it builds, so that listing again
// allocates only the returned slice and builds only the keys of objects stored since;
// the kept keys follow deletes, adds and updates, are dropped when most of the store
// leaves between listings, and never pin more dead bytes than live ones.
func TestListKeysKeepsKeys(t *testing.T) {
	x := New(Config[*corev1.ConfigMap]{Indexers: Indexers[*corev1.ConfigMap]{NamespaceIndexName: NamespaceIndex[*corev1.ConfigMap]}})
	want := map[string]bool{}
	next := 0
	add := func(ns string) {
		t.Helper()
		name := fmt.Sprint("cm-", next, strings.Repeat("y", next%23))
		next++
		if err := x.Add(cm(ns, name, nil)); err != nil {
			t.Fatal(err)
		}
		want[joinMetaKey(ns, name)] = true
	}
	del := func(key string) {
		t.Helper()
		ns, name, _ := strings.Cut(key, "/")
		if name == "" {
			ns, name = "", ns
		}
		if err := x.Delete(cm(ns, name, nil)); err != nil {
			t.Fatal(err)
		}
		delete(want, key)
	}
	list := func(what string) []string {
		t.Helper()
		keys := x.ListKeys()
		if len(keys) != len(want) {
			t.Fatalf("%s: %d keys, want %d", what, len(keys), len(want))
		}
		seen := map[string]bool{}
		for _, k := range keys {
			if !want[k] || seen[k] {
				t.Fatalf("%s: unexpected or repeated key %q", what, k)
			}
			seen[k] = true
		}
		if err := x.validate(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if l := &x.c.listed; l.dead > l.live {
			t.Fatalf("%s: the kept keys pin %d dead bytes for %d live ones", what, l.dead, l.live)
		}
		return keys
	}
	for i := range 3000 {
		ns := fmt.Sprint("team-", i%5)
		if i%10 == 0 {
			ns = ""
		}
		add(ns)
	}
	list("first listing")
	if l := &x.c.listed; l.keys != nil || !l.again {
		t.Fatalf("the first listing kept %d keys (again: %v), want none", l.n, l.again)
	}
	first := list("second listing")
	kept := make([]string, len(first))
	for i, k := range first {
		kept[i] = strings.Clone(k)
	}
	if n := testing.AllocsPerRun(5, func() { x.ListKeys() }); n != 1 {
		t.Fatalf("listing 3000 kept keys allocates %v times, want 1 (the slice)", n)
	}

	// Change a tenth of the store: the next listing builds only the new keys.
	var gone []string
	for k := range want {
		if len(gone) == 300 {
			break
		}
		gone = append(gone, k)
	}
	for _, k := range gone {
		del(k)
	}
	for i := range 300 {
		add(fmt.Sprint("team-", i%7))
	}
	for k := range want {
		ns, name, _ := strings.Cut(k, "/")
		if name != "" && ns == "team-3" {
			if err := x.Update(cm(ns, name, map[string]string{"v": "2"})); err != nil {
				t.Fatal(err)
			}
		}
	}
	if l := &x.c.listed; l.n != 2700 {
		t.Fatalf("%d keys kept after 300 deletes, want 2700", l.n)
	}
	list("listing after changes")
	if n := testing.AllocsPerRun(5, func() { x.ListKeys() }); n != 1 {
		t.Fatalf("listing again allocates %v times, want 1", n)
	}
	if !slices.Equal(first, kept) {
		t.Fatal("the keys of the first listing changed")
	}

	// Listings between rounds of churn: dead bytes never exceed live ones (checked by
	// list), and the cache is rebuilt at least once.
	rebuilt := false
	for round := range 12 {
		n := 0
		for k := range want {
			if n == len(want)/4 {
				break
			}
			del(k)
			n++
		}
		for i := range n {
			add(fmt.Sprint("team-", (round+i)%5))
		}
		before := x.c.listed.dead
		list(fmt.Sprint("churn round ", round))
		if x.c.listed.dead < before {
			rebuilt = true
		}
	}
	if !rebuilt {
		t.Fatal("twelve rounds replacing a quarter of the store never rebuilt the kept keys")
	}

	// Most of the store leaves without a listing: the kept keys go with it.
	for k := range want {
		if len(want) <= 1000 {
			break
		}
		del(k)
	}
	if l := &x.c.listed; l.keys != nil || l.n != 0 || l.again {
		t.Fatalf("after two thirds of the store left unlisted, %d keys are kept (again: %v)", l.n, l.again)
	}
	list("listing after the kept keys were dropped")
	if l := &x.c.listed; l.keys != nil {
		t.Fatalf("the first listing after a drop kept %d keys", l.n)
	}
	list("listing after that")
	if l := &x.c.listed; l.n != len(want) {
		t.Fatalf("the second listing after a drop kept %d keys of %d", l.n, len(want))
	}
}

// TestListKeysConcurrent: listings from several goroutines share the kept keys while
// writers change the store (run with -race).
func TestListKeysConcurrent(t *testing.T) {
	x := New(Config[*corev1.ConfigMap]{Indexers: Indexers[*corev1.ConfigMap]{NamespaceIndexName: NamespaceIndex[*corev1.ConfigMap]}})
	const n = 2000
	for i := range n {
		if err := x.Add(cm(fmt.Sprint("ns-", i%3), fmt.Sprint("base-", i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	var writer, listers sync.WaitGroup
	stop := make(chan struct{})
	writer.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			o := cm("ns-churn", fmt.Sprint("churn-", i%500), nil)
			if i%1000 < 500 {
				_ = x.Add(o)
			} else {
				_ = x.Delete(o)
			}
		}
	})
	errs := make(chan error, 4)
	for range 4 {
		listers.Go(func() {
			for range 50 {
				keys := x.ListKeys()
				base := 0
				seen := make(map[string]bool, len(keys))
				for _, k := range keys {
					if seen[k] {
						errs <- fmt.Errorf("key %q listed twice", k)
						return
					}
					seen[k] = true
					if !strings.HasPrefix(k, "ns-churn/") {
						base++
					}
				}
				if base != n || len(keys) > n+500 {
					errs <- fmt.Errorf("%d keys, %d of the %d fixed ones", len(keys), base, n)
					return
				}
			}
		})
	}
	listers.Wait()
	close(stop)
	writer.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := x.validate(); err != nil {
		t.Fatal(err)
	}
}

// TestAppendKeysAndList checks that AppendKeys and AppendList keep what dst held,
// append exactly the stored keys and objects, share ListKeys's kept keys, and, once
// the keys are kept, allocate nothing when dst has room: with derived keys and with
// stored ones (a custom KeyFunc).
func TestAppendKeysAndList(t *testing.T) {
	for _, derived := range []bool{true, false} {
		t.Run(fmt.Sprint("derived=", derived), func(t *testing.T) {
			cfg := Config[*corev1.ConfigMap]{Indexers: Indexers[*corev1.ConfigMap]{NamespaceIndexName: NamespaceIndex[*corev1.ConfigMap]}}
			keyOf := joinMetaKey
			if !derived {
				keyOf = func(ns, name string) string { return "custom:" + ns + ":" + name }
				cfg.KeyFunc = func(o *corev1.ConfigMap) (string, error) { return keyOf(o.Namespace, o.Name), nil }
			}
			x := New(cfg)
			want := map[string]*corev1.ConfigMap{}
			for i := range 500 {
				ns := fmt.Sprint("team-", i%3)
				if i%7 == 0 {
					ns = ""
				}
				o := cm(ns, fmt.Sprint("cm-", i), nil)
				if err := x.Add(o); err != nil {
					t.Fatal(err)
				}
				want[keyOf(ns, o.Name)] = o
			}
			for i := 0; i < 500; i += 5 {
				o := cm(fmt.Sprint("team-", i%3), fmt.Sprint("cm-", i), nil)
				if i%7 == 0 {
					o.Namespace = ""
				}
				if err := x.Delete(o); err != nil {
					t.Fatal(err)
				}
				delete(want, keyOf(o.Namespace, o.Name))
			}
			check := func(what string, keys []string, objs []*corev1.ConfigMap) {
				t.Helper()
				if len(keys) != len(want)+1 || keys[0] != "dst" {
					t.Fatalf("%s: %d keys starting %q, want %q and %d stored keys", what, len(keys), keys[0], "dst", len(want))
				}
				if len(objs) != len(want)+1 || objs[0] != nil {
					t.Fatalf("%s: %d objects, want nil and %d stored objects", what, len(objs), len(want))
				}
				seen := map[string]bool{}
				for _, k := range keys[1:] {
					if want[k] == nil || seen[k] {
						t.Fatalf("%s: unexpected or repeated key %q", what, k)
					}
					seen[k] = true
				}
				for _, o := range objs[1:] {
					k := keyOf(o.Namespace, o.Name)
					if want[k] != o || !seen[k] {
						t.Fatalf("%s: object %q is not the stored one or has no key", what, k)
					}
					delete(seen, k)
				}
				if err := x.validate(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
			keys := make([]string, 1, len(want)+1)
			keys[0] = "dst"
			objs := make([]*corev1.ConfigMap, 1, len(want)+1)
			keys = x.AppendKeys(keys)
			objs = x.AppendList(objs)
			check("first", keys, objs)
			if derived && x.c.listed.keys != nil {
				t.Fatal("the first AppendKeys kept keys, want none (as ListKeys)")
			}
			keys = x.AppendKeys(keys[:1])
			objs = x.AppendList(objs[:1])
			check("second", keys, objs)
			if derived && x.c.listed.n != len(want) {
				t.Fatalf("the second AppendKeys kept %d keys, want %d", x.c.listed.n, len(want))
			}
			if n := testing.AllocsPerRun(20, func() {
				keys = x.AppendKeys(keys[:1])
				objs = x.AppendList(objs[:1])
			}); n != 0 {
				t.Fatalf("AppendKeys and AppendList into slices with room: %v allocations, want 0", n)
			}
			check("reused", keys, objs)
			// A dst without room grows, keeping what it held.
			keys = x.AppendKeys([]string{"dst"})
			objs = x.AppendList([]*corev1.ConfigMap{nil})
			check("grown", keys, objs)
			// ListKeys and AppendKeys share the kept keys: one built by either is
			// handed out by both.
			if derived {
				o := cm("team-1", "late", nil)
				if err := x.Add(o); err != nil {
					t.Fatal(err)
				}
				want[keyOf(o.Namespace, o.Name)] = o
				keys = x.AppendKeys(keys[:1])
				objs = x.AppendList(objs[:1])
				check("after an add", keys, objs)
				if x.c.listed.n != len(want) {
					t.Fatalf("AppendKeys kept %d keys after an add, want %d", x.c.listed.n, len(want))
				}
				lk := x.ListKeys()
				i := slices.Index(lk, "team-1/late")
				j := slices.Index(keys, "team-1/late")
				if i < 0 || j < 0 || unsafe.StringData(lk[i]) != unsafe.StringData(keys[j]) {
					t.Fatal("ListKeys built the key AppendKeys kept anew")
				}
			}
		})
	}
}

// TestPutShort: putShort copies strings of every length exactly, and writes no byte
// past them, whatever the alignment of either side.
func TestPutShort(t *testing.T) {
	src := make([]byte, 80)
	for i := range src {
		src[i] = byte('a' + i%26)
	}
	dst := make([]byte, 100)
	for n := range 70 {
		for so := range 8 {
			for do := range 8 {
				for i := range dst {
					dst[i] = '#'
				}
				s := string(src[so : so+n])
				putShort(unsafe.Pointer(&dst[do]), s)
				if got := string(dst[do : do+n]); got != s {
					t.Fatalf("n=%d src+%d dst+%d: copied %q, want %q", n, so, do, got, s)
				}
				for i, c := range dst {
					if (i < do || i >= do+n) && c != '#' {
						t.Fatalf("n=%d src+%d dst+%d: byte %d outside the copy written", n, so, do, i)
					}
				}
			}
		}
	}
}

// TestFirstListingKeyLengths: the first listing builds right keys for namespaces and
// names of every length from 1 byte up, where the copy of each part changes, and skips
// the slots of deleted objects.
func TestFirstListingKeyLengths(t *testing.T) {
	x := New(Config[*corev1.ConfigMap]{Indexers: Indexers[*corev1.ConfigMap]{NamespaceIndexName: NamespaceIndex[*corev1.ConfigMap]}})
	want := map[string]bool{}
	for nl := 0; nl <= 40; nl++ {
		for ml := 1; ml <= 40; ml++ {
			ns := strings.Repeat("n", nl)
			name := strings.Repeat("m", ml-1) + string(rune('a'+nl%26))
			if err := x.Add(cm(ns, name, nil)); err != nil {
				t.Fatal(err)
			}
			want[joinMetaKey(ns, name)] = true
		}
	}
	// Free some slots: the listing must skip them.
	for nl := 0; nl <= 40; nl += 3 {
		ns, name := strings.Repeat("n", nl), strings.Repeat("m", 6)+string(rune('a'+nl%26))
		if err := x.Delete(cm(ns, name, nil)); err != nil {
			t.Fatal(err)
		}
		delete(want, joinMetaKey(ns, name))
	}
	keys := x.ListKeys()
	if len(keys) != len(want) {
		t.Fatalf("%d keys, want %d", len(keys), len(want))
	}
	for _, k := range keys {
		if !want[k] {
			t.Fatalf("unexpected or repeated key %q", k)
		}
		delete(want, k)
	}
}
