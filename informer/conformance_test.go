package informer_test

// The conformance suite of the informer: the semantics of client-go's
// shared_informer_test.go, processor_listener_test.go and the informer parts of
// controller_test.go that ctrlkit keeps, restated for its typed API and run against
// the in-memory reflectortest.Server, mostly in synctest bubbles (virtual time, so
// that long runs with many resyncs are fast). Where ctrlkit deliberately differs, the
// test checks ctrlkit's documented behaviour and says so.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ctrlkit/ctrlkit/indexer"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// guarded is a recorder that also counts the calls that start after its
// registration was removed (removed is set once RemoveHandler has returned), can
// take time over each call, and closes seen when it is given the object named
// sentinel.
type guarded struct {
	*recorder
	delay    time.Duration
	removed  atomic.Bool
	late     atomic.Int32
	sentinel string
	seen     chan struct{}
	once     sync.Once
}

func newGuarded() *guarded {
	return &guarded{recorder: newRecorder(), sentinel: "sentinel", seen: make(chan struct{})}
}

func (g *guarded) enter() {
	if g.removed.Load() {
		g.late.Add(1)
	}
	if g.delay > 0 {
		time.Sleep(g.delay)
	}
}

// checkRemoved checks that each handler's story is consistent and that, once it
// was removed, it got at most the one call that was starting.
func checkRemoved(t *testing.T, what string, gs []*guarded) {
	t.Helper()
	for i, g := range gs {
		g.check(t)
		if n := g.late.Load(); n > 1 {
			t.Errorf("%s %d got %d calls after RemoveHandler returned", what, i, n)
		}
	}
}

// healCompacted compacts srv's history while part is cut, heals part after the
// watch has failed, and waits (in the bubble) for the relist that follows.
func healCompacted(srv *reflectortest.Server[cm], part *reflectortest.Partition[cm]) {
	srv.Compact()
	time.Sleep(2 * time.Second)
	part.Heal()
	time.Sleep(time.Minute)
	synctest.Wait()
}

// leave closes seen once the sentinel is recorded.
func (g *guarded) leave(obj cm) {
	if obj.Name == g.sentinel {
		g.once.Do(func() { close(g.seen) })
	}
}

func (g *guarded) OnAdd(obj cm, initial bool) {
	g.enter()
	g.recorder.OnAdd(obj, initial)
	g.leave(obj)
}

func (g *guarded) OnUpdate(old, obj cm) {
	g.enter()
	g.recorder.OnUpdate(old, obj)
	g.leave(obj)
}

func (g *guarded) OnDelete(d informer.Deleted[cm]) {
	g.enter()
	g.recorder.OnDelete(d)
	g.leave(d.Obj)
}

// churn makes n random changes (create, update, delete) to the objects cm-0 …
// cm-(keys-1) of srv, pausing up to pause between two (virtual time in a bubble),
// and calls every(i) before the i-th change if every is not nil.
func churn(t *testing.T, srv *reflectortest.Server[cm], seed uint64, n, keys int, pause time.Duration, every func(i int)) {
	rnd := rand.New(rand.NewPCG(seed, seed+1))
	for i := range n {
		if every != nil {
			every(i)
		}
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
			t.Error(err)
			return
		}
		if pause > 0 {
			time.Sleep(time.Duration(rnd.Int64N(int64(pause))))
		}
	}
}

// count returns how many calls start with prefix ("sync ", "add ", …).
func count(calls []string, prefix string) int {
	n := 0
	for _, c := range calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// TestConformanceResyncUnderChurn runs an informer for several virtual minutes while
// the server changes all the time and the informer is cut off and has to relist now
// and then, with handlers resyncing every second, every two (the informer's
// default), every seven, never, and one slow handler resyncing every second whose
// backlog coalesces. Hundreds of resyncs fire. Every handler's calls must tell a
// consistent story per key (a resync hands back the very object the handler holds,
// never a stale one, never one of a deleted key), and at the end the cache and every
// handler equal the server. It covers, under load, client-go TestListenerResyncPeriods,
// TestSharedInformerWatchDisruption, TestTransformingInformerRace (resyncs while the
// cache is read), TestRealFIFO_UpdateResyncRace and the empty-resync-batch window.
func TestConformanceResyncUnderChurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const keys = 40
		srv := newServer(t, reflectortest.Config{}, keys)
		part := reflectortest.NewPartition(srv)
		inf := informer.New(part, informer.Config[cm]{ResyncPeriod: 2 * time.Second})
		quick, byDefault, slow, never, laggard := newGuarded(), newGuarded(), newGuarded(), newGuarded(), newGuarded()
		laggard.delay = 25 * time.Millisecond
		mustAdd(t, inf, quick, informer.HandlerOptions{ResyncPeriod: time.Second})
		mustAdd(t, inf, byDefault, informer.HandlerOptions{})
		mustAdd(t, inf, slow, informer.HandlerOptions{ResyncPeriod: 7 * time.Second})
		mustAdd(t, inf, never, informer.HandlerOptions{ResyncPeriod: -1})
		lagReg := mustAdd(t, inf, laggard, informer.HandlerOptions{ResyncPeriod: time.Second, BufferLimit: 4})
		start(t, inf)
		if err := inf.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}

		// Readers of the cache while it is resynced and changed.
		stopReaders := make(chan struct{})
		var readers sync.WaitGroup
		for r := range 2 {
			readers.Go(func() {
				for {
					select {
					case <-stopReaders:
						return
					case <-time.After(time.Duration(7+r) * time.Millisecond):
					}
					for _, o := range inf.Indexer().List() {
						if got, err := inf.Lister().Get(o.Namespace, o.Name); err == nil && rv(got) < rv(o) {
							t.Errorf("the cache went back from %s to %s", describe(o), describe(got))
						}
					}
				}
			})
		}

		relists := 0
		churn(t, srv, 7, 4000, keys, 150*time.Millisecond, func(i int) {
			switch {
			case i%700 == 350:
				// Cut off: changes go unseen, history is compacted, and the informer
				// must relist (tombstones for what was deleted meanwhile).
				part.Cut()
				mustCreate(t, srv, configMap("unseen-"+strconv.Itoa(i)))
				if _, err := srv.Delete("ns", "cm-"+strconv.Itoa(i%keys)); err != nil && !apierrors.IsNotFound(err) {
					t.Error(err)
				}
				time.Sleep(3 * time.Second)
				srv.Compact()
				part.Heal()
				relists++
			case i%300 == 0:
				srv.Bookmark()
			}
		})
		time.Sleep(time.Minute) // the last relist, and the laggard catches up
		synctest.Wait()
		close(stopReaders)
		readers.Wait()

		recs := []*guarded{quick, byDefault, slow, never, laggard}
		checkInSync(t, srv, inf, quick.recorder, byDefault.recorder, slow.recorder, never.recorder, laggard.recorder)
		syncs := make([]int, len(recs))
		for i, g := range recs {
			syncs[i] = count(g.takeCalls(), "sync ")
		}
		t.Logf("%d relists; sync calls: every 1s %d, every 2s %d, every 7s %d, never %d, laggard %d; laggard stats %+v",
			relists, syncs[0], syncs[1], syncs[2], syncs[3], syncs[4], lagReg.Stats())
		if h := inf.Health(); h.Stats.Expired < int64(relists) {
			t.Errorf("the informer relisted after %d expiries, want at least %d: %+v", h.Stats.Expired, relists, h)
		}
		// About 300 virtual seconds with about 35 objects: thousands of resync calls.
		if syncs[0] < 5000 {
			t.Errorf("the handler resyncing every second got only %d resync calls", syncs[0])
		}
		if syncs[0] < syncs[1]*3/2 || syncs[1] < syncs[2]*5/2 || syncs[2] == 0 {
			t.Errorf("resync calls do not follow the periods 1s, 2s, 7s: %v", syncs[:3])
		}
		if syncs[3] != 0 {
			t.Errorf("the handler without resync got %d resync calls", syncs[3])
		}
		if syncs[4] == 0 {
			t.Error("the slow handler got no resync at all")
		}
		if s := lagReg.Stats(); s.Coalesced == 0 {
			t.Errorf("the slow handler never coalesced (stats %+v): resyncs did not meet a lagging backlog", s)
		}
	})
}

// TestConformanceHandlersJoinAndLeaveUnderChurn adds handlers one after another while
// the server changes all the time, and removes some of them at random. Every handler
// added late gets the cache as initial adds and then every change, with no gap and
// no repeat (its story stays consistent and ends equal to the server); a removed
// handler gets no call once RemoveHandler has returned, except at most the one that
// was just starting. It covers, under load, client-go TestAddWhileActive,
// TestRemoveWhileActive and TestSharedInformerHandlerAbuse.
func TestConformanceHandlersJoinAndLeaveUnderChurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const keys = 30
		srv := newServer(t, reflectortest.Config{}, keys)
		inf := informer.New(srv, informer.Config[cm]{
			ResyncPeriod: 3 * time.Second,
			// Applying a change takes (virtual) time, so that handlers are often
			// added while a batch is half applied.
			Indexers: indexer.Indexers[cm]{"slow": func(cm) ([]string, error) {
				time.Sleep(15 * time.Millisecond)
				return nil, nil
			}},
		})
		first := newGuarded()
		firstReg := mustAdd(t, inf, first, informer.HandlerOptions{})
		start(t, inf)
		if err := inf.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		writes := make(chan struct{})
		go func() {
			defer close(writes)
			churn(t, srv, 11, 2500, keys, 40*time.Millisecond, nil)
		}()

		rnd := rand.New(rand.NewPCG(5, 6))
		live := []*guarded{first}
		regs := []*informer.Registration[cm]{firstReg}
		var removed []*guarded
		for range 60 {
			time.Sleep(time.Duration(rnd.Int64N(int64(1500 * time.Millisecond))))
			g := newGuarded()
			if rnd.IntN(4) == 0 {
				g.delay = time.Millisecond
			}
			opts := informer.HandlerOptions{
				BufferLimit:  []int{0, 2, 16}[rnd.IntN(3)],
				ResyncPeriod: []time.Duration{0, -1, time.Second}[rnd.IntN(3)],
			}
			regs = append(regs, mustAdd(t, inf, g, opts))
			live = append(live, g)
			if rnd.IntN(3) == 0 {
				j := rnd.IntN(len(live))
				if err := inf.RemoveHandler(regs[j]); err != nil {
					t.Fatal(err)
				}
				live[j].removed.Store(true)
				removed = append(removed, live[j])
				live = slices.Delete(live, j, j+1)
				regs = slices.Delete(regs, j, j+1)
			}
		}
		<-writes
		time.Sleep(10 * time.Second)
		synctest.Wait()

		recs := make([]*recorder, len(live))
		for i, g := range live {
			recs[i] = g.recorder
		}
		checkInSync(t, srv, inf, recs...)
		for i, reg := range regs {
			if !reg.HasSynced() {
				t.Errorf("live handler %d not synced", i)
			}
		}
		if len(removed) == 0 {
			t.Fatal("no handler was removed")
		}
		checkRemoved(t, "removed handler", removed)
		t.Logf("%d handlers live, %d removed", len(live), len(removed))
	})
}

// TestConformanceHandlerAbuse covers client-go TestSharedInformerHandlerAbuse with
// real goroutines (for the race detector): workers keep adding and removing handlers
// while the server churns, then the informer is stopped while they still do. Adding
// fails only with ErrStopped, and only once Run is stopping; removing never fails;
// every handler's story is consistent; the handlers still registered end equal to the
// server; a removed one gets at most the one call that was starting.
func TestConformanceHandlerAbuse(t *testing.T) {
	const keys = 20
	srv := newServer(t, reflectortest.Config{}, keys)
	inf := informer.New(srv, informer.Config[cm]{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- inf.Run(ctx) }()

	var mu sync.Mutex
	var all []*guarded
	phase := func(stop <-chan struct{}, seed uint64) (wait func() []*guarded) {
		var wg sync.WaitGroup
		liveOf := make([][]*guarded, 8)
		for w := range liveOf {
			wg.Go(func() {
				rnd := rand.New(rand.NewPCG(seed, uint64(w)))
				var regs []*informer.Registration[cm]
				for {
					select {
					case <-stop:
						return
					default:
					}
					if rnd.IntN(2) == 0 || len(regs) == 0 {
						g := newGuarded()
						reg, err := inf.AddHandler(g, informer.HandlerOptions{BufferLimit: rnd.IntN(8)})
						if errors.Is(err, informer.ErrStopped) {
							return
						}
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						all = append(all, g)
						mu.Unlock()
						regs = append(regs, reg)
						liveOf[w] = append(liveOf[w], g)
						continue
					}
					j := rnd.IntN(len(regs))
					if err := inf.RemoveHandler(regs[j]); err != nil {
						t.Errorf("RemoveHandler = %v", err)
						return
					}
					liveOf[w][j].removed.Store(true)
					regs = slices.Delete(regs, j, j+1)
					liveOf[w] = slices.Delete(liveOf[w], j, j+1)
				}
			})
		}
		return func() []*guarded {
			wg.Wait()
			var live []*guarded
			for _, l := range liveOf {
				live = append(live, l...)
			}
			return live
		}
	}

	stop := make(chan struct{})
	wait := phase(stop, 1)
	churn(t, srv, 3, 3000, keys, 0, nil)
	close(stop)
	live := wait()
	// Every change is delivered in order: once a handler has seen the sentinel, it
	// has seen everything before it.
	mustCreate(t, srv, configMap("sentinel"))
	deadline := time.After(time.Minute)
	for i, g := range live {
		select {
		case <-g.seen:
		case <-deadline:
			t.Fatalf("live handler %d never saw the sentinel", i)
		}
	}
	want := serverVersions(srv)
	for i, g := range live {
		if diff := cmp.Diff(want, g.versions()); diff != "" {
			t.Errorf("live handler %d differs from the server (-server +handler):\n%s", i, diff)
		}
	}

	// Stop the informer while the workers are at it again.
	stop2 := make(chan struct{})
	wait2 := phase(stop2, 2)
	churn(t, srv, 4, 300, keys, 0, nil)
	cancel()
	if err := <-runDone; err != nil {
		t.Errorf("Run = %v", err)
	}
	close(stop2)
	wait2()
	if _, err := inf.AddHandler(newGuarded(), informer.HandlerOptions{}); !errors.Is(err, informer.ErrStopped) {
		t.Errorf("AddHandler after Run returned = %v, want ErrStopped", err)
	}
	mu.Lock()
	defer mu.Unlock()
	checkRemoved(t, "handler", all)
	t.Logf("%d handlers added, %d live at the sentinel", len(all), len(live))
}

// TestConformanceShutdown covers the interplay of stopping with handlers and
// waiters: client-go TestShutdown, TestStateSharedInformer,
// TestAddOnStoppedSharedInformer, TestRemoveOnStoppedSharedInformer and
// TestRemoveEventHandler_AsynchronousPanic (without the panic).
func TestConformanceShutdown(t *testing.T) {
	// Run returns only after a handler busy in a call has returned; its backlog is
	// dropped; no handler is called once Run has returned; HasSynced and WaitForSync
	// keep their answers across the stop.
	t.Run("busy handler", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newServer(t, reflectortest.Config{}, 5)
			// No shutdown bound: Run waits for the busy handler however long
			// it takes (TestShutdownTimeoutAbandonsBusyHandler tests the bound).
			inf := informer.New(srv, informer.Config[cm]{ResyncPeriod: time.Second, ShutdownTimeout: -1})
			busy, idle := newGuarded(), newGuarded()
			busy.gate = make(chan struct{})
			busyReg := mustAdd(t, inf, busy, informer.HandlerOptions{})
			idleReg := mustAdd(t, inf, idle, informer.HandlerOptions{})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- inf.Run(ctx) }()
			synctest.Wait()
			if !inf.HasSynced() || !idleReg.HasSynced() || busyReg.HasSynced() {
				t.Fatalf("synced: informer %v, idle %v, busy %v; want true, true, false", inf.HasSynced(), idleReg.HasSynced(), busyReg.HasSynced())
			}
			mustUpdate(t, srv, configMap("cm-0", "i", "x"))
			synctest.Wait()
			idle.takeCalls()
			cancel()
			time.Sleep(10 * time.Second) // resyncs would be due; nothing may run
			synctest.Wait()
			select {
			case err := <-done:
				t.Fatalf("Run returned %v while a handler was in a call", err)
			default:
			}
			mustUpdate(t, srv, configMap("cm-1", "i", "x"))
			synctest.Wait()
			if got := idle.takeCalls(); len(got) != 0 {
				t.Errorf("the idle handler got %v after the informer was stopped", got)
			}
			close(busy.gate)
			if err := <-done; err != nil {
				t.Fatalf("Run = %v", err)
			}
			if got := busy.takeCalls(); len(got) != 1 {
				t.Errorf("the busy handler got %v, want only the call in progress", got)
			}
			if !inf.HasSynced() || !idleReg.HasSynced() || busyReg.HasSynced() {
				t.Errorf("after Run: synced informer %v, idle %v, busy %v; want true, true, false", inf.HasSynced(), idleReg.HasSynced(), busyReg.HasSynced())
			}
			if err := inf.WaitForSync(context.Background()); err != nil {
				t.Errorf("informer WaitForSync after Run = %v, want nil (it synced)", err)
			}
			if err := idleReg.WaitForSync(context.Background()); err != nil {
				t.Errorf("synced handler WaitForSync after Run = %v, want nil", err)
			}
			if err := busyReg.WaitForSync(context.Background()); !errors.Is(err, informer.ErrStopped) {
				t.Errorf("unsynced handler WaitForSync after Run = %v, want ErrStopped", err)
			}
			if _, err := inf.AddHandler(newGuarded(), informer.HandlerOptions{}); !errors.Is(err, informer.ErrStopped) {
				t.Errorf("AddHandler after Run = %v, want ErrStopped", err)
			}
			if err := inf.RemoveHandler(idleReg); err != nil {
				t.Errorf("RemoveHandler after Run = %v, want nil", err)
			}
			if err := inf.Run(context.Background()); !errors.Is(err, informer.ErrAlreadyStarted) {
				t.Errorf("Run again = %v, want ErrAlreadyStarted", err)
			}
			if got := idle.takeCalls(); len(got) != 0 {
				t.Errorf("the idle handler got %v after Run returned", got)
			}
		})
	})

	// Waiters blocked when Run returns before the first list get ErrStopped; after
	// that, WaitForSync answers at once; a context ends a wait first.
	t.Run("never synced", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newServer(t, reflectortest.Config{}, 2)
			srv.Forbid(reflectortest.List, true)
			srv.Forbid(reflectortest.Watch, true)
			inf := informer.New(srv, informer.Config[cm]{})
			g := newGuarded()
			reg := mustAdd(t, inf, g, informer.HandlerOptions{})
			short, cancelShort := context.WithTimeout(context.Background(), time.Second)
			defer cancelShort()
			if err := inf.WaitForSync(short); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("WaitForSync before Run = %v, want DeadlineExceeded", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- inf.Run(ctx) }()
			waits := make(chan error, 2)
			go func() { waits <- inf.WaitForSync(context.Background()) }()
			go func() { waits <- reg.WaitForSync(context.Background()) }()
			time.Sleep(5 * time.Second)
			synctest.Wait()
			cancel()
			for range 2 {
				if err := <-waits; !errors.Is(err, informer.ErrStopped) {
					t.Errorf("a wait for sync when Run returned = %v, want ErrStopped", err)
				}
			}
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
			if inf.HasSynced() || reg.HasSynced() {
				t.Error("synced without a list")
			}
			if err := inf.WaitForSync(context.Background()); !errors.Is(err, informer.ErrStopped) {
				t.Errorf("WaitForSync after Run = %v, want ErrStopped", err)
			}
			if got := g.takeCalls(); len(got) != 0 {
				t.Errorf("handler got %v without a list", got)
			}
		})
	})

	// AddHandler racing Run's return either fails with ErrStopped or gives a
	// registration whose WaitForSync returns (nil or ErrStopped): nothing hangs
	// (synctest would report a deadlock) and no goroutine is left (goleak).
	t.Run("add racing stop", func(t *testing.T) {
		for round := range 20 {
			synctest.Test(t, func(t *testing.T) {
				srv := newServer(t, reflectortest.Config{}, 3)
				inf := informer.New(srv, informer.Config[cm]{ResyncPeriod: time.Second})
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan error, 1)
				go func() { done <- inf.Run(ctx) }()
				synctest.Wait()
				results := make(chan error, 8)
				for i := range 8 {
					go func() {
						if i == round%8 {
							cancel()
						}
						reg, err := inf.AddHandler(newGuarded(), informer.HandlerOptions{})
						if err != nil {
							results <- err
							return
						}
						if err := reg.WaitForSync(context.Background()); err != nil && !errors.Is(err, informer.ErrStopped) {
							results <- err
							return
						}
						results <- nil
					}()
				}
				for range 8 {
					if err := <-results; err != nil && !errors.Is(err, informer.ErrStopped) {
						t.Errorf("AddHandler racing the stop: %v", err)
					}
				}
				if err := <-done; err != nil {
					t.Errorf("Run = %v", err)
				}
			})
		}
	})

	// RemoveHandler does not wait for the call in progress: it returns while the
	// handler is blocked in it; the call then completes, and no other follows.
	t.Run("remove during a call", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newServer(t, reflectortest.Config{}, 0)
			inf := informer.New(srv, informer.Config[cm]{})
			start(t, inf)
			synctest.Wait()
			g := newGuarded()
			g.gate = make(chan struct{})
			reg := mustAdd(t, inf, g, informer.HandlerOptions{})
			mustCreate(t, srv, configMap("pod1"))
			synctest.Wait() // the handler is blocked in OnAdd(pod1)
			if err := inf.RemoveHandler(reg); err != nil {
				t.Fatal(err)
			}
			g.removed.Store(true)
			mustCreate(t, srv, configMap("pod2"))
			close(g.gate)
			synctest.Wait()
			if got := g.takeCalls(); !slices.Equal(got, []string{"add pod1@1"}) {
				t.Errorf("calls = %v, want the one in progress only", got)
			}
			if n := g.late.Load(); n != 0 {
				t.Errorf("%d calls started after RemoveHandler returned", n)
			}
		})
	})

	// A handler removed before Run is never called and never started.
	t.Run("removed before run", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := newServer(t, reflectortest.Config{}, 2)
			inf := informer.New(srv, informer.Config[cm]{})
			g := newGuarded()
			reg := mustAdd(t, inf, g, informer.HandlerOptions{})
			if err := inf.RemoveHandler(reg); err != nil {
				t.Fatal(err)
			}
			start(t, inf)
			synctest.Wait()
			if got := g.takeCalls(); len(got) != 0 {
				t.Errorf("a handler removed before Run got %v", got)
			}
			if err := reg.WaitForSync(context.Background()); !errors.Is(err, informer.ErrStopped) {
				t.Errorf("WaitForSync of a handler removed before Run = %v", err)
			}
		})
	})
}

// names returns the sorted names of objs.
func names(objs []cm) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Name
	}
	sort.Strings(out)
	return out
}

// sleepUntil sleeps until d after t0 (virtual time in a bubble) and waits for the
// bubble to settle.
func sleepUntil(t0 time.Time, d time.Duration) {
	time.Sleep(time.Until(t0.Add(d)))
	synctest.Wait()
}

// TestConformanceIndexes covers client-go TestIndexer: an index added before Run and
// one added while it runs are both maintained and usable at once, and IndexValues
// lists each value in use.
func TestConformanceIndexes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := reflectortest.NewServer[cm](reflectortest.Config{})
		labelled := func(name string, lbls map[string]string) cm {
			c := configMap(name)
			c.Labels = lbls
			return c
		}
		mustCreate(t, srv, labelled("pod1", map[string]string{"a": "a-val", "b": "b-val1"}))
		mustCreate(t, srv, labelled("pod2", map[string]string{"b": "b-val2"}))
		byLabelKey := func(c cm) ([]string, error) { return sortedKeys(c.Labels), nil }
		inf := informer.New(srv, informer.Config[cm]{ResyncPeriod: time.Second})
		if err := inf.AddIndexes(indexer.Indexers[cm]{"labels": byLabelKey}); err != nil {
			t.Fatal(err)
		}
		start(t, inf)
		if err := inf.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		byIndex := func(index, value string) []string {
			t.Helper()
			objs, err := inf.Indexer().ByIndex(index, value)
			if err != nil {
				t.Fatal(err)
			}
			return names(objs)
		}
		if got := byIndex("labels", "a"); !slices.Equal(got, []string{"pod1"}) {
			t.Errorf("ByIndex(labels, a) = %v, want pod1", got)
		}
		mustCreate(t, srv, labelled("pod3", map[string]string{"a": "a-val2"}))
		synctest.Wait()
		if got := byIndex("labels", "a"); !slices.Equal(got, []string{"pod1", "pod3"}) {
			t.Errorf("ByIndex(labels, a) after a create = %v, want pod1, pod3", got)
		}
		if err := inf.AddIndexes(indexer.Indexers[cm]{"labels-again": byLabelKey}); err != nil {
			t.Fatal(err)
		}
		if got := byIndex("labels-again", "a"); !slices.Equal(got, []string{"pod1", "pod3"}) {
			t.Errorf("ByIndex(labels-again, a) right after AddIndexes = %v, want pod1, pod3", got)
		}
		for _, index := range []string{"labels", "labels-again"} {
			vals, err := inf.Indexer().IndexValues(index)
			if err != nil {
				t.Fatal(err)
			}
			sort.Strings(vals)
			if !slices.Equal(vals, []string{"a", "b"}) {
				t.Errorf("IndexValues(%s) = %v, want a, b", index, vals)
			}
		}
	})
}

// sortedKeys returns the keys of m, sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestConformanceResyncPeriods covers client-go TestListenerResyncPeriods and
// TestListenerResyncPeriodsDelayed: handlers resync each on its own period, counted
// from Run, also when the first list comes late; a handler without resync never
// gets one, and 0 takes the informer's period. In client-go 0 means "never";
// ctrlkit's "never" is a negative period (see the notes).
func TestConformanceResyncPeriods(t *testing.T) {
	for _, delay := range []time.Duration{0, time.Second} {
		t.Run(fmt.Sprint("first list after ", delay), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newServer(t, reflectortest.Config{}, 2)
				if delay > 0 {
					var once sync.Once
					srv.SetHook(func(reflectortest.Request) error {
						once.Do(func() { time.Sleep(delay) })
						return nil
					})
				}
				inf := informer.New(srv, informer.Config[cm]{ResyncPeriod: time.Second})
				never, every2, every3, byDefault := newRecorder(), newRecorder(), newRecorder(), newRecorder()
				mustAdd(t, inf, never, informer.HandlerOptions{ResyncPeriod: -1})
				mustAdd(t, inf, every2, informer.HandlerOptions{ResyncPeriod: 2 * time.Second})
				mustAdd(t, inf, every3, informer.HandlerOptions{ResyncPeriod: 3 * time.Second})
				if delay == 0 {
					// With a late first list, its first resync may find nothing to resync.
					mustAdd(t, inf, byDefault, informer.HandlerOptions{})
				}
				t0 := time.Now()
				start(t, inf)
				sleepUntil(t0, delay)
				for i, r := range []*recorder{never, every2, every3} {
					if got := r.takeCalls(); !slices.Equal(got, []string{"initial cm-0@1", "initial cm-1@2"}) {
						t.Errorf("handler %d: initial calls = %v", i, got)
					}
				}
				byDefault.takeCalls()
				for _, step := range []struct {
					at                        time.Duration
					every2, every3, byDefault int // resync rounds since the last step
				}{
					{2500 * time.Millisecond, 1, 0, 2},
					{3500 * time.Millisecond, 0, 1, 1},
					{4500 * time.Millisecond, 1, 0, 1},
					{6500 * time.Millisecond, 1, 1, 2},
				} {
					sleepUntil(t0, step.at)
					if got := count(never.takeCalls(), ""); got != 0 {
						t.Errorf("at %v the handler without resync got %d calls", step.at, got)
					}
					if got := count(every2.takeCalls(), "sync "); got != 2*step.every2 {
						t.Errorf("at %v the 2s handler got %d resync calls, want %d", step.at, got, 2*step.every2)
					}
					if got := count(every3.takeCalls(), "sync "); got != 2*step.every3 {
						t.Errorf("at %v the 3s handler got %d resync calls, want %d", step.at, got, 2*step.every3)
					}
					if got := count(byDefault.takeCalls(), "sync "); delay == 0 && got != 2*step.byDefault {
						t.Errorf("at %v the default (1s) handler got %d resync calls, want %d", step.at, got, 2*step.byDefault)
					}
				}
			})
		})
	}
}

// TestConformanceResyncDeadlines covers client-go TestResyncCheckPeriod: client-go
// checks for due resyncs at the shortest period among its handlers and raises a
// period added later to it; ctrlkit keeps one deadline per handler, so a handler
// added later with a short period is served on time without changing the others,
// and a period below MinResyncPeriod is refused (see the notes).
func TestConformanceResyncDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 1)
		inf := informer.New(srv, informer.Config[cm]{ResyncPeriod: 12 * time.Hour})
		never, minute, h55, h5, byDefault := newRecorder(), newRecorder(), newRecorder(), newRecorder(), newRecorder()
		mustAdd(t, inf, never, informer.HandlerOptions{ResyncPeriod: -1})
		mustAdd(t, inf, minute, informer.HandlerOptions{ResyncPeriod: time.Minute})
		mustAdd(t, inf, byDefault, informer.HandlerOptions{})
		t0 := time.Now()
		start(t, inf)
		sleepUntil(t0, 10*time.Second)
		mustAdd(t, inf, h55, informer.HandlerOptions{ResyncPeriod: 55 * time.Second})
		mustAdd(t, inf, h5, informer.HandlerOptions{ResyncPeriod: 5 * time.Second})
		synctest.Wait()
		for _, r := range []*recorder{never, minute, h55, h5, byDefault} {
			r.takeCalls()
		}
		for _, step := range []struct {
			at                     time.Duration
			minute, h55, h5, other int
		}{
			{15500 * time.Millisecond, 0, 0, 1, 0},
			{59500 * time.Millisecond, 0, 0, 8, 0},
			{60500 * time.Millisecond, 1, 0, 1, 0},
			{65500 * time.Millisecond, 0, 1, 1, 0},
		} {
			sleepUntil(t0, step.at)
			for _, c := range []struct {
				name string
				r    *recorder
				want int
			}{{"1m", minute, step.minute}, {"55s", h55, step.h55}, {"5s", h5, step.h5}, {"never", never, 0}, {"12h", byDefault, 0}} {
				if got := count(c.r.takeCalls(), "sync "); got != c.want {
					t.Errorf("at %v the %s handler got %d resync calls, want %d", step.at, c.name, got, c.want)
				}
			}
		}
		if _, err := inf.AddHandler(newRecorder(), informer.HandlerOptions{ResyncPeriod: 500 * time.Millisecond}); !errors.Is(err, informer.ErrInvalidOptions) {
			t.Errorf("AddHandler with a resync period below the minimum = %v, want ErrInvalidOptions", err)
		}
	})
}

// TestConformanceAddHandlerRacingRun covers client-go
// TestSharedInformerInitializationRace: a handler added concurrently with Run's
// start (real goroutines, for the race detector) gets the first list exactly once.
func TestConformanceAddHandlerRacingRun(t *testing.T) {
	for range 20 {
		srv := newServer(t, reflectortest.Config{}, 3)
		inf := informer.New(srv, informer.Config[cm]{ResyncPeriod: time.Second})
		g := newGuarded()
		regs := make(chan *informer.Registration[cm], 1)
		go func() {
			reg, err := inf.AddHandler(g, informer.HandlerOptions{})
			if err != nil {
				t.Error(err)
			}
			regs <- reg
		}()
		stop := start(t, inf)
		reg := <-regs
		if reg == nil {
			return
		}
		if err := reg.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		stop()
		calls := g.takeCalls()
		if got := sorted(calls[:min(3, len(calls))]); !slices.Equal(got, []string{"initial cm-0@1", "initial cm-1@2", "initial cm-2@3"}) {
			t.Fatalf("calls = %v, want the three initial adds first", calls)
		}
		g.check(t)
	}
}

// TestConformanceWatchDisruption covers client-go TestSharedInformerWatchDisruption
// and TestResetWatch: changes made while the informer was cut off are delivered
// after it relists, as the changes of the cache (an update, and an add that is not
// in the initial list), and an object listed again unchanged is not delivered.
// client-go hands that object to the handlers whose resync is due at that moment
// as a resync; ctrlkit resyncs them on their own schedule only (see the notes).
func TestConformanceWatchDisruption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 2)
		part := reflectortest.NewPartition(srv)
		inf := informer.New(part, informer.Config[cm]{})
		noResync, withResync := newRecorder(), newRecorder()
		mustAdd(t, inf, noResync, informer.HandlerOptions{})
		mustAdd(t, inf, withResync, informer.HandlerOptions{ResyncPeriod: time.Second})
		start(t, inf)
		synctest.Wait()
		for _, r := range []*recorder{noResync, withResync} {
			if got := r.takeCalls(); !slices.Equal(got, []string{"initial cm-0@1", "initial cm-1@2"}) {
				t.Fatalf("initial calls = %v", got)
			}
		}
		part.Cut()
		mustCreate(t, srv, configMap("cm-2"))             // rv 3
		mustUpdate(t, srv, configMap("cm-1", "i", "new")) // rv 4
		srv.Compact()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		part.Heal()
		time.Sleep(time.Minute)
		synctest.Wait()
		want := []string{"update cm-1@2>cm-1@4", "add cm-2@3"}
		if diff := cmp.Diff(want, noResync.takeCalls()); diff != "" {
			t.Errorf("calls after the relist (-want +got):\n%s", diff)
		}
		var changes []string
		syncs := map[string]int{}
		for _, c := range withResync.takeCalls() {
			if strings.HasPrefix(c, "sync ") {
				syncs[strings.SplitN(c[len("sync "):], "@", 2)[0]]++
			} else {
				changes = append(changes, c)
			}
		}
		if diff := cmp.Diff(want, changes); diff != "" {
			t.Errorf("changes seen by the resyncing handler (-want +got):\n%s", diff)
		}
		if syncs["cm-0"] == 0 || syncs["cm-1"] == 0 || syncs["cm-2"] == 0 {
			t.Errorf("resyncs per key = %v, want every key resynced", syncs)
		}
		checkInSync(t, srv, inf, noResync, withResync)
	})
}

// TestConformanceListErrorReported covers client-go TestSharedInformerErrorHandling:
// a failed list is reported to the error handler (Config.OnError) with its message,
// and the informer retries and syncs.
func TestConformanceListErrorReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 1)
		srv.FailNext(reflectortest.List, apierrors.NewInternalError(errors.New("Access Denied")))
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
		if err := <-errs; !strings.Contains(err.Error(), "Access Denied") {
			t.Errorf("OnError got %v, want the list's error", err)
		}
		if err := inf.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		checkInSync(t, srv, inf)
	})
}

// TestConformanceTransform covers client-go TestSharedInformerTransformer,
// TestTransformingInformer, TestTransformingInformerRace, TestRealFIFO_transformer
// and TestDeltaFIFO_transformer: every object is transformed exactly once before it
// is cached or handed to a handler (adds, both sides of updates, deletions,
// tombstones, resyncs), and resyncs never transform again while the cache is read.
func TestConformanceTransform(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := reflectortest.NewServer[cm](reflectortest.Config{})
		part := reflectortest.NewPartition(srv)
		mk := func(name, gen string) cm {
			c := configMap(name, "secret", "s3cr3t")
			c.Labels = map[string]string{"generation": gen}
			return c
		}
		mustCreate(t, srv, mk("pod1", "1"))
		mustUpdate(t, srv, mk("pod1", "2"))
		var twice atomic.Bool
		transform := func(c cm) (cm, error) {
			if c.Labels["transformed"] != "" {
				twice.Store(true)
				return nil, errors.New("object already transformed")
			}
			c.Labels["transformed"] = "yes"
			delete(c.Data, "secret")
			return c, nil
		}
		var mu sync.Mutex
		var calls []string
		bad := func(c cm) bool { return c.Labels["transformed"] != "yes" || c.Data["secret"] != "" }
		record := func(format string, objs ...cm) {
			mu.Lock()
			defer mu.Unlock()
			args := make([]any, len(objs))
			for i, o := range objs {
				if bad(o) {
					t.Errorf("a handler got an untransformed object: %+v", o)
				}
				args[i] = o.Name + "/" + o.Labels["generation"]
			}
			calls = append(calls, fmt.Sprintf(format, args...))
		}
		take := func() []string {
			mu.Lock()
			defer mu.Unlock()
			c := calls
			calls = nil
			return c
		}
		inf := informer.New(part, informer.Config[cm]{Transform: transform, ResyncPeriod: time.Second})
		mustAdd(t, inf, informer.HandlerFuncs[cm]{
			AddFunc: func(obj cm, _ bool) { record("add %s", obj) },
			UpdateFunc: func(old, obj cm) {
				if old == obj {
					record("sync %s", obj)
				} else {
					record("update %s>%s", old, obj)
				}
			},
			DeleteFunc: func(d informer.Deleted[cm]) {
				if d.FinalStateUnknown {
					record("tombstone %s", d.Obj)
				} else {
					record("delete %s", d.Obj)
				}
			},
		}, informer.HandlerOptions{ResyncPeriod: -1})
		resyncing := newRecorder()
		mustAdd(t, inf, resyncing, informer.HandlerOptions{})
		start(t, inf)
		synctest.Wait()
		cacheNames := func() []string {
			var out []string
			for _, o := range inf.Indexer().List() {
				if bad(o) {
					t.Errorf("the cache holds an untransformed object: %+v", o)
				}
				out = append(out, o.Name+"/"+o.Labels["generation"])
			}
			sort.Strings(out)
			return out
		}
		if diff := cmp.Diff([]string{"add pod1/2"}, take()); diff != "" {
			t.Errorf("initial calls (-want +got):\n%s", diff)
		}
		mustCreate(t, srv, mk("pod2", "1"))
		mustCreate(t, srv, mk("pod3", "1"))
		mustUpdate(t, srv, mk("pod2", "2"))
		mustDelete(t, srv, "pod1")
		synctest.Wait()
		if diff := cmp.Diff([]string{"add pod2/1", "add pod3/1", "update pod2/1>pod2/2", "delete pod1/2"}, take()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"pod2/2", "pod3/1"}, cacheNames()); diff != "" {
			t.Errorf("cache (-want +got):\n%s", diff)
		}

		// Resyncs for a while, the cache read meanwhile.
		stop := make(chan struct{})
		var readers sync.WaitGroup
		for range 3 {
			readers.Go(func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(3 * time.Millisecond):
					}
					cacheNames()
				}
			})
		}
		time.Sleep(10 * time.Second)
		close(stop)
		readers.Wait()
		if n := count(resyncing.takeCalls(), "sync "); n < 2*9 {
			t.Errorf("%d resync calls in 10s, want about 20", n)
		}

		// A deletion found by a relist carries the transformed cached object.
		part.Cut()
		mustDelete(t, srv, "pod3")
		healCompacted(srv, part)
		if diff := cmp.Diff([]string{"tombstone pod3/1"}, take()); diff != "" {
			t.Errorf("calls after the relist (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"pod2/2"}, cacheNames()); diff != "" {
			t.Errorf("cache after the relist (-want +got):\n%s", diff)
		}
		if twice.Load() {
			t.Error("an object was transformed twice")
		}
	})
}

// TestConformanceRegistrations covers client-go TestSharedInformerRemoveHandler,
// TestSharedInformerRemoveForeignHandler, TestSharedInformerMultipleRegistration and
// TestRemovingRemovedSharedInformer: one handler added twice is two registrations,
// each called for every change; removing one leaves the other; removing twice is
// harmless. Removing a registration of another informer is refused with
// ErrUnknownRegistration (client-go ignores it; see the notes) and changes nothing.
func TestConformanceRegistrations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 1)
		var adds atomic.Int32
		h := informer.HandlerFuncs[cm]{AddFunc: func(cm, bool) { adds.Add(1) }}
		inf := informer.New(srv, informer.Config[cm]{})
		other := informer.New(newServer(t, reflectortest.Config{}, 1), informer.Config[cm]{})
		reg1 := mustAdd(t, inf, h, informer.HandlerOptions{})
		reg2 := mustAdd(t, inf, h, informer.HandlerOptions{})
		if reg1 == reg2 {
			t.Fatal("adding a handler twice gave one registration")
		}
		start(t, inf)
		synctest.Wait()
		expect := func(what string, want int32) {
			t.Helper()
			if got := adds.Swap(0); got != want {
				t.Errorf("%s: %d calls, want %d", what, got, want)
			}
		}
		expect("initial list to two registrations", 2)
		if err := other.RemoveHandler(reg1); !errors.Is(err, informer.ErrUnknownRegistration) {
			t.Errorf("removing a registration from another informer = %v, want ErrUnknownRegistration", err)
		}
		mustCreate(t, srv, configMap("a"))
		synctest.Wait()
		expect("a create after a foreign removal", 2)
		if err := inf.RemoveHandler(reg1); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, srv, configMap("b"))
		synctest.Wait()
		expect("a create after removing one registration", 1)
		if err := inf.RemoveHandler(reg1); err != nil {
			t.Errorf("removing a removed registration = %v, want nil", err)
		}
		if err := inf.RemoveHandler(reg2); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, srv, configMap("c"))
		synctest.Wait()
		expect("a create after removing both", 0)
	})
}

// TestConformanceAddAndRemoveWhileActive covers client-go TestAddWhileActive and
// TestRemoveWhileActive: a handler added while the informer runs counts as synced
// only once it has been given the cache, then gets every change alongside the
// first; a removed handler gets nothing more.
func TestConformanceAddAndRemoveWhileActive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 0)
		inf := informer.New(srv, informer.Config[cm]{})
		first := newRecorder()
		reg1 := mustAdd(t, inf, first, informer.HandlerOptions{})
		if reg1.HasSynced() {
			t.Error("synced before Run")
		}
		start(t, inf)
		synctest.Wait()
		mustCreate(t, srv, configMap("pod1"))
		synctest.Wait()
		if got := first.takeCalls(); !slices.Equal(got, []string{"add pod1@1"}) {
			t.Errorf("first handler: %v", got)
		}
		if !reg1.HasSynced() {
			t.Error("first handler not synced after the (empty) first list")
		}
		second := newRecorder()
		second.gate = make(chan struct{})
		reg2 := mustAdd(t, inf, second, informer.HandlerOptions{})
		synctest.Wait()
		if reg2.HasSynced() {
			t.Error("second handler synced before it was given the cache")
		}
		close(second.gate)
		if err := reg2.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, srv, configMap("pod2"))
		synctest.Wait()
		if got := second.takeCalls(); !slices.Equal(got, []string{"initial pod1@1", "add pod2@2"}) {
			t.Errorf("second handler: %v", got)
		}
		if got := first.takeCalls(); !slices.Equal(got, []string{"add pod2@2"}) {
			t.Errorf("first handler: %v", got)
		}
		if err := inf.RemoveHandler(reg1); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, srv, configMap("pod3"))
		synctest.Wait()
		if got := first.takeCalls(); len(got) != 0 {
			t.Errorf("removed handler got %v", got)
		}
		if got := second.takeCalls(); !slices.Equal(got, []string{"add pod3@3"}) {
			t.Errorf("second handler: %v", got)
		}
	})
}

// TestConformanceHandlerWritesToServer covers client-go TestUpdate: handlers may
// write to the server from their calls (no lock of the informer is held); an
// object created, then updated to its final state, is deleted by the handler that
// sees the update, and every object ends deleted. Updates only move forward.
func TestConformanceHandlerWritesToServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := reflectortest.NewServer[cm](reflectortest.Config{})
		inf := informer.New(srv, informer.Config[cm]{})
		pod := func(name, check string, final bool) cm {
			c := configMap(name)
			c.Labels = map[string]string{"check": check}
			if final {
				c.Labels["final"] = "true"
			}
			return c
		}
		var deleted atomic.Int32
		mustAdd(t, inf, informer.HandlerFuncs[cm]{
			UpdateFunc: func(old, obj cm) {
				if from, to := old.Labels["check"], obj.Labels["check"]; from != "from" || to != "to" {
					t.Errorf("transition %q -> %q for %s", from, to, obj.Name)
				}
				if obj.Labels["final"] == "true" {
					if _, err := srv.Delete(obj.Namespace, obj.Name); err != nil {
						t.Errorf("the handler's delete: %v", err)
					}
				}
			},
			DeleteFunc: func(informer.Deleted[cm]) { deleted.Add(1) },
		}, informer.HandlerOptions{})
		start(t, inf)
		synctest.Wait()
		const threads = 3
		var wg sync.WaitGroup
		for i := range threads {
			wg.Go(func() {
				name := fmt.Sprint("a-", i)
				if _, err := srv.Create(pod(name, "from", false)); err != nil {
					t.Error(err)
					return
				}
				if _, err := srv.Update(pod(name, "to", true)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		if n := deleted.Load(); n != threads {
			t.Errorf("%d deletions seen, want %d", n, threads)
		}
		if n := len(srv.Items()); n != 0 {
			t.Errorf("%d objects left on the server", n)
		}
		checkInSync(t, srv, inf)
	})
}

// TestConformanceRelistEvents covers client-go TestReplaceEvents: a relist is
// delivered as the deletions of what it lacks (tombstones, first), then the updates
// and adds of what it lists, in list order; when a handler is called the cache
// already holds the change (the deleted key is gone, the object is at the event's
// resourceVersion); and afterwards the cache is exactly the list.
func TestConformanceRelistEvents(t *testing.T) {
	type record struct {
		action, key      string
		eventRV, inCache string // resourceVersion of the object given, and of the cache's at the call
	}
	for _, tc := range []struct {
		name    string
		initial []string
		change  func(t *testing.T, srv *reflectortest.Server[cm])
		want    func(srv *reflectortest.Server[cm], before map[string]string) []record
	}{
		{"create with no initial objects", nil, func(t *testing.T, srv *reflectortest.Server[cm]) {
			mustCreate(t, srv, configMap("pod-1"))
		}, func(srv *reflectortest.Server[cm], _ map[string]string) []record {
			rv := serverVersions(srv)["ns/pod-1"]
			return []record{{"add", "ns/pod-1", rv, rv}}
		}},
		{"delete all objects", []string{"pod-1", "pod-3"}, func(t *testing.T, srv *reflectortest.Server[cm]) {
			mustDelete(t, srv, "pod-1")
			mustDelete(t, srv, "pod-3")
		}, func(_ *reflectortest.Server[cm], before map[string]string) []record {
			return []record{{"tombstone", "ns/pod-1", before["ns/pod-1"], ""}, {"tombstone", "ns/pod-3", before["ns/pod-3"], ""}}
		}},
		{"create, update, delete", []string{"pod-1", "pod-2", "pod-3"}, func(t *testing.T, srv *reflectortest.Server[cm]) {
			mustUpdate(t, srv, configMap("pod-1", "v", "2"))
			mustUpdate(t, srv, configMap("pod-2", "v", "2"))
			mustDelete(t, srv, "pod-3")
			mustCreate(t, srv, configMap("pod-4"))
		}, func(srv *reflectortest.Server[cm], before map[string]string) []record {
			now := serverVersions(srv)
			return []record{
				{"tombstone", "ns/pod-3", before["ns/pod-3"], ""},
				{"update", "ns/pod-1", now["ns/pod-1"], now["ns/pod-1"]},
				{"update", "ns/pod-2", now["ns/pod-2"], now["ns/pod-2"]},
				{"add", "ns/pod-4", now["ns/pod-4"], now["ns/pod-4"]},
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := reflectortest.NewServer[cm](reflectortest.Config{})
				for _, name := range tc.initial {
					mustCreate(t, srv, configMap(name))
				}
				part := reflectortest.NewPartition(srv)
				inf := informer.New(part, informer.Config[cm]{})
				var mu sync.Mutex
				var got []record
				rec := func(action string, o cm) {
					key := o.Namespace + "/" + o.Name
					var inCache string
					if c, ok := inf.Indexer().Get(key); ok {
						inCache = c.ResourceVersion
					}
					mu.Lock()
					got = append(got, record{action, key, o.ResourceVersion, inCache})
					mu.Unlock()
				}
				mustAdd(t, inf, informer.HandlerFuncs[cm]{
					AddFunc:    func(o cm, _ bool) { rec("add", o) },
					UpdateFunc: func(_, o cm) { rec("update", o) },
					DeleteFunc: func(d informer.Deleted[cm]) {
						action := "delete"
						if d.FinalStateUnknown {
							action = "tombstone"
						}
						rec(action, d.Obj)
					},
				}, informer.HandlerOptions{})
				start(t, inf)
				synctest.Wait()
				mu.Lock()
				got = nil
				mu.Unlock()
				before := serverVersions(srv)

				part.Cut()
				tc.change(t, srv)
				healCompacted(srv, part)
				mu.Lock()
				defer mu.Unlock()
				if diff := cmp.Diff(tc.want(srv, before), got, cmp.AllowUnexported(record{})); diff != "" {
					t.Errorf("calls (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(serverVersions(srv), cacheVersions(inf)); diff != "" {
					t.Errorf("cache differs from the list (-server +cache):\n%s", diff)
				}
			})
		})
	}
}

// TestConformanceResourceVersion covers client-go TestStoreResourceVersion and
// TestThreadSafeStoreRV: the informer (not the store, in ctrlkit; see the notes)
// tells the resourceVersion it has applied: "" at first, then that of the list, of
// each event (an update, a deletion) and of each relist.
func TestConformanceResourceVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 1)
		part := reflectortest.NewPartition(srv)
		inf := informer.New(part, informer.Config[cm]{})
		if got := inf.LastAppliedResourceVersion(); got != "" {
			t.Errorf("before Run: %q, want empty", got)
		}
		start(t, inf)
		synctest.Wait()
		expect := func(what, want string) {
			t.Helper()
			if got := inf.LastAppliedResourceVersion(); got != want {
				t.Errorf("after %s: %q, want %q", what, got, want)
			}
		}
		expect("the first list", srv.ResourceVersion())
		updated := mustUpdate(t, srv, configMap("cm-0", "foo", "bar"))
		synctest.Wait()
		expect("an update", updated.ResourceVersion)
		deleted := mustDelete(t, srv, "cm-0")
		synctest.Wait()
		expect("a deletion", deleted.ResourceVersion)
		part.Cut()
		mustCreate(t, srv, configMap("cm-1"))
		mustCreate(t, srv, configMap("cm-2"))
		healCompacted(srv, part)
		expect("a relist", srv.ResourceVersion())
	})
}

// TestConformanceResourceVersionTransformed covers client-go
// TestStoreResourceVersionWithNonMetaTransform as far as it applies (a ctrlkit
// Transform returns a T, which has metadata): a transform that clears the
// resourceVersion does not stop the informer, whose reflector keeps track of the
// server's; changes are still delivered, and LastAppliedResourceVersion stays at the
// list's until the next list.
func TestConformanceResourceVersionTransformed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 1)
		part := reflectortest.NewPartition(srv)
		inf := informer.New(part, informer.Config[cm]{Transform: func(c cm) (cm, error) {
			c.ResourceVersion = ""
			return c, nil
		}})
		var mu sync.Mutex
		var calls []string
		mustAdd(t, inf, informer.HandlerFuncs[cm]{
			AddFunc: func(o cm, initial bool) {
				mu.Lock()
				calls = append(calls, fmt.Sprintf("add %s %v", o.Name, initial))
				mu.Unlock()
			},
			UpdateFunc: func(old, o cm) {
				mu.Lock()
				calls = append(calls, fmt.Sprintf("update %s %s>%s", o.Name, old.Data["foo"], o.Data["foo"]))
				mu.Unlock()
			},
		}, informer.HandlerOptions{})
		start(t, inf)
		synctest.Wait()
		listRV := srv.ResourceVersion()
		if got := inf.LastAppliedResourceVersion(); got != listRV {
			t.Errorf("after the first list: %q, want %q", got, listRV)
		}
		mustUpdate(t, srv, configMap("cm-0", "foo", "bar"))
		synctest.Wait()
		if got := inf.LastAppliedResourceVersion(); got != listRV {
			t.Errorf("after an update without resourceVersion: %q, want the list's %q", got, listRV)
		}
		part.Cut()
		mustUpdate(t, srv, configMap("cm-0", "foo", "bar2"))
		healCompacted(srv, part)
		if got := inf.LastAppliedResourceVersion(); got != srv.ResourceVersion() {
			t.Errorf("after a relist: %q, want %q", got, srv.ResourceVersion())
		}
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]string{"add cm-0 true", "update cm-0 >bar", "update cm-0 bar>bar2"}, calls); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		if n := len(srv.Requests()); n > 10 {
			t.Errorf("%d requests to the server: the informer keeps relisting", n)
		}
	})
}

// TestConformanceDeletedObjects covers client-go TestDeletionHandlingObjectToName,
// TestDeletedObjectGetObjectName and TestDeletedObjectGetKey. ctrlkit hands OnDelete
// a typed Deleted[T] instead of an object or a DeletedFinalStateUnknown (see the
// notes): it always carries the key and an object whose key it is; a watched
// deletion carries the object's final state, a deletion found by a relist the last
// cached object (the very instance the handler holds) with FinalStateUnknown set.
func TestConformanceDeletedObjects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 2)
		part := reflectortest.NewPartition(srv)
		inf := informer.New(part, informer.Config[cm]{})
		var mu sync.Mutex
		held := map[string]cm{}
		var dels []informer.Deleted[cm]
		mustAdd(t, inf, informer.HandlerFuncs[cm]{
			AddFunc: func(o cm, _ bool) {
				mu.Lock()
				held[o.Namespace+"/"+o.Name] = o
				mu.Unlock()
			},
			DeleteFunc: func(d informer.Deleted[cm]) {
				mu.Lock()
				dels = append(dels, d)
				mu.Unlock()
			},
		}, informer.HandlerOptions{})
		start(t, inf)
		synctest.Wait()
		final := mustDelete(t, srv, "cm-0")
		synctest.Wait()
		part.Cut()
		mustDelete(t, srv, "cm-1")
		healCompacted(srv, part)
		mu.Lock()
		defer mu.Unlock()
		if len(dels) != 2 {
			t.Fatalf("deletions = %+v, want two", dels)
		}
		watched, inferred := dels[0], dels[1]
		if watched.Key != "ns/cm-0" || watched.FinalStateUnknown || watched.Obj.Name != "cm-0" || watched.Obj.ResourceVersion != final.ResourceVersion {
			t.Errorf("watched deletion = {%s %s@%s %v}, want ns/cm-0 with its final state at %s",
				watched.Key, watched.Obj.Name, watched.Obj.ResourceVersion, watched.FinalStateUnknown, final.ResourceVersion)
		}
		if inferred.Key != "ns/cm-1" || !inferred.FinalStateUnknown || inferred.Obj != held["ns/cm-1"] {
			t.Errorf("inferred deletion = {%s %v %v}, want ns/cm-1, FinalStateUnknown, the instance the handler holds",
				inferred.Key, inferred.Obj, inferred.FinalStateUnknown)
		}
	})
}

// TestConformanceIndexFailureStillDelivers covers client-go TestProcessDeltasInBatch.
// client-go does not notify handlers of an object its store failed to take (an
// index function error fails the write); ctrlkit stores the object without a value
// in the failing index, reports an *indexer.IndexError to OnError, and delivers the
// change (see the notes).
func TestConformanceIndexFailureStillDelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := reflectortest.NewServer[cm](reflectortest.Config{})
		var mu sync.Mutex
		var errs []error
		inf := informer.New(srv, informer.Config[cm]{
			Indexers: indexer.Indexers[cm]{"picky": func(c cm) ([]string, error) {
				if c.Name == "testname2" {
					return nil, errors.New("cannot index")
				}
				return []string{"ok"}, nil
			}},
			OnError: func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			},
		})
		rec := newRecorder()
		mustAdd(t, inf, rec, informer.HandlerOptions{})
		start(t, inf)
		synctest.Wait()
		for _, n := range []string{"testname1", "testname2", "testname3"} {
			mustCreate(t, srv, configMap(n))
		}
		synctest.Wait()
		if diff := cmp.Diff([]string{"add testname1@1", "add testname2@2", "add testname3@3"}, rec.takeCalls()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		checkInSync(t, srv, inf, rec)
		objs, err := inf.Indexer().ByIndex("picky", "ok")
		if err != nil || !slices.Equal(names(objs), []string{"testname1", "testname3"}) {
			t.Errorf("ByIndex(picky, ok) = %v, %v; want testname1, testname3", names(objs), err)
		}
		mu.Lock()
		defer mu.Unlock()
		var ie *indexer.IndexError
		if len(errs) != 1 || !errors.As(errs[0], &ie) || ie.Key != "ns/testname2" || ie.Index != "picky" {
			t.Errorf("OnError got %v, want one IndexError for ns/testname2", errs)
		}
	})
}

// TestConformanceHandlerBuffering covers what client-go's processor listener
// (processor_listener_test.go) relies on: a handler's notifications are buffered so
// that a slow handler never blocks the informer, and are delivered in order. client-go
// buffers without bound; ctrlkit buffers up to BufferLimit changes one by one and then
// coalesces per key until the handler catches up (see the notes): a handler within
// its limit gets every change in order, one past it gets the latest state, with a
// consistent story either way.
func TestConformanceHandlerBuffering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 1)
		inf := informer.New(srv, informer.Config[cm]{})
		roomy, tight := newRecorder(), newRecorder()
		roomy.gate, tight.gate = make(chan struct{}), make(chan struct{})
		roomyReg := mustAdd(t, inf, roomy, informer.HandlerOptions{BufferLimit: 1000})
		tightReg := mustAdd(t, inf, tight, informer.HandlerOptions{BufferLimit: 4})
		start(t, inf)
		synctest.Wait()
		var want []string
		prev := srv.Items()[0]
		for i := range 100 {
			next := mustUpdate(t, srv, configMap("cm-0", "i", strconv.Itoa(i)))
			want = append(want, "update "+describe(prev)+">"+describe(next))
			prev = next
		}
		synctest.Wait()
		if got := cacheVersions(inf)["ns/cm-0"]; got != prev.ResourceVersion {
			t.Errorf("the cache is at %s while both handlers are stuck, want %s", got, prev.ResourceVersion)
		}
		close(roomy.gate)
		close(tight.gate)
		synctest.Wait()
		if diff := cmp.Diff(append([]string{"initial cm-0@1"}, want...), roomy.takeCalls()); diff != "" {
			t.Errorf("handler within its buffer (-want +got):\n%s", diff)
		}
		tightCalls := tight.takeCalls()
		if len(tightCalls) == 0 || len(tightCalls) >= len(want) || !strings.HasSuffix(tightCalls[len(tightCalls)-1], ">"+describe(prev)) {
			t.Errorf("handler past its buffer got %d calls: %v", len(tightCalls), tightCalls)
		}
		checkInSync(t, srv, inf, roomy, tight)
		if s := tightReg.Stats(); s.Coalesced == 0 || s.Coalescing {
			t.Errorf("stats of the handler past its buffer = %+v", s)
		}
		if s := roomyReg.Stats(); s.Coalesced != 0 || s.Delivered != 101 {
			t.Errorf("stats of the handler within its buffer = %+v", s)
		}
	})
}
