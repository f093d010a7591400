package reflector

import (
	"math"
	"strings"
	"testing"
	"time"
)

// fixedRand returns the given values in turn, then repeats the last.
func fixedRand(vals ...float64) func() float64 {
	return func() float64 {
		v := vals[0]
		if len(vals) > 1 {
			vals = vals[1:]
		}
		return v
	}
}

func newTestBackoff(t *testing.T, cfg Backoff, rnd func() float64) *backoff {
	t.Helper()
	c, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	b := newBackoff(c)
	b.rand = rnd
	return &b
}

func TestBackoffSequence(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name string
		cfg  Backoff
		rnd  float64
		want []time.Duration
	}{
		{"defaults, no jitter drawn", Backoff{}, 0, []time.Duration{
			800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond,
			12800 * time.Millisecond, 25600 * time.Millisecond, 30 * time.Second, 30 * time.Second,
		}},
		{"defaults, full jitter drawn", Backoff{}, 1, []time.Duration{
			400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond,
			6400 * time.Millisecond, 12800 * time.Millisecond, 15 * time.Second, 15 * time.Second,
		}},
		{"jitter disabled", Backoff{Initial: time.Second, Max: 4 * time.Second, Factor: 3, Jitter: -1}, 0.7, []time.Duration{
			time.Second, 3 * time.Second, 4 * time.Second, 4 * time.Second,
		}},
		{"factor 1 is constant", Backoff{Initial: time.Second, Factor: 1, Jitter: -1}, 0, []time.Duration{
			time.Second, time.Second, time.Second,
		}},
		{"quarter jitter", Backoff{Initial: time.Second, Max: time.Second, Jitter: 0.25}, 0.5, []time.Duration{
			875 * time.Millisecond, 875 * time.Millisecond,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newTestBackoff(t, tc.cfg, fixedRand(tc.rnd))
			for i, want := range tc.want {
				if got := b.failAt(t0); got != want {
					t.Errorf("delay %d = %v, want %v", i, got, want)
				}
			}
		})
	}
}

func TestBackoffNeverOverflows(t *testing.T) {
	b := newTestBackoff(t, Backoff{Initial: time.Hour, Max: math.MaxInt64, Factor: 1000, Jitter: -1}, fixedRand(0))
	prev := time.Duration(0)
	for i := range 20 {
		d := b.failAt(time.Unix(0, 0))
		if d <= 0 || d < prev {
			t.Fatalf("delay %d = %v after %v", i, d, prev)
		}
		prev = d
	}
	if prev != math.MaxInt64 {
		t.Errorf("delays settle at %v, want the cap", prev)
	}
}

func TestBackoffResetAfterHealthyPeriod(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newTestBackoff(t, Backoff{Jitter: -1}, fixedRand(0))
	for range 5 {
		b.failAt(t0)
	}
	// Healthy for less than ResetAfter: the sequence goes on.
	b.healthyAt(t0)
	b.healthyAt(t0.Add(time.Minute)) // later calls do not move the start
	if got := b.failAt(t0.Add(119 * time.Second)); got != 25600*time.Millisecond {
		t.Errorf("after 119s healthy: %v, want 25.6s", got)
	}
	// Healthy for ResetAfter: back to Initial.
	b.healthyAt(t0.Add(2 * time.Minute))
	if got := b.failAt(t0.Add(4 * time.Minute)); got != 800*time.Millisecond {
		t.Errorf("after 2m healthy: %v, want 800ms", got)
	}
	// Time passing without a healthy period does not reset.
	b.failAt(t0.Add(5 * time.Minute))
	if got := b.failAt(t0.Add(time.Hour)); got != 3200*time.Millisecond {
		t.Errorf("after an hour of failing: %v, want 3.2s", got)
	}
}

func TestBackoffDefaultsAndValidation(t *testing.T) {
	got, err := Backoff{}.withDefaults()
	want := Backoff{Initial: 800 * time.Millisecond, Max: 30 * time.Second, Factor: 2, Jitter: 0.5, ResetAfter: 2 * time.Minute}
	if err != nil || got != want {
		t.Errorf("defaults = %+v, %v; want %+v", got, err, want)
	}
	if got, _ := (Backoff{Initial: time.Minute}).withDefaults(); got.Max != time.Minute {
		t.Errorf("Max defaults to %v with Initial 1m, want 1m", got.Max)
	}
	for _, b := range []Backoff{
		{Initial: -1}, {Max: -1}, {ResetAfter: -1},
		{Initial: time.Minute, Max: time.Second},
		{Factor: 0.9}, {Jitter: 1.5},
	} {
		if _, err := b.withDefaults(); err == nil || !strings.HasPrefix(err.Error(), "reflector: backoff") {
			t.Errorf("%+v: err = %v, want a validation error", b, err)
		}
	}
}
