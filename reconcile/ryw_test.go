package reconcile

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/informer"
)

func TestParseAPIPath(t *testing.T) {
	for _, tc := range []struct {
		path string
		gr   schema.GroupResource
		ns   string
		ok   bool
	}{
		{"/api/v1/namespaces/ns/pods", schema.GroupResource{Resource: "pods"}, "ns", true},
		{"/api/v1/namespaces/ns/pods/p/status", schema.GroupResource{Resource: "pods"}, "ns", true},
		{"/api/v1/namespaces/ns", schema.GroupResource{Resource: "namespaces"}, "", true},
		{"/api/v1/nodes/n", schema.GroupResource{Resource: "nodes"}, "", true},
		{"/apis/apps/v1/namespaces/ns/deployments/d/scale", schema.GroupResource{Group: "apps", Resource: "deployments"}, "ns", true},
		{"/apis/example.com/v1/widgets", schema.GroupResource{Group: "example.com", Resource: "widgets"}, "", true},
		{"/healthz", schema.GroupResource{}, "", false},
		{"/apis/apps", schema.GroupResource{}, "", false},
	} {
		gr, ns, ok := parseAPIPath(tc.path)
		if gr != tc.gr || ns != tc.ns || ok != tc.ok {
			t.Errorf("%s: %v %q %v, want %v %q %v", tc.path, gr, ns, ok, tc.gr, tc.ns, tc.ok)
		}
	}
}

// TestTrackWrites: a write made with a reconcile's context is recorded with
// its resource, namespace and resourceVersion, from JSON and from protobuf,
// and its answer still reaches the client whole; reads, failed writes and
// writes outside a reconcile are not recorded.
func TestTrackWrites(t *testing.T) {
	var proto atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Query().Get("fail") != "" || r.Header.Get("X-Fail") != "" {
			w.WriteHeader(http.StatusConflict)
			return
		}
		cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", ResourceVersion: "77"}}
		if proto.Load() {
			w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
			protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(cm, w)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(cm)
	}))
	defer srv.Close()
	cfg := TrackWrites(&rest.Config{Host: srv.URL})
	for _, p := range []bool{false, true} {
		proto.Store(p)
		c := cfg
		if p {
			c = rest.CopyConfig(cfg)
			c.ContentType = "application/vnd.kubernetes.protobuf"
		}
		kube := kubernetes.NewForConfigOrDie(c)
		slot := &writeSlot{}
		ctx := context.WithValue(context.Background(), slotKey{}, slot)
		slot.begin()
		got, err := kube.CoreV1().ConfigMaps("ns").Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.UpdateOptions{})
		if err != nil || got.ResourceVersion != "77" {
			t.Fatalf("protobuf %v: update = %v, %v", p, got, err)
		}
		if _, err := kube.CoreV1().ConfigMaps("ns").Get(ctx, "a", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kube.CoreV1().ConfigMaps("ns").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		writes := slot.end()
		want := write{gr: schema.GroupResource{Resource: "configmaps"}, ns: "ns", rv: 77}
		if len(writes) != 1 || writes[0] != want {
			t.Errorf("protobuf %v: recorded %+v, want just %+v", p, writes, want)
		}
		// After the reconcile: nothing more is recorded.
		if _, err := kube.CoreV1().ConfigMaps("ns").Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		slot.begin()
		if writes := slot.end(); len(writes) != 0 {
			t.Errorf("a write made after its reconcile returned was counted as the next one's: %+v", writes)
		}
	}
}

// fakeCache is a cacheHost whose applied resourceVersion the test moves.
type fakeCache struct {
	sc informer.Scope
	mu sync.Mutex
	rv uint64
	ch chan struct{} // closed and replaced on every move
}

func newFakeCache(sc informer.Scope) *fakeCache { return &fakeCache{sc: sc, ch: make(chan struct{})} }

func (f *fakeCache) scope() informer.Scope { return f.sc }
func (f *fakeCache) applied() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strconv.FormatUint(f.rv, 10)
}
func (f *fakeCache) set(rv uint64) {
	f.mu.Lock()
	f.rv = rv
	close(f.ch)
	f.ch = make(chan struct{})
	f.mu.Unlock()
}
func (f *fakeCache) waitFor(ctx context.Context, rv string) error {
	want, _ := strconv.ParseUint(rv, 10, 64)
	for {
		f.mu.Lock()
		cur, ch := f.rv, f.ch
		f.mu.Unlock()
		if cur >= want {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// cacheKeySource is a keySource with a cache.
type cacheKeySource struct {
	*keySource
	c *fakeCache
}

func (s cacheKeySource) cache() cacheHost { return s.c }

type waitMetrics struct {
	countingMetrics
	skips, waits, timeouts atomic.Int64
}

func (m *waitMetrics) StaleSkipped() { m.skips.Add(1) }
func (m *waitMetrics) CacheWaited(d time.Duration, timedOut bool) {
	m.waits.Add(1)
	if timedOut {
		m.timeouts.Add(1)
	}
}

// TestReadYourWrites: a key whose reconcile wrote what a source's cache holds
// is not reconciled again, even when requeued at once, until that cache
// reaches the write's resourceVersion; it runs the moment the cache does (no
// polling), and after CacheWaitTimeout if the cache never does. A write the
// cache does not cover (another namespace) makes nobody wait.
func TestReadYourWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cache := newFakeCache(informer.Scope{Resource: schema.GroupResource{Resource: "configmaps"}, Namespace: "ns"})
		cache.set(10)
		src := cacheKeySource{newKeySource(), cache}
		var calls atomic.Int64
		var nextWrite atomic.Value // of write
		nextWrite.Store(write{gr: schema.GroupResource{Resource: "configmaps"}, ns: "ns", rv: 20})
		m := &waitMetrics{}
		c := New[string](Func[string](func(ctx context.Context, key string) (Result, error) {
			calls.Add(1)
			ctx.Value(slotKey{}).(*writeSlot).record(nextWrite.Load().(write))
			return Result{RequeueAfter: time.Millisecond}, nil
		}), Config[string]{CacheWaitTimeout: time.Minute, Metrics: m})
		if err := c.Watch(src); err != nil {
			t.Fatal(err)
		}
		stop := run(t, c)
		synctest.Wait()
		src.send("a", Live)
		time.Sleep(time.Second)
		synctest.Wait()
		if n := calls.Load(); n != 1 {
			t.Fatalf("%d reconciles before the cache saw the first write, want 1", n)
		}
		if m.skips.Load() == 0 {
			t.Error("the requeued key was not counted as skipped")
		}
		cache.set(19)
		synctest.Wait()
		if n := calls.Load(); n != 1 {
			t.Fatalf("reconciled at cache resourceVersion 19 < 20")
		}
		nextWrite.Store(write{gr: schema.GroupResource{Resource: "configmaps"}, ns: "ns", rv: 30})
		cache.set(20) // the cache reaches the write: the key runs at once
		synctest.Wait()
		if n := calls.Load(); n != 2 {
			t.Fatalf("%d reconciles once the cache reached the write, want 2", n)
		}
		// The cache never reaches 30: the key runs again after the timeout.
		time.Sleep(time.Minute - time.Millisecond)
		synctest.Wait()
		if n := calls.Load(); n != 2 {
			t.Fatalf("reconciled before the timeout")
		}
		// A write in another namespace: no wait from then on.
		nextWrite.Store(write{gr: schema.GroupResource{Resource: "configmaps"}, ns: "other", rv: 99})
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if n := calls.Load(); n < 3 || m.timeouts.Load() != 1 {
			t.Fatalf("after the timeout: %d reconciles, %d timeouts; want at least 3 and 1", n, m.timeouts.Load())
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if n := calls.Load(); n < 8 {
			t.Fatalf("writes the cache does not hold held the key back: %d reconciles", n)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestReadYourWritesOff: a negative CacheWaitTimeout reconciles regardless.
func TestReadYourWritesOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cache := newFakeCache(informer.Scope{Resource: schema.GroupResource{Resource: "configmaps"}})
		src := cacheKeySource{newKeySource(), cache}
		var calls atomic.Int64
		c := New[string](Func[string](func(ctx context.Context, key string) (Result, error) {
			if ctx.Value(slotKey{}) != nil {
				t.Error("a write slot in the context with read-your-writes off")
			}
			if calls.Add(1) < 5 {
				return Result{RequeueAfter: time.Millisecond}, nil
			}
			return Result{}, nil
		}), Config[string]{CacheWaitTimeout: -1})
		if err := c.Watch(src); err != nil {
			t.Fatal(err)
		}
		stop := run(t, c)
		synctest.Wait()
		src.send("a", Live)
		time.Sleep(time.Second)
		synctest.Wait()
		if calls.Load() != 5 {
			t.Errorf("%d reconciles, want 5", calls.Load())
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// stoppedCache is a cache whose informer has stopped: it cannot wait.
type stoppedCache struct{ *fakeCache }

func (stoppedCache) waitFor(context.Context, string) error { return informer.ErrStopped }

// TestReadYourWritesStoppedCache: a key waiting on a cache whose informer has
// stopped runs again at its deadline, and the waiter does not spin meanwhile.
func TestReadYourWritesStoppedCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cache := stoppedCache{newFakeCache(informer.Scope{Resource: schema.GroupResource{Resource: "configmaps"}})}
		g := newRYWGate[string](time.Minute, []Source[string]{cacheKeySource{newKeySource(), cache.fakeCache}}, nil)
		g.sources[0].cache = cache
		g.sources[0].w.cache = cache
		enqueued := make(chan string, 10)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			g.waiters(func(k string) { enqueued <- k })[0](ctx)
		}()
		g.require("a", []write{{gr: schema.GroupResource{Resource: "configmaps"}, rv: 5}}, time.Now())
		if g.admit("a") {
			t.Fatal("admitted before the cache reached the write")
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if len(enqueued) != 0 {
			t.Fatal("enqueued before the deadline")
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if k := <-enqueued; k != "a" || !g.admit("a") {
			t.Fatalf("at the deadline: enqueued %q, not admitted", k)
		}
		cancel()
		<-done
	})
}

// TestReadYourWritesSweep: keys whose waits are over but that never come back
// to the queue are forgotten by the periodic sweep, so the gate does not grow
// with every key that ever wrote, and admit takes its lock-free path again.
func TestReadYourWritesSweep(t *testing.T) {
	cache := newFakeCache(informer.Scope{Resource: schema.GroupResource{Resource: "configmaps"}})
	g := newRYWGate[string](time.Minute, []Source[string]{cacheKeySource{newKeySource(), cache}}, nil)
	now := time.Now()
	for i := range sweepEvery - 1 {
		g.require(strconv.Itoa(i), []write{{gr: schema.GroupResource{Resource: "configmaps"}, rv: uint64(i + 1)}}, now)
	}
	if n := g.waiting.Load(); n != sweepEvery-1 {
		t.Fatalf("%d keys wait, want %d", n, sweepEvery-1)
	}
	cache.set(sweepEvery / 2) // half of them are satisfied
	g.require("last", []write{{gr: schema.GroupResource{Resource: "configmaps"}, rv: sweepEvery + 1}}, now)
	if n := g.waiting.Load(); n != int64(len(g.pending)) || n != sweepEvery/2 {
		t.Fatalf("after the sweep %d keys wait (%d pending), want %d", n, len(g.pending), sweepEvery/2)
	}
}
