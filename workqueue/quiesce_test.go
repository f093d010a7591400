package workqueue

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestStressQuiescesWithoutShutDown runs a controller's mix (4 workers waiting with one
// shared context, producers adding at two priorities, a resync re-adding every key at the
// lower one, requeues and rate-limited retries before Done) in real time, then stops the
// producers and waits, without shutting the queue down: every item must be handed out
// after its last add. A drain would wake every sleeping Get and hide an item left ready
// behind them, or one that adds can no longer reach.
func TestStressQuiescesWithoutShutDown(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
		timeout bool // each Get waits with a context of its own that ends soon
		binned  bool // with Binned metrics (Dones are staged then too)
	}{
		{"4 workers, one context", 4, false, false},
		{"64 workers, Gets with deadlines", 64, true, false},
		{"16 workers, Binned metrics", 16, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) { stressQuiesce(t, tc.workers, tc.timeout, tc.binned) })
	}
}

// nsName is a controller's key: items of a type of two strings, as reconcile's are.
type nsName struct{ namespace, name string }

func stressQuiesce(t *testing.T, workers int, timeout, binned bool) {
	const items, producers = 1000, 6
	length := 2 * time.Second
	if testing.Short() {
		length = 300 * time.Millisecond
	}
	keys := make([]nsName, items)
	index := make(map[nsName]int, items)
	for i := range keys {
		keys[i] = nsName{"ns-" + strconv.Itoa(i%7), "cm-" + strconv.Itoa(i)}
		index[keys[i]] = i
	}
	cfg := Config[nsName]{RateLimiter: NewExponential[nsName](100*time.Microsecond, 5*time.Millisecond)}
	m := &binnedMetrics{}
	if binned {
		cfg.Metrics = m
	}
	q := New(cfg)
	var handouts atomic.Int64
	var adds, seen [items]atomic.Int64
	var held [items]atomic.Bool
	for i, k := range keys { // the initial list, before the workers start
		adds[i].Add(1)
		q.AddWithOptions(k, AddOptions{Priority: -1})
	}

	ctx, cancel := context.WithCancel(context.Background())
	var workersWG sync.WaitGroup
	for w := range workers {
		workersWG.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 99))
			for {
				var k nsName
				var err error
				if timeout {
					gctx, gcancel := context.WithTimeout(ctx, time.Duration(1+r.IntN(500))*time.Microsecond)
					k, err = q.Get(gctx)
					gcancel()
					if err != nil && ctx.Err() == nil && !errors.Is(err, ErrShutDown) {
						continue // this Get's own deadline
					}
				} else {
					k, err = q.Get(ctx)
				}
				if err != nil {
					return
				}
				item := index[k]
				handouts.Add(1)
				if !held[item].CompareAndSwap(false, true) {
					t.Errorf("item %d handed to two workers", item)
				}
				seen[item].Store(adds[item].Load())
				switch r.IntN(20) {
				case 0:
					time.Sleep(50 * time.Microsecond)
				case 1:
					adds[item].Add(1)
					q.AddRateLimited(k) // a failed reconcile
				case 2:
					adds[item].Add(1)
					q.Add(k) // added again while in flight
				default:
					q.Forget(k)
				}
				held[item].Store(false)
				q.Done(k)
			}
		})
	}

	stop := make(chan struct{})
	var producersWG sync.WaitGroup
	for p := range producers {
		producersWG.Go(func() {
			r := rand.New(rand.NewPCG(uint64(p), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				item := r.IntN(items)
				adds[item].Add(1)
				switch r.IntN(8) {
				case 0:
					q.AddAfter(keys[item], time.Duration(r.IntN(2000))*time.Microsecond)
				case 1:
					q.AddWithOptions(keys[item], AddOptions{Priority: -1})
				default:
					q.AddWithOptions(keys[item], AddOptions{Priority: 0})
				}
				if r.IntN(64) == 0 {
					time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
				}
			}
		})
	}
	producersWG.Go(func() { // resync: every item again at the low priority, spread out
		for {
			for i := range items {
				select {
				case <-stop:
					return
				default:
				}
				adds[i].Add(1)
				q.AddWithOptions(keys[i], AddOptions{Priority: -1})
				if i%100 == 99 {
					time.Sleep(time.Millisecond)
				}
			}
		}
	})
	time.Sleep(length)
	close(stop)
	producersWG.Wait()

	deadline := time.Now().Add(5 * time.Second)
	for {
		var behind []int
		for i := range items {
			if adds[i].Load() != seen[i].Load() {
				behind = append(behind, i)
			}
		}
		if len(behind) == 0 {
			break
		}
		if time.Now().After(deadline) {
			q.mu.Lock()
			t.Errorf("%d items not handed out after their last add, 5s after the adds stopped: %v; ready %d, in flight %d, redirty %d, waiters %d, woken %d, nwait %d, nadds %d",
				len(behind), behind[:min(len(behind), 10)], q.c.ready, q.c.inflight, q.c.redirty, q.nwaiting, q.woken, q.nwait.Load(), q.nadds.Load())
			for _, i := range behind[:min(len(behind), 5)] {
				if s := q.c.find(keys[i]); s != none {
					e := q.c.e(s)
					t.Logf("item %d: state %d lane %d mk %d", i, e.state(), e.lane(), e.mk)
				} else {
					t.Logf("item %d: no entry", i)
				}
			}
			q.mu.Unlock()
			break
		}
		time.Sleep(time.Millisecond)
	}
	// Then single adds into the idle queue, each made once every Get sleeps (with
	// deadlines, most do): nothing but the add itself can wake one.
	for i := range 20 {
		for q.nwait.Load() < int32(workers)/2 {
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(time.Millisecond)
		want := adds[i].Add(1)
		if i%2 == 0 {
			q.Add(keys[i])
		} else {
			q.AddAfter(keys[i], 100*time.Microsecond)
		}
		for end := time.Now().Add(5 * time.Second); seen[i].Load() < want; time.Sleep(50 * time.Microsecond) {
			if time.Now().After(end) {
				t.Fatalf("item %d added into an idle queue not handed out in 5s", i)
			}
		}
	}
	if binned {
		// Every worker sleeps in Get, after a Get that applied the Dones staged before.
		for q.nwait.Load() < int32(workers) {
			time.Sleep(100 * time.Microsecond)
		}
		var st Stats
		m.stats(&st)
		if in := m.inFlight().Items; in != 0 || st.Worked.Count != uint64(handouts.Load()) {
			t.Errorf("Binned: %d in flight, %d processing times for %d handouts; want 0 and as many", in, st.Worked.Count, handouts.Load())
		}
	}
	cancel()
	q.ShutDown()
	workersWG.Wait()
}
