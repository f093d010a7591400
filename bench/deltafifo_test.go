package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ctrlkit/ctrlkit/deltafifo"
)

// fifoQueue is what the FIFO benchmarks need from either implementation: a producer
// side and a consumer that pops once, calling seen for each delta it receives.
type fifoQueue struct {
	add     func(*corev1.ConfigMap) error
	replace func([]*corev1.ConfigMap) func() error // prepares the argument, returns the call
	pop     func(seen func(n int)) error
	close   func()
}

func fifoCtrlkit(known deltafifo.KnownObjects[*corev1.ConfigMap]) fifoQueue {
	f := deltafifo.New(deltafifo.Config[*corev1.ConfigMap]{KnownObjects: known})
	ctx := context.Background()
	return fifoQueue{
		add: f.Add,
		replace: func(objs []*corev1.ConfigMap) func() error {
			return func() error { return f.Replace(objs, "1") }
		},
		pop: func(seen func(int)) error {
			return f.Pop(ctx, func(b deltafifo.Batch[*corev1.ConfigMap]) error {
				seen(len(b.Deltas))
				return nil
			})
		},
		close: f.Close,
	}
}

func fifoClientgoReplace(replace func([]any, string) error) func([]*corev1.ConfigMap) func() error {
	return func(objs []*corev1.ConfigMap) func() error {
		list := make([]any, len(objs))
		for i, o := range objs {
			list[i] = o
		}
		return func() error { return replace(list, "1") }
	}
}

// fifoClientgo is client-go's RealFIFO as informers build it without the AtomicFIFO feature:
// KnownObjects set, one delta per Pop.
func fifoClientgo(known cache.KeyListerGetter) fifoQueue {
	f := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{KeyFunction: cache.MetaNamespaceKeyFunc, KnownObjects: known})
	return fifoQueue{
		add:     func(o *corev1.ConfigMap) error { return f.Add(o) },
		replace: fifoClientgoReplace(f.Replace),
		pop: func(seen func(int)) error {
			_, err := f.Pop(func(obj any, _ bool) error {
				seen(len(obj.(cache.Deltas)))
				return nil
			})
			return err
		},
		close: f.Close,
	}
}

// fifoClientgoAtomic is client-go's RealFIFO as v0.37 informers build it by default
// (AtomicFIFO and UnlockWhileProcessingFIFO on), popped with PopBatch.
func fifoClientgoAtomic() fifoQueue {
	f := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{
		KeyFunction:           cache.MetaNamespaceKeyFunc,
		AtomicEvents:          true,
		UnlockWhileProcessing: true,
	})
	return fifoQueue{
		add:     func(o *corev1.ConfigMap) error { return f.Add(o) },
		replace: fifoClientgoReplace(f.Replace),
		pop: func(seen func(int)) error {
			return f.PopBatch(
				func(deltas []cache.Delta, _ bool) error { seen(len(deltas)); return nil },
				func(obj any, _ bool) error { seen(len(obj.(cache.Deltas))); return nil },
			)
		},
		close: f.Close,
	}
}

// fifoImpls are the queues the throughput benchmarks compare: ctrlkit's, client-go's
// RealFIFO as informers build it without the AtomicFIFO feature, and in its atomic mode.
var fifoImpls = []struct {
	name string
	new  func() fifoQueue
}{
	{"ctrlkit", func() fifoQueue { return fifoCtrlkit(idxCtrlkit()) }},
	{"client-go", func() fifoQueue { return fifoClientgo(idxClientgo()) }},
	{"client-go-atomic", fifoClientgoAtomic},
}

// BenchmarkDeltaFIFOThroughput moves b.N Added deltas from a producer goroutine to a
// consumer goroutine; ns/op is per delta.
func BenchmarkDeltaFIFOThroughput(b *testing.B) {
	idxBenchObjs()
	for _, impl := range fifoImpls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			fifoRun(b, impl.new(), idxObjects)
		})
	}
}

// fifoRun adds b.N deltas of the first keys objects, round and round, from a producer
// goroutine, and pops them all from this one.
func fifoRun(b *testing.B, q fifoQueue, keys int) {
	b.ReportAllocs()
	var wg sync.WaitGroup
	b.ResetTimer()
	wg.Go(func() {
		for i := range b.N {
			if err := q.add(idxBaseObjs[i%keys]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	for got := 0; got < b.N; {
		if err := q.pop(func(n int) { got += n }); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	wg.Wait()
	q.close()
}

// BenchmarkDeltaFIFOHotKeys is BenchmarkDeltaFIFOThroughput with the b.N deltas over
// only 1, 10 or 1,000 keys: objects updated again and again, as a busy controller's
// own objects are. ns/op is per delta added.
func BenchmarkDeltaFIFOHotKeys(b *testing.B) {
	idxBenchObjs()
	for _, keys := range []int{1, 10, 1000} {
		for _, impl := range fifoImpls {
			b.Run(fmt.Sprintf("keys=%d/impl=%s", keys, impl.name), func(b *testing.B) {
				fifoRun(b, impl.new(), keys)
			})
		}
	}
}

// BenchmarkDeltaFIFORelist queues a relist of 100k objects against a store that knows
// 100k keys (1% of them gone from the list, 1% of the list new) and pops it all with a
// consumer that does nothing. ctrlkit and client-go's RealFIFO both compute the
// deletions against the known store.
func BenchmarkDeltaFIFORelist(b *testing.B) {
	idxBenchObjs()
	known := idxBaseObjs
	list := append(idxNewerObjs[idxObjects/100:], idxExtraObjs[:idxObjects/100]...)
	ck := idxCtrlkit()
	cg := idxClientgo()
	for _, o := range known {
		_ = ck.Add(o)
		_ = cg.Add(o)
	}
	for _, impl := range []struct {
		name string
		new  func() fifoQueue
	}{
		{"ctrlkit", func() fifoQueue { return fifoCtrlkit(ck) }},
		{"client-go", func() fifoQueue { return fifoClientgo(cg) }},
	} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			var peak uint64
			for b.Loop() {
				b.StopTimer()
				q := impl.new()
				replace := q.replace(list)
				runtime.GC()
				b.StartTimer()
				peak += idxPeakHeap(func() {
					if err := replace(); err != nil {
						b.Fatal(err)
					}
					for got := 0; got < len(list)+idxObjects/100; {
						if err := q.pop(func(n int) { got += n }); err != nil {
							b.Fatal(err)
						}
					}
				})
				q.close()
			}
			b.ReportMetric(float64(peak)/float64(b.N)/1e6, "peak-MB")
		})
	}
}
