package reconcile

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/informer"
)

// BenchmarkNoopReconcileReadYourWrites: the cost of read-your-writes on a
// reconcile that writes nothing, its source a cache the gate watches ("on"),
// against the same controller with it turned off; b.N keys, 4 workers.
func BenchmarkNoopReconcileReadYourWrites(b *testing.B) {
	for _, tc := range []struct {
		name    string
		timeout int
	}{{"on", 0}, {"off", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			keys := make([]string, b.N)
			for i := range keys {
				keys[i] = strconv.Itoa(i)
			}
			cache := newFakeCache(informer.Scope{Resource: schema.GroupResource{Resource: "configmaps"}})
			src := cacheKeySource{newKeySource(keys...), cache}
			var done atomic.Int64
			finished := make(chan struct{})
			c := New[string](Func[string](func(ctx context.Context, key string) (Result, error) {
				if done.Add(1) == int64(b.N) {
					close(finished)
				}
				return Result{}, nil
			}), Config[string]{Workers: 4, CacheWaitTimeout: time.Duration(tc.timeout)})
			if err := c.Watch(src); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- c.Run(ctx) }()
			<-finished
			b.StopTimer()
			cancel()
			<-errc
		})
	}
}
