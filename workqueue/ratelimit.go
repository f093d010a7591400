package workqueue

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimiter decides how long an item waits before it is retried. Implementations must be
// safe for concurrent use. The method set equals client-go's TypedRateLimiter[T], so any
// client-go limiter can be used directly.
//
// A limiter that also has a Reset() method has it called when the queue that uses it shuts
// down, so its per-item bookkeeping is released; do not share such a limiter between queues
// if one of them may shut down before the others.
type RateLimiter[T comparable] interface {
	// When records a failure of item and returns how long it should wait.
	When(item T) time.Duration
	// Forget drops the item's failure history (after a success, or when giving up).
	Forget(item T)
	// NumRequeues returns how many failures of the item are recorded.
	NumRequeues(item T) int
}

// Defaults of the built-in limiters; DefaultRateLimiter combines them like client-go's
// DefaultTypedControllerRateLimiter.
const (
	DefaultBaseDelay   = 5 * time.Millisecond
	DefaultMaxDelay    = 1000 * time.Second
	DefaultBucketQPS   = 10
	DefaultBucketBurst = 100
)

// DefaultRateLimiter returns the limiter client-go controllers use by default: the larger
// of a per-item exponential backoff (5ms doubling up to 1000s) and an overall token bucket
// (10 per second, bursts of 100).
func DefaultRateLimiter[T comparable]() *MaxOfLimiter[T] {
	return NewMaxOf[T](
		NewExponential[T](DefaultBaseDelay, DefaultMaxDelay),
		NewBucket[T](rate.NewLimiter(DefaultBucketQPS, DefaultBucketBurst)),
	)
}

// failures counts failures per item for the per-item limiters. Its memory is bounded by
// the items currently remembered: when a map that held at least shrinkMin items falls
// below a quarter of its peak, it is rebuilt (Go maps never shrink by themselves).
type failures[T comparable] struct {
	mu   sync.Mutex
	m    map[T]int // nil until the first failure
	peak int       // the most entries m has held since it was made
}

// inc records a failure and returns the count before it.
func (f *failures[T]) inc(item T) int {
	f.mu.Lock()
	if f.m == nil {
		f.m = make(map[T]int)
	}
	n := f.m[item]
	f.m[item] = n + 1
	if l := len(f.m); l > f.peak {
		f.peak = l
	}
	f.mu.Unlock()
	return n
}

func (f *failures[T]) get(item T) int {
	f.mu.Lock()
	n := f.m[item]
	f.mu.Unlock()
	return n
}

func (f *failures[T]) forget(item T) {
	f.mu.Lock()
	delete(f.m, item)
	if l := len(f.m); f.peak >= shrinkMin && l < f.peak/4 {
		m := make(map[T]int, l)
		for k, v := range f.m {
			m[k] = v
		}
		f.m = m
		f.peak = l
	}
	f.mu.Unlock()
}

func (f *failures[T]) reset() {
	f.mu.Lock()
	f.m = nil
	f.peak = 0
	f.mu.Unlock()
}

// len returns the number of items remembered.
func (f *failures[T]) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
}

// ExponentialLimiter delays an item base·2^n after its n-th recorded failure (n from 0),
// capped at max. It is safe for concurrent use; each call costs one map update under a
// mutex, and it remembers only items that failed and were not forgotten. Create it with
// NewExponential.
type ExponentialLimiter[T comparable] struct {
	base, max time.Duration
	f         failures[T]
}

// NewExponential returns a per-item exponential limiter. Zero durations mean the defaults
// (DefaultBaseDelay, DefaultMaxDelay). It panics if a duration is negative or max < base.
func NewExponential[T comparable](base, max time.Duration) *ExponentialLimiter[T] {
	if base == 0 {
		base = DefaultBaseDelay
	}
	if max == 0 {
		max = DefaultMaxDelay
	}
	if base < 0 || max < base {
		panic(fmt.Sprintf("workqueue: NewExponential(%v, %v): need 0 <= base <= max", base, max))
	}
	return &ExponentialLimiter[T]{base: base, max: max}
}

// When records a failure and returns base·2^(failures before it), at most max.
func (l *ExponentialLimiter[T]) When(item T) time.Duration {
	return backoff(l.base, l.max, l.f.inc(item))
}

// Forget drops the item's failure count.
func (l *ExponentialLimiter[T]) Forget(item T) { l.f.forget(item) }

// NumRequeues returns the item's failure count.
func (l *ExponentialLimiter[T]) NumRequeues(item T) int { return l.f.get(item) }

// Reset forgets every item.
func (l *ExponentialLimiter[T]) Reset() { l.f.reset() }

// backoff returns base·2^n capped at max, without overflow.
func backoff(base, max time.Duration, n int) time.Duration {
	if n >= 63 || base > max>>uint(n) {
		return max
	}
	return base << uint(n)
}

// FastSlowLimiter delays an item fast for its first maxFast failures and slow after that.
// It is safe for concurrent use and costs one map update under a mutex per call. Create it
// with NewFastSlow.
type FastSlowLimiter[T comparable] struct {
	fast, slow time.Duration
	maxFast    int
	f          failures[T]
}

// NewFastSlow returns a fast/slow limiter. It panics on negative arguments.
func NewFastSlow[T comparable](fast, slow time.Duration, maxFast int) *FastSlowLimiter[T] {
	if fast < 0 || slow < 0 || maxFast < 0 {
		panic(fmt.Sprintf("workqueue: NewFastSlow(%v, %v, %d): negative argument", fast, slow, maxFast))
	}
	return &FastSlowLimiter[T]{fast: fast, slow: slow, maxFast: maxFast}
}

// When records a failure; the first maxFast failures wait fast, later ones slow.
func (l *FastSlowLimiter[T]) When(item T) time.Duration {
	if l.f.inc(item) < l.maxFast {
		return l.fast
	}
	return l.slow
}

// Forget drops the item's failure count.
func (l *FastSlowLimiter[T]) Forget(item T) { l.f.forget(item) }

// NumRequeues returns the item's failure count.
func (l *FastSlowLimiter[T]) NumRequeues(item T) int { return l.f.get(item) }

// Reset forgets every item.
func (l *FastSlowLimiter[T]) Reset() { l.f.reset() }

// BucketLimiter is an overall token bucket shared by all items: every When takes a token
// and waits until it is available. It keeps no per-item state (NumRequeues is always 0).
// It is safe for concurrent use. Create it with NewBucket.
type BucketLimiter[T comparable] struct {
	lim *rate.Limiter
}

// NewBucket returns a token-bucket limiter over lim; nil means DefaultBucketQPS tokens per
// second with bursts of DefaultBucketBurst.
func NewBucket[T comparable](lim *rate.Limiter) *BucketLimiter[T] {
	if lim == nil {
		lim = rate.NewLimiter(DefaultBucketQPS, DefaultBucketBurst)
	}
	return &BucketLimiter[T]{lim: lim}
}

// When reserves a token and returns the wait until it is available.
func (l *BucketLimiter[T]) When(T) time.Duration {
	now := time.Now()
	return l.lim.ReserveN(now, 1).DelayFrom(now)
}

// Forget does nothing: the bucket has no per-item state.
func (l *BucketLimiter[T]) Forget(T) {}

// NumRequeues returns 0: the bucket has no per-item state.
func (l *BucketLimiter[T]) NumRequeues(T) int { return 0 }

// MaxOfLimiter asks every limiter and waits for the longest answer. Every limiter records
// the failure (so a token bucket inside may be charged even when another one decides). It
// is safe for concurrent use if its limiters are. Create it with NewMaxOf.
type MaxOfLimiter[T comparable] struct {
	limiters []RateLimiter[T]
}

// NewMaxOf returns a limiter combining limiters by taking the maximum.
func NewMaxOf[T comparable](limiters ...RateLimiter[T]) *MaxOfLimiter[T] {
	return &MaxOfLimiter[T]{limiters: append([]RateLimiter[T](nil), limiters...)}
}

// When returns the longest delay of all limiters.
func (l *MaxOfLimiter[T]) When(item T) time.Duration {
	var d time.Duration
	for _, r := range l.limiters {
		d = max(d, r.When(item))
	}
	return d
}

// Forget forgets the item in every limiter.
func (l *MaxOfLimiter[T]) Forget(item T) {
	for _, r := range l.limiters {
		r.Forget(item)
	}
}

// NumRequeues returns the largest count of all limiters.
func (l *MaxOfLimiter[T]) NumRequeues(item T) int {
	n := 0
	for _, r := range l.limiters {
		n = max(n, r.NumRequeues(item))
	}
	return n
}

// Reset resets every limiter that has a Reset method.
func (l *MaxOfLimiter[T]) Reset() {
	for _, r := range l.limiters {
		if rs, ok := r.(interface{ Reset() }); ok {
			rs.Reset()
		}
	}
}

// JitterLimiter adds a random extra delay, uniform in [0, factor·d), to each delay d of
// another limiter, so items that failed together do not all retry at the same instant. It
// is safe for concurrent use if the inner limiter is. Create it with NewJitter.
type JitterLimiter[T comparable] struct {
	inner  RateLimiter[T]
	factor float64
}

// DefaultJitter is the jitter factor used when NewJitter is given 0.
const DefaultJitter = 0.1

// NewJitter wraps inner with jitter; factor 0 means DefaultJitter. It panics if factor is
// negative, infinite or NaN.
func NewJitter[T comparable](inner RateLimiter[T], factor float64) *JitterLimiter[T] {
	if factor == 0 {
		factor = DefaultJitter
	}
	if !(factor > 0) || math.IsInf(factor, 0) {
		panic(fmt.Sprintf("workqueue: NewJitter(%v): factor must be positive and finite", factor))
	}
	return &JitterLimiter[T]{inner: inner, factor: factor}
}

// When returns the inner delay plus jitter (saturating at the largest Duration).
func (l *JitterLimiter[T]) When(item T) time.Duration {
	d := l.inner.When(item)
	if d <= 0 {
		return d
	}
	j := rand.Float64() * l.factor * float64(d)
	if j >= float64(math.MaxInt64-d) {
		return math.MaxInt64
	}
	return d + time.Duration(j)
}

// Forget forgets the item in the inner limiter.
func (l *JitterLimiter[T]) Forget(item T) { l.inner.Forget(item) }

// NumRequeues returns the inner limiter's count.
func (l *JitterLimiter[T]) NumRequeues(item T) int { return l.inner.NumRequeues(item) }

// Reset resets the inner limiter if it has a Reset method.
func (l *JitterLimiter[T]) Reset() {
	if rs, ok := l.inner.(interface{ Reset() }); ok {
		rs.Reset()
	}
}
