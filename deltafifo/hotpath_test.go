package deltafifo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKeyCacheGivesDefaultKeys checks the cache against the keys it stands for, over
// more keys than it holds, in random order, with namespaced and cluster-scoped names
// that could be confused ("a/b" cluster-scoped and b in namespace a have one key).
func TestKeyCacheGivesDefaultKeys(t *testing.T) {
	var c keyCache
	type name struct{ ns, name string }
	names := []name{{"", "a/b"}, {"a", "b"}, {"a", ""}, {"", "x"}, {"x", "x"}, {"ab", ""}}
	for i := range 3 * 2 * keyCacheSets {
		names = append(names, name{fmt.Sprintf("ns-%d", i%7), fmt.Sprintf("n-%d", i)}, name{"", fmt.Sprintf("c-%d", i)})
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 * len(names) {
		n := names[r.IntN(len(names))]
		if r.IntN(2) == 0 {
			n = names[r.IntN(40)] // a hot subset, mostly hits
		}
		want := n.name
		if n.ns != "" {
			want = n.ns + "/" + n.name
		}
		if got := c.get(n.ns, n.name); got != want {
			t.Fatalf("get(%q, %q) = %q, want %q", n.ns, n.name, got, want)
		}
	}
}

func cmap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// TestDefaultKeysOfHotObjectsCostNoAllocation: queuing and popping deltas for keys
// seen lately builds no key string (nor anything else, once the batch buffers exist),
// and the popped deltas carry the default keys.
func TestDefaultKeysOfHotObjectsCostNoAllocation(t *testing.T) {
	f := New(Config[*corev1.ConfigMap]{})
	objs := make([]*corev1.ConfigMap, 100)
	for i := range objs {
		objs[i] = cmap(fmt.Sprintf("ns-%d", i%3), fmt.Sprintf("cm-%d", i))
	}
	objs[0] = cmap("", "cluster-scoped")
	want := make([]string, len(objs))
	for i, o := range objs {
		want[i] = o.Namespace + "/" + o.Name
	}
	want[0] = "cluster-scoped"
	check := func(b Batch[*corev1.ConfigMap]) error {
		if len(b.Deltas) != len(objs) {
			return fmt.Errorf("popped %d deltas, want %d", len(b.Deltas), len(objs))
		}
		for j, d := range b.Deltas {
			if d.Key != want[j] || d.Object != objs[j] || d.Type != Updated {
				return fmt.Errorf("delta %d = %v %q, want Updated %q", j, d.Type, d.Key, want[j])
			}
		}
		return nil
	}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(50, func() {
		for _, o := range objs {
			if err := f.Update(o); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Pop(ctx, check); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("queuing and popping %d deltas of hot keys: %v allocations, want 0", len(objs), allocs)
	}
}

func TestDefaultKeyErrors(t *testing.T) {
	f := New(Config[*corev1.ConfigMap]{})
	var ke *KeyError
	if err := f.Add(cmap("ns", "")); !errors.As(err, &ke) || !errors.Is(err, errNoName) {
		t.Errorf("Add of a nameless object = %v", err)
	}
	if err := f.Update(nil); !errors.Is(err, ErrNilObject) {
		t.Errorf("Update(nil) = %v", err)
	}
	if f.Len() != 0 {
		t.Errorf("bad input queued %d deltas", f.Len())
	}
}

// TestCancelledPopPassesItsWakeOn: when two Pop calls wait and the one woken for a
// delta is cancelled before it runs, the other still gets the delta.
func TestCancelledPopPassesItsWakeOn(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			f := New(Config[*corev1.ConfigMap]{})
			ctx, cancel := context.WithCancel(context.Background())
			errA, errB := make(chan error, 1), make(chan error, 1)
			got := make(chan string, 2)
			consume := func(b Batch[*corev1.ConfigMap]) error { got <- b.Deltas[0].Key; return nil }
			// The cancellable Pop waits first, so the wake-up goes to it; it is
			// cancelled at once, usually before it runs again.
			go func() { errA <- f.Pop(ctx, consume) }()
			synctest.Wait()
			go func() { errB <- f.Pop(context.Background(), consume) }()
			synctest.Wait()
			if err := f.Add(cmap("ns", "a")); err != nil {
				t.Fatal(err)
			}
			cancel()
			synctest.Wait()
			select {
			case k := <-got:
				if k != "ns/a" {
					t.Fatalf("popped %q", k)
				}
			default:
				t.Fatal("the delta was not popped: a wake-up was lost")
			}
			f.Close()
			a, b := <-errA, <-errB
			// One Pop handed the delta out; the other was cancelled or closed.
			if (a == nil) == (b == nil) || a != nil && !errors.Is(a, context.Canceled) || b != nil && !errors.Is(b, ErrClosed) {
				t.Fatalf("Pop calls returned %v and %v", a, b)
			}
		})
	}
}

// cmStore is a KnownObjects of ConfigMaps by default key.
type cmStore map[string]*corev1.ConfigMap

func (s cmStore) ListKeys() []string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	return keys
}

func (s cmStore) Get(k string) (*corev1.ConfigMap, bool) { o, ok := s[k]; return o, ok }

// TestResyncSkipsKeysQueuedWithoutTheirKey: with the default key function a delta
// gets its key only when popped; a resync popped before it still skips its key.
func TestResyncSkipsKeysQueuedWithoutTheirKey(t *testing.T) {
	a, b := cmap("ns", "a"), cmap("ns", "b")
	f := New(Config[*corev1.ConfigMap]{KnownObjects: cmStore{"ns/a": a, "ns/b": b}})
	if err := f.Resync(); err != nil {
		t.Fatal(err)
	}
	newA := cmap("ns", "a")
	if err := f.Update(newA); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 2 {
		err := f.Pop(context.Background(), func(bt Batch[*corev1.ConfigMap]) error {
			for _, d := range bt.Deltas {
				got = append(got, d.Type.String()+" "+d.Key)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"Sync ns/b", "Updated ns/a"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("popped %v, want %v", got, want)
	}
}

// TestLongRunsComeInBoundedBatches: however many ordinary deltas wait, and whatever
// MaxBatch, a batch holds at most runChunk of them; order is kept across batches, a
// relist queued in between stays one batch, and deltas added while a batch is out
// land after it.
func TestLongRunsComeInBoundedBatches(t *testing.T) {
	for _, maxBatch := range []int{0, 700, 5000} {
		t.Run(fmt.Sprint("MaxBatch=", maxBatch), func(t *testing.T) {
			f := New(Config[*obj]{KeyFunc: objKey, MaxBatch: maxBatch})
			const n = 2*runChunk + 500
			for i := range n {
				must(t, f.Update(o(fmt.Sprint("k", i), i)))
			}
			must(t, f.Replace([]*obj{o("r", 1)}, "9"))
			for i := range 10 {
				must(t, f.Update(o("after", i)))
			}
			limit := runChunk
			if maxBatch > 0 {
				limit = min(maxBatch, runChunk)
			}
			var next, relists, after int
			for f.Len() > 0 {
				b, _ := pop(t, f, nil)
				if b.Relist {
					relists++
					if next != n || len(b.Deltas) != 1 {
						t.Fatalf("relist after %d deltas with %d deltas", next, len(b.Deltas))
					}
					continue
				}
				if len(b.Deltas) == 0 || len(b.Deltas) > limit {
					t.Fatalf("batch of %d deltas, want 1 to %d", len(b.Deltas), limit)
				}
				if next == 0 && len(b.Deltas) < limit {
					t.Fatalf("first batch of %d deltas, want %d", len(b.Deltas), limit)
				}
				for _, d := range b.Deltas {
					if d.Object.Key == "after" {
						if relists != 1 || d.Object.V != after {
							t.Fatalf("delta after%d out of order", d.Object.V)
						}
						after++
						continue
					}
					if d.Object.V != next {
						t.Fatalf("delta %d where %d was due", d.Object.V, next)
					}
					next++
				}
				if next == limit {
					must(t, f.Update(o("after", 10))) // queued while later batches wait
				}
			}
			if next != n || relists != 1 || after != 11 {
				t.Fatalf("popped %d deltas, %d relists, %d later deltas", next, relists, after)
			}
		})
	}
}
