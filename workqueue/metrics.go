package workqueue

import "time"

// Metrics receives a queue's events, so that any metrics system can be plugged in without a
// global registry. Package prommetrics implements it for Prometheus with client-go's metric
// names.
//
// The queue calls these methods without holding its lock, from the goroutine that caused the
// event (Add, Get, Done, a delay timer), except Added: Add only buffers the item (see Queue),
// and Added is reported by the goroutine that applies the buffer, usually the next Get or
// Done, and at the latest by the function handed to Attach, before it returns. So calls
// for different items may arrive out of order across goroutines; implementations must be
// safe for concurrent use and should only do commutative updates (counters, Inc/Dec,
// observations). They must not call back into the queue, except for the function handed to
// Attach. A Metrics that also implements Binned is not called for Added, Started and
// Finished: the queue keeps those counts itself (see Binned).
type Metrics interface {
	// Added reports that an item became pending: it was neither waiting nor already due to
	// be re-queued. Adds of an item that is already pending are not reported. This is
	// client-go's "adds" counter and "depth" increment.
	Added()
	// Started reports that an item was handed out by Get after being pending for waited
	// (the "depth" decrement and the queue-duration observation).
	Started(waited time.Duration)
	// Finished reports a Done for an item that was processed for worked.
	Finished(worked time.Duration)
	// Retried reports a call of AddAfter or AddRateLimited, or an AddWithOptions with a
	// delay or rate limiting (client-go counts AddAfter calls as retries).
	Retried()
	// Attach is called once by New with a function that reports, whenever it is called,
	// the items currently handed out and not yet Done. It is safe to call from any
	// goroutine at any time, including after shut-down, and takes the queue's lock briefly.
	// It first applies the adds still buffered and reports them to Added, so a reader that
	// calls it before reading its counters has seen every add made before the call.
	Attach(inFlight func() InFlight)
}

// InFlight describes the work in progress at one moment.
type InFlight struct {
	// Items is the number of items handed out and not yet Done.
	Items int
	// Total is the sum over those items of the time since each was handed out.
	Total time.Duration
	// Longest is the largest of those times (0 when Items is 0).
	Longest time.Duration
	// Ready is the number of items waiting to be handed out (the depth): those reported
	// to Added and not yet to Started.
	Ready int
}

// Binned is an optional interface of Metrics, for a metrics system that keeps histograms
// (package prommetrics implements it). When Config.Metrics implements it, the queue counts
// the adds and bins the waiting and processing times itself, with the lock it holds for
// those events anyway, instead of calling Added, Started and Finished: an item then costs
// no call and no atomic update of counters that every worker writes. The Metrics reads the
// counts when it needs them (when scraped) through the function handed to AttachStats.
// Retried and Attach are called as for any Metrics.
type Binned interface {
	Metrics
	// Bounds returns the upper bounds of the histograms' buckets, ascending. New calls it
	// once.
	Bounds() []time.Duration
	// AttachStats is called once by New, after Attach, with a function that adds the
	// queue's counts since it was made to *into. That function first applies the adds still
	// buffered, as Attach's does; it is safe to call from any goroutine at any time,
	// including after shut-down, and takes the queue's lock briefly.
	AttachStats(stats func(into *Stats))
}

// Stats are the counts a queue keeps for a Binned Metrics.
type Stats struct {
	// Adds counts the adds that made an item pending (what Added reports).
	Adds uint64
	// Waited bins the times from becoming pending to being handed out (what Started
	// reports); Worked the times from being handed out to Done (what Finished reports).
	Waited, Worked Histogram
}

// Histogram counts durations in the buckets of Binned.Bounds.
type Histogram struct {
	// Buckets[i] counts the durations at most Bounds()[i] and above the bound before it;
	// the last element, Buckets[len(Bounds())], counts those above every bound. It is nil
	// until a count is added.
	Buckets []uint64
	// Count is the number of durations, Sum their sum.
	Count uint64
	Sum   time.Duration
}

// Add adds the counts of o to h. Both must have the same bounds (or no buckets yet).
func (h *Histogram) Add(o *Histogram) {
	if len(o.Buckets) > 0 {
		if len(h.Buckets) < len(o.Buckets) {
			h.Buckets = append(h.Buckets, make([]uint64, len(o.Buckets)-len(h.Buckets))...)
		}
		for i, n := range o.Buckets {
			h.Buckets[i] += n
		}
	}
	h.Count += o.Count
	h.Sum += o.Sum
}

// Add adds the counts of o to s.
func (s *Stats) Add(o *Stats) {
	s.Adds += o.Adds
	s.Waited.Add(&o.Waited)
	s.Worked.Add(&o.Worked)
}

// bins is a pair of histograms with their bounds, kept by the core for a Binned Metrics.
type bins struct {
	bounds []int64 // nanoseconds, ascending
	stats  Stats
}

func newBins(bounds []time.Duration) *bins {
	b := &bins{bounds: make([]int64, len(bounds))}
	for i, d := range bounds {
		b.bounds[i] = int64(d)
	}
	b.stats.Waited.Buckets = make([]uint64, len(bounds)+1)
	b.stats.Worked.Buckets = make([]uint64, len(bounds)+1)
	return b
}

// observe counts d (nanoseconds) in h, one of b's histograms.
func (b *bins) observe(h *Histogram, d int64) {
	i := 0
	for i < len(b.bounds) && d > b.bounds[i] {
		i++
	}
	h.Buckets[i]++
	h.Count++
	h.Sum += time.Duration(d)
}
