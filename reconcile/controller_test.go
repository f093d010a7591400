package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"

	"github.com/ctrlkit/ctrlkit/workqueue"
)

var errBoom = errors.New("boom")

func atTimes(calls []call) []time.Duration {
	var out []time.Duration
	for _, c := range calls {
		out = append(out, c.at)
	}
	return out
}

func TestRetryBackoffThenForget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Fails 3 times, succeeds, then (after a live change) fails once more: the
		// last failure must start from the base delay again (success forgot it).
		rec := newRecorder(func(_ context.Context, _ string, n int) (Result, error) {
			if n < 3 || n == 4 {
				return Result{}, errBoom
			}
			return Result{}, nil
		})
		src := newKeySource("a")
		m := &countingMetrics{}
		c := New[string](rec, Config[string]{RateLimiter: workqueue.NewExponential[string](time.Second, time.Hour), Metrics: m})
		if err := c.Watch(src); err != nil {
			t.Fatal(err)
		}
		stop := run(t, c)
		time.Sleep(time.Minute)
		synctest.Wait()
		src.send("a", Live)
		time.Sleep(time.Minute)
		synctest.Wait()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		want := []time.Duration{0, 1 * time.Second, 3 * time.Second, 7 * time.Second, time.Minute, time.Minute + time.Second}
		if diff := cmp.Diff(want, atTimes(rec.snapshot())); diff != "" {
			t.Errorf("call times (-want +got):\n%s", diff)
		}
		if got := m.outcomes[Failed].Load(); got != 4 {
			t.Errorf("errors = %d, want 4", got)
		}
		if got := m.outcomes[Succeeded].Load(); got != 2 {
			t.Errorf("successes = %d, want 2", got)
		}
	})
}

// TestMetricsGetReconcileDurations: a controller with Metrics times its reconciles
// (one without reads no clock for them).
func TestMetricsGetReconcileDurations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder(func(context.Context, string, int) (Result, error) {
			time.Sleep(3 * time.Second)
			return Result{}, nil
		})
		m := &countingMetrics{}
		c := New[string](rec, Config[string]{Metrics: m})
		c.Watch(newKeySource("a", "b"))
		stop := run(t, c)
		time.Sleep(time.Minute)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if got := m.outcomes[Succeeded].Load(); got != 2 {
			t.Fatalf("successes = %d, want 2", got)
		}
		if got := time.Duration(m.took.Load()); got != 6*time.Second {
			t.Errorf("durations reported sum to %v, want 6s", got)
		}
	})
}

func TestRequeueAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder(func(_ context.Context, _ string, n int) (Result, error) {
			if n < 2 {
				return Result{RequeueAfter: 5 * time.Second}, nil
			}
			return Result{RequeueAfter: -time.Second}, nil // negative: no requeue
		})
		c := New[string](rec, Config[string]{})
		c.Watch(newKeySource("a"))
		stop := run(t, c)
		time.Sleep(time.Hour)
		stop()
		want := []time.Duration{0, 5 * time.Second, 10 * time.Second}
		if diff := cmp.Diff(want, atTimes(rec.snapshot())); diff != "" {
			t.Errorf("call times (-want +got):\n%s", diff)
		}
	})
}

func TestTerminalStopsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &countingMetrics{}
		rec := newRecorder(func(context.Context, string, int) (Result, error) {
			return Result{RequeueAfter: time.Second}, Terminal(errBoom)
		})
		c := New[string](rec, Config[string]{Metrics: m})
		src := newKeySource("a")
		c.Watch(src)
		stop := run(t, c)
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(rec.snapshot()); n != 1 {
			t.Fatalf("terminal error: %d calls in an hour, want 1", n)
		}
		// A new change of the key is reconciled again.
		src.send("a", Live)
		synctest.Wait()
		stop()
		if n := len(rec.snapshot()); n != 2 {
			t.Errorf("after a change: %d calls, want 2", n)
		}
		if got := m.outcomes[FailedTerminal].Load(); got != 2 {
			t.Errorf("terminal outcomes = %d, want 2", got)
		}
	})
}

func TestTerminalError(t *testing.T) {
	err := Terminal(fmt.Errorf("wrapped: %w", errBoom))
	if !errors.Is(err, ErrTerminal) || !errors.Is(err, errBoom) {
		t.Errorf("Terminal(err) = %v: Is(ErrTerminal) %v, Is(cause) %v", err, errors.Is(err, ErrTerminal), errors.Is(err, errBoom))
	}
	if wrapped := fmt.Errorf("ctx: %w", err); !errors.Is(wrapped, ErrTerminal) {
		t.Errorf("a wrapped terminal error does not match ErrTerminal")
	}
	if errors.Is(errBoom, ErrTerminal) {
		t.Errorf("a plain error matches ErrTerminal")
	}
	if !errors.Is(Terminal(nil), ErrTerminal) {
		t.Errorf("Terminal(nil) does not match ErrTerminal")
	}
}

func TestPanicRecovered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var logs []string
		log := funcr.New(func(prefix, args string) {
			mu.Lock()
			logs = append(logs, args)
			mu.Unlock()
		}, funcr.Options{})
		m := &countingMetrics{}
		rec := newRecorder(func(_ context.Context, _ string, n int) (Result, error) {
			if n < 2 {
				panic("kaboom")
			}
			return Result{}, nil
		})
		c := New[string](rec, Config[string]{
			Name: "pan", Logger: log, Metrics: m,
			RateLimiter: workqueue.NewExponential[string](time.Second, time.Hour),
		})
		c.Watch(newKeySource("k1"))
		stop := run(t, c)
		time.Sleep(time.Minute)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		want := []time.Duration{0, time.Second, 3 * time.Second}
		if diff := cmp.Diff(want, atTimes(rec.snapshot())); diff != "" {
			t.Errorf("calls after panics (-want +got):\n%s", diff)
		}
		if got := m.panics.Load(); got != 2 {
			t.Errorf("panics = %d, want 2", got)
		}
		mu.Lock()
		defer mu.Unlock()
		found := 0
		for _, l := range logs {
			if strings.Contains(l, "panicked") && strings.Contains(l, `"key"="k1"`) &&
				strings.Contains(l, `"controller"="pan"`) && strings.Contains(l, "kaboom") {
				found++
			}
		}
		if found != 2 {
			t.Errorf("%d panic logs with key and controller, want 2; logs:\n%s", found, strings.Join(logs, "\n"))
		}
	})
}

func TestReconcileTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var errs []error
		var mu sync.Mutex
		rec := newRecorder(func(ctx context.Context, _ string, n int) (Result, error) {
			if n > 0 {
				return Result{}, nil
			}
			<-ctx.Done() // a reconciler stuck until its deadline
			mu.Lock()
			errs = append(errs, ctx.Err())
			mu.Unlock()
			return Result{}, ctx.Err()
		})
		c := New[string](rec, Config[string]{
			ReconcileTimeout: 3 * time.Second,
			RateLimiter:      workqueue.NewExponential[string](time.Second, time.Hour),
		})
		c.Watch(newKeySource("a"))
		stop := run(t, c)
		time.Sleep(time.Minute)
		stop()
		// Timed out at 3s, retried after 1s of backoff.
		want := []time.Duration{0, 4 * time.Second}
		if diff := cmp.Diff(want, atTimes(rec.snapshot())); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if len(errs) != 1 || !errors.Is(errs[0], context.DeadlineExceeded) {
			t.Errorf("reconcile context errors = %v, want [deadline exceeded]", errs)
		}
	})
}

func TestLoggerInContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var logs []string
		log := funcr.New(func(_, args string) {
			mu.Lock()
			logs = append(logs, args)
			mu.Unlock()
		}, funcr.Options{})
		rec := newRecorder(func(ctx context.Context, _ string, _ int) (Result, error) {
			logr.FromContextOrDiscard(ctx).Info("hello")
			return Result{}, nil
		})
		c := New[string](rec, Config[string]{Name: "ctl", Logger: log})
		c.Watch(newKeySource("ns/x"))
		stop := run(t, c)
		synctest.Wait()
		stop()
		mu.Lock()
		defer mu.Unlock()
		want := `"level"=0 "msg"="hello" "controller"="ctl" "key"="ns/x"`
		for _, l := range logs {
			if l == want {
				return
			}
		}
		t.Errorf("no log %s; logs:\n%s", want, strings.Join(logs, "\n"))
	})
}

func TestDrainWaitsForInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var sawCancel bool
		rec := newRecorder(func(ctx context.Context, key string, _ int) (Result, error) {
			if key == "slow" {
				<-release
				sawCancel = ctx.Err() != nil
			}
			return Result{}, nil
		})
		src := newKeySource("slow")
		c := New[string](rec, Config[string]{Workers: 1})
		c.Watch(src)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- c.Run(ctx) }()
		synctest.Wait() // "slow" is in flight
		src.send("queued", Live)
		cancel()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("Run returned while a reconcile was in flight")
		default:
		}
		time.Sleep(time.Second)
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if sawCancel {
			t.Error("in-flight reconcile's context was cancelled before the drain timeout")
		}
		if got := rec.snapshot(); len(got) != 1 || got[0].key != "slow" {
			t.Errorf("calls = %v, want only the in-flight one (no new work after cancel)", got)
		}
		if !src.stopped.Load() {
			t.Error("source not stopped")
		}
	})
}

func TestDrainTimeoutCancelsReconcile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cancelledAt time.Duration
		start := time.Now()
		rec := newRecorder(func(ctx context.Context, _ string, _ int) (Result, error) {
			<-ctx.Done()
			cancelledAt = time.Since(start)
			return Result{}, ctx.Err()
		})
		c := New[string](rec, Config[string]{DrainTimeout: 7 * time.Second})
		c.Watch(newKeySource("a"))
		stop := run(t, c)
		time.Sleep(time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if cancelledAt != 8*time.Second {
			t.Errorf("in-flight reconcile cancelled at %v, want 8s (1s + drain timeout 7s)", cancelledAt)
		}
	})
}

func TestSyncTimeoutNamesSource(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := newKeySource()
		src.name = "informer pods"
		src.synced.Store(false)
		rec := newRecorder(nil)
		c := New[string](rec, Config[string]{Name: "ctl", SyncTimeout: time.Minute})
		c.Watch(newKeySource("a"))
		c.Watch(src)
		start := time.Now()
		err := c.Run(context.Background())
		var se *SyncError
		if !errors.As(err, &se) || se.Source != "informer pods" || se.Controller != "ctl" {
			t.Fatalf("Run = %v, want a *SyncError naming the source", err)
		}
		if !strings.Contains(err.Error(), "informer pods") {
			t.Errorf("error %q does not name the source", err)
		}
		if took := time.Since(start); took != time.Minute {
			t.Errorf("gave up after %v, want 1m", took)
		}
		if n := len(rec.snapshot()); n != 0 {
			t.Errorf("%d reconciles before sync", n)
		}
		if !src.stopped.Load() {
			t.Error("source not stopped")
		}
	})
}

// TestQuickSyncStartsAtOnce: a source that syncs a moment after Start (a
// handler replaying a small cache) is reconciled that moment, not at the next
// tick of a coarse poll; and one that takes long is still waited for.
func TestQuickSyncStartsAtOnce(t *testing.T) {
	for _, syncAfter := range []time.Duration{200 * time.Microsecond, time.Millisecond, 3 * time.Second} {
		synctest.Test(t, func(t *testing.T) {
			src := newKeySource("a")
			src.synced.Store(false)
			rec := newRecorder(nil)
			c := New[string](rec, Config[string]{})
			c.Watch(src)
			stop := run(t, c)
			<-src.started
			time.AfterFunc(syncAfter, func() { src.synced.Store(true) })
			time.Sleep(syncAfter)
			synctest.Wait()
			// Polled at twice the time it has waited at most: a fixed 10 ms
			// period gave 10 ms after a 200 µs sync.
			limit := 2 * syncAfter
			if limit > syncAfter+syncPollMax {
				limit = syncAfter + syncPollMax
			}
			time.Sleep(limit - syncAfter)
			synctest.Wait()
			calls := rec.snapshot()
			if len(calls) != 1 {
				t.Errorf("synced after %v: %d reconciles %v later, want 1", syncAfter, len(calls), limit)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRunOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New[string](newRecorder(nil), Config[string]{})
		stop := run(t, c)
		synctest.Wait()
		if err := c.Run(context.Background()); !errors.Is(err, ErrAlreadyStarted) {
			t.Errorf("second Run = %v, want ErrAlreadyStarted", err)
		}
		if err := c.Watch(newKeySource()); !errors.Is(err, ErrAlreadyStarted) {
			t.Errorf("Watch after Run = %v, want ErrAlreadyStarted", err)
		}
		if err := c.Watch(nil); !errors.Is(err, ErrNilSource) {
			t.Errorf("Watch(nil) = %v, want ErrNilSource", err)
		}
		stop()
	})
}

func TestLiveOvertakesBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		keys := make([]string, 1000)
		for i := range keys {
			keys[i] = fmt.Sprintf("bg-%04d", i)
		}
		gate := make(chan struct{})
		rec := newRecorder(func(_ context.Context, key string, _ int) (Result, error) {
			if key == keys[0] {
				<-gate
			}
			return Result{}, nil
		})
		src := newKeySource(keys...) // initial list: Background
		c := New[string](rec, Config[string]{Workers: 1})
		c.Watch(src)
		stop := run(t, c)
		synctest.Wait() // the worker holds keys[0]; 999 wait
		src.send("live", Live)
		close(gate)
		synctest.Wait()
		stop()
		calls := rec.snapshot()
		if len(calls) != 1001 {
			t.Fatalf("%d calls, want 1001", len(calls))
		}
		if calls[1].key != "live" {
			t.Errorf("second call was %q, want the live change to overtake 999 background keys", calls[1].key)
		}
	})
}

func TestResyncSpreadEvenly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 10000
		const period = 10 * time.Minute
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%05d", i)
		}
		rec := newRecorder(nil)
		c := New[string](rec, Config[string]{Workers: 4, ResyncPeriod: period})
		c.Watch(newKeySource(keys...))
		stop := run(t, c)
		time.Sleep(3 * period)
		synctest.Wait()
		stop()
		calls := rec.snapshot()
		// Initial list at 0, then two resync periods.
		for _, p := range []time.Duration{period, 2 * period} {
			perSecond := make([]int, int(period/time.Second))
			seen := map[string]bool{}
			for _, c := range calls {
				if c.at >= p && c.at < p+period {
					perSecond[int((c.at-p)/time.Second)]++
					seen[c.key] = true
				}
			}
			if len(seen) != n {
				t.Errorf("period at %v: %d distinct keys resynced, want %d", p, len(seen), n)
			}
			avg := float64(n) / period.Seconds()
			for s, cnt := range perSecond {
				if float64(cnt) > 3*avg {
					t.Errorf("period at %v, second %d: %d keys, more than 3× the average %.1f", p, s, cnt, avg)
				}
			}
			// Every 10-second window gets some keys: no long gap either.
			for s := 0; s+10 <= len(perSecond); s += 10 {
				sum := 0
				for _, v := range perSecond[s : s+10] {
					sum += v
				}
				if sum == 0 {
					t.Errorf("period at %v: no key in seconds %d-%d", p, s, s+10)
				}
			}
		}
	})
}

func TestSpreadIsStratified(t *testing.T) {
	due := spread(4, 4*time.Second, func() float64 { return 0.5 })
	want := []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond, 2500 * time.Millisecond, 3500 * time.Millisecond}
	if diff := cmp.Diff(want, due); diff != "" {
		t.Errorf("spread (-want +got):\n%s", diff)
	}
}

// TestNoConcurrentReconcileOfAKey stresses the workers with repeated adds of few
// keys: no key may be reconciled by two workers at once (run with -race).
func TestNoConcurrentReconcileOfAKey(t *testing.T) {
	var mu sync.Mutex
	active := map[string]bool{}
	var overlaps, calls int
	rec := Func[string](func(ctx context.Context, key string) (Result, error) {
		mu.Lock()
		if active[key] {
			overlaps++
		}
		active[key] = true
		calls++
		mu.Unlock()
		time.Sleep(10 * time.Microsecond) // widen the window for an overlap
		mu.Lock()
		active[key] = false
		mu.Unlock()
		if len(key)%2 == 0 {
			return Result{}, errBoom
		}
		return Result{}, nil
	})
	src := newKeySource()
	c := New[string](rec, Config[string]{
		Workers:     8,
		RateLimiter: workqueue.NewExponential[string](time.Microsecond, time.Millisecond),
	})
	c.Watch(src)
	stop := run(t, c)
	<-src.started
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 20000 {
				src.send(fmt.Sprintf("key-%d", (i*7+g)%16), Priority(i%2-1))
			}
		})
	}
	wg.Wait()
	time.Sleep(50 * time.Millisecond) // let the workers run on the last adds
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if overlaps != 0 {
		t.Errorf("%d overlapping reconciles of one key", overlaps)
	}
	if calls < 16 {
		t.Errorf("only %d reconciles", calls)
	}
}

func TestResyncKeysDistinct(t *testing.T) {
	a, b := newKeySource("x", "y", "x"), newKeySource("y", "z")
	got := resyncKeys(nil, []Source[string]{a, b})
	slices.Sort(got)
	if diff := cmp.Diff([]string{"x", "y", "z"}, got); diff != "" {
		t.Errorf("resync keys (-want +got):\n%s", diff)
	}
}
