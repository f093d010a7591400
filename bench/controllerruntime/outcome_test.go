package controllerruntime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	cgworkqueue "k8s.io/client-go/util/workqueue"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
	crsource "sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ctrlkit/ctrlkit/reconcile"
	ckworkqueue "github.com/ctrlkit/ctrlkit/workqueue"
)

// The outcome benchmarks run reconcilers that do not always succeed: they fail
// (rate-limited retries) or ask to be requeued after a delay. Every side gets
// the same n keys at start, the same per-key behaviour, and a per-item
// exponential rate limiter with the same base and cap (no overall token
// bucket, which would only measure its 10/s): ctrlkit's Controller,
// controller-runtime's controller (priority queue, its default), and the
// sample-controller loop over client-go's rate-limited queue.
//
// ns/key is wall time from start to the last expected reconcile, per key; the
// waits of the backoff and of RequeueAfter are part of it. cpu-ns/key is the
// process's user+system CPU time over the same span, per key: for the shapes
// that mostly wait, it is the figure that shows the machinery's cost.

const (
	outBase = time.Millisecond      // the rate limiter's first delay
	outMax  = 16 * time.Millisecond // and its cap
)

// outShape is a reconciler's behaviour per key: the attempts of a key with
// index i%failEvery == 0 fail until failures errors; then, if requeue > 0, the
// next attempt returns RequeueAfter requeue; every later attempt succeeds.
type outShape struct {
	name      string
	failEvery int           // 0: no key fails
	failures  int           // errors of a failing key before it succeeds
	requeue   time.Duration // RequeueAfter of the attempt after the failures
	long      bool          // requeue is too long to come back within the run
}

// expected is how many reconciles of n keys the run waits for.
func (s outShape) expected(n int) int64 {
	total := int64(n)
	if s.failEvery > 0 {
		total += int64((n+s.failEvery-1)/s.failEvery) * int64(s.failures)
	}
	if s.requeue > 0 && !s.long {
		total += int64(n)
	}
	return total
}

var errOut = errors.New("bench: failing on purpose")

// outRun is the state of one run: the keys' indexes and attempts.
type outRun struct {
	shape    outShape
	keys     []types.NamespacedName
	index    map[types.NamespacedName]int32
	attempts []atomic.Int32
	n        atomic.Int64
	want     int64
	done     chan struct{}
}

var outKeysCache sync.Map // n → []types.NamespacedName

func outKeys(n int) ([]types.NamespacedName, map[types.NamespacedName]int32) {
	type pair struct {
		keys  []types.NamespacedName
		index map[types.NamespacedName]int32
	}
	if v, ok := outKeysCache.Load(n); ok {
		p := v.(pair)
		return p.keys, p.index
	}
	ks := make([]types.NamespacedName, n)
	idx := make(map[types.NamespacedName]int32, n)
	for i := range ks {
		ks[i] = types.NamespacedName{Namespace: "namespace-" + strconv.Itoa(i%100), Name: "object-" + strconv.Itoa(i)}
		idx[ks[i]] = int32(i)
	}
	outKeysCache.Store(n, pair{ks, idx})
	return ks, idx
}

func newOutRun(s outShape, n int) *outRun {
	ks, idx := outKeys(n)
	return &outRun{shape: s, keys: ks, index: idx, attempts: make([]atomic.Int32, n), want: s.expected(n), done: make(chan struct{})}
}

// call is the reconciler of every side: it returns the RequeueAfter and error
// the shape asks for.
func (r *outRun) call(key types.NamespacedName) (time.Duration, error) {
	i := r.index[key]
	a := int(r.attempts[i].Add(1)) - 1
	if r.n.Add(1) == r.want {
		close(r.done)
	}
	if r.shape.failEvery > 0 && int(i)%r.shape.failEvery == 0 {
		if a < r.shape.failures {
			return 0, errOut
		}
		a -= r.shape.failures
	}
	if r.shape.requeue > 0 && a == 0 {
		return r.shape.requeue, nil
	}
	return 0, nil
}

func (r *outRun) wait(b testing.TB) {
	b.Helper()
	select {
	case <-r.done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("%d of %d reconciles after 2 minutes", r.n.Load(), r.want)
	}
}

// outKeySource is a ctrlkit source enqueueing the run's keys at start.
type outKeySource struct{ keys []types.NamespacedName }

func (outKeySource) Name() string { return "keys" }
func (s outKeySource) Start(enqueue func(types.NamespacedName, reconcile.Priority)) (func(), error) {
	for _, k := range s.keys {
		enqueue(k, reconcile.Background)
	}
	return nil, nil
}
func (outKeySource) HasSynced() bool { return true }
func (s outKeySource) AppendKeys(dst []types.NamespacedName) []types.NamespacedName {
	return append(dst, s.keys...)
}

func outCtrlkit(b testing.TB, r *outRun, workers int) {
	c := reconcile.New(reconcile.Func[types.NamespacedName](func(_ context.Context, key types.NamespacedName) (reconcile.Result, error) {
		d, err := r.call(key)
		return reconcile.Result{RequeueAfter: d}, err
	}), reconcile.Config[types.NamespacedName]{
		Name: "bench", Workers: workers, Logger: logr.Discard(),
		RateLimiter: ckworkqueue.NewExponential[types.NamespacedName](outBase, outMax),
	})
	if err := c.Watch(outKeySource{r.keys}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	r.wait(b)
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

func outControllerRuntime(b testing.TB, r *outRun, workers int) {
	skip, pq := true, true
	c, err := crcontroller.NewTypedUnmanaged("bench", crcontroller.TypedOptions[types.NamespacedName]{
		SkipNameValidation:      &skip,
		MaxConcurrentReconciles: workers,
		Logger:                  logr.Discard(),
		UsePriorityQueue:        &pq,
		RateLimiter:             cgworkqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](outBase, outMax),
		Reconciler: crreconcile.TypedFunc[types.NamespacedName](func(_ context.Context, key types.NamespacedName) (crreconcile.Result, error) {
			d, err := r.call(key)
			return crreconcile.Result{RequeueAfter: d}, err
		}),
	})
	if err != nil {
		b.Fatal(err)
	}
	src := crsource.TypedFunc[types.NamespacedName](func(_ context.Context, q cgworkqueue.TypedRateLimitingInterface[types.NamespacedName]) error {
		low := handler.LowPriority
		pq := q.(priorityqueue.PriorityQueue[types.NamespacedName])
		for _, k := range r.keys {
			pq.AddWithOpts(priorityqueue.AddOpts{Priority: &low}, k)
		}
		return nil
	})
	if err := c.Watch(src); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Start(ctx) }()
	r.wait(b)
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

func outClientgo(b testing.TB, r *outRun, workers int) {
	q := cgworkqueue.NewTypedRateLimitingQueue(cgworkqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](outBase, outMax))
	for _, k := range r.keys {
		q.Add(k)
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				key, shutdown := q.Get()
				if shutdown {
					return
				}
				d, err := r.call(key)
				switch {
				case err != nil:
					q.AddRateLimited(key)
				case d > 0:
					q.Forget(key)
					q.AddAfter(key, d)
				default:
					q.Forget(key)
				}
				q.Done(key)
			}
		})
	}
	r.wait(b)
	q.ShutDown()
	wg.Wait()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var outShapes = []outShape{
	{name: "fail-once-all", failEvery: 1, failures: 1},
	{name: "fail-10x-every10th", failEvery: 10, failures: 10},
	{name: "requeue-1ms", requeue: time.Millisecond},
	{name: "requeue-1h", requeue: time.Hour, long: true},
}

// BenchmarkReconcileOutcomes: see the comment at the top of the file.
func BenchmarkReconcileOutcomes(b *testing.B) {
	impls := []struct {
		name string
		run  func(testing.TB, *outRun, int)
	}{{"ctrlkit", outCtrlkit}, {"controller-runtime", outControllerRuntime}, {"client-go", outClientgo}}
	for _, s := range outShapes {
		for _, n := range []int{10_000, 100_000} {
			for _, workers := range []int{1, 8} {
				for _, impl := range impls {
					b.Run(fmt.Sprintf("%s/n=%d/workers=%d/impl=%s", s.name, n, workers, impl.name), func(b *testing.B) {
						b.ReportAllocs()
						var wall, cpu time.Duration
						for b.Loop() {
							r := newOutRun(s, n)
							c0, t0 := cpuTime(), time.Now()
							impl.run(b, r, workers)
							wall += time.Since(t0)
							cpu += cpuTime() - c0
						}
						b.ReportMetric(float64(wall.Nanoseconds())/float64(b.N*n), "ns/key")
						b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/key")
					})
				}
			}
		}
	}
}
