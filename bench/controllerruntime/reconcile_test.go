// Package controllerruntime benchmarks ctrlkit's reconcile.Controller against
// controller-runtime's controller. It is a module of its own so that the main
// module never depends on controller-runtime.
package controllerruntime

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
	crsource "sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ctrlkit/ctrlkit/reconcile"
)

func init() {
	// controller-runtime's loggers all delegate to this one; without it the
	// package warns on stderr after 30s. Both sides log nothing.
	crlog.SetLogger(logr.Discard())
}

// numKeys is how many distinct keys every iteration reconciles.
const numKeys = 100_000

// keys is the queue input of both sides: every key once, 100 namespaces.
var keys = func() []types.NamespacedName {
	ks := make([]types.NamespacedName, numKeys)
	for i := range ks {
		ks[i] = types.NamespacedName{Namespace: "namespace-" + strconv.Itoa(i%100), Name: "object-" + strconv.Itoa(i)}
	}
	return ks
}()

// noop is the reconciler of both sides: it counts the call, records when the
// last of the numKeys calls happened, and signals done. record, if set, sees
// every key (tests only: it checks that both sides get the same input).
type noop struct {
	n      atomic.Int64
	last   time.Time
	done   chan struct{}
	record func(types.NamespacedName)
}

func newNoop() *noop { return &noop{done: make(chan struct{})} }

func (r *noop) call(key types.NamespacedName) {
	if r.record != nil {
		r.record(key)
	}
	if r.n.Add(1) == numKeys {
		r.last = time.Now()
		close(r.done)
	}
}

// keyList is a ctrlkit source delivering keys at start, as an informer's
// initial list would (Background priority, as FromInformer does for it).
type keyList struct{ first *time.Time }

func (keyList) Name() string { return "keys" }
func (k keyList) Start(enqueue func(types.NamespacedName, reconcile.Priority)) (func(), error) {
	*k.first = time.Now()
	for _, key := range keys {
		enqueue(key, reconcile.Background)
	}
	return nil, nil
}
func (keyList) HasSynced() bool { return true }
func (keyList) AppendKeys(dst []types.NamespacedName) []types.NamespacedName {
	return append(dst, keys...)
}

// crKeyList is the same input for controller-runtime: a source adding every key
// to the controller's queue in Start. On the priority queue the keys go in at
// handler.LowPriority, as controller-runtime's own handlers do for an
// informer's initial list.
func crKeyList(first *time.Time) crsource.TypedSource[types.NamespacedName] {
	return crsource.TypedFunc[types.NamespacedName](func(_ context.Context, q workqueue.TypedRateLimitingInterface[types.NamespacedName]) error {
		*first = time.Now()
		if pq, ok := q.(priorityqueue.PriorityQueue[types.NamespacedName]); ok {
			low := handler.LowPriority
			for _, key := range keys {
				pq.AddWithOpts(priorityqueue.AddOpts{Priority: &low}, key)
			}
			return nil
		}
		for _, key := range keys {
			q.Add(key)
		}
		return nil
	})
}

// await waits until r has seen numKeys reconciles, then stops the controller
// (cancel) and waits for its Run/Start to return on errc. It fails if the
// controller returns early or the reconciles take longer than a minute.
func await(b testing.TB, r *noop, cancel context.CancelFunc, errc <-chan error) {
	b.Helper()
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	select {
	case <-r.done:
	case err := <-errc:
		cancel()
		b.Fatalf("controller returned before reconciling every key: %v", err)
	case <-timeout.C:
		cancel()
		<-errc
		b.Fatalf("only %d of %d keys reconciled after a minute", r.n.Load(), numKeys)
	}
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// runCtrlkit runs one iteration on ctrlkit, calling r for every key, and returns
// the time from the first enqueue to the last reconcile. withMetrics plugs in
// Prometheus metrics for the reconciles and the queue (controller-runtime
// always has them).
func runCtrlkit(b testing.TB, workers int, r *noop, withMetrics bool) time.Duration {
	var first time.Time
	cfg := reconcile.Config[types.NamespacedName]{Name: "bench", Workers: workers, Logger: logr.Discard()}
	if withMetrics {
		m := newPromMetrics("bench")
		cfg.Metrics, cfg.QueueMetrics = m, m
	}
	c := reconcile.New(reconcile.Func[types.NamespacedName](func(_ context.Context, key types.NamespacedName) (reconcile.Result, error) {
		r.call(key)
		return reconcile.Result{}, nil
	}), cfg)
	if err := c.Watch(keyList{first: &first}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	await(b, r, cancel, errc)
	return r.last.Sub(first)
}

// runControllerRuntime runs one iteration on controller-runtime's controller
// (unmanaged, no manager, no cluster), calling r for every key, and returns the
// time from the first enqueue to the last reconcile. priorityQueue true is
// controller-runtime's default (its priority queue); false selects client-go's
// rate-limited queue with client-go's default controller rate limiter.
func runControllerRuntime(b testing.TB, workers int, r *noop, priorityQueue bool) time.Duration {
	var first time.Time
	skip := true
	c, err := crcontroller.NewTypedUnmanaged("bench", crcontroller.TypedOptions[types.NamespacedName]{
		SkipNameValidation:      &skip, // a new controller per iteration
		MaxConcurrentReconciles: workers,
		Logger:                  logr.Discard(),
		UsePriorityQueue:        &priorityQueue,
		Reconciler: crreconcile.TypedFunc[types.NamespacedName](func(_ context.Context, key types.NamespacedName) (crreconcile.Result, error) {
			r.call(key)
			return crreconcile.Result{}, nil
		}),
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Watch(crKeyList(&first)); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Start(ctx) }()
	await(b, r, cancel, errc)
	return r.last.Sub(first)
}

// BenchmarkReconcileThroughput measures a no-op reconcile of 100,000 distinct
// keys at 1 and 8 workers, ctrlkit's reconcile.Controller against
// controller-runtime's controller on the same queue input. ns/key is the time
// from the first enqueue until the 100,000th reconcile, per key; ns/op, B/op
// and allocs/op cover a whole iteration (100,000 keys), including building,
// starting and stopping the controller.
func BenchmarkReconcileThroughput(b *testing.B) {
	for _, workers := range []int{1, 8} {
		sides := []struct {
			name string
			run  func(*testing.B, int) time.Duration
		}{
			{"ctrlkit", func(b *testing.B, w int) time.Duration { return runCtrlkit(b, w, newNoop(), false) }},
			{"ctrlkit-prometheus", func(b *testing.B, w int) time.Duration { return runCtrlkit(b, w, newNoop(), true) }},
			{"controller-runtime", func(b *testing.B, w int) time.Duration { return runControllerRuntime(b, w, newNoop(), true) }},
			{"controller-runtime-classicqueue", func(b *testing.B, w int) time.Duration { return runControllerRuntime(b, w, newNoop(), false) }},
		}
		for _, side := range sides {
			b.Run(fmt.Sprintf("%s/workers=%d", side.name, workers), func(b *testing.B) {
				b.ReportAllocs()
				var total time.Duration
				iters := 0
				for b.Loop() {
					total += side.run(b, workers)
					iters++
				}
				b.ReportMetric(float64(total.Nanoseconds())/float64(iters*numKeys), "ns/key")
			})
		}
	}
}
