package controllerruntime

// Side-by-side benchmarks of ctrlkit's workqueue.Queue and controller-runtime's
// priority queue (pkg/controller/priorityqueue, the queue its controllers use by
// default). Both queues hold int items and neither has metrics (controller-runtime's
// queue records none when it has no name). Sub-benchmarks are named ctrlkit/... and
// controller-runtime/..., run back to back in one process:
//
//	go test -run '^$' -bench PriorityQueue -benchmem -count 5 .
//
// The first three cases are the shapes controller-runtime measures its queue on; the
// fourth is a large initial list drained by many workers.
//
//   - AddGetDone: one goroutine adds 1,000 distinct items, then takes and finishes
//     each of them. An op is the 1,000 items.
//   - AddOnly: one goroutine adds the same 1,000 items over and over, with nobody
//     taking them; after the first op every add is a duplicate. An op is 1,000 adds.
//   - AddLockContended: 1,000,000 items are queued, then 1,000 workers take items,
//     hold each for 1ms and finish it, while the benchmark adds items 0..999 again
//     and again (the first items handed out: most adds find them in flight or
//     queued again). An op is 1,000 adds. B/op and allocs/op count the whole
//     process, workers included: on ctrlkit's side, an item that the queue has
//     forgotten since its last Done (its entry dropped from the finished-item cache)
//     gets a new duplicate-add mark when it is found duplicated again, so they grow
//     with the time an op takes, not with the adds.
//   - ManyWorkers: 1,000 workers wait on an empty queue; one producer adds 1,000,000
//     distinct items (100,000 with -short) as fast as it can while the workers take
//     and finish them with no work in between. ns/item is the time from the first
//     add to the last Done over the items; add-p50-ns and add-p99-ns are percentiles
//     of the time an Add call took, over every 7th Add (reading the clock twice costs
//     about 90ns on a virtual machine's kvm-clock, more than an Add; 7 is prime to
//     the sizes of either queue's add buffers, so the sample sees every position in
//     them alike).

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"

	"github.com/ctrlkit/ctrlkit/workqueue"
)

// pqQueue is what the harness needs from either queue; both adapters pay the same
// interface-call overhead.
type pqQueue interface {
	add(item int)
	get() (int, bool) // false once the queue is shut down
	done(item int)
	shutDown()
}

type pqCtrlkit struct {
	q   *workqueue.Queue[int]
	ctx context.Context
}

func pqNewCtrlkit() pqQueue {
	// A cancellable context, as a controller's workers pass; the harness stops them by
	// shutting the queue down.
	ctx, cancel := context.WithCancel(context.Background())
	_ = cancel
	return &pqCtrlkit{q: workqueue.New(workqueue.Config[int]{}), ctx: ctx}
}

func (c *pqCtrlkit) add(item int)  { c.q.Add(item) }
func (c *pqCtrlkit) done(item int) { c.q.Done(item) }
func (c *pqCtrlkit) shutDown()     { c.q.ShutDown() }
func (c *pqCtrlkit) get() (int, bool) {
	item, err := c.q.Get(c.ctx)
	return item, err == nil
}

type pqControllerRuntime struct {
	q priorityqueue.PriorityQueue[int]
}

func pqNewControllerRuntime() pqQueue {
	return &pqControllerRuntime{q: priorityqueue.New[int]("")}
}

func (c *pqControllerRuntime) add(item int)  { c.q.Add(item) }
func (c *pqControllerRuntime) done(item int) { c.q.Done(item) }
func (c *pqControllerRuntime) shutDown()     { c.q.ShutDown() }
func (c *pqControllerRuntime) get() (int, bool) {
	item, shutdown := c.q.Get()
	return item, !shutdown
}

var pqSides = []struct {
	name string
	mk   func() pqQueue
}{
	{"ctrlkit", pqNewCtrlkit},
	{"controller-runtime", pqNewControllerRuntime},
}

// pqBatch is the number of items an op of the first three cases adds.
const pqBatch = 1000

func BenchmarkPriorityQueueAddGetDone(b *testing.B) {
	for _, side := range pqSides {
		b.Run(side.name, func(b *testing.B) {
			b.ReportAllocs()
			q := side.mk()
			defer q.shutDown()
			for b.Loop() {
				for i := range pqBatch {
					q.add(i)
				}
				for range pqBatch {
					item, ok := q.get()
					if !ok {
						b.Fatal("queue shut down")
					}
					q.done(item)
				}
			}
		})
	}
}

func BenchmarkPriorityQueueAddOnly(b *testing.B) {
	for _, side := range pqSides {
		b.Run(side.name, func(b *testing.B) {
			b.ReportAllocs()
			q := side.mk()
			defer q.shutDown()
			for b.Loop() {
				for i := range pqBatch {
					q.add(i)
				}
			}
		})
	}
}

// pqQueued is how many items AddLockContended queues before its workers start.
const pqQueued = 1_000_000

func BenchmarkPriorityQueueAddLockContended(b *testing.B) {
	const workers, hold = 1000, time.Millisecond
	for _, side := range pqSides {
		b.Run(side.name, func(b *testing.B) {
			b.ReportAllocs()
			q := side.mk()
			for i := range pqQueued {
				q.add(i)
			}
			var stop atomic.Bool
			var wg, warm sync.WaitGroup
			warm.Add(workers)
			for range workers {
				wg.Go(func() {
					first := true
					for !stop.Load() {
						item, ok := q.get()
						if !ok {
							return
						}
						time.Sleep(hold)
						q.done(item)
						if first {
							warm.Done()
							first = false
						}
					}
				})
			}
			// The workers' first sleeps allocate their timers, and their stacks grow: let
			// that happen before the timed adds, whose B/op and allocs/op count every
			// allocation of the process.
			warm.Wait()
			for b.Loop() {
				for i := range pqBatch {
					q.add(i)
				}
			}
			b.StopTimer()
			// Each worker ends after its current item; ctrlkit's Get would hand out the
			// items still queued after a shut-down, so the flag stops the workers first.
			stop.Store(true)
			wg.Wait()
			q.shutDown()
		})
	}
}

// pqManyItems is how many items an op of ManyWorkers adds.
func pqManyItems() int {
	if testing.Short() {
		return 100_000
	}
	return 1_000_000
}

func BenchmarkPriorityQueueManyWorkers(b *testing.B) {
	const workers = 1000
	n := pqManyItems()
	lat := make([]time.Duration, 0, n/pqLatencyStride+1) // sampled Add durations, reused by every op
	for _, side := range pqSides {
		b.Run(fmt.Sprintf("%s/workers=%d", side.name, workers), func(b *testing.B) {
			b.ReportAllocs()
			var total time.Duration
			var p50, p99 []time.Duration
			for b.Loop() {
				var took time.Duration
				took, lat = pqRunManyWorkers(b, side.mk(), workers, n, lat[:0])
				total += took
				b.StopTimer()
				slices.Sort(lat)
				p50 = append(p50, lat[len(lat)/2])
				p99 = append(p99, lat[len(lat)*99/100])
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(len(p50)*n), "ns/item")
			// Each op is a whole run; with more than one, report the median op's figures.
			slices.Sort(p50)
			slices.Sort(p99)
			b.ReportMetric(float64(p50[len(p50)/2].Nanoseconds()), "add-p50-ns")
			b.ReportMetric(float64(p99[len(p99)/2].Nanoseconds()), "add-p99-ns")
		})
	}
}

// pqLatencyStride is how often ManyWorkers times an Add: one in pqLatencyStride.
const pqLatencyStride = 7

// pqRunManyWorkers starts workers on q, adds n distinct items from this goroutine,
// appending the duration of every pqLatencyStride-th Add to lat, waits until every item
// is Done, and shuts q down. It returns the time from the first Add to the last Done,
// and lat.
func pqRunManyWorkers(b testing.TB, q pqQueue, workers, n int, lat []time.Duration) (time.Duration, []time.Duration) {
	var finished atomic.Int64
	var last time.Time
	all := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				item, ok := q.get()
				if !ok {
					return
				}
				q.done(item)
				if finished.Add(1) == int64(n) {
					last = time.Now()
					close(all)
				}
			}
		})
	}
	first := time.Now()
	for i := range n {
		if i%pqLatencyStride != 0 {
			q.add(i)
			continue
		}
		t := time.Now()
		q.add(i)
		lat = append(lat, time.Since(t))
	}
	timeout := time.NewTimer(2 * time.Minute)
	defer timeout.Stop()
	select {
	case <-all:
	case <-timeout.C:
		b.Errorf("only %d of %d items done after 2 minutes", finished.Load(), n)
	}
	q.shutDown()
	wg.Wait()
	return last.Sub(first), lat
}

// pqRecorder wraps a queue and counts the Dones of every item.
type pqRecorder struct {
	pqQueue
	mu    sync.Mutex
	dones map[int]int
}

func (r *pqRecorder) done(item int) {
	r.mu.Lock()
	r.dones[item]++
	r.mu.Unlock()
	r.pqQueue.done(item)
}

// TestPriorityQueueSameInput checks the premise of ManyWorkers: on either queue every
// item added is taken and finished exactly once before the run ends, and no goroutine is
// left behind (TestMain).
func TestPriorityQueueSameInput(t *testing.T) {
	const n, workers = 20_000, 100
	for _, side := range pqSides {
		t.Run(side.name, func(t *testing.T) {
			r := &pqRecorder{pqQueue: side.mk(), dones: make(map[int]int, n)}
			_, lat := pqRunManyWorkers(t, r, workers, n, nil)
			if want := (n + pqLatencyStride - 1) / pqLatencyStride; len(lat) != want {
				t.Errorf("%d Adds timed, want %d", len(lat), want)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if len(r.dones) != n {
				t.Fatalf("%d distinct items done, want %d", len(r.dones), n)
			}
			for i := range n {
				if r.dones[i] != 1 {
					t.Fatalf("item %d done %d times, want 1", i, r.dones[i])
				}
			}
		})
	}
}

// pqPrioItems is how many items an op of DistinctPriorities adds.
const pqPrioItems = 10_000

// BenchmarkPriorityQueueDistinctPriorities: one goroutine adds 10,000 distinct items,
// each with a priority of its own (random, seeded: a deadline or a timestamp used as
// the priority), then takes and finishes each. An op is the 10,000 items. Every item is
// then a priority level of its own, the case where serving the highest priority must
// not cost a pass over the levels. Each queue makes one untimed pass first.
func BenchmarkPriorityQueueDistinctPriorities(b *testing.B) {
	r := rand.New(rand.NewPCG(19, 5866))
	prios := make([]int, pqPrioItems)
	for i := range prios {
		prios[i] = int(r.Int64N(1 << 40))
	}
	for _, side := range []struct {
		name string
		mk   func() (add func(item, prio int), q pqQueue)
	}{
		{"ctrlkit", func() (func(int, int), pqQueue) {
			q := pqNewCtrlkit().(*pqCtrlkit)
			return func(item, prio int) { q.q.AddWithOptions(item, workqueue.AddOptions{Priority: prio}) }, q
		}},
		{"controller-runtime", func() (func(int, int), pqQueue) {
			q := pqNewControllerRuntime().(*pqControllerRuntime)
			return func(item, prio int) { q.q.AddWithOpts(priorityqueue.AddOpts{Priority: &prio}, item) }, q
		}},
	} {
		b.Run(side.name, func(b *testing.B) {
			b.ReportAllocs()
			add, q := side.mk()
			defer q.shutDown()
			pass := func() {
				for i, p := range prios {
					add(i, p)
				}
				last := math.MaxInt
				for range prios {
					item, ok := q.get()
					if !ok {
						b.Fatal("queue shut down")
					}
					if p := prios[item]; p > last {
						b.Fatalf("item of priority %d handed out after one of %d", p, last)
					} else {
						last = p
					}
					q.done(item)
				}
			}
			// One untimed pass first: each queue's containers grow to the size of an op
			// once, and the op is what is timed (b.Loop resets the counters).
			pass()
			for b.Loop() {
				pass()
			}
		})
	}
}
