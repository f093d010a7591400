package reconcile

import (
	"context"
	"math/rand/v2"
	"runtime/debug"
	"time"
)

// resyncGranularity is the shortest sleep of the resync loop: keys due within it
// of each other are enqueued by one wake-up.
const resyncGranularity = 10 * time.Millisecond

// resync re-enqueues every key of the sources once per period, at Background
// priority, until ctx ends. Within a period the n keys (deduplicated, in random
// order) are spread over n equal slots, each key at a uniformly random point of
// its own slot: the rate is even over the period, never a burst, and the exact
// instants vary from period to period.
func (c *Controller[K]) resync(ctx context.Context, sources []Source[K]) {
	period := c.cfg.ResyncPeriod
	timer := time.NewTimer(period)
	defer timer.Stop()
	var keys []K
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		keys = c.resyncKeys(keys[:0], sources)
		c.log.V(1).Info("resync", "keys", len(keys))
		due := spread(len(keys), period, rand.Float64)
		for i := 0; i < len(keys); {
			now := time.Since(start)
			for i < len(keys) && due[i] <= now {
				c.enqueue(keys[i], Background)
				i++
			}
			if i == len(keys) {
				break
			}
			timer.Reset(max(due[i]-now, resyncGranularity))
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
		clear(keys)
		// The next period starts one period after this one did.
		timer.Reset(max(period-time.Since(start), 0))
	}
}

// resyncKeys is the package function resyncKeys, with a panic of a source's
// AppendKeys reported and that source's keys left out of this round.
func (c *Controller[K]) resyncKeys(dst []K, sources []Source[K]) []K {
	for _, src := range sources {
		dst = c.appendKeys(dst, src)
	}
	return resyncKeys(dst, nil)
}

// appendKeys is src.AppendKeys(dst), or dst if it panics.
func (c *Controller[K]) appendKeys(dst []K, src Source[K]) (out []K) {
	n := len(dst)
	defer func() {
		if v := recover(); v != nil {
			clear(dst[n:cap(dst)])
			out = dst[:n]
			c.sourcePanicked(&PanicError{Source: src.Name(), Object: "(resync)", Value: v, Stack: debug.Stack()})
		}
	}()
	return src.AppendKeys(dst)
}

// resyncKeys appends the distinct keys of all sources to dst, with the keys
// already in dst, shuffled.
func resyncKeys[K comparable](dst []K, sources []Source[K]) []K {
	for _, src := range sources {
		dst = src.AppendKeys(dst)
	}
	seen := make(map[K]struct{}, len(dst))
	n := 0
	for _, k := range dst {
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		dst[n] = k
		n++
	}
	clear(dst[n:])
	dst = dst[:n]
	rand.Shuffle(len(dst), func(i, j int) { dst[i], dst[j] = dst[j], dst[i] })
	return dst
}

// spread returns n offsets in [0, period), non-decreasing: offset i lies in slot
// [i·period/n, (i+1)·period/n) at the point rnd() (in [0,1)) of the slot.
func spread(n int, period time.Duration, rnd func() float64) []time.Duration {
	due := make([]time.Duration, n)
	slot := float64(period) / float64(n)
	for i := range due {
		due[i] = time.Duration((float64(i) + rnd()) * slot)
	}
	return due
}
