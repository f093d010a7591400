//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/internal/netcut"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/testenv/faultproxy"
)

// floorLedger records, outside the replicas, every resourceVersion a leader's
// reconcile read from its cache or wrote, and checks each reconcile's cache
// against what the other replicas (every earlier term) read and wrote.
type floorLedger struct {
	mu         sync.Mutex
	newest     map[string]uint64 // replica → the newest resourceVersion it read or wrote
	reconciles int
	below      int    // reconciles whose cache was older than the floor
	worst      uint64 // the largest gap seen, in resourceVersions
	conflicts  int
}

// check records that replica starts a reconcile with its cache at applied, and
// whether that is older than what the other replicas read or wrote.
func (l *floorLedger) check(replica string, applied uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reconciles++
	var floor uint64
	for r, rv := range l.newest {
		if r != replica {
			floor = max(floor, rv)
		}
	}
	if applied < floor {
		l.below++
		l.worst = max(l.worst, floor-applied)
	}
}

func (l *floorLedger) saw(replica, rv string) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return
	}
	l.mu.Lock()
	l.newest[replica] = max(l.newest[replica], n)
	l.mu.Unlock()
}

// failoverReplica is one manager of the failover test and how to stop it.
type failoverReplica struct {
	id   string
	m    *manager.Manager
	cut  *netcut.Cutter
	stop context.CancelFunc
	done chan error
	act  *activity
}

func startFailoverReplica(t *testing.T, id, ns string, cfg *rest.Config, noFloor bool, ledger *floorLedger, act *activity) *failoverReplica {
	t.Helper()
	cut := netcut.New()
	rc := cut.Wrap(cfg)
	m, err := manager.New(manager.Config{
		RESTConfig: rc,
		LeaderElection: &reconcile.LeaderElection{
			Lock:            reconcile.NewLeaseLock(kubernetes.NewForConfigOrDie(rc), ns, "failover", id),
			LeaseDuration:   leaseDuration,
			RenewDeadline:   renewDeadline,
			RetryPeriod:     retryPeriod,
			ReleaseOnCancel: true,
		},
		UnsafeNoLeaderFloor: noFloor,
	})
	if err != nil {
		t.Fatal(err)
	}
	cms, err := manager.Typed[*corev1.ConfigMap](m, manager.Options[*corev1.ConfigMap]{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	addConfigMapController(t, m, cms, reconcile.Config[types.NamespacedName]{Name: "failover", Workers: 2},
		func(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
			act.enter(id)
			defer act.leave(id)
			applied, _ := strconv.ParseUint(cms.LastAppliedResourceVersion(), 10, 64)
			ledger.check(id, applied)
			cm, err := cms.Lister().Get(key.Namespace, key.Name)
			if err != nil {
				return reconcile.Result{}, nil
			}
			ledger.saw(id, cm.ResourceVersion)
			n, _ := strconv.Atoi(cm.Data["count"])
			cp := cm.DeepCopy()
			cp.Data["count"] = strconv.Itoa(n + 1)
			updated, err := m.Kubernetes().CoreV1().ConfigMaps(key.Namespace).Update(ctx, cp, metav1.UpdateOptions{})
			if err != nil {
				if apierrors.IsConflict(err) {
					ledger.mu.Lock()
					ledger.conflicts++
					ledger.mu.Unlock()
				}
				return reconcile.Result{}, err
			}
			ledger.saw(id, updated.ResourceVersion)
			return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, nil
		})
	ctx, cancel := context.WithCancel(context.Background())
	r := &failoverReplica{id: id, m: m, cut: cut, stop: cancel, done: make(chan error, 1), act: act}
	go func() { r.done <- m.Run(ctx) }()
	return r
}

// TestFailoverFloor: two replicas of a controller that counts ConfigMaps up,
// one update per reconcile from its cache, behind a proxy that delays every
// ConfigMap watch event by 0–500 ms, so that a standby's cache lags what the
// leader writes. The leader is stopped (it hands over: it publishes its floor
// and releases the Lease) or cut off from the server (it publishes nothing and
// the Lease expires), alternately, and a new standby joins, CTRLKIT_FAILOVERS
// times (default 20; 50 for the figures in the README). With the floor, no
// reconcile of a new leader starts on a cache older than the newest
// resourceVersion an earlier leader read or wrote (recorded outside the
// replicas). Without it (UnsafeNoLeaderFloor), some do.
func TestFailoverFloor(t *testing.T) {
	failovers := sizeFromEnv(t, "CTRLKIT_FAILOVERS", 20)
	for _, tc := range []struct {
		name      string
		noFloor   bool
		failovers int
	}{{"floor", false, failovers}, {"no floor", true, min(failovers, 10)}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			ns := env.Namespace(t)
			direct := kubernetes.NewForConfigOrDie(env.Config())
			for i := range 10 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"count": "0"}}
				if _, err := direct.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			p, err := faultproxy.Start(ctx, env.Config(), faultproxy.Config{Seed: 11, Rules: []faultproxy.Rule{
				{Resource: "configmaps", DelayWatchEvents: faultproxy.Delay{Max: 500 * time.Millisecond}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ledger := &floorLedger{newest: map[string]uint64{}}
			act := &activity{active: map[string]int{}}
			next := 0
			start := func() *failoverReplica {
				next++
				return startFailoverReplica(t, fmt.Sprintf("replica-%d", next), ns, p.Config(), tc.noFloor, ledger, act)
			}
			live := []*failoverReplica{start(), start()}
			defer func() {
				for _, r := range live {
					r.stop()
					<-r.done
				}
			}()
			leader := func() *failoverReplica {
				for _, r := range live {
					if r.m.Leading() {
						return r
					}
				}
				return nil
			}
			var fromPrevious, fromServer int
			var waited []time.Duration
			for i := range tc.failovers + 1 {
				// A leader that has reconciled a while.
				var l *failoverReplica
				waitFor(t, time.Minute, "a leader", func() bool { l = leader(); return l != nil })
				ledger.mu.Lock()
				before := ledger.reconciles
				ledger.mu.Unlock()
				waitFor(t, time.Minute, "the leader's reconciles", func() bool {
					ledger.mu.Lock()
					defer ledger.mu.Unlock()
					return ledger.reconciles >= before+20
				})
				if tk, ok := l.m.LastTakeover(); ok && i > 0 {
					if tk.FromPreviousLeader {
						fromPrevious++
					} else {
						fromServer++
					}
					waited = append(waited, tk.Waited)
				}
				if i == tc.failovers {
					break
				}
				if i%2 == 0 {
					l.stop() // hands over
					if err := <-l.done; err != nil {
						t.Fatalf("failover %d: the stopped leader's Run: %v", i, err)
					}
				} else {
					l.cut.Cut() // cut off: the Lease expires
					if err := <-l.done; !errors.Is(err, reconcile.ErrLeadershipLost) {
						t.Fatalf("failover %d: the cut-off leader's Run = %v, want ErrLeadershipLost", i, err)
					}
					l.stop()
				}
				for j, r := range live {
					if r == l {
						live = append(live[:j:j], live[j+1:]...)
						break
					}
				}
				live = append(live, start())
			}
			ledger.mu.Lock()
			defer ledger.mu.Unlock()
			t.Logf("%s: %d failovers (%d with the previous leader's floor, %d with the server's), %d reconciles, %d on a cache older than the floor (by up to %d resourceVersions), %d conflicts, %d overlapping reconciles; waits for the floor: %v",
				tc.name, tc.failovers, fromPrevious, fromServer, ledger.reconciles, ledger.below, ledger.worst, ledger.conflicts, act.overlaps, waited)
			if act.overlaps != 0 {
				t.Errorf("%d reconciles overlapped across replicas", act.overlaps)
			}
			if tc.noFloor {
				if ledger.below == 0 {
					t.Errorf("without the floor no reconcile met a cache older than the floor: the proxy's delay did not show")
				}
				return
			}
			if ledger.below != 0 {
				t.Errorf("%d reconciles started on a cache older than the floor", ledger.below)
			}
			if fromPrevious == 0 || fromServer == 0 {
				t.Errorf("takeovers: %d from the previous leader's floor, %d from the server's: want both kinds", fromPrevious, fromServer)
			}
		})
	}
}
