package deltafifo

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

func cgKey(x any) (string, error) {
	if d, ok := x.(cache.DeletedFinalStateUnknown); ok {
		return d.Key, nil
	}
	return objKey(x.(*obj))
}

// oracle is client-go v0.37.2's RealFIFO (the in-order FIFO, with KnownObjects) and
// the store its consumer applies deltas to.
type oracle struct {
	fifo  *cache.RealFIFO
	store cache.Store
}

func newOracle() *oracle {
	s := cache.NewStore(cgKey)
	return &oracle{fifo: cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{KeyFunction: cgKey, KnownObjects: s}), store: s}
}

// popN pops n deltas, applying them to the store, and describes them like describe.
func (c *oracle) popN(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		got := make(chan error, 1)
		go func() {
			_, err := c.fifo.Pop(func(item any, _ bool) error {
				for _, d := range item.(cache.Deltas) {
					x, _ := d.Object.(*obj)
					tomb, fsu := d.Object.(cache.DeletedFinalStateUnknown)
					if fsu {
						x = tomb.Obj.(*obj)
					}
					s := string(d.Type)
					if fsu {
						s += "?"
					}
					out = append(out, fmt.Sprintf("%s %s%d", s, x.Key, x.V))
					if d.Type == cache.Deleted {
						_ = c.store.Delete(d.Object)
					} else {
						_ = c.store.Update(d.Object)
					}
				}
				return nil
			})
			got <- err
		}()
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("client-go Pop: %v", err)
			}
		case <-time.After(10 * time.Second):
			c.fifo.Close() // unblocks the goroutine
			<-got
			t.Fatalf("client-go delivered only %d deltas where ctrlkit delivered %d", len(out), n)
		}
	}
	return out
}

// normalize sorts the runs of deltas whose order is unspecified: the tombstones of a
// relist and the deltas of a resync (both follow the store's key order).
func normalize(ds []string) []string {
	ds = slices.Clone(ds)
	for i := 0; i < len(ds); {
		j := i
		for j < len(ds) && kindOf(ds[j]) == kindOf(ds[i]) {
			j++
		}
		if k := kindOf(ds[i]); k == "Deleted?" || k == "Sync" {
			sort.Strings(ds[i:j])
		}
		i = j
	}
	return ds
}

func kindOf(d string) string {
	k, _, _ := cutSpace(d)
	return k
}

func cutSpace(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == ' ' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// drain pops every queued batch, applying it to s, and returns the deltas delivered.
func drain(t *testing.T, f *FIFO[*obj], s *store) []string {
	t.Helper()
	var out []string
	for {
		f.mu.Lock()
		n := len(f.units)
		f.mu.Unlock()
		if n == 0 {
			return out
		}
		_, got := pop(t, f, s)
		out = append(out, got...)
	}
}

// runFIFOOps decodes data into producer operations and drain points, applies them to
// a FIFO and to client-go's RealFIFO, and checks that both deliver the same deltas
// (up to the order of relist tombstones and of resync deltas) and agree on HasSynced.
func runFIFOOps(t *testing.T, data []byte) {
	t.Helper()
	runFIFOOpsOn(t, data, false)
	runFIFOOpsOn(t, data, true)
}

// runFIFOOpsOn is runFIFOOps with KnownObjects that is, if absent is set, an
// AbsentFinder: the relist deletions it finds must be the same.
func runFIFOOpsOn(t *testing.T, data []byte, absent bool) {
	t.Helper()
	s := newStore()
	var known KnownObjects[*obj] = s
	if absent {
		known = absentStore{s}
	}
	f := newFIFO(known)
	c := newOracle()
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	version := 0
	mk := func() *obj {
		version++
		return o(fmt.Sprint("k", next()%8), version)
	}
	check := func(step int) {
		got := drain(t, f, s)
		want := c.popN(t, len(got))
		if g, w := normalize(got), normalize(want); !slices.Equal(g, w) {
			t.Fatalf("step %d: ctrlkit delivered\n%v\nclient-go\n%v", step, g, w)
		}
		if f.HasSynced() != c.fifo.HasSynced() {
			t.Fatalf("step %d: HasSynced = %v, client-go %v", step, f.HasSynced(), c.fifo.HasSynced())
		}
	}
	for step := 0; len(data) > 0; step++ {
		switch op := next() % 8; op {
		case 0, 1:
			x := mk()
			must(t, f.Add(x))
			must(t, c.fifo.Add(x))
		case 2:
			x := mk()
			must(t, f.Update(x))
			must(t, c.fifo.Update(x))
		case 3:
			x := mk()
			must(t, f.Delete(x))
			must(t, c.fifo.Delete(x))
		case 4:
			seen := map[string]bool{}
			var list []*obj
			var anyList []any
			for range next() % 6 {
				x := mk()
				if seen[x.Key] {
					continue
				}
				seen[x.Key] = true
				list = append(list, x)
				anyList = append(anyList, x)
			}
			rv := fmt.Sprint(step)
			must(t, f.Replace(list, rv))
			must(t, c.fifo.Replace(anyList, rv))
		case 5:
			// A resync is evaluated when ctrlkit pops it; client-go evaluates it at once.
			// They agree when nothing is queued around it.
			check(step)
			must(t, f.Resync())
			must(t, c.fifo.Resync())
			check(step)
		default:
			check(step)
		}
	}
	check(-1)
	c.fifo.Close()
	if _, err := c.fifo.Pop(func(any, bool) error { return nil }); err == nil {
		t.Fatal("client-go has deltas that ctrlkit did not deliver")
	}
}

func FuzzFIFO(f *testing.F) {
	f.Add([]byte{0, 1, 4, 3, 1, 2, 3, 7, 4, 0, 6})
	f.Add([]byte{4, 4, 1, 2, 3, 4, 0, 1, 1, 3, 2, 4, 1, 5, 6, 7, 7})
	f.Add([]byte{0, 1, 0, 2, 5, 3, 2, 4, 2, 1, 2, 5, 0, 3, 1})
	f.Fuzz(runFIFOOps)
}

// TestMatchesRealFIFO runs random streams through runFIFOOps under plain `go test`.
func TestMatchesRealFIFO(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		data := make([]byte, 10+rng.IntN(200))
		for i := range data {
			data[i] = byte(rng.UintN(256))
		}
		runFIFOOps(t, data)
	}
}
