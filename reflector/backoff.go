package reflector

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Backoff configures the delays between retries after failures. Delays grow
// exponentially from Initial by Factor up to Max; each delay is drawn at
// random from ((1-Jitter)·d, d] so that many reflectors failing together do
// not retry together. After the reflector has been healthy (a watch open and
// no failure) for ResetAfter, the next failure starts again from Initial.
//
// The zero value means the defaults: 800ms, 30s, factor 2, jitter 0.5 and a
// reset after 2 minutes, so retries against a dead server settle at one every
// 15–30 seconds.
type Backoff struct {
	// Initial is the base of the first delay; 0 means 800ms.
	Initial time.Duration
	// Max caps every delay; 0 means 30s. Max >= Initial.
	Max time.Duration
	// Factor multiplies the base after each failure; 0 means 2. Factor >= 1.
	Factor float64
	// Jitter is the fraction of each delay that is random, in [0, 1];
	// 0 means 0.5, a negative value disables jitter.
	Jitter float64
	// ResetAfter is how long the reflector must stay healthy for the delays
	// to start again from Initial; 0 means 2 minutes.
	ResetAfter time.Duration
}

const (
	defaultBackoffInitial    = 800 * time.Millisecond
	defaultBackoffMax        = 30 * time.Second
	defaultBackoffFactor     = 2.0
	defaultBackoffJitter     = 0.5
	defaultBackoffResetAfter = 2 * time.Minute
)

// withDefaults returns b with zero fields replaced by defaults, or an error
// describing the first invalid field.
func (b Backoff) withDefaults() (Backoff, error) {
	if b.Initial < 0 || b.Max < 0 || b.ResetAfter < 0 {
		return b, fmt.Errorf("reflector: backoff durations must not be negative: %+v", b)
	}
	if b.Initial == 0 {
		b.Initial = defaultBackoffInitial
	}
	if b.Max == 0 {
		b.Max = max(defaultBackoffMax, b.Initial)
	}
	if b.Max < b.Initial {
		return b, fmt.Errorf("reflector: backoff Max %v is below Initial %v", b.Max, b.Initial)
	}
	if b.Factor == 0 {
		b.Factor = defaultBackoffFactor
	}
	if b.Factor < 1 {
		return b, fmt.Errorf("reflector: backoff Factor %v is below 1", b.Factor)
	}
	switch {
	case b.Jitter == 0:
		b.Jitter = defaultBackoffJitter
	case b.Jitter < 0:
		b.Jitter = 0
	case b.Jitter > 1:
		return b, fmt.Errorf("reflector: backoff Jitter %v is above 1", b.Jitter)
	}
	if b.ResetAfter == 0 {
		b.ResetAfter = defaultBackoffResetAfter
	}
	return b, nil
}

// backoff is the retry-delay sequence of one reflector. It is pure
// arithmetic on the times it is given, so tests need no clock. Not safe for
// concurrent use; the Run goroutine owns it.
type backoff struct {
	cfg Backoff // with defaults applied
	// base is the un-jittered delay the next failure gets; 0 means cfg.Initial.
	// Invariant: 0 <= base <= cfg.Max.
	base time.Duration
	// healthySince is when the current healthy period began; zero when the
	// reflector is not healthy.
	healthySince time.Time
	// rand returns a number in [0, 1).
	rand func() float64
}

func newBackoff(cfg Backoff) backoff {
	return backoff{cfg: cfg, rand: rand.Float64}
}

// healthyAt records that the reflector is healthy at now. Only the first call
// after a failure matters: it starts the healthy period.
func (b *backoff) healthyAt(now time.Time) {
	if b.healthySince.IsZero() {
		b.healthySince = now
	}
}

// failAt records a failure at now and returns how long to wait before the
// next attempt. A healthy period of at least cfg.ResetAfter before the
// failure resets the sequence to cfg.Initial.
func (b *backoff) failAt(now time.Time) time.Duration {
	if !b.healthySince.IsZero() && now.Sub(b.healthySince) >= b.cfg.ResetAfter {
		b.base = 0
	}
	b.healthySince = time.Time{}
	d := b.base
	if d == 0 {
		d = b.cfg.Initial
	}
	next := time.Duration(float64(d) * b.cfg.Factor)
	if next > b.cfg.Max || next < d { // the second test catches overflow
		next = b.cfg.Max
	}
	b.base = next
	if b.cfg.Jitter > 0 {
		d -= time.Duration(b.cfg.Jitter * b.rand() * float64(d))
	}
	return d
}
