package reflector

// This file checks the reflector against the behaviour client-go's
// tools/cache reflector is tested for (reflector_test.go,
// reflector_watchlist_test.go, listwatch_test.go and tools/pager), restated
// for ctrlkit's API. Each test names the client-go tests whose semantics it
// covers. Where ctrlkit deliberately behaves otherwise, the test checks
// ctrlkit's documented behaviour and the difference is recorded in
// notes/deviations-reflector.md.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// cmAt is the ConfigMap ns/name as the server would send it at rv.
func cmAt(name, rv string) configMap {
	c := cm("ns", name)
	c.ResourceVersion = rv
	return c
}

// endOfInitialEvents is the bookmark that closes a streaming list at rv.
func endOfInitialEvents(rv string) configMap {
	b := &corev1.ConfigMap{}
	b.ResourceVersion = rv
	b.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	return b
}

// testWatch is a watch a test drives. Events sent are buffered; end closes
// the stream as a server does; Stop is counted and leaves the stream as it
// is, so a test can tell whether the reflector stopped it.
type testWatch struct {
	ch   chan watch.Event
	ctx  context.Context // the request's context
	opts metav1.ListOptions

	mu    sync.Mutex
	stops int
	ended bool
}

func newTestWatch(ctx context.Context, opts metav1.ListOptions) *testWatch {
	return &testWatch{ch: make(chan watch.Event, 100), ctx: ctx, opts: opts}
}

func (w *testWatch) Stop() {
	w.mu.Lock()
	w.stops++
	w.mu.Unlock()
}

func (w *testWatch) ResultChan() <-chan watch.Event { return w.ch }

// send queues one event.
func (w *testWatch) send(typ watch.EventType, obj runtime.Object) {
	w.ch <- watch.Event{Type: typ, Object: obj}
}

// fail queues an Error event carrying err's status.
func (w *testWatch) fail(err apierrors.APIStatus) {
	st := err.Status()
	w.send(watch.Error, &st)
}

// end closes the stream, once.
func (w *testWatch) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.ended = true
		close(w.ch)
	}
}

func (w *testWatch) stopped() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stops
}

// driver is a ListerWatcher scripted by a test: list answers each LIST, and
// watchErr, if set, may refuse the n-th watch request (0-based); other
// watches are testWatches the test drives, which opened, if set, may feed
// before the reflector sees them. It records every request and when it came.
type driver struct {
	list     func(opts metav1.ListOptions) ([]configMap, metav1.ListMeta, error)
	watchErr func(n int, opts metav1.ListOptions) error
	opened   func(n int, w *testWatch)

	mu      sync.Mutex
	reqs    []reflectortest.Request
	times   []time.Time
	watches []*testWatch
	nWatch  int
}

func (d *driver) List(ctx context.Context, opts metav1.ListOptions) ([]configMap, metav1.ListMeta, error) {
	d.mu.Lock()
	d.reqs = append(d.reqs, reflectortest.Request{Verb: reflectortest.List, Options: opts})
	d.times = append(d.times, time.Now())
	d.mu.Unlock()
	if d.list == nil {
		return nil, metav1.ListMeta{}, errors.New("no list scripted")
	}
	return d.list(opts)
}

func (d *driver) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	d.mu.Lock()
	d.reqs = append(d.reqs, reflectortest.Request{Verb: reflectortest.Watch, Options: opts})
	d.times = append(d.times, time.Now())
	n := d.nWatch
	d.nWatch++
	d.mu.Unlock()
	if d.watchErr != nil {
		if err := d.watchErr(n, opts); err != nil {
			return nil, err
		}
	}
	w := newTestWatch(ctx, opts)
	if d.opened != nil {
		d.opened(n, w)
	}
	d.mu.Lock()
	d.watches = append(d.watches, w)
	d.mu.Unlock()
	return w, nil
}

// requests returns the requests so far, as describe summarises them.
func (d *driver) requests() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return describe(d.reqs)
}

// options returns the options of every request so far.
func (d *driver) options() []metav1.ListOptions {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]metav1.ListOptions, len(d.reqs))
	for i, r := range d.reqs {
		out[i] = r.Options
	}
	return out
}

// requestTimes returns when each request came, in order.
func (d *driver) requestTimes() []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.times)
}

// watch returns the i-th watch handed out (0-based); it fails the test if
// there is none.
func (d *driver) watch(t *testing.T, i int) *testWatch {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if i >= len(d.watches) {
		t.Fatalf("watch %d was never opened (%d opened): requests %v", i, len(d.watches), describe(d.reqs))
	}
	return d.watches[i]
}

// listOf answers every LIST with items at rv, in one page.
func listOf(rv string, items ...configMap) func(metav1.ListOptions) ([]configMap, metav1.ListMeta, error) {
	return func(metav1.ListOptions) ([]configMap, metav1.ListMeta, error) {
		out := make([]configMap, len(items))
		for i, c := range items {
			out[i] = c.DeepCopy()
		}
		return out, metav1.ListMeta{ResourceVersion: rv}, nil
	}
}

// checkCalls compares the store's calls with want.
func checkCalls[T Object](t *testing.T, st *memStore[T], want []storeCall) {
	t.Helper()
	if diff := cmp.Diff(want, st.Calls(), cmp.AllowUnexported(storeCall{}), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("store calls (-want +got):\n%s", diff)
	}
}

// startDriver runs a reflector of d into a new memStore with cfg and waits
// until it blocks on its first request.
func startDriver(t *testing.T, d *driver, cfg Config[configMap]) (*Reflector[configMap], *memStore[configMap]) {
	t.Helper()
	st := newMemStore[configMap]()
	r := New[configMap](d, st, cfg)
	start(t, r)
	synctest.Wait()
	return r, st
}

// checkDriverRequests compares the requests d has seen with want.
func checkDriverRequests(t *testing.T, d *driver, want []string) {
	t.Helper()
	if diff := cmp.Diff(want, d.requests()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

// checkContents compares the store's contents with want.
func checkContents(t *testing.T, st *memStore[configMap], want []string) {
	t.Helper()
	if diff := cmp.Diff(want, st.Contents()); diff != "" {
		t.Errorf("store (-want +got):\n%s", diff)
	}
}

// TestConformanceNothingHappensAfterStop covers client-go
// TestReflectorWatchStoppedBefore, TestReflectorStopWatch and
// TestReflectorHandleWatchStoppedBefore: with its context already done, Run
// sends no request, calls no store method and returns nil.
func TestConformanceNothingHappensAfterStop(t *testing.T) {
	for _, mode := range []WatchListMode{WatchListAuto, WatchListOn, WatchListOff} {
		d := &driver{list: listOf("1", cmAt("a", "1"))}
		st := newMemStore[configMap]()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		r := New[configMap](d, st, Config[configMap]{WatchList: mode})
		if err := r.Run(ctx); err != nil {
			t.Errorf("%v: Run = %v, want nil", mode, err)
		}
		if reqs := d.requests(); len(reqs) != 0 {
			t.Errorf("%v: requests after stop: %v", mode, reqs)
		}
		if calls := st.Calls(); len(calls) != 0 {
			t.Errorf("%v: store calls after stop: %v", mode, calls)
		}
		if h := r.Health(); h.State != StateStopped || h.Synced {
			t.Errorf("%v: health = %+v", mode, h)
		}
	}
}

// TestConformanceStopEndsTheWatch covers client-go TestRunUntil,
// TestReflectorWatchStoppedAfter and TestReflectorHandleWatchStoppedAfter:
// cancelling Run's context while a watch is open stops that watch and ends
// the context of its request, whether it is a plain watch or the stream of a
// streaming list kept after the list, and Run returns nil.
func TestConformanceStopEndsTheWatch(t *testing.T) {
	for _, mode := range []WatchListMode{WatchListOff, WatchListOn} {
		t.Run(mode.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				d := &driver{list: listOf("1")}
				r := New[configMap](d, newMemStore[configMap](), Config[configMap]{WatchList: mode})
				rr := start(t, r)
				synctest.Wait()
				w := d.watch(t, 0)
				if mode == WatchListOn {
					w.send(watch.Bookmark, endOfInitialEvents("1"))
				}
				w.send(watch.Added, cmAt("a", "2"))
				synctest.Wait()
				if h := r.Health(); h.State != StateWatching || h.LastResourceVersion != "2" {
					t.Fatalf("health while watching = %+v", h)
				}
				if n := w.stopped(); n != 0 {
					t.Fatalf("the watch was stopped %d times before Run was", n)
				}
				if err := rr.stop(); err != nil {
					t.Errorf("Run = %v, want nil", err)
				}
				if w.stopped() == 0 {
					t.Error("Run returned without stopping its watch")
				}
				if w.ctx.Err() == nil {
					t.Error("Run returned with the watch request's context still live")
				}
				if got := d.requests(); len(got) != map[WatchListMode]int{WatchListOff: 2, WatchListOn: 1}[mode] {
					t.Errorf("requests = %v", got)
				}
			})
		})
	}
}

// TestConformanceErrorEventEndsTheWatch covers client-go
// TestCloseWatchChannelOnError: a watch that delivers an Error event is
// stopped at once and never read again; the reflector watches anew from the
// last resourceVersion after a backoff.
func TestConformanceErrorEventEndsTheWatch(t *testing.T) {
	bubble(t, func(t *testing.T) {
		d := &driver{list: listOf("1", cmAt("a", "1"))}
		r, st := startDriver(t, d, Config[configMap]{WatchList: WatchListOff})
		w := d.watch(t, 0)
		w.send(watch.Added, cmAt("b", "2"))
		w.fail(apierrors.NewServiceUnavailable("etcd leader changed"))
		w.send(watch.Added, cmAt("late", "3")) // after the error: never read
		synctest.Wait()
		if w.stopped() == 0 {
			t.Error("the watch that failed was not stopped")
		}
		h := r.Health()
		if h.State != StateBackingOff || !apierrors.IsServiceUnavailable(h.LastError) || h.LastResourceVersion != "2" {
			t.Errorf("health after the Error event = %+v", h)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		checkDriverRequests(t, d, []string{"list rv=0 limit=500", "watch rv=1", "watch rv=2"})
		checkContents(t, st, []string{"ns/a@1", "ns/b@2"})
	})
}

// TestConformanceShortWatch covers client-go
// TestReflectorHandleWatchResultChanClosedBefore and
// TestReflectorHandleWatchResultChanClosedAfter: a watch whose stream closes
// within a second without any event is a failure (client-go's
// VeryShortWatchError, ctrlkit's errShortWatch) and is backed off; one that
// closes later without events is a normal end, reopened at once. Either way
// the watch is stopped.
func TestConformanceShortWatch(t *testing.T) {
	for _, tc := range []struct {
		openFor time.Duration
		failure bool
	}{
		{0, true},
		{10 * time.Millisecond, true},
		{shortWatch - time.Millisecond, true},
		{shortWatch, false},
		{2 * time.Second, false},
	} {
		t.Run(tc.openFor.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				d := &driver{list: listOf("1")}
				r := New[configMap](d, newMemStore[configMap](), Config[configMap]{WatchList: WatchListOff})
				start(t, r)
				synctest.Wait()
				time.Sleep(tc.openFor)
				w := d.watch(t, 0)
				closed := time.Now()
				w.end()
				synctest.Wait()
				if w.stopped() == 0 {
					t.Error("the closed watch was not stopped")
				}
				h := r.Health()
				if tc.failure {
					if h.State != StateBackingOff || !errors.Is(h.LastError, errShortWatch) || h.ConsecutiveFailures != 1 {
						t.Errorf("health = %+v, want backing off after a short watch", h)
					}
					return
				}
				if h.State != StateWatching || h.Stats.Failures != 0 {
					t.Errorf("health = %+v, want watching again without failure", h)
				}
				if at := d.requestTimes(); len(at) != 3 || !at[2].Equal(closed) {
					t.Errorf("requests %v at %v, want a new watch at %v", d.requests(), at, closed)
				}
			})
		})
	}
}

// TestConformanceWatchEventsReachTheStore covers client-go
// TestReflectorWatchHandler and TestReflectorResourceVersionUpdate: Added,
// Modified and Deleted events become Add, Update and Delete calls in the
// order they came; a bookmark reaches a BookmarkStore; after each event the
// reflector's resourceVersion is that event's, even when it sorts before an
// earlier one (resourceVersions are opaque), and the next watch starts there.
func TestConformanceWatchEventsReachTheStore(t *testing.T) {
	bubble(t, func(t *testing.T) {
		d := &driver{list: listOf("10", cmAt("foo", "1"), cmAt("bar", "2"))}
		r, st := startDriver(t, d, Config[configMap]{WatchList: WatchListOff})
		w := d.watch(t, 0)
		for _, step := range []struct {
			typ    watch.EventType
			obj    configMap
			wantRV string
		}{
			{watch.Deleted, cmAt("foo", "11"), "11"},
			{watch.Modified, cmAt("bar", "55"), "55"},
			{watch.Added, cmAt("baz", "32"), "32"},
			{watch.Bookmark, cmAt("", "60"), "60"},
			{watch.Deleted, cmAt("baz", "70"), "70"},
		} {
			w.send(step.typ, step.obj)
			synctest.Wait()
			if got := r.LastSyncResourceVersion(); got != step.wantRV {
				t.Errorf("after %s@%s: LastSyncResourceVersion = %q, want %q", step.typ, step.obj.ResourceVersion, got, step.wantRV)
			}
		}
		checkCalls(t, st, []storeCall{
			{op: "replace", rv: "10", size: 2},
			{op: "delete", key: "ns/foo", rv: "11"},
			{op: "update", key: "ns/bar", rv: "55"},
			{op: "add", key: "ns/baz", rv: "32"},
			{op: "bookmark", rv: "60"},
			{op: "delete", key: "ns/baz", rv: "70"},
		})
		checkContents(t, st, []string{"ns/bar@55"})
		time.Sleep(2 * time.Second)
		w.end()
		synctest.Wait()
		checkDriverRequests(t, d, []string{"list rv=0 limit=500", "watch rv=10", "watch rv=70"})
		if h := r.Health(); h.Stats.Events != 4 {
			t.Errorf("Stats.Events = %d, want 4 (a bookmark is not an event)", h.Stats.Events)
		}
	})
}

// TestConformanceRequestOptions covers client-go TestReflectorListAndWatch
// and the request options TestWatchList checks: a streaming list asks for
// sendInitialEvents, bookmarks and resourceVersionMatch NotOlderThan at the
// most recent resourceVersion (""); the LIST way first lists at
// resourceVersion "0" (the watch cache answers) with a limit of 500, then
// watches from the list's resourceVersion with bookmarks. Every watch, and no
// LIST, carries a timeout. Objects changed after the list reach the store
// with their last state.
func TestConformanceRequestOptions(t *testing.T) {
	yes := true
	for _, tc := range []struct {
		mode WatchListMode
		want []metav1.ListOptions
	}{
		{WatchListAuto, []metav1.ListOptions{
			{ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, SendInitialEvents: &yes, AllowWatchBookmarks: true},
		}},
		{WatchListOff, []metav1.ListOptions{
			{ResourceVersion: "0", Limit: 500},
			{ResourceVersion: "1", AllowWatchBookmarks: true},
		}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				d := &driver{list: listOf("1", cmAt("foo", "1"))}
				_, st := startDriver(t, d, Config[configMap]{WatchList: tc.mode})
				w := d.watch(t, 0)
				if tc.mode == WatchListAuto {
					w.send(watch.Added, cmAt("foo", "1"))
					w.send(watch.Bookmark, endOfInitialEvents("1"))
				}
				w.send(watch.Modified, cmAt("foo", "2"))
				for i, name := range []string{"bar", "baz", "qux", "zoo"} {
					w.send(watch.Added, cmAt(name, strconv.Itoa(3+i)))
				}
				synctest.Wait()
				want := []string{"ns/bar@3", "ns/baz@4", "ns/foo@2", "ns/qux@5", "ns/zoo@6"}
				checkContents(t, st, want)
				got := d.options()
				for i, o := range got {
					if (o.TimeoutSeconds == nil) != (o.Limit > 0) {
						t.Errorf("request %d: timeoutSeconds %v with limit %d: watches, and only they, carry a timeout", i, o.TimeoutSeconds, o.Limit)
					}
				}
				if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(metav1.ListOptions{}, "TimeoutSeconds")); diff != "" {
					t.Errorf("request options (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// TestConformanceListAndWatchErrors covers client-go
// TestReflectorListAndWatchWithErrors: failed lists and watches are retried
// until the store holds what the server holds, and changes made while the
// reflector could not watch are not lost. client-go lists again after a
// failed watch; ctrlkit watches again from the last resourceVersion instead
// (see the deviations), so after the first successful list there is none.
func TestConformanceListAndWatchErrors(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 2)
		srv.FailNext(reflectortest.List, errUnavailable)
		srv.FailNext(reflectortest.Watch, errUnavailable)
		st := newMemStore[configMap]()
		r := New(srv, st, Config[configMap]{WatchList: WatchListOff})
		start(t, r)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		checkInSync(t, srv, st)
		checkRequests(t, srv, []string{"list rv=0 limit=500", "list rv=0 limit=500", "watch rv=2", "watch rv=2"})

		mustCreate(t, srv, cm("ns", "foo"))
		mustCreate(t, srv, cm("ns", "bar"))
		synctest.Wait()
		checkInSync(t, srv, st)

		// The watch breaks and the next two fail; meanwhile the collection
		// changes.
		time.Sleep(2 * time.Second)
		srv.FailNext(reflectortest.Watch, errUnavailable, errUnavailable)
		srv.BreakWatches(errUnavailable)
		synctest.Wait()
		if _, err := srv.Delete("ns", "foo"); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, srv, cm("ns", "qux"))
		time.Sleep(time.Minute)
		synctest.Wait()
		checkInSync(t, srv, st)
		checkRequests(t, srv, []string{
			"list rv=0 limit=500", "list rv=0 limit=500", "watch rv=2", "watch rv=2",
			"watch rv=4", "watch rv=4", "watch rv=4",
		})
		if h := r.Health(); h.Stats.Failures != 5 || h.Stats.Lists != 1 || h.ConsecutiveFailures != 0 {
			t.Errorf("health = %+v", h)
		}
	})
}

// watchDelays returns the delays between consecutive watch requests of d.
func watchDelays(d *driver) []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	var at []time.Time
	for i, r := range d.reqs {
		if r.Verb == reflectortest.Watch {
			at = append(at, d.times[i])
		}
	}
	var out []time.Duration
	for i := 1; i < len(at); i++ {
		out = append(out, at[i].Sub(at[i-1]))
	}
	return out
}

// refuseWatches makes a driver's first n watch requests fail with err.
func refuseWatches(n int, err error) func(int, metav1.ListOptions) error {
	return func(i int, _ metav1.ListOptions) error {
		if i < n {
			return err
		}
		return nil
	}
}

// TestConformanceBackoffSequence covers client-go
// TestNewReflectorWithCustomBackoff and
// TestReflectorListAndWatchInitConnBackoff: watches refused with "connection
// refused" are retried, from the same resourceVersion and without a new
// list, after delays that start at Backoff.Initial and grow by Factor up to
// Max. Without jitter the delays are exact (10+20+40+80+100 ms, as in
// client-go's test); with jitter each falls in ((1-Jitter)·d, d], where
// client-go's falls in [d, (1+Jitter)·d) (see the deviations).
func TestConformanceBackoffSequence(t *testing.T) {
	t.Run("no jitter", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			d := &driver{list: listOf("1"), watchErr: refuseWatches(5, syscall.ECONNREFUSED)}
			cfg := Config[configMap]{WatchList: WatchListOff, Backoff: Backoff{
				Initial: 10 * time.Millisecond, Factor: 2, Max: 100 * time.Millisecond, Jitter: -1,
			}}
			r := New[configMap](d, newMemStore[configMap](), cfg)
			start(t, r)
			time.Sleep(time.Second)
			synctest.Wait()
			want := []time.Duration{10, 20, 40, 80, 100}
			for i := range want {
				want[i] *= time.Millisecond
			}
			if diff := cmp.Diff(want, watchDelays(d)); diff != "" {
				t.Errorf("delays between watches (-want +got):\n%s", diff)
			}
			reqs := d.requests()
			if len(reqs) != 7 || reqs[0] != "list rv=0 limit=500" || slices.ContainsFunc(reqs[1:], func(s string) bool { return s != "watch rv=1" }) {
				t.Errorf("requests = %v, want one list and six watches from 1", reqs)
			}
			if h := r.Health(); h.State != StateWatching || !errors.Is(h.LastError, syscall.ECONNREFUSED) || h.Stats.Failures != 5 {
				t.Errorf("health = %+v", h)
			}
		})
	})
	t.Run("jitter", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			const failures = 40
			d := &driver{list: listOf("1"), watchErr: refuseWatches(failures, syscall.ECONNREFUSED)}
			cfg := Config[configMap]{WatchList: WatchListOff, Backoff: Backoff{
				Initial: time.Millisecond, Factor: 2, Max: 50 * time.Millisecond, Jitter: 0.5,
			}}
			start(t, New[configMap](d, newMemStore[configMap](), cfg))
			time.Sleep(10 * time.Second)
			synctest.Wait()
			delays := watchDelays(d)
			if len(delays) != failures {
				t.Fatalf("%d retries, want %d", len(delays), failures)
			}
			base, distinct := time.Millisecond, map[time.Duration]bool{}
			for i, got := range delays {
				if got <= base/2 || got > base {
					t.Errorf("delay %d = %v, want in (%v, %v]", i, got, base/2, base)
				}
				if base == 50*time.Millisecond {
					distinct[got] = true
				}
				base = min(2*base, 50*time.Millisecond)
			}
			if len(distinct) < 10 {
				t.Errorf("capped delays take %d distinct values, want them jittered", len(distinct))
			}
		})
	})
}

// TestConformanceBackoffResetsAfterHealthyPeriod covers the reset client-go
// configures with DelayWithReset (exercised by
// TestReflectorListAndWatchInitConnBackoff): once the reflector has been
// watching for Backoff.ResetAfter, the next failure waits Backoff.Initial
// again; after a shorter healthy spell the delays keep growing.
func TestConformanceBackoffResetsAfterHealthyPeriod(t *testing.T) {
	for _, tc := range []struct {
		healthy time.Duration
		want    time.Duration
	}{
		{150 * time.Millisecond, 10 * time.Millisecond},
		{100 * time.Millisecond, 10 * time.Millisecond},
		{50 * time.Millisecond, 160 * time.Millisecond},
	} {
		t.Run(tc.healthy.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				d := &driver{list: listOf("1"), watchErr: refuseWatches(4, syscall.ECONNREFUSED)}
				cfg := Config[configMap]{WatchList: WatchListOff, Backoff: Backoff{
					Initial: 10 * time.Millisecond, Factor: 2, Max: time.Second, Jitter: -1, ResetAfter: 100 * time.Millisecond,
				}}
				start(t, New[configMap](d, newMemStore[configMap](), cfg))
				time.Sleep(150 * time.Millisecond) // 10+20+40+80 ms of backoff
				synctest.Wait()
				if len(d.requests()) != 6 {
					t.Fatalf("requests = %v, want the fifth watch open", d.requests())
				}
				time.Sleep(tc.healthy)
				d.watch(t, 0).fail(apierrors.NewInternalError(errBoom))
				time.Sleep(time.Second)
				synctest.Wait()
				delays := watchDelays(d)
				if len(delays) != 5 {
					t.Fatalf("delays between watches = %v, want 5", delays)
				}
				if got := delays[4] - tc.healthy; got != tc.want {
					t.Errorf("after %v healthy the delay is %v, want %v", tc.healthy, got, tc.want)
				}
			})
		})
	}
}

// TestConformanceTooManyRequests covers client-go
// TestBackoffOnTooManyRequests, TestNoRelistOnTooManyRequests and the
// TestWatchList case "checks if the reflector retries 429": a 429 answer,
// to the watch request or as an Error event, backs off and watches again
// from the same resourceVersion without listing again; a 429 to a streaming
// list is retried as a streaming list, not replaced by a LIST. ctrlkit also
// waits at least the server's Retry-After (client-go's reflector ignores it).
func TestConformanceTooManyRequests(t *testing.T) {
	busy := apierrors.NewTooManyRequests("busy, check again later", 2)
	t.Run("watch", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			// Watches 0 and 2 are refused; 1 fails with an Error event; 3 works.
			d := &driver{list: listOf("7", cmAt("a", "7")), watchErr: func(n int, _ metav1.ListOptions) error {
				if n == 0 || n == 2 {
					return busy
				}
				return nil
			}}
			r := New[configMap](d, newMemStore[configMap](), Config[configMap]{WatchList: WatchListOff})
			start(t, r)
			synctest.Wait()
			time.Sleep(2 * time.Second)
			synctest.Wait()
			d.watch(t, 0).fail(busy)
			time.Sleep(time.Minute)
			synctest.Wait()
			want := []string{"list rv=0 limit=500", "watch rv=7", "watch rv=7", "watch rv=7", "watch rv=7"}
			checkDriverRequests(t, d, want)
			for i, got := range watchDelays(d) {
				if got < 2*time.Second {
					t.Errorf("retry %d after %v, before the server's Retry-After of 2s", i, got)
				}
			}
			if h := r.Health(); h.State != StateWatching || h.Stats.Lists != 1 || h.Stats.Failures != 3 || !apierrors.IsTooManyRequests(h.LastError) {
				t.Errorf("health = %+v", h)
			}
		})
	})
	t.Run("streaming list", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			d := &driver{watchErr: refuseWatches(2, busy)}
			st := newMemStore[configMap]()
			r := New[configMap](d, st, Config[configMap]{})
			start(t, r)
			time.Sleep(time.Minute)
			synctest.Wait()
			w := d.watch(t, 0)
			w.send(watch.Added, cmAt("p1", "1"))
			w.send(watch.Bookmark, endOfInitialEvents("2"))
			synctest.Wait()
			checkDriverRequests(t, d, []string{"stream rv=", "stream rv=", "stream rv="})
			checkCalls(t, st, []storeCall{{op: "replace", rv: "2", size: 1}})
			if h := r.Health(); !h.Synced || h.Stats.StreamingLists != 1 || h.Stats.Failures != 2 {
				t.Errorf("health = %+v", h)
			}
		})
	})
}

// TestConformanceInternalErrorsNeverForceARelist covers client-go
// TestRetryInternalError. client-go retries a watch failing with an internal
// error (500) only for MaxInternalErrorRetryDuration, then lists again;
// ctrlkit backs off and watches again from the last resourceVersion for as
// long as such errors last (see the deviations), and loses no change made
// meanwhile.
func TestConformanceInternalErrorsNeverForceARelist(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 3)
		st := newMemStore[configMap]()
		r := New(srv, st, Config[configMap]{WatchList: WatchListOff})
		start(t, r)
		synctest.Wait()
		var mu sync.Mutex
		failing := true
		internal := apierrors.NewInternalError(errors.New("etcdserver: no leader"))
		srv.SetHook(func(req reflectortest.Request) error {
			mu.Lock()
			defer mu.Unlock()
			if failing {
				return internal
			}
			return nil
		})
		time.Sleep(2 * time.Second)
		srv.BreakWatches(internal) // an Error event, then refused watches
		synctest.Wait()
		mustCreate(t, srv, cm("ns", "new"))
		if _, err := srv.Delete("ns", "cm-1"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Minute)
		mu.Lock()
		failing = false
		mu.Unlock()
		time.Sleep(time.Minute)
		synctest.Wait()
		checkInSync(t, srv, st)
		watches := requestsOf(srv.Requests(), reflectortest.Watch)
		if len(requestsOf(srv.Requests(), reflectortest.List)) != 1 {
			t.Errorf("requests = %v, want a single list", describe(srv.Requests()))
		}
		for _, w := range watches {
			if w.Options.ResourceVersion != "3" {
				t.Errorf("a watch from %q, want every watch from 3", w.Options.ResourceVersion)
			}
		}
		// Delays doubling from 0.4–0.8s to 15–30s: at least a dozen retries
		// in six minutes, and no more than about thirty.
		if len(watches) < 12 || len(watches) > 35 {
			t.Errorf("%d watches in six minutes", len(watches))
		}
		if h := r.Health(); h.State != StateWatching || h.Stats.Expired != 0 || h.ConsecutiveFailures != 0 {
			t.Errorf("health = %+v", h)
		}
	})
}

// paged answers LISTs from n objects cm-0 … cm-(n-1) at rv, as a server
// without watch cache does: a request with a limit gets at most
// min(limit, page) items and a continue token, the offset of the next item.
// expire, if set, is asked before each continue request and may refuse it.
func paged(rv string, n, page int, expire func(opts metav1.ListOptions) error) func(metav1.ListOptions) ([]configMap, metav1.ListMeta, error) {
	return func(opts metav1.ListOptions) ([]configMap, metav1.ListMeta, error) {
		off := 0
		if opts.Continue != "" {
			if expire != nil {
				if err := expire(opts); err != nil {
					return nil, metav1.ListMeta{}, err
				}
			}
			off, _ = strconv.Atoi(opts.Continue)
		}
		end := n
		if opts.Limit > 0 {
			end = min(n, off+min(int(opts.Limit), page))
		}
		var items []configMap
		for i := off; i < end; i++ {
			items = append(items, cmAt("cm-"+strconv.Itoa(i), rv))
		}
		lm := metav1.ListMeta{ResourceVersion: rv}
		if end < n {
			lm.Continue = strconv.Itoa(end)
		}
		return items, lm, nil
	}
}

// TestConformancePagination covers client-go TestListPager_List (empty
// list, one page, one full page, two and three pages) and
// TestReflectorWatchListPageSize: a list is read page by page with
// Config.PageSize as the limit; a continue request carries the token, the
// limit and no resourceVersion; the list's resourceVersion is the first
// page's; the store gets one Replace holding the items of every page.
func TestConformancePagination(t *testing.T) {
	for _, n := range []int{0, 3, 4, 8, 10} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				d := &driver{list: paged("10", n, 1000, nil)}
				r, st := startDriver(t, d, Config[configMap]{WatchList: WatchListOff, PageSize: 4})
				want := []metav1.ListOptions{{ResourceVersion: "0", Limit: 4}}
				for off := 4; off < n; off += 4 {
					want = append(want, metav1.ListOptions{Continue: strconv.Itoa(off), Limit: 4})
				}
				want = append(want, metav1.ListOptions{ResourceVersion: "10", AllowWatchBookmarks: true})
				if diff := cmp.Diff(want, d.options(), cmpopts.IgnoreFields(metav1.ListOptions{}, "TimeoutSeconds")); diff != "" {
					t.Errorf("request options (-want +got):\n%s", diff)
				}
				checkCalls(t, st, []storeCall{{op: "replace", rv: "10", size: n}})
				if len(st.Contents()) != n {
					t.Errorf("store holds %d objects, want %d", len(st.Contents()), n)
				}
				if h := r.Health(); h.Stats.ListedObjects != int64(n) || h.Stats.Lists != 1 || !h.Synced {
					t.Errorf("health = %+v", h)
				}
			})
		})
	}
}

// TestConformancePageErrorRestartsTheList covers the TestListPager_List
// case of a page that fails: a failure on a continue page, other than an
// expired token, fails the whole list; nothing is stored, and after a
// backoff the list starts again from its first page at the same
// resourceVersion.
func TestConformancePageErrorRestartsTheList(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var mu sync.Mutex
		failures := 1
		d := &driver{list: paged("10", 10, 1000, func(metav1.ListOptions) error {
			mu.Lock()
			defer mu.Unlock()
			if failures > 0 {
				failures--
				return errUnavailable
			}
			return nil
		})}
		r, st := startDriver(t, d, Config[configMap]{WatchList: WatchListOff, PageSize: 4})
		if h := r.Health(); h.State != StateBackingOff || h.Synced || len(st.Calls()) != 0 {
			t.Fatalf("health after the failed page = %+v, store calls %v", h, st.Calls())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		want := []string{
			"list rv=0 limit=4", "list continue limit=4",
			"list rv=0 limit=4", "list continue limit=4", "list continue limit=4", "watch rv=10",
		}
		checkDriverRequests(t, d, want)
		checkCalls(t, st, []storeCall{{op: "replace", rv: "10", size: 10}})
	})
}

// TestConformanceRelistFromLastResourceVersion covers client-go
// TestReflectorResyncWithResourceVersion and
// TestReflectorNotPaginatingNotConsistentReads: the first list asks for
// resourceVersion "0"; a relist asks for the last resourceVersion the
// reflector reached, through events and bookmarks (never "0", which could go
// back in time), without a limit so that the watch cache serves it. Streaming
// relists ask for the same resourceVersion. client-go also paginates such a
// list when WatchListPageSize is set; ctrlkit does not, whatever PageSize
// (see the deviations).
func TestConformanceRelistFromLastResourceVersion(t *testing.T) {
	for _, tc := range []struct {
		mode WatchListMode
		want []string
	}{
		{WatchListOff, []string{"list rv=0 limit=4", "watch rv=10", "list rv=15 limit=0", "watch rv=16"}},
		{WatchListOn, []string{"stream rv=", "stream rv=15"}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				d := &driver{list: func(opts metav1.ListOptions) ([]configMap, metav1.ListMeta, error) {
					if opts.ResourceVersion == "0" {
						return listOf("10", cmAt("a", "9"), cmAt("b", "10"))(opts)
					}
					return listOf("16", cmAt("a", "9"), cmAt("b", "12"), cmAt("c", "16"))(opts)
				}}
				r, st := startDriver(t, d, Config[configMap]{WatchList: tc.mode, PageSize: 4})
				w := d.watch(t, 0)
				if tc.mode == WatchListOn {
					w.send(watch.Added, cmAt("a", "9"))
					w.send(watch.Added, cmAt("b", "10"))
					w.send(watch.Bookmark, endOfInitialEvents("10"))
				}
				w.send(watch.Modified, cmAt("b", "12"))
				w.send(watch.Bookmark, cmAt("", "15"))
				w.fail(apierrors.NewResourceExpired("too old resource version: 15 (16)"))
				synctest.Wait()
				if tc.mode == WatchListOn {
					w := d.watch(t, 1)
					for _, c := range []configMap{cmAt("a", "9"), cmAt("b", "12"), cmAt("c", "16")} {
						w.send(watch.Added, c)
					}
					w.send(watch.Bookmark, endOfInitialEvents("16"))
					synctest.Wait()
				}
				checkDriverRequests(t, d, tc.want)
				checkContents(t, st, []string{"ns/a@9", "ns/b@12", "ns/c@16"})
				if h := r.Health(); h.LastResourceVersion != "16" || h.Stats.Expired != 1 || h.Stats.Failures != 0 {
					t.Errorf("health = %+v", h)
				}
			})
		})
	}
}

// TestConformanceRelistPaginatedWithoutWatchCache covers client-go
// TestReflectorPaginatingNonConsistentReadsIfWatchCacheDisabled: a list at
// "0" that comes back paginated shows that the server has no watch cache for
// the resource, so later lists at a known resourceVersion are paginated too.
func TestConformanceRelistPaginatedWithoutWatchCache(t *testing.T) {
	bubble(t, func(t *testing.T) {
		d := &driver{list: paged("10", 10, 4, nil)}
		st := newMemStore[configMap]()
		start(t, New[configMap](d, st, Config[configMap]{WatchList: WatchListOff}))
		synctest.Wait()
		d.watch(t, 0).fail(apierrors.NewResourceExpired("too old resource version"))
		synctest.Wait()
		pages := []string{"list continue limit=500", "list continue limit=500"}
		want := slices.Concat([]string{"list rv=0 limit=500"}, pages, []string{"watch rv=10", "list rv=10 limit=500"}, pages, []string{"watch rv=10"})
		checkDriverRequests(t, d, want)
		checkCalls(t, st, []storeCall{{op: "replace", rv: "10", size: 10}, {op: "replace", rv: "10", size: 10}})
	})
}

// TestConformanceExpiredListFallsBackToMostRecent covers client-go
// TestReflectorExpiredExactResourceVersion, and the two answers client-go's
// isExpiredError accepts (410 with reason Expired, and reason Gone from
// servers before 1.18): a watch so answered relists at the last
// resourceVersion, and a relist at a resourceVersion the server no longer
// has (as a server without watch cache answers) is followed at once by a
// list at the most recent resourceVersion (""). Neither is a failure.
func TestConformanceExpiredListFallsBackToMostRecent(t *testing.T) {
	for name, gone := range map[string]func(msg string) *apierrors.StatusError{
		"expired": apierrors.NewResourceExpired,
		"gone":    apierrors.NewGone,
	} {
		t.Run(name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				d := &driver{list: func(opts metav1.ListOptions) ([]configMap, metav1.ListMeta, error) {
					switch opts.ResourceVersion {
					case "0":
						return paged("10", 4, 1000, nil)(opts)
					case "10":
						return nil, metav1.ListMeta{}, gone("The resourceVersion for the provided list is too old.")
					case "":
						return paged("11", 8, 1000, nil)(opts)
					}
					return nil, metav1.ListMeta{}, fmt.Errorf("unexpected list at %q", opts.ResourceVersion)
				}}
				r, st := startDriver(t, d, Config[configMap]{WatchList: WatchListOff})
				d.watch(t, 0).fail(gone("too old resource version: 10 (11)"))
				synctest.Wait()
				want := []string{"list rv=0 limit=500", "watch rv=10", "list rv=10 limit=0", "list rv= limit=500", "watch rv=11"}
				checkDriverRequests(t, d, want)
				checkCalls(t, st, []storeCall{{op: "replace", rv: "10", size: 4}, {op: "replace", rv: "11", size: 8}})
				if h := r.Health(); h.Stats.Expired != 2 || h.Stats.Failures != 0 || h.State != StateWatching {
					t.Errorf("health = %+v", h)
				}
			})
		})
	}
}

// TestConformanceContinueTokenExpiresDuringRelist covers client-go
// TestReflectorFullListIfExpired and the TestListPager_List cases "expires
// on second page" and "expires on second page and then lists": the snapshot
// behind a continue token was compacted away during a paginated relist.
// client-go lists once more at the same resourceVersion, whole; ctrlkit
// lists again at the most recent resourceVersion, paginated, and asks for
// the whole list in one response only if a token expires a second time (see
// the deviations). Neither is a failure.
func TestConformanceContinueTokenExpiresDuringRelist(t *testing.T) {
	for _, tc := range []struct {
		expiries int
		want     []string
	}{
		{1, []string{"list rv=10 limit=4", "list continue limit=4", "list rv= limit=4", "list continue limit=4", "list continue limit=4", "watch rv=10"}},
		{2, []string{"list rv=10 limit=4", "list continue limit=4", "list rv= limit=4", "list continue limit=4", "list rv= limit=0", "watch rv=10"}},
	} {
		t.Run(strconv.Itoa(tc.expiries), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				var mu sync.Mutex
				left := -1 // the first list goes through
				d := &driver{list: paged("10", 10, 4, func(opts metav1.ListOptions) error {
					mu.Lock()
					defer mu.Unlock()
					if left > 0 && opts.Continue == "4" {
						left--
						return apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result.")
					}
					return nil
				})}
				r, st := startDriver(t, d, Config[configMap]{WatchList: WatchListOff, PageSize: 4})
				mu.Lock()
				left = tc.expiries
				mu.Unlock()
				d.watch(t, 0).fail(apierrors.NewResourceExpired("too old resource version"))
				synctest.Wait()
				got := d.requests()
				if diff := cmp.Diff(tc.want, got[4:]); diff != "" {
					t.Errorf("relist requests (-want +got):\n%s", diff)
				}
				checkCalls(t, st, []storeCall{{op: "replace", rv: "10", size: 10}, {op: "replace", rv: "10", size: 10}})
				if h := r.Health(); h.Stats.Failures != 0 || h.Stats.Expired != int64(1+tc.expiries) {
					t.Errorf("health = %+v", h)
				}
			})
		})
	}
}

// TestConformanceTooLargeResourceVersion covers client-go
// TestReflectorFullListIfTooLarge: a relist at a resourceVersion the server
// has not reached yet (a restored etcd, or an API server whose watch cache
// lags) is answered "too large resource version", in any of the three forms
// servers have used (a status cause; a cause message, 1.17.0–1.18.5; only
// the message, before 1.17); the reflector then lists at once at the most
// recent resourceVersion ("").
func TestConformanceTooLargeResourceVersion(t *testing.T) {
	tooLarge := func(rv string) error {
		switch rv {
		case "20":
			err := apierrors.NewTimeoutError("Too large resource version: 20, current: 19", 1)
			err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge}}
			return err
		case "30":
			err := apierrors.NewTimeoutError("too large resource version", 1)
			err.ErrStatus.Details.Causes = []metav1.StatusCause{{Message: "Too large resource version"}}
			return err
		}
		return apierrors.NewTimeoutError("Too large resource version: 40, current: 39", 1)
	}
	bubble(t, func(t *testing.T) {
		var mu sync.Mutex
		version := 30
		d := &driver{list: func(opts metav1.ListOptions) ([]configMap, metav1.ListMeta, error) {
			mu.Lock()
			defer mu.Unlock()
			switch opts.ResourceVersion {
			case "0":
				return nil, metav1.ListMeta{ResourceVersion: "20"}, nil
			case "":
				rv := strconv.Itoa(version)
				version += 10
				return nil, metav1.ListMeta{ResourceVersion: rv}, nil
			}
			return nil, metav1.ListMeta{}, tooLarge(opts.ResourceVersion)
		}}
		// The first three watches expire at once, after a bookmark: progress,
		// so that no relist waits for a backoff.
		d.opened = func(n int, w *testWatch) {
			if n < 3 {
				w.send(watch.Bookmark, cmAt("", w.opts.ResourceVersion))
				w.fail(apierrors.NewResourceExpired("too old resource version"))
			}
		}
		r := New[configMap](d, newMemStore[configMap](), Config[configMap]{WatchList: WatchListOff})
		start(t, r)
		synctest.Wait()
		var lists []string
		for _, o := range d.options() {
			if o.TimeoutSeconds == nil {
				lists = append(lists, o.ResourceVersion)
			}
		}
		if diff := cmp.Diff([]string{"0", "20", "", "30", "", "40", ""}, lists); diff != "" {
			t.Errorf("resourceVersions listed (-want +got):\n%s", diff)
		}
		if h := r.Health(); h.Stats.Failures != 0 || h.Stats.Expired != 6 || h.LastResourceVersion != "50" {
			t.Errorf("health = %+v", h)
		}
	})
}

// TestConformanceWatchTimeout covers client-go TestWatchTimeout: every watch
// asks the server for a timeout drawn from [MinWatchTimeout,
// 2·MinWatchTimeout), 5 minutes by default. client-go raises a
// MinWatchTimeout below 5 minutes to 5 minutes; ctrlkit honours it (see the
// deviations).
func TestConformanceWatchTimeout(t *testing.T) {
	for _, tc := range []struct {
		min      time.Duration
		from, to int64 // seconds, [from, to)
	}{
		{0, 300, 600},
		{time.Second, 1, 2},
		{10 * time.Second, 10, 20},
		{30 * time.Minute, 1800, 3600},
	} {
		t.Run(tc.min.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				d := &driver{list: listOf("10")}
				start(t, New[configMap](d, newMemStore[configMap](), Config[configMap]{WatchList: WatchListOff, MinWatchTimeout: tc.min}))
				synctest.Wait()
				w := d.watch(t, 0)
				if got := w.opts.TimeoutSeconds; got == nil || *got < tc.from || *got >= tc.to {
					t.Errorf("timeoutSeconds = %v, want in [%d, %d)", got, tc.from, tc.to)
				}
			})
		})
	}
}

// TestConformanceStreamingList covers client-go TestWatchList ("prove that
// the reflector is synced after receiving a bookmark event", "check if
// Updates and Deletes events are propagated during streaming"),
// TestWatchListResourceVersion and the streaming case of
// TestReflectorListAndWatch: the initial events of a streaming list, changes
// among them included, reach the store as one Replace at the resourceVersion
// of the bookmark that ends them, and the reflector is synced then, not
// before; no LIST is sent; the same stream goes on with live events.
func TestConformanceStreamingList(t *testing.T) {
	bubble(t, func(t *testing.T) {
		d := &driver{}
		r, st := startDriver(t, d, Config[configMap]{})
		w := d.watch(t, 0)
		changed := cmAt("p1", "3")
		changed.Data = map[string]string{"k": "v"}
		for _, e := range []watch.Event{
			{Type: watch.Added, Object: cmAt("p1", "1")},
			{Type: watch.Added, Object: cmAt("p2", "2")},
			{Type: watch.Modified, Object: changed},
			{Type: watch.Added, Object: cmAt("p3", "4")},
			{Type: watch.Deleted, Object: cmAt("p3", "5")},
		} {
			w.send(e.Type, e.Object)
		}
		synctest.Wait()
		if h := r.Health(); h.Synced || h.State != StateListing || h.LastResourceVersion != "" || len(st.Calls()) != 0 {
			t.Fatalf("before the end of the initial events: health %+v, store calls %v", h, st.Calls())
		}
		w.send(watch.Bookmark, endOfInitialEvents("5"))
		synctest.Wait()
		checkCalls(t, st, []storeCall{{op: "replace", rv: "5", size: 2}})
		if h := r.Health(); !h.Synced || h.State != StateWatching || h.LastResourceVersion != "5" {
			t.Errorf("after the end of the initial events: health %+v", h)
		}
		st.mu.Lock()
		if got := st.objs["ns/p1"]; got.Data["k"] != "v" {
			t.Errorf("p1 = %+v, want its modified state", got)
		}
		st.mu.Unlock()
		w.send(watch.Added, cmAt("p4", "6"))
		synctest.Wait()
		checkContents(t, st, []string{"ns/p1@3", "ns/p2@2", "ns/p4@6"})
		checkDriverRequests(t, d, []string{"stream rv="})
		if r.LastSyncResourceVersion() != "6" {
			t.Errorf("LastSyncResourceVersion = %q, want 6", r.LastSyncResourceVersion())
		}
	})
}

// TestConformanceStreamWithoutEndMarker covers client-go TestWatchList ("the
// reflector won't be synced if the bookmark event has not been received",
// "prove that the reflector is checking the value of the initialEventsEnd
// annotation") and TestInitialEventsEndBookmarkTicker: until a bookmark
// annotated "k8s.io/initial-events-end": "true" arrives, the reflector is
// not synced and the store sees nothing; a bookmark annotated "false", or
// not annotated, does not end the initial events. client-go logs a warning
// every 10s while it waits; ctrlkit shows the wait in Health (State
// Listing, not Synced, no failure) instead (see the deviations).
func TestConformanceStreamWithoutEndMarker(t *testing.T) {
	bubble(t, func(t *testing.T) {
		d := &driver{}
		r, st := startDriver(t, d, Config[configMap]{})
		w := d.watch(t, 0)
		w.send(watch.Added, cmAt("p1", "1"))
		w.send(watch.Added, cmAt("p2", "2"))
		notEnd := endOfInitialEvents("2")
		notEnd.Annotations[metav1.InitialEventsAnnotationKey] = "false"
		w.send(watch.Bookmark, notEnd)
		w.send(watch.Bookmark, cmAt("", "2"))
		time.Sleep(time.Minute)
		synctest.Wait()
		h := r.Health()
		if h.Synced || h.State != StateListing || h.LastResourceVersion != "" || h.ConsecutiveFailures != 0 || h.Stats.StreamingLists != 0 {
			t.Errorf("health while waiting for the end of the initial events = %+v", h)
		}
		if calls := st.Calls(); len(calls) != 0 {
			t.Errorf("store calls = %v, want none", calls)
		}
		w.send(watch.Bookmark, endOfInitialEvents("2"))
		synctest.Wait()
		checkCalls(t, st, []storeCall{{op: "replace", rv: "2", size: 2}})
		checkDriverRequests(t, d, []string{"stream rv="})
	})
}

// TestConformanceStreamingFallback covers client-go TestWatchList ("the
// reflector can fall back to old LIST/WATCH semantics when a server doesn't
// support streaming", "returning any other error than apierrors.NewInvalid
// forces fallback", "check if stopping a watcher before sync results in
// creating a new watch-list request"). A server that rejects a streaming
// list as invalid gets LIST requests, starting at "0", for the rest of Run
// (client-go tries streaming again at every relist). Other failures: client-go
// falls back to LIST for that list; ctrlkit backs off and streams again. A
// stream that ends before its initial events do: client-go streams again at
// once; ctrlkit lists by LIST this once in WatchListAuto, and backs off and
// streams again in WatchListOn (see the deviations).
func TestConformanceStreamingFallback(t *testing.T) {
	t.Run("invalid", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			d := &driver{list: func(opts metav1.ListOptions) ([]configMap, metav1.ListMeta, error) {
				if opts.ResourceVersion == "0" {
					return listOf("1", cmAt("p1", "1"))(opts)
				}
				return listOf("2", cmAt("p1", "1"), cmAt("p2", "2"))(opts)
			}, watchErr: func(_ int, opts metav1.ListOptions) error {
				if opts.SendInitialEvents != nil {
					return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "", nil)
				}
				return nil
			}}
			r, st := startDriver(t, d, Config[configMap]{})
			w := d.watch(t, 0)
			w.send(watch.Added, cmAt("p2", "2"))
			w.fail(apierrors.NewResourceExpired("too old resource version"))
			synctest.Wait()
			want := []string{"stream rv=", "list rv=0 limit=500", "watch rv=1", "list rv=2 limit=0", "watch rv=2"}
			checkDriverRequests(t, d, want)
			checkContents(t, st, []string{"ns/p1@1", "ns/p2@2"})
			if h := r.Health(); h.Stats.Failures != 0 || h.LastError != nil {
				t.Errorf("a server without streaming lists is not a failure: %+v", h)
			}
		})
	})
	t.Run("other error", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
			d := &driver{list: listOf("1"), watchErr: refuseWatches(1, errBoom)}
			r, st := startDriver(t, d, Config[configMap]{})
			if h := r.Health(); h.State != StateBackingOff || !errors.Is(h.LastError, errBoom) {
				t.Fatalf("health after the failed stream = %+v", h)
			}
			time.Sleep(time.Second)
			synctest.Wait()
			w := d.watch(t, 0)
			w.send(watch.Added, cmAt("p1", "1"))
			w.send(watch.Bookmark, endOfInitialEvents("1"))
			synctest.Wait()
			checkDriverRequests(t, d, []string{"stream rv=", "stream rv="})
			checkCalls(t, st, []storeCall{{op: "replace", rv: "1", size: 1}})
		})
	})
	for _, tc := range []struct {
		mode WatchListMode
		want []string
	}{
		{WatchListAuto, []string{"stream rv=", "list rv=0 limit=500", "watch rv=1"}},
		{WatchListOn, []string{"stream rv=", "stream rv="}},
	} {
		t.Run("stream ends early/"+tc.mode.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				d := &driver{list: listOf("1", cmAt("p1", "1"))}
				r, st := startDriver(t, d, Config[configMap]{WatchList: tc.mode})
				w := d.watch(t, 0)
				w.send(watch.Added, cmAt("p1", "1"))
				w.end()
				time.Sleep(time.Second)
				synctest.Wait()
				if tc.mode == WatchListOn {
					if h := r.Health(); h.Stats.Failures != 1 || h.Synced {
						t.Errorf("health = %+v, want one failure and no sync yet", h)
					}
					w := d.watch(t, 1)
					w.send(watch.Added, cmAt("p1", "1"))
					w.send(watch.Bookmark, endOfInitialEvents("1"))
					synctest.Wait()
				}
				checkDriverRequests(t, d, tc.want)
				if w.stopped() == 0 {
					t.Error("the stream that ended early was not stopped")
				}
				checkCalls(t, st, []storeCall{{op: "replace", rv: "1", size: 1}})
			})
		})
	}
}

// TestConformanceWatchAfterStreamingList covers client-go TestWatchList
// ("stopping a watcher after synchronization results in creating a new
// watch request", "expiring an established watcher results in returning an
// error from the reflector"): once a streaming list has synced, a stream
// that ends is followed by a plain watch from the last resourceVersion, not
// by another streaming list; when that watch expires, the next list streams
// from the last resourceVersion.
func TestConformanceWatchAfterStreamingList(t *testing.T) {
	bubble(t, func(t *testing.T) {
		d := &driver{}
		_, st := startDriver(t, d, Config[configMap]{})
		w := d.watch(t, 0)
		w.send(watch.Added, cmAt("p1", "1"))
		w.send(watch.Added, cmAt("p2", "2"))
		w.send(watch.Bookmark, endOfInitialEvents("2"))
		w.send(watch.Added, cmAt("p3", "3"))
		time.Sleep(2 * time.Second)
		w.end()
		synctest.Wait()
		w = d.watch(t, 1)
		if o := w.opts; o.SendInitialEvents != nil || o.ResourceVersionMatch != "" || o.ResourceVersion != "3" || !o.AllowWatchBookmarks {
			t.Errorf("watch after the stream: options %+v", o)
		}
		w.send(watch.Added, cmAt("p4", "4"))
		w.fail(apierrors.NewResourceExpired("rv already expired"))
		synctest.Wait()
		checkDriverRequests(t, d, []string{"stream rv=", "watch rv=3", "stream rv=4"})
		if o := d.watch(t, 2).opts; o.SendInitialEvents == nil || !*o.SendInitialEvents || o.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan {
			t.Errorf("streaming relist options %+v", o)
		}
		checkContents(t, st, []string{"ns/p1@1", "ns/p2@2", "ns/p3@3", "ns/p4@4"})
	})
}

// TestConformanceWatchListOff covers client-go
// TestNewReflectorWithDisablementWatchList, TestToListWatcherWithWatchListSemantics
// and the TestWatchList case "the reflector uses the old LIST/WATCH
// semantics if the UseWatchList is turned off". client-go streams when a
// feature gate allows it and the client does not declare that it cannot
// (client-go's fake clients do); ctrlkit decides by Config.WatchList alone
// (see the deviations): WatchListOff never streams, relists included.
func TestConformanceWatchListOff(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{WatchList: true}, 2)
		st := newMemStore[configMap]()
		start(t, New(srv, st, Config[configMap]{WatchList: WatchListOff}))
		synctest.Wait()
		srv.BreakWatches(errExpired)
		synctest.Wait()
		checkInSync(t, srv, st)
		checkRequests(t, srv, []string{"list rv=0 limit=500", "watch rv=2", "list rv=2 limit=0", "watch rv=2"})
		for _, req := range srv.Requests() {
			if req.Options.SendInitialEvents != nil || req.Options.ResourceVersionMatch != "" {
				t.Errorf("request options %+v", req.Options)
			}
		}
	})
}

// TestConformanceTransformRunsOncePerObject covers client-go
// TestReflectorRespectStoreTransformer: with a streaming list, every object
// the store receives, in the Replace and afterwards, has been transformed,
// each exactly once; client-go transforms the initial objects twice, into
// its temporary store and on Replace (see the deviations).
func TestConformanceTransformRunsOncePerObject(t *testing.T) {
	bubble(t, func(t *testing.T) {
		d := &driver{}
		st := newMemStore[configMap]()
		var mu sync.Mutex
		calls := 0
		transform := func(c configMap) (configMap, error) {
			mu.Lock()
			calls++
			mu.Unlock()
			c.Labels = map[string]string{"hostname": "transformed"}
			return c, nil
		}
		r := New[configMap](d, st, Config[configMap]{Transform: transform})
		start(t, r)
		synctest.Wait()
		w := d.watch(t, 0)
		w.send(watch.Added, cmAt("foo-1", "1"))
		w.send(watch.Added, cmAt("foo-2", "2"))
		w.send(watch.Bookmark, endOfInitialEvents("3"))
		w.send(watch.Added, cmAt("foo-3", "3"))
		synctest.Wait()
		if r.LastSyncResourceVersion() != "3" {
			t.Errorf("LastSyncResourceVersion = %q, want 3", r.LastSyncResourceVersion())
		}
		st.mu.Lock()
		for k, o := range st.objs {
			if o.Labels["hostname"] != "transformed" {
				t.Errorf("%s stored untransformed", k)
			}
		}
		if len(st.objs) != 3 {
			t.Errorf("store holds %d objects, want 3", len(st.objs))
		}
		st.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		if calls != 3 {
			t.Errorf("Transform called %d times for 3 objects", calls)
		}
	})
}

// TestConformanceUnstructured covers client-go
// TestGetTypeDescriptionFromObject and, for the dynamic client,
// TestReflectorListAndWatch: a reflector of *unstructured.Unstructured is
// named after that Go type unless Config.Name says otherwise (client-go
// describes it by the GroupVersionKind of an example object, see the
// deviations), and an Error event whose Status arrives in unstructured form,
// as the dynamic client decodes it, is understood: 410 relists.
func TestConformanceUnstructured(t *testing.T) {
	type U = *unstructured.Unstructured
	obj := func(name, rv string) U {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("mygroup/v1")
		u.SetKind("MyKind")
		u.SetNamespace("ns")
		u.SetName(name)
		u.SetResourceVersion(rv)
		return u
	}
	bubble(t, func(t *testing.T) {
		var mu sync.Mutex
		var lists []string
		var watches []*watch.RaceFreeFakeWatcher
		lw := Funcs[U]{
			ListFunc: func(_ context.Context, opts metav1.ListOptions) ([]U, metav1.ListMeta, error) {
				mu.Lock()
				defer mu.Unlock()
				lists = append(lists, opts.ResourceVersion)
				if opts.ResourceVersion == "0" {
					return []U{obj("a", "5")}, metav1.ListMeta{ResourceVersion: "5"}, nil
				}
				return []U{obj("a", "5"), obj("b", "6")}, metav1.ListMeta{ResourceVersion: "6"}, nil
			},
			WatchFunc: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
				mu.Lock()
				defer mu.Unlock()
				w := watch.NewRaceFreeFake()
				watches = append(watches, w)
				return w, nil
			},
		}
		st := newMemStore[U]()
		r := New[U](lw, st, Config[U]{WatchList: WatchListOff})
		if r.Name() != "*unstructured.Unstructured" {
			t.Errorf("Name() = %q", r.Name())
		}
		if got := New[U](lw, st, Config[U]{Name: "mygroup/v1, Kind=MyKind"}).Name(); got != "mygroup/v1, Kind=MyKind" {
			t.Errorf("Name() with Config.Name = %q", got)
		}
		start(t, r)
		synctest.Wait()
		status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ptrTo(apierrors.NewResourceExpired("too old resource version").Status()))
		if err != nil {
			t.Fatal(err)
		}
		expired := &unstructured.Unstructured{Object: status}
		expired.SetAPIVersion("v1")
		expired.SetKind("Status")
		mu.Lock()
		w := watches[0]
		mu.Unlock()
		w.Add(obj("b", "6"))
		w.Error(expired)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]string{"0", "6"}, lists); diff != "" {
			t.Errorf("resourceVersions listed (-want +got):\n%s", diff)
		}
		checkCalls(t, st, []storeCall{
			{op: "replace", rv: "5", size: 1},
			{op: "add", key: "ns/b", rv: "6"},
			{op: "replace", rv: "6", size: 2},
		})
		if h := r.Health(); h.Stats.Expired != 1 || h.Stats.Failures != 0 || len(watches) != 2 {
			t.Errorf("health = %+v after %d watches", h, len(watches))
		}
	})
}

func ptrTo[T any](v T) *T { return &v }
