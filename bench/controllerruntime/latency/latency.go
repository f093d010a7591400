// Package latency measures, on a real API server, how long a change takes to
// reach a controller's reconcile and how many writes per second a controller
// keeps up with: ctrlkit's manager and controller against controller-runtime's,
// with the same trivial reconcile.
//
// A Writer updates random ConfigMaps of one namespace at a paced rate, each write
// a merge patch that stamps the send time into the object (so every write
// changes it), and records for every write its send time, the time the server
// answered, and the resourceVersion it produced. The controller under test
// watches the ConfigMaps and reconciles each key by reading it from its cache
// and handing its resourceVersion to a Recorder; it writes nothing. Analyze then
// finds, for every write, the first reconcile of its key that saw that
// resourceVersion or a newer one: a change that several writes made before the
// controller looked is reconciled once, and each of those writes counts the time
// until that reconcile.
//
// The measurement itself is a benchmark with build tag e2e against testenv's
// kube-apiserver; see the README of bench/controllerruntime.
package latency

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// epoch is the origin of every time this package records: nanoseconds on the
// monotonic clock since the process started using the package.
var epoch = time.Now()

// Now returns the monotonic time since epoch, the clock of Write and Observation.
func Now() time.Duration { return time.Since(epoch) }

// KeyName is the name of ConfigMap number i; KeyIndex inverts it.
func KeyName(i int) string { return fmt.Sprintf("cm-%05d", i) }

// KeyIndex returns i for the name KeyName(i), or -1 for any other name.
func KeyIndex(name string) int {
	if len(name) != 8 || name[:3] != "cm-" {
		return -1
	}
	i, err := strconv.Atoi(name[3:])
	if err != nil || i < 0 {
		return -1
	}
	return i
}

// Observation is one reconcile: the key, the resourceVersion its cache showed,
// and when.
type Observation struct {
	Key int32
	RV  int64
	At  time.Duration
}

// Recorder collects the reconciles of one run. Observe is goroutine-safe and
// costs a parse of the resourceVersion, a clock read, one short critical
// section and one atomic maximum; it is the whole body of the reconcile under
// test, on both sides.
type Recorder struct {
	mu  sync.Mutex
	obs []Observation // requires mu held

	arrMu    sync.Mutex
	arrivals []Observation // requires arrMu held

	seen     []atomic.Int64 // by key: the highest resourceVersion reconciled, 0 for none
	distinct atomic.Int64   // keys reconciled at least once
}

// NewRecorder returns a Recorder for keys KeyName(0) … KeyName(keys-1).
func NewRecorder(keys int) *Recorder {
	return &Recorder{seen: make([]atomic.Int64, keys), obs: make([]Observation, 0, 1<<16)}
}

// Observe records a reconcile of name that saw resourceVersion rv. Names outside
// the Recorder's keys and unparsable resourceVersions are ignored.
func (r *Recorder) Observe(name, rv string) {
	k := KeyIndex(name)
	v, err := strconv.ParseInt(rv, 10, 64)
	if k < 0 || k >= len(r.seen) || err != nil {
		return
	}
	at := Now()
	r.mu.Lock()
	r.obs = append(r.obs, Observation{Key: int32(k), RV: v, At: at})
	r.mu.Unlock()
	s := &r.seen[k]
	for {
		old := s.Load()
		if v <= old {
			return
		}
		if s.CompareAndSwap(old, v) {
			if old == 0 {
				r.distinct.Add(1)
			}
			return
		}
	}
}

// Arrive records that an update event of name carrying resourceVersion rv
// reached a handler of the controller's informer. Both sides call it from an
// extra handler of their informer, so that Analyze can tell the time the watch
// took from the time the controller took.
func (r *Recorder) Arrive(name, rv string) {
	k := KeyIndex(name)
	v, err := strconv.ParseInt(rv, 10, 64)
	if k < 0 || k >= len(r.seen) || err != nil {
		return
	}
	at := Now()
	r.arrMu.Lock()
	r.arrivals = append(r.arrivals, Observation{Key: int32(k), RV: v, At: at})
	r.arrMu.Unlock()
}

// Arrivals returns a copy of the arrivals recorded so far.
func (r *Recorder) Arrivals() []Observation {
	r.arrMu.Lock()
	defer r.arrMu.Unlock()
	return slices.Clone(r.arrivals)
}

// Distinct returns how many keys have been reconciled at least once.
func (r *Recorder) Distinct() int { return int(r.distinct.Load()) }

// Covers reports whether, for every key, a reconcile has seen at least the
// resourceVersion last[key] (0 means nothing to see).
func (r *Recorder) Covers(last []int64) bool {
	for k, v := range last {
		if v > 0 && r.seen[k].Load() < v {
			return false
		}
	}
	return true
}

// Observations returns a copy of what was recorded so far.
func (r *Recorder) Observations() []Observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.obs)
}

// Write is one successful update: the key, the resourceVersion the server gave
// it, when the request was sent and when its answer arrived.
type Write struct {
	Key       int32
	RV        int64
	Send, Ack time.Duration
}

// Writer updates random ConfigMaps KeyName(0) … KeyName(Keys-1) of Namespace at
// Rate writes per second. The zero value is not usable.
type Writer struct {
	// Clients send the writes, round-robin among the workers; each should have
	// its own connection and a client-side rate limit above Rate.
	Clients   []kubernetes.Interface
	Namespace string
	Keys      int
	Rate      float64
	// Workers is how many writes may be in flight at once. A write that is due
	// while all are busy is skipped (counted, not sent later), so the achieved
	// rate shows what the server and the process sustained.
	Workers int
	Seed    uint64
}

// WriterStats counts what Run did besides the successful writes.
type WriterStats struct {
	Due, Skipped, Errors int
	FirstErr             error
}

// Run writes for d and returns every successful write, in no particular order,
// once all writes it sent have been answered.
func (w *Writer) Run(ctx context.Context, d time.Duration) ([]Write, WriterStats, error) {
	if len(w.Clients) == 0 || w.Keys <= 0 || w.Rate <= 0 || w.Workers <= 0 {
		return nil, WriterStats{}, errors.New("latency: writer: clients, keys, rate and workers are required")
	}
	tokens := make(chan struct{}, w.Workers)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		all      []Write
		errCount int
		firstErr error
	)
	for i := range w.Workers {
		wg.Go(func() {
			c := w.Clients[i%len(w.Clients)].CoreV1().ConfigMaps(w.Namespace)
			rng := rand.New(rand.NewPCG(w.Seed, uint64(i)))
			var mine []Write
			var errs int
			var err1 error
			body := make([]byte, 0, 64)
			for range tokens {
				k := rng.IntN(w.Keys)
				send := Now()
				body = append(body[:0], `{"data":{"t":"`...)
				body = strconv.AppendInt(body, int64(send), 10)
				body = append(body, `"}}`...)
				cm, err := c.Patch(ctx, KeyName(k), types.MergePatchType, body, metav1.PatchOptions{})
				ack := Now()
				if err != nil {
					errs++
					if err1 == nil {
						err1 = err
					}
					continue
				}
				rv, err := strconv.ParseInt(cm.ResourceVersion, 10, 64)
				if err != nil {
					errs++
					continue
				}
				mine = append(mine, Write{Key: int32(k), RV: rv, Send: send, Ack: ack})
			}
			mu.Lock()
			all = append(all, mine...)
			errCount += errs
			if firstErr == nil {
				firstErr = err1
			}
			mu.Unlock()
		})
	}
	var st WriterStats
	period := time.Duration(float64(time.Second) / w.Rate)
	tick := time.NewTicker(time.Millisecond)
	start := time.Now()
	end, next := start.Add(d), start
pace:
	for next.Before(end) {
		select {
		case <-ctx.Done():
			break pace
		case now := <-tick.C:
			for !next.After(now) && next.Before(end) {
				st.Due++
				select {
				case tokens <- struct{}{}:
				default:
					st.Skipped++
				}
				next = next.Add(period)
			}
		}
	}
	tick.Stop()
	close(tokens)
	wg.Wait()
	st.Errors, st.FirstErr = errCount, firstErr
	return all, st, ctx.Err()
}

// LastRVs returns, by key, the highest resourceVersion of writes (0 for a key
// never written).
func LastRVs(writes []Write, keys int) []int64 {
	last := make([]int64, keys)
	for _, w := range writes {
		last[w.Key] = max(last[w.Key], w.RV)
	}
	return last
}

// Result is what Analyze finds for one run.
type Result struct {
	// Window is the interval the writes counted were sent in.
	Window time.Duration
	// Writes is how many successful writes were sent in the window; WriteRate
	// is Writes per second of the window.
	Writes    int
	WriteRate float64
	// Reconciles in the window, per second.
	ReconcileRate float64
	// Latency percentiles over the writes of the window, from the write's send
	// to the first reconcile of its key that saw it or a newer version. A write
	// never covered counts as infinitely late.
	P50, P99, Max time.Duration
	// Handler percentiles: from the arrival of a write's own watch event at
	// an informer handler (see Recorder.Arrive) to the reconcile that covered
	// it; the part of the latency the controller, not the server, adds. Writes
	// whose event was not seen (a relist) are left out.
	HandlerP50, HandlerP99 time.Duration
	// Event percentiles: from a write's send to the arrival of its watch event
	// at the informer handler; the server's and the watch's part, plus the
	// informer's own decoding and storing before its handlers run.
	EventP50, EventP99 time.Duration
	// WriteP50 is the median time the server took to answer a write of the
	// window (Ack − Send): part of every latency above, on both sides alike.
	WriteP50 time.Duration
	// Uncovered counts the writes of the window no reconcile covered.
	Uncovered int
	// Lag is the time from the send of the last write of the run to the
	// reconcile that covered the last write of every key; CaughtUp is false if
	// some key's last write was never covered (then Lag is until the last
	// observation).
	Lag      time.Duration
	CaughtUp bool
}

// Forever stands for the latency of a write no reconcile covered.
const Forever = time.Duration(1<<63 - 1)

// Analyze matches writes with the reconciles (obs) and event arrivals (arr) of
// a run. Writes sent in [from, to) make the window; all writes and observations
// are used to find what covers them.
func Analyze(writes []Write, obs, arr []Observation, keys int, from, to time.Duration) Result {
	res := Result{Window: to - from, CaughtUp: true}
	byKeyW := make([][]Write, keys)
	var lastSend time.Duration
	for _, w := range writes {
		byKeyW[w.Key] = append(byKeyW[w.Key], w)
		lastSend = max(lastSend, w.Send)
	}
	arrived := make(map[int64]time.Duration, len(arr))
	for _, a := range arr {
		if t, ok := arrived[a.RV]; !ok || a.At < t {
			arrived[a.RV] = a.At
		}
	}
	byKeyO := make([][]Observation, keys)
	var lastObs time.Duration
	for _, o := range obs {
		byKeyO[o.Key] = append(byKeyO[o.Key], o)
		if o.At >= from && o.At < to {
			res.ReconcileRate++
		}
		lastObs = max(lastObs, o.At)
	}
	var lat, wlat, hlat, elat []time.Duration
	var finalCover time.Duration
	for k := range keys {
		ws, os := byKeyW[k], byKeyO[k]
		if len(ws) == 0 {
			continue
		}
		slices.SortFunc(ws, func(a, b Write) int { return cmpInt64(a.RV, b.RV) })
		slices.SortFunc(os, func(a, b Observation) int { return cmpInt64(int64(a.At), int64(b.At)) })
		// Two pointers: the observations in time order with their running
		// maximum resourceVersion; the writes in resourceVersion order.
		j, seen := 0, int64(0)
		cover := Forever
		for _, w := range ws {
			for seen < w.RV && j < len(os) {
				seen = max(seen, os[j].RV)
				j++
			}
			cover = Forever
			if seen >= w.RV {
				cover = os[j-1].At
			}
			if w.Send >= from && w.Send < to {
				res.Writes++
				wlat = append(wlat, w.Ack-w.Send)
				if cover == Forever {
					res.Uncovered++
					lat = append(lat, Forever)
				} else {
					lat = append(lat, cover-w.Send)
				}
				if a, ok := arrived[w.RV]; ok {
					elat = append(elat, a-w.Send)
					if cover == Forever {
						hlat = append(hlat, Forever)
					} else {
						hlat = append(hlat, cover-a)
					}
				}
			}
		}
		if cover == Forever {
			res.CaughtUp = false
		} else {
			finalCover = max(finalCover, cover)
		}
	}
	if secs := res.Window.Seconds(); secs > 0 {
		res.WriteRate = float64(res.Writes) / secs
		res.ReconcileRate /= secs
	}
	res.P50, res.P99, res.Max = Percentile(lat, 0.50), Percentile(lat, 0.99), Percentile(lat, 1)
	res.HandlerP50, res.HandlerP99 = Percentile(hlat, 0.50), Percentile(hlat, 0.99)
	res.EventP50, res.EventP99 = Percentile(elat, 0.50), Percentile(elat, 0.99)
	res.WriteP50 = Percentile(wlat, 0.50)
	if res.CaughtUp {
		res.Lag = finalCover - lastSend
	} else {
		res.Lag = lastObs - lastSend
	}
	return res
}

// Percentile returns the nearest-rank q-quantile of d (0 for none); it sorts d.
func Percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(q*float64(len(d))+0.999999999) - 1
	return d[min(max(i, 0), len(d)-1)]
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// CreateConfigMaps creates ConfigMaps KeyName(0) … KeyName(n-1) in ns, each with
// a payload of size bytes, with 16 requests in flight.
func CreateConfigMaps(ctx context.Context, c kubernetes.Interface, ns string, n, size int) error {
	pad := strings.Repeat("x", size)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Go(func() {
			for {
				k := int(next.Add(1) - 1)
				if k >= n {
					return
				}
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: KeyName(k)},
					Data:       map[string]string{"t": "0", "pad": pad},
				}
				if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					errs[i] = fmt.Errorf("latency: create %s: %w", cm.Name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Poll reports whether cond became true within limit, checking every 2 ms, and
// false as soon as ctx ends.
func Poll(ctx context.Context, limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}
