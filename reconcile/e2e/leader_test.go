//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ctrlkit/ctrlkit/reconcile"
)

// tracker records which replica reconciles when, and counts reconciles of one
// replica that started while another replica was reconciling.
type tracker struct {
	mu       sync.Mutex
	active   map[string]int
	calls    map[string]int
	first    map[string]time.Time
	overlaps int
}

func newTracker() *tracker {
	return &tracker{active: map[string]int{}, calls: map[string]int{}, first: map[string]time.Time{}}
}

func (tr *tracker) wrap(id string) func(reconcile.Reconciler[key]) reconcile.Reconciler[key] {
	return func(r reconcile.Reconciler[key]) reconcile.Reconciler[key] {
		return reconcile.Func[key](func(ctx context.Context, k key) (reconcile.Result, error) {
			tr.mu.Lock()
			for other, n := range tr.active {
				if other != id && n > 0 {
					tr.overlaps++
				}
			}
			tr.active[id]++
			tr.calls[id]++
			if _, ok := tr.first[id]; !ok {
				tr.first[id] = time.Now()
			}
			tr.mu.Unlock()
			defer func() {
				tr.mu.Lock()
				tr.active[id]--
				tr.mu.Unlock()
			}()
			time.Sleep(2 * time.Millisecond) // widen the window in which an overlap shows
			return r.Reconcile(ctx, k)
		})
	}
}

func (tr *tracker) snapshot(id string) (calls int, first time.Time, overlaps int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.calls[id], tr.first[id], tr.overlaps
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

func electedConfig(t *testing.T, ns, id string) reconcile.Config[key] {
	return reconcile.Config[key]{
		Workers:      2,
		ResyncPeriod: 2 * time.Second, // keep the leader busy
		LeaderElection: &reconcile.LeaderElection{
			Lock:          reconcile.NewLeaseLock(clientset(t), ns, "mirror-lock", id),
			LeaseDuration: leaseDuration,
			RenewDeadline: renewDeadline,
			RetryPeriod:   retryPeriod,
		},
	}
}

func TestLeaderElectionHandover(t *testing.T) {
	c := clientset(t)
	const ns = "leader"
	createNamespace(t, c, ns)
	tr := newTracker()
	storm(t, c, ns, 20, "a")

	a := startMirror(t, ns, electedConfig(t, ns, "a"), tr.wrap("a"))
	waitFor(t, 30*time.Second, "replica a to reconcile", func() bool { n, _, _ := tr.snapshot("a"); return n > 0 })
	b := startMirror(t, ns, electedConfig(t, ns, "b"), tr.wrap("b"))
	waitConverged(t, c, ns, 30*time.Second)
	// b has synced its caches and campaigned for a while: it must not reconcile.
	time.Sleep(3 * retryPeriod)
	if n, _, _ := tr.snapshot("b"); n != 0 {
		t.Fatalf("replica b reconciled %d keys while a leads", n)
	}

	// Kill the leader: its context ends without releasing the lease (a crash).
	killed := time.Now()
	if err := a.stop(); err != nil {
		t.Fatalf("leader's Run: %v", err)
	}
	storm(t, c, ns, 20, "b")
	waitFor(t, 3*leaseDuration, "replica b to take over", func() bool { n, _, _ := tr.snapshot("b"); return n > 0 })
	_, first, _ := tr.snapshot("b")
	if took := first.Sub(killed); took > leaseDuration+3*retryPeriod+time.Second {
		t.Errorf("handover took %v, lease duration is %v", took, leaseDuration)
	} else {
		t.Logf("handover took %v (lease duration %v)", took, leaseDuration)
	}
	waitConverged(t, c, ns, 30*time.Second)
	if _, _, overlaps := tr.snapshot("b"); overlaps != 0 {
		t.Errorf("%d reconciles overlapped between replicas", overlaps)
	}
	if err := b.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestLeadershipLostStopsWorkers takes the lease away from the leader: its Run
// must stop its workers and return ErrLeadershipLost.
func TestLeadershipLostStopsWorkers(t *testing.T) {
	c := clientset(t)
	const ns = "lose-lease"
	createNamespace(t, c, ns)
	tr := newTracker()
	storm(t, c, ns, 10, "a")
	a := startMirror(t, ns, electedConfig(t, ns, "a"), tr.wrap("a"))
	waitFor(t, 30*time.Second, "replica a to reconcile", func() bool { n, _, _ := tr.snapshot("a"); return n > 0 })

	stealLease(t, c, ns)
	took := time.Now()
	select {
	case err := <-a.done:
		if !errors.Is(err, reconcile.ErrLeadershipLost) {
			t.Fatalf("Run = %v, want ErrLeadershipLost", err)
		}
		t.Logf("leader stopped %v after losing the lease", time.Since(took))
	case <-time.After(renewDeadline + 5*time.Second):
		t.Fatal("leader still running after losing its lease")
	}
	n, _, _ := tr.snapshot("a")
	tr.mu.Lock()
	active := tr.active["a"]
	tr.mu.Unlock()
	if active != 0 {
		t.Errorf("%d reconciles still running after Run returned", active)
	}
	// No reconcile after Run returned.
	storm(t, c, ns, 10, "b")
	time.Sleep(time.Second)
	if m, _, _ := tr.snapshot("a"); m != n {
		t.Errorf("%d reconciles after leadership was lost", m-n)
	}
	a.cancel()
	a.wg.Wait()
}

// stealLease makes an intruder take the lease of the mirror controllers of ns
// over, as a replica that saw it expire would.
func stealLease(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	leases := c.CoordinationV1().Leases(ns)
	var err error
	for range 10 {
		var l *coordinationv1.Lease
		if l, err = leases.Get(ctx, "mirror-lock", metav1.GetOptions{}); err != nil {
			break
		}
		l.Spec.HolderIdentity = ptr.To("intruder")
		l.Spec.LeaseDurationSeconds = ptr.To(int32(600))
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		if _, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestLeadershipLostWhileReconcileHangs takes the lease away from a leader one
// of whose reconciles ignores its context: Run must still return, within the
// renew deadline and its shutdown timeout, saying the lease was lost and which
// key it left running.
func TestLeadershipLostWhileReconcileHangs(t *testing.T) {
	c := clientset(t)
	const ns = "lose-lease-hung"
	createNamespace(t, c, ns)
	storm(t, c, ns, 10, "a")
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) }) // after the replica's cleanup: ends the abandoned reconcile
	entered := make(chan key, 1)
	var once sync.Once
	cfg := electedConfig(t, ns, "a")
	const shutdownTimeout = 2 * time.Second
	cfg.ShutdownTimeout = shutdownTimeout
	a := startMirror(t, ns, cfg, func(r reconcile.Reconciler[key]) reconcile.Reconciler[key] {
		return reconcile.Func[key](func(ctx context.Context, k key) (reconcile.Result, error) {
			first := false
			once.Do(func() { first = true })
			if first {
				entered <- k
				<-hang // ignores ctx
			}
			return r.Reconcile(ctx, k)
		})
	})
	var stuck key
	select {
	case stuck = <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no reconcile started")
	}

	stealLease(t, c, ns)
	took := time.Now()
	select {
	case err := <-a.done:
		if !errors.Is(err, reconcile.ErrLeadershipLost) || !errors.Is(err, reconcile.ErrShutdownTimeout) {
			t.Fatalf("Run = %v, want ErrLeadershipLost and ErrShutdownTimeout", err)
		}
		var se *reconcile.ShutdownError
		if !errors.As(err, &se) || len(se.Keys) != 1 || se.Keys[0] != fmt.Sprint(stuck) {
			t.Errorf("Run = %v, want a *ShutdownError naming %v", err, stuck)
		}
		t.Logf("leader returned %v after losing the lease: %v", time.Since(took), err)
	case <-time.After(renewDeadline + shutdownTimeout + 5*time.Second):
		t.Fatal("leader still running after losing its lease, with a reconcile that ignores its context")
	}
}
