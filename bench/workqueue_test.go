package bench

// Side-by-side benchmarks of ctrlkit/workqueue and client-go v0.37.2 util/workqueue.
// Each case runs both implementations on identical inputs; sub-benchmarks are named
// impl=ctrlkit and impl=clientgo so that `benchstat -col /impl` prints the ratio.
//
//	go test -run '^$' -bench Workqueue -benchmem -count 5 ./bench/
//
// The AddAfter case fires every item, so run it with -benchtime=1000000x to get the
// million-item figure (and the same number of items for both); so do AddAfterLong and
// AddAfterMixed, whose schedules grow with b.N. WorkqueueWaitingMemory always uses a
// million items. In WorkqueueDedup most adds are absorbed by dedup, and how many are
// handed out (gets/op) depends on how adders and workers interleave, so read its ns/op
// with gets/op. Besides ns/op, the timed cases report cpu-ns/op, the
// process's CPU time per op (see wqCPU): on a shared machine ns/op swings with other
// processes' load, and favours whichever implementation keeps more threads runnable.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cgwq "k8s.io/client-go/util/workqueue"

	"github.com/ctrlkit/ctrlkit/workqueue"
)

// wqQueue is what the harness needs from either implementation; both adapters pay the same
// interface-call overhead.
type wqQueue interface {
	add(item string)
	addAfter(item string, d time.Duration)
	addRateLimited(item string)
	get() (string, bool)
	done(item string)
	drain()
	shutDown()
}

type wqCtrlkit struct {
	q   *workqueue.Queue[string]
	ctx context.Context // a cancellable context, as workers really pass
}

func wqNewCtrlkit() wqQueue { return wqNewCtrlkitWith(workqueue.Config[string]{}) }

// wqNewCtrlkitNoKeep turns off the finished-item cache (Config.KeepFinished), to show how
// much of the Add/Get/Done gain comes from it.
func wqNewCtrlkitNoKeep() wqQueue {
	return wqNewCtrlkitWith(workqueue.Config[string]{KeepFinished: -1})
}

func wqNewCtrlkitWith(cfg workqueue.Config[string]) wqQueue {
	ctx, cancel := context.WithCancel(context.Background())
	_ = cancel // the context lives as long as the benchmark process; cancel is not needed
	return &wqCtrlkit{q: workqueue.New(cfg), ctx: ctx}
}

func (c *wqCtrlkit) add(item string)                       { c.q.Add(item) }
func (c *wqCtrlkit) addAfter(item string, d time.Duration) { c.q.AddAfter(item, d) }
func (c *wqCtrlkit) addRateLimited(item string)            { c.q.AddRateLimited(item) }
func (c *wqCtrlkit) done(item string)                      { c.q.Done(item) }
func (c *wqCtrlkit) shutDown()                             { c.q.ShutDown() }
func (c *wqCtrlkit) get() (string, bool) {
	item, err := c.q.Get(c.ctx)
	return item, err == nil
}
func (c *wqCtrlkit) drain() {
	if err := c.q.ShutDownWithDrain(context.Background()); err != nil {
		panic(err)
	}
}

type wqClientgo struct {
	q cgwq.TypedRateLimitingInterface[string]
}

func wqNewClientgo() wqQueue {
	return &wqClientgo{q: cgwq.NewTypedRateLimitingQueue(cgwq.DefaultTypedControllerRateLimiter[string]())}
}

func (c *wqClientgo) add(item string)                       { c.q.Add(item) }
func (c *wqClientgo) addAfter(item string, d time.Duration) { c.q.AddAfter(item, d) }
func (c *wqClientgo) addRateLimited(item string)            { c.q.AddRateLimited(item) }
func (c *wqClientgo) done(item string)                      { c.q.Done(item) }
func (c *wqClientgo) drain()                                { c.q.ShutDownWithDrain() }
func (c *wqClientgo) shutDown()                             { c.q.ShutDown() }
func (c *wqClientgo) get() (string, bool) {
	item, shutdown := c.q.Get()
	return item, !shutdown
}

// wqImpl is an implementation under test: impl=name.
type wqImpl struct {
	name string
	mk   func() wqQueue
}

var wqImpls = []wqImpl{
	{"ctrlkit", wqNewCtrlkit},
	{"clientgo", wqNewClientgo},
}

// wqImplsNoKeep adds impl=ctrlkit-nokeep: ctrlkit with Config.KeepFinished < 0.
var wqImplsNoKeep = append(wqImpls[:len(wqImpls):len(wqImpls)], wqImpl{"ctrlkit-nokeep", wqNewCtrlkitNoKeep})

// wqKeys returns n distinct namespace/name keys, the shape controllers queue.
func wqKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("namespace-%d/object-%d", i%97, i)
	}
	return keys
}

// BenchmarkWorkqueueAddGetDone: P producers and W workers move b.N items through
// Add → Get → Done, cycling through K distinct keys. Producer p owns the keys whose index is
// p mod P and adds them in rounds; it starts a round only when its previous round has been
// processed, so no Add is absorbed by dedup and every op is one full cycle.
// impl=ctrlkit-nokeep runs ctrlkit with Config.KeepFinished < 0 (no finished-item cache).
// impl=floor is a buffered channel, the runtime's own hand-off (see wqFloor).
func BenchmarkWorkqueueAddGetDone(b *testing.B) {
	for _, c := range []struct{ p, w, k int }{{4, 4, 1000}, {1, 1, 100000}, {8, 16, 10000}, {1, 1, 1000}, {4, 16, 1000}, {4, 64, 10000}} {
		keys := wqOwnedKeys(c.k, c.p)
		for _, impl := range wqWithFloor(wqImplsNoKeep, c.k) {
			b.Run(fmt.Sprintf("p%dw%dk%d/impl=%s", c.p, c.w, c.k, impl.name), func(b *testing.B) {
				wqRunAddGetDone(b, impl.mk(), c.p, c.w, keys)
			})
		}
	}
}

// wqOwnedKeys returns k keys split among p producers; a key's first two bytes name its
// producer, so workers find it without a lookup.
func wqOwnedKeys(k, p int) [][]string {
	owned := make([][]string, p)
	for i := range k {
		owned[i%p] = append(owned[i%p], fmt.Sprintf("%02d/namespace-%d/object-%d", i%p, i%97, i))
	}
	return owned
}

func wqRunAddGetDone(b *testing.B, q wqQueue, producers, workers int, keys [][]string) {
	wqRunAddGetDoneOf(b, q, producers, workers, keys, func(item string) int {
		return int(item[0]-'0')*10 + int(item[1]-'0')
	})
}

// wqQueueOf is the part of a queue of items of type T that Add/Get/Done needs.
type wqQueueOf[T comparable] interface {
	add(item T)
	get() (T, bool)
	done(item T)
	drain()
}

// wqRunAddGetDoneOf runs Add/Get/Done of keys[p] by producer p; owner returns an
// item's producer.
func wqRunAddGetDoneOf[T comparable](b *testing.B, q wqQueueOf[T], producers, workers int, keys [][]T, owner func(T) int) {
	b.ReportAllocs()
	type round struct {
		pending atomic.Int64  // items of the current round not yet Done
		next    chan struct{} // receives when pending reaches 0
	}
	rounds := make([]round, producers)
	for i := range rounds {
		rounds[i].next = make(chan struct{}, 1)
	}
	var gets atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			n := int64(0)
			for {
				item, ok := q.get()
				if !ok {
					break
				}
				q.done(item)
				n++
				r := &rounds[owner(item)]
				if r.pending.Add(-1) == 0 {
					r.next <- struct{}{}
				}
			}
			gets.Add(n)
		})
	}
	b.ResetTimer()
	cpu := wqCPUStart()
	var pwg sync.WaitGroup
	for p := range producers {
		pwg.Go(func() {
			mine := keys[p]
			total := b.N / producers
			if p < b.N%producers {
				total++
			}
			for n := 0; n < total; {
				size := min(len(mine), total-n)
				rounds[p].pending.Store(int64(size))
				for _, k := range mine[:size] {
					q.add(k)
				}
				n += size
				<-rounds[p].next
			}
		})
	}
	pwg.Wait()
	q.drain()
	wg.Wait()
	b.StopTimer()
	cpu.report(b)
	if g := gets.Load(); g != int64(b.N) {
		b.Fatalf("%d items processed for %d adds", g, b.N)
	}
}

// BenchmarkWorkqueueSerial is the cycle of BenchmarkWorkqueueAddGetDone with 1k keys
// in one goroutine: Add every key, then Get and Done each, again and again (ns per
// item). With a producer and a worker of their own, the 1×1 shapes also measure how
// the Go scheduler places the two goroutines; this is the queue's own cost of the
// cycle, locks included, without that.
func BenchmarkWorkqueueSerial(b *testing.B) {
	keys := wqKeys(1000)
	for _, impl := range wqWithLockFloor(wqImpls) {
		b.Run("impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			q := impl.mk()
			for n := 0; b.Loop(); {
				if n%len(keys) == 0 {
					for _, k := range keys {
						q.add(k)
					}
				}
				item, ok := q.get()
				if !ok {
					b.Fatal("the queue shut down")
				}
				q.done(item)
				n++
			}
			q.shutDown()
		})
	}
}

// BenchmarkWorkqueueOneAtATime: one goroutine adds an item, takes it and finishes it,
// again and again, over 1k keys (keys) or a new item each time (distinct): the queue
// never holds more than one item, the simplest benchmark of a queue there is, and the
// case where staging an add for the next Get (BenchmarkWorkqueueSerial batches 1k)
// saves nothing. ns per item.
func BenchmarkWorkqueueOneAtATime(b *testing.B) {
	keys := wqKeys(1000)
	distinct := wqKeys(1 << 16)
	for _, c := range []struct {
		name string
		keys []string
	}{{"keys", keys}, {"distinct", distinct}} {
		for _, impl := range wqImpls {
			b.Run(c.name+"/impl="+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				q := impl.mk()
				for n := 0; b.Loop(); n++ {
					q.add(c.keys[n%len(c.keys)])
					item, ok := q.get()
					if !ok {
						b.Fatal("the queue shut down")
					}
					q.done(item)
				}
				q.shutDown()
			})
		}
	}
}

// BenchmarkWorkqueueStructItems is BenchmarkWorkqueueAddGetDone with items of type
// types.NamespacedName, the item controller-runtime queues (its reconcile.Request
// wraps one), instead of strings: both queues hash and compare a struct of two
// strings. The namespace's first two bytes name the item's producer.
func BenchmarkWorkqueueStructItems(b *testing.B) {
	for _, c := range []struct{ p, w, k int }{{1, 1, 1000}, {4, 4, 1000}} {
		keys := make([][]types.NamespacedName, c.p)
		for i := range c.k {
			keys[i%c.p] = append(keys[i%c.p], types.NamespacedName{
				Namespace: fmt.Sprintf("%02d-namespace-%d", i%c.p, i%97),
				Name:      fmt.Sprintf("object-%d", i),
			})
		}
		owner := func(item types.NamespacedName) int {
			return int(item.Namespace[0]-'0')*10 + int(item.Namespace[1]-'0')
		}
		b.Run(fmt.Sprintf("p%dw%dk%d/impl=ctrlkit", c.p, c.w, c.k), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background()) // as workers really pass
			defer cancel()
			q := workqueue.New(workqueue.Config[types.NamespacedName]{})
			wqRunAddGetDoneOf[types.NamespacedName](b, wqCtrlkitOf[types.NamespacedName]{q, ctx}, c.p, c.w, keys, owner)
		})
		b.Run(fmt.Sprintf("p%dw%dk%d/impl=clientgo", c.p, c.w, c.k), func(b *testing.B) {
			q := cgwq.NewTypedRateLimitingQueue(cgwq.DefaultTypedControllerRateLimiter[types.NamespacedName]())
			wqRunAddGetDoneOf[types.NamespacedName](b, wqClientgoOf[types.NamespacedName]{q}, c.p, c.w, keys, owner)
		})
	}
}

// BenchmarkWorkqueuePointerItems is BenchmarkWorkqueueAddGetDone with items that are
// pointers to the objects themselves (*corev1.ConfigMap, one per key), as a controller
// that queues its objects does: both queues hash and compare a pointer, the cheapest
// item there is, so each side's own hand-off is most of the cost. The namespace's first
// two bytes name the item's producer.
func BenchmarkWorkqueuePointerItems(b *testing.B) {
	for _, c := range []struct{ p, w, k int }{{1, 1, 1000}, {4, 4, 1000}} {
		objs := make([][]*corev1.ConfigMap, c.p)
		for i := range c.k {
			objs[i%c.p] = append(objs[i%c.p], &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Namespace: fmt.Sprintf("%02d-namespace-%d", i%c.p, i%97),
				Name:      fmt.Sprintf("object-%d", i),
			}})
		}
		owner := func(item *corev1.ConfigMap) int {
			return int(item.Namespace[0]-'0')*10 + int(item.Namespace[1]-'0')
		}
		b.Run(fmt.Sprintf("p%dw%dk%d/impl=ctrlkit", c.p, c.w, c.k), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background()) // as workers really pass
			defer cancel()
			q := workqueue.New(workqueue.Config[*corev1.ConfigMap]{})
			wqRunAddGetDoneOf[*corev1.ConfigMap](b, wqCtrlkitOf[*corev1.ConfigMap]{q, ctx}, c.p, c.w, objs, owner)
		})
		b.Run(fmt.Sprintf("p%dw%dk%d/impl=clientgo", c.p, c.w, c.k), func(b *testing.B) {
			q := cgwq.NewTypedRateLimitingQueue(cgwq.DefaultTypedControllerRateLimiter[*corev1.ConfigMap]())
			wqRunAddGetDoneOf[*corev1.ConfigMap](b, wqClientgoOf[*corev1.ConfigMap]{q}, c.p, c.w, objs, owner)
		})
	}
}

type wqCtrlkitOf[T comparable] struct {
	q   *workqueue.Queue[T]
	ctx context.Context
}

func (c wqCtrlkitOf[T]) add(item T)  { c.q.Add(item) }
func (c wqCtrlkitOf[T]) done(item T) { c.q.Done(item) }
func (c wqCtrlkitOf[T]) get() (T, bool) {
	item, err := c.q.Get(c.ctx)
	return item, err == nil
}
func (c wqCtrlkitOf[T]) drain() {
	if err := c.q.ShutDownWithDrain(context.Background()); err != nil {
		panic(err)
	}
}

type wqClientgoOf[T comparable] struct {
	q cgwq.TypedRateLimitingInterface[T]
}

func (c wqClientgoOf[T]) add(item T)  { c.q.Add(item) }
func (c wqClientgoOf[T]) done(item T) { c.q.Done(item) }
func (c wqClientgoOf[T]) drain()      { c.q.ShutDownWithDrain() }
func (c wqClientgoOf[T]) get() (T, bool) {
	item, shutdown := c.q.Get()
	return item, !shutdown
}

// BenchmarkWorkqueueAddAfter: one producer schedules b.N distinct keys with delays spread
// over 1–11ms, one worker takes every item as it fires. ns/op covers scheduling and firing.
func BenchmarkWorkqueueAddAfter(b *testing.B) {
	for _, impl := range wqImplsNoKeep {
		b.Run("impl="+impl.name, func(b *testing.B) {
			keys := wqKeys(b.N)
			delays := make([]time.Duration, b.N)
			for i := range delays {
				delays[i] = time.Millisecond + time.Duration(i*7919%10000)*time.Microsecond
			}
			q := impl.mk()
			b.ReportAllocs()
			var wg sync.WaitGroup
			wg.Go(func() {
				for range b.N {
					item, ok := q.get()
					if !ok {
						panic("queue shut down early")
					}
					q.done(item)
				}
			})
			b.ResetTimer()
			cpu := wqCPUStart()
			for i, k := range keys {
				q.addAfter(k, delays[i])
			}
			wg.Wait()
			b.StopTimer()
			cpu.report(b)
			q.shutDown()
		})
	}
}

// BenchmarkWorkqueueAddAfterLong: one producer schedules b.N distinct keys an hour ahead,
// the RequeueAfter pattern; nothing fires during the run, so ns/op is the cost of
// scheduling alone. The queue is shut down after the timer stops.
func BenchmarkWorkqueueAddAfterLong(b *testing.B) {
	for _, impl := range wqImpls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			keys := wqKeys(b.N)
			q := impl.mk()
			b.ReportAllocs()
			b.ResetTimer()
			cpu := wqCPUStart()
			for _, k := range keys {
				q.addAfter(k, time.Hour)
			}
			wqSettle(q)
			b.StopTimer()
			cpu.report(b)
			q.shutDown()
		})
	}
}

// wqSettle returns once every AddAfter made before it has been stored by the queue:
// client-go hands AddAfter to a goroutine through a channel, so its adds are not done when
// the calls return. A zero-delay sentinel comes out of Get only after everything scheduled
// before it; ctrlkit stores it at once.
func wqSettle(q wqQueue) {
	q.addAfter("sentinel", 0)
	if item, ok := q.get(); !ok || item != "sentinel" {
		panic(fmt.Sprintf("sentinel: got %q, %v", item, ok))
	}
	q.done("sentinel")
}

// wqMixedDelays returns n delays from 1ms to 1h, log-uniformly spread, from a fixed seed:
// every implementation and every run schedules the same sequence.
func wqMixedDelays(n int) []time.Duration {
	r := rand.New(rand.NewPCG(1, 2))
	lo, hi := math.Log(float64(time.Millisecond)), math.Log(float64(time.Hour))
	delays := make([]time.Duration, n)
	for i := range delays {
		delays[i] = time.Duration(math.Exp(lo + r.Float64()*(hi-lo)))
	}
	return delays
}

// BenchmarkWorkqueueAddAfterMixed: one producer schedules b.N distinct keys with delays
// from 1ms to 1h (log-uniform, seeded), while one worker takes whatever fires; ns/op is the
// cost of scheduling, including the firings that fall within the run (the short delays).
func BenchmarkWorkqueueAddAfterMixed(b *testing.B) {
	for _, impl := range wqImpls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			keys := wqKeys(b.N)
			delays := wqMixedDelays(b.N)
			q := impl.mk()
			b.ReportAllocs()
			settled := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					item, ok := q.get()
					if !ok {
						return
					}
					q.done(item)
					if item == "sentinel" {
						close(settled)
					}
				}
			})
			b.ResetTimer()
			cpu := wqCPUStart()
			for i, k := range keys {
				q.addAfter(k, delays[i])
			}
			q.addAfter("sentinel", 0) // as in wqSettle, taken by the worker
			<-settled
			b.StopTimer()
			cpu.report(b)
			q.shutDown()
			wg.Wait()
		})
	}
}

// BenchmarkWorkqueueDedup: P producers each add b.N/P times, cycling through the same K
// keys from different offsets and never waiting, while W workers Get and Done; most adds
// find their key already queued or in flight (dedup), the hot-key pattern of a busy
// controller. ns/op is per Add; gets/op is the share of adds that were handed out (the
// rest were absorbed by dedup), which depends on how the adds and the workers interleave.
func BenchmarkWorkqueueDedup(b *testing.B) {
	for _, c := range []struct{ p, w, k int }{{4, 4, 1000}, {1, 1, 1000}, {4, 16, 1000}, {4, 64, 1000}} {
		keys := wqKeys(c.k)
		for _, impl := range wqImpls {
			b.Run(fmt.Sprintf("p%dw%dk%d/impl=%s", c.p, c.w, c.k, impl.name), func(b *testing.B) {
				wqRunDedup(b, impl.mk(), c.p, c.w, keys)
			})
		}
	}
}

func wqRunDedup(b *testing.B, q wqQueue, producers, workers int, keys []string) {
	b.ReportAllocs()
	var gets atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			n := int64(0)
			for {
				item, ok := q.get()
				if !ok {
					break
				}
				q.done(item)
				n++
			}
			gets.Add(n)
		})
	}
	b.ResetTimer()
	cpu := wqCPUStart()
	var pwg sync.WaitGroup
	for p := range producers {
		pwg.Go(func() {
			total := b.N / producers
			if p < b.N%producers {
				total++
			}
			i := p * len(keys) / producers
			for range total {
				q.add(keys[i])
				if i++; i == len(keys) {
					i = 0
				}
			}
		})
	}
	pwg.Wait()
	q.drain()
	wg.Wait()
	b.StopTimer()
	cpu.report(b)
	b.ReportMetric(float64(gets.Load())/float64(b.N), "gets/op")
}

// BenchmarkWorkqueueAddRateLimited: b.N AddRateLimited calls over 10,000 keys with the
// default limiter of each library (max of per-item exponential and a 10 qps bucket), so
// items pile up as delayed and repeated calls hit the earliest-deadline check.
func BenchmarkWorkqueueAddRateLimited(b *testing.B) {
	keys := wqKeys(10000)
	for _, impl := range wqImpls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			q := impl.mk()
			b.ReportAllocs()
			b.ResetTimer()
			cpu := wqCPUStart()
			for i := range b.N {
				q.addRateLimited(keys[i%len(keys)])
			}
			b.StopTimer()
			cpu.report(b)
			q.shutDown()
		})
	}
}

// BenchmarkWorkqueueWaitingMemory: the live heap per item while a million distinct items
// wait for an hour-long delay, reported as B/item (ns/op is meaningless here).
func BenchmarkWorkqueueWaitingMemory(b *testing.B) {
	const n = 1_000_000
	keys := wqKeys(n)
	for _, impl := range wqImpls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			var perItem float64
			for range b.N {
				before := wqLiveHeap()
				q := impl.mk()
				for _, k := range keys {
					q.addAfter(k, time.Hour)
				}
				// client-go hands AddAfter to a goroutine through a channel: a zero-delay
				// sentinel comes out of Get only after everything before it was stored.
				q.addAfter("sentinel", 0)
				if item, ok := q.get(); !ok || item != "sentinel" {
					b.Fatalf("sentinel: got %q, %v", item, ok)
				}
				after := wqLiveHeap()
				perItem = float64(int64(after)-int64(before)) / n
				q.done("sentinel")
				q.shutDown()
				runtime.KeepAlive(q)
			}
			b.ReportMetric(perItem, "B/item")
		})
	}
}

func wqLiveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// wqCPU measures the CPU time (user and system, all threads, GC included) the process
// spends in a benchmark, reported as cpu-ns/op. The machine these benchmarks run on is
// shared, and wall time per op swings with the load of other processes; CPU time per op
// swings far less, so it is reported next to ns/op for both implementations.
type wqCPU time.Duration

func wqCPUStart() wqCPU { return wqCPU(wqRusage()) }

func (c wqCPU) report(b *testing.B) {
	b.ReportMetric(float64(wqRusage()-time.Duration(c))/float64(b.N), "cpu-ns/op")
}

func wqRusage() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWorkqueueOtherShapes runs shapes that the rows above do not cover, and on
// which ctrlkit was not tuned: Add/Get/Done with as many producers and workers as
// the machine has cores (2×2), one producer feeding 4 workers, hot keys (4 producers
// and 4 workers over 8 keys: nearly every round trip wakes a blocked Get), a tiny
// key set (1×1 over 10 keys: the producer and the worker wait for each other every
// 10 items), many idle workers over few keys (1 producer and 64 workers over 10 keys;
// 1 producer and 2 workers over 2 keys: most workers wait, and each item finds a Get
// waiting); dedup-heavy adds of 1 producer with 2 workers; AddAfter of the same 1k
// keys again and again with random delays from 1s to 1h (re-scheduling items already
// scheduled: the earlier deadline wins); AddRateLimited of one key again and again
// (its backoff grows to the limiter's cap). The Add/Get/Done shapes also run impl=floor,
// a buffered channel (see wqFloor).
func BenchmarkWorkqueueOtherShapes(b *testing.B) {
	for _, c := range []struct{ p, w, k int }{{2, 2, 1000}, {1, 4, 1000}, {4, 4, 8}, {1, 1, 10}, {1, 64, 10}, {1, 2, 2}} {
		keys := wqOwnedKeys(c.k, c.p)
		for _, impl := range wqWithFloor(wqImpls, c.k) {
			b.Run(fmt.Sprintf("agd-p%dw%dk%d/impl=%s", c.p, c.w, c.k, impl.name), func(b *testing.B) {
				wqRunAddGetDone(b, impl.mk(), c.p, c.w, keys)
			})
		}
	}
	dedupKeys := wqKeys(1000)
	for _, impl := range wqImpls {
		b.Run("dedup-p1w2k1000/impl="+impl.name, func(b *testing.B) {
			wqRunDedup(b, impl.mk(), 1, 2, dedupKeys)
		})
	}
	for _, impl := range wqImpls {
		b.Run("reschedule/impl="+impl.name, func(b *testing.B) {
			q := impl.mk()
			r := rand.New(rand.NewPCG(1, 2))
			delays := make([]time.Duration, b.N)
			for i := range delays {
				delays[i] = time.Second + time.Duration(r.Int64N(int64(time.Hour)))
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := wqCPUStart()
			for i := range b.N {
				q.addAfter(dedupKeys[i%len(dedupKeys)], delays[i])
			}
			wqSettle(q) // client-go's adds are done only once its goroutine took them
			b.StopTimer()
			cpu.report(b)
			q.shutDown()
		})
	}
	for _, impl := range wqImpls {
		b.Run("ratelimited-one-key/impl="+impl.name, func(b *testing.B) {
			q := impl.mk()
			b.ReportAllocs()
			b.ResetTimer()
			cpu := wqCPUStart()
			for range b.N {
				q.addRateLimited(dedupKeys[0])
			}
			// As wqSettle; the key's first, short delays have fired by now: it comes first.
			q.addAfter("sentinel", 0)
			for {
				item, ok := q.get()
				if !ok {
					b.Fatal("the queue shut down")
				}
				q.done(item)
				if item == "sentinel" {
					break
				}
			}
			b.StopTimer()
			cpu.report(b)
			q.shutDown()
		})
	}
}

// BenchmarkWorkqueueRequeue: W workers over 1k keys, all queued at the start, each adding
// the item it holds again before its Done (a reconcile that asks to run again at once, or
// after 20µs with AddAfter), so every Done re-queues its item. ns per Get.
func BenchmarkWorkqueueRequeue(b *testing.B) {
	keys := wqKeys(1000)
	for _, c := range []struct {
		w     int
		delay time.Duration
	}{{4, 0}, {16, 0}, {64, 0}, {64, 20 * time.Microsecond}} {
		name := fmt.Sprintf("w%d", c.w)
		if c.delay > 0 {
			name += "-after" + c.delay.String()
		}
		for _, impl := range wqImpls {
			b.Run(name+"/impl="+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				q := impl.mk()
				for _, k := range keys {
					q.add(k)
				}
				var gets atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				cpu := wqCPUStart()
				for range c.w {
					wg.Go(func() {
						for {
							item, ok := q.get()
							if !ok {
								return
							}
							if gets.Add(1) >= int64(b.N) {
								q.done(item)
								q.shutDown() // the others take what is left, then stop
								continue
							}
							if c.delay > 0 {
								q.addAfter(item, c.delay)
							} else {
								q.add(item)
							}
							q.done(item)
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				cpu.report(b)
			})
		}
	}
}

// BenchmarkWorkqueueAddDistinct: one producer adds b.N distinct keys that nobody takes
// (run it with -benchtime=1000000x): ns per Add of a queue growing from empty to a
// million waiting items, memory included (B/op).
func BenchmarkWorkqueueAddDistinct(b *testing.B) {
	for _, impl := range wqImpls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			keys := wqKeys(b.N)
			q := impl.mk()
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			cpu := wqCPUStart()
			for _, k := range keys {
				q.add(k)
			}
			b.StopTimer()
			cpu.report(b)
			q.shutDown()
		})
	}
}

// BenchmarkWorkqueueCancelWaitingGets: W goroutines each wait in Get with a context of
// their own (a per-call timeout, say), then every context is canceled, in random order
// (seeded); ns/op is per Get canceled, from the first cancel to the last Get returned.
// client-go's Get takes no context; the floor (impl=select) is goroutines waiting in a
// select on their contexts and a channel nobody sends on. The cost per Get should not
// grow with W.
func BenchmarkWorkqueueCancelWaitingGets(b *testing.B) {
	for _, w := range []int{1000, 32000} {
		for _, impl := range []string{"ctrlkit", "select"} {
			b.Run(fmt.Sprintf("w%d/impl=%s", w, impl), func(b *testing.B) {
				r := rand.New(rand.NewPCG(uint64(w), 11))
				var total time.Duration
				for range b.N {
					total += wqCancelWaiting(b, w, impl == "select", r.Perm(w))
				}
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*w), "ns/get")
			})
		}
	}
}

// wqCancelWaiting starts w Gets (or selects) that wait, cancels their contexts in the
// order given, and returns the time from the first cancel to the last return.
func wqCancelWaiting(b *testing.B, w int, floor bool, order []int) time.Duration {
	q := workqueue.New(workqueue.Config[int]{})
	defer q.ShutDown()
	never := make(chan struct{})
	ctxs := make([]context.Context, w)
	cancels := make([]context.CancelFunc, w)
	for i := range w {
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
	}
	var started, done sync.WaitGroup
	started.Add(w)
	done.Add(w)
	for i := range w {
		go func() {
			defer done.Done()
			started.Done()
			if floor {
				select {
				case <-ctxs[i].Done():
				case <-never:
				}
				return
			}
			if _, err := q.Get(ctxs[i]); err == nil {
				b.Error("Get returned an item from an empty queue")
			}
		}()
	}
	started.Wait()
	for range 100 { // every goroutine parked
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	for _, i := range order {
		cancels[i]()
	}
	done.Wait()
	return time.Since(start)
}
