package workqueue

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// klog (pulled in by client-go, the differential oracle) starts its flush daemon at init.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"))
}

// A step acts on the queue and checks the outcome.
type step struct {
	name string
	do   func(t *testing.T, q *Queue[string])
}

func add(items ...string) step {
	return step{"add " + strings.Join(items, ","), func(t *testing.T, q *Queue[string]) {
		for _, it := range items {
			q.Add(it)
		}
	}}
}

func addPrio(item string, prio int) step {
	return step{"add " + item + " with priority", func(t *testing.T, q *Queue[string]) {
		q.AddWithOptions(item, AddOptions{Priority: prio})
	}}
}

// done is already cancelled: Get returns a ready item, or the context error without blocking.
var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func get(want ...string) step {
	return step{"get " + strings.Join(want, ","), func(t *testing.T, q *Queue[string]) {
		for _, w := range want {
			got, err := q.Get(doneCtx)
			if err != nil || got != w {
				t.Fatalf("Get = %q, %v; want %q", got, err, w)
			}
		}
	}}
}

func getNothing() step {
	return step{"get nothing", func(t *testing.T, q *Queue[string]) {
		if got, err := q.Get(doneCtx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Get = %q, %v; want nothing ready (context.Canceled)", got, err)
		}
	}}
}

func getShutDown() step {
	return step{"get after shut-down", func(t *testing.T, q *Queue[string]) {
		if got, err := q.Get(doneCtx); !errors.Is(err, ErrShutDown) {
			t.Fatalf("Get = %q, %v; want ErrShutDown", got, err)
		}
	}}
}

func done(items ...string) step {
	return step{"done " + strings.Join(items, ","), func(t *testing.T, q *Queue[string]) {
		for _, it := range items {
			q.Done(it)
		}
	}}
}

func wantLen(n int) step {
	return step{"len", func(t *testing.T, q *Queue[string]) {
		if got := q.Len(); got != n {
			t.Fatalf("Len = %d, want %d", got, n)
		}
	}}
}

func shutDown() step {
	return step{"shut down", func(t *testing.T, q *Queue[string]) { q.ShutDown() }}
}

// runSteps applies steps to a new queue, checking every invariant after each.
func runSteps(t *testing.T, cfg Config[string], steps ...step) {
	t.Helper()
	q := New(cfg)
	defer q.ShutDown()
	for i, s := range steps {
		t.Run("", func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("at step %d: %s", i, s.name)
				}
			}()
			s.do(t, q)
			checkInvariants(t, q)
		})
		if t.Failed() {
			return
		}
	}
}

func byPrefix(item string) string {
	k, _, _ := strings.Cut(item, "/")
	return k
}

func TestSteps(t *testing.T) {
	fair := Config[string]{FairnessKey: byPrefix}
	tests := []struct {
		name  string
		cfg   Config[string]
		steps []step
	}{
		{"dedup", Config[string]{}, []step{
			add("a", "a", "b", "a"), wantLen(2), get("a", "b"), getNothing(), wantLen(0),
		}},
		{"fifo", Config[string]{}, []step{
			add("c", "a", "b"), get("c", "a", "b"), getNothing(),
		}},
		{"stingy: re-added while processing, queued again after Done", Config[string]{}, []step{
			add("a"), get("a"), add("a", "a"), wantLen(0), getNothing(),
			done("a"), wantLen(1), get("a"), done("a"), wantLen(0), getNothing(),
		}},
		{"re-added while processing goes to the back", Config[string]{}, []step{
			add("a"), get("a"), add("a", "b"), done("a"), get("b", "a"),
		}},
		{"done without get is ignored", Config[string]{}, []step{
			done("x"), add("a"), done("a"), wantLen(1), get("a"), done("a", "a"), getNothing(),
		}},
		{"finished items can be added again (cache off)", Config[string]{KeepFinished: -1}, []step{
			add("a", "b"), get("a"), done("a"), add("a"), get("b", "a"), done("b", "a"), add("b"), get("b"),
		}},
		{"finished items can be added again (cache on)", Config[string]{KeepFinished: 1}, []step{
			add("a", "b", "c"), get("a", "b", "c"), done("a", "b", "c"),
			add("c", "a", "b"), get("c", "a", "b"), done("a", "b", "c"),
		}},
		{"priority: higher first, FIFO within", Config[string]{}, []step{
			addPrio("low1", -1), addPrio("mid1", 0), addPrio("high1", 5), addPrio("mid2", 0),
			addPrio("low2", -1), addPrio("high2", 5), wantLen(6),
			get("high1", "high2", "mid1", "mid2", "low1", "low2"),
		}},
		{"priority: a re-add raises, never lowers", Config[string]{}, []step{
			addPrio("x", 0), addPrio("y", 1), addPrio("x", 5), addPrio("y", 0), wantLen(2),
			get("x", "y"),
		}},
		{"priority of an item re-added while processing", Config[string]{}, []step{
			add("x"), get("x"), addPrio("x", 1), addPrio("x", 3), addPrio("x", 2), addPrio("y", 2),
			done("x"), get("x", "y"),
		}},
		{"fairness: keys take turns", fair, []step{
			add("a/1", "a/2", "a/3", "b/1", "c/1", "a/4", "b/2"),
			get("a/1", "b/1", "c/1", "a/2", "b/2", "a/3", "a/4"),
		}},
		{"fairness: a key that empties leaves and rejoins at the end", fair, []step{
			add("a/1", "a/2", "b/1"), get("a/1", "b/1"), add("b/2", "c/1"),
			get("a/2", "b/2", "c/1"),
		}},
		{"fairness within each priority", fair, []step{
			addPrio("a/1", 0), addPrio("a/2", 0), addPrio("b/1", 0),
			addPrio("a/3", 1), addPrio("a/4", 1), addPrio("b/2", 1),
			get("a/3", "b/2", "a/4", "a/1", "b/1", "a/2"),
		}},
		{"shut down: adds ignored, ready items still handed out", Config[string]{}, []step{
			add("a", "b"), get("a"), shutDown(), add("c"), addPrio("d", 9), wantLen(1),
			get("b"), done("a", "b"), getShutDown(), shutDown(), getShutDown(),
		}},
		{"shut down: an item re-added while processing is not stranded", Config[string]{}, []step{
			add("a"), get("a"), add("a"), shutDown(), getNothing(), done("a"), wantLen(1),
			get("a"), done("a"), getShutDown(),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runSteps(t, tc.cfg, tc.steps...) })
	}
}

func TestGetBlocksUntilAdd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		got := make(chan string, 1)
		go func() {
			item, err := q.Get(context.Background())
			if err != nil {
				t.Errorf("Get: %v", err)
			}
			got <- item
		}()
		synctest.Wait()
		select {
		case item := <-got:
			t.Fatalf("Get returned %q from an empty queue", item)
		default:
		}
		q.Add("a")
		if item := <-got; item != "a" {
			t.Fatalf("Get = %q, want a", item)
		}
		if n := q.Len(); n != 0 {
			t.Fatalf("Len = %d after the blocked Get took the item", n)
		}
		q.Done("a")
		checkInvariants(t, q)
	})
}

// TestAddRacesGetGoingToSleep races Adds against a worker that finds the queue empty and
// goes to sleep: each item is added while the worker is finishing the one before. Add only
// stages an item when no Get is waiting, so the two must not miss each other: the worker
// has to be handed every item (a lost wake-up shows as the worker's timeout).
func TestAddRacesGetGoingToSleep(t *testing.T) {
	q := New(Config[int]{})
	got := make(chan int)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			item, err := q.Get(ctx)
			cancel()
			if errors.Is(err, ErrShutDown) {
				return
			}
			if err != nil {
				t.Errorf("Get: %v", err)
				close(got)
				return
			}
			got <- item
			q.Done(item)
		}
	})
	for i := range 50000 {
		q.Add(i)
		item, ok := <-got
		if !ok {
			break
		}
		if item != i {
			t.Fatalf("round %d: Get = %d", i, item)
		}
	}
	q.ShutDown()
	wg.Wait()
	checkInvariants(t, q)
}

// TestStagedAddsAreBounded: adds with no Get to take them are staged in a bounded buffer,
// which the adders apply themselves when it fills; every add still counts.
func TestStagedAddsAreBounded(t *testing.T) {
	q := New(Config[int]{})
	defer q.ShutDown()
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Go(func() {
			for i := range 10 * stageMax {
				q.Add(p*10*stageMax + i)
			}
		})
	}
	wg.Wait()
	q.amu.Lock()
	staged := len(q.adds)
	q.amu.Unlock()
	if staged >= stageMax {
		t.Fatalf("%d adds staged, limit %d", staged, stageMax)
	}
	checkInvariants(t, q)
	if n := q.Len(); n != 40*stageMax {
		t.Fatalf("Len = %d, want %d", n, 40*stageMax)
	}
	last := [4]int{-1, -1, -1, -1}
	for i := range 40 * stageMax { // each producer's adds come out in its order
		item, err := q.Get(doneCtx)
		if err != nil {
			t.Fatalf("Get %d: %v", i, err)
		}
		if p := item / (10 * stageMax); item <= last[p] {
			t.Fatalf("Get = %d after %d from the same producer", item, last[p])
		} else {
			last[p] = item
		}
		q.Done(item)
	}
	checkInvariants(t, q)
}

func TestGetHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		defer q.ShutDown()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := q.Get(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get = %v, want DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Fatalf("Get returned after %v, want 1s", waited)
		}
		// The abandoned wait must not swallow a later item.
		q.Add("a")
		if item, err := q.Get(context.Background()); item != "a" || err != nil {
			t.Fatalf("Get = %q, %v; want a", item, err)
		}
		q.Done("a")
		checkInvariants(t, q)
	})
}

// TestGetCancelRaceLosesNothing races a cancellation against an Add that wakes the blocked
// Get: either Get returns the item, or it returns the context error and the item is still
// in the queue.
func TestGetCancelRaceLosesNothing(t *testing.T) {
	q := New(Config[int]{})
	defer q.ShutDown()
	for i := range 2000 {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { q.Add(i) })
		wg.Go(cancel)
		item, err := q.Get(ctx)
		wg.Wait()
		switch {
		case err == nil:
			if item != i {
				t.Fatalf("round %d: Get = %d", i, item)
			}
		case errors.Is(err, context.Canceled):
			if item, err = q.Get(context.Background()); err != nil || item != i {
				t.Fatalf("round %d: item lost after a cancelled Get: %d, %v", i, item, err)
			}
		default:
			t.Fatalf("round %d: Get: %v", i, err)
		}
		q.Done(i)
		if n := q.Len(); n != 0 {
			t.Fatalf("round %d: Len = %d", i, n)
		}
	}
	checkInvariants(t, q)
}

func TestShutDownReleasesBlockedGets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		errs := make(chan error, 3)
		for range 3 {
			go func() {
				_, err := q.Get(context.Background())
				errs <- err
			}()
		}
		synctest.Wait()
		q.ShutDown()
		for range 3 {
			if err := <-errs; !errors.Is(err, ErrShutDown) {
				t.Fatalf("Get = %v, want ErrShutDown", err)
			}
		}
		if !q.ShuttingDown() {
			t.Fatal("ShuttingDown = false")
		}
	})
}

func TestShutDownWithDrainWaitsForWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		q.Add("a")
		q.Add("b")
		held, _ := q.Get(context.Background()) // a worker holds "a"
		var processed []string
		workerDone := make(chan struct{})
		go func() { // a second worker, running until shut-down
			defer close(workerDone)
			for {
				item, err := q.Get(context.Background())
				if err != nil {
					return
				}
				time.Sleep(time.Second)
				processed = append(processed, item)
				q.Done(item)
			}
		}()
		synctest.Wait()
		drained := make(chan error)
		start := time.Now()
		go func() { drained <- q.ShutDownWithDrain(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-drained:
			t.Fatalf("ShutDownWithDrain returned %v with work in flight", err)
		default:
		}
		time.Sleep(3 * time.Second)
		q.Done(held)
		if err := <-drained; err != nil {
			t.Fatalf("ShutDownWithDrain: %v", err)
		}
		if took := time.Since(start); took != 3*time.Second {
			t.Fatalf("drain took %v, want 3s (until the held item was done)", took)
		}
		<-workerDone
		if len(processed) != 1 || processed[0] != "b" {
			t.Fatalf("processed %v, want [b]", processed)
		}
	})
}

func TestShutDownWithDrainGivesUpWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		q.Add("a")
		q.Add("b")
		if _, err := q.Get(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := q.ShutDownWithDrain(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ShutDownWithDrain = %v, want DeadlineExceeded", err)
		}
		if want := "1 items ready and 1 in flight"; !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "workqueue: ") {
			t.Fatalf("error %q does not say %q", err, want)
		}
		// Drained already: a second call returns at once.
		q.Done("a")
		if item, _ := q.Get(ctx); item != "b" {
			t.Fatalf("Get = %q after shut-down, want b", item)
		}
		q.Done("b")
		if err := q.ShutDownWithDrain(context.Background()); err != nil {
			t.Fatalf("second ShutDownWithDrain: %v", err)
		}
	})
}

// TestShutDownKeepsBufferedAdds: adds made just before a shut-down, still in Add's buffer,
// are work the drain waits for, and are handed out after it.
func TestShutDownKeepsBufferedAdds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[string]{})
		q.Add("a")
		q.Add("b")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := q.ShutDownWithDrain(ctx)
		if want := "2 items ready and 0 in flight"; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("ShutDownWithDrain = %v, want an error saying %q", err, want)
		}
		q.Add("c") // after shut-down: refused
		for _, want := range []string{"a", "b"} {
			if item, err := q.Get(context.Background()); item != want || err != nil {
				t.Fatalf("Get = %q, %v; want %q", item, err, want)
			}
			q.Done(want)
		}
		if item, err := q.Get(context.Background()); !errors.Is(err, ErrShutDown) {
			t.Fatalf("Get = %q, %v; want ErrShutDown", item, err)
		}
		checkInvariants(t, q)
	})
}

func TestNewStartsNoGoroutine(t *testing.T) {
	existing := goleak.IgnoreCurrent()
	q := New(Config[string]{FairnessKey: byPrefix})
	q.Add("a/1")
	q.AddAfter("a/2", time.Hour)
	q.AddRateLimited("a/3")
	if err := goleak.Find(existing); err != nil {
		t.Fatalf("goroutines after New and adds: %v", err)
	}
	q.ShutDown()
	if err := goleak.Find(existing); err != nil {
		t.Fatalf("goroutines after ShutDown: %v", err)
	}
}

// TestShutDownWaitsForTimerGoroutine: ShutDown does not return while the delay timer's
// callback is still running (here it is held inside a metrics hook).
func TestShutDownWaitsForTimerGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		inHook := make(chan struct{})
		m := &recMetrics{onAdded: func() { // only the timer adds in this test
			close(inHook)
			<-release
		}}
		q := New(Config[string]{Metrics: m})
		q.AddAfter("a", time.Second)
		<-inHook // the timer fired and its goroutine is in the hook
		returned := make(chan struct{})
		go func() {
			q.ShutDown()
			close(returned)
		}()
		synctest.Wait()
		select {
		case <-returned:
			t.Fatal("ShutDown returned while the timer callback was running")
		default:
		}
		close(release)
		<-returned
	})
}

func TestMisuseIsHarmless(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := NewExponential[string](time.Second, time.Minute)
		q := New(Config[string]{RateLimiter: lim})
		q.Done("never-added")
		q.Add("a")
		q.Done("a") // queued, not handed out
		if n := q.Len(); n != 1 {
			t.Fatalf("Len = %d after Done of a queued item", n)
		}
		item, _ := q.Get(context.Background())
		q.Done(item)
		q.Done(item)
		q.ShutDown()
		q.ShutDown()
		q.Add("b")
		q.AddAfter("c", time.Second)
		q.AddAfter("c", 0)
		q.AddRateLimited("d")
		q.AddWithOptions("e", AddOptions{Delay: time.Second, Priority: 3, RateLimited: true})
		if n := lim.NumRequeues("d") + lim.NumRequeues("e"); n != 0 {
			t.Fatalf("adds after shut-down recorded %d failures", n)
		}
		time.Sleep(2 * time.Second)
		if n := q.Len(); n != 0 {
			t.Fatalf("Len = %d after adds following shut-down", n)
		}
		if _, err := q.Get(context.Background()); !errors.Is(err, ErrShutDown) {
			t.Fatalf("Get = %v", err)
		}
		if err := q.ShutDownWithDrain(context.Background()); err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, q)
	})
}

// TestHooksRunWithoutLocks: FairnessKey, the RateLimiter and Metrics call back into the
// queue; if any were called with a queue lock held, the bubble would deadlock.
func TestHooksRunWithoutLocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var q *Queue[string]
		reenter := func() {
			_ = q.Len()
			_ = q.ShuttingDown()
		}
		m := &recMetrics{hook: reenter}
		q = New(Config[string]{
			FairnessKey: func(s string) string { reenter(); return byPrefix(s) },
			RateLimiter: reentrantLimiter{NewExponential[string](time.Millisecond, time.Second), reenter},
			Metrics:     m,
		})
		q.Add("a/1")
		q.AddAfter("a/2", time.Millisecond)
		q.AddRateLimited("b/1")
		q.AddWithOptions("c/1", AddOptions{RateLimited: true, Priority: 1})
		for range 4 {
			item, err := q.Get(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			_ = m.inFlight()
			q.Forget(item)
			q.Done(item)
		}
		q.ShutDown()
	})
}

type reentrantLimiter struct {
	RateLimiter[string]
	hook func()
}

func (r reentrantLimiter) When(item string) time.Duration {
	r.hook()
	return r.RateLimiter.When(item)
}

// TestRunningGetTakesItemBeforeWokenGet: an item added while a Get waits wakes that Get
// but is not set aside for it. A Get that comes first (a worker back from a Done) takes it
// at once, and the woken Get, finding nothing, waits again and takes the next item. With
// one processor the woken Get cannot run before the running one, so the running one
// takes the item every time.
func TestRunningGetTakesItemBeforeWokenGet(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	q := New(Config[int]{})
	got := make(chan int)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(got)
		for {
			item, err := q.Get(context.Background())
			if err != nil {
				return
			}
			got <- item
			q.Done(item)
		}
	})
	for i := 0; i < 40; i += 2 {
		for q.nwait.Load() != 1 { // the other Get waits
			runtime.Gosched()
		}
		q.Add(i) // wakes it
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		item, err := q.Get(ctx)
		cancel()
		if err != nil || item != i {
			t.Fatalf("round %d: the running Get = %d, %v; want the item the woken Get was woken for", i, item, err)
		}
		q.Done(i)
		q.Add(i + 1)
		if item := <-got; item != i+1 {
			t.Fatalf("round %d: the woken Get took %d, want %d", i, item, i+1)
		}
	}
	q.ShutDown()
	wg.Wait()
	checkInvariants(t, q)
}
