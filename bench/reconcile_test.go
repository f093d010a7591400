package bench

import (
	"context"
	"fmt"
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
func BenchmarkReconcileThroughput(b *testing.B) {
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("workers=%d/impl=ctrlkit", workers), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var n atomic.Int64
				done := make(chan struct{})
				c := reconcile.New(reconcile.Func[string](func(context.Context, string) (reconcile.Result, error) {
					if n.Add(1) == int64(len(reconcileKeys)) {
						close(done)
					}
					return reconcile.Result{}, nil
				}), reconcile.Config[string]{Workers: workers})
				c.Watch(keyList(reconcileKeys))
				ctx, cancel := context.WithCancel(context.Background())
				errc := make(chan error)
				go func() { errc <- c.Run(ctx) }()
				<-done
				cancel()
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reconcileKeys)), "ns/key")
		})
		b.Run(fmt.Sprintf("workers=%d/impl=client-go", workers), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
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
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reconcileKeys)), "ns/key")
		})
	}
}
