package workqueue

// Conformance: priorities, AddWithOptions and their metrics (controller-runtime
// pkg/controller/priorityqueue/priorityqueue_test.go). See conformance_test.go.
//
// controller-runtime's GetWithPriority returns the item's priority; Get here does not, so
// these tests observe an item's priority through the order of handouts, usually against a
// witness item added before it at the priority in question. controller-runtime's metrics
// count adds and retries per queue (depth per priority); here Metrics.Added and
// Metrics.Retried are counted by recMetrics.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// wantMetrics checks the adds and retries m has seen, after flushing the buffered adds
// through the in-flight function (as a scrape does).
func wantMetrics(t *testing.T, m *recMetrics, added, retried int) {
	t.Helper()
	m.inFlight()
	m.mu.Lock()
	a, r := m.added, m.retried
	m.mu.Unlock()
	if a != added || r != retried {
		t.Fatalf("metrics: %d added, %d retried; want %d, %d", a, r, added, retried)
	}
}

// checkLen checks that q holds want ready items at the point named by when.
func checkLen[T comparable](t *testing.T, q *Queue[T], want int, when string) {
	t.Helper()
	if n := q.Len(); n != want {
		t.Fatalf("Len = %d %s, want %d", n, when, want)
	}
}

// outcome lets the bubble settle and returns the outcome of the Get behind res,
// failing the test with why if that Get is still blocked.
func outcome[T comparable](t *testing.T, res <-chan asyncGet[T], why string) asyncGet[T] {
	t.Helper()
	synctest.Wait()
	select {
	case r := <-res:
		return r
	default:
		t.Fatal(why)
		return asyncGet[T]{}
	}
}

// newMetered returns a queue whose metrics m records.
func newMetered() (q *Queue[string], m *recMetrics) {
	m = &recMetrics{}
	return New(Config[string]{Metrics: m}), m
}

// wantGet checks that the next ready item of q is want, without waiting for one.
func wantGet(t *testing.T, q *Queue[string], want string) {
	t.Helper()
	if item, _ := q.Get(doneCtx); item != want {
		t.Fatalf("Get = %q, want %q", item, want)
	}
}

// handOut starts a worker that takes n items from q and sends each on the returned
// channel, calling Done on it first if done is set.
func handOut(t *testing.T, q *Queue[string], n int, done bool) <-chan string {
	got := make(chan string, n)
	go func() {
		for range n {
			item, err := q.Get(context.Background())
			if err != nil {
				t.Errorf("Get: %v", err)
				return
			}
			got <- item
			if done {
				q.Done(item)
			}
		}
	}()
	return got
}

// metricsStep is a step that checks the metrics.
func metricsStep(m *recMetrics, added, retried int) step {
	return step{fmt.Sprintf("metrics %d added, %d retried", added, retried), func(t *testing.T, q *Queue[string]) {
		wantMetrics(t, m, added, retried)
	}}
}

// addOpts is a step that calls AddWithOptions.
func addOpts(item string, opts AddOptions) step {
	return step{fmt.Sprintf("add %s with %+v", item, opts), func(t *testing.T, q *Queue[string]) {
		q.AddWithOptions(item, opts)
	}}
}

// TestConformancePrioritySteps: controller-runtime's single-goroutine priority queue specs,
// as steps. Each row makes its own metrics recorder.
func TestConformancePrioritySteps(t *testing.T) {
	tests := []struct {
		name  string
		steps func(m *recMetrics) []step
	}{
		// covers controller-runtime "returns an item".
		{"returns an item", func(m *recMetrics) []step {
			return []step{add("foo"), get("foo"), metricsStep(m, 1, 0)}
		}},
		// covers controller-runtime "returns items in order".
		{"returns items in order", func(m *recMetrics) []step {
			return []step{add("foo", "bar"), get("foo", "bar"), metricsStep(m, 2, 0)}
		}},
		// covers controller-runtime "doesn't return an item that is currently locked": an
		// item in flight and added again is skipped; a re-add while in flight is an add.
		{"doesn't return an item that is currently locked", func(m *recMetrics) []step {
			return []step{add("foo"), get("foo"), add("foo", "bar"), get("bar"), getNothing(), metricsStep(m, 3, 0)}
		}},
		// covers controller-runtime "returns an item as soon as its unlocked". Deviation:
		// an item re-added while in flight is queued at its Done, behind items added
		// meanwhile (as in client-go), not at the place of its re-add.
		{"returns an item as soon as its unlocked", func(m *recMetrics) []step {
			return []step{
				add("foo"), get("foo"), add("foo", "bar"), get("bar"), add("baz"), done("foo"),
				get("baz", "foo"), metricsStep(m, 4, 0),
			}
		}},
		// covers controller-runtime "de-duplicates items".
		{"de-duplicates items", func(m *recMetrics) []step {
			return []step{add("foo", "foo"), wantLen(1), metricsStep(m, 1, 0)}
		}},
		// covers controller-runtime "enqueues a locked item". Deviation: Len counts only
		// items that can be handed out, so an item re-added while in flight is not counted
		// until its Done (controller-runtime counts it; client-go does not).
		{"enqueues a locked item", func(m *recMetrics) []step {
			return []step{
				add("foo"), wantLen(1), get("foo"), add("foo"), wantLen(0), done("foo"), wantLen(1),
				get("foo"), metricsStep(m, 2, 0),
			}
		}},
		// covers controller-runtime "retains the highest priority": foo added at 1 then 2
		// goes before a witness at 1 added before it, and counts as one add.
		{"retains the highest priority", func(m *recMetrics) []step {
			return []step{
				addPrio("witness", 1), addPrio("foo", 1), addPrio("foo", 2), wantLen(2),
				get("foo", "witness"), wantLen(0), metricsStep(m, 2, 0),
			}
		}},
		// covers controller-runtime "will not decrease the priority".
		{"will not decrease the priority", func(m *recMetrics) []step {
			return []step{
				addPrio("witness", 1), addPrio("foo", 2), addPrio("foo", 1), get("foo", "witness"),
				wantLen(0), metricsStep(m, 2, 0),
			}
		}},
		// covers controller-runtime "gets pushed to the front if the priority increases".
		{"gets pushed to the front if the priority increases", func(m *recMetrics) []step {
			return []step{
				add("foo", "bar", "baz"), addPrio("baz", 1), get("baz"), wantLen(2),
				get("foo", "bar"), metricsStep(m, 3, 0),
			}
		}},
		// covers controller-runtime "follows FIFO order in the new priority queue when item
		// priority changes": a raised item goes behind those already at its new priority.
		{"follows FIFO order when the priority changes", func(m *recMetrics) []step {
			return []step{
				addPrio("foo", 0), addPrio("bar", 1), addPrio("foo", 1), wantLen(2), get("bar"),
				wantLen(1), get("foo"), wantLen(0),
			}
		}},
		// covers controller-runtime "retains the lowest after duration" (the part at
		// once): an item added now and with a delay is handed out now; see
		// TestConformanceDelayedAddIsNotCancelled for what follows.
		{"retains the lowest after duration", func(m *recMetrics) []step {
			return []step{
				addOpts("foo", AddOptions{}), addOpts("foo", AddOptions{Delay: time.Hour}),
				get("foo"), wantLen(0), metricsStep(m, 1, 1),
			}
		}},
		// covers controller-runtime "doesn't include non-ready items in Len()".
		{"doesn't include non-ready items in Len()", func(m *recMetrics) []step {
			return []step{
				addOpts("foo", AddOptions{Delay: time.Minute}), add("baz"),
				addOpts("bar", AddOptions{Delay: time.Minute}), add("bal"), wantLen(2),
				metricsStep(m, 2, 2),
			}
		}},
		// covers controller-runtime "updates metrics correctly for an item that gets
		// initially added with after and then without": the delayed add is no add yet;
		// the immediate one is, once; the handout adds nothing.
		{"metrics of an item added with a delay, then without", func(m *recMetrics) []step {
			return []step{
				addOpts("foo", AddOptions{Delay: time.Hour}), wantLen(0), metricsStep(m, 0, 1),
				add("foo"), wantLen(1), metricsStep(m, 1, 1), get("foo"), wantLen(0),
				metricsStep(m, 1, 1),
			}
		}},
		// covers controller-runtime "updates metrics correctly when an item with after is
		// re-added with higher priority and no after": it is ready at once, at the higher
		// priority (ahead of a witness at priority 0 added before it).
		{"metrics of a delayed item re-added at once with a higher priority", func(m *recMetrics) []step {
			return []step{
				addOpts("foo", AddOptions{Delay: time.Hour}), wantLen(0), add("witness"),
				addPrio("foo", 1), wantLen(2), metricsStep(m, 2, 1), get("foo", "witness"),
				wantLen(0), metricsStep(m, 2, 1),
			}
		}},
		// covers controller-runtime "Get from priority queue might get stuck when the
		// priority queue is shut down": Get does not block after ShutDown, and a delayed
		// add after it never arrives. Deviation: an item waiting at the shut-down is still
		// handed out (as in client-go); controller-runtime drops it.
		{"Get after ShutDown", func(m *recMetrics) []step {
			return []step{
				add("baz"), shutDown(), addOpts("foo", AddOptions{Delay: time.Second}),
				get("baz"), done("baz"), getShutDown(), getShutDown(), metricsStep(m, 1, 0),
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &recMetrics{}
			runSteps(t, Config[string]{Metrics: m}, tc.steps(m)...)
		})
	}
}

// covers controller-runtime "retains the lowest after duration" and
// TestWaitingItemIsReturnedRightAfterReadWithoutAfter (the time after the immediate add).
// Deviation: a delayed add is not cancelled by an immediate add of the item: it stays
// pending and, when it fires, is an ordinary add (as in client-go), so an item processed
// meanwhile is handed out once more. controller-runtime merges the two into the immediate
// one.
func TestConformanceDelayedAddIsNotCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, m := newMetered()
		defer q.ShutDown()
		waiting := getAsync(context.Background(), q)
		q.AddWithOptions("foo", AddOptions{Delay: time.Minute})
		stillBlocked(t, waiting)
		q.Add("foo")
		synctest.Wait()
		if r := <-waiting; r.item != "foo" || r.err != nil {
			t.Fatalf("Get = %q, %v; want foo at once", r.item, r.err)
		}
		q.Done("foo")
		wantMetrics(t, m, 1, 1)
		advance(time.Minute - time.Nanosecond)
		wantReady(t, q)
		advance(time.Nanosecond)
		wantReady(t, q, "foo")
		wantMetrics(t, m, 2, 1)
		checkInvariants(t, q)
	})
}

// covers controller-runtime TestHighPriorityItemsAreReturnedBeforeLowPriorityItemMultipleTimes:
// with items at five priorities, all added now (after -1s or 0) or all with the same delay
// (1s), every item of a higher priority is handed out before any of a lower one, FIFO
// within a priority; delays count as retries. Deviation: that strict order holds only
// while no level has waited through AgingLimit handouts of others (here AgingLimit is set
// above the item count); with the default AgingLimit, lower priorities are served by aging
// (see TestConformancePriorityAging).
func TestConformanceStrictPriorityOrder(t *testing.T) {
	prios := []int{10, 5, 0, -5, -10}
	names := []string{"high", "upperMiddle", "middle", "lowMiddle", "low"}
	const perPriority = 1000
	for _, after := range []time.Duration{-time.Second, 0, time.Second} {
		t.Run(fmt.Sprintf("after=%v", after), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := &recMetrics{}
				q := New(Config[string]{Metrics: m, AgingLimit: 5 * perPriority})
				defer q.ShutDown()
				for i := range perPriority {
					for l, p := range prios {
						q.AddWithOptions(names[l]+"-"+strconv.Itoa(i), AddOptions{Priority: p, Delay: after})
					}
				}
				if after > 0 {
					advance(after)
				}
				for l := range prios {
					for i := range perPriority {
						item, err := q.Get(doneCtx)
						if want := names[l] + "-" + strconv.Itoa(i); item != want || err != nil {
							t.Fatalf("Get = %q, %v; want %q", item, err, want)
						}
						q.Done(item)
					}
				}
				retries := 0
				if after > 0 {
					retries = 5 * perPriority
				}
				wantMetrics(t, m, 5*perPriority, retries)
				checkInvariants(t, q)
			})
		})
	}
}

// TestConformancePriorityAging is the deviation of TestConformanceStrictPriorityOrder with
// the default AgingLimit: after AgingLimit handouts of the top level, the level that has
// waited longest is served (ties to the higher priority), and the lowest level's first
// item is handed out within AgingLimit+L handouts, L = 5 levels, as the package doc bounds.
func TestConformancePriorityAging(t *testing.T) {
	q := New(Config[string]{})
	defer q.ShutDown()
	prios := []int{10, 5, 0, -5, -10}
	for i := range 100 {
		for _, p := range prios {
			q.AddWithOptions(fmt.Sprintf("%d/%d", p, i), AddOptions{Priority: p})
		}
	}
	lowAt := -1
	for n := range 500 {
		item, _ := q.Get(doneCtx)
		q.Done(item)
		switch {
		case n < DefaultAgingLimit:
			if want := fmt.Sprintf("10/%d", n); item != want {
				t.Fatalf("handout %d = %q, want %q", n, item, want)
			}
		case n == DefaultAgingLimit:
			if item != "5/0" {
				t.Fatalf("handout %d = %q, want 5/0 (aged)", n, item)
			}
		}
		if item == "-10/0" {
			lowAt = n
			break
		}
	}
	if lowAt < 0 || lowAt >= DefaultAgingLimit+len(prios) {
		t.Fatalf("lowest priority first handed out at %d, want within %d", lowAt, DefaultAgingLimit+len(prios))
	}
	checkInvariants(t, q)
}

// covers controller-runtime TestItemIsOnlyReturnedAfterAfterHasPassed: a blocked Get is
// not handed a delayed item before its delay, and is at its deadline.
func TestConformanceDelayedItemNotBeforeDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, m := newMetered()
		defer q.ShutDown()
		start := time.Now()
		waiting := getAsync(context.Background(), q)
		q.AddWithOptions("foo", AddOptions{Delay: time.Second})
		stillBlocked(t, waiting)
		time.Sleep(time.Second - time.Nanosecond)
		stillBlocked(t, waiting)
		r := <-waiting
		if r.item != "foo" || r.err != nil || time.Since(start) != time.Second {
			t.Fatalf("Get = %q, %v after %v; want foo after 1s", r.item, r.err, time.Since(start))
		}
		q.Done("foo")
		wantMetrics(t, m, 1, 1)
	})
}

// covers controller-runtime TestHighPriorityItemThatBecameReadyIsReturnedBeforeLowPriorityItem:
// a delayed high-priority item, once due, goes before a low-priority item that was ready
// all along.
func TestConformanceDueHighPriorityFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, m := newMetered()
		defer q.ShutDown()
		q.AddWithOptions("foo", AddOptions{Priority: -100})
		q.AddWithOptions("prio", AddOptions{Priority: 0, Delay: time.Second})
		advance(time.Second)
		wantGet(t, q, "prio")
		checkLen(t, q, 1, "with foo left")
		wantMetrics(t, m, 2, 1)
	})
}

// covers controller-runtime TestItemIsReturnedAsSoonAsPossible: an add wakes a blocked Get
// at once.
func TestConformanceAddWakesBlockedGet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, m := newMetered()
		defer q.ShutDown()
		start := time.Now()
		waiting := getAsync(context.Background(), q)
		stillBlocked(t, waiting)
		q.Add("foo")
		if r := outcome(t, waiting, "the add did not wake the blocked Get"); r.item != "foo" || r.err != nil || time.Since(start) != 0 {
			t.Fatalf("Get = %q, %v after %v; want foo at once", r.item, r.err, time.Since(start))
		}
		wantMetrics(t, m, 1, 0)
	})
}

// covers controller-runtime TestMultipleItemsWithAfterAreReturnedInCorrectOrder: a worker
// blocked in Get receives delayed items in deadline order.
func TestConformanceBlockedWorkerGetsDeadlineOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, m := newMetered()
		defer q.ShutDown()
		got := handOut(t, q, 2, true)
		q.AddWithOptions("foo", AddOptions{Delay: time.Second})
		q.AddWithOptions("bar", AddOptions{Delay: 200 * time.Millisecond})
		synctest.Wait()
		if len(got) != 0 {
			t.Fatal("an item was handed out before its deadline")
		}
		advance(time.Second)
		if first, second := <-got, <-got; first != "bar" || second != "foo" {
			t.Fatalf("handed out %q, %q; want bar, foo", first, second)
		}
		wantMetrics(t, m, 2, 2)
	})
}

// covers controller-runtime TestGetFromPriorityQueueIsUnblockedOnShutdown.
func TestConformanceShutDownUnblocksGet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		waiting := getAsync(context.Background(), q)
		stillBlocked(t, waiting)
		q.ShutDown()
		if r := outcome(t, waiting, "ShutDown did not unblock Get"); !errors.Is(r.err, ErrShutDown) || r.item != "" {
			t.Fatalf("Get = %q, %v; want ErrShutDown", r.item, r.err)
		}
	})
}

// covers controller-runtime TestItemsAreInludedInLenAndMetricsOnceTheyAreReady: delayed
// items count in Len and as adds only once due; the queue behaves the same after being
// emptied.
func TestConformanceLenCountsDueItems(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, m := newMetered()
		defer q.ShutDown()
		for round := range 2 {
			q.AddWithOptions("foo", AddOptions{Delay: 500 * time.Millisecond})
			q.Add("baz")
			q.AddWithOptions("bar", AddOptions{Delay: 500 * time.Millisecond})
			q.Add("bal")
			checkLen(t, q, 2, fmt.Sprintf("round %d, before the delay", round))
			wantMetrics(t, m, 4*round+2, 2*round+2)
			advance(time.Second)
			checkLen(t, q, 4, fmt.Sprintf("round %d, after the delay", round))
			wantMetrics(t, m, 4*round+4, 2*round+2)
			getAll(t, q)
			checkLen(t, q, 0, fmt.Sprintf("round %d, after taking everything", round))
		}
		checkInvariants(t, q)
	})
}

// covers controller-runtime
// TestMetricsAreUpdatedForItemWhoseRequeueAfterExpiredThatGetsAddedAgainWithoutRequeueAfter:
// once a delayed add has fired, an immediate add of the waiting item is a duplicate.
func TestConformanceAddAfterFiredIsDeduplicated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, m := newMetered()
		defer q.ShutDown()
		q.AddWithOptions("foo", AddOptions{Delay: 50 * time.Millisecond})
		advance(50 * time.Millisecond)
		checkLen(t, q, 1, "after the delay")
		wantMetrics(t, m, 1, 1)
		q.Add("foo")
		checkLen(t, q, 1, "after a duplicate add")
		wantMetrics(t, m, 1, 1)
		wantGet(t, q, "foo")
		checkLen(t, q, 0, "after Get")
		wantMetrics(t, m, 1, 1)
	})
}

// covers controller-runtime TestWhenAddingMultipleItemsWithRatelimitTrueTheyDontAffectEachOther:
// rate-limited adds of two items each wait for their own backoff (5ms for a first
// failure, 640ms for an eighth).
func TestConformanceRateLimitedItemsIndependent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &recMetrics{}
		lim := NewExponential[string](5*time.Millisecond, 1000*time.Second)
		q := New(Config[string]{Metrics: m, RateLimiter: lim})
		defer q.ShutDown()
		got := handOut(t, q, 2, false)
		for range 7 {
			lim.When("bar")
		}
		q.AddWithOptions("foo", AddOptions{RateLimited: true})
		q.AddWithOptions("bar", AddOptions{RateLimited: true})
		synctest.Wait()
		if len(got) != 0 {
			t.Fatal("an item was handed out before its backoff")
		}
		advance(5 * time.Millisecond)
		if len(got) != 1 || <-got != "foo" {
			t.Fatal("foo not handed out after 5ms")
		}
		advance(635*time.Millisecond - time.Nanosecond)
		if len(got) != 0 {
			t.Fatal("bar handed out before 640ms")
		}
		advance(time.Nanosecond)
		if len(got) != 1 || <-got != "bar" {
			t.Fatal("bar not handed out after 640ms")
		}
		q.Done("foo")
		q.Done("bar")
		wantMetrics(t, m, 2, 2)
	})
}

// AddWithOptions with both a delay and rate limiting. Deviation: the item waits for the
// longer of the delay and the limiter's answer (the retry is never earlier than either);
// controller-runtime waits for the shorter.
func TestConformanceDelayAndRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{RateLimiter: NewExponential[string](5*time.Millisecond, time.Hour)})
		defer q.ShutDown()
		q.AddWithOptions("long-delay", AddOptions{Delay: time.Second, RateLimited: true})
		q.AddWithOptions("short-delay", AddOptions{Delay: time.Millisecond, RateLimited: true})
		advance(5*time.Millisecond - time.Nanosecond)
		wantReady(t, q)
		advance(time.Nanosecond)
		wantReady(t, q, "short-delay")
		advance(time.Second - 5*time.Millisecond - time.Nanosecond)
		wantReady(t, q)
		advance(time.Nanosecond)
		wantReady(t, q, "long-delay")
		if n := q.NumRequeues("long-delay"); n != 1 {
			t.Fatalf("NumRequeues = %d, want 1", n)
		}
	})
}

// covers controller-runtime TestPriorityQueueDoesNotDeadlockOnShutdownWhileHandingOutItems:
// workers that add items at random priorities and take them in a loop all return soon
// after ShutDown, whatever Get was doing at that moment. Adaptation: the workers call Done
// (here Get waits after shut-down for an item re-added in flight until its Done, see
// TestConformanceDrainWithDirtyItem).
func TestConformanceShutDownWhileHandingOut(t *testing.T) {
	for round := range 50 {
		q := New(Config[string]{})
		var handed atomic.Int64
		started := make(chan struct{})
		var once sync.Once
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				for {
					q.AddWithOptions(strconv.Itoa(rand.IntN(1000)), AddOptions{Priority: rand.IntN(100)})
					item, err := q.Get(context.Background())
					if err != nil {
						if !errors.Is(err, ErrShutDown) {
							t.Errorf("Get: %v", err)
						}
						return
					}
					if handed.Add(1) == 200 {
						once.Do(func() { close(started) })
					}
					q.Done(item)
				}
			})
		}
		<-started
		q.ShutDown()
		returned := make(chan struct{})
		go func() {
			wg.Wait()
			close(returned)
		}()
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: workers still blocked 10s after ShutDown", round)
		}
		checkInvariants(t, q)
	}
}

// covers controller-runtime TestPriorityQueueLogStateDoesNotRaceOnReadyAt: an item's
// pending delay moved earlier again and again while time passes fires exactly at the last,
// earliest deadline, once.
func TestConformanceDeadlineMovedEarlier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		start := time.Now()
		var deadline time.Time
		for i := range 10 {
			d := time.Hour - time.Duration(i)*time.Minute
			q.AddWithOptions("foo", AddOptions{Delay: d})
			deadline = time.Now().Add(d)
			advance(10 * time.Second)
			wantReady(t, q)
		}
		item, err := q.Get(context.Background())
		if item != "foo" || err != nil || !time.Now().Equal(deadline) {
			t.Fatalf("Get = %q, %v at %v; want foo at %v", item, err, time.Since(start), deadline.Sub(start))
		}
		q.Done(item)
		advance(time.Hour)
		wantReady(t, q)
		checkInvariants(t, q)
	})
}

// covers controller-runtime "returns many items": a large queue of items at random
// priorities, some delayed, is drained by 100 concurrent workers without failure, each item
// handed out exactly once per round.
func TestConformanceManyItems(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		const items, workers = 1000, 100
		for round := range 20 {
			for i := range items {
				name := fmt.Sprintf("foo%d", i)
				if rn := rand.IntN(100); rn < 10 {
					q.AddWithOptions(name, AddOptions{Delay: time.Duration(rn) * time.Millisecond})
				} else {
					q.AddWithOptions(name, AddOptions{Priority: rn})
				}
			}
			var count [items]atomic.Int32
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for range items / workers {
						item, err := q.Get(context.Background())
						if err != nil {
							t.Errorf("Get: %v", err)
							return
						}
						var i int
						fmt.Sscanf(item, "foo%d", &i)
						count[i].Add(1)
						q.Done(item)
					}
				})
			}
			wg.Wait()
			for i := range items {
				if n := count[i].Load(); n != 1 {
					t.Fatalf("round %d: foo%d handed out %d times", round, i, n)
				}
			}
		}
		checkInvariants(t, q)
	})
}

// covers controller-runtime TestFuzzPriorityQueue (concurrency part): producers add items
// with random priorities and delays while workers process them; no item is ever held by
// two workers, nothing deadlocks, and no add is lost (each item's last processing started
// after its last add).
func TestConformanceFuzzConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const items, producers, workers, addsEach = 200, 10, 20, 1000
		q := New(Config[int]{})
		var adds, seen [items]atomic.Int64
		var held [items]atomic.Bool
		var wwg sync.WaitGroup
		for range workers {
			wwg.Go(func() {
				for {
					item, err := q.Get(context.Background())
					if err != nil {
						return
					}
					if !held[item].CompareAndSwap(false, true) {
						t.Errorf("item %d handed to two workers", item)
					}
					seen[item].Store(adds[item].Load())
					held[item].Store(false)
					q.Done(item)
				}
			})
		}
		var pwg sync.WaitGroup
		for p := range producers {
			pwg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(p), 3))
				for range addsEach {
					item := r.IntN(items)
					adds[item].Add(1)
					q.AddWithOptions(item, AddOptions{
						Priority: r.IntN(10) - 5,
						Delay:    time.Duration(r.IntN(20)-10) * time.Millisecond, // half of them at once
					})
				}
			})
		}
		pwg.Wait()
		advance(time.Second) // every delay has passed
		if err := q.ShutDownWithDrain(context.Background()); err != nil {
			t.Fatalf("drain: %v", err)
		}
		wwg.Wait()
		for i := range items {
			if a, s := adds[i].Load(), seen[i].Load(); a != s {
				t.Errorf("item %d: %d adds, last processing saw %d", i, a, s)
			}
		}
		checkInvariants(t, q)
	})
}

// covers controller-runtime TestFuzzPriorityQueue (priority part: "max(existing priority,
// new priority) is used") against a reference model, with aging out of reach: random adds
// at random priorities, Gets and Dones, with some items held in flight and added again.
// Waiting items are handed out by highest priority, then in the order they were queued;
// an add of a waiting item raises its priority (moving it behind its new level) and never
// lowers it; an item added while in flight is queued at its Done with the highest
// priority it was added with.
func TestConformancePriorityModel(t *testing.T) {
	type entry struct{ prio, seq int }
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 11))
		q := New(Config[int]{AgingLimit: 1 << 30})
		queued := map[int]entry{}
		inflight := map[int]bool{}
		redirty := map[int]int{}
		seq := 0
		for op := range 3000 {
			switch k := r.IntN(10); {
			case k < 6:
				item, p := r.IntN(30), r.IntN(7)-3
				q.AddWithOptions(item, AddOptions{Priority: p})
				switch e, ok := queued[item]; {
				case inflight[item]:
					if old, ok := redirty[item]; !ok || p > old {
						redirty[item] = p
					}
				case !ok:
					queued[item] = entry{p, seq}
					seq++
				case p > e.prio:
					queued[item] = entry{p, seq}
					seq++
				}
			case k < 9:
				want, best := -1, entry{}
				for it, e := range queued {
					if want < 0 || e.prio > best.prio || e.prio == best.prio && e.seq < best.seq {
						want, best = it, e
					}
				}
				item, err := q.Get(doneCtx)
				if want < 0 {
					if err == nil {
						t.Fatalf("seed %d op %d: Get = %d, want nothing", seed, op, item)
					}
					continue
				}
				if err != nil || item != want {
					t.Fatalf("seed %d op %d: Get = %d, %v; want %d (priority %d)", seed, op, item, err, want, best.prio)
				}
				delete(queued, item)
				inflight[item] = true
			default: // Done of a random item in flight
				if len(inflight) == 0 {
					continue
				}
				held := slices.Sorted(maps.Keys(inflight))
				item := held[r.IntN(len(held))]
				q.Done(item)
				delete(inflight, item)
				if p, ok := redirty[item]; ok {
					delete(redirty, item)
					queued[item] = entry{p, seq}
					seq++
				}
			}
			if q.Len() != len(queued) {
				t.Fatalf("seed %d op %d: Len = %d, model %d", seed, op, q.Len(), len(queued))
			}
		}
		checkInvariants(t, q)
		q.ShutDown()
	}
}

// Retries as the metrics count them: an AddWithOptions without a positive delay or rate
// limiting is no retry (as in controller-runtime); AddAfter is one even with no delay (as
// in client-go). Deviation: a rate-limited add is a retry even when the limiter answers 0
// (controller-runtime counts only positive delays).
func TestConformanceRetryMetrics(t *testing.T) {
	m := &recMetrics{}
	q := New(Config[string]{Metrics: m, RateLimiter: NewFastSlow[string](0, 0, 1)})
	defer q.ShutDown()
	q.AddWithOptions("a", AddOptions{Delay: -time.Second, Priority: 1})
	q.AddWithOptions("b", AddOptions{})
	wantMetrics(t, m, 2, 0)
	q.AddAfter("c", 0)
	wantMetrics(t, m, 3, 1)
	q.AddWithOptions("d", AddOptions{RateLimited: true})
	q.AddRateLimited("e")
	wantMetrics(t, m, 5, 3)
	wantReady(t, q, "a", "b", "c", "d", "e")
}
