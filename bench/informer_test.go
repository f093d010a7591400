package bench

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// The informer benchmarks measure library overhead: both informers read the same
// pre-decoded *corev1.ConfigMap objects from an in-memory list and watch (no
// server, no decoding), keep a cache with the namespace index, and hand every
// change to 1 or 10 handlers that only count their calls. The watch delivers its
// events through an unbuffered channel, as client-go's stream watcher does.
//
// ctrlkit's handlers get an unbounded BufferLimit so that they are called once
// per event, like client-go's: the work measured is the same, with no coalescing.

const (
	infKeys       = 1000      // objects in the list, and keys the events cycle through
	infNamespaces = 10        // namespaces of those objects
	infPool       = 10 * 5000 // pre-built events; a multiple of 10·infKeys (see infEvents)
)

var (
	infOnce   sync.Once
	infList   []*corev1.ConfigMap
	infCGList *corev1.ConfigMapList // the same objects as a list object, for client-go
	infStream []watch.Event
)

func infConfigMap(i int, rv int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       "ns-" + strconv.Itoa(i%infNamespaces),
			Name:            "cm-" + strconv.Itoa(i),
			ResourceVersion: strconv.Itoa(rv),
			UID:             "7d3c4a5e-0b1f-4c2d-9e8f-1a2b3c4d5e6f",
			Labels:          map[string]string{"app": "app-" + strconv.Itoa(i%7), "tier": "backend"},
		},
		Data: map[string]string{"config.yaml": "key: value\n", "n": strconv.Itoa(rv)},
	}
}

// infInputs builds the list and the event pool once. Event i changes key i%infKeys;
// in each run of ten rounds over the keys, eight modify, one deletes and one
// re-creates every key, so the pool can be replayed in a loop.
func infInputs() ([]*corev1.ConfigMap, []watch.Event) {
	infOnce.Do(func() {
		infList = make([]*corev1.ConfigMap, infKeys)
		infCGList = &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(infKeys)}, Items: make([]corev1.ConfigMap, infKeys)}
		for i := range infList {
			infCGList.Items[i] = *infConfigMap(i, i+1)
			infList[i] = &infCGList.Items[i]
		}
		infStream = make([]watch.Event, infPool)
		for i := range infStream {
			k, round := i%infKeys, i/infKeys
			ev := watch.Event{Type: watch.Modified, Object: infConfigMap(k, infKeys+1+i)}
			switch round % 10 {
			case 8:
				ev.Type = watch.Deleted
			case 9:
				ev.Type = watch.Added
			}
			infStream[i] = ev
		}
	})
	return infList, infStream
}

// infWatch sends n events of the pool once start is closed, then stays open
// until stopped.
type infWatch struct {
	ch   chan watch.Event
	done chan struct{}
	once sync.Once
}

func infNewWatch(start <-chan struct{}, n int) *infWatch {
	_, pool := infInputs()
	w := &infWatch{ch: make(chan watch.Event), done: make(chan struct{})}
	go func() {
		select {
		case <-start:
		case <-w.done:
			return
		}
		for i := range n {
			select {
			case w.ch <- pool[i%len(pool)]:
			case <-w.done:
				return
			}
		}
	}()
	return w
}

func (w *infWatch) Stop()                          { w.once.Do(func() { close(w.done) }) }
func (w *infWatch) ResultChan() <-chan watch.Event { return w.ch }

// infSource hands out the list, the first watch (the event stream) and then
// idle watches. It is shared by both libraries' ListerWatchers.
type infSource struct {
	start   chan struct{}
	n       int
	mu      sync.Mutex
	watches []*infWatch
}

func (s *infSource) watch() *infWatch {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	if len(s.watches) == 0 {
		n = s.n
	}
	w := infNewWatch(s.start, n)
	s.watches = append(s.watches, w)
	return w
}

func (s *infSource) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.watches {
		w.Stop()
	}
}

// ctrlkit's ListerWatcher over the source.
func (s *infSource) ckLW() reflector.ListerWatcher[*corev1.ConfigMap] {
	list, _ := infInputs()
	return reflector.Funcs[*corev1.ConfigMap]{
		ListFunc: func(context.Context, metav1.ListOptions) ([]*corev1.ConfigMap, metav1.ListMeta, error) {
			return append([]*corev1.ConfigMap(nil), list...), metav1.ListMeta{ResourceVersion: strconv.Itoa(infKeys)}, nil
		},
		WatchFunc: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return s.watch(), nil },
	}
}

// infCGLW is client-go's ListerWatcher over the source. It declares that it cannot
// stream lists, as client-go asks of in-memory ListerWatchers.
type infCGLW struct{ s *infSource }

// List returns the shared list object: neither informer changes the objects it
// stores, and ctrlkit's List shares them too (it copies only the slice).
func (l infCGLW) List(metav1.ListOptions) (runtime.Object, error) {
	infInputs()
	return infCGList, nil
}
func (l infCGLW) Watch(metav1.ListOptions) (watch.Interface, error) { return l.s.watch(), nil }
func (l infCGLW) IsWatchListSemanticsUnSupported() bool             { return true }

// infCounter counts a handler's calls, apart from the initial list, and closes
// done when it reaches target.
type infCounter struct {
	initial     atomic.Int64
	initialDone chan struct{} // closed when initial reaches infKeys
	n           atomic.Int64
	target      int64
	done        chan struct{}
}

func (c *infCounter) call() {
	if c.n.Add(1) == c.target {
		close(c.done)
	}
}

func (c *infCounter) add(initial bool) {
	if initial {
		if c.initial.Add(1) == infKeys {
			close(c.initialDone)
		}
		return
	}
	c.call()
}

// infRun is one informer of either library, running over a source.
type infRun struct {
	counters []*infCounter
	stop     func()
	extra    func(b *testing.B)
}

func infNewCounters(handlers int, target int64) []*infCounter {
	cs := make([]*infCounter, handlers)
	for i := range cs {
		cs[i] = &infCounter{target: target, done: make(chan struct{}), initialDone: make(chan struct{})}
	}
	return cs
}

func infStartCtrlkit(b *testing.B, src *infSource, handlers int, target int64) *infRun {
	inf := informer.New(src.ckLW(), informer.Config[*corev1.ConfigMap]{
		Reflector: reflector.Config[*corev1.ConfigMap]{WatchList: reflector.WatchListOff},
	})
	r := &infRun{counters: infNewCounters(handlers, target)}
	var regs []*informer.Registration[*corev1.ConfigMap]
	for _, c := range r.counters {
		reg, err := inf.AddHandler(informer.HandlerFuncs[*corev1.ConfigMap]{
			AddFunc:    func(_ *corev1.ConfigMap, initial bool) { c.add(initial) },
			UpdateFunc: func(_, _ *corev1.ConfigMap) { c.call() },
			DeleteFunc: func(informer.Deleted[*corev1.ConfigMap]) { c.call() },
		}, informer.HandlerOptions{BufferLimit: math.MaxInt})
		if err != nil {
			b.Fatal(err)
		}
		regs = append(regs, reg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	r.stop = func() {
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	r.extra = func(b *testing.B) {
		for _, reg := range regs {
			if s := reg.Stats(); s.Coalesced != 0 {
				b.Fatalf("ctrlkit coalesced %d changes", s.Coalesced)
			}
		}
	}
	return r
}

func infStartClientgo(b *testing.B, src *infSource, handlers int, target int64) *infRun {
	inf := cache.NewSharedIndexInformer(infCGLW{src}, &corev1.ConfigMap{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	r := &infRun{counters: infNewCounters(handlers, target)}
	for _, c := range r.counters {
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    func(_ any, initial bool) { c.add(initial) },
			UpdateFunc: func(_, _ any) { c.call() },
			DeleteFunc: func(any) { c.call() },
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	stopCh := make(chan struct{})
	done := make(chan struct{})
	go func() { inf.Run(stopCh); close(done) }()
	r.stop = func() { close(stopCh); <-done }
	return r
}

// waitInitial waits until every handler has its initial list.
func (r *infRun) waitInitial(b *testing.B) {
	timeout := time.After(time.Minute)
	for _, c := range r.counters {
		select {
		case <-c.initialDone:
		case <-timeout:
			b.Fatal("the initial list did not reach the handlers")
		}
	}
}

func (r *infRun) wait() {
	for _, c := range r.counters {
		<-c.done
	}
}

var infImpls = []struct {
	name  string
	start func(*testing.B, *infSource, int, int64) *infRun
}{
	{"ctrlkit", infStartCtrlkit},
	{"client-go", infStartClientgo},
}

// BenchmarkInformerEvents: watch events per second through the informer to 1
// and to 10 handlers, after an initial list of infKeys objects. One op is one
// watch event delivered to every handler.
func BenchmarkInformerEvents(b *testing.B) {
	infInputs()
	for _, handlers := range []int{1, 10} {
		for _, impl := range infImpls {
			b.Run(fmt.Sprintf("handlers=%d/impl=%s", handlers, impl.name), func(b *testing.B) {
				src := &infSource{start: make(chan struct{}), n: b.N}
				r := impl.start(b, src, handlers, int64(b.N))
				r.waitInitial(b)
				b.ReportAllocs()
				b.ResetTimer()
				close(src.start)
				r.wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
				src.stop()
				r.stop()
				if r.extra != nil {
					r.extra(b)
				}
			})
		}
	}
}

// BenchmarkInformerInitialList: from Run to every handler having the initial
// list of infKeys objects as adds. One op is one informer started and synced.
func BenchmarkInformerInitialList(b *testing.B) {
	infInputs()
	for _, handlers := range []int{1, 10} {
		for _, impl := range infImpls {
			b.Run(fmt.Sprintf("handlers=%d/impl=%s", handlers, impl.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					src := &infSource{start: make(chan struct{}), n: 0}
					r := impl.start(b, src, handlers, math.MaxInt64)
					r.waitInitial(b)
					b.StopTimer()
					src.stop()
					r.stop()
					b.StartTimer()
				}
			})
		}
	}
}
