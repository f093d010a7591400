package reconcile

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// keySource is a Source fed by the test.
type keySource struct {
	name    string
	mu      sync.Mutex
	keys    []string
	enqueue func(string, Priority)
	synced  atomic.Bool
	stopped atomic.Bool
	started chan struct{} // closed by Start
}

func newKeySource(keys ...string) *keySource {
	s := &keySource{name: "test", keys: keys, started: make(chan struct{})}
	s.synced.Store(true)
	return s
}

func (s *keySource) Name() string { return s.name }

func (s *keySource) Start(enqueue func(string, Priority)) (func(), error) {
	s.mu.Lock()
	s.enqueue = enqueue
	keys := append([]string(nil), s.keys...)
	s.mu.Unlock()
	close(s.started)
	for _, k := range keys {
		enqueue(k, Background)
	}
	return func() { s.stopped.Store(true) }, nil
}

func (s *keySource) HasSynced() bool { return s.synced.Load() }

func (s *keySource) AppendKeys(dst []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(dst, s.keys...)
}

// send enqueues a key as a live change.
func (s *keySource) send(key string, p Priority) {
	s.mu.Lock()
	e := s.enqueue
	s.mu.Unlock()
	e(key, p)
}

// call is one Reconcile call seen by a recorder.
type call struct {
	key string
	at  time.Duration // since the recorder was made
}

// recorder is a Reconciler that records its calls and answers with fn.
type recorder struct {
	start time.Time
	fn    func(ctx context.Context, key string, n int) (Result, error)

	mu    sync.Mutex
	calls []call
	count map[string]int
}

func newRecorder(fn func(ctx context.Context, key string, n int) (Result, error)) *recorder {
	return &recorder{start: time.Now(), fn: fn, count: map[string]int{}}
}

func (r *recorder) Reconcile(ctx context.Context, key string) (Result, error) {
	r.mu.Lock()
	n := r.count[key]
	r.count[key]++
	r.calls = append(r.calls, call{key: key, at: time.Since(r.start)})
	r.mu.Unlock()
	if r.fn == nil {
		return Result{}, nil
	}
	return r.fn(ctx, key, n)
}

func (r *recorder) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

// run starts c.Run in a goroutine and returns a function that cancels it and
// returns its error.
func run[K comparable](t *testing.T, c *Controller[K]) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	return func() error {
		cancel()
		return <-errc
	}
}

// countingMetrics records the Metrics calls.
type countingMetrics struct {
	workers  atomic.Int64
	active   atomic.Int64
	panics   atomic.Int64
	srcPanic atomic.Int64
	outcomes [4]atomic.Int64
	took     atomic.Int64 // the durations ReconcileFinished was given, summed
}

func (m *countingMetrics) Workers(n int)     { m.workers.Store(int64(n)) }
func (m *countingMetrics) ReconcileStarted() { m.active.Add(1) }
func (m *countingMetrics) Panicked()         { m.panics.Add(1) }
func (m *countingMetrics) SourcePanicked()   { m.srcPanic.Add(1) }
func (m *countingMetrics) ReconcileFinished(o Outcome, took time.Duration) {
	m.took.Add(int64(took))
	m.active.Add(-1)
	m.outcomes[o].Add(1)
}
