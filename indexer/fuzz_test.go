package indexer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"
)

// item is the object type of the model tests: Group gives a single-valued index,
// Tags a multi-valued one (with repeats and empty lists), Bad an index failure.
type item struct {
	Key   string
	Group string
	Tags  []string
	Bad   bool
}

var errBad = errors.New("bad item")

func itemIndexers() Indexers[*item] {
	return Indexers[*item]{
		"group": func(it *item) ([]string, error) { return []string{it.Group}, nil },
		"tags":  func(it *item) ([]string, error) { return it.Tags, nil },
		"strict": func(it *item) ([]string, error) {
			if it.Bad {
				return nil, errBad
			}
			return nil, nil
		},
	}
}

// lateIndexers are added by AddIndexes during the op sequences. "g3-hater" fails on
// objects of group g3, so adding it fails whenever one is stored.
func lateIndexers() map[string]IndexFunc[*item] {
	return map[string]IndexFunc[*item]{
		"ntags": func(it *item) ([]string, error) { return []string{strconv.Itoa(len(it.Tags))}, nil },
		"g3-hater": func(it *item) ([]string, error) {
			if it.Group == "g3" {
				return nil, errBad
			}
			return []string{it.Group + "!"}, nil
		},
	}
}

func newItemIndexer() *Indexer[*item] {
	return New(Config[*item]{
		KeyFunc: func(it *item) (string, error) {
			if it.Key == "error" {
				return "", errBad
			}
			return it.Key, nil
		},
		Indexers: itemIndexers(),
	})
}

// model is the naive reference: a map of objects; indexes are recomputed from scratch.
type model struct {
	objs    map[string]*item
	indexes map[string]IndexFunc[*item]
}

func (m *model) index(name string) map[string][]string {
	out := map[string][]string{}
	for k, it := range m.objs {
		vals, err := m.indexes[name](it)
		if err != nil {
			panic(err)
		}
		for _, v := range dedupeSorted(vals) {
			out[v] = append(out[v], k)
		}
	}
	for v := range out {
		sort.Strings(out[v])
	}
	return out
}

func dedupeSorted(v []string) []string {
	v = slices.Clone(v)
	slices.Sort(v)
	return slices.Compact(v)
}

// fits reports whether the model would accept obj (what the indexer must decide).
func (m *model) fits(it *item) bool {
	if it == nil || it.Key == "" || it.Key == "error" {
		return false
	}
	for _, fn := range m.indexes {
		if _, err := fn(it); err != nil {
			return false
		}
	}
	return true
}

type opReader struct {
	data []byte
}

func (r *opReader) byte() byte {
	if len(r.data) == 0 {
		return 0
	}
	b := r.data[0]
	r.data = r.data[1:]
	return b
}

func (r *opReader) item() *item {
	b := r.byte()
	if b == 255 {
		return nil
	}
	it := &item{Key: fmt.Sprintf("k%d", b%16), Group: fmt.Sprintf("g%d", (b>>4)%4)}
	switch b % 29 {
	case 0:
		it.Key = ""
	case 1:
		it.Key = "error"
	}
	t := r.byte()
	it.Bad = t&0x80 != 0 && t&0x40 != 0
	for i := range 4 {
		if t&(1<<i) != 0 {
			it.Tags = append(it.Tags, fmt.Sprintf("t%d", i%3)) // t0 can repeat
		}
	}
	return it
}

// runOps decodes data into a sequence of operations, applies each to an Indexer and
// to the model, and checks after every step that both agree and that the Indexer's
// invariants hold.
//
// When the first byte is 128 or more the Indexer runs with the mutation detector,
// which must then never report anything: the test changes no object and no ByIndex
// result.
func runOps(t *testing.T, data []byte) {
	t.Helper()
	x := newItemIndexer()
	if len(data) > 0 && data[0] >= 128 {
		x = New(Config[*item]{
			KeyFunc:         x.keyFunc,
			Indexers:        itemIndexers(),
			DetectMutations: true,
			DeepCopy: func(it *item) *item {
				c := *it
				c.Tags = slices.Clone(it.Tags)
				return &c
			},
		})
	}
	m := &model{objs: map[string]*item{}, indexes: map[string]IndexFunc[*item]{}}
	for name, fn := range itemIndexers() {
		m.indexes[name] = fn
	}
	r := &opReader{data: data}
	for step := 0; len(r.data) > 0; step++ {
		op := r.byte() % 8
		var err error
		var wantErr bool
		var desc string
		switch op {
		case 0, 1, 2:
			it := r.item()
			desc = fmt.Sprintf("store %+v", it)
			if op == 0 {
				err = x.Add(it)
			} else {
				err = x.Update(it)
			}
			wantErr = !m.fits(it)
			if !wantErr {
				m.objs[it.Key] = it
			}
		case 3:
			it := r.item()
			desc = fmt.Sprintf("delete %+v", it)
			err = x.Delete(it)
			wantErr = it == nil || it.Key == "" || it.Key == "error"
			if !wantErr {
				delete(m.objs, it.Key)
			}
		case 4:
			key := fmt.Sprintf("k%d", r.byte()%18)
			desc = "delete key " + key
			err = x.DeleteKey(key)
			delete(m.objs, key)
		case 5, 6:
			n := int(r.byte() % 20)
			list := make([]*item, n)
			for i := range list {
				list[i] = r.item()
			}
			desc = fmt.Sprintf("replace %d items", n)
			err = x.Replace(list)
			wantErr = !slices.EqualFunc(list, list, func(a, _ *item) bool { return m.fits(a) })
			if !wantErr {
				m.objs = map[string]*item{}
				for _, it := range list {
					m.objs[it.Key] = it
				}
			}
		case 7:
			late := lateIndexers()
			name := "ntags"
			if r.byte()%2 == 1 {
				name = "g3-hater"
			}
			desc = "add index " + name
			err = x.AddIndexes(Indexers[*item]{name: late[name]})
			_, exists := m.indexes[name]
			wantErr = exists
			if !exists {
				for _, it := range m.objs {
					if _, ferr := late[name](it); ferr != nil {
						wantErr = true
					}
				}
			}
			if !wantErr {
				m.indexes[name] = late[name]
			}
		}
		if (err != nil) != wantErr {
			t.Fatalf("step %d (%s): err = %v, want error: %v", step, desc, err, wantErr)
		}
		compareModel(t, x, m, fmt.Sprintf("step %d (%s)", step, desc))
	}
}

func compareModel(t *testing.T, x *Indexer[*item], m *model, where string) {
	t.Helper()
	if err := x.validate(); err != nil {
		t.Fatalf("%s: invariant broken: %v", where, err)
	}
	if x.Len() != len(m.objs) {
		t.Fatalf("%s: Len = %d, want %d", where, x.Len(), len(m.objs))
	}
	wantKeys := make([]string, 0, len(m.objs))
	for k := range m.objs {
		wantKeys = append(wantKeys, k)
	}
	sort.Strings(wantKeys)
	if got := sorted(x.ListKeys()); !slices.Equal(got, wantKeys) {
		t.Fatalf("%s: ListKeys = %v, want %v", where, got, wantKeys)
	}
	if got := sorted(keysOf(x.List())); !slices.Equal(got, wantKeys) {
		t.Fatalf("%s: List keys = %v, want %v", where, got, wantKeys)
	}
	// Absent of every other key, plus an unknown one, is the rest.
	var listed, wantAbsent []string
	for i, k := range wantKeys {
		if i%2 == 0 {
			listed = append(listed, k)
		} else {
			wantAbsent = append(wantAbsent, k)
		}
	}
	absent, absentObjs := x.Absent(append(listed, "unknown"))
	if got := sorted(absent); !slices.Equal(got, wantAbsent) || len(absentObjs) != len(absent) {
		t.Fatalf("%s: Absent = %v (%d objects), want %v", where, got, len(absentObjs), wantAbsent)
	}
	for i, k := range absent {
		if m.objs[k] != absentObjs[i] {
			t.Fatalf("%s: Absent paired %q with another object", where, k)
		}
	}
	for i := range 18 {
		k := fmt.Sprintf("k%d", i)
		got, ok := x.Get(k)
		if want := m.objs[k]; got != want || ok != (want != nil) {
			t.Fatalf("%s: Get(%q) = %+v, %v; want %+v", where, k, got, ok, want)
		}
	}
	gotNames := x.IndexNames()
	wantNames := make([]string, 0, len(m.indexes))
	for name := range m.indexes {
		wantNames = append(wantNames, name)
	}
	sort.Strings(wantNames)
	if !slices.Equal(gotNames, wantNames) {
		t.Fatalf("%s: IndexNames = %v, want %v", where, gotNames, wantNames)
	}
	for _, name := range wantNames {
		want := m.index(name)
		vals, err := x.IndexValues(name)
		if err != nil {
			t.Fatalf("%s: IndexValues(%q): %v", where, name, err)
		}
		wantVals := make([]string, 0, len(want))
		for v := range want {
			wantVals = append(wantVals, v)
		}
		sort.Strings(wantVals)
		if got := sorted(vals); !slices.Equal(got, wantVals) {
			t.Fatalf("%s: IndexValues(%q) = %q, want %q", where, name, got, wantVals)
		}
		for _, v := range append(wantVals, "absent") {
			keys, err := x.IndexKeys(name, v)
			if err != nil {
				t.Fatalf("%s: IndexKeys(%q, %q): %v", where, name, v, err)
			}
			if got := sorted(keys); !slices.Equal(got, want[v]) && (len(got) > 0 || len(want[v]) > 0) {
				t.Fatalf("%s: IndexKeys(%q, %q) = %q, want %q", where, name, v, got, want[v])
			}
			// AppendByIndex first gathers from the members, then (after ByIndex
			// built the snapshot) copies the snapshot: both must match.
			appended, err := x.AppendByIndex(nil, name, v)
			if err != nil {
				t.Fatalf("%s: AppendByIndex(%q, %q): %v", where, name, v, err)
			}
			objs, err := x.ByIndex(name, v)
			if err != nil {
				t.Fatalf("%s: ByIndex(%q, %q): %v", where, name, v, err)
			}
			if again, _ := x.AppendByIndex(nil, name, v); !slices.Equal(again, appended) || !slices.Equal(objs, appended) {
				t.Fatalf("%s: AppendByIndex(%q, %q) = %q, then %q; ByIndex = %q", where, name, v, keysOf(appended), keysOf(again), keysOf(objs))
			}
			for _, o := range objs {
				if m.objs[o.Key] != o {
					t.Fatalf("%s: ByIndex(%q, %q) returned %+v, not the stored object", where, name, v, o)
				}
			}
			if got := sorted(keysOf(objs)); !slices.Equal(got, want[v]) && (len(got) > 0 || len(want[v]) > 0) {
				t.Fatalf("%s: ByIndex(%q, %q) keys = %q, want %q", where, name, v, got, want[v])
			}
		}
	}
	if err := x.CheckMutations(); err != nil {
		t.Fatalf("%s: nothing was mutated, yet CheckMutations = %v", where, err)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

func keysOf(items []*item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Key
	}
	return out
}

func FuzzIndexer(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 17, 3, 3, 1, 0})
	f.Add([]byte{0, 5, 15, 0, 6, 7, 5, 3, 5, 0, 6, 1, 7, 0, 7, 1})
	f.Add([]byte{5, 4, 1, 2, 3, 4, 5, 6, 7, 8, 7, 0, 0, 3, 0, 200, 0})
	f.Add([]byte{0, 48, 0, 7, 1, 0, 1, 0, 7, 1, 4, 1, 7, 1})
	f.Add([]byte{128, 1, 2, 0, 17, 3, 3, 1, 0, 5, 4, 1, 2, 3, 4, 2, 1, 9, 0, 7, 0})
	f.Fuzz(runOps)
}

// TestIndexerMatchesModel runs many random operation sequences through runOps, so the
// model comparison runs under plain `go test` too.
func TestIndexerMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		data := make([]byte, 20+rng.IntN(300))
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		runOps(t, data)
	}
}
