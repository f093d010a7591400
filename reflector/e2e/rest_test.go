//go:build e2e

package e2e

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/reflector"
)

// reuseStore is a mapStore that offers its objects for reuse
// (reflector.ReuseKeyStore).
type reuseStore struct {
	*mapStore[*corev1.ConfigMap]
}

func (s reuseStore) ReuseKey(namespace, name, rv string) (*corev1.ConfigMap, bool) {
	o, ok := s.get(namespace + "/" + name)
	if !ok || o.ResourceVersion != rv {
		return nil, false
	}
	return o, true
}

// snapshot returns the stored objects by key.
func (s reuseStore) snapshot() map[string]*corev1.ConfigMap {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*corev1.ConfigMap, len(s.objs))
	for k, o := range s.objs {
		out[k] = o
	}
	return out
}

// cacheCaughtUp returns once the API server's watch cache has seen every write made so
// far in ns. A paginated reflector lists at resourceVersion "0", which the cache answers,
// possibly from before the latest writes (their events then come by watch, and the
// list counts fewer objects); a LIST "not older than" the current resourceVersion waits
// until the cache has it.
func cacheCaughtUp(t *testing.T, ns string) {
	t.Helper()
	c := admin(t).CoreV1().ConfigMaps(ns)
	now, err := c.List(t.Context(), metav1.ListOptions{Limit: 1}) // read from etcd
	if err != nil {
		t.Fatal(err)
	}
	opts := metav1.ListOptions{ResourceVersion: now.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}
	if _, err := c.List(t.Context(), opts); err != nil {
		t.Fatal(err)
	}
}

// freshList returns the ConfigMaps of ns from a consistent LIST through the
// typed client, managedFields stripped, by key.
func freshList(t *testing.T, ns string) map[string]*corev1.ConfigMap {
	t.Helper()
	list, err := admin(t).CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*corev1.ConfigMap, len(list.Items))
	for i := range list.Items {
		o := &list.Items[i]
		o.ManagedFields = nil
		out[o.Namespace+"/"+o.Name] = o
	}
	return out
}

// startReflector runs r until the returned function is called (or the test
// ends).
func startReflector[T reflector.Object](t *testing.T, r *reflector.Reflector[T]) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// forceRelist makes the reflector's resourceVersion unservable, as the
// benchmark does (testenv's Expire: writes, compaction, and an API server killed
// and started again, whose new watch cache answers the watch with 410). It
// retries (at most three times) until lists() grows.
func forceRelist(t *testing.T, lists func() int64) {
	t.Helper()
	ctx := t.Context()
	before := lists()
	for range 3 {
		if err := env.Expire(ctx); err != nil {
			t.Fatal(err)
		}
		tick := time.NewTicker(10 * time.Millisecond)
		deadline := time.NewTimer(30 * time.Second)
	wait:
		for lists() <= before {
			select {
			case <-tick.C:
			case <-deadline.C:
				break wait
			}
		}
		tick.Stop()
		deadline.Stop()
		if lists() > before {
			return
		}
	}
	t.Fatal("no relist after three API server restarts")
}

// TestFromRESTSkipsDecodingKnownObjects syncs ConfigMaps through FromREST
// (protobuf read by the reflector itself), by streaming list and by
// paginated LIST, into a store that offers its objects for reuse:
//   - the first sync decodes every object, and the store equals a fresh LIST;
//   - a second reflector over the same store, after updates, deletes and
//     creates made while none ran, decodes only the changed and new objects
//     and keeps the store's instances of the others;
//   - a relist forced by 410 after an API server restart decodes none;
//   - after each, the store equals a fresh LIST (go-cmp), and watch events
//     are decoded as usual.
func TestFromRESTSkipsDecodingKnownObjects(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode reflector.WatchListMode
	}{
		{"streaming", reflector.WatchListAuto},
		{"paginated", reflector.WatchListOff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 300
			ns := env.Namespace(t)
			createConfigMaps(t, ns, n)
			cacheCaughtUp(t, ns)
			client := admin(t)
			lw := reflector.FromREST[*corev1.ConfigMap](client.CoreV1().RESTClient(), "configmaps", ns)
			st := reuseStore{newMapStore[*corev1.ConfigMap]()}
			cfg := reflector.Config[*corev1.ConfigMap]{
				WatchList: tc.mode,
				PageSize:  100,
				Transform: reflector.StripManagedFields[*corev1.ConfigMap],
				Backoff:   reflector.Backoff{Max: 2 * time.Second},
			}
			lists := func(r *reflector.Reflector[*corev1.ConfigMap]) func() int64 {
				return func() int64 { s := r.Health().Stats; return s.Lists + s.StreamingLists }
			}
			checkFresh := func(what string) {
				t.Helper()
				want := freshList(t, ns)
				st.waitFor(t, serverConfigMaps(t, ns))
				if diff := cmp.Diff(want, st.snapshot()); diff != "" {
					t.Fatalf("%s: store differs from a fresh LIST (-list +store):\n%s", what, diff)
				}
			}

			first := reflector.New(lw, st, cfg)
			stopFirst := startReflector(t, first)
			checkFresh("first sync")
			healthy(t, first, func(h reflector.Health) bool {
				return h.Stats.ListedObjects == n && h.Stats.ListedFromStore == 0
			})
			stopFirst()
			before := st.snapshot()

			// While no reflector runs: 10 updates, 5 deletes, 4 creates.
			c := client.CoreV1().ConfigMaps(ns)
			for i := range 10 {
				up := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(100+i)}, Data: map[string]string{"v": "2"}}
				if _, err := c.Update(t.Context(), up, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 5 {
				if err := c.Delete(t.Context(), "cm-"+strconv.Itoa(200+i), metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 4 {
				if _, err := c.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late-" + strconv.Itoa(i)}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}

			cacheCaughtUp(t, ns)
			second := reflector.New(lw, st, cfg)
			startReflector(t, second)
			checkFresh("second sync")
			h := healthy(t, second, func(h reflector.Health) bool { return h.Synced && h.Stats.ListedObjects == n-1 })
			if want := int64(n - 15); h.Stats.ListedFromStore != want {
				t.Errorf("second sync: %d of %d listed objects from the store, want %d (decoded: %d, want the 14 changed or new)",
					h.Stats.ListedFromStore, h.Stats.ListedObjects, want, h.Stats.ListedObjects-h.Stats.ListedFromStore)
			}
			after := st.snapshot()
			kept := 0
			for k, o := range after {
				if before[k] == o {
					kept++
				}
			}
			if kept != n-15 {
				t.Errorf("second sync: %d stored instances kept, want the %d unchanged", kept, n-15)
			}

			forceRelist(t, lists(second))
			checkFresh("relist")
			h = healthy(t, second, func(h reflector.Health) bool { return h.Stats.ListedObjects == 2*(n-1) })
			if h.Stats.ListedFromStore != int64(n-15+n-1) {
				t.Errorf("relist of unchanged objects: ListedFromStore = %d, want %d (decoded %d)",
					h.Stats.ListedFromStore, n-15+n-1, h.Stats.ListedObjects-h.Stats.ListedFromStore)
			}
			if tc.mode == reflector.WatchListAuto && h.Stats.StreamingLists != 2 || tc.mode == reflector.WatchListOff && h.Stats.Lists != 2 {
				t.Errorf("Stats = %+v, want two lists of mode %v", h.Stats, tc.mode)
			}

			// Watch events after the list are decoded.
			if _, err := c.Update(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-7"}, Data: map[string]string{"v": "3"}}, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			checkFresh("after a watch event")
			if o, _ := st.get(ns + "/cm-7"); o.Data["v"] != "3" {
				t.Errorf("cm-7 after an update = %+v", o)
			}
		})
	}
}
