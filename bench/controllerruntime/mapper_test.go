package controllerruntime

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
	crsource "sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// The mapper benchmarks put controllers on an informer over n in-memory
// ConfigMaps (no server): ctrlkit's Controller with FromInformer and a Mapper
// on ctrlkit's informer, against controller-runtime's controllers with
// source.Informer and EnqueueRequestsFromMapFunc on client-go's shared
// informer. The informer is started and synced before the clock starts, so the
// controllers receive the cache's contents as replayed adds, then, phase
// "live", n updates through the watch.
//
// Mappings: "byobject" (each object its own key), "many-to-one" (every 100
// objects one owner key: heavy dedup), "fan-out" (each of n/100 objects maps
// to 100 keys). With controllers > 1, that many controllers share the one
// informer, each with its own keys.
//
// ns/key: "start" is from the controllers' start until each has reconciled
// every distinct key once; "live" is from the first update sent until each
// controller has reconciled a sentinel key enqueued by the last update (the
// keys are queued in order of their events, so the earlier ones were taken).

type mapShape struct {
	name string
	keys func(i int, n int) []string // the key names object i maps to
}

var mapShapes = []mapShape{
	{"byobject", func(i, _ int) []string { return []string{"o-" + strconv.Itoa(i)} }},
	{"many-to-one", func(i, _ int) []string { return []string{"owner-" + strconv.Itoa(i/100)} }},
	{"fan-out", func(i, _ int) []string {
		ks := make([]string, 100)
		for j := range ks {
			ks[j] = "k-" + strconv.Itoa(i*100+j)
		}
		return ks
	}},
}

// objects returns the shape's objects: n of them, or n/100 for fan-out, and
// the number of distinct keys they map to.
func mapObjects(s mapShape, n int) ([]*corev1.ConfigMap, int) {
	count := n
	if s.name == "fan-out" {
		count = n / 100
	}
	distinct := map[string]struct{}{}
	objs := make([]*corev1.ConfigMap, count)
	for i := range objs {
		objs[i] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "cm-" + strconv.Itoa(i), ResourceVersion: strconv.Itoa(i + 1),
			Annotations: map[string]string{"i": strconv.Itoa(i)},
		}}
		for _, k := range s.keys(i, n) {
			distinct[k] = struct{}{}
		}
	}
	return objs, len(distinct)
}

// mapIndex reads an object's index from its annotation (every side's mapper
// does the same work).
func mapIndex(obj metav1.Object) int {
	i, _ := strconv.Atoi(obj.GetAnnotations()["i"])
	return i
}

const sentinel = "sentinel"

// mapCounter is one controller's reconciler state.
type mapCounter struct {
	mu        sync.Mutex
	seen      map[string]bool
	want      int
	startDone chan struct{}
	live      chan struct{} // closed when the sentinel is reconciled
	liveOnce  sync.Once
}

func newMapCounter(want int) *mapCounter {
	return &mapCounter{seen: make(map[string]bool, want), want: want, startDone: make(chan struct{}), live: make(chan struct{})}
}

func (c *mapCounter) call(name string) {
	if name == sentinel {
		c.liveOnce.Do(func() { close(c.live) })
		return
	}
	c.mu.Lock()
	if !c.seen[name] {
		c.seen[name] = true
		if len(c.seen) == c.want {
			close(c.startDone)
		}
	}
	c.mu.Unlock()
}

func waitAll(b testing.TB, chans []chan struct{}, what string) {
	b.Helper()
	timeout := time.After(2 * time.Minute)
	for _, ch := range chans {
		select {
		case <-ch:
		case <-timeout:
			b.Fatalf("%s: not done after 2 minutes", what)
		}
	}
}

// mapWorld is one run's data: the list, and the watch the informer reads.
type mapWorld struct {
	shape mapShape
	n     int
	objs  []*corev1.ConfigMap
	w     *watch.FakeWatcher
}

func (m *mapWorld) keysOf(obj metav1.Object) []string {
	if obj.GetName() == sentinel {
		return []string{sentinel}
	}
	return m.shape.keys(mapIndex(obj), m.n)
}

// push sends an update of every object, then the sentinel object's creation.
func (m *mapWorld) push() {
	rv := len(m.objs) + 1
	for _, o := range m.objs {
		c := *o
		c.ResourceVersion = strconv.Itoa(rv)
		rv++
		m.w.Modify(&c)
	}
	m.w.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: sentinel, ResourceVersion: strconv.Itoa(rv)}})
}

type cgLW struct{ m *mapWorld }

func (l cgLW) List(metav1.ListOptions) (runtime.Object, error) {
	list := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(len(l.m.objs))}}
	list.Items = make([]corev1.ConfigMap, len(l.m.objs))
	for i, o := range l.m.objs {
		list.Items[i] = *o
	}
	return list, nil
}
func (l cgLW) Watch(metav1.ListOptions) (watch.Interface, error) { return l.m.w, nil }
func (l cgLW) IsWatchListSemanticsUnSupported() bool             { return true }

func mapCtrlkit(b *testing.B, m *mapWorld, controllers, workers int) (start, live time.Duration) {
	inf := informer.New(reflector.Funcs[*corev1.ConfigMap]{
		ListFunc: func(context.Context, metav1.ListOptions) ([]*corev1.ConfigMap, metav1.ListMeta, error) {
			return append([]*corev1.ConfigMap(nil), m.objs...), metav1.ListMeta{ResourceVersion: strconv.Itoa(len(m.objs))}, nil
		},
		WatchFunc: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return m.w, nil },
	}, informer.Config[*corev1.ConfigMap]{Reflector: reflector.Config[*corev1.ConfigMap]{WatchList: reflector.WatchListOff}})
	ictx, icancel := context.WithCancel(context.Background())
	ierr := make(chan error, 1)
	go func() { ierr <- inf.Run(ictx) }()
	if err := inf.WaitForSync(ictx); err != nil {
		b.Fatal(err)
	}
	_, want := mapObjects(m.shape, m.n)
	counters := make([]*mapCounter, controllers)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, controllers)
	t0 := time.Now()
	for j := range counters {
		c := newMapCounter(want)
		counters[j] = c
		ctl := reconcile.New(reconcile.Func[string](func(_ context.Context, key string) (reconcile.Result, error) {
			c.call(key)
			return reconcile.Result{}, nil
		}), reconcile.Config[string]{Name: "bench-" + strconv.Itoa(j), Workers: workers, Logger: logr.Discard()})
		if err := ctl.Watch(reconcile.FromInformer(inf, reconcile.Mapper[*corev1.ConfigMap, string](func(o *corev1.ConfigMap) []string { return m.keysOf(o) }))); err != nil {
			b.Fatal(err)
		}
		go func() { errc <- ctl.Run(ctx) }()
	}
	start, live = mapPhases(b, m, counters, t0, cancel, errc)
	icancel()
	<-ierr
	return start, live
}

// mapPhases times the two phases of a run whose controllers (counting in
// counters) were started at t0: until each has reconciled every key once, then,
// after the updates are pushed, until each has reconciled the last; then it stops
// the controllers (cancel) and checks what each returned on errc.
func mapPhases(b *testing.B, m *mapWorld, counters []*mapCounter, t0 time.Time, cancel func(), errc chan error) (start, live time.Duration) {
	var starts, lives []chan struct{}
	for _, c := range counters {
		starts, lives = append(starts, c.startDone), append(lives, c.live)
	}
	waitAll(b, starts, "start")
	start = time.Since(t0)
	t1 := time.Now()
	m.push()
	waitAll(b, lives, "live")
	live = time.Since(t1)
	cancel()
	for range counters {
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
	return start, live
}

func mapControllerRuntime(b *testing.B, m *mapWorld, controllers, workers int) (start, live time.Duration) {
	inf := cache.NewSharedIndexInformer(cgLW{m}, &corev1.ConfigMap{}, 0, cache.Indexers{})
	ictx, icancel := context.WithCancel(context.Background())
	idone := make(chan struct{})
	go func() { inf.RunWithContext(ictx); close(idone) }()
	if !cache.WaitForCacheSync(ictx.Done(), inf.HasSynced) {
		b.Fatal("client-go informer did not sync")
	}
	_, want := mapObjects(m.shape, m.n)
	counters := make([]*mapCounter, controllers)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, controllers)
	skip := true
	t0 := time.Now()
	for j := range counters {
		c := newMapCounter(want)
		counters[j] = c
		ctl, err := crcontroller.NewUnmanaged("bench-"+strconv.Itoa(j), crcontroller.Options{
			SkipNameValidation:      &skip,
			MaxConcurrentReconciles: workers,
			Logger:                  logr.Discard(),
			Reconciler: crreconcile.Func(func(_ context.Context, req crreconcile.Request) (crreconcile.Result, error) {
				c.call(req.Name)
				return crreconcile.Result{}, nil
			}),
		})
		if err != nil {
			b.Fatal(err)
		}
		h := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []crreconcile.Request {
			names := m.keysOf(o)
			reqs := make([]crreconcile.Request, len(names))
			for i, n := range names {
				reqs[i] = crreconcile.Request{NamespacedName: types.NamespacedName{Name: n}}
			}
			return reqs
		})
		if err := ctl.Watch(&crsource.Informer{Informer: inf, Handler: h}); err != nil {
			b.Fatal(err)
		}
		go func() { errc <- ctl.Start(ctx) }()
	}
	start, live = mapPhases(b, m, counters, t0, cancel, errc)
	icancel()
	<-idone
	return start, live
}

// BenchmarkMapperSources: see the comment at the top of the file.
func BenchmarkMapperSources(b *testing.B) {
	impls := []struct {
		name string
		run  func(*testing.B, *mapWorld, int, int) (time.Duration, time.Duration)
	}{{"ctrlkit", mapCtrlkit}, {"controller-runtime", mapControllerRuntime}}
	for _, s := range mapShapes {
		for _, n := range []int{100, 1_000, 10_000, 100_000} {
			if n < 10_000 && s.name != "byobject" {
				continue // small informers: the start latency, on byobject only
			}
			for _, controllers := range []int{1, 10} {
				if controllers > 1 && s.name != "byobject" {
					continue
				}
				for _, impl := range impls {
					b.Run(fmt.Sprintf("%s/n=%d/controllers=%d/impl=%s", s.name, n, controllers, impl.name), func(b *testing.B) {
						b.ReportAllocs()
						var start, live time.Duration
						objs, want := mapObjects(s, n)
						for b.Loop() {
							m := &mapWorld{shape: s, n: n, objs: objs, w: watch.NewFake()}
							st, lv := impl.run(b, m, controllers, 4)
							start += st
							live += lv
						}
						b.ReportMetric(float64(start.Nanoseconds())/float64(b.N*want*controllers), "start-ns/key")
						b.ReportMetric(float64(live.Nanoseconds())/float64(b.N*len(objs)), "live-ns/event")
						b.ReportMetric(float64(start.Microseconds())/float64(b.N), "start-us")
					})
				}
			}
		}
	}
}
