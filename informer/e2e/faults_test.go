//go:build e2e

package e2e

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/testrun"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// storm creates, updates and deletes ConfigMaps from several goroutines until
// ended. hold pauses it (waiting for the writes in flight) so that the server's
// state can be compared with the cache.
type storm struct {
	c      typedcorev1.ConfigMapInterface
	gate   sync.RWMutex // writers hold it for reading during each write
	stop   chan struct{}
	wg     sync.WaitGroup
	writes atomic.Int64
	mu     sync.Mutex
	err    error // the first unexpected error
}

func startStorm(t *testing.T, ns string, writers, names int) *storm {
	s := &storm{c: admin(t).CoreV1().ConfigMaps(ns), stop: make(chan struct{})}
	for w := range writers {
		s.wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; ; i++ {
				select {
				case <-s.stop:
					return
				default:
				}
				name := "storm-" + strconv.Itoa(rnd.IntN(names))
				s.gate.RLock()
				var err error
				switch rnd.IntN(4) {
				case 0:
					_, err = s.c.Create(t.Context(), newConfigMap(name, i), metav1.CreateOptions{})
				case 1:
					err = s.c.Delete(t.Context(), name, metav1.DeleteOptions{})
				default:
					_, err = s.c.Update(t.Context(), newConfigMap(name, i), metav1.UpdateOptions{})
				}
				s.gate.RUnlock()
				switch {
				case err == nil:
					s.writes.Add(1)
				case !tolerable(err):
					s.mu.Lock()
					if s.err == nil {
						s.err = err
					}
					s.mu.Unlock()
					return
				case !apierrors.IsNotFound(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsConflict(err):
					time.Sleep(50 * time.Millisecond) // the server is down: do not spin
				}
			}
		})
	}
	return s
}

func (s *storm) hold()   { s.gate.Lock() }
func (s *storm) resume() { s.gate.Unlock() }

func (s *storm) end(t *testing.T) {
	t.Helper()
	close(s.stop)
	s.wg.Wait()
	if s.err != nil {
		t.Fatalf("storm: %v", s.err)
	}
}

// TestStormThroughRestartsAndCompactions runs a create/update/delete storm while
// the API server is restarted ten times, alternately by SIGTERM and SIGKILL, and
// etcd is compacted before every other restart, which forces relists (410 Gone).
// After every fault the storm pauses and the cache and every handler must equal a
// fresh LIST within the deadline; throughout, each handler's calls must be
// consistent per key (see checker). One handler is slow and coalesces; one joins
// in the middle.
func TestStormThroughRestartsAndCompactions(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	createConfigMaps(t, ns, 60, 8)
	onError, errs := testrun.Errors()
	inf := informer.New(reflector.FromTyped(admin(t).CoreV1().ConfigMaps(ns)), informer.Config[configMap]{
		Name:      "storm",
		OnError:   onError,
		Transform: reflector.StripManagedFields[configMap],
		Reflector: reflector.Config[configMap]{Backoff: reflector.Backoff{Max: 2 * time.Second}},
	})
	steady := newChecker[configMap]()
	slow := newChecker[configMap]()
	var calls atomic.Int64
	slow.pause = func() {
		if calls.Add(1)%100 == 0 {
			time.Sleep(300 * time.Millisecond) // a slow downstream call now and then
		}
	}
	mustAdd(t, inf, steady, informer.HandlerOptions{})
	slowReg := mustAdd(t, inf, slow, informer.HandlerOptions{BufferLimit: 16})
	testrun.Run(t, inf.Run)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}

	checkers := []*checker[configMap]{steady, slow}
	s := startStorm(t, ns, 4, 100)
	settle := func(label string) {
		t.Helper()
		s.hold()
		defer s.resume()
		want := serverVersions(t, ns)
		took := waitInSync(t, converge, want, inf, checkers...)
		t.Logf("%s: %d objects, converged %v after the storm paused", label, len(want), took.Round(time.Millisecond))
	}
	time.Sleep(2 * time.Second) // let the storm run
	settle("before the faults")

	for i := range 10 {
		sig := []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}[i%2]
		compacted := i%2 == 1
		if compacted {
			if _, err := env.Compact(ctx); err != nil {
				t.Fatal(err)
			}
		}
		restart := time.Now()
		if err := env.RestartAPIServer(ctx, sig); err != nil {
			t.Fatal(err)
		}
		if i == 4 {
			late := newChecker[configMap]()
			reg := mustAdd(t, inf, late, informer.HandlerOptions{})
			checkers = append(checkers, late)
			defer func() {
				if !reg.HasSynced() {
					t.Error("the late handler never synced")
				}
			}()
		}
		time.Sleep(1500 * time.Millisecond) // the storm goes on against the new server
		settle(fmt.Sprintf("restart %d (%v, compacted %v, restart took %v)", i+1, sig, compacted, time.Since(restart).Round(time.Millisecond)))
	}
	s.end(t)
	want := serverVersions(t, ns)
	waitInSync(t, converge, want, inf, checkers...)
	for i, c := range checkers {
		c.check(t, fmt.Sprintf("handler %d", i))
	}

	h := inf.Health()
	t.Logf("writes %d, health %+v", s.writes.Load(), h.Stats)
	if h.Stats.Expired < 1 || h.Stats.Lists+h.Stats.StreamingLists < 2 {
		t.Errorf("no relist after compactions and restarts: %+v", h.Stats)
	}
	if len(errs) == 0 {
		t.Error("ten restarts caused no error")
	}
	st := slowReg.Stats()
	t.Logf("slow handler: %+v; tombstones seen by the steady handler: %d", st, len(steady.tombstones))
	if st.Coalesced == 0 || st.MaxBacklog > 16+2*(100+60) {
		t.Errorf("slow handler stats = %+v, want some coalescing and a bounded backlog", st)
	}
}

// TestTombstonesAfterDisconnection cuts the informer off while objects are
// deleted, changed and created, compacts etcd and restarts the API server so the
// informer must relist. The deletions then arrive as tombstones carrying the last
// state the handler had, the changes as updates, the creations as adds, and
// nothing else.
func TestTombstonesAfterDisconnection(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	createConfigMaps(t, ns, 40, 8)
	sw := reflectortest.NewPartition(reflector.FromTyped(admin(t).CoreV1().ConfigMaps(ns)))
	inf := informer.New[configMap](sw, informer.Config[configMap]{
		Reflector: reflector.Config[configMap]{Backoff: reflector.Backoff{Max: time.Second}},
	})
	rec := newChecker[configMap]()
	mustAdd(t, inf, rec, informer.HandlerOptions{})
	testrun.Run(t, inf.Run)
	waitInSync(t, converge, serverVersions(t, ns), inf, rec)
	before := rec.versions()

	sw.Cut()
	c := admin(t).CoreV1().ConfigMaps(ns)
	var deleted []string
	for i := range 10 {
		name := "cm-" + strconv.Itoa(i)
		if err := c.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleted = append(deleted, ns+"/"+name)
		if _, err := c.Update(ctx, newConfigMap("cm-"+strconv.Itoa(10+i), -i), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if _, err := c.Create(ctx, newConfigMap("new-"+strconv.Itoa(i), i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if err := env.RestartAPIServer(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sw.Heal()
	took := waitInSync(t, converge, serverVersions(t, ns), inf, rec)
	t.Logf("converged %v after reconnecting", took)
	rec.check(t, "handler")

	rec.mu.Lock()
	tombstones, adds, updates, deletes := slices.Sorted(slices.Values(rec.tombstones)), rec.adds, rec.updates, rec.deletes
	rec.mu.Unlock()
	slices.Sort(deleted)
	if diff := cmp.Diff(deleted, tombstones); diff != "" {
		t.Errorf("tombstones (-deleted +delivered):\n%s", diff)
	}
	if adds != 5 || updates != 10 || deletes != 10 {
		t.Errorf("after the relist: %d adds, %d updates, %d deletes; want 5, 10, 10", adds, updates, deletes)
	}
	if h := inf.Health(); h.Stats.Expired < 1 {
		t.Errorf("no 410 relist: %+v", h.Stats)
	}
	// Each tombstone carried the last state the handler had been given.
	for _, k := range deleted {
		rec.mu.Lock()
		last := rec.lastRV[k]
		rec.mu.Unlock()
		if strconv.FormatInt(last, 10) != before[k] {
			t.Errorf("%s: tombstone at %d, the handler had %s", k, last, before[k])
		}
	}
	if h := inf.Health(); h.Stats.Failures < 1 || h.LastError == nil {
		t.Errorf("the cut left no failure in Health: %+v", h)
	}
}

func mustAdd[T reflector.Object](t *testing.T, inf *informer.Informer[T], h informer.Handler[T], opts informer.HandlerOptions) *informer.Registration[T] {
	t.Helper()
	reg, err := inf.AddHandler(h, opts)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}
