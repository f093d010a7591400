package informer

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type cmPtr = *corev1.ConfigMap

// obj returns a ConfigMap "ns/name" at resourceVersion rv.
func obj(name string, rv int) cmPtr {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: strconv.Itoa(rv)}}
}

func add(o cmPtr) note[cmPtr]         { return note[cmPtr]{op: opAdd, key: keyOf(o), obj: o} }
func upd(old, o cmPtr) note[cmPtr]    { return note[cmPtr]{op: opUpdate, key: keyOf(o), old: old, obj: o} }
func del(o cmPtr) note[cmPtr]         { return note[cmPtr]{op: opDelete, key: keyOf(o), obj: o} }
func tomb(o cmPtr) note[cmPtr]        { return note[cmPtr]{op: opDelete, key: keyOf(o), obj: o, flag: true} }
func syncNote(o cmPtr) note[cmPtr]    { return note[cmPtr]{op: opSync, key: keyOf(o), old: o, obj: o} }
func describeObj(o cmPtr) string      { return o.Name + "@" + o.ResourceVersion }
func describeObjs(os ...cmPtr) string { return strings.Join(mapSlice(os, describeObj), ",") }

func mapSlice[A, B any](in []A, f func(A) B) []B {
	out := make([]B, len(in))
	for i, a := range in {
		out[i] = f(a)
	}
	return out
}

// describeCall renders a call as "add a@1", "update a@1>a@2", "delete a@2",
// "tombstone a@2", "sync a@1" or "marker".
func describeCall(n note[cmPtr]) string {
	switch n.op {
	case opAdd:
		if n.flag {
			return "initial " + describeObj(n.obj)
		}
		return "add " + describeObj(n.obj)
	case opUpdate:
		if n.old == n.obj {
			return "sync " + describeObj(n.obj)
		}
		return "update " + describeObj(n.old) + ">" + describeObj(n.obj)
	case opSync:
		return "sync " + describeObj(n.obj)
	case opDelete:
		if n.flag {
			return "tombstone " + describeObj(n.obj)
		}
		return "delete " + describeObj(n.obj)
	case opMarker:
		return "marker"
	}
	return fmt.Sprintf("op(%d)", n.op)
}

func drain(b *backlog[cmPtr], max int) []note[cmPtr] {
	var out []note[cmPtr]
	for !b.empty() {
		out = b.take(out, len(out)+max)
	}
	return out
}

// TestBacklogCoalescing pushes changes into a backlog whose limit is 1, so that the
// second change starts coalescing, and checks what the handler is told.
func TestBacklogCoalescing(t *testing.T) {
	a1, a2, a3, a4 := obj("a", 1), obj("a", 2), obj("a", 3), obj("a", 4)
	b1, b2, b3 := obj("b", 11), obj("b", 12), obj("b", 13)
	for _, tc := range []struct {
		name  string
		limit int
		push  []note[cmPtr]
		want  []string
	}{
		{"below the limit nothing is coalesced", 10, []note[cmPtr]{add(a1), upd(a1, a2), del(a2)},
			[]string{"add a@1", "update a@1>a@2", "delete a@2"}},
		{"adds and updates become one add", 1, []note[cmPtr]{add(a1), upd(a1, a2), upd(a2, a3)},
			[]string{"add a@3"}},
		{"updates become one update from the known state", 1, []note[cmPtr]{upd(a1, a2), upd(a2, a3)},
			[]string{"update a@1>a@3"}},
		{"an update and a delete become the delete", 1, []note[cmPtr]{upd(a1, a2), del(a2)},
			[]string{"delete a@2"}},
		{"an add and a delete become nothing", 1, []note[cmPtr]{add(a1), upd(a1, a2), del(a2)},
			[]string{}},
		{"a delete and a re-creation stay two calls", 1, []note[cmPtr]{del(a1), add(a2)},
			[]string{"delete a@1", "add a@2"}},
		{"the delete of the known object is kept, the rest is the latest state", 1,
			[]note[cmPtr]{upd(a1, a2), del(a2), add(a3), upd(a3, a4)},
			[]string{"delete a@2", "add a@4"}},
		{"a re-creation deleted again leaves only the first delete", 1,
			[]note[cmPtr]{upd(a1, a2), del(a2), add(a3), del(a3)},
			[]string{"delete a@2"}},
		{"a tombstone keeps its flag", 1, []note[cmPtr]{upd(a1, a2), tomb(a2)},
			[]string{"tombstone a@2"}},
		{"resyncs merge", 1, []note[cmPtr]{syncNote(a1), syncNote(a1)},
			[]string{"sync a@1"}},
		{"a resync then an update is the update", 1, []note[cmPtr]{syncNote(a1), upd(a1, a2)},
			[]string{"update a@1>a@2"}},
		{"keys keep the order of their first change", 1,
			[]note[cmPtr]{upd(b1, b2), add(a1), upd(b2, b3), upd(a1, a2)},
			[]string{"update b@11>b@13", "add a@2"}},
		{"notes before the limit fold with later ones", 3,
			[]note[cmPtr]{upd(b1, b2), add(a1), upd(b2, b3), upd(a1, a2), del(a2)},
			[]string{"update b@11>b@13"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &backlog[cmPtr]{limit: tc.limit}
			for _, n := range tc.push {
				b.push(n)
				validate(t, b)
			}
			got := mapSlice(drain(b, 1), describeCall)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			if int(b.coalesced)+len(got) != len(tc.push) {
				t.Errorf("coalesced %d + delivered %d != pushed %d", b.coalesced, len(got), len(tc.push))
			}
			if b.size() != 0 || b.coalescing || b.n != 0 {
				t.Errorf("drained backlog not reset: %+v", b)
			}
		})
	}
}

// TestBacklogLists checks that a list goes whole into an empty backlog (not counted
// against the limit) and is split into notes behind other changes, so that a key's
// calls keep their order.
func TestBacklogLists(t *testing.T) {
	a1, a2, b1, c1 := obj("a", 1), obj("a", 2), obj("b", 2), obj("c", 3)
	b := &backlog[cmPtr]{limit: 1}
	b.pushList([]cmPtr{a1, b1}, nil, opAdd)
	b.pushMarker()
	b.push(upd(a1, a2))
	b.push(add(c1)) // over the limit: coalescing
	validate(t, b)
	if !b.coalescing || b.size() != 4 {
		t.Fatalf("coalescing %v, size %d; want true, 4", b.coalescing, b.size())
	}
	// A resync behind the waiting changes is split into notes and merges with them.
	b.pushList([]cmPtr{a2, b1, c1}, []string{"ns/a", "ns/b", "ns/c"}, opSync)
	validate(t, b)
	got := mapSlice(drain(b, 1), describeCall)
	want := []string{"initial a@1", "initial b@2", "marker", "update a@1>a@2", "add c@3", "sync b@2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}

	// Into an empty backlog a resync is one shared list, taken in chunks.
	b.pushList([]cmPtr{a2, b1, c1}, []string{"ns/a", "ns/b", "ns/c"}, opSync)
	if b.n != 1 || b.size() != 3 {
		t.Fatalf("resync into an empty backlog: %d slots, size %d; want 1, 3", b.n, b.size())
	}
	got = mapSlice(b.take(nil, 2), describeCall)
	if diff := cmp.Diff([]string{"sync a@2", "sync b@2"}, got); diff != "" {
		t.Errorf("first chunk (-want +got):\n%s", diff)
	}
	b.push(upd(a2, obj("a", 5)))
	got = mapSlice(drain(b, 10), describeCall)
	if diff := cmp.Diff([]string{"sync c@3", "update a@2>a@5"}, got); diff != "" {
		t.Errorf("rest (-want +got):\n%s", diff)
	}
}

// validate checks the backlog's invariants.
func validate(t *testing.T, b *backlog[cmPtr]) {
	t.Helper()
	notes, dead, listObjs := 0, 0, 0
	live := map[string]*pending[cmPtr]{}
	for i := range b.n {
		s := b.at(i)
		switch s.kind {
		case slotDead:
			dead++
		case slotNote:
			if s.op != opMarker {
				notes++
				if b.coalescing {
					t.Fatalf("note %s in a coalescing backlog", describeCall(s.note()))
				}
			}
		case slotPending:
			if s.p.dead {
				dead++
				continue
			}
			if live[s.p.key] != nil {
				t.Fatalf("two live pendings for %s", s.p.key)
			}
			live[s.p.key] = s.p
			if s.p.owed && !s.p.known || s.p.noop() {
				t.Fatalf("pending %+v breaks its invariants", s.p)
			}
		case slotList:
			if i != 0 || b.list == nil {
				t.Fatalf("list slot at %d, list %v", i, b.list)
			}
			listObjs += len(b.list.objs) - b.list.next
		}
	}
	if b.list != nil && (b.n == 0 || b.at(0).kind != slotList) {
		t.Fatal("a list is set but not in the first slot")
	}
	for i := b.n; i < len(b.ring); i++ {
		if s := b.at(i); s.kind != slotDead || s.p != nil || s.obj != nil || s.old != nil {
			t.Fatalf("unused slot %d holds %+v", i, s)
		}
	}
	if notes != b.notes || dead != b.dead || listObjs != b.listObjs {
		t.Fatalf("counters notes %d dead %d listObjs %d, recount %d %d %d", b.notes, b.dead, b.listObjs, notes, dead, listObjs)
	}
	if len(live) != len(b.pend) {
		t.Fatalf("%d live pendings in the queue, %d in the map", len(live), len(b.pend))
	}
	for k, p := range b.pend {
		if live[k] != p {
			t.Fatalf("pending of %s in the map is not the one queued", k)
		}
	}
	if !b.coalescing && len(b.pend) > 0 {
		t.Fatal("pendings while not coalescing")
	}
	if b.notes > b.limit {
		t.Fatalf("%d notes over the limit %d", b.notes, b.limit)
	}
}

// FuzzBacklog drives a backlog with the changes of a small model cache and random
// takes, replays the calls onto a model of the handler's view, and checks that each
// call is consistent with that view, that the memory stays bounded, and that once
// drained the view equals the cache.
func FuzzBacklog(f *testing.F) {
	f.Add([]byte{1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0, 9, 9, 9, 9, 9, 9, 9, 9, 200, 201, 100, 50})
	f.Add([]byte{3, 10, 20, 30, 40, 250, 11, 21, 31, 41, 251, 252, 12, 22, 99})
	f.Fuzz(checkBacklog)
}

func checkBacklog(t *testing.T, data []byte) {
	{
		if len(data) == 0 || len(data) > 2000 {
			return // validate is linear: keep runs short
		}
		const keys = 5
		limit := int(data[0] % 6)
		b := &backlog[cmPtr]{limit: limit}
		rv := 0
		next := func(name string) cmPtr { rv++; return obj(name, rv) }
		cache := map[string]cmPtr{}
		view := map[string]cmPtr{}
		pushed, delivered := 0, 0
		synced := false

		// The handler joins with two objects cached.
		for _, name := range []string{"k0", "k1"} {
			cache["ns/"+name] = next(name)
		}
		initial := []cmPtr{cache["ns/k0"], cache["ns/k1"]}
		b.pushList(initial, nil, opAdd)
		b.pushMarker()
		pushed += len(initial)

		apply := func(calls []note[cmPtr]) {
			for _, c := range calls {
				if c.op == opMarker {
					synced = true
					continue
				}
				delivered++
				var k string
				if c.obj != nil {
					k = keyOf(c.obj)
				}
				cur, known := view[k]
				switch c.op {
				case opAdd:
					if known {
						t.Fatalf("%s for a known key (holds %s)", describeCall(c), describeObj(cur))
					}
					if c.flag && synced {
						t.Fatalf("%s after the marker", describeCall(c))
					}
					view[k] = c.obj
				case opUpdate, opSync:
					old := c.old
					if c.op == opSync {
						old = c.obj
					}
					if !known || cur != old {
						t.Fatalf("%s but the handler holds %v", describeCall(c), cur)
					}
					if old != c.obj && rvOf(c.obj) <= rvOf(old) {
						t.Fatalf("%s goes back in time", describeCall(c))
					}
					view[k] = c.obj
				case opDelete:
					if c.key != k {
						t.Fatalf("%s with key %q", describeCall(c), c.key)
					}
					if !known {
						t.Fatalf("%s for an unknown key", describeCall(c))
					}
					delete(view, k)
				}
			}
		}

		for _, d := range data[1:] {
			name := "k" + strconv.Itoa(int(d)%keys)
			k := "ns/" + name
			var n note[cmPtr]
			switch old, ok := cache[k]; {
			case d >= 250: // take a few calls
				apply(b.take(nil, int(d-249)))
				validate(t, b)
				continue
			case d >= 240: // resync
				objs := make([]cmPtr, 0, len(cache))
				ks := make([]string, 0, len(cache))
				for k, o := range cache {
					objs, ks = append(objs, o), append(ks, k)
				}
				b.pushList(objs, ks, opSync)
				pushed += len(objs)
				validate(t, b)
				continue
			case !ok:
				n = add(next(name))
			case d%3 == 0:
				n = del(old)
				if d%2 == 0 {
					n = tomb(old)
				}
			default:
				n = upd(old, next(name))
			}
			if n.op == opDelete {
				delete(cache, k)
			} else {
				cache[k] = n.obj
			}
			b.push(n)
			pushed++
			validate(t, b)
			if len(b.pend) > keys {
				t.Fatalf("%d pendings for %d keys", len(b.pend), keys)
			}
		}
		apply(drain(b, 3))
		if !synced {
			t.Fatal("the marker was never delivered")
		}
		if diff := cmp.Diff(mapValues(cache), mapValues(view)); diff != "" {
			t.Fatalf("handler's view differs from the cache (-cache +view):\n%s", diff)
		}
		if uint64(pushed) != uint64(delivered)+b.coalesced {
			t.Fatalf("pushed %d != delivered %d + coalesced %d", pushed, delivered, b.coalesced)
		}
	}
}

func rvOf(o cmPtr) int {
	n, err := strconv.Atoi(o.ResourceVersion)
	if err != nil {
		panic(err)
	}
	return n
}

func mapValues(m map[string]cmPtr) map[string]string {
	out := make(map[string]string, len(m))
	for k, o := range m {
		out[k] = describeObj(o)
	}
	return out
}
