// Package workqueue is the queue between event handlers and workers: a generic,
// deduplicating work queue with delays, per-item rate limiting, priorities with aging,
// fairness between keys, and metrics hooks. It keeps the guarantees of client-go's
// util/workqueue and adds what it lacks.
//
// Workers loop on Get, process the item, and call Done:
//
//	for {
//		item, err := q.Get(ctx)
//		if err != nil {
//			return // ErrShutDown, or ctx ended
//		}
//		if err := process(item); err != nil {
//			q.AddRateLimited(item) // retry later, with backoff
//		} else {
//			q.Forget(item) // reset the backoff
//		}
//		q.Done(item)
//	}
//
// # Guarantees
//
//   - Dedup: an item added any number of times while it waits is handed out once. An Add
//     of an item that waits at an equal or higher priority and was seen duplicated before
//     returns without taking a lock or writing shared memory (see Queue.Add), so a storm of
//     adds of hot keys does not contend with the workers.
//   - Stingy: an item is never handed to two workers at once. Added while being processed,
//     it is queued again when Done is called, at the back of its group.
//   - Order: higher priority first. Within a priority, items of one fairness key are
//     handed out in the order they became pending (FIFO); with Config.FairnessKey, keys
//     take turns, one item per turn, a key that becomes non-empty joining the end of the
//     round. So an item waits at most one turn per other key active at its priority ahead
//     of each item before it in its own key; 100,000 items of one key delay another key's
//     single item by one handout.
//   - Aging: let A be Config.AgingLimit and L the largest number of distinct priorities
//     with waiting items at once. While a priority level has waiting items, at most A+L-1
//     items of other levels are handed out between two of its own handouts (and from the
//     moment it became non-empty to its first); with two levels, exactly A when the higher
//     one never runs dry. So no steady flow of high-priority items starves a low-priority
//     one: without fairness keys, an item with k items ahead of it in its level is handed
//     out within (k+1)(A+L) handouts; with fairness keys, its key gets a turn at least once
//     per K turns of its level, K the number of keys active there.
//   - Delays: AddAfter keeps the earliest deadline per item, and due items are added in
//     deadline order, items with equal deadlines in the order they were scheduled, never
//     before their deadline. A delayed add that fires is an ordinary add (deduplicated
//     against the item's current state, as in client-go). Deadlines that come due within
//     50µs of a firing of the delay timer wait for the next firing (timer slack, as Linux
//     applies to its timers), so a stream of close deadlines costs one wake-up per batch
//     rather than one each; a Get that finds nothing ready adds the due items itself
//     instead of waiting for the timer.
//   - Rate limiting: AddRateLimited asks the Config.RateLimiter; Forget resets an item's
//     backoff. The built-in limiters remember only items that failed and were not
//     forgotten, and shrink their tables when they empty, so failure bookkeeping is bounded
//     by the items currently failing.
//   - Blocking: Get honours its context, and returns ErrShutDown after shut-down once
//     nothing is left to hand out.
//   - Goroutines: New starts none. The only one the queue ever uses is the delay timer's
//     callback (time.AfterFunc), made on the first delayed add; ShutDown waits for a
//     running one and none runs after it returns.
//   - Memory: bounded by the items held (waiting, in flight, scheduled) plus the finished
//     items kept for cheap re-adds (Config.KeepFinished), and given back when the queue
//     runs empty after a load far below its past peak. With string items, a scheduled item
//     costs about 84 bytes (client-go: about 113); Add, Get and Done allocate nothing in
//     steady state. A queue that has seen a duplicate add also keeps a 32KiB table for the
//     lock-free duplicate check, and about 100 bytes per item seen duplicated, for as long
//     as the item is held or kept.
//   - Hooks: FairnessKey, RateLimiter and Metrics are never called with the queue's lock
//     held.
//
// # Misuse
//
// Done for an item that is not being processed (never handed out, or already Done) is
// ignored. Adds after shut-down are ignored. ShutDown may be called any number of times.
// None of these panics or blocks. A worker that never calls Done keeps its item "in
// flight" forever, which blocks ShutDownWithDrain until its context ends or ShutDown is
// called.
//
// # Differences from client-go
//
// Get takes a context and returns an error instead of a shutdown flag. Get keeps waiting
// after shut-down while an item that was added during its processing still has to be
// re-queued by Done, so that item is not stranded. ShutDownWithDrain takes a context and
// waits for ready items too, not only for those in flight. A ShutDown ends a waiting
// ShutDownWithDrain, as in client-go (a second signal cuts a graceful shut-down short),
// which then returns ErrDrainAborted; a ShutDownWithDrain called after ShutDown does not
// wait (client-go's waits). Done of an item that is not in flight is ignored (client-go
// queues it a second time if it is waiting). AddRateLimited after shut-down records no
// failure. Metrics go through Config.Metrics, not a global provider; the unfinished-work
// gauges are computed when read instead of by a ticker goroutine. The default RateLimiter
// is client-go's default, and any client-go TypedRateLimiter can be used as is.
package workqueue
