package informer_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
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

// TestEmptyResyncBatch drives the window in which a resync comes out of the FIFO
// with nothing to resync, deterministically: an index function holds the pop loop
// on one update while the resync is queued behind it and a second update of the
// only object is queued behind the resync. When the resync is popped, its one key
// has a newer change queued, so its batch is empty. The informer must take that
// in its stride, and resync normally the next time.
func TestEmptyResyncBatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(t *testing.T, srv *reflectortest.Server[cm])
	}{
		{"updated again", func(t *testing.T, srv *reflectortest.Server[cm]) {
			mustUpdate(t, srv, configMap("cm-0", "i", "2"))
		}},
		{"deleted", func(t *testing.T, srv *reflectortest.Server[cm]) {
			mustDelete(t, srv, "cm-0")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newServer(t, reflectortest.Config{}, 1)
				gate := make(chan struct{})
				held := make(chan struct{}, 1)
				inf := informer.New(srv, informer.Config[cm]{
					ResyncPeriod: time.Second,
					Indexers: indexer.Indexers[cm]{"gated": func(c cm) ([]string, error) {
						if c.Data["i"] == "1" {
							held <- struct{}{}
							<-gate
						}
						return nil, nil
					}},
				})
				rec := newRecorder()
				mustAdd(t, inf, rec, informer.HandlerOptions{})
				start(t, inf)
				synctest.Wait()
				rec.takeCalls()

				mustUpdate(t, srv, configMap("cm-0", "i", "1"))
				<-held // the pop loop is applying that update
				time.Sleep(time.Second)
				synctest.Wait() // the resync is queued behind the update
				tc.after(t, srv)
				synctest.Wait() // and the next change behind the resync
				close(gate)
				synctest.Wait()
				checkInSync(t, srv, inf, rec)
				for _, c := range rec.takeCalls() {
					if c[:4] == "sync" {
						t.Errorf("a resync was delivered for a key with a newer change queued: %s", c)
					}
				}
				if len(srv.Items()) == 0 {
					return
				}
				// The next resync finds the object and delivers it.
				time.Sleep(time.Second)
				synctest.Wait()
				want := []string{"sync cm-0@" + srv.Items()[0].ResourceVersion}
				if diff := cmp.Diff(want, rec.takeCalls()); diff != "" {
					t.Errorf("the resync after the empty one (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// panicky is a handler that panics on every call for an object whose name ends in
// an even digit, and counts the calls it got.
type panicky struct {
	mu    sync.Mutex
	calls int
}

func (p *panicky) check(obj cm) {
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	if d := obj.Name[len(obj.Name)-1]; (d-'0')%2 == 0 {
		panic("handler bug on " + obj.Name)
	}
}

func (p *panicky) OnAdd(obj cm, _ bool)            { p.check(obj) }
func (p *panicky) OnUpdate(_, obj cm)              { p.check(obj) }
func (p *panicky) OnDelete(d informer.Deleted[cm]) { p.check(d.Obj) }
func (p *panicky) total() int                      { p.mu.Lock(); defer p.mu.Unlock(); return p.calls }

// errorsOf returns the errors of errs that are (or wrap) an E.
func errorsOf[E error](errs []error) (out []E) {
	for _, err := range errs {
		var e E
		if errors.As(err, &e) {
			out = append(out, e)
		}
	}
	return out
}

// errorSink collects OnError's errors.
type errorSink struct {
	mu   sync.Mutex
	errs []error
}

func (s *errorSink) add(err error) { s.mu.Lock(); s.errs = append(s.errs, err); s.mu.Unlock() }
func (s *errorSink) take() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.errs
	s.errs = nil
	return e
}

// TestHandlerPanicsAreContained: a handler that panics on half the objects, in the
// initial list, on updates, deletions and resyncs, does not stop the informer, its
// other calls, or other handlers; every panic is reported with its key, call and
// stack, and counted.
func TestHandlerPanicsAreContained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 10)
		var sink errorSink
		inf := informer.New(srv, informer.Config[cm]{OnError: sink.add, ResyncPeriod: time.Minute})
		bad := &panicky{}
		badReg := mustAdd(t, inf, bad, informer.HandlerOptions{})
		good := newRecorder()
		mustAdd(t, inf, good, informer.HandlerOptions{})
		start(t, inf)
		synctest.Wait()
		if !badReg.HasSynced() {
			t.Fatal("the panicking handler never synced: its initial list panicked on half the objects")
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range 300 {
			name := "cm-" + strconv.Itoa(rng.IntN(20))
			switch _, err := srv.Update(configMap(name, "i", strconv.Itoa(i))); {
			case err == nil:
			case apierrors.IsNotFound(err):
				mustCreate(t, srv, configMap(name, "i", strconv.Itoa(i)))
			default:
				t.Fatal(err)
			}
			if rng.IntN(5) == 0 {
				if _, err := srv.Delete("ns", name); err != nil {
					t.Fatal(err)
				}
			}
			if i%50 == 0 {
				time.Sleep(time.Minute) // let resyncs fire under churn
			}
			synctest.Wait()
		}
		synctest.Wait()
		checkInSync(t, srv, inf, good)
		st := badReg.Stats()
		panics := errorsOf[*informer.PanicError](sink.take())
		if st.Panicked == 0 || int(st.Panicked) != len(panics) {
			t.Fatalf("Stats.Panicked = %d, %d panics reported; want the same, not 0", st.Panicked, len(panics))
		}
		if int(st.Delivered+st.Panicked) != bad.total() {
			t.Errorf("Delivered %d + Panicked %d != %d calls made", st.Delivered, st.Panicked, bad.total())
		}
		for _, p := range panics {
			d := p.Key[len(p.Key)-1]
			if (d-'0')%2 != 0 || p.Informer != inf.Name() || len(p.Stack) == 0 || !strings.Contains(p.Error(), p.Key) ||
				(p.Call != "OnAdd" && p.Call != "OnUpdate" && p.Call != "OnDelete") {
				t.Errorf("panic report %+v: want an even key, the informer's name, a call name and a stack", p)
				break
			}
		}
	})
}

// TestRefusedObjectsStayOutOfTheCache: objects the Transform refuses are kept out
// of the cache, in the initial list and in later events; the informer syncs,
// handlers get a consistent story (a refused object they knew is a tombstone),
// the cache's resourceVersion keeps advancing, and a refused object that changes
// into something storable comes back.
func TestRefusedObjectsStayOutOfTheCache(t *testing.T) {
	for _, mode := range []reflector.WatchListMode{reflector.WatchListOff, reflector.WatchListOn} {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newServer(t, reflectortest.Config{WatchList: true}, 6)
				mustUpdate(t, srv, configMap("cm-1", "bad", "yes"))
				var sink errorSink
				inf := informer.New(srv, informer.Config[cm]{
					OnError:   sink.add,
					Reflector: reflector.Config[cm]{WatchList: mode},
					Transform: func(c cm) (cm, error) {
						switch c.Data["bad"] {
						case "yes":
							return nil, errors.New("refused")
						case "panic":
							panic("transform bug")
						}
						return c, nil
					},
				})
				rec := newRecorder()
				mustAdd(t, inf, rec, informer.HandlerOptions{})
				start(t, inf)
				// A bound in the bubble's time: a regression fails instead of spinning.
				ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
				defer cancel()
				if err := inf.WaitForSync(ctx); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				checkGood(t, srv, inf, rec)

				// A cached object turns bad: dropped, a tombstone to handlers, and the
				// cache reaches the refused event's resourceVersion.
				rec.takeCalls()
				before, err := inf.Lister().Get("ns", "cm-2")
				if err != nil {
					t.Fatal(err)
				}
				bad := mustUpdate(t, srv, configMap("cm-2", "bad", "panic"))
				if err := inf.WaitForResourceVersion(ctx, bad.ResourceVersion); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				if diff := cmp.Diff([]string{"tombstone " + describe(before)}, rec.takeCalls()); diff != "" {
					t.Errorf("calls after cm-2 turned bad (-want +got):\n%s", diff)
				}
				// Churn of good and bad objects.
				for i := range 60 {
					name := "cm-" + strconv.Itoa(i%6)
					data := []string{"i", strconv.Itoa(i)}
					if i%4 == 1 {
						data = []string{"bad", "yes"}
					}
					mustUpdate(t, srv, configMap(name, data...))
				}
				synctest.Wait()
				checkGood(t, srv, inf, rec)
				// Every refused object becomes good again, one is deleted while bad.
				mustDelete(t, srv, "cm-5")
				for _, o := range srv.Items() {
					if o.Data["bad"] != "" {
						mustUpdate(t, srv, configMap(o.Name, "i", "ok"))
					}
				}
				last := mustCreate(t, srv, configMap("cm-new"))
				if err := inf.WaitForResourceVersion(ctx, last.ResourceVersion); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				checkInSync(t, srv, inf, rec)
				refused := errorsOf[*reflector.RefusedError](sink.take())
				if h := inf.Health(); h.Stats.Refused != int64(len(refused)) || len(refused) < 10 || h.Stats.Failures != 0 {
					t.Errorf("Stats %+v, %d refusals reported: want them equal, at least 10, and no failure", h.Stats, len(refused))
				}
			})
		})
	}
}

// checkGood is checkInSync for the server's objects that are not marked bad.
func checkGood(t *testing.T, s *reflectortest.Server[cm], inf *informer.Informer[cm], recs ...*recorder) {
	t.Helper()
	want := map[string]string{}
	for _, o := range s.Items() {
		if o.Data["bad"] == "" {
			want[o.Namespace+"/"+o.Name] = o.ResourceVersion
		}
	}
	if diff := cmp.Diff(want, cacheVersions(inf)); diff != "" {
		t.Errorf("cache differs from the server's good objects (-server +cache):\n%s", diff)
	}
	for i, r := range recs {
		if diff := cmp.Diff(want, r.versions()); diff != "" {
			t.Errorf("handler %d differs from the server's good objects (-server +handler):\n%s", i, diff)
		}
		r.check(t)
	}
}

// TestResyncOfHandlerAddedDuringBatch: a handler with a resync period, added while
// the informer is applying a batch (so that it joins once the batch is dispatched),
// is resynced on its period like any other handler.
func TestResyncOfHandlerAddedDuringBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 2)
		hold, held := make(chan struct{}), make(chan struct{})
		inf := informer.New(srv, informer.Config[cm]{Indexers: indexer.Indexers[cm]{
			"hold": func(c cm) ([]string, error) {
				if c.Name == "hold" {
					close(held)
					<-hold
				}
				return nil, nil
			},
		}})
		start(t, inf)
		synctest.Wait()
		mustCreate(t, srv, configMap("hold"))
		<-held // the pop loop is applying the batch of "hold"
		rec := newRecorder()
		mustAdd(t, inf, rec, informer.HandlerOptions{ResyncPeriod: time.Second})
		synctest.Wait() // the resync loop has taken the wake-up of AddHandler
		close(hold)
		synctest.Wait()
		rec.takeCalls()
		time.Sleep(5*time.Second + time.Millisecond)
		synctest.Wait()
		syncs := 0
		for _, c := range rec.takeCalls() {
			if strings.HasPrefix(c, "sync ") {
				syncs++
			}
		}
		if syncs != 5*3 {
			t.Errorf("%d resync calls in 5s with a period of 1s and 3 cached objects, want 15", syncs)
		}
	})
}

// TestPanickingOnErrorIsContained: an OnError that panics on every error (here
// the panics of a handler and the refusals of a Transform) stops neither the
// informer nor its handlers.
func TestPanickingOnErrorIsContained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newServer(t, reflectortest.Config{}, 4)
		mustUpdate(t, srv, configMap("cm-1", "bad", "yes"))
		inf := informer.New(srv, informer.Config[cm]{
			OnError: func(error) { panic("OnError bug") },
			Transform: func(c cm) (cm, error) {
				if c.Data["bad"] != "" {
					return nil, errors.New("refused")
				}
				return c, nil
			},
		})
		bad := mustAdd(t, inf, &panicky{}, informer.HandlerOptions{})
		rec := newRecorder()
		mustAdd(t, inf, rec, informer.HandlerOptions{})
		start(t, inf)
		synctest.Wait()
		mustCreate(t, srv, configMap("cm-8"))
		mustUpdate(t, srv, configMap("cm-2", "bad", "yes"))
		synctest.Wait()
		checkGood(t, srv, inf, rec)
		if st := bad.Stats(); st.Panicked < 3 {
			t.Errorf("handler panics counted: %d, want the initial list's and cm-8's", st.Panicked)
		}
		if got := inf.Health().Stats.Refused; got != 2 {
			t.Errorf("Stats.Refused = %d, want 2", got)
		}
	})
}
