package reflector

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

type configMap = *corev1.ConfigMap

var (
	errExpired     = apierrors.NewResourceExpired("too old resource version: 1 (5)")
	errUnavailable = apierrors.NewServiceUnavailable("etcd is down")
	gr             = schema.GroupResource{Resource: "configmaps"}
)

func checkRequests(t *testing.T, srv *reflectortest.Server[configMap], want []string) {
	t.Helper()
	if diff := cmp.Diff(want, describe(srv.Requests())); diff != "" {
		t.Fatalf("requests (-want +got):\n%s", diff)
	}
}

func checkInSync(t *testing.T, srv *reflectortest.Server[configMap], st *memStore[configMap]) {
	t.Helper()
	if diff := cmp.Diff(serverContents(srv), st.Contents()); diff != "" {
		t.Fatalf("store differs from server (-server +store):\n%s", diff)
	}
}

func checkStats(t *testing.T, r *Reflector[configMap], want Stats) {
	t.Helper()
	if diff := cmp.Diff(want, r.Health().Stats); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

func TestStreamingListThenWatch(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{WatchList: true}, 3)
		st := newMemStore[configMap]()
		r := New(srv, st, Config[configMap]{})
		if h := r.Health(); h.State != StateStopped || h.Synced {
			t.Fatalf("health before Run = %+v", h)
		}
		start(t, r)
		synctest.Wait()

		checkInSync(t, srv, st)
		checkRequests(t, srv, []string{"stream rv="})
		o := srv.Requests()[0].Options
		if o.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan || !o.AllowWatchBookmarks || o.TimeoutSeconds == nil {
			t.Errorf("streaming options = %+v", o)
		}
		h := r.Health()
		if h.State != StateWatching || !h.Synced || h.LastResourceVersion != "3" || h.LastEventTime.IsZero() {
			t.Errorf("health after sync = %+v", h)
		}

		// The same stream goes on with live events.
		c := mustCreate(t, srv, cm("ns", "new"))
		c.Data = map[string]string{"k": "v"}
		if _, err := srv.Update(c); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Delete("ns", "cm-0"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		checkInSync(t, srv, st)
		want := []storeCall{
			{op: "replace", rv: "3", size: 3},
			{op: "add", key: "ns/new", rv: "4"},
			{op: "update", key: "ns/new", rv: "5"},
			{op: "delete", key: "ns/cm-0", rv: "6"},
		}
		if diff := cmp.Diff(want, st.Calls(), cmp.AllowUnexported(storeCall{})); diff != "" {
			t.Errorf("store calls (-want +got):\n%s", diff)
		}
		if got := r.LastSyncResourceVersion(); got != "6" {
			t.Errorf("LastSyncResourceVersion = %q, want 6", got)
		}
		checkRequests(t, srv, []string{"stream rv="})
		checkStats(t, r, Stats{StreamingLists: 1, Events: 3, ListedObjects: 3})
	})
}

func TestListThenWatch(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{WatchList: true}, 3)
		st := newMemStore[configMap]()
		r := New(srv, st, Config[configMap]{WatchList: WatchListOff})
		start(t, r)
		synctest.Wait()
		checkInSync(t, srv, st)
		checkRequests(t, srv, []string{"list rv=0 limit=500", "watch rv=3"})
		if o := srv.Requests()[1].Options; !o.AllowWatchBookmarks || o.SendInitialEvents != nil || o.ResourceVersionMatch != "" {
			t.Errorf("watch options = %+v", o)
		}
		mustCreate(t, srv, cm("ns", "new"))
		synctest.Wait()
		checkInSync(t, srv, st)
		checkStats(t, r, Stats{Lists: 1, Watches: 1, Events: 1, ListedObjects: 3})
		if h := r.Health(); h.State != StateWatching || h.LastResourceVersion != "4" {
			t.Errorf("health = %+v", h)
		}
	})
}

func TestAutoFallsBackToListWhenStreamingIsRejected(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{WatchList: false}, 3)
		st := newMemStore[configMap]()
		var errs []error
		r := New(srv, st, Config[configMap]{OnError: func(err error) { errs = append(errs, err) }})
		start(t, r)
		synctest.Wait()
		checkInSync(t, srv, st)
		checkRequests(t, srv, []string{"stream rv=", "list rv=0 limit=500", "watch rv=3"})
		if h := r.Health(); h.ConsecutiveFailures != 0 || h.LastError != nil || len(errs) != 0 {
			t.Errorf("a rejected streaming list is not a failure: health %+v, OnError %v", h, errs)
		}

		// Later relists go straight to LIST.
		srv.BreakWatches(errExpired)
		synctest.Wait()
		checkRequests(t, srv, []string{"stream rv=", "list rv=0 limit=500", "watch rv=3", "list rv=3 limit=0", "watch rv=3"})
		checkStats(t, r, Stats{Lists: 2, Watches: 2, Expired: 1, ListedObjects: 6})
	})
}

func TestWatchListOnRetriesInsteadOfFallingBack(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{WatchList: false}, 3)
		st := newMemStore[configMap]()
		r := New(srv, st, Config[configMap]{WatchList: WatchListOn})
		start(t, r)
		time.Sleep(time.Minute)
		synctest.Wait()
		reqs := describe(srv.Requests())
		if len(reqs) < 3 {
			t.Fatalf("requests = %v, want repeated streaming attempts", reqs)
		}
		for _, d := range reqs {
			if d != "stream rv=" {
				t.Fatalf("requests = %v, want only streaming lists", reqs)
			}
		}
		h := r.Health()
		if h.Synced || h.State != StateBackingOff || !apierrors.IsInvalid(h.LastError) || h.ConsecutiveFailures != len(reqs) {
			t.Errorf("health = %+v", h)
		}
		if len(st.Calls()) != 0 {
			t.Errorf("store calls = %v, want none", st.Calls())
		}
	})
}

func TestPaginatedList(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{PaginateAtZero: true}, 1200)
		st := newMemStore[configMap]()
		r := New(srv, st, Config[configMap]{WatchList: WatchListOff})
		start(t, r)
		synctest.Wait()
		checkInSync(t, srv, st)
		checkRequests(t, srv, []string{
			"list rv=0 limit=500", "list continue limit=500", "list continue limit=500", "watch rv=1200",
		})
		// One Replace with everything: pages are never stored on their own.
		want := []storeCall{{op: "replace", rv: "1200", size: 1200}}
		if diff := cmp.Diff(want, st.Calls(), cmp.AllowUnexported(storeCall{})); diff != "" {
			t.Errorf("store calls (-want +got):\n%s", diff)
		}

		// The server paginated at "0", so it has no watch cache for this
		// resource: relists keep paging.
		srv.BreakWatches(errExpired)
		synctest.Wait()
		checkInSync(t, srv, st)
		got := describe(srv.Requests())[4:]
		want2 := []string{"list rv=1200 limit=500", "list continue limit=500", "list continue limit=500", "watch rv=1200"}
		if diff := cmp.Diff(want2, got); diff != "" {
			t.Errorf("relist requests (-want +got):\n%s", diff)
		}
	})
}

func TestWatchCacheIgnoringLimitAtZero(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 1200)
		st := newMemStore[configMap]()
		r := New(srv, st, Config[configMap]{WatchList: WatchListOff, PageSize: 100})
		start(t, r)
		synctest.Wait()
		checkInSync(t, srv, st)
		// A relist at a known resourceVersion is not paginated, so the
		// watch cache can serve it.
		srv.BreakWatches(errExpired)
		synctest.Wait()
		checkRequests(t, srv, []string{"list rv=0 limit=100", "watch rv=1200", "list rv=1200 limit=0", "watch rv=1200"})
	})
}

func TestPageSizeNegativeDisablesPagination(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{PaginateAtZero: true}, 20)
		st := newMemStore[configMap]()
		start(t, New(srv, st, Config[configMap]{WatchList: WatchListOff, PageSize: -1}))
		synctest.Wait()
		checkInSync(t, srv, st)
		checkRequests(t, srv, []string{"list rv=0 limit=0", "watch rv=20"})
	})
}

func TestContinueTokenExpired(t *testing.T) {
	for _, tc := range []struct {
		name     string
		compacts int // how many continue requests compact the server first
		want     []string
	}{
		{"once", 1, []string{
			"list rv=0 limit=500", "list continue limit=500", // 410: start again at the most recent
			"list rv= limit=500", "list continue limit=500", "list continue limit=500",
			"watch rv=1201",
		}},
		{"twice", 2, []string{
			"list rv=0 limit=500", "list continue limit=500",
			"list rv= limit=500", "list continue limit=500", // 410 again: one whole list
			"list rv= limit=0",
			"watch rv=1202",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				srv := newServer(t, reflectortest.Config{PaginateAtZero: true}, 1200)
				var mu sync.Mutex
				left := tc.compacts
				srv.SetHook(func(req reflectortest.Request) error {
					mu.Lock()
					defer mu.Unlock()
					if req.Verb == reflectortest.List && req.Options.Continue != "" && left > 0 {
						// The list's snapshot falls behind the compacted
						// history.
						left--
						if _, err := srv.Update(cm("ns", "cm-7")); err != nil {
							return err
						}
						srv.Compact()
					}
					return nil
				})
				st := newMemStore[configMap]()
				r := New(srv, st, Config[configMap]{WatchList: WatchListOff})
				start(t, r)
				synctest.Wait()
				checkRequests(t, srv, tc.want)
				checkInSync(t, srv, st)
				if h := r.Health(); h.Stats.Expired != int64(tc.compacts) || h.Stats.Failures != 0 || len(st.Calls()) != 1 {
					t.Errorf("health = %+v, store calls %v", h, st.Calls())
				}
			})
		})
	}
}

// TestRelistAfterCompaction: while the reflector cannot watch, objects are
// deleted, created and the history compacted. Its watch from the old
// resourceVersion then gets 410 and it relists; the store ends up equal to
// the server, without the deleted objects.
func TestRelistAfterCompaction(t *testing.T) {
	for _, mode := range []WatchListMode{WatchListOff, WatchListOn} {
		t.Run(mode.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				srv := newServer(t, reflectortest.Config{WatchList: true}, 5)
				st := newMemStore[configMap]()
				r := New(srv, st, Config[configMap]{WatchList: mode})
				start(t, r)
				synctest.Wait()
				checkInSync(t, srv, st)

				var mu sync.Mutex
				down := true
				srv.SetHook(func(req reflectortest.Request) error {
					mu.Lock()
					defer mu.Unlock()
					if down {
						return errUnavailable
					}
					return nil
				})
				time.Sleep(2 * time.Second) // past the short-watch guard
				srv.CloseWatches()
				synctest.Wait()
				if h := r.Health(); h.State != StateBackingOff || !apierrors.IsServiceUnavailable(h.LastError) {
					t.Fatalf("health while the server is down = %+v", h)
				}
				for _, name := range []string{"cm-0", "cm-3"} {
					if _, err := srv.Delete("ns", name); err != nil {
						t.Fatal(err)
					}
				}
				mustCreate(t, srv, cm("ns", "late"))
				srv.Compact()
				mu.Lock()
				down = false
				mu.Unlock()

				time.Sleep(time.Minute)
				synctest.Wait()
				checkInSync(t, srv, st)
				calls := st.Calls()
				if last := calls[len(calls)-1]; last.op != "replace" || last.rv != "8" || last.size != 4 {
					t.Errorf("last store call = %v, want replace(4)@8", last)
				}
				h := r.Health()
				if h.Stats.Expired != 1 || h.ConsecutiveFailures != 0 || h.State != StateWatching || h.LastResourceVersion != "8" {
					t.Errorf("health = %+v", h)
				}
			})
		})
	}
}

func TestTooLargeResourceVersionRelistsAtMostRecent(t *testing.T) {
	for _, tc := range []struct {
		mode WatchListMode
		want []string
	}{
		{WatchListOff, []string{"list rv=0 limit=500", "watch rv=3", "watch rv=3", "list rv= limit=500", "watch rv=3"}},
		{WatchListOn, []string{"stream rv=", "watch rv=3", "stream rv="}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				srv := newServer(t, reflectortest.Config{WatchList: true}, 3)
				st := newMemStore[configMap]()
				r := New(srv, st, Config[configMap]{WatchList: tc.mode})
				start(t, r)
				synctest.Wait()
				time.Sleep(2 * time.Second) // past the short-watch guard
				tooLarge := apierrors.NewTimeoutError("Too large resource version: 9, current: 3", 1)
				tooLarge.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge}}
				srv.FailNext(reflectortest.Watch, tooLarge)
				srv.CloseWatches()
				synctest.Wait()
				checkRequests(t, srv, tc.want)
				checkInSync(t, srv, st)
				if h := r.Health(); h.Stats.Expired != 1 || h.Stats.Failures != 0 {
					t.Errorf("health = %+v", h)
				}
			})
		})
	}
}

func TestStreamingExpiredAtLastResourceVersion(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{WatchList: true}, 3)
		st := newMemStore[configMap]()
		r := New(srv, st, Config[configMap]{})
		start(t, r)
		synctest.Wait()
		// The watch expires; the streaming relist at the last resourceVersion
		// expires too; the next one asks for the most recent.
		srv.FailNext(reflectortest.Watch, errExpired)
		srv.BreakWatches(errExpired)
		synctest.Wait()
		checkRequests(t, srv, []string{"stream rv=", "stream rv=3", "stream rv="})
		checkInSync(t, srv, st)
		if h := r.Health(); h.Stats.Expired != 2 || h.Stats.Failures != 0 || h.Stats.StreamingLists != 2 {
			t.Errorf("health = %+v", h)
		}
	})
}

func TestExpiredAgainWithoutProgressBacksOff(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 3)
		srv.SetHook(func(req reflectortest.Request) error {
			if req.Verb == reflectortest.Watch {
				return errExpired
			}
			return nil
		})
		st := newMemStore[configMap]()
		r := New(srv, st, Config[configMap]{WatchList: WatchListOff})
		start(t, r)
		time.Sleep(time.Minute)
		synctest.Wait()
		reqs := srv.Requests()
		// Backoff delays of at least 0.4s, 0.8s, 1.6s, … and at most 30s
		// leave room for a dozen relists a minute at most, not thousands.
		if len(reqs) > 30 {
			t.Fatalf("%d requests in a minute: the reflector spins", len(reqs))
		}
		h := r.Health()
		if h.Stats.Failures < 4 || !apierrors.IsResourceExpired(h.LastError) {
			t.Errorf("health = %+v", h)
		}
	})
}

func TestCleanWatchEndRewatchesAtOnce(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 3)
		watches := watchTimes(srv)
		st := newMemStore[configMap]()
		r := New(srv, st, Config[configMap]{WatchList: WatchListOff})
		start(t, r)
		synctest.Wait()
		time.Sleep(2 * time.Second)
		mustCreate(t, srv, cm("ns", "a"))
		synctest.Wait()
		closed := time.Now()
		srv.CloseWatches()
		mustCreate(t, srv, cm("ns", "b"))
		synctest.Wait()
		checkRequests(t, srv, []string{"list rv=0 limit=500", "watch rv=3", "watch rv=4"})
		checkInSync(t, srv, st)
		if at := watches(); !at[1].Equal(closed) {
			t.Errorf("rewatched %v after the watch ended, want at once", at[1].Sub(closed))
		}
		if h := r.Health(); h.Stats.Failures != 0 || h.State != StateWatching {
			t.Errorf("health = %+v", h)
		}
	})
}

// closingLW wraps a ListerWatcher; its watches end as soon as they have
// passed on n events.
type closingLW struct {
	ListerWatcher[configMap]
	n int
}

func (c closingLW) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := c.ListerWatcher.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := make(chan watch.Event)
	fw := &forwardingWatch{in: w, out: out, done: make(chan struct{})}
	go func() {
		defer close(out)
		defer w.Stop()
		for i := 0; i < c.n; i++ {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				select {
				case out <- ev:
				case <-fw.done:
					return
				}
			case <-fw.done:
				return
			}
		}
	}()
	return fw, nil
}

type forwardingWatch struct {
	in   watch.Interface
	out  chan watch.Event
	done chan struct{}
	once sync.Once
}

func (f *forwardingWatch) Stop()                          { f.once.Do(func() { close(f.done) }) }
func (f *forwardingWatch) ResultChan() <-chan watch.Event { return f.out }

func TestShortWatchesBackOff(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 3)
		st := newMemStore[configMap]()
		r := New[configMap](closingLW{srv, 0}, st, Config[configMap]{WatchList: WatchListOff})
		start(t, r)
		time.Sleep(time.Minute)
		synctest.Wait()
		watches := len(requestsOf(srv.Requests(), reflectortest.Watch))
		// Delays of at least 0.4+0.8+1.6+3.2+6.4+12.8+15 s leave room for
		// about eight watches in a minute.
		if watches < 5 || watches > 10 {
			t.Errorf("%d watches in a minute, want 5 to 10", watches)
		}
		h := r.Health()
		if !errors.Is(h.LastError, errShortWatch) || h.ConsecutiveFailures != watches {
			t.Errorf("health = %+v", h)
		}
	})
}

func TestStreamEndingBeforeInitialEventsEnd(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{WatchList: true}, 3)
		st := newMemStore[configMap]()
		// Auto: the stream loses its end marker; LIST instead, this once.
		r := New[configMap](closingLW{srv, 2}, st, Config[configMap]{})
		start(t, r)
		synctest.Wait()
		checkInSync(t, srv, st)
		want := []string{"stream rv=", "list rv=0 limit=500", "watch rv=3"}
		if diff := cmp.Diff(want, describe(srv.Requests())[:3]); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
		if h := r.Health(); h.Stats.Lists != 1 || h.Stats.StreamingLists != 0 || h.Stats.Failures != 0 {
			t.Errorf("health = %+v", h)
		}
	})
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{WatchList: true}, 3)
		st := newMemStore[configMap]()
		// On: a failure, retried.
		r := New[configMap](closingLW{srv, 2}, st, Config[configMap]{WatchList: WatchListOn})
		start(t, r)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		h := r.Health()
		if h.Synced || h.Stats.Failures < 2 || !strings.Contains(fmt.Sprint(h.LastError), "before the end of its initial events") {
			t.Errorf("health = %+v", h)
		}
		if len(st.Calls()) != 0 {
			t.Errorf("store calls = %v, want none", st.Calls())
		}
	})
}

func TestAccessErrors(t *testing.T) {
	unauthorized := apierrors.NewUnauthorized("bad token")
	for _, tc := range []struct {
		name     string
		mode     WatchListMode
		verb     reflectortest.Verb
		err      error // nil: Forbid(verb)
		wantVerb string
		sentinel error
	}{
		{"list forbidden", WatchListOff, reflectortest.List, nil, "list", ErrForbidden},
		{"watch forbidden", WatchListOff, reflectortest.Watch, nil, "watch", ErrForbidden},
		{"stream forbidden", WatchListAuto, reflectortest.Watch, nil, "watch", ErrForbidden},
		{"list unauthorized", WatchListOff, reflectortest.List, unauthorized, "list", ErrUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				srv := newServer(t, reflectortest.Config{WatchList: true}, 3)
				var mu sync.Mutex
				deny := true
				if tc.err == nil {
					srv.Forbid(tc.verb, true)
				} else {
					srv.SetHook(func(req reflectortest.Request) error {
						mu.Lock()
						defer mu.Unlock()
						if deny && req.Verb == tc.verb {
							return tc.err
						}
						return nil
					})
				}
				st := newMemStore[configMap]()
				var seen []error
				r := New(srv, st, Config[configMap]{
					WatchList: tc.mode,
					OnError:   func(err error) { mu.Lock(); seen = append(seen, err); mu.Unlock() },
				})
				t0 := time.Now()
				start(t, r)
				synctest.Wait()

				// Visible at once, typed, and checkable three ways.
				h := r.Health()
				var ae *AccessError
				if !errors.As(h.LastError, &ae) || ae.Verb != tc.wantVerb {
					t.Fatalf("LastError = %#v, want an *AccessError for %s", h.LastError, tc.wantVerb)
				}
				if !errors.Is(h.LastError, tc.sentinel) || errors.Is(h.LastError, otherSentinel(tc.sentinel)) {
					t.Errorf("errors.Is(%v, %v) fails", h.LastError, tc.sentinel)
				}
				if !apierrors.IsForbidden(h.LastError) && !apierrors.IsUnauthorized(h.LastError) {
					t.Errorf("apierrors does not see through %v", h.LastError)
				}
				if !time.Now().Equal(t0) {
					t.Errorf("error surfaced after %v, want at once", time.Since(t0))
				}
				mu.Lock()
				if len(seen) != 1 || seen[0] != h.LastError {
					t.Errorf("OnError got %v, want %v", seen, h.LastError)
				}
				mu.Unlock()

				// It keeps retrying, with backoff…
				time.Sleep(30 * time.Second)
				synctest.Wait()
				n := len(requestsOf(srv.Requests(), tc.verb))
				if n < 3 || n > 15 {
					t.Errorf("%d %s requests in 30s, want a few retries", n, tc.verb)
				}
				// … and syncs once access is granted.
				srv.Forbid(tc.verb, false)
				mu.Lock()
				deny = false
				mu.Unlock()
				time.Sleep(time.Minute)
				synctest.Wait()
				checkInSync(t, srv, st)
				if h := r.Health(); !h.Synced || h.State != StateWatching || h.ConsecutiveFailures != 0 {
					t.Errorf("health after access granted = %+v", h)
				}
			})
		})
	}
}

func otherSentinel(err error) error {
	if err == ErrForbidden {
		return ErrUnauthorized
	}
	return ErrForbidden
}

func TestBackoffDelaysGrowWithJitterAndCap(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 1)
		var mu sync.Mutex
		var times []time.Time
		srv.SetHook(func(reflectortest.Request) error {
			mu.Lock()
			defer mu.Unlock()
			times = append(times, time.Now())
			return errUnavailable
		})
		st := newMemStore[configMap]()
		r := New(srv, st, Config[configMap]{WatchList: WatchListOff})
		start(t, r)
		synctest.Wait()
		if h := r.Health(); h.State != StateBackingOff || h.RetryAt.Sub(time.Now()) > 800*time.Millisecond || h.RetryAt.Sub(time.Now()) <= 400*time.Millisecond {
			t.Fatalf("health after the first failure = %+v", h)
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		base := 800 * time.Millisecond
		for i := 1; i < len(times); i++ {
			d := times[i].Sub(times[i-1])
			if d > base || d <= base/2 {
				t.Errorf("delay %d = %v, want in (%v, %v]", i, d, base/2, base)
			}
			base = min(2*base, 30*time.Second)
		}
		if base != 30*time.Second {
			t.Errorf("after %d attempts the delay base is %v, want the 30s cap", len(times), base)
		}
		if h := r.Health(); h.ConsecutiveFailures != len(times) || h.Stats.Failures != int64(len(times)) {
			t.Errorf("health = %+v after %d attempts", h, len(times))
		}
	})
}

func TestBackoffResetsAfterHealthyPeriod(t *testing.T) {
	for _, tc := range []struct {
		healthy  time.Duration
		reset    bool
		maxDelay time.Duration
	}{
		{healthy: 3 * time.Minute, reset: true, maxDelay: 800 * time.Millisecond},
		{healthy: time.Minute, reset: false},
	} {
		t.Run(fmt.Sprint(tc.healthy), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				srv := newServer(t, reflectortest.Config{}, 1)
				var mu sync.Mutex
				failWatches := true
				srv.SetHook(func(req reflectortest.Request) error {
					mu.Lock()
					defer mu.Unlock()
					if failWatches && req.Verb == reflectortest.Watch {
						return errUnavailable
					}
					return nil
				})
				st := newMemStore[configMap]()
				r := New(srv, st, Config[configMap]{WatchList: WatchListOff})
				start(t, r)
				time.Sleep(time.Minute) // the delays grow to the cap
				mu.Lock()
				failWatches = false
				mu.Unlock()
				time.Sleep(30 * time.Second) // the next retry succeeds
				synctest.Wait()
				if h := r.Health(); h.State != StateWatching {
					t.Fatalf("health = %+v", h)
				}
				time.Sleep(tc.healthy)
				mu.Lock()
				failWatches = true
				mu.Unlock()
				srv.CloseWatches()
				synctest.Wait()
				h := r.Health()
				delay := h.RetryAt.Sub(time.Now())
				if h.State != StateBackingOff {
					t.Fatalf("health = %+v", h)
				}
				if tc.reset && delay > tc.maxDelay {
					t.Errorf("after %v healthy the delay is %v, want at most %v", tc.healthy, delay, tc.maxDelay)
				}
				if !tc.reset && delay <= 8*time.Second {
					t.Errorf("after only %v healthy the delay is %v, want it still high", tc.healthy, delay)
				}
			})
		})
	}
}

func TestWatchTimeoutsAreRandomizedAndRenewed(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 1)
		st := newMemStore[configMap]()
		r := New(srv, st, Config[configMap]{WatchList: WatchListOff, MinWatchTimeout: 10 * time.Second})
		start(t, r)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		watches := requestsOf(srv.Requests(), reflectortest.Watch)
		// Each watch lasts 10–20s, then the next starts at once.
		if len(watches) < 30 || len(watches) > 61 {
			t.Errorf("%d watches in 10 minutes, want 30 to 61", len(watches))
		}
		seen := map[int64]bool{}
		for _, w := range watches {
			s := *w.Options.TimeoutSeconds
			if s < 10 || s >= 20 {
				t.Errorf("timeoutSeconds = %d, want in [10, 20)", s)
			}
			if w.Options.ResourceVersion != "1" {
				t.Errorf("watch from %q, want 1", w.Options.ResourceVersion)
			}
			seen[s] = true
		}
		if len(seen) < 3 {
			t.Errorf("timeouts %v are not randomized", seen)
		}
		checkStats(t, r, Stats{Lists: 1, Watches: int64(len(watches)), ListedObjects: 1})
	})
}

func TestDefaultWatchTimeout(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 1)
		start(t, New(srv, newMemStore[configMap](), Config[configMap]{WatchList: WatchListOff}))
		synctest.Wait()
		w := requestsOf(srv.Requests(), reflectortest.Watch)
		if len(w) != 1 || *w[0].Options.TimeoutSeconds < 300 || *w[0].Options.TimeoutSeconds >= 600 {
			t.Errorf("watch requests = %+v, want one with a timeout in [300, 600)", w)
		}
	})
}

func TestClientEndsWatchTheServerForgot(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{IgnoreWatchTimeout: true}, 1)
		var mu sync.Mutex
		var times []time.Time
		srv.SetHook(func(req reflectortest.Request) error {
			mu.Lock()
			defer mu.Unlock()
			times = append(times, time.Now())
			return nil
		})
		st := newMemStore[configMap]()
		r := New(srv, st, Config[configMap]{WatchList: WatchListOff, MinWatchTimeout: 10 * time.Second})
		start(t, r)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		watches := requestsOf(srv.Requests(), reflectortest.Watch)
		mu.Lock()
		defer mu.Unlock()
		if len(watches) < 3 {
			t.Fatalf("%d watches, want the client to end and renew them", len(watches))
		}
		for i := 2; i < len(times); i++ {
			want := time.Duration(*watches[i-2].Options.TimeoutSeconds)*time.Second + watchGrace
			if got := times[i].Sub(times[i-1]); got != want {
				t.Errorf("watch %d lasted %v, want %v", i-1, got, want)
			}
		}
		if srv.OpenWatches() != 1 {
			t.Errorf("%d open watches, want 1", srv.OpenWatches())
		}
	})
}

func TestTransform(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := reflectortest.NewServer[configMap](reflectortest.Config{WatchList: true})
		withFields := cm("ns", "a")
		withFields.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
		mustCreate(t, srv, withFields)
		st := newMemStore[configMap]()
		var mu sync.Mutex
		var calls int
		r := New(srv, st, Config[configMap]{Transform: func(c configMap) (configMap, error) {
			mu.Lock()
			calls++
			mu.Unlock()
			c, _ = StripManagedFields(c)
			c.Labels = map[string]string{"seen": "yes"}
			return c, nil
		}})
		start(t, r)
		synctest.Wait()
		b := cm("ns", "b")
		b.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
		mustCreate(t, srv, b)
		if _, err := srv.Delete("ns", "a"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		st.mu.Lock()
		for k, o := range st.objs {
			if o.ManagedFields != nil || o.Labels["seen"] != "yes" {
				t.Errorf("%s stored untransformed: %+v", k, o.ObjectMeta)
			}
		}
		st.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		if calls != 3 { // list item, Added, Deleted
			t.Errorf("transform called %d times, want 3", calls)
		}
	})
}

func TestBookmarks(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 2)
		st := newMemStore[configMap]()
		r := New(srv, st, Config[configMap]{WatchList: WatchListOff})
		start(t, r)
		synctest.Wait()
		// Changes this reflector's selector hides move the server's
		// resourceVersion; a bookmark tells the reflector.
		for i := range 3 {
			if _, err := srv.Update(cm("ns", "cm-"+strconv.Itoa(i%2))); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		srv.Bookmark()
		synctest.Wait()
		if got := r.LastSyncResourceVersion(); got != "5" {
			t.Errorf("LastSyncResourceVersion = %q, want 5", got)
		}
		calls := st.Calls()
		if last := calls[len(calls)-1]; last.op != "bookmark" || last.rv != "5" {
			t.Errorf("last store call = %v, want bookmark@5", last)
		}
		// A later watch starts from the bookmark.
		time.Sleep(2 * time.Second)
		srv.CloseWatches()
		synctest.Wait()
		checkRequests(t, srv, []string{"list rv=0 limit=500", "watch rv=2", "watch rv=5"})
		if h := r.Health(); h.Stats.Events != 3 {
			t.Errorf("events = %d, want 3 (bookmarks are not events)", h.Stats.Events)
		}
	})
}

func TestSelectors(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := reflectortest.NewServer[configMap](reflectortest.Config{WatchList: true})
		mustCreate(t, srv, cm("a", "x", "app", "web"))
		mustCreate(t, srv, cm("a", "y", "app", "db"))
		mustCreate(t, srv, cm("b", "z", "app", "web"))
		st := newMemStore[configMap]()
		r := New(srv, st, Config[configMap]{LabelSelector: "app=web", FieldSelector: "metadata.namespace=a"})
		start(t, r)
		synctest.Wait()
		if diff := cmp.Diff([]string{"a/x@1"}, st.Contents()); diff != "" {
			t.Errorf("store (-want +got):\n%s", diff)
		}
		// y enters the selection; x leaves it.
		if _, err := srv.Update(cm("a", "y", "app", "web")); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Update(cm("a", "x", "app", "db")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if diff := cmp.Diff([]string{"a/y@4"}, st.Contents()); diff != "" {
			t.Errorf("store (-want +got):\n%s", diff)
		}
		for _, req := range srv.Requests() {
			if req.Options.LabelSelector != "app=web" || req.Options.FieldSelector != "metadata.namespace=a" {
				t.Errorf("request options = %+v", req.Options)
			}
		}
	})
}

func TestInvalidConfig(t *testing.T) {
	srv := newServer(t, reflectortest.Config{}, 1)
	for _, cfg := range []Config[configMap]{
		{LabelSelector: "app in (web"},
		{FieldSelector: "metadata.name"},
		{WatchList: WatchListMode(7)},
		{Backoff: Backoff{Initial: -time.Second}},
		{Backoff: Backoff{Initial: time.Minute, Max: time.Second}},
		{Backoff: Backoff{Factor: 0.5}},
		{Backoff: Backoff{Jitter: 2}},
		{MinWatchTimeout: -time.Second},
	} {
		r := New(srv, newMemStore[configMap](), cfg)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := r.Run(ctx)
		cancel()
		if err == nil || !strings.HasPrefix(err.Error(), "reflector: ") {
			t.Errorf("Run with %+v = %v, want a reflector error", cfg, err)
		}
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests sent with an invalid config", n)
	}
}

func TestStoreErrorsAreRetriedWithoutLosingEvents(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 2)
		st := newMemStore[configMap]()
		failures := map[string]int{"replace": 1, "add": 2}
		st.setFail(func(op string) error {
			if failures[op] > 0 {
				failures[op]--
				return errBoom
			}
			return nil
		})
		r := New(srv, st, Config[configMap]{WatchList: WatchListOff})
		start(t, r)
		synctest.Wait()
		if h := r.Health(); h.Synced || !errors.Is(h.LastError, errBoom) || !strings.Contains(h.LastError.Error(), "store: replace") {
			t.Fatalf("health after a failed Replace = %+v", h)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		checkInSync(t, srv, st)
		mustCreate(t, srv, cm("ns", "new"))
		time.Sleep(time.Minute)
		synctest.Wait()
		// The Added event failed twice, and was delivered again by a watch
		// from the resourceVersion before it.
		checkInSync(t, srv, st)
		checkRequests(t, srv, []string{"list rv=0 limit=500", "list rv=0 limit=500", "watch rv=2", "watch rv=2", "watch rv=2"})
		if h := r.Health(); h.Stats.Failures != 3 || h.ConsecutiveFailures != 0 {
			t.Errorf("health = %+v", h)
		}
	})
}

type unexpectedLW struct {
	ListerWatcher[configMap]
	obj runtime.Object
	typ watch.EventType
}

func (u unexpectedLW) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w := watch.NewRaceFreeFake()
	w.Action(u.typ, u.obj)
	return w, nil
}

func TestUnexpectedWatchEvents(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  watch.EventType
		obj  runtime.Object
		want string
	}{
		{"wrong type", watch.Added, &corev1.Secret{}, "ADDED event carries *v1.Secret, want *v1.ConfigMap"},
		{"nil object", watch.Modified, (*corev1.ConfigMap)(nil), "MODIFIED event carries *v1.ConfigMap"},
		{"unknown event", watch.EventType("SURPRISE"), &corev1.ConfigMap{}, `unknown watch event type "SURPRISE"`},
		{"error without status", watch.Error, &corev1.ConfigMap{}, "unexpected object"},
		{"bookmark without metadata", watch.Bookmark, &metav1.Status{}, "bookmark carries *v1.Status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				srv := newServer(t, reflectortest.Config{}, 1)
				st := newMemStore[configMap]()
				r := New[configMap](unexpectedLW{srv, tc.obj, tc.typ}, st, Config[configMap]{WatchList: WatchListOff})
				start(t, r)
				synctest.Wait()
				h := r.Health()
				if h.State != StateBackingOff || !strings.Contains(fmt.Sprint(h.LastError), tc.want) {
					t.Errorf("health = %+v, want LastError containing %q", h, tc.want)
				}
				if calls := st.Calls(); len(calls) != 1 {
					t.Errorf("store calls = %v, want only the list's replace", calls)
				}
			})
		})
	}
}

func TestRunOnceAndStop(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 1)
		r := New(srv, newMemStore[configMap](), Config[configMap]{})
		rr := start(t, r)
		synctest.Wait()
		if err := r.Run(t.Context()); !errors.Is(err, ErrAlreadyStarted) {
			t.Errorf("second Run = %v, want ErrAlreadyStarted", err)
		}
		if err := rr.stop(); err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		synctest.Wait() // the server notices the stopped watch
		if h := r.Health(); h.State != StateStopped || !h.Synced {
			t.Errorf("health after stop = %+v", h)
		}
		if n := srv.OpenWatches(); n != 0 {
			t.Errorf("%d watches left open", n)
		}
	})
}

func TestStopWhileBackingOffOrListing(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 1)
		srv.Forbid(reflectortest.List, true)
		r := New(srv, newMemStore[configMap](), Config[configMap]{WatchList: WatchListOff})
		rr := start(t, r)
		synctest.Wait()
		if r.Health().State != StateBackingOff {
			t.Fatalf("state = %v", r.Health().State)
		}
		if err := rr.stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	bubble(t, func(t *testing.T) {
		block := make(chan struct{})
		lw := Funcs[configMap]{
			ListFunc: func(ctx context.Context, _ metav1.ListOptions) ([]configMap, metav1.ListMeta, error) {
				close(block)
				<-ctx.Done()
				return nil, metav1.ListMeta{}, ctx.Err()
			},
			WatchFunc: func(context.Context, metav1.ListOptions) (watch.Interface, error) { panic("not reached") },
		}
		r := New[configMap](lw, newMemStore[configMap](), Config[configMap]{WatchList: WatchListOff})
		rr := start(t, r)
		<-block
		if err := rr.stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
		if h := r.Health(); h.Stats.Failures != 0 || h.LastError != nil {
			t.Errorf("cancellation counted as a failure: %+v", h)
		}
	})
}

func TestNewPanicsOnNil(t *testing.T) {
	for name, f := range map[string]func(){
		"lw": func() { New[configMap](nil, newMemStore[configMap](), Config[configMap]{}) },
		"store": func() {
			New[configMap](reflectortest.NewServer[configMap](reflectortest.Config{}), nil, Config[configMap]{})
		},
		"typed nil store": func() {
			var s *memStore[configMap]
			New[configMap](reflectortest.NewServer[configMap](reflectortest.Config{}), s, Config[configMap]{})
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		})
	}
}

func TestDefaultName(t *testing.T) {
	srv := reflectortest.NewServer[configMap](reflectortest.Config{})
	if got := New(srv, newMemStore[configMap](), Config[configMap]{}).Name(); got != "*v1.ConfigMap" {
		t.Errorf("Name() = %q", got)
	}
	if got := New(srv, newMemStore[configMap](), Config[configMap]{Name: "cms"}).Name(); got != "cms" {
		t.Errorf("Name() = %q", got)
	}
}

// reuseStore is a memStore that is also a ReuseStore: it hands back the object it
// holds when the listed one has the same resourceVersion.
type reuseStore struct {
	*memStore[configMap]
	reused, asked int
}

func (s *reuseStore) Reuse(obj configMap) (configMap, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked++
	old, ok := s.objs[objectKey(obj)]
	if !ok || old.ResourceVersion != obj.ResourceVersion {
		return nil, false
	}
	s.reused++
	return old, true
}

// sizedReuseStore is a reuseStore that tells how many objects it holds.
type sizedReuseStore struct{ *reuseStore }

func (s sizedReuseStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objs)
}

// TestRelistReusesStoredInstances: a relist hands Replace the store's own instances
// of the objects that did not change, and the decoded ones of those that did, in
// both list modes; a transform runs before Reuse sees the objects.
//
// A store that is also a SizedStore is not asked during a list that starts while
// it is empty.
func TestRelistReusesStoredInstances(t *testing.T) {
	for _, tc := range []struct {
		mode  WatchListMode
		sized bool
	}{{WatchListOff, false}, {WatchListOn, false}, {WatchListOff, true}, {WatchListOn, true}} {
		name := tc.mode.String()
		if tc.sized {
			name += "/sized"
		}
		mode := tc.mode
		t.Run(name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				srv := newServer(t, reflectortest.Config{WatchList: true}, 6)
				st := &reuseStore{memStore: newMemStore[configMap]()}
				var store Store[configMap] = st
				firstAsked := 6
				if tc.sized {
					store, firstAsked = sizedReuseStore{st}, 0
				}
				transform := func(c configMap) (configMap, error) {
					c.Annotations = map[string]string{"transformed": "yes"}
					return c, nil
				}
				r := New(srv, store, Config[configMap]{WatchList: mode, PageSize: 2, Transform: transform})
				start(t, r)
				synctest.Wait()
				checkInSync(t, srv, st.memStore)
				if st.reused != 0 || st.asked != firstAsked {
					t.Fatalf("first list: %d of %d objects reused, want 0 of %d", st.reused, st.asked, firstAsked)
				}
				before := map[string]configMap{}
				for k, o := range st.objs {
					before[k] = o
				}

				var mu sync.Mutex
				down := true
				srv.SetHook(func(req reflectortest.Request) error {
					mu.Lock()
					defer mu.Unlock()
					if down {
						return errUnavailable
					}
					return nil
				})
				time.Sleep(2 * time.Second)
				srv.CloseWatches()
				synctest.Wait()
				changed := srv.Items()[1].DeepCopy()
				changed.Data = map[string]string{"k": "v"}
				if _, err := srv.Update(changed); err != nil {
					t.Fatal(err)
				}
				if _, err := srv.Delete("ns", "cm-2"); err != nil {
					t.Fatal(err)
				}
				mustCreate(t, srv, cm("ns", "late"))
				srv.Compact()
				mu.Lock()
				down = false
				mu.Unlock()
				time.Sleep(time.Minute)
				synctest.Wait()
				checkInSync(t, srv, st.memStore)

				if st.reused != 4 || st.asked != firstAsked+6 {
					t.Errorf("relist: %d of %d objects reused, want 4 of 6", st.reused, st.asked-firstAsked)
				}
				for k, o := range st.objs {
					if o.Annotations["transformed"] != "yes" {
						t.Errorf("%s was not transformed", k)
					}
					old, ok := before[k]
					switch {
					case k == "ns/late" || k == objectKey(changed):
						if o == old {
							t.Errorf("%s changed but the store got its old instance", k)
						}
					case !ok || o != old:
						t.Errorf("%s did not change but the store got a new instance", k)
					}
				}
			})
		})
	}
}

// lyingReuseStore answers Reuse with an object of another name, or of another
// resourceVersion.
type lyingReuseStore struct {
	*memStore[configMap]
	n int
}

func (s *lyingReuseStore) Reuse(obj configMap) (configMap, bool) {
	s.n++
	other := obj.DeepCopy()
	if s.n%2 == 0 {
		other.Name += "-other"
	} else {
		other.ResourceVersion += "0"
	}
	return other, true
}

// TestReuseOfAnotherObjectIsIgnored: the reflector lists the decoded object when
// Reuse answers with an object of another name or resourceVersion.
func TestReuseOfAnotherObjectIsIgnored(t *testing.T) {
	bubble(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{WatchList: true}, 4)
		st := &lyingReuseStore{memStore: newMemStore[configMap]()}
		start(t, New(srv, st, Config[configMap]{}))
		synctest.Wait()
		if st.n != 4 {
			t.Fatalf("Reuse called %d times, want 4", st.n)
		}
		checkInSync(t, srv, st.memStore)
	})
}
