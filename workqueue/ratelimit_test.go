package workqueue

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"
	cgwq "k8s.io/client-go/util/workqueue"
)

// Any client-go limiter is a RateLimiter.
var _ RateLimiter[string] = cgwq.DefaultTypedControllerRateLimiter[string]()

func TestExponential(t *testing.T) {
	l := NewExponential[string](time.Millisecond, time.Second)
	for i, want := range []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 1000} {
		if got := l.When("a"); got != want*time.Millisecond {
			t.Fatalf("failure %d: When = %v, want %v", i, got, want*time.Millisecond)
		}
	}
	if n := l.NumRequeues("a"); n != 12 {
		t.Fatalf("NumRequeues = %d", n)
	}
	if got := l.When("b"); got != time.Millisecond {
		t.Fatalf("other item: When = %v", got)
	}
	l.Forget("a")
	if got := l.When("a"); got != time.Millisecond {
		t.Fatalf("after Forget: When = %v", got)
	}
	for range 200 { // no overflow however many failures
		l.When("c")
	}
	if got := l.When("c"); got != time.Second {
		t.Fatalf("after 200 failures: When = %v", got)
	}
	if got := backoff(math.MaxInt64/2, math.MaxInt64, 1); got != math.MaxInt64-1 {
		t.Fatalf("backoff near the limit = %v", got)
	}
	if got := backoff(math.MaxInt64/2+1, math.MaxInt64, 1); got != math.MaxInt64 {
		t.Fatalf("backoff past the limit = %v", got)
	}
	d := NewExponential[int](0, 0)
	if d.base != DefaultBaseDelay || d.max != DefaultMaxDelay {
		t.Fatalf("zero arguments gave %v, %v", d.base, d.max)
	}
}

func TestFastSlow(t *testing.T) {
	l := NewFastSlow[string](time.Millisecond, time.Minute, 3)
	for i, want := range []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond, time.Minute, time.Minute} {
		if got := l.When("a"); got != want {
			t.Fatalf("failure %d: When = %v, want %v", i, got, want)
		}
	}
	if n := l.NumRequeues("a"); n != 5 {
		t.Fatalf("NumRequeues = %d", n)
	}
	l.Forget("a")
	if got := l.When("a"); got != time.Millisecond || l.NumRequeues("a") != 1 {
		t.Fatalf("after Forget: When = %v", got)
	}
}

func TestBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewBucket[string](rate.NewLimiter(10, 3))
		for i := range 3 {
			if got := l.When("a"); got != 0 {
				t.Fatalf("burst %d: When = %v", i, got)
			}
		}
		for i := 1; i <= 3; i++ {
			if got := l.When("b"); got != time.Duration(i)*100*time.Millisecond {
				t.Fatalf("after the burst: When = %v, want %dms", got, i*100)
			}
		}
		time.Sleep(time.Second)
		if got := l.When("c"); got != 0 {
			t.Fatalf("after refill: When = %v", got)
		}
		if l.NumRequeues("a") != 0 {
			t.Fatal("the bucket keeps no per-item count")
		}
		l.Forget("a")
	})
}

func TestMaxOf(t *testing.T) {
	fast := NewFastSlow[string](time.Millisecond, time.Hour, 2)
	exp := NewExponential[string](10*time.Millisecond, time.Minute)
	l := NewMaxOf[string](fast, exp)
	for i, want := range []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, time.Hour} {
		if got := l.When("a"); got != want {
			t.Fatalf("failure %d: When = %v, want %v", i, got, want)
		}
	}
	exp.When("a")
	if n := l.NumRequeues("a"); n != 4 {
		t.Fatalf("NumRequeues = %d, want the largest (4)", n)
	}
	l.Forget("a")
	if fast.NumRequeues("a")+exp.NumRequeues("a") != 0 {
		t.Fatal("Forget did not reach every limiter")
	}
	l.When("b")
	l.Reset()
	if fast.NumRequeues("b")+exp.NumRequeues("b") != 0 {
		t.Fatal("Reset did not reach every limiter")
	}
}

func TestJitter(t *testing.T) {
	l := NewJitter[string](NewFastSlow[string](time.Second, time.Second, 0), 0.5)
	distinct := map[time.Duration]bool{}
	for range 1000 {
		d := l.When("a")
		if d < time.Second || d >= 1500*time.Millisecond {
			t.Fatalf("When = %v, want in [1s, 1.5s)", d)
		}
		distinct[d] = true
	}
	if len(distinct) < 900 {
		t.Fatalf("only %d distinct delays in 1000: not jittered", len(distinct))
	}
	if n := l.NumRequeues("a"); n != 1000 {
		t.Fatalf("NumRequeues = %d", n)
	}
	l.Forget("a")
	if n := l.NumRequeues("a"); n != 0 {
		t.Fatalf("NumRequeues = %d after Forget", n)
	}
	huge := NewJitter[string](NewFastSlow[string](math.MaxInt64, 0, 1), 1)
	if got := huge.When("a"); got != math.MaxInt64 {
		t.Fatalf("jitter overflowed: %v", got)
	}
	if got := NewJitter[string](NewFastSlow[string](0, 0, 1), 0).When("a"); got != 0 {
		t.Fatalf("zero delay jittered to %v", got)
	}
}

func TestLimiterConstructorsRejectBadArguments(t *testing.T) {
	for name, f := range map[string]func(){
		"exponential negative": func() { NewExponential[int](-1, time.Second) },
		"exponential max<base": func() { NewExponential[int](time.Second, time.Millisecond) },
		"fastslow negative":    func() { NewFastSlow[int](time.Second, time.Second, -1) },
		"jitter negative":      func() { NewJitter[int](NewBucket[int](nil), -0.1) },
		"jitter NaN":           func() { NewJitter[int](NewBucket[int](nil), math.NaN()) },
		"jitter Inf":           func() { NewJitter[int](NewBucket[int](nil), math.Inf(1)) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Errorf("%s: no panic", name)
				} else if s := fmt.Sprint(r); s[:11] != "workqueue: " {
					t.Errorf("%s: panic %q lacks the package prefix", name, s)
				}
			}()
			f()
		}()
	}
}

// TestDefaultRateLimiterEqualsClientGo replays one random sequence of failures, forgets
// and pauses on ours and on client-go's default; every answer must be the same.
func TestDefaultRateLimiterEqualsClientGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ours := DefaultRateLimiter[string]()
		theirs := cgwq.DefaultTypedControllerRateLimiter[string]()
		r := rand.New(rand.NewPCG(1, 2))
		for i := range 5000 {
			item := fmt.Sprint("item-", r.IntN(50))
			switch r.IntN(10) {
			case 0:
				ours.Forget(item)
				theirs.Forget(item)
			case 1:
				time.Sleep(time.Duration(r.IntN(2000)) * time.Millisecond)
			default:
				if a, b := ours.When(item), theirs.When(item); a != b {
					t.Fatalf("step %d: When(%s) = %v, client-go %v", i, item, a, b)
				}
			}
			if a, b := ours.NumRequeues(item), theirs.NumRequeues(item); a != b {
				t.Fatalf("step %d: NumRequeues(%s) = %d, client-go %d", i, item, a, b)
			}
		}
	})
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestFailureBookkeepingIsBounded: a million distinct items that fail and are forgotten
// leave nothing behind, whether forgotten one by one or all at the end.
func TestFailureBookkeepingIsBounded(t *testing.T) {
	const n = 1_000_000
	l := NewExponential[int](time.Millisecond, time.Second)
	l.When(-1) // make the map
	base := heapInUse()
	for i := range n {
		l.When(i)
		l.When(i)
		l.Forget(i)
		if i%100_000 == 0 && l.f.len() != 1 {
			t.Fatalf("after %d items: %d remembered", i, l.f.len())
		}
	}
	if grown := int64(heapInUse()) - int64(base); grown > 64<<10 {
		t.Fatalf("heap grew by %d bytes over %d forgotten items", grown, n)
	}

	for i := range n {
		l.When(i)
	}
	full := heapInUse()
	for i := range n {
		l.Forget(i)
	}
	if l.f.len() != 1 || l.NumRequeues(0) != 0 {
		t.Fatalf("%d items remembered after forgetting them all", l.f.len())
	}
	after := heapInUse()
	if grown := int64(after) - int64(base); grown > 1<<20 {
		t.Fatalf("after a million failures forgotten, heap is %d bytes above the start (peak %d above)", grown, int64(full)-int64(base))
	}
}

// TestQueueFailureBookkeepingIsBounded: through the queue, failing items that are retried,
// processed and forgotten leave neither limiter entries nor queue entries behind.
func TestQueueFailureBookkeepingIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := NewExponential[int](time.Millisecond, time.Second)
		q := New(Config[int]{RateLimiter: lim, KeepFinished: -1})
		defer q.ShutDown()
		const batch, rounds = 5000, 40
		for r := range rounds {
			for i := range batch {
				q.AddRateLimited(r*batch + i)
			}
			for range batch {
				item, err := q.Get(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				q.Forget(item)
				q.Done(item)
			}
		}
		if n := lim.f.len(); n != 0 {
			t.Fatalf("limiter remembers %d items", n)
		}
		q.mu.Lock()
		n := q.c.idx.n
		q.mu.Unlock()
		if n != 0 || scheduled(q) != 0 {
			t.Fatalf("queue holds %d entries and %d scheduled", n, scheduled(q))
		}
		checkInvariants(t, q)
	})
}

// TestLimiterTagPathSharesCounts: the queue hands the built-in limiters the item's hash
// (whenAt), while When, Forget and NumRequeues hash it themselves; both must find the same
// failure record.
func TestLimiterTagPathSharesCounts(t *testing.T) {
	l := NewMaxOf[string](NewExponential[string](time.Millisecond, time.Second), NewFastSlow[string](time.Millisecond, time.Second, 2))
	now := time.Now()
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, time.Second, time.Second}
	for i, w := range want {
		var d time.Duration
		if i%2 == 0 {
			d = l.When("x")
		} else {
			d = l.whenAt("x", tagOf(itemSeed, "x"), now)
		}
		if d != w {
			t.Fatalf("failure %d: delay %v, want %v", i+1, d, w)
		}
	}
	if n := l.NumRequeues("x"); n != len(want) {
		t.Fatalf("NumRequeues = %d, want %d", n, len(want))
	}
	l.Forget("x")
	if d := l.whenAt("x", tagOf(itemSeed, "x"), now); d != time.Millisecond {
		t.Fatalf("delay after Forget = %v, want the base delay", d)
	}
}

// TestForgetWithoutFailuresTakesNoLock: while no item has failures, Forget and
// NumRequeues (called after every successful reconcile) return without the limiter's
// lock; once one item has, they find it, and forgetting the last one brings back the
// lock-free path.
func TestForgetWithoutFailuresTakesNoLock(t *testing.T) {
	l := NewExponential[string](time.Millisecond, time.Second)
	lockFree := func(what string) {
		t.Helper()
		l.f.mu.Lock() // a call that takes the lock blocks until the timeout below
		defer l.f.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			l.Forget("b")
			if n := l.NumRequeues("b"); n != 0 {
				t.Errorf("%s: NumRequeues = %d", what, n)
			}
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			l.f.mu.Unlock() // let the blocked call end, so the test does not leak it
			<-done
			l.f.mu.Lock()
			t.Fatalf("%s: Forget or NumRequeues waited for the lock", what)
		}
	}
	lockFree("new limiter")
	l.When("a")
	l.When("a")
	if n := l.NumRequeues("a"); n != 2 {
		t.Fatalf("NumRequeues = %d, want 2", n)
	}
	if n := l.f.n.Load(); n != 1 {
		t.Fatalf("counted %d items with failures, want 1", n)
	}
	l.Forget("b") // not remembered: a lookup under the lock, nothing dropped
	if n := l.NumRequeues("a"); n != 2 {
		t.Fatalf("after forgetting another item, NumRequeues = %d, want 2", n)
	}
	l.Forget("a")
	if n := l.NumRequeues("a"); n != 0 {
		t.Fatalf("after Forget, NumRequeues = %d", n)
	}
	lockFree("every item forgotten")
	l.When("c")
	l.f.reset()
	lockFree("after reset")
}

// TestForgetOfUnhashableItemKeepsTheLimiterUsable: a Forget whose item cannot be
// hashed (an any holding a slice) panics, as Go's maps do, and the limiter goes on
// working afterwards.
func TestForgetOfUnhashableItemKeepsTheLimiterUsable(t *testing.T) {
	l := NewExponential[any](time.Millisecond, time.Second)
	l.When("a") // an item with failures: Forget takes the lock
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Forget of an unhashable item did not panic")
			}
		}()
		l.Forget([]int{1})
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Forget("a")
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Forget blocked after a panicking Forget: the lock was kept") // leaks the blocked goroutine
	}
	if n := l.NumRequeues("a"); n != 0 {
		t.Fatalf("NumRequeues after Forget = %d", n)
	}
}
