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
// Attach.
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
