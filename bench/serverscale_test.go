//go:build e2e

package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// BenchmarkServerInformerScale is the scale curve of the initial sync: ctrlkit,
// client-go and the streaming floor (floor-stream, see floor_test.go), without
// the relist, over 10,000, 50,000 and 200,000 ConfigMaps (2,000, 5,000 and
// 20,000 with -short) of their own namespace on the same control plane. The
// namespace grows: it is filled to the first size, measured, filled up to the
// next, measured, and so on, so that the largest size is written once. Besides
// sync-ms and heap-MB, each side reports them per object (ns/object, B/object):
// flat across the sizes if the cost grows linearly. The paginated floor is left
// out: on this API server, paging through a LIST of the most recent version
// costs more per object the larger the collection (about a minute for 200,000
// objects, more than 10× the time per object of 10,000, in a trial), which
// would take most of the phase's time and measure the server.
//
// The sides of one size are measured in rounds, as in BenchmarkServerInformerSync
// (see srvRounds); an unmeasured streaming list warms the server after each
// growth.
func BenchmarkServerInformerScale(b *testing.B) {
	s := srvStart(b)
	for _, n := range srvScaleSizes() {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			r, err := s.scaleRounds(n)
			if err != nil {
				b.Fatal(err)
			}
			for _, side := range r.sides {
				b.Run("impl="+side.impl, func(b *testing.B) {
					first := true
					r.report(b, side.impl, 0, func(res srvResult) {
						if first {
							first = false
							b.Log(res.stats)
						}
					})
				})
			}
		})
	}
}

const srvScaleNamespace = "srv-scale"

// srvScaleSizes returns the sizes of the scale curve, smallest first.
func srvScaleSizes() []int {
	if testing.Short() {
		return []int{2000, 5000, 20000}
	}
	return []int{10000, 50000, 200000}
}

// srvScale is the state of the scale curve's namespace, shared by the
// repetitions of -count.
var srvScale struct {
	filled int                // ConfigMaps in srvScaleNamespace
	rounds map[int]*srvRounds // by size
}

// scaleRounds returns the rounds of size n, growing the namespace to n objects
// first if it holds fewer. It cannot shrink: the sizes must come in order.
func (s *srvEnv) scaleRounds(n int) (*srvRounds, error) {
	if r := srvScale.rounds[n]; r != nil {
		return r, nil
	}
	if n < srvScale.filled {
		return nil, fmt.Errorf("the scale namespace holds %d objects, more than %d", srvScale.filled, n)
	}
	ctx := context.Background()
	t0 := time.Now()
	if err := s.fill(ctx, srvScaleNamespace, srvScale.filled, n); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "bench: %s grown from %d to %d ConfigMaps in %v\n", srvScaleNamespace, srvScale.filled, n, time.Since(t0).Round(time.Millisecond))
	srvScale.filled = n
	warm := func(ctx context.Context) error {
		_, err := floorStream(ctx, s.client.CoreV1().RESTClient(), srvScaleNamespace)
		return err
	}
	if err := warm(ctx); err != nil {
		return nil, err
	}
	inf := func(start srvStartFunc) func(context.Context) (srvResult, error) {
		return func(ctx context.Context) (srvResult, error) {
			return s.once(ctx, start, srvScaleNamespace, n, false, false)
		}
	}
	floor := func(list floorFunc) func(context.Context) (srvResult, error) {
		return func(ctx context.Context) (srvResult, error) { return s.floorOnce(ctx, list, srvScaleNamespace, n) }
	}
	r := newSrvRounds(nil,
		srvSide{impl: "ctrlkit", measure: inf(srvStartCtrlkit)},
		srvSide{impl: "client-go", measure: inf(srvStartClientgo)},
		srvSide{impl: "floor-stream", measure: floor(floorStream)},
	)
	if srvScale.rounds == nil {
		srvScale.rounds = map[int]*srvRounds{}
	}
	srvScale.rounds[n] = r
	return r, nil
}
