package workqueue

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
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

// clocked is implemented by the built-in limiters: whenAt is When at a given instant, for
// an item whose hash tagOf(itemSeed, item) is tag, so a queue that reads the clock and
// hashes the item anyway spares the limiter a second, costlier time.Now and a second hash.
type clocked[T comparable] interface {
	whenAt(item T, tag uint32, now time.Time) time.Duration
}

// whenAt asks r for item's delay at now, through clocked if r has it.
func whenAt[T comparable](r RateLimiter[T], item T, tag uint32, now time.Time) time.Duration {
	if c, ok := r.(clocked[T]); ok {
		return c.whenAt(item, tag, now)
	}
	return r.When(item)
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

// failures counts failures per item for the per-item limiters, in the same kind of table
// the queue indexes its items with (see index): one probe per call, and no tombstones
// when items are forgotten all the time. Its memory is bounded by the items currently
// remembered: when a table that held at least shrinkMin items falls below a quarter of its
// peak, it is rebuilt.
//
// Invariants: recs[s] is in use iff idx holds s; free links the unused slots through next;
// peak >= idx.n.
type failures[T comparable] struct {
	mu   sync.Mutex
	idx  index // hashed with itemSeed, as the queue's
	recs []failRec[T]
	free int32
	peak int // the most items remembered since the table was made
	// n mirrors idx.n, written under mu, so that forget and get of an item when no
	// item is remembered (every Forget after a success, in a controller whose
	// reconciles succeed) return without the lock.
	n atomic.Int32
}

// failRec is one item's failure count; next links free records.
type failRec[T comparable] struct {
	item T
	n    int32
	next int32
}

// find returns the record slot of item, or none and the bucket where it would go. Requires
// mu held.
func (f *failures[T]) find(item T, tag uint32) (int32, int) {
	x := &f.idx
	if len(x.b) == 0 {
		return none, -1
	}
	mask := len(x.b) - 1
	for i := x.home(tag); ; i = (i + 1) & mask {
		v := x.b[i]
		if v == 0 {
			return none, i
		}
		if uint32(v>>32) == tag {
			if s := int32(uint32(v)) - 1; f.recs[s].item == item {
				return s, i
			}
		}
	}
}

// inc records a failure and returns the count before it.
func (f *failures[T]) inc(item T) int { return f.incTag(item, tagOf(itemSeed, item)) }

// incTag is inc for an item whose tagOf(itemSeed, item) is tag.
func (f *failures[T]) incTag(item T, tag uint32) int {
	f.mu.Lock()
	if f.recs == nil {
		f.free = none
	}
	s, pos := f.find(item, tag)
	if s == none {
		if f.free != none {
			s = f.free
			f.free = f.recs[s].next
		} else {
			if len(f.recs) >= maxSlots {
				f.mu.Unlock()
				panic("workqueue: more than 2^31-1 items with failures")
			}
			s = int32(len(f.recs))
			f.recs = append(f.recs, failRec[T]{})
		}
		f.recs[s] = failRec[T]{item: item, next: none}
		f.idx.put(tag, pos, s)
		f.peak = max(f.peak, f.idx.n)
		f.n.Store(int32(f.idx.n))
	}
	r := &f.recs[s]
	n := r.n
	if n < math.MaxInt32 {
		r.n++
	}
	f.mu.Unlock()
	return int(n)
}

func (f *failures[T]) get(item T) int {
	if f.n.Load() == 0 {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.recs == nil {
		return 0
	}
	s, _ := f.find(item, tagOf(itemSeed, item))
	if s == none {
		return 0
	}
	return int(f.recs[s].n)
}

func (f *failures[T]) forget(item T) {
	if f.n.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock() // an item whose hash or comparison panics must not keep the lock
	if f.recs == nil {
		return
	}
	tag := tagOf(itemSeed, item)
	s, _ := f.find(item, tag)
	if s == none {
		return
	}
	f.idx.del(tag, s)
	f.n.Store(int32(f.idx.n))
	f.recs[s] = failRec[T]{next: f.free}
	f.free = s
	if l := f.idx.n; f.peak >= shrinkMin && l < f.peak/4 {
		f.rebuild()
	}
}

// rebuild moves the remembered items into new, smaller containers. Requires mu held.
func (f *failures[T]) rebuild() {
	old := f.recs
	f.recs = make([]failRec[T], 0, f.idx.n)
	f.idx = index{}
	f.free = none
	for _, r := range old {
		if r.n == 0 { // free (a remembered item has failed at least once)
			continue
		}
		s := int32(len(f.recs))
		f.recs = append(f.recs, r)
		f.recs[s].next = none
		tag := tagOf(itemSeed, r.item)
		f.idx.put(tag, f.idx.emptyOrNone(tag), s)
	}
	f.peak = f.idx.n
}

func (f *failures[T]) reset() {
	f.mu.Lock()
	f.idx = index{}
	f.recs = nil
	f.free = none
	f.peak = 0
	f.n.Store(0)
	f.mu.Unlock()
}

// len returns the number of items remembered.
func (f *failures[T]) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.idx.n
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

func (l *ExponentialLimiter[T]) whenAt(item T, tag uint32, _ time.Time) time.Duration {
	return backoff(l.base, l.max, l.f.incTag(item, tag))
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
	return l.whenAt(item, tagOf(itemSeed, item), time.Time{})
}

func (l *FastSlowLimiter[T]) whenAt(item T, tag uint32, _ time.Time) time.Duration {
	if l.f.incTag(item, tag) < l.maxFast {
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
func (l *BucketLimiter[T]) When(item T) time.Duration { return l.whenAt(item, 0, time.Now()) }

func (l *BucketLimiter[T]) whenAt(_ T, _ uint32, now time.Time) time.Duration {
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
	// clocks[i] is limiters[i] as a clocked limiter, nil if it is not one.
	clocks []clocked[T]
}

// NewMaxOf returns a limiter combining limiters by taking the maximum.
func NewMaxOf[T comparable](limiters ...RateLimiter[T]) *MaxOfLimiter[T] {
	l := &MaxOfLimiter[T]{
		limiters: append([]RateLimiter[T](nil), limiters...),
		clocks:   make([]clocked[T], len(limiters)),
	}
	for i, r := range limiters {
		l.clocks[i], _ = r.(clocked[T])
	}
	return l
}

// When returns the longest delay of all limiters.
func (l *MaxOfLimiter[T]) When(item T) time.Duration {
	var d time.Duration
	for _, r := range l.limiters {
		d = max(d, r.When(item))
	}
	return d
}

func (l *MaxOfLimiter[T]) whenAt(item T, tag uint32, now time.Time) time.Duration {
	var d time.Duration
	for i, r := range l.limiters {
		if c := l.clocks[i]; c != nil {
			d = max(d, c.whenAt(item, tag, now))
		} else {
			d = max(d, r.When(item))
		}
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
func (l *JitterLimiter[T]) When(item T) time.Duration { return l.jitter(l.inner.When(item)) }

func (l *JitterLimiter[T]) whenAt(item T, tag uint32, now time.Time) time.Duration {
	return l.jitter(whenAt(l.inner, item, tag, now))
}

// jitter adds the random extra delay to d.
func (l *JitterLimiter[T]) jitter(d time.Duration) time.Duration {
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
