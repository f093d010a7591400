package informer_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ctrlkit/ctrlkit/indexer"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// TestInitialListThenEvents: a handler added before Run gets the first list as
// initial adds, then each watch event as the cache change it causes.
func TestInitialListThenEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{WatchList: true}, 3)
		inf := informer.New(srv, informer.Config[cm]{})
		rec := newRecorder()
		reg := mustAdd(t, inf, rec, informer.HandlerOptions{})
		if inf.HasSynced() || reg.HasSynced() {
			t.Fatal("synced before Run")
		}
		start(t, inf)
		if err := inf.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := reg.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"initial cm-0@1", "initial cm-1@2", "initial cm-2@3"}, rec.takeCalls()); diff != "" {
			t.Errorf("initial calls (-want +got):\n%s", diff)
		}

		mustCreate(t, srv, configMap("new"))
		mustUpdate(t, srv, configMap("cm-0", "i", "changed"))
		mustDelete(t, srv, "cm-1")
		synctest.Wait()
		if diff := cmp.Diff([]string{"add new@4", "update cm-0@1>cm-0@5", "delete cm-1@6"}, rec.takeCalls()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		checkInSync(t, srv, inf, rec)
		if got := inf.LastAppliedResourceVersion(); got != "6" {
			t.Errorf("LastAppliedResourceVersion = %q, want 6", got)
		}
		if got, err := inf.Lister().Get("ns", "cm-0"); err != nil || got.Data["i"] != "changed" {
			t.Errorf("Lister.Get(cm-0) = %v, %v", got, err)
		}
		if _, err := inf.Lister().Get("ns", "cm-1"); !apierrors.IsNotFound(err) {
			t.Errorf("Lister.Get(cm-1) error = %v, want NotFound", err)
		}
		if got, err := inf.Lister().Namespace("ns").List(labels.Everything()); err != nil || len(got) != 3 {
			t.Errorf("Lister.Namespace(ns).List = %d objects, %v; want 3", len(got), err)
		}
		if s := reg.Stats(); s.Delivered != 6 || s.Coalesced != 0 || s.Backlog != 0 || s.Coalescing {
			t.Errorf("stats = %+v", s)
		}
		if h := inf.Health(); h.State != reflector.StateWatching || !h.Synced {
			t.Errorf("health = %+v", h)
		}
	})
}

// TestLateHandlersNoGapNoRepeat adds handlers one after another while a writer
// changes the server: each gets the cache as initial adds and then every later
// change, which the recorder's consistency checks and the final comparison prove
// (a gap would leave an update's old object differing from the handler's, a repeat
// would be an add of a known key).
func TestLateHandlersNoGapNoRepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 20)
		inf := informer.New(srv, informer.Config[cm]{})
		first := newRecorder()
		mustAdd(t, inf, first, informer.HandlerOptions{})
		start(t, inf)
		if err := inf.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}

		writes := make(chan struct{})
		go func() {
			defer close(writes)
			rnd := rand.New(rand.NewPCG(1, 2))
			for i := range 3000 {
				name := "cm-" + strconv.Itoa(rnd.IntN(30))
				var err error
				switch rnd.IntN(4) {
				case 0:
					_, err = srv.Create(configMap(name))
				case 1:
					_, err = srv.Delete("ns", name)
				default:
					_, err = srv.Update(configMap(name, "i", strconv.Itoa(i)))
				}
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsAlreadyExists(err) {
					t.Error(err)
					return
				}
				if i%50 == 0 {
					time.Sleep(time.Millisecond) // let the informer interleave
				}
			}
		}()
		recs := []*recorder{first}
		var regs []*informer.Registration[cm]
		for range 30 {
			r := newRecorder()
			regs = append(regs, mustAdd(t, inf, r, informer.HandlerOptions{}))
			recs = append(recs, r)
			time.Sleep(100 * time.Microsecond)
		}
		<-writes
		synctest.Wait()
		checkInSync(t, srv, inf, recs...)
		for i, reg := range regs {
			if !reg.HasSynced() {
				t.Errorf("late handler %d not synced", i)
			}
		}
	})
}

// TestRelistDeliversTombstones cuts the informer off the server, changes the
// server meanwhile and compacts its history: the informer relists, and the
// handlers are told exactly what changed, deletions as tombstones carrying the
// last cached state.
func TestRelistDeliversTombstones(t *testing.T) {
	for _, mode := range []reflector.WatchListMode{reflector.WatchListOff, reflector.WatchListOn} {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newServer(t, reflectortest.Config{WatchList: true}, 6)
				inf := informer.New(srv, informer.Config[cm]{Reflector: reflector.Config[cm]{WatchList: mode}})
				rec := newRecorder()
				mustAdd(t, inf, rec, informer.HandlerOptions{})
				start(t, inf)
				synctest.Wait()
				rec.takeCalls()

				var mu sync.Mutex
				down := true
				srv.SetHook(func(reflectortest.Request) error {
					mu.Lock()
					defer mu.Unlock()
					if down {
						return apierrors.NewServiceUnavailable("down")
					}
					return nil
				})
				time.Sleep(2 * time.Second)
				srv.CloseWatches()
				synctest.Wait()
				if h := inf.Health(); h.State != reflector.StateBackingOff {
					t.Fatalf("health while cut off = %+v", h)
				}
				mustDelete(t, srv, "cm-1")                        // rv 7
				mustUpdate(t, srv, configMap("cm-2", "i", "new")) // rv 8
				mustDelete(t, srv, "cm-4")                        // rv 9
				mustCreate(t, srv, configMap("cm-1"))             // rv 10: a new object under an old name
				mustCreate(t, srv, configMap("late"))             // rv 11
				srv.Compact()
				mu.Lock()
				down = false
				mu.Unlock()
				time.Sleep(time.Minute)
				synctest.Wait()

				// The re-created cm-1 was not known to the cache as a new object: it
				// is an update of the key (its resourceVersion changed).
				want := []string{"tombstone cm-4@5", "update cm-1@2>cm-1@10", "update cm-2@3>cm-2@8", "add late@11"}
				if diff := cmp.Diff(want, rec.takeCalls()); diff != "" {
					t.Errorf("calls after the relist (-want +got):\n%s", diff)
				}
				checkInSync(t, srv, inf, rec)
				if h := inf.Health(); h.Stats.Expired != 1 || h.State != reflector.StateWatching {
					t.Errorf("health = %+v", h)
				}
				if got := inf.LastAppliedResourceVersion(); got != "11" {
					t.Errorf("LastAppliedResourceVersion = %q, want 11", got)
				}
				// An object listed again unchanged keeps its cached instance: the next
				// update's old object is the one the handler holds.
				mustUpdate(t, srv, configMap("cm-0", "i", "after"))
				synctest.Wait()
				if diff := cmp.Diff([]string{"update cm-0@1>cm-0@12"}, rec.takeCalls()); diff != "" {
					t.Errorf("calls after the relist (-want +got):\n%s", diff)
				}
				checkInSync(t, srv, inf, rec)
			})
		})
	}
}

// TestStuckHandler: a handler that does not return never blocks the informer or
// another handler; its backlog is coalesced and stays bounded; once it returns, it
// catches up with a consistent story and ends equal to the server.
func TestStuckHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const keys, limit = 20, 8
		srv := newServer(t, reflectortest.Config{}, keys)
		inf := informer.New(srv, informer.Config[cm]{})
		fast := newRecorder()
		stuck := newRecorder()
		stuck.gate = make(chan struct{})
		mustAdd(t, inf, fast, informer.HandlerOptions{})
		reg := mustAdd(t, inf, stuck, informer.HandlerOptions{BufferLimit: limit})
		start(t, inf)
		synctest.Wait()

		rnd := rand.New(rand.NewPCG(3, 4))
		for i := range 2000 {
			name := "cm-" + strconv.Itoa(rnd.IntN(keys))
			var err error
			switch rnd.IntN(5) {
			case 0:
				_, err = srv.Create(configMap(name))
			case 1:
				_, err = srv.Delete("ns", name)
			default:
				_, err = srv.Update(configMap(name, "i", strconv.Itoa(i)))
			}
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			if i%100 == 0 {
				synctest.Wait()
				if s := reg.Stats(); s.Backlog > limit+keys+keys {
					// The initial list is at most keys objects, then one entry per key.
					t.Fatalf("backlog of the stuck handler grew to %d", s.Backlog)
				}
			}
		}
		synctest.Wait()
		// The informer and the other handler are up to date.
		want := serverVersions(srv)
		if diff := cmp.Diff(want, cacheVersions(inf)); diff != "" {
			t.Fatalf("cache (-server +cache):\n%s", diff)
		}
		if diff := cmp.Diff(want, fast.versions()); diff != "" {
			t.Fatalf("fast handler (-server +handler):\n%s", diff)
		}
		s := reg.Stats()
		if !s.Coalescing || s.Coalesced < 1000 || s.Delivered != 0 || s.MaxBacklog > limit+2*keys {
			t.Errorf("stats of the stuck handler = %+v", s)
		}
		if reg.HasSynced() {
			t.Error("the stuck handler counts as synced")
		}

		close(stuck.gate)
		synctest.Wait()
		checkInSync(t, srv, inf, fast, stuck)
		s = reg.Stats()
		if !reg.HasSynced() || s.Coalescing || s.Backlog != 0 {
			t.Errorf("after release: synced %v, stats %+v", reg.HasSynced(), s)
		}
		t.Logf("stuck handler: %+v", s)
	})
}

// TestRemoveHandler: a removed handler gets no more calls and others go on.
func TestRemoveHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 2)
		inf := informer.New(srv, informer.Config[cm]{})
		kept, removed := newRecorder(), newRecorder()
		mustAdd(t, inf, kept, informer.HandlerOptions{})
		reg := mustAdd(t, inf, removed, informer.HandlerOptions{})
		start(t, inf)
		synctest.Wait()
		if err := inf.RemoveHandler(reg); err != nil {
			t.Fatal(err)
		}
		before := removed.takeCalls()
		mustCreate(t, srv, configMap("x"))
		synctest.Wait()
		if got := removed.takeCalls(); len(got) != 0 {
			t.Errorf("removed handler got %v", got)
		}
		if len(before) != 2 {
			t.Errorf("removed handler got %v before removal, want the 2 initial adds", before)
		}
		checkInSync(t, srv, inf, kept)
		if err := inf.RemoveHandler(reg); err != nil {
			t.Errorf("second removal = %v, want nil", err)
		}
		if err := inf.RemoveHandler(nil); !errors.Is(err, informer.ErrUnknownRegistration) {
			t.Errorf("RemoveHandler(nil) = %v", err)
		}
		other := informer.New(srv, informer.Config[cm]{})
		otherReg := mustAdd(t, other, newRecorder(), informer.HandlerOptions{})
		if err := inf.RemoveHandler(otherReg); !errors.Is(err, informer.ErrUnknownRegistration) {
			t.Errorf("RemoveHandler(foreign) = %v", err)
		}
		// A handler removed before its sync reports it stopped.
		stuck := newRecorder()
		stuck.gate = make(chan struct{})
		reg2 := mustAdd(t, inf, stuck, informer.HandlerOptions{})
		synctest.Wait()
		if err := inf.RemoveHandler(reg2); err != nil {
			t.Fatal(err)
		}
		if err := reg2.WaitForSync(t.Context()); !errors.Is(err, informer.ErrStopped) {
			t.Errorf("WaitForSync of a removed handler = %v", err)
		}
		close(stuck.gate)
	})
}

// TestResync: each handler gets its own resync, as OnUpdate(obj, obj) for every
// cached object; 0 takes the informer's period and a negative one none.
func TestResync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 3)
		inf := informer.New(srv, informer.Config[cm]{ResyncPeriod: 30 * time.Second})
		byDefault, never, slow := newRecorder(), newRecorder(), newRecorder()
		mustAdd(t, inf, byDefault, informer.HandlerOptions{})
		mustAdd(t, inf, never, informer.HandlerOptions{ResyncPeriod: -1})
		start(t, inf)
		synctest.Wait()
		mustAdd(t, inf, slow, informer.HandlerOptions{ResyncPeriod: 2 * time.Minute})
		synctest.Wait()
		for _, r := range []*recorder{byDefault, never, slow} {
			r.takeCalls()
		}
		time.Sleep(30*time.Second + time.Millisecond)
		synctest.Wait()
		wantRound := []string{"sync cm-0@1", "sync cm-1@2", "sync cm-2@3"}
		if diff := cmp.Diff(wantRound, sorted(byDefault.takeCalls())); diff != "" {
			t.Errorf("default handler after 30s (-want +got):\n%s", diff)
		}
		if got := slow.takeCalls(); len(got) != 0 {
			t.Errorf("slow handler after 30s: %v", got)
		}
		time.Sleep(90 * time.Second)
		synctest.Wait()
		if got := byDefault.takeCalls(); len(got) != 3*3 {
			t.Errorf("default handler got %d resync calls in 90s, want 9: %v", len(got), got)
		}
		if diff := cmp.Diff(wantRound, sorted(slow.takeCalls())); diff != "" {
			t.Errorf("slow handler after 2m (-want +got):\n%s", diff)
		}
		if got := never.takeCalls(); len(got) != 0 {
			t.Errorf("handler without resync got %v", got)
		}
		checkInSync(t, srv, inf, byDefault, never, slow)
	})
}

// TestIndexes: indexes given in Config and added while running are maintained;
// a failing index function is reported and leaves the object stored.
func TestIndexes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 4)
		mustCreate(t, srv, configMap("bad", "bad", "yes"))
		var mu sync.Mutex
		var errs []error
		byI := func(c cm) ([]string, error) {
			if c.Data["bad"] != "" {
				return nil, errors.New("no i")
			}
			return []string{c.Data["i"]}, nil
		}
		inf := informer.New(srv, informer.Config[cm]{
			Indexers: indexer.Indexers[cm]{"i": byI},
			OnError: func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			},
		})
		start(t, inf)
		synctest.Wait()
		if got, err := inf.Indexer().ByIndex("i", "2"); err != nil || len(got) != 1 || got[0].Name != "cm-2" {
			t.Errorf("ByIndex(i, 2) = %v, %v", got, err)
		}
		if _, err := inf.Lister().Get("ns", "bad"); err != nil {
			t.Errorf("the object whose index failed is not cached: %v", err)
		}
		mu.Lock()
		var ie *indexer.IndexError
		if len(errs) == 0 || !errors.As(errs[0], &ie) || ie.Index != "i" || ie.Key != "ns/bad" {
			t.Errorf("errors = %v, want an IndexError for ns/bad", errs)
		}
		mu.Unlock()

		err := inf.AddIndexes(indexer.Indexers[cm]{"len": func(c cm) ([]string, error) {
			return []string{strconv.Itoa(len(c.Name))}, nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		mustCreate(t, srv, configMap("x"))
		synctest.Wait()
		if got, err := inf.Indexer().IndexKeys("len", "1"); err != nil || !cmp.Equal(got, []string{"ns/x"}) {
			t.Errorf("IndexKeys(len, 1) = %v, %v", got, err)
		}
		if got, err := inf.Indexer().IndexKeys("len", "4"); err != nil || len(got) != 4 {
			t.Errorf("IndexKeys(len, 4) = %v, %v; want the 4 objects listed before", got, err)
		}
		if err := inf.AddIndexes(indexer.Indexers[cm]{"len": byI}); !errors.Is(err, indexer.ErrIndexExists) {
			t.Errorf("AddIndexes of an existing name = %v", err)
		}
		if err := inf.AddIndexes(indexer.Indexers[cm]{"nil": nil}); err == nil {
			t.Error("AddIndexes with a nil function succeeded")
		}
	})
}

// TestWaitForResourceVersion: a caller reads its own writes.
func TestWaitForResourceVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 2)
		// The informer sees only labelled objects; a bookmark tells it how far the
		// server is when its changes are elsewhere.
		inf := informer.New(srv, informer.Config[cm]{Reflector: reflector.Config[cm]{LabelSelector: "!hidden"}})
		if got := inf.LastAppliedResourceVersion(); got != "" {
			t.Errorf("LastAppliedResourceVersion before Run = %q", got)
		}
		stop := start(t, inf)
		ctx := t.Context()

		created := mustCreate(t, srv, configMap("mine"))
		if err := inf.WaitForResourceVersion(ctx, created.ResourceVersion); err != nil {
			t.Fatal(err)
		}
		if got, err := inf.Lister().Get("ns", "mine"); err != nil || got.ResourceVersion != created.ResourceVersion {
			t.Errorf("after waiting for %s: %v, %v", created.ResourceVersion, got, err)
		}
		deleted := mustDelete(t, srv, "cm-0")
		if err := inf.WaitForResourceVersion(ctx, deleted.ResourceVersion); err != nil {
			t.Fatal(err)
		}
		if _, err := inf.Lister().Get("ns", "cm-0"); !apierrors.IsNotFound(err) {
			t.Errorf("deleted object still cached: %v", err)
		}

		hidden := configMap("hidden")
		hidden.Labels = map[string]string{"hidden": "yes"}
		hidden = mustCreate(t, srv, hidden)
		short, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := inf.WaitForResourceVersion(short, hidden.ResourceVersion); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiting for a change the informer cannot see = %v, want DeadlineExceeded", err)
		}
		waited := make(chan error)
		go func() { waited <- inf.WaitForResourceVersion(ctx, hidden.ResourceVersion) }()
		synctest.Wait()
		srv.Bookmark()
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
		if got := inf.LastAppliedResourceVersion(); got != hidden.ResourceVersion {
			t.Errorf("LastAppliedResourceVersion after the bookmark = %q, want %s", got, hidden.ResourceVersion)
		}

		for _, bad := range []string{"", "0", "abc", "007"} {
			if err := inf.WaitForResourceVersion(ctx, bad); !errors.Is(err, informer.ErrInvalidResourceVersion) {
				t.Errorf("WaitForResourceVersion(%q) = %v", bad, err)
			}
		}
		go func() { waited <- inf.WaitForResourceVersion(ctx, "1000") }()
		synctest.Wait()
		stop()
		if err := <-waited; !errors.Is(err, informer.ErrStopped) {
			t.Errorf("WaitForResourceVersion when Run returns = %v, want ErrStopped", err)
		}
		if err := inf.WaitForResourceVersion(ctx, "2"); err != nil {
			t.Errorf("WaitForResourceVersion of a reached version after Run = %v", err)
		}
	})
}

// TestAccessError: a denied list is reported at once, typed, and the informer
// recovers when access is granted.
func TestAccessError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 2)
		srv.Forbid(reflectortest.List, true)
		errs := make(chan error, 10)
		inf := informer.New(srv, informer.Config[cm]{
			Reflector: reflector.Config[cm]{WatchList: reflector.WatchListOff},
			OnError: func(err error) {
				select {
				case errs <- err:
				default:
				}
			},
		})
		start(t, inf)
		err := <-errs
		var access *reflector.AccessError
		if !errors.As(err, &access) || !errors.Is(err, reflector.ErrForbidden) || access.Verb != "list" {
			t.Fatalf("OnError got %v", err)
		}
		if h := inf.Health(); !errors.Is(h.LastError, reflector.ErrForbidden) {
			t.Errorf("health = %+v", h)
		}
		short, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if err := inf.WaitForSync(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WaitForSync while forbidden = %v", err)
		}
		srv.Forbid(reflectortest.List, false)
		if err := inf.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		checkInSync(t, srv, inf)
	})
}

// TestHandlerAddedWhileListing: a handler added after Run started but before the
// first list gets that list as initial adds.
func TestHandlerAddedWhileListing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 2)
		srv.FailNext(reflectortest.List, apierrors.NewServiceUnavailable("not yet"))
		inf := informer.New(srv, informer.Config[cm]{})
		start(t, inf)
		synctest.Wait()
		if inf.HasSynced() {
			t.Fatal("synced although the list failed")
		}
		rec := newRecorder()
		reg := mustAdd(t, inf, rec, informer.HandlerOptions{})
		if err := reg.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"initial cm-0@1", "initial cm-1@2"}, rec.takeCalls()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
}

// TestRunWaitsForHandlers: Run returns only after the handlers' goroutines have
// ended; a backlog is dropped, a call in progress is waited for.
func TestRunWaitsForHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 5)
		inf := informer.New(srv, informer.Config[cm]{})
		rec := newRecorder()
		rec.gate = make(chan struct{})
		reg := mustAdd(t, inf, rec, informer.HandlerOptions{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- inf.Run(ctx) }()
		synctest.Wait()
		cancel()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Run returned %v while a handler was in a call", err)
		default:
		}
		close(rec.gate)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := rec.takeCalls(); len(got) != 1 {
			t.Errorf("calls = %v, want only the one in progress", got)
		}
		if err := reg.WaitForSync(context.Background()); !errors.Is(err, informer.ErrStopped) {
			t.Errorf("WaitForSync after Run = %v", err)
		}
		if err := inf.WaitForSync(context.Background()); err != nil {
			t.Errorf("informer WaitForSync after a sync and Run = %v", err)
		}
	})
}

// TestTransformAndMutationDetector: the transform runs before anything is cached.
func TestTransformAndMutationDetector(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := reflectortest.NewServer[cm](reflectortest.Config{})
		c := configMap("a")
		c.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
		mustCreate(t, srv, c)
		inf := informer.New(srv, informer.Config[cm]{
			Transform:       reflector.StripManagedFields[cm],
			DetectMutations: true,
		})
		var got cm
		mustAdd(t, inf, informer.HandlerFuncs[cm]{AddFunc: func(obj cm, _ bool) { got = obj }}, informer.HandlerOptions{})
		start(t, inf)
		synctest.Wait()
		if got == nil || got.ManagedFields != nil {
			t.Fatalf("handler got %v", got)
		}
		if err := inf.Indexer().CheckMutations(); err != nil {
			t.Fatal(err)
		}
		got.Data = map[string]string{"oops": "1"} // what a handler must not do
		if err := inf.Indexer().CheckMutations(); !errors.Is(err, indexer.ErrMutation) {
			t.Errorf("CheckMutations after a handler changed an object = %v", err)
		}
	})
}

func TestMisuse(t *testing.T) {
	srv := reflectortest.NewServer[cm](reflectortest.Config{})
	for name, f := range map[string]func(){
		"nil lw":          func() { informer.New[cm](nil, informer.Config[cm]{}) },
		"reflector name":  func() { informer.New(srv, informer.Config[cm]{Reflector: reflector.Config[cm]{Name: "x"}}) },
		"negative buffer": func() { informer.New(srv, informer.Config[cm]{BufferLimit: -1}) },
		"short resync":    func() { informer.New(srv, informer.Config[cm]{ResyncPeriod: time.Millisecond}) },
		"nil index":       func() { informer.New(srv, informer.Config[cm]{Indexers: indexer.Indexers[cm]{"x": nil}}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New with %s did not panic", name)
				}
			}()
			f()
		}()
	}

	inf := informer.New(srv, informer.Config[cm]{})
	if _, err := inf.AddHandler(nil, informer.HandlerOptions{}); !errors.Is(err, informer.ErrNilHandler) {
		t.Errorf("AddHandler(nil) = %v", err)
	}
	var nilRec *recorder
	if _, err := inf.AddHandler(nilRec, informer.HandlerOptions{}); !errors.Is(err, informer.ErrNilHandler) {
		t.Errorf("AddHandler(typed nil) = %v", err)
	}
	for _, o := range []informer.HandlerOptions{{BufferLimit: -1}, {ResyncPeriod: time.Millisecond}} {
		if _, err := inf.AddHandler(newRecorder(), o); !errors.Is(err, informer.ErrInvalidOptions) {
			t.Errorf("AddHandler(%+v) = %v", o, err)
		}
	}

	bad := informer.New(srv, informer.Config[cm]{Reflector: reflector.Config[cm]{LabelSelector: "a in (("}})
	if err := bad.Run(context.Background()); err == nil {
		t.Error("Run with a bad selector returned nil")
	}
	if err := bad.Run(context.Background()); !errors.Is(err, informer.ErrAlreadyStarted) {
		t.Errorf("second Run = %v", err)
	}
	if _, err := bad.AddHandler(newRecorder(), informer.HandlerOptions{}); !errors.Is(err, informer.ErrStopped) {
		t.Errorf("AddHandler after Run = %v", err)
	}
	if err := bad.WaitForSync(context.Background()); !errors.Is(err, informer.ErrStopped) {
		t.Errorf("WaitForSync after Run without sync = %v", err)
	}
}

// TestNewStartsNoGoroutine: New and AddHandler start nothing; Run does.
func TestNewStartsNoGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	srv := reflectortest.NewServer[cm](reflectortest.Config{})
	inf := informer.New(srv, informer.Config[cm]{ResyncPeriod: time.Minute})
	mustAdd(t, inf, newRecorder(), informer.HandlerOptions{})
	if err := goleak.Find(before); err != nil {
		t.Fatalf("goroutines after New and AddHandler: %v", err)
	}
}

// TestHandlerAddedDuringBatch adds a handler while the informer is in the middle of
// applying a batch (held there by an index function): part of the batch is in the
// cache, but not yet dispatched. The handler must join after the batch, or it would
// see the change twice (in its initial adds and as an update).
func TestHandlerAddedDuringBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 3)
		gates := map[string]chan struct{}{"hold-1": make(chan struct{}), "hold-2": make(chan struct{})}
		inf := informer.New(srv, informer.Config[cm]{Indexers: indexer.Indexers[cm]{
			"hold": func(c cm) ([]string, error) {
				if g := gates[c.Name]; g != nil {
					<-g
				}
				return nil, nil
			},
		}})
		first := newRecorder()
		mustAdd(t, inf, first, informer.HandlerOptions{})
		start(t, inf)
		synctest.Wait()

		mustCreate(t, srv, configMap("hold-1")) // the pop loop stops on it
		synctest.Wait()
		mustUpdate(t, srv, configMap("cm-1", "i", "new"))
		mustCreate(t, srv, configMap("hold-2"))
		synctest.Wait()        // both queued behind hold-1: one batch
		close(gates["hold-1"]) // the next batch applies cm-1, then stops on hold-2
		synctest.Wait()
		if got, _ := inf.Lister().Get("ns", "cm-1"); got.Data["i"] != "new" {
			t.Fatalf("cm-1 is not applied yet: %v", got)
		}
		late := newRecorder()
		reg := mustAdd(t, inf, late, informer.HandlerOptions{})
		close(gates["hold-2"])
		synctest.Wait()
		checkInSync(t, srv, inf, first, late)
		if !reg.HasSynced() {
			t.Error("late handler not synced")
		}
		want := []string{"initial cm-0@1", "initial cm-1@5", "initial cm-2@3", "initial hold-1@4", "initial hold-2@6"}
		if diff := cmp.Diff(want, sorted(late.takeCalls())); diff != "" {
			t.Errorf("late handler's calls (-want +got):\n%s", diff)
		}
	})
}

// TestBookmarkWaitsForQueuedEvents: a bookmark that arrives while events are still
// queued does not count until they are in the cache, so that a caller waiting for
// a resourceVersion never reads a cache that lacks an earlier change.
func TestBookmarkWaitsForQueuedEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 2)
		hold := make(chan struct{})
		inf := informer.New(srv, informer.Config[cm]{
			Reflector: reflector.Config[cm]{LabelSelector: "!hidden"},
			Indexers: indexer.Indexers[cm]{"hold": func(c cm) ([]string, error) {
				if c.Name == "hold" {
					<-hold
				}
				return nil, nil
			}},
		})
		start(t, inf)
		synctest.Wait()
		mustCreate(t, srv, configMap("hold")) // rv 3: the cache stops on it
		synctest.Wait()
		changed := mustUpdate(t, srv, configMap("cm-0", "i", "new")) // rv 4, queued
		hidden := configMap("hidden")
		hidden.Labels = map[string]string{"hidden": "yes"}
		hidden = mustCreate(t, srv, hidden) // rv 5, not watched
		srv.Bookmark()
		synctest.Wait()
		if got := inf.LastAppliedResourceVersion(); got != "2" {
			t.Errorf("LastAppliedResourceVersion = %q while rv 3 and 4 are not applied, want 2", got)
		}
		close(hold)
		if err := inf.WaitForResourceVersion(t.Context(), hidden.ResourceVersion); err != nil {
			t.Fatal(err)
		}
		if got, _ := inf.Lister().Get("ns", "cm-0"); got.ResourceVersion != changed.ResourceVersion {
			t.Errorf("at the bookmark's resourceVersion the cache has cm-0 at %s, want %s", got.ResourceVersion, changed.ResourceVersion)
		}
		if got := inf.LastAppliedResourceVersion(); got != hidden.ResourceVersion {
			t.Errorf("LastAppliedResourceVersion = %q, want the bookmark's %s", got, hidden.ResourceVersion)
		}
	})
}
