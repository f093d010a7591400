package reconcile

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/reflector"
)

// DefaultCacheWaitTimeout is the default of Config.CacheWaitTimeout.
const DefaultCacheWaitTimeout = 10 * time.Second

// CacheWaitMetrics may be implemented by a Metrics to count read-your-writes
// waits (see TrackWrites); package prommetrics does.
type CacheWaitMetrics interface {
	// StaleSkipped is called when a key is taken from the queue but not
	// reconciled, because a source's cache has not yet seen a write that the
	// key's previous reconcile made.
	StaleSkipped()
	// CacheWaited is called when such a key may be reconciled again, with how
	// long it waited since the reconcile that wrote returned, and whether the
	// wait ended at Config.CacheWaitTimeout rather than with the cache.
	CacheWaited(d time.Duration, timedOut bool)
}

// TrackWrites returns a copy of cfg whose clients report the writes they make
// from inside a Reconcile to its controller: build the reconciler's clients
// from it (package manager's clients already are), and the controller reconciles
// a key again only once the caches of its sources that hold what the key's
// last reconcile wrote have seen those writes (read-your-writes). Requests made
// outside a Reconcile's context pass through untouched. A write is a create,
// update, patch or delete answered with an object: its resource and namespace
// come from the request's path and its resourceVersion from the answer, JSON
// or protobuf, which is read once more in memory.
func TrackWrites(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return writeTracker{rt: rt} })
	return cfg
}

// write is one write of a reconcile: a resourceVersion of an object of resource
// gr in namespace ns.
type write struct {
	gr schema.GroupResource
	ns string
	rv uint64
}

// writeSlot collects the writes of the reconcile that a worker runs; one per
// worker, found by the transport in the request's context. begin and end, once
// per reconcile, cost one atomic load each when the reconcile wrote nothing:
// the hot path stores nothing. A write that a goroutine of an earlier reconcile
// makes after that reconcile returned is dropped by the next begin; one that
// lands while the next reconcile runs counts as that reconcile's, which can only
// make its key wait, boundedly, for a cache that is behind a real write.
type writeSlot struct {
	n atomic.Int32 // len(writes)

	mu     sync.Mutex
	writes []write
}

type slotKey struct{}

func (s *writeSlot) begin() {
	if s.n.Load() != 0 { // left by a write made between two reconciles
		s.mu.Lock()
		s.writes = s.writes[:0]
		s.n.Store(0)
		s.mu.Unlock()
	}
}

// end returns the writes of the reconcile that ran since begin; the slice is
// the slot's, valid until the next begin.
func (s *writeSlot) end() []write {
	if s.n.Load() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.writes
	s.writes = s.writes[:0]
	s.n.Store(0)
	return out
}

func (s *writeSlot) record(w write) {
	s.mu.Lock()
	s.writes = append(s.writes, w)
	s.n.Add(1)
	s.mu.Unlock()
}

// TrackWritesTo is TrackWrites that also records every write the clients
// make, inside a Reconcile or not, in log.
func TrackWritesTo(cfg *rest.Config, log *WriteLog) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return writeTracker{rt, log} })
	return cfg
}

// WriteLog records the newest resourceVersion written per resource and
// namespace through the clients of a rest.Config from TrackWritesTo. Package
// manager publishes it, with its caches' progress, when it hands leadership
// over. The zero WriteLog is ready to use; it is safe for concurrent use.
type WriteLog struct {
	mu     sync.Mutex
	newest map[writeScope]uint64
}

type writeScope struct {
	gr schema.GroupResource
	ns string
}

func (l *WriteLog) record(w write) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.newest == nil {
		l.newest = map[writeScope]uint64{}
	}
	k := writeScope{w.gr, w.ns}
	l.newest[k] = max(l.newest[k], w.rv)
}

// Newest returns the newest resourceVersion written to an object of a
// resource and namespace that covers accepts (informer.Scope.Covers, say),
// and false if there was none.
func (l *WriteLog) Newest(covers func(gr schema.GroupResource, ns string) bool) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var rv uint64
	for k, v := range l.newest {
		if covers(k.gr, k.ns) {
			rv = max(rv, v)
		}
	}
	if rv == 0 {
		return "", false
	}
	return strconv.FormatUint(rv, 10), true
}

type writeTracker struct {
	rt  http.RoundTripper
	log *WriteLog // nil unless TrackWritesTo
}

func (t writeTracker) RoundTrip(req *http.Request) (*http.Response, error) {
	slot, _ := req.Context().Value(slotKey{}).(*writeSlot)
	switch {
	case slot == nil && t.log == nil:
		return t.rt.RoundTrip(req)
	case req.Method != http.MethodPost && req.Method != http.MethodPut && req.Method != http.MethodPatch && req.Method != http.MethodDelete:
		return t.rt.RoundTrip(req)
	}
	resp, err := t.rt.RoundTrip(req)
	if err != nil || resp.StatusCode/100 != 2 || resp.Body == nil {
		return resp, err
	}
	gr, ns, ok := parseAPIPath(req.URL.Path)
	if !ok {
		return resp, nil
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if rerr != nil {
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{rerr}))
		return resp, nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	k, ok := reflector.ReadObjectKey(body)
	if !ok || k.Kind == "Status" {
		return resp, nil
	}
	rv, perr := strconv.ParseUint(k.ResourceVersion, 10, 64)
	if perr != nil {
		return resp, nil
	}
	if k.Namespace != "" {
		ns = k.Namespace
	}
	w := write{gr: gr, ns: ns, rv: rv}
	if slot != nil {
		slot.record(w)
	}
	if t.log != nil {
		t.log.record(w)
	}
	return resp, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// parseAPIPath finds the group, resource and namespace of a request path of the
// API: /api/v1/[namespaces/NS/]RESOURCE[/NAME[/SUB]] or
// /apis/GROUP/VERSION/[namespaces/NS/]RESOURCE[/NAME[/SUB]]. The namespaces
// resource itself is /api/v1/namespaces[/NAME[/SUB]].
func parseAPIPath(p string) (gr schema.GroupResource, ns string, ok bool) {
	segs := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case len(segs) >= 3 && segs[0] == "api":
		segs = segs[2:]
	case len(segs) >= 4 && segs[0] == "apis":
		gr.Group = segs[1]
		segs = segs[3:]
	default:
		return gr, "", false
	}
	if len(segs) >= 3 && segs[0] == "namespaces" {
		ns, segs = segs[1], segs[2:]
	}
	if segs[0] == "" {
		return gr, "", false
	}
	gr.Resource = segs[0]
	return gr, ns, true
}

// cacheSource is the part of a source read-your-writes needs: its cache's
// scope and progress (FromInformer's sources).
type cacheSource struct {
	cache cacheHost
	w     *rvWaiter
}

// need is what a key waits for: the cache of source src at rv or later.
type need struct {
	src      int
	rv       uint64
	since    time.Time // when the reconcile that wrote returned
	deadline time.Time
}

// rywGate holds the keys whose last reconcile wrote what their sources'
// caches have not shown yet.
type rywGate[K comparable] struct {
	timeout time.Duration
	sources []cacheSource // indexed like need.src; cache nil for sources without one
	metrics CacheWaitMetrics

	waiting atomic.Int64 // len(pending), read without mu so that admit costs nothing when no key waits

	mu       sync.Mutex
	pending  map[K][]need
	requires int // calls of require, to sweep now and then
}

// sweepEvery is how many requires pass between two sweeps of the keys whose
// waits are over but which were not taken from the queue again (they leave
// pending only when admitted).
const sweepEvery = 1024

// sweepLocked forgets the keys whose waits are all over. Requires g.mu held.
func (g *rywGate[K]) sweepLocked(now time.Time) {
	for key, needs := range g.pending {
		over := true
		for _, n := range needs {
			if appliedRV(g.sources[n.src].cache) < n.rv && now.Before(n.deadline) {
				over = false
				break
			}
		}
		if over {
			delete(g.pending, key)
			g.waiting.Add(-1)
		}
	}
}

func newRYWGate[K comparable](timeout time.Duration, sources []Source[K], m Metrics) *rywGate[K] {
	g := &rywGate[K]{timeout: timeout, pending: map[K][]need{}}
	g.metrics, _ = m.(CacheWaitMetrics)
	usable := false
	for _, src := range sources {
		var cs cacheSource
		if s, ok := src.(interface{ cache() cacheHost }); ok {
			if c := s.cache(); c != nil && c.scope().Resource.Resource != "" {
				cs = cacheSource{cache: c, w: &rvWaiter{cache: c, wake: make(chan struct{}, 1)}}
				usable = true
			}
		}
		g.sources = append(g.sources, cs)
	}
	if !usable {
		return nil
	}
	return g
}

// appliedRV is the resourceVersion a source's cache has reached, 0 if unknown.
func appliedRV(c cacheHost) uint64 {
	rv, _ := strconv.ParseUint(c.applied(), 10, 64)
	return rv
}

// require records that key must not run again before the caches that hold
// writes have seen them.
func (g *rywGate[K]) require(key K, writes []write, now time.Time) {
	var add []need
	for _, w := range writes {
		for i, s := range g.sources {
			if s.cache == nil || !s.cache.scope().Covers(w.gr, w.ns) {
				continue
			}
			if appliedRV(s.cache) >= w.rv {
				continue // seen already
			}
			j := slices.IndexFunc(add, func(n need) bool { return n.src == i })
			if j < 0 {
				add = append(add, need{src: i, rv: w.rv, since: now, deadline: now.Add(g.timeout)})
			} else if add[j].rv < w.rv {
				add[j].rv = w.rv
			}
		}
	}
	if len(add) == 0 {
		return
	}
	g.mu.Lock()
	if _, ok := g.pending[key]; !ok {
		g.waiting.Add(1)
	}
	g.pending[key] = append(g.pending[key], add...)
	if g.requires++; g.requires%sweepEvery == 0 {
		g.sweepLocked(now)
	}
	g.mu.Unlock()
}

// admit reports whether key may be reconciled now. If not, it tells the
// waiters of the caches it waits for to enqueue it again when they have
// caught up (or its wait times out).
func (g *rywGate[K]) admit(key K) bool {
	if g.waiting.Load() == 0 {
		return true // no clock read either: the common case costs one load
	}
	now := time.Now()
	g.mu.Lock()
	needs, ok := g.pending[key]
	if !ok {
		g.mu.Unlock()
		return true
	}
	left := needs[:0]
	var waited time.Duration
	timedOut := false
	for _, n := range needs {
		switch {
		case appliedRV(g.sources[n.src].cache) >= n.rv:
			waited = max(waited, now.Sub(n.since))
		case !now.Before(n.deadline):
			waited, timedOut = max(waited, now.Sub(n.since)), true
		default:
			left = append(left, n)
		}
	}
	if len(left) == 0 {
		delete(g.pending, key)
		g.waiting.Add(-1)
		g.mu.Unlock()
		if g.metrics != nil {
			g.metrics.CacheWaited(waited, timedOut)
		}
		return true
	}
	g.pending[key] = left
	g.mu.Unlock()
	for _, n := range left {
		g.sources[n.src].w.add(key, n.rv, n.deadline)
	}
	if g.metrics != nil {
		g.metrics.StaleSkipped()
	}
	return false
}

// waiters returns the functions to run while the controller works: one per
// source with a cache, each enqueuing the keys its cache has caught up for.
func (g *rywGate[K]) waiters(enqueue func(K)) []func(stop context.Context) {
	var out []func(context.Context)
	for _, s := range g.sources {
		if s.w != nil {
			w := s.w
			out = append(out, func(stop context.Context) { w.run(stop, func(k any) { enqueue(k.(K)) }) })
		}
	}
	return out
}

// rvWaiter wakes the keys waiting for one source's cache: it waits (through
// the informer's WaitForResourceVersion, which is woken by the cache itself,
// never polled) for the smallest resourceVersion a key waits for, or the
// earliest deadline, then hands every key whose wait is over to enqueue.
type rvWaiter struct {
	cache cacheHost
	wake  chan struct{} // capacity 1: an item was added

	mu     sync.Mutex
	items  []waitItem
	cancel context.CancelFunc // of the wait in progress, nil if none
	target uint64             // the resourceVersion it waits for
	until  time.Time          // its deadline
}

type waitItem struct {
	key      any
	rv       uint64
	deadline time.Time
}

func (w *rvWaiter) add(key any, rv uint64, deadline time.Time) {
	w.mu.Lock()
	w.items = append(w.items, waitItem{key: key, rv: rv, deadline: deadline})
	if w.cancel != nil && (rv < w.target || deadline.Before(w.until)) {
		w.cancel() // wait for the new item first
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *rvWaiter) run(stop context.Context, enqueue func(any)) {
	var ready []any
	for stop.Err() == nil {
		w.mu.Lock()
		if len(w.items) == 0 {
			w.mu.Unlock()
			select {
			case <-w.wake:
			case <-stop.Done():
			}
			continue
		}
		target, until := w.items[0].rv, w.items[0].deadline
		for _, it := range w.items[1:] {
			target = min(target, it.rv)
			if it.deadline.Before(until) {
				until = it.deadline
			}
		}
		ctx, cancel := context.WithDeadline(stop, until)
		w.cancel, w.target, w.until = cancel, target, until
		w.mu.Unlock()

		// Ends at target, the deadline, stop or an add; if the cache cannot
		// wait (its informer stopped), the keys wait out their deadline.
		if err := w.cache.waitFor(ctx, strconv.FormatUint(target, 10)); err != nil && ctx.Err() == nil {
			<-ctx.Done()
		}
		cancel()

		now, applied := time.Now(), appliedRV(w.cache)
		w.mu.Lock()
		w.cancel = nil
		ready = ready[:0]
		w.items = slices.DeleteFunc(w.items, func(it waitItem) bool {
			if it.rv <= applied || !now.Before(it.deadline) {
				ready = append(ready, it.key)
				return true
			}
			return false
		})
		w.mu.Unlock()
		for _, k := range ready {
			enqueue(k)
		}
	}
}
