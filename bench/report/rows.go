package main

import "fmt"

// The ratio table: which case, which unit, which baseline and which target, as the
// package issues state them (issue 3: workqueue, issue 4: indexer and deltafifo,
// issue 5: informer, issue 19: the informer against the floor). A time ratio
// ctrlkit/client-go of at most 0.5 is "at least 2× client-go's throughput". The
// rows of the informer's scale curve are added from the raw outputs (scale.go).

// rows lists the table's lines in display order.
var rows = append(append(append(append(baseRows, mapperRows()...), manyControllerRows(1, 10, 30)...), rywRows()...), latencyRows(100, 1000, 5000)...)

// rywRows are the rows of BenchmarkRYWCost (bench/controllerruntime/rywcost):
// read-your-writes on controllers that write, on the real server, 1,000 ConfigMaps
// changed at once, 4 workers; ctrlkit with TrackWrites against controller-runtime's
// EnableReadYourWritesConsistency, and each against itself without it.
func rywRows() []row {
	atMost := target{kind: ratioMax, value: 1, text: "≤ controller-runtime (ratio ≤ 1)"}
	var rs []row
	for _, sh := range []struct{ c, title string }{
		{"steps", "each object updated 3 times, one update a reconcile and a 1 ms requeue between"},
		{"child", "each reconcile makes sure the object's owned Secret exists, deletes older ones, then updates the object"},
	} {
		c := caseKey("CRRYWCost/shape=" + sh.c)
		at := "read-your-writes, real server, 1,000 ConfigMaps changed at once, 4 workers, " + sh.title
		rs = append(rs,
			row{area: "reconcile", title: at + ": until every object converged (vs controller-runtime with its read-your-writes)", c: c, impl: "ctrlkit-ryw", base: "controller-runtime-ryw", unit: "converge-ms", target: atMost},
			row{area: "reconcile", title: at + ": client CPU (vs controller-runtime with its read-your-writes)", c: c, impl: "ctrlkit-ryw", base: "controller-runtime-ryw", unit: "cpu-ms", target: atMost},
			row{area: "reconcile", title: at + ": until every object converged, ctrlkit with read-your-writes over ctrlkit without", c: c, impl: "ctrlkit-ryw", base: "ctrlkit", unit: "converge-ms"},
			row{area: "reconcile", title: at + ": client CPU, ctrlkit with read-your-writes over ctrlkit without", c: c, impl: "ctrlkit-ryw", base: "ctrlkit", unit: "cpu-ms"},
			row{area: "reconcile", title: at + ": write conflicts (409) per change, ctrlkit with read-your-writes against controller-runtime without it", c: c, impl: "ctrlkit-ryw", base: "controller-runtime", unit: "conflicts"},
		)
	}
	return rs
}

// manyControllerRows are the rows of BenchmarkManyControllers
// (bench/controllerruntime/manyctl): n controllers in one manager, sharing one
// ConfigMap and one Secret informer, on the real server, against controller-runtime's
// manager with the same controllers.
func manyControllerRows(ns ...int) []row {
	atMost := target{kind: ratioMax, value: 1, text: "≤ controller-runtime (ratio ≤ 1)"}
	var rs []row
	for _, n := range ns {
		c := caseKey(fmt.Sprintf("CRManyControllers/ctrl=%d", n))
		ctl := "controllers"
		if n == 1 {
			ctl = "controller"
		}
		at := fmt.Sprintf("real server, %d %s in one manager on shared informers (2,000 ConfigMaps, 200 Secrets)", n, ctl)
		rs = append(rs,
			row{area: "manager", title: at + ": start until every controller reconciled every key once", c: c, base: "controller-runtime", unit: "start-ms", target: atMost},
			row{area: "manager", title: at + ": client CPU of that start", c: c, base: "controller-runtime", unit: "start-cpu-ms", target: atMost},
			row{area: "manager", title: at + ": live heap with the caches synced (one copy of each)", c: c, base: "controller-runtime", unit: "heap-B", target: atMost},
			row{area: "manager", title: at + ": 1,000 updates until every controller reconciled each", c: c, base: "controller-runtime", unit: "burst-ms"},
			row{area: "manager", title: at + ": update → each controller's reconcile, p50", c: c, base: "controller-runtime", unit: "lat-p50-ms", target: atMost},
			row{area: "manager", title: at + ": update → each controller's reconcile, p99", c: c, base: "controller-runtime", unit: "lat-p99-ms", target: atMost},
			row{area: "manager", title: at + ": client CPU during the 1,000 updates", c: c, base: "controller-runtime", unit: "burst-cpu-ms", target: atMost},
		)
	}
	return rs
}

// mapperRows are the rows of BenchmarkMapperSources (bench/controllerruntime):
// controllers on an in-memory informer, each with a Mapper, against controller-runtime's
// source.Informer with EnqueueRequestsFromMapFunc; start (the cache replayed until
// every key reconciled once) and live (updates through the watch) per shape.
func mapperRows() []row {
	atMost := target{kind: ratioMax, value: 1, text: "≤ controller-runtime (ratio ≤ 1)"}
	var rs []row
	add := func(c, shape string, live bool) {
		rs = append(rs, row{area: "reconcile", title: "mappers on a synced in-memory informer (vs controller-runtime's source.Informer + EnqueueRequestsFromMapFunc), " + shape + ": start until every key reconciled once (per key)", c: caseKey("CRMapperSources/" + c), base: "controller-runtime", unit: "start-sec/key", target: atMost})
		if live {
			rs = append(rs, row{area: "reconcile", title: "mappers, " + shape + ": updates through the watch until the last one reconciled (per event)", c: caseKey("CRMapperSources/" + c), base: "controller-runtime", unit: "live-sec/event", target: atMost})
		}
	}
	for _, n := range []int{100, 1_000, 10_000, 100_000} {
		for _, k := range []int{1, 10} {
			shape := fmt.Sprintf("each object its own key, %s objects, %d controller", thousands(n), k)
			if k > 1 {
				shape = fmt.Sprintf("each object its own key, %s objects, %d controllers sharing the informer", thousands(n), k)
			}
			add(fmt.Sprintf("byobject/n=%d/controllers=%d", n, k), shape, true)
		}
	}
	for _, n := range []int{10_000, 100_000} {
		add(fmt.Sprintf("many-to-one/n=%d/controllers=1", n), fmt.Sprintf("many to one (100 objects per owner key), %s objects", thousands(n)), true)
		add(fmt.Sprintf("fan-out/n=%d/controllers=1", n), fmt.Sprintf("fan-out (100 keys per object), %s objects", thousands(n)), true)
	}
	return rs
}

// thousands writes n as 100, 1k, 10k, 100k.
func thousands(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// latencyRows are the end-to-end rows of issue 19 for each target write rate:
// ctrlkit's manager against controller-runtime's on the real server
// (bench/controllerruntime/latency). Only the latencies carry a target, and a
// modest one: the writes, the server and the controller share 2 cores, so the
// server bounds the write rate and most of the latency.
func latencyRows(rates ...int) []row {
	var rs []row
	atMost := target{kind: ratioMax, value: 1, text: "≤ controller-runtime (ratio ≤ 1)"}
	for _, r := range rates {
		c := caseKey(fmt.Sprintf("CRE2ELatency/rate=%d", r))
		pc := caseKey(fmt.Sprintf("CRE2ELatencyPaired/rate=%d", r))
		at := fmt.Sprintf("real server, %d writes/s asked", r)
		rs = append(rs,
			row{area: "end to end", title: at + ", one controller at a time: change-to-reconcile latency p50 (write sent → first reconcile that saw it)", c: c, base: "controller-runtime", unit: "lat-p50-ms", target: atMost},
			row{area: "end to end", title: at + ": change-to-reconcile latency p99", c: c, base: "controller-runtime", unit: "lat-p99-ms", target: atMost},
			row{area: "end to end", title: at + ": write rate achieved (the server saturates on 2 cores)", c: c, base: "controller-runtime", unit: "writes/s", better: higherBetter},
			row{area: "end to end", title: at + ": watch event at the informer → reconcile, p99 (the controller's own part)", c: c, base: "controller-runtime", unit: "handler-p99-ms"},
			row{area: "end to end", title: at + ": reconciles per second", c: c, base: "controller-runtime", unit: "recon/s"},
			row{area: "end to end", title: at + ": lag, last write sent → every key's last write reconciled", c: c, base: "controller-runtime", unit: "lag-ms"},
			row{area: "end to end", title: at + ", both controllers at once on the same writes: change-to-reconcile latency p50", c: pc, base: "controller-runtime", unit: "lat-p50-ms", target: atMost},
			row{area: "end to end", title: at + ", both at once: change-to-reconcile latency p99", c: pc, base: "controller-runtime", unit: "lat-p99-ms", target: atMost},
			row{area: "end to end", title: at + ", both at once: watch event at the informer → reconcile, p99", c: pc, base: "controller-runtime", unit: "handler-p99-ms"},
		)
	}
	return rs
}

// twice and noAllocs are issue 19's targets for every work-queue shape.
var (
	twice    = target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}
	noAllocs = target{kind: absMax, value: 0, text: "0 allocs/op"}
)

// floorRow is the row of impl's time on an Add/Get/Done shape over the floor's.
func floorRow(c caseKey, shape, impl string) row {
	title := "vs the hand-off floor (a buffered channel): Add/Get/Done " + shape + ", " + impl + "'s time over the floor's"
	return row{area: "workqueue", title: title, c: c, impl: impl, base: "floor", unit: "sec/op"}
}

// baseRows are the rows of the in-process benchmarks and the server phases.
var baseRows = []row{
	// workqueue
	{area: "workqueue", title: "Add/Get/Done 4 producers × 4 workers × 1k keys", c: "WorkqueueAddGetDone/p4w4k1000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "Add/Get/Done 4×4×1k", c: "WorkqueueAddGetDone/p4w4k1000", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "Add/Get/Done 1 producer × 1 worker × 100k keys", c: "WorkqueueAddGetDone/p1w1k100000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "Add/Get/Done 1×1×100k", c: "WorkqueueAddGetDone/p1w1k100000", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "Add/Get/Done 8 producers × 16 workers × 10k keys", c: "WorkqueueAddGetDone/p8w16k10000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "Add/Get/Done 8×16×10k", c: "WorkqueueAddGetDone/p8w16k10000", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "AddAfter of distinct keys, fired", c: "WorkqueueAddAfter", unit: "sec/op", target: target{kind: ratioMax, value: 1.0 / 3, text: "≥3× throughput (ratio ≤ 0.33)"}},
	{area: "workqueue", title: "AddAfter", c: "WorkqueueAddAfter", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "AddRateLimited over 10k keys", c: "WorkqueueAddRateLimited", unit: "sec/op", target: target{kind: ratioMax, value: 1.0 / 3, text: "≥3× throughput (ratio ≤ 0.33)"}},
	{area: "workqueue", title: "AddRateLimited", c: "WorkqueueAddRateLimited", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "memory per waiting item (1M AddAfter)", c: "WorkqueueWaitingMemory", unit: "B/item", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},

	// workqueue shapes of issue 19: ≥2× client-go's throughput and 0 allocs/op on each
	{area: "workqueue", title: "AddAfter of 1M distinct keys an hour ahead (RequeueAfter; nothing fires)", c: "WorkqueueAddAfterLong", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "AddAfter an hour ahead", c: "WorkqueueAddAfterLong", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "AddAfter of 1M distinct keys, delays 1ms–1h log-uniform (seeded), 1 worker takes what fires", c: "WorkqueueAddAfterMixed", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "AddAfter 1ms–1h", c: "WorkqueueAddAfterMixed", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "dedup-heavy Add: 4 producers over the same 1k keys, never waiting, 4 workers (ns per Add)", c: "WorkqueueDedup/p4w4k1000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "dedup-heavy 4×4×1k", c: "WorkqueueDedup/p4w4k1000", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "dedup-heavy Add: 1 producer × 1 worker × 1k keys", c: "WorkqueueDedup/p1w1k1000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "dedup-heavy Add: 4 producers × 16 workers × 1k keys", c: "WorkqueueDedup/p4w16k1000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "dedup-heavy Add: 4 producers × 64 workers × 1k keys", c: "WorkqueueDedup/p4w64k1000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "dedup-heavy 4×64×1k", c: "WorkqueueDedup/p4w64k1000", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "Add/Get/Done 1 producer × 1 worker × 1k keys", c: "WorkqueueAddGetDone/p1w1k1000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "Add/Get/Done of 1k keys in one goroutine (Add all, then Get and Done each; ns per item): the queue's own cost of the 1×1 cycle", c: "WorkqueueSerial", unit: "sec/op"},
	{area: "workqueue", title: "other shapes: one at a time in one goroutine (Add, Get, Done: the queue never holds more than one item) over 1k keys (ns per item)", c: "WorkqueueOneAtATime/keys", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "other shapes: one at a time, a new item each time (64k distinct, cycling)", c: "WorkqueueOneAtATime/distinct", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "one at a time", c: "WorkqueueOneAtATime/keys", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "Add/Get/Done 1×1×1k", c: "WorkqueueAddGetDone/p1w1k1000", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "Add/Get/Done 4 producers × 16 workers × 1k keys", c: "WorkqueueAddGetDone/p4w16k1000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "Add/Get/Done 4 producers × 64 workers × 10k keys", c: "WorkqueueAddGetDone/p4w64k10000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "Add/Get/Done 4×64×10k", c: "WorkqueueAddGetDone/p4w64k10000", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},

	// workqueue shapes the code was not tuned on (BenchmarkWorkqueueOtherShapes)
	{area: "workqueue", title: "other shapes: Add/Get/Done 2 producers × 2 workers × 1k keys (as many of each as cores)", c: "WorkqueueOtherShapes/agd-p2w2k1000", unit: "sec/op", target: twice},
	{area: "workqueue", title: "Add/Get/Done 2×2×1k", c: "WorkqueueOtherShapes/agd-p2w2k1000", unit: "allocs/op", target: noAllocs},
	{area: "workqueue", title: "other shapes: Add/Get/Done 1 producer × 4 workers × 1k keys", c: "WorkqueueOtherShapes/agd-p1w4k1000", unit: "sec/op", target: twice},
	{area: "workqueue", title: "other shapes: Add/Get/Done over 8 hot keys, 4 producers × 4 workers (nearly every item wakes a blocked Get)", c: "WorkqueueOtherShapes/agd-p4w4k8", unit: "sec/op", target: twice},
	{area: "workqueue", title: "other shapes: Add/Get/Done 1 producer × 1 worker over 10 keys (the two wait for each other every 10 items)", c: "WorkqueueOtherShapes/agd-p1w1k10", unit: "sec/op", target: twice},
	{area: "workqueue", title: "other shapes: Add/Get/Done 1 producer × 64 workers over 10 keys (most workers wait; each item finds a Get waiting)", c: "WorkqueueOtherShapes/agd-p1w64k10", unit: "sec/op", target: twice},
	{area: "workqueue", title: "other shapes: Add/Get/Done 1 producer × 2 workers over 2 keys", c: "WorkqueueOtherShapes/agd-p1w2k2", unit: "sec/op", target: twice},
	{area: "workqueue", title: "other shapes: dedup-heavy Add, 1 producer × 2 workers × 1k keys", c: "WorkqueueOtherShapes/dedup-p1w2k1000", unit: "sec/op", target: twice},
	{area: "workqueue", title: "other shapes: requeue, 4 workers over 1k keys each adding its item again before Done (ns per Get)", c: "WorkqueueRequeue/w4", unit: "sec/op", target: twice},
	{area: "workqueue", title: "other shapes: requeue, 16 workers over 1k keys", c: "WorkqueueRequeue/w16", unit: "sec/op", target: twice},
	{area: "workqueue", title: "other shapes: requeue, 64 workers over 1k keys", c: "WorkqueueRequeue/w64", unit: "sec/op", target: twice},
	{area: "workqueue", title: "other shapes: requeue after 20µs (AddAfter before Done), 64 workers over 1k keys", c: "WorkqueueRequeue/w64-after20µs", unit: "sec/op", target: twice},
	{area: "workqueue", title: "requeue 4 workers", c: "WorkqueueRequeue/w4", unit: "allocs/op", target: noAllocs},
	{area: "workqueue", title: "other shapes: AddAfter of the same 1k keys again and again, random delays 1s–1h (re-scheduling: the earlier deadline wins)", c: "WorkqueueOtherShapes/reschedule", unit: "sec/op", target: twice},
	{area: "workqueue", title: "AddAfter re-scheduling", c: "WorkqueueOtherShapes/reschedule", unit: "allocs/op", target: noAllocs},
	{area: "workqueue", title: "other shapes: AddRateLimited of one key again and again (its backoff grows to the cap)", c: "WorkqueueOtherShapes/ratelimited-one-key", unit: "sec/op", target: twice},
	{area: "workqueue", title: "AddRateLimited of one key", c: "WorkqueueOtherShapes/ratelimited-one-key", unit: "allocs/op", target: noAllocs},
	{area: "workqueue", title: "other shapes: Add of 1M distinct keys nobody takes (the queue grows from empty; ns per Add)", c: "WorkqueueAddDistinct", unit: "sec/op", target: twice},
	{area: "workqueue", title: "Add of 1M distinct keys: memory allocated per Add", c: "WorkqueueAddDistinct", unit: "B/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},

	// the Add/Get/Done shapes against the hand-off floor, a buffered channel (impl=floor,
	// bench/wqfloor_test.go): where client-go is under 2× the floor, 2× client-go is
	// below what the runtime's own hand-off costs.
	floorRow("WorkqueueAddGetDone/p1w1k1000", "1×1×1k", "ctrlkit"),
	floorRow("WorkqueueAddGetDone/p1w1k1000", "1×1×1k", "client-go"),
	floorRow("WorkqueueAddGetDone/p4w4k1000", "4×4×1k", "ctrlkit"),
	floorRow("WorkqueueAddGetDone/p4w4k1000", "4×4×1k", "client-go"),
	floorRow("WorkqueueOtherShapes/agd-p2w2k1000", "2×2×1k", "ctrlkit"),
	floorRow("WorkqueueOtherShapes/agd-p2w2k1000", "2×2×1k", "client-go"),
	floorRow("WorkqueueOtherShapes/agd-p1w4k1000", "1×4×1k", "ctrlkit"),
	floorRow("WorkqueueOtherShapes/agd-p1w4k1000", "1×4×1k", "client-go"),
	floorRow("WorkqueueOtherShapes/agd-p4w4k8", "4×4 over 8 hot keys", "ctrlkit"),
	floorRow("WorkqueueOtherShapes/agd-p4w4k8", "4×4 over 8 hot keys", "client-go"),
	floorRow("WorkqueueOtherShapes/agd-p1w1k10", "1×1 over 10 keys", "ctrlkit"),
	floorRow("WorkqueueOtherShapes/agd-p1w1k10", "1×1 over 10 keys", "client-go"),
	floorRow("WorkqueueOtherShapes/agd-p1w64k10", "1×64 over 10 keys", "ctrlkit"),
	floorRow("WorkqueueOtherShapes/agd-p1w64k10", "1×64 over 10 keys", "client-go"),
	floorRow("WorkqueueOtherShapes/agd-p1w2k2", "1×2 over 2 keys", "ctrlkit"),
	floorRow("WorkqueueOtherShapes/agd-p1w2k2", "1×2 over 2 keys", "client-go"),
	// the serial cycle against the lock floor (impl=floor-locks): three uncontended
	// lock round trips an item, which both queues pay.
	// Gets that give up waiting: the cost per Get must not grow with the number waiting
	// (the floor is goroutines waiting in a select on their contexts).
	{area: "workqueue", title: "Gets canceled while 1k Gets wait, each with a context of its own (ns per Get), ctrlkit's time over the floor's (the same goroutines waiting in a select on their contexts)", c: "WorkqueueCancelWaitingGets/w1000", impl: "ctrlkit", base: "select", unit: "sec/get"},
	{area: "workqueue", title: "Gets canceled while 32k Gets wait: ctrlkit's time over the floor's", c: "WorkqueueCancelWaitingGets/w32000", impl: "ctrlkit", base: "select", unit: "sec/get"},
	{area: "workqueue", title: "vs the lock floor (a ring under a mutex that Add, Get and Done each take once): the 1k cycle in one goroutine, ctrlkit's time over the floor's", c: "WorkqueueSerial", impl: "ctrlkit", base: "floor-locks", unit: "sec/op"},
	{area: "workqueue", title: "vs the lock floor: the 1k cycle in one goroutine, client-go's time over the floor's", c: "WorkqueueSerial", impl: "client-go", base: "floor-locks", unit: "sec/op"},

	{area: "workqueue", title: "Add/Get/Done of types.NamespacedName items (controller-runtime's reconcile.Request): 1 producer × 1 worker × 1k", c: "WorkqueueStructItems/p1w1k1000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "Add/Get/Done of NamespacedName items: 4 producers × 4 workers × 1k", c: "WorkqueueStructItems/p4w4k1000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "NamespacedName items 4×4×1k", c: "WorkqueueStructItems/p4w4k1000", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "Add/Get/Done of pointer items (*corev1.ConfigMap, the objects themselves: the cheapest item to hash and compare): 1 producer × 1 worker × 1k", c: "WorkqueuePointerItems/p1w1k1000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "Add/Get/Done of pointer items: 4 producers × 4 workers × 1k", c: "WorkqueuePointerItems/p4w4k1000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "pointer items 4×4×1k", c: "WorkqueuePointerItems/p4w4k1000", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},

	{area: "workqueue", title: "Add/Get/Done with Prometheus metrics on both sides (client-go: a MetricsProvider of client_golang collectors; ctrlkit: workqueue/prommetrics): 1 producer × 1 worker × 1k", c: "WorkqueueMetrics/p1w1k1000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "Add/Get/Done with metrics: 4 producers × 4 workers × 1k", c: "WorkqueueMetrics/p4w4k1000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "Add/Get/Done with metrics: 4 producers × 16 workers × 10k", c: "WorkqueueMetrics/p4w16k10000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× throughput (ratio ≤ 0.50)"}},
	{area: "workqueue", title: "Add/Get/Done with metrics 4×16×10k", c: "WorkqueueMetrics/p4w16k10000", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "Add/Get/Done with a FairnessKey (the namespace, 97 of them; client-go has no fairness: its plain queue on the same workload): 1 producer × 1 worker × 1k", c: "WorkqueueFairness/p1w1k1000", unit: "sec/op"},
	{area: "workqueue", title: "Add/Get/Done with a FairnessKey: 4 producers × 4 workers × 1k", c: "WorkqueueFairness/p4w4k1000", unit: "sec/op"},

	// workqueue against controller-runtime's priority queue (issue 19): its own benchmark
	// shapes, and 1M items drained by 1,000 workers
	{area: "workqueue", title: "vs controller-runtime priority queue: Add 1k distinct items, then Get/Done each (1 goroutine; ns per 1k)", c: "CRPriorityQueueAddGetDone", base: "controller-runtime", unit: "sec/op", target: target{kind: ratioMax, value: 1.0 / 3, text: "≥3× throughput (ratio ≤ 0.33)"}},
	{area: "workqueue", title: "vs controller-runtime: Add/Get/Done 1k", c: "CRPriorityQueueAddGetDone", base: "controller-runtime", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "vs controller-runtime priority queue: Add the same 1k items again and again, nobody takes them (ns per 1k Adds)", c: "CRPriorityQueueAddOnly", base: "controller-runtime", unit: "sec/op", target: target{kind: ratioMax, value: 1.0 / 3, text: "≥3× throughput (ratio ≤ 0.33)"}},
	{area: "workqueue", title: "vs controller-runtime: Add only", c: "CRPriorityQueueAddOnly", base: "controller-runtime", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "vs controller-runtime priority queue: Add items 0..999 again and again while 1,000 workers drain 1M queued items, 1ms each (ns per 1k Adds)", c: "CRPriorityQueueAddLockContended", base: "controller-runtime", unit: "sec/op", target: target{kind: ratioMax, value: 1.0 / 3, text: "≥3× throughput (ratio ≤ 0.33)"}},
	{area: "workqueue", title: "vs controller-runtime priority queue: Add 10k distinct items, each with a priority of its own (random), then Get/Done each (1 goroutine; ns per 10k)", c: "CRPriorityQueueDistinctPriorities", base: "controller-runtime", unit: "sec/op", target: target{kind: ratioMax, value: 1.0 / 3, text: "≥3× throughput (ratio ≤ 0.33)"}},
	{area: "workqueue", title: "vs controller-runtime: distinct priorities", c: "CRPriorityQueueDistinctPriorities", base: "controller-runtime", unit: "allocs/op", target: target{kind: absMax, value: 0, text: "0 allocs/op"}},
	{area: "workqueue", title: "vs controller-runtime priority queue: 1 producer adds 1M distinct items (100k short), 1,000 workers Get/Done them (first Add to last Done, per item)", c: "CRPriorityQueueManyWorkers/workers=1000", base: "controller-runtime", unit: "sec/item", target: target{kind: ratioMax, value: 1.0 / 3, text: "≥3× throughput (ratio ≤ 0.33)"}},
	{area: "workqueue", title: "1M items × 1,000 workers: Add latency p99 (every 7th Add timed)", c: "CRPriorityQueueManyWorkers/workers=1000", base: "controller-runtime", unit: "add-p99-sec", target: target{kind: absMax, value: 10e-6, text: "≤ 10 µs"}},
	{area: "workqueue", title: "1M items × 1,000 workers: Add latency p50", c: "CRPriorityQueueManyWorkers/workers=1000", base: "controller-runtime", unit: "add-p50-sec"},

	// indexer
	{area: "indexer", title: "Add to 100k objects, 2 indexes", c: "IndexerAdd", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "indexer", title: "Update (same index values)", c: "IndexerUpdate", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "indexer", title: "Update moving an index value", c: "IndexerUpdateMove", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "indexer", title: "Delete", c: "IndexerDelete", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "indexer", title: "Update, custom KeyFunc (ctrlkit stores the keys), 100k objects", c: "IndexerShapes/custom-key/update", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "indexer", title: "Add + Delete, custom KeyFunc, 100k objects", c: "IndexerShapes/custom-key/add-delete", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "indexer", title: "Update, multi-valued index (every label, 2 an object), 100k objects", c: "IndexerShapes/label-index/update", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "indexer", title: "Add + Delete, multi-valued index, 100k objects", c: "IndexerShapes/label-index/add-delete", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "indexer", title: "Update of objects indexed under 3,000 values each, shared by all 300 (a label holding a list), with the same values", c: "IndexerManyValues/same-values", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "indexer", title: "Update of objects indexed under 3,000 shared values each, moved to 3,000 others", c: "IndexerManyValues/other-values", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "indexer", title: "Update, small store (1k objects)", c: "IndexerShapes/small/update", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "indexer", title: "Add + Delete, small store (1k objects)", c: "IndexerShapes/small/add-delete", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "indexer", title: "ByIndex: 1k of 100k", c: "IndexerByIndex", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× (ratio ≤ 0.50)"}},
	{area: "indexer", title: "ByIndex", c: "IndexerByIndex", unit: "allocs/op", target: target{kind: ratioMax, value: 0.999, text: "fewer allocs (ratio < 1)"}},
	{area: "indexer", title: "ByIndex, typed result (client-go: ByIndex then []*ConfigMap, as a typed caller needs)", c: "IndexerByIndex", base: "client-go-typed", unit: "allocs/op", target: target{kind: ratioMax, value: 0.999, text: "fewer allocs (ratio < 1)"}},
	{area: "indexer", title: "AppendByIndex into a reused buffer", c: "IndexerByIndex", impl: "ctrlkit-append", unit: "allocs/op", target: target{kind: ratioMax, value: 0.999, text: "fewer allocs (ratio < 1)"}},
	{area: "indexer", title: "ByIndex after an Update that changed its bucket (Update + ByIndex; ctrlkit rebuilds its snapshot)", c: "IndexerByIndexChanging", unit: "sec/op"},
	{area: "indexer", title: "ByIndex after a changing Update", c: "IndexerByIndexChanging", unit: "allocs/op"},
	{area: "indexer", title: "Replace 100k into an empty store", c: "IndexerReplace/initial", unit: "sec/op"},
	{area: "indexer", title: "Replace 100k into an empty store: peak heap", c: "IndexerReplace/initial", unit: "peak-B", target: target{kind: ratioMax, value: 0.6, text: "≤ 0.6×"}},
	{area: "indexer", title: "Replace 100k over 100k (relist)", c: "IndexerReplace/relist", unit: "sec/op"},
	{area: "indexer", title: "Replace 100k over 100k (relist): peak heap", c: "IndexerReplace/relist", unit: "peak-B", target: target{kind: ratioMax, value: 0.6, text: "≤ 0.6×"}},
	{area: "indexer", title: "Lister Get by namespace and name, 100k objects (client-go: the generated ConfigMap lister)", c: "IndexerReads/get", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "Lister Get", c: "IndexerReads/get", unit: "allocs/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "Lister Get of an object the store does not hold (a deleted object's key: the lookup and the NotFound error), 100k objects", c: "IndexerGetAbsent/n=100000/by=lister", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "Lister Get of an absent object, 114,688 objects (the table 7/8 full, its longest probes)", c: "IndexerGetAbsent/n=114688/by=lister", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "Get by key of an absent key, the lookup alone (client-go: GetByKey), 100k objects", c: "IndexerGetAbsent/n=100000/by=key", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "Get by key of an absent key, 114,688 objects (the table 7/8 full)", c: "IndexerGetAbsent/n=114688/by=key", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "Lister Get of objects the store holds, 100k objects, asked for in a shuffled order (each read lands on memory out of cache; the Lister Get row above reads in the order the objects were stored)", c: "IndexerGetRandom/by=lister", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "Get by key of keys the store holds, the lookup alone (client-go: GetByKey), 100k objects, in a shuffled order: ctrlkit keeps no key strings and compares the key with the name in the stored object, memory less dense than client-go's own copies of the keys", c: "IndexerGetRandom/by=key", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "Lister Get from 2 goroutines", c: "IndexerReads/get-parallel", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "Lister Get from 2 goroutines while a third updates objects", c: "IndexerReads/get-under-writes", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "List of all 100k", c: "IndexerReads/list", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "ListKeys of all 100k, listed again and again (ctrlkit stores no keys; from its second listing it keeps those it built)", c: "IndexerReads/listkeys", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "ListKeys of all 100k, the first listing of a fresh store (ctrlkit builds every key from its object)", c: "IndexerListKeysOnce", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "ListKeys of all 100k, the first listing, keys of 46 bytes instead of 13 (ctrlkit builds and writes every key's bytes; client-go's cost does not depend on them)", c: "IndexerListKeysOnceLong", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "ListKeys of all 100k, the first listing, objects in no namespace (a key is the name: ctrlkit returns it as it is)", c: "IndexerListKeysOnceCluster", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "keys of all 100k again and again into a reused slice (ctrlkit: AppendKeys; client-go has no such call: ListKeys)", c: "IndexerReads/listkeys-reuse", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "objects of all 100k again and again into a reused slice (ctrlkit: AppendList; client-go: List)", c: "IndexerReads/list-reuse", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "IndexKeys: 1k of 100k", c: "IndexerReads/indexkeys", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "namespace lister List: 1k of 100k", c: "IndexerReads/namespace", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "namespace lister List with a label selector (10 of the namespace's 1k)", c: "IndexerReads/namespace-selector", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "Lister List with a label selector over 100k (1k match)", c: "IndexerReads/selector", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "memory per cached object (store only)", c: "IndexerMemory", unit: "B/object", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "other shapes: AddIndexes of an index (one value shared by all) to a store already holding 100k objects (client-go: AddIndexers)", c: "IndexerAddIndexes", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "other shapes: all 100k objects in one namespace: the namespace lister's List of all", c: "IndexerOneNamespace/list", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "other shapes: all 100k in one namespace: the namespace lister's List with a label selector (1k match)", c: "IndexerOneNamespace/selector", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "other shapes: all 100k in one namespace: the namespace lister's Get", c: "IndexerOneNamespace/get", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "other shapes: churn, Delete of one of 100k objects and Add of it back (100 namespaces)", c: "IndexerChurn/namespaces=100", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "indexer", title: "other shapes: churn, all 100k in one namespace", c: "IndexerChurn/namespaces=1", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},

	// deltafifo
	{area: "deltafifo", title: "delta throughput, producer → consumer (vs RealFIFO)", c: "DeltaFIFOThroughput", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "deltafifo", title: "delta throughput (vs atomic RealFIFO, v0.37 default)", c: "DeltaFIFOThroughput", base: "client-go-atomic", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "deltafifo", title: "deltas over 1 key, producer → consumer (vs RealFIFO)", c: "DeltaFIFOHotKeys/keys=1", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "deltafifo", title: "deltas over 1 key (vs atomic RealFIFO)", c: "DeltaFIFOHotKeys/keys=1", base: "client-go-atomic", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "deltafifo", title: "deltas over 10 keys, producer → consumer (vs RealFIFO)", c: "DeltaFIFOHotKeys/keys=10", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "deltafifo", title: "deltas over 10 keys (vs atomic RealFIFO)", c: "DeltaFIFOHotKeys/keys=10", base: "client-go-atomic", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "deltafifo", title: "deltas over 1k keys, producer → consumer (vs RealFIFO)", c: "DeltaFIFOHotKeys/keys=1000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "deltafifo", title: "deltas over 1k keys (vs atomic RealFIFO)", c: "DeltaFIFOHotKeys/keys=1000", base: "client-go-atomic", unit: "sec/op", target: target{kind: ratioMax, value: 0.5, text: "≥2× ops/s (ratio ≤ 0.50)"}},
	{area: "deltafifo", title: "relist of 100k, queued and popped", c: "DeltaFIFORelist", unit: "sec/op"},
	{area: "deltafifo", title: "relist of 100k: peak heap", c: "DeltaFIFORelist", unit: "peak-B"},

	// informer
	{area: "informer", title: "in-memory events → 1 handler", c: "InformerEvents/handlers=1", unit: "events/s", better: higherBetter, target: target{kind: ratioMin, value: 2, text: "≥2× (ratio ≥ 2)"}},
	{area: "informer", title: "in-memory events → 10 handlers", c: "InformerEvents/handlers=10", unit: "events/s", better: higherBetter, target: target{kind: ratioMin, value: 2, text: "≥2× (ratio ≥ 2)"}},
	{area: "informer", title: "in-memory events → 1 handler", c: "InformerEvents/handlers=1", unit: "allocs/op"},
	{area: "informer", title: "initial list of 1k → 1 handler", c: "InformerInitialList/handlers=1", unit: "sec/op"},
	{area: "informer", title: "initial list of 1k → 10 handlers", c: "InformerInitialList/handlers=10", unit: "sec/op"},
	{area: "informer", title: "real server: initial sync of 50k ConfigMaps (5k short)", c: "ServerInformerSync", unit: "sync-ms", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "real server: heap after sync", c: "ServerInformerSync", unit: "heap-B", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "real server: heap after sync vs the decoded objects alone", c: "ServerInformerSync", unit: "heap-B", baseUnit: "objects-B", target: target{kind: ratioMax, value: 1.02, text: "≤ 2% above the objects (ratio ≤ 1.02)"}},
	// the floor (issue 19): the same objects listed by a bare streaming list and by
	// bare paginated LIST requests (500 per page), decoded from protobuf and kept in
	// a slice, nothing else, measured in the same rounds
	{area: "informer", title: "real server: initial sync of 50k (5k short) vs the floor: a bare streaming list + protobuf decode", c: "ServerInformerSync", base: "floor-stream", unit: "sync-ms", target: target{kind: ratioMax, value: 1.1, text: "≤ 1.1× the floor"}},
	{area: "informer", title: "real server: initial sync vs the floor: bare paginated LIST (500 per page) + protobuf decode", c: "ServerInformerSync", base: "floor-list", unit: "sync-ms", target: target{kind: ratioMax, value: 1.1, text: "≤ 1.1× the floor"}},
	{area: "informer", title: "real server: client-go's initial sync vs the streaming floor", c: "ServerInformerSync", impl: "client-go", base: "floor-stream", unit: "sync-ms"},
	{area: "informer", title: "real server: client CPU during the initial sync vs the streaming floor's", c: "ServerInformerSync", base: "floor-stream", unit: "cpu-ms"},
	{area: "informer", title: "real server: client CPU during the initial sync, vs client-go", c: "ServerInformerSync", unit: "cpu-ms"},
	{area: "informer", title: "real server: heap after sync vs the streaming floor's objects (measured in the same rounds)", c: "ServerInformerSync", base: "floor-stream", unit: "heap-B"},
	{area: "informer", title: "real server: peak heap during a forced relist", c: "ServerInformerSync", unit: "relist-peak-B", target: target{kind: ratioMax, value: 0.7, text: "≤ 0.7×"}},

	// reconcile
	{area: "informer", title: "wire (httptest server, one paginated LIST, FromREST against the typed client): initial sync of 1k small ConfigMaps, protobuf", c: "WireSync/small-1k/proto", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 10k small ConfigMaps, protobuf", c: "WireSync/small-10k/proto", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 1k ConfigMaps with 4 managedFields entries each (stripped by both), protobuf", c: "WireSync/managed-1k/proto", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 10k ConfigMaps with 4 managedFields entries, protobuf", c: "WireSync/managed-10k/proto", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 20 ConfigMaps of 100 KB, protobuf", c: "WireSync/100KB-20/proto", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 200 ConfigMaps of 100 KB, protobuf", c: "WireSync/100KB-200/proto", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 5 ConfigMaps of 1 MB, protobuf", c: "WireSync/1MB-5/proto", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 50 ConfigMaps of 1 MB, protobuf", c: "WireSync/1MB-50/proto", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 1k small ConfigMaps, JSON", c: "WireSync/small-1k/json", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 10k small ConfigMaps, JSON", c: "WireSync/small-10k/json", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 1k ConfigMaps with 4 managedFields entries each (stripped by both), JSON", c: "WireSync/managed-1k/json", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 10k ConfigMaps with 4 managedFields entries, JSON", c: "WireSync/managed-10k/json", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 20 ConfigMaps of 100 KB, JSON", c: "WireSync/100KB-20/json", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 200 ConfigMaps of 100 KB, JSON", c: "WireSync/100KB-200/json", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 5 ConfigMaps of 1 MB, JSON", c: "WireSync/1MB-5/json", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 50 ConfigMaps of 1 MB, JSON", c: "WireSync/1MB-50/json", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 50 ConfigMaps of 1 MB, JSON: bytes allocated", c: "WireSync/1MB-50/json", unit: "B/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: initial sync of 50 ConfigMaps of 1 MB, protobuf: bytes allocated", c: "WireSync/1MB-50/proto", unit: "B/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: watch of 10k events of small ConfigMaps after a list of 100, protobuf", c: "WireWatch/small-10k/proto", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: watch of 100k events of small ConfigMaps after a list of 100, protobuf", c: "WireWatch/small-100k/proto", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: watch of 10k events of ConfigMaps with 4 managedFields entries after a list of 100, protobuf", c: "WireWatch/managed-10k/proto", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: watch of 100k events with managedFields after a list of 100, protobuf", c: "WireWatch/managed-100k/proto", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: watch of 100 events of 100 KB ConfigMaps after a list of 100, protobuf", c: "WireWatch/100KB-100/proto", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: watch of 1,000 events of 100 KB ConfigMaps after a list of 100, protobuf", c: "WireWatch/100KB-1000/proto", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: watch of 10k events of small ConfigMaps after a list of 100, JSON", c: "WireWatch/small-10k/json", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: watch of 100k events of small ConfigMaps after a list of 100, JSON", c: "WireWatch/small-100k/json", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: watch of 10k events of ConfigMaps with 4 managedFields entries after a list of 100, JSON", c: "WireWatch/managed-10k/json", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: watch of 100k events with managedFields after a list of 100, JSON", c: "WireWatch/managed-100k/json", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: watch of 100 events of 100 KB ConfigMaps after a list of 100, JSON", c: "WireWatch/100KB-100/json", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "wire: watch of 1,000 events of 100 KB ConfigMaps after a list of 100, JSON", c: "WireWatch/100KB-1000/json", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "other shapes: 1k cached keys, every change followed by 9 bookmarks, 1k changes (per change)", c: "ShapeBookmarks/changes=1000", unit: "sec/change", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "other shapes: the same, 10k changes", c: "ShapeBookmarks/changes=10000", unit: "sec/change", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "other shapes: 410 Gone, then a relist that keeps 1% of 10k objects (CPU; client-go's wall time is mostly its backoff)", c: "ShapeRelistShrink/objects=10000", unit: "cpu-ms/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "other shapes: the same over 100k objects (CPU)", c: "ShapeRelistShrink/objects=100000", unit: "cpu-ms/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "other shapes: 410 Gone, then a relist of the same 10k objects (CPU)", c: "ShapeRelistUnchanged/objects=10000", unit: "cpu-ms/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "other shapes: the same over 100k objects (CPU)", c: "ShapeRelistUnchanged/objects=100000", unit: "cpu-ms/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "other shapes: one slow handler (20 µs a call) among 10, 10k events: time until the fast ones have the last (per event)", c: "ShapeSlowHandler/events=10000", unit: "sec/event", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "other shapes: the same, 100k events", c: "ShapeSlowHandler/events=100000", unit: "sec/event", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "other shapes: a handler added after the sync of 10k objects: its replay", c: "ShapeLateHandler/objects=10000", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "other shapes: the same over 100k objects", c: "ShapeLateHandler/objects=100000", unit: "sec/op", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "other shapes: resync every second over 10k objects: one round's duration", c: "ShapeResync/objects=10000", unit: "round-ms", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "other shapes: the same over 100k objects", c: "ShapeResync/objects=100000", unit: "round-ms", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "informer", title: "other shapes: resync every second over 100k objects: CPU per second", c: "ShapeResync/objects=100000", unit: "cpu-ms/s", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "reconcile", title: "no-op reconcile of 100k keys, 1 worker (vs client-go loop)", c: "ReconcileThroughput/workers=1", unit: "sec/key"},
	{area: "reconcile", title: "no-op reconcile of 100k keys, 8 workers (vs client-go loop)", c: "ReconcileThroughput/workers=8", unit: "sec/key"},
	{area: "reconcile", title: "no-op reconcile of 100k keys, 1 worker (vs controller-runtime)", c: "CRReconcileThroughput/workers=1", base: "controller-runtime", unit: "sec/key"},
	{area: "reconcile", title: "no-op reconcile of 100k keys, 8 workers (vs controller-runtime)", c: "CRReconcileThroughput/workers=8", base: "controller-runtime", unit: "sec/key"},
	{area: "reconcile", title: "every reconcile fails once, then succeeds (rate-limited retry), 100k keys, 1 worker (vs controller-runtime; wall time per key)", c: "CRReconcileOutcomes/fail-once-all/n=100000/workers=1", base: "controller-runtime", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ controller-runtime (ratio ≤ 1)"}},
	{area: "reconcile", title: "every reconcile fails once, then succeeds (rate-limited retry), 100k keys, 1 worker (vs the client-go loop with the same limiter; wall time per key)", c: "CRReconcileOutcomes/fail-once-all/n=100000/workers=1", base: "client-go", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "reconcile", title: "every reconcile fails once, then succeeds (rate-limited retry), 100k keys, 8 workers (vs controller-runtime; wall time per key)", c: "CRReconcileOutcomes/fail-once-all/n=100000/workers=8", base: "controller-runtime", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ controller-runtime (ratio ≤ 1)"}},
	{area: "reconcile", title: "every reconcile fails once, then succeeds (rate-limited retry), 100k keys, 8 workers (vs the client-go loop with the same limiter; wall time per key)", c: "CRReconcileOutcomes/fail-once-all/n=100000/workers=8", base: "client-go", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "reconcile", title: "every tenth key fails 10 times (its backoff grows), 100k keys, 1 worker (vs controller-runtime; wall time per key)", c: "CRReconcileOutcomes/fail-10x-every10th/n=100000/workers=1", base: "controller-runtime", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ controller-runtime (ratio ≤ 1)"}},
	{area: "reconcile", title: "every tenth key fails 10 times (its backoff grows), 100k keys, 1 worker (vs the client-go loop with the same limiter; wall time per key)", c: "CRReconcileOutcomes/fail-10x-every10th/n=100000/workers=1", base: "client-go", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "reconcile", title: "every tenth key fails 10 times (its backoff grows), 100k keys, 8 workers (vs controller-runtime; wall time per key)", c: "CRReconcileOutcomes/fail-10x-every10th/n=100000/workers=8", base: "controller-runtime", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ controller-runtime (ratio ≤ 1)"}},
	{area: "reconcile", title: "every tenth key fails 10 times (its backoff grows), 100k keys, 8 workers (vs the client-go loop with the same limiter; wall time per key)", c: "CRReconcileOutcomes/fail-10x-every10th/n=100000/workers=8", base: "client-go", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "reconcile", title: "every reconcile returns RequeueAfter 1 ms once, 100k keys, 1 worker (vs controller-runtime; wall time per key)", c: "CRReconcileOutcomes/requeue-1ms/n=100000/workers=1", base: "controller-runtime", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ controller-runtime (ratio ≤ 1)"}},
	{area: "reconcile", title: "every reconcile returns RequeueAfter 1 ms once, 100k keys, 1 worker (vs the client-go loop with the same limiter; wall time per key)", c: "CRReconcileOutcomes/requeue-1ms/n=100000/workers=1", base: "client-go", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "reconcile", title: "every reconcile returns RequeueAfter 1 ms once, 100k keys, 8 workers (vs controller-runtime; wall time per key)", c: "CRReconcileOutcomes/requeue-1ms/n=100000/workers=8", base: "controller-runtime", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ controller-runtime (ratio ≤ 1)"}},
	{area: "reconcile", title: "every reconcile returns RequeueAfter 1 ms once, 100k keys, 8 workers (vs the client-go loop with the same limiter; wall time per key)", c: "CRReconcileOutcomes/requeue-1ms/n=100000/workers=8", base: "client-go", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "reconcile", title: "every reconcile returns RequeueAfter 1 h (nothing fires), 100k keys, 1 worker (vs controller-runtime; wall time per key)", c: "CRReconcileOutcomes/requeue-1h/n=100000/workers=1", base: "controller-runtime", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ controller-runtime (ratio ≤ 1)"}},
	{area: "reconcile", title: "every reconcile returns RequeueAfter 1 h (nothing fires), 100k keys, 1 worker (vs the client-go loop with the same limiter; wall time per key)", c: "CRReconcileOutcomes/requeue-1h/n=100000/workers=1", base: "client-go", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "reconcile", title: "every reconcile returns RequeueAfter 1 h (nothing fires), 100k keys, 8 workers (vs controller-runtime; wall time per key)", c: "CRReconcileOutcomes/requeue-1h/n=100000/workers=8", base: "controller-runtime", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ controller-runtime (ratio ≤ 1)"}},
	{area: "reconcile", title: "every reconcile returns RequeueAfter 1 h (nothing fires), 100k keys, 8 workers (vs the client-go loop with the same limiter; wall time per key)", c: "CRReconcileOutcomes/requeue-1h/n=100000/workers=8", base: "client-go", unit: "sec/key", target: target{kind: ratioMax, value: 1, text: "≤ client-go (ratio ≤ 1)"}},
	{area: "reconcile", title: "resync of 2k keys every 2s (500 every 1s short): peak queue depth", c: "ResyncQueueDepth", unit: "peak-depth"},
	{area: "reconcile", title: "resync: mean queue depth", c: "ResyncQueueDepth", unit: "mean-depth"},

	// sharding (issue 17): N replicas against 1, each a process, over the same
	// 20k ConfigMaps of 1 KiB (4k short) in 64 namespaces, one control plane
	// with ShardedListAndWatch on; "ctrlkit" is the N-replica side, "baseline"
	// one replica. The largest replica's heap and bytes received, and the time
	// all replicas take to reconcile every key once (5 ms each, 16 workers per
	// replica): a ratio of 1/3 is 3× the aggregate throughput. By namespace
	// (reflector.ShardByNamespace) the server filters, and a replica holds
	// whole namespaces: the largest holds 1/N or more (its share row), which
	// its heap, bytes and time follow, so those rows have no target. By name
	// (ShardByName, the manager's default) the keys split evenly, but the
	// server cannot filter: every replica receives everything.
	{area: "sharding", title: "4 replicas vs 1, by namespace (server-side filtering): largest replica's heap after sync", c: "ShardScale/namespace", impl: "r4", base: "r1", unit: "heap-B"},
	{area: "sharding", title: "4 replicas vs 1, by namespace (server-side): largest replica's bytes received", c: "ShardScale/namespace", impl: "r4", base: "r1", unit: "recv-B"},
	{area: "sharding", title: "4 replicas vs 1, by namespace (server-side): time to reconcile every key (5 ms each)", c: "ShardScale/namespace", impl: "r4", base: "r1", unit: "drain-ms"},
	{area: "sharding", title: "4 replicas vs 1, by namespace: largest replica's share of the keys (64 namespaces, whole; 0.25 at best)", c: "ShardScale/namespace", impl: "r4", base: "r1", unit: "share"},
	{area: "sharding", title: "2 replicas vs 1, by namespace (server-side): largest replica's heap after sync", c: "ShardScale/namespace", impl: "r2", base: "r1", unit: "heap-B"},
	{area: "sharding", title: "2 replicas vs 1, by namespace (server-side): largest replica's bytes received", c: "ShardScale/namespace", impl: "r2", base: "r1", unit: "recv-B"},
	{area: "sharding", title: "2 replicas vs 1, by namespace (server-side): time to reconcile every key", c: "ShardScale/namespace", impl: "r2", base: "r1", unit: "drain-ms"},
	{area: "sharding", title: "2 replicas vs 1, by namespace: largest replica's share of the keys (0.5 at best)", c: "ShardScale/namespace", impl: "r2", base: "r1", unit: "share"},
	{area: "sharding", title: "4 replicas vs 1, by name (client-side filtering, the default): largest replica's heap after sync", c: "ShardScale/name", impl: "r4", base: "r1", unit: "heap-B", target: target{kind: ratioMax, value: 0.3, text: "≤ 0.3×"}},
	{area: "sharding", title: "4 replicas vs 1, by name (client-side): largest replica's bytes received (every replica receives everything)", c: "ShardScale/name", impl: "r4", base: "r1", unit: "recv-B"},
	{area: "sharding", title: "4 replicas vs 1, by name (client-side): time to reconcile every key", c: "ShardScale/name", impl: "r4", base: "r1", unit: "drain-ms", target: target{kind: ratioMax, value: 1.0 / 3, text: "≥3× aggregate throughput (ratio ≤ 0.33)"}},
	{area: "sharding", title: "4 replicas vs 1, by name: largest replica's share of the keys", c: "ShardScale/name", impl: "r4", base: "r1", unit: "share"},
	{area: "sharding", title: "2 replicas vs 1, by name (client-side): largest replica's heap after sync", c: "ShardScale/name", impl: "r2", base: "r1", unit: "heap-B"},
	{area: "sharding", title: "2 replicas vs 1, by name (client-side): time to reconcile every key", c: "ShardScale/name", impl: "r2", base: "r1", unit: "drain-ms"},
}
