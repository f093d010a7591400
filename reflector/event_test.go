package reflector

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

func TestDecode(t *testing.T) {
	obj := cm("ns", "a")
	obj.ResourceVersion = "7"
	end := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	unstructuredEnd := &unstructured.Unstructured{}
	unstructuredEnd.SetResourceVersion("10")
	unstructuredEnd.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	type want struct {
		kind eventKind
		obj  configMap
		rv   string
		end  bool
	}
	for _, tc := range []struct {
		in   watch.Event
		want want
	}{
		{watch.Event{Type: watch.Added, Object: obj}, want{kindAdded, obj, "7", false}},
		{watch.Event{Type: watch.Modified, Object: obj}, want{kindModified, obj, "7", false}},
		{watch.Event{Type: watch.Deleted, Object: obj}, want{kindDeleted, obj, "7", false}},
		{watch.Event{Type: watch.Bookmark, Object: obj}, want{kindBookmark, nil, "7", false}},
		{watch.Event{Type: watch.Bookmark, Object: end}, want{kindBookmark, nil, "9", true}},
		// A bookmark's object need not be of type T.
		{watch.Event{Type: watch.Bookmark, Object: unstructuredEnd}, want{kindBookmark, nil, "10", true}},
	} {
		ev, err := decodeEvent[configMap](tc.in, nil)
		got := want{ev.kind, ev.obj, ev.resourceVersion(), ev.initialEventsEnd}
		if err != nil || got != tc.want {
			t.Errorf("decodeEvent(%s) = %+v, %v; want %+v", tc.in.Type, got, err, tc.want)
		}
	}
}

func TestDecodeTransformKeepsServerResourceVersion(t *testing.T) {
	obj := cm("ns", "a")
	obj.ResourceVersion = "7"
	ev, err := decodeEvent(watch.Event{Type: watch.Added, Object: obj}, func(c configMap) (configMap, error) {
		out := c.DeepCopy()
		out.ResourceVersion = ""
		out.Labels = map[string]string{"t": "1"}
		return out, nil
	})
	if err != nil || ev.kind != kindAdded || ev.resourceVersion() != "7" || ev.obj.Labels["t"] != "1" || ev.obj == obj {
		t.Errorf("decodeEvent = %+v, %v", ev, err)
	}
	_, err = decodeEvent(watch.Event{Type: watch.Deleted, Object: obj}, func(configMap) (configMap, error) { return nil, errBoom })
	if !errors.Is(err, errBoom) || !strings.Contains(err.Error(), "ns/a") {
		t.Errorf("transform error = %v", err)
	}
}

func TestObjectKey(t *testing.T) {
	if got := objectKey(cm("ns", "a")); got != "ns/a" {
		t.Errorf("namespaced key = %q", got)
	}
	if got := objectKey(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}); got != "kube-system" {
		t.Errorf("cluster-scoped key = %q", got)
	}
}

// FuzzInitialEvents checks the streaming buffer against a map: whatever the
// sequence of adds, updates and deletes, the buffer read with later entries
// winning holds exactly the model's objects, and once indexed it holds no
// duplicates and its index is exact.
func FuzzInitialEvents(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 1, 2, 1, 0, 3})
	f.Add([]byte{0, 0, 0, 0, 2, 0, 0, 0})
	f.Add([]byte{2, 5, 1, 5, 0, 5, 0, 5})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var b initialEvents[configMap]
		model := map[string]string{}
		for i := 0; i+1 < len(ops); i += 2 {
			name := "o" + strconv.Itoa(int(ops[i+1]%8))
			obj := cm("ns", name)
			obj.ResourceVersion = strconv.Itoa(i)
			switch ops[i] % 3 {
			case 0:
				b.add(obj)
				model["ns/"+name] = obj.ResourceVersion
			case 1:
				b.set(obj)
				model["ns/"+name] = obj.ResourceVersion
			case 2:
				b.remove(obj)
				delete(model, "ns/"+name)
			}
			got := map[string]string{}
			for _, o := range b.items {
				got[objectKey(o)] = o.ResourceVersion
			}
			if diff := cmp.Diff(model, got); diff != "" {
				t.Fatalf("after op %d (-model +buffer):\n%s", i/2, diff)
			}
			if b.index != nil {
				if len(b.index) != len(b.items) {
					t.Fatalf("index has %d keys for %d items", len(b.index), len(b.items))
				}
				for k, j := range b.index {
					if objectKey(b.items[j]) != k {
						t.Fatalf("index[%s] = %d holds %s", k, j, objectKey(b.items[j]))
					}
				}
			}
			for _, o := range b.items[len(b.items):cap(b.items)] {
				if o != nil {
					t.Fatalf("a removed item is still referenced past the end")
				}
			}
		}
	})
}

// scriptedLW serves lists from a server but answers watches with the
// given events, then leaves the watch open.
type scriptedLW struct {
	ListerWatcher[configMap]
	events []watch.Event
}

func (s scriptedLW) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w := watch.NewRaceFreeFake()
	for _, e := range s.events {
		w.Action(e.Type, e.Object)
	}
	return w, nil
}

func TestStreamingHandlesChangesBeforeItsEnd(t *testing.T) {
	bubble(t, func(t *testing.T) {
		at := func(c *corev1.ConfigMap, rv string) *corev1.ConfigMap { c.ResourceVersion = rv; return c }
		end := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
		lw := scriptedLW{events: []watch.Event{
			{Type: watch.Added, Object: at(cm("ns", "a"), "1")},
			{Type: watch.Added, Object: at(cm("ns", "b"), "2")},
			{Type: watch.Bookmark, Object: at(&corev1.ConfigMap{}, "3")}, // a plain bookmark changes nothing
			{Type: watch.Modified, Object: at(cm("ns", "a"), "4")},
			{Type: watch.Added, Object: at(cm("ns", "c"), "5")},
			{Type: watch.Deleted, Object: at(cm("ns", "b"), "6")},
			{Type: watch.Bookmark, Object: end},
			{Type: watch.Modified, Object: at(cm("ns", "c"), "10")},
		}}
		st := newMemStore[configMap]()
		r := New[configMap](lw, st, Config[configMap]{})
		start(t, r)
		synctest.Wait()
		want := []storeCall{{op: "replace", rv: "9", size: 2}, {op: "update", key: "ns/c", rv: "10"}}
		if diff := cmp.Diff(want, st.Calls(), cmp.AllowUnexported(storeCall{})); diff != "" {
			t.Errorf("store calls (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"ns/a@4", "ns/c@10"}, st.Contents()); diff != "" {
			t.Errorf("store (-want +got):\n%s", diff)
		}
		if h := r.Health(); h.LastResourceVersion != "10" || h.Stats.StreamingLists != 1 {
			t.Errorf("health = %+v", h)
		}
	})
}

// blockingStore is a memStore whose Update number at (1-based) reports on
// blocked and waits for release.
type blockingStore struct {
	*memStore[configMap]
	n       int
	at      int
	blocked chan struct{}
	release chan struct{}
}

func (s *blockingStore) Update(obj configMap) error {
	s.n++
	if s.n == s.at {
		s.blocked <- struct{}{}
		<-s.release
	}
	return s.memStore.Update(obj)
}

// TestHealthDuringABurst checks the bound documented on Health.LastEventTime:
// while events arrive back to back, Health lags the store by fewer than
// publishEvery events, and it is exact once the reflector waits again.
func TestHealthDuringABurst(t *testing.T) {
	bubble(t, func(t *testing.T) {
		const total, stopAt = 200, 130
		fw := watch.NewFakeWithChanSize(total, false)
		for i := 1; i <= total; i++ {
			c := cm("ns", "a")
			c.ResourceVersion = strconv.Itoa(10 + i)
			fw.Modify(c) // buffered: the whole burst is ready at once
		}
		lw := Funcs[configMap]{
			ListFunc: func(context.Context, metav1.ListOptions) ([]configMap, metav1.ListMeta, error) {
				return nil, metav1.ListMeta{ResourceVersion: "10"}, nil
			},
			WatchFunc: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil },
		}
		st := &blockingStore{memStore: newMemStore[configMap](), at: stopAt, blocked: make(chan struct{}), release: make(chan struct{})}
		r := New[configMap](lw, st, Config[configMap]{WatchList: WatchListOff})
		start(t, r)
		<-st.blocked
		// stopAt-1 events are in the store; Health may lag, within the bound.
		h := r.Health()
		applied := int64(stopAt - 1)
		if h.Stats.Events <= 0 || h.Stats.Events > applied || applied-h.Stats.Events >= publishEvery {
			t.Errorf("during the burst Health counts %d events, %d applied: lag must be below %d", h.Stats.Events, applied, publishEvery)
		}
		if want := strconv.Itoa(10 + int(h.Stats.Events)); h.LastResourceVersion != want {
			t.Errorf("during the burst LastResourceVersion = %q, want %q (that of the last event counted)", h.LastResourceVersion, want)
		}
		close(st.release)
		synctest.Wait()
		h = r.Health()
		if h.Stats.Events != total || h.LastResourceVersion != strconv.Itoa(10+total) || h.State != StateWatching {
			t.Errorf("after the burst Health = %d events at %q in %v, want %d at %d, watching", h.Stats.Events, h.LastResourceVersion, h.State, total, 10+total)
		}
		if got := r.LastSyncResourceVersion(); got != strconv.Itoa(10+total) {
			t.Errorf("LastSyncResourceVersion = %q after the burst", got)
		}
	})
}

// TestQuietWatchSettles: a watch that stays open for shortWatch, even without
// events, ends the run of consecutive failures, whether Health is read while it
// is open or only after it failed; one that fails sooner counts, and a watch that
// has ended erases no later failure.
func TestQuietWatchSettles(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 2)
		watches := watchTimes(srv)
		r := New[configMap](srv, newMemStore[configMap](), Config[configMap]{WatchList: WatchListOff})
		start(t, r)
		// opened waits, in steps of fake time, for the n-th watch request.
		opened := func(n int) time.Time {
			for {
				synctest.Wait()
				if at := watches(); len(at) >= n {
					return at[n-1]
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		at := opened(1)
		for i := 1; i <= 3; i++ {
			// Each watch breaks before it settles.
			time.Sleep(time.Until(at.Add(shortWatch / 2)))
			srv.BreakWatches(errBoom)
			synctest.Wait()
			if h := r.Health(); h.ConsecutiveFailures != i {
				t.Fatalf("after failure %d: ConsecutiveFailures = %d", i, h.ConsecutiveFailures)
			}
			at = opened(i + 1)
			time.Sleep(time.Until(at.Add(shortWatch - 10*time.Millisecond)))
			synctest.Wait()
			if h := r.Health(); h.ConsecutiveFailures != i {
				t.Fatalf("watch %d open for less than %v: ConsecutiveFailures = %d, want %d", i+1, shortWatch, h.ConsecutiveFailures, i)
			}
		}
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		if h := r.Health(); h.ConsecutiveFailures != 0 || h.State != StateWatching {
			t.Errorf("a watch open for %v: ConsecutiveFailures = %d in %v, want 0 while watching", shortWatch, h.ConsecutiveFailures, h.State)
		}
		// Two failures (the settled watch 4, then watch 5 at once), then a watch
		// that settles unobserved and fails: the failures before it no longer
		// count.
		srv.BreakWatches(errBoom)
		at = opened(5)
		time.Sleep(time.Until(at.Add(shortWatch / 2)))
		srv.BreakWatches(errBoom)
		synctest.Wait()
		if h := r.Health(); h.ConsecutiveFailures != 2 {
			t.Fatalf("two failures: ConsecutiveFailures = %d", h.ConsecutiveFailures)
		}
		at = opened(6)
		time.Sleep(time.Until(at.Add(2 * shortWatch)))
		srv.BreakWatches(errBoom)
		synctest.Wait()
		if h := r.Health(); h.ConsecutiveFailures != 1 {
			t.Errorf("a watch open for %v, then failing: ConsecutiveFailures = %d, want 1", 2*shortWatch, h.ConsecutiveFailures)
		}
	})
}
