package bench

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// The shape benchmarks drive both informers from one scripted in-memory
// source: the i-th List returns the i-th list of the script (the last one
// after that), the i-th watch sends the i-th script of events once the
// source is started (the first) or at once (later ones), then stays open.

type shList struct {
	objs []*corev1.ConfigMap
	cg   *corev1.ConfigMapList
}

func newShList(rv int, objs []*corev1.ConfigMap) shList {
	cg := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(rv)}, Items: make([]corev1.ConfigMap, len(objs))}
	for i, o := range objs {
		cg.Items[i] = *o
		objs[i] = &cg.Items[i]
	}
	return shList{objs: objs, cg: cg}
}

type shSource struct {
	lists   []shList
	watches [][]watch.Event
	start   chan struct{}

	mu         sync.Mutex
	listCalls  int
	watchCalls int
	open       []*infWatch
}

func (s *shSource) list() shList {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lists[min(s.listCalls, len(s.lists)-1)]
	s.listCalls++
	return l
}

func (s *shSource) watch() watch.Interface {
	s.mu.Lock()
	defer s.mu.Unlock()
	var evs []watch.Event
	if s.watchCalls < len(s.watches) {
		evs = s.watches[s.watchCalls]
	}
	first := s.watchCalls == 0
	s.watchCalls++
	w := &infWatch{ch: make(chan watch.Event), done: make(chan struct{})}
	s.open = append(s.open, w)
	start := s.start
	go func() {
		if first {
			select {
			case <-start:
			case <-w.done:
				return
			}
		}
		for _, e := range evs {
			select {
			case w.ch <- e:
			case <-w.done:
				return
			}
		}
	}()
	return w
}

func (s *shSource) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.open {
		w.Stop()
	}
}

func (s *shSource) ckLW() reflector.ListerWatcher[*corev1.ConfigMap] {
	return reflector.Funcs[*corev1.ConfigMap]{
		ListFunc: func(context.Context, metav1.ListOptions) ([]*corev1.ConfigMap, metav1.ListMeta, error) {
			l := s.list()
			return append([]*corev1.ConfigMap(nil), l.objs...), l.cg.ListMeta, nil
		},
		WatchFunc: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return s.watch(), nil },
	}
}

type shCGLW struct{ s *shSource }

func (l shCGLW) List(metav1.ListOptions) (k8sruntime.Object, error) { return l.s.list().cg, nil }
func (l shCGLW) Watch(metav1.ListOptions) (watch.Interface, error)  { return l.s.watch(), nil }
func (l shCGLW) IsWatchListSemanticsUnSupported() bool              { return true }

func shObjs(n, rv0 int) []*corev1.ConfigMap {
	out := make([]*corev1.ConfigMap, n)
	for i := range out {
		out[i] = infConfigMap(i, rv0+i)
	}
	return out
}

// shHandler is a handler's functions, for both libraries.
type shHandler struct {
	add    func(obj *corev1.ConfigMap, initial bool)
	update func(old, new *corev1.ConfigMap)
	del    func(obj *corev1.ConfigMap)
}

// shInformer is a running informer of either library.
type shInformer struct {
	addHandler func(h shHandler, resync time.Duration) (remove func())
	synced     func() bool
	stop       func()
}

type shConfig struct {
	resync      time.Duration // every handler's
	bufferLimit int           // ctrlkit's; 0: the default
}

func shStartCtrlkit(b *testing.B, s *shSource, cfg shConfig) *shInformer {
	inf := informer.New(s.ckLW(), informer.Config[*corev1.ConfigMap]{
		Reflector: reflector.Config[*corev1.ConfigMap]{WatchList: reflector.WatchListOff},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	return &shInformer{
		addHandler: func(h shHandler, resync time.Duration) func() {
			if resync == 0 {
				resync = -1
			}
			reg, err := inf.AddHandler(informer.HandlerFuncs[*corev1.ConfigMap]{
				AddFunc:    h.add,
				UpdateFunc: h.update,
				DeleteFunc: func(d informer.Deleted[*corev1.ConfigMap]) { h.del(d.Obj) },
			}, informer.HandlerOptions{BufferLimit: cfg.bufferLimit, ResyncPeriod: resync})
			if err != nil {
				b.Fatal(err)
			}
			return func() {
				if err := inf.RemoveHandler(reg); err != nil {
					b.Fatal(err)
				}
			}
		},
		synced: inf.HasSynced,
		stop: func() {
			s.stop()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		},
	}
}

func shStartClientgo(b *testing.B, s *shSource, cfg shConfig) *shInformer {
	inf := cache.NewSharedIndexInformer(shCGLW{s}, &corev1.ConfigMap{}, cfg.resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { inf.Run(stop); close(done) }()
	return &shInformer{
		addHandler: func(h shHandler, resync time.Duration) func() {
			reg, err := inf.AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerDetailedFuncs{
				AddFunc:    func(o any, initial bool) { h.add(o.(*corev1.ConfigMap), initial) },
				UpdateFunc: func(o, n any) { h.update(o.(*corev1.ConfigMap), n.(*corev1.ConfigMap)) },
				DeleteFunc: func(o any) {
					if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
						o = t.Obj
					}
					h.del(o.(*corev1.ConfigMap))
				},
			}, resync)
			if err != nil {
				b.Fatal(err)
			}
			return func() {
				if err := inf.RemoveEventHandler(reg); err != nil {
					b.Fatal(err)
				}
			}
		},
		synced: inf.HasSynced,
		stop: func() {
			s.stop()
			close(stop)
			<-done
		},
	}
}

var shImpls = []struct {
	name  string
	start func(*testing.B, *shSource, shConfig) *shInformer
}{
	{"ctrlkit", shStartCtrlkit},
	{"client-go", shStartClientgo},
}

// shCount counts calls and closes a channel when a target is reached.
type shCount struct {
	n      atomic.Int64
	target int64
	done   chan struct{}
}

func newShCount(target int) *shCount {
	c := &shCount{target: int64(target), done: make(chan struct{})}
	if target == 0 {
		close(c.done)
	}
	return c
}

func (c *shCount) call() {
	if c.n.Add(1) == c.target {
		close(c.done)
	}
}

func (c *shCount) wait(b *testing.B, what string) {
	select {
	case <-c.done:
	case <-time.After(3 * time.Minute):
		b.Fatalf("%s: %d of %d calls", what, c.n.Load(), c.target)
	}
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkShapeBookmarks: after a list of 1,000 keys, a watch where each
// change is followed by 9 bookmarks. One op is one change (10 frames).
func BenchmarkShapeBookmarks(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		list := shObjs(1000, 1)
		var evs []watch.Event
		for i := range n {
			rv := 2000 + 10*i
			evs = append(evs, watch.Event{Type: watch.Modified, Object: infConfigMap(i%1000, rv)})
			for j := 1; j < 10; j++ {
				evs = append(evs, watch.Event{Type: watch.Bookmark, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.Itoa(rv + j)}}})
			}
		}
		l := newShList(1000, list)
		for _, impl := range shImpls {
			b.Run(fmt.Sprintf("changes=%d/impl=%s", n, impl.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					s := &shSource{lists: []shList{l}, watches: [][]watch.Event{evs}, start: make(chan struct{})}
					inf := impl.start(b, s, shConfig{bufferLimit: 1 << 40})
					initial, changes := newShCount(1000), newShCount(n)
					inf.addHandler(shHandler{
						add:    func(*corev1.ConfigMap, bool) { initial.call() },
						update: func(_, _ *corev1.ConfigMap) { changes.call() },
						del:    func(*corev1.ConfigMap) {},
					}, 0)
					initial.wait(b, "list")
					b.StartTimer()
					close(s.start)
					changes.wait(b, "changes")
					b.StopTimer()
					inf.stop()
					b.StartTimer()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/change")
			})
		}
	}
}

// BenchmarkShapeRelistShrink: a list of n objects, then the watch says 410
// Gone and the relist holds n/100 of them (the rest were deleted). One op is
// from the 410 to the last deletion handled; cpu-ms is the process's CPU
// time meanwhile (client-go waits for its backoff before the relist).
func BenchmarkShapeRelistShrink(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		first := newShList(n+1, shObjs(n, 1))
		second := newShList(n+2, append([]*corev1.ConfigMap(nil), first.objs[:n/100]...))
		shRelist(b, n, []shList{first, second}, nil, n-n/100, true)
	}
}

// BenchmarkShapeRelistUnchanged: a list of n objects, then the watch says 410
// Gone and the relist returns the same objects (nothing changed). One op is
// from the 410 to a change sent by the next watch being handled; cpu-ms as
// above.
func BenchmarkShapeRelistUnchanged(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		first := newShList(n+1, shObjs(n, 1))
		after := watch.Event{Type: watch.Modified, Object: infConfigMap(0, n+5)}
		shRelist(b, n, []shList{first}, []watch.Event{after}, 1, false)
	}
}

// shRelist runs a relist benchmark over n listed objects for both libraries: the
// first watch says 410 Gone, the second sends then; an op ends once the handler
// has seen want deletions (deletes) or updates.
func shRelist(b *testing.B, n int, lists []shList, then []watch.Event, want int, deletes bool) {
	gone := watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old").ErrStatus}
	for _, impl := range shImpls {
		b.Run(fmt.Sprintf("objects=%d/impl=%s", n, impl.name), func(b *testing.B) {
			b.ReportAllocs()
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				s := &shSource{lists: lists, watches: [][]watch.Event{{gone}, then}, start: make(chan struct{})}
				inf := impl.start(b, s, shConfig{bufferLimit: 1 << 40})
				initial, changes := newShCount(n), newShCount(want)
				h := shHandler{
					add:    func(*corev1.ConfigMap, bool) { initial.call() },
					update: func(_, _ *corev1.ConfigMap) {},
					del:    func(*corev1.ConfigMap) {},
				}
				if deletes {
					h.del = func(*corev1.ConfigMap) { changes.call() }
				} else {
					h.update = func(_, _ *corev1.ConfigMap) { changes.call() }
				}
				inf.addHandler(h, 0)
				initial.wait(b, "list")
				runtime.GC()
				c0 := cpuNow()
				b.StartTimer()
				close(s.start)
				changes.wait(b, "changes")
				b.StopTimer()
				cpu += cpuNow() - c0
				inf.stop()
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}

// BenchmarkShapeSlowHandler: 1,000 keys, 9 handlers that count and one that
// spins 20µs per call; one op is n events handled by the 9 fast ones
// (until they have the last).
// heap-MB is the live heap when they are done (the slow one's backlog).
// ctrlkit's handlers keep the default BufferLimit.
func BenchmarkShapeSlowHandler(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		l := newShList(1000, shObjs(1000, 1))
		_, pool := infInputs()
		evs := make([]watch.Event, n+1)
		for i := range n {
			evs[i] = pool[i%len(pool)]
		}
		// The last event adds a key of its own: a handler has caught up when it
		// has it (ctrlkit's may coalesce what came before, as documented).
		marker := infConfigMap(1000, 1<<30)
		evs[n] = watch.Event{Type: watch.Added, Object: marker}
		for _, impl := range shImpls {
			b.Run(fmt.Sprintf("events=%d/impl=%s", n, impl.name), func(b *testing.B) {
				b.ReportAllocs()
				var heap uint64
				for b.Loop() {
					b.StopTimer()
					s := &shSource{lists: []shList{l}, watches: [][]watch.Event{evs}, start: make(chan struct{})}
					inf := impl.start(b, s, shConfig{})
					var fast []*shCount
					initial := newShCount(10 * 1000)
					for h := range 10 {
						c := newShCount(1)
						spin := h == 9
						call := func() {
							if spin {
								for t := time.Now(); time.Since(t) < 20*time.Microsecond; {
								}
							}
						}
						if !spin {
							fast = append(fast, c)
						}
						inf.addHandler(shHandler{
							add: func(o *corev1.ConfigMap, initialList bool) {
								if initialList {
									initial.call()
									return
								}
								call()
								if o == marker {
									c.call()
								}
							},
							update: func(_, _ *corev1.ConfigMap) { call() },
							del:    func(*corev1.ConfigMap) { call() },
						}, 0)
					}
					initial.wait(b, "list")
					runtime.GC()
					var m0 runtime.MemStats
					runtime.ReadMemStats(&m0)
					b.StartTimer()
					close(s.start)
					for _, c := range fast {
						c.wait(b, "fast handler")
					}
					b.StopTimer()
					runtime.GC()
					var m1 runtime.MemStats
					runtime.ReadMemStats(&m1)
					if m1.HeapAlloc > m0.HeapAlloc {
						heap += m1.HeapAlloc - m0.HeapAlloc
					}
					inf.stop()
					b.StartTimer()
				}
				b.ReportMetric(float64(heap)/1e6/float64(b.N), "heap-MB")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
			})
		}
	}
}

// BenchmarkShapeLateHandler: a handler added to a synced informer of n
// objects, until it has had them all. One op is one handler added and
// replayed, then removed.
func BenchmarkShapeLateHandler(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		l := newShList(n+1, shObjs(n, 1))
		for _, impl := range shImpls {
			b.Run(fmt.Sprintf("objects=%d/impl=%s", n, impl.name), func(b *testing.B) {
				s := &shSource{lists: []shList{l}, start: make(chan struct{})}
				inf := impl.start(b, s, shConfig{})
				first := newShCount(n)
				inf.addHandler(shHandler{add: func(*corev1.ConfigMap, bool) { first.call() }, update: func(_, _ *corev1.ConfigMap) {}, del: func(*corev1.ConfigMap) {}}, 0)
				first.wait(b, "list")
				b.ReportAllocs()
				for b.Loop() {
					c := newShCount(n)
					remove := inf.addHandler(shHandler{add: func(*corev1.ConfigMap, bool) { c.call() }, update: func(_, _ *corev1.ConfigMap) {}, del: func(*corev1.ConfigMap) {}}, 0)
					c.wait(b, "replay")
					remove()
				}
				b.StopTimer()
				inf.stop()
			})
		}
	}
}

// BenchmarkShapeResync: n cached objects, one handler with a 1s resync. One
// op is one resync round: from its first OnUpdate(obj, obj) to its last
// (round-ms), and the process's CPU time per round (cpu-ms).
func BenchmarkShapeResync(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		l := newShList(n+1, shObjs(n, 1))
		for _, impl := range shImpls {
			b.Run(fmt.Sprintf("objects=%d/impl=%s", n, impl.name), func(b *testing.B) {
				s := &shSource{lists: []shList{l}, start: make(chan struct{})}
				inf := impl.start(b, s, shConfig{resync: time.Second})
				initial := newShCount(n)
				var mu sync.Mutex
				var cur *shCount
				var firstAt time.Time
				next := func() *shCount {
					mu.Lock()
					defer mu.Unlock()
					cur = newShCount(n)
					firstAt = time.Time{}
					return cur
				}
				next()
				inf.addHandler(shHandler{
					add: func(*corev1.ConfigMap, bool) { initial.call() },
					update: func(_, _ *corev1.ConfigMap) {
						mu.Lock()
						c := cur
						if firstAt.IsZero() {
							firstAt = time.Now()
						}
						mu.Unlock()
						c.call()
					},
					del: func(*corev1.ConfigMap) {},
				}, time.Second)
				initial.wait(b, "list")
				var round, cpu time.Duration
				rounds := 0
				c := next()
				for b.Loop() {
					c.wait(b, "resync")
					mu.Lock()
					round += time.Since(firstAt)
					mu.Unlock()
					c0 := cpuNow()
					c = next()
					c.wait(b, "resync")
					mu.Lock()
					round += time.Since(firstAt)
					mu.Unlock()
					cpu += cpuNow() - c0
					rounds += 2
					c = next()
				}
				b.StopTimer()
				inf.stop()
				b.ReportMetric(float64(round.Microseconds())/1000/float64(rounds), "round-ms")
				b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/s")
			})
		}
	}
}
