package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	cgworkqueue "k8s.io/client-go/util/workqueue"

	"github.com/ctrlkit/ctrlkit/reconcile"
)

// reconcileKeys is the queue input of the reconcile benchmarks: every key once.
var reconcileKeys = func() []string {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "namespace-" + strconv.Itoa(i%100) + "/object-" + strconv.Itoa(i)
	}
	return keys
}()

// keyList is a reconcile.Source delivering reconcileKeys at start, as an informer's
// initial list would.
type keyList []string

func (k keyList) Name() string { return "keys" }
func (k keyList) Start(enqueue func(string, reconcile.Priority)) (func(), error) {
	for _, key := range k {
		enqueue(key, reconcile.Background)
	}
	return nil, nil
}
func (k keyList) HasSynced() bool                  { return true }
func (k keyList) AppendKeys(dst []string) []string { return append(dst, k...) }

// BenchmarkReconcileThroughput measures a no-op reconcile of 100,000 keys, from
// queue input to the last reconcile, at 1 and 8 workers: ctrlkit's Controller
// against the loop client-go's sample-controller writes by hand over client-go's
// rate-limited work queue (Get, reconcile, Forget, Done). ns/op is per key.
//
// A pass allocates 12–16 MB, and the first passes of a process run on a heap that
// is still growing (a fresh process's first pass took twice as long as its fourth,
// on either side): the side timed first paid for that, and at the report's few
// passes a case measured its place in the process more than its loop. So each side
// makes one untimed pass first, and the side timed first swaps from one round of
// bench/report to the next (CTRLKIT_BENCH_ROUND).
func BenchmarkReconcileThroughput(b *testing.B) {
	impls := []struct {
		name string
		pass func(b *testing.B, workers int)
	}{{"ctrlkit", reconcilePassCtrlkit}, {"client-go", reconcilePassClientgo}}
	for _, impl := range impls {
		impl.pass(b, 1)
	}
	round, _ := strconv.Atoi(os.Getenv("CTRLKIT_BENCH_ROUND")) // 0 when unset
	for _, workers := range []int{1, 8} {
		for j := range impls {
			impl := impls[(j+round)%len(impls)]
			b.Run(fmt.Sprintf("workers=%d/impl=%s", workers, impl.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					impl.pass(b, workers)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reconcileKeys)), "ns/key")
			})
		}
	}
}

// reconcilePassCtrlkit reconciles every key of reconcileKeys once with a Controller
// of the given number of workers, from its start to the last reconcile.
func reconcilePassCtrlkit(b *testing.B, workers int) {
	var n atomic.Int64
	done := make(chan struct{})
	c := reconcile.New(reconcile.Func[string](func(context.Context, string) (reconcile.Result, error) {
		if n.Add(1) == int64(len(reconcileKeys)) {
			close(done)
		}
		return reconcile.Result{}, nil
	}), reconcile.Config[string]{Workers: workers})
	if err := c.Watch(keyList(reconcileKeys)); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { errc <- c.Run(ctx) }()
	<-done
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// reconcilePassClientgo is reconcilePassCtrlkit with client-go's queue and the
// hand-written loop of its sample-controller.
func reconcilePassClientgo(b *testing.B, workers int) {
	q := cgworkqueue.NewTypedRateLimitingQueue(cgworkqueue.DefaultTypedControllerRateLimiter[string]())
	for _, k := range reconcileKeys {
		q.Add(k)
	}
	var n atomic.Int64
	reconcileNoop := func(string) error { return nil }
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				key, shutdown := q.Get()
				if shutdown {
					return
				}
				if err := reconcileNoop(key); err != nil {
					q.AddRateLimited(key)
				} else {
					q.Forget(key)
				}
				q.Done(key)
				if n.Add(1) == int64(len(reconcileKeys)) {
					q.ShutDown()
				}
			}
		})
	}
	wg.Wait()
	if got := n.Load(); got != int64(len(reconcileKeys)) {
		b.Fatalf("%d keys reconciled, want %d", got, len(reconcileKeys))
	}
}
