package workqueue

// Conformance: the rate limiters (client-go default_rate_limiters_test.go). See
// conformance_test.go.

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"
	cgwq "k8s.io/client-go/util/workqueue"
)

// wantWhens calls l.When(item) once per element of want and checks each answer.
func wantWhens[T comparable](t *testing.T, l RateLimiter[T], item T, want ...time.Duration) {
	t.Helper()
	for i, w := range want {
		if got := l.When(item); got != w {
			t.Fatalf("When(%v) #%d = %v, want %v", item, i+1, got, w)
		}
	}
}

// wantRequeues checks l.NumRequeues(item).
func wantRequeues[T comparable](t *testing.T, l RateLimiter[T], item T, want int) {
	t.Helper()
	if got := l.NumRequeues(item); got != want {
		t.Fatalf("NumRequeues(%v) = %d, want %d", item, got, want)
	}
}

// covers client-go TestItemExponentialFailureRateLimiter: the delay doubles from the base
// per failure of an item, items are counted apart, and Forget resets the count.
func TestConformanceExponentialLimiter(t *testing.T) {
	const ms = time.Millisecond
	l := NewExponential[string](ms, time.Second)
	wantWhens(t, l, "one", 1*ms, 2*ms, 4*ms, 8*ms, 16*ms)
	wantRequeues(t, l, "one", 5)
	wantWhens(t, l, "two", 1*ms, 2*ms)
	wantRequeues(t, l, "two", 2)
	l.Forget("one")
	wantRequeues(t, l, "one", 0)
	wantWhens(t, l, "one", 1*ms)
	wantRequeues(t, l, "two", 2) // untouched by the other item's Forget
}

// covers client-go TestItemExponentialFailureRateLimiterOverFlow: the delay is exact below
// the cap and saturates at the cap, without overflowing, however many failures.
func TestConformanceExponentialLimiterOverflow(t *testing.T) {
	l := NewExponential[string](time.Millisecond, 1000*time.Second)
	for range 5 {
		l.When("one")
	}
	wantWhens(t, l, "one", 32*time.Millisecond)
	for range 1000 {
		l.When("overflow1")
	}
	wantWhens(t, l, "overflow1", 1000*time.Second)

	l = NewExponential[string](time.Minute, 1000*time.Hour)
	for range 2 {
		l.When("two")
	}
	wantWhens(t, l, "two", 4*time.Minute)
	for range 1000 {
		l.When("overflow2")
	}
	wantWhens(t, l, "overflow2", 1000*time.Hour)
}

// covers client-go TestItemFastSlowRateLimiter: the first maxFast failures of an item wait
// fast, later ones slow; items are counted apart; Forget resets.
func TestConformanceFastSlowLimiter(t *testing.T) {
	const fast, slow = 5 * time.Millisecond, 10 * time.Second
	l := NewFastSlow[string](fast, slow, 3)
	wantWhens(t, l, "one", fast, fast, fast, slow, slow)
	wantRequeues(t, l, "one", 5)
	wantWhens(t, l, "two", fast, fast)
	wantRequeues(t, l, "two", 2)
	l.Forget("one")
	wantRequeues(t, l, "one", 0)
	wantWhens(t, l, "one", fast)
}

// covers client-go TestMaxOfRateLimiter: the combination waits for the longest answer of
// its limiters, NumRequeues is the largest count, and Forget reaches every limiter.
func TestConformanceMaxOfLimiter(t *testing.T) {
	const ms = time.Millisecond
	l := NewMaxOf[string](
		NewFastSlow[string](5*ms, 3*time.Second, 3),
		NewExponential[string](ms, time.Second),
	)
	// fast/slow: 5, 5, 5ms, 3s, 3s; exponential: 1, 2, 4, 8, 16ms.
	wantWhens(t, l, "one", 5*ms, 5*ms, 5*ms, 3*time.Second, 3*time.Second)
	wantRequeues(t, l, "one", 5)
	wantWhens(t, l, "two", 5*ms, 5*ms)
	wantRequeues(t, l, "two", 2)
	l.Forget("one")
	wantRequeues(t, l, "one", 0)
	wantWhens(t, l, "one", 5*ms)
}

// stepLimiter answers base for its first n calls, whatever the item, and long after.
type stepLimiter struct {
	mu         sync.Mutex
	calls, n   int
	base, long time.Duration
}

func (l *stepLimiter) When(int) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.calls <= l.n {
		return l.base
	}
	return l.long
}

func (l *stepLimiter) Forget(int)          {}
func (l *stepLimiter) NumRequeues(int) int { return 0 }

// covers client-go TestWithMaxWaitRateLimiter. Deviation: this package has no max-wait
// limiter of its own; client-go's is used as Config.RateLimiter as is, like any client-go
// limiter. Its cap applies to the queue's delays: after 100 calls answering 5ms, the
// wrapped limiter answers 1000s and the queue waits 500s.
func TestConformanceClientGoMaxWaitLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		step := &stepLimiter{n: 100, base: 5 * time.Millisecond, long: 1000 * time.Second}
		q := New(Config[int]{RateLimiter: cgwq.NewTypedWithMaxWaitRateLimiter[int](step, 500*time.Second)})
		defer q.ShutDown()
		for i := range 200 {
			q.AddRateLimited(i)
		}
		advance(5 * time.Millisecond)
		if got := getAll(t, q); len(got) != 100 || got[0] != 0 || got[99] != 99 {
			t.Fatalf("at 5ms: %d items ready, want items 0..99", len(got))
		}
		advance(500*time.Second - 5*time.Millisecond - time.Nanosecond)
		checkLen(t, q, 0, "before the 500s cap")
		advance(time.Nanosecond)
		if got := getAll(t, q); len(got) != 100 || got[0] != 100 || got[99] != 199 {
			t.Fatalf("at 500s: %d items ready, want items 100..199", len(got))
		}
		checkInvariants(t, q)
	})
}

// covers the token bucket of client-go's DefaultTypedControllerRateLimiter (client-go has
// no unit test of it): a burst is free, then tokens come at the bucket's rate; the bucket
// is shared by all items and keeps no per-item count.
func TestConformanceBucketLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ms = time.Millisecond
		l := NewBucket[string](rate.NewLimiter(10, 3))
		wantWhens(t, l, "a", 0, 0)
		wantWhens(t, l, "b", 0, 100*ms, 200*ms)
		wantRequeues(t, l, "b", 0)
		l.Forget("b") // nothing to forget: the next token is still 300ms away
		wantWhens(t, l, "c", 300*ms)
		time.Sleep(time.Second) // 10 tokens earned, 4 owed, 3 kept at most
		wantWhens(t, l, "d", 0, 0, 0, 100*ms)
	})
}

// covers client-go's DefaultTypedControllerRateLimiter through the queue: each item waits
// the longer of its exponential backoff (5ms doubling) and the shared bucket (10 per second
// after a burst of 100), so the 101st distinct failing item waits 100ms, and Forget resets
// an item's backoff but not the bucket.
func TestConformanceDefaultLimiterThroughQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config[int]{})
		defer q.ShutDown()
		for i := range 102 {
			q.AddRateLimited(i)
		}
		advance(5 * time.Millisecond)
		if got := getAll(t, q); len(got) != 100 {
			t.Fatalf("at 5ms: %d items ready, want the burst of 100", len(got))
		}
		advance(95*time.Millisecond - time.Nanosecond)
		checkLen(t, q, 0, "before the bucket's next token")
		advance(time.Nanosecond)
		if got := getAll(t, q); len(got) != 1 || got[0] != 100 {
			t.Fatalf("at 100ms: ready %v, want [100]", got)
		}
		advance(100 * time.Millisecond)
		if got := getAll(t, q); len(got) != 1 || got[0] != 101 {
			t.Fatalf("at 200ms: ready %v, want [101]", got)
		}
		if n := q.NumRequeues(5); n != 1 {
			t.Fatalf("NumRequeues = %d, want 1", n)
		}
		advance(time.Minute) // the bucket refills
		q.AddRateLimited(5)  // second failure: 10ms
		start := time.Now()
		if item, _ := q.Get(context.Background()); item != 5 || time.Since(start) != 10*time.Millisecond {
			t.Fatalf("second failure: %d after %v, want 5 after 10ms", item, time.Since(start))
		}
		q.Done(5)
		q.Forget(5)
		q.AddRateLimited(5)
		start = time.Now()
		if item, _ := q.Get(context.Background()); item != 5 || time.Since(start) != 5*time.Millisecond {
			t.Fatalf("after Forget: %d after %v, want 5 after 5ms", item, time.Since(start))
		}
		q.Done(5)
		checkInvariants(t, q)
	})
}
