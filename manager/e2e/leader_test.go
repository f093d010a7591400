//go:build e2e

package e2e

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
)

const (
	leaseDuration = 3 * time.Second
	renewDeadline = 2 * time.Second
	retryPeriod   = 250 * time.Millisecond
)

// replica is one manager running one controller over the ConfigMaps of a
// namespace, recording what it reconciles.
type replica struct {
	m *manager.Manager

	mu    sync.Mutex
	seen  map[string]bool
	first time.Time // first reconcile
	all   time.Time // when seen reached want
	want  int
}

// activity counts reconciles in flight across replicas, to catch two replicas
// reconciling at once.
type activity struct {
	mu       sync.Mutex
	active   map[string]int
	overlaps int
}

func (a *activity) enter(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for other, n := range a.active {
		if other != id && n > 0 {
			a.overlaps++
		}
	}
	a.active[id]++
}

func (a *activity) leave(id string) {
	a.mu.Lock()
	a.active[id]--
	a.mu.Unlock()
}

// newReplica builds a manager named id; with lease set, it runs its controller
// only while it holds the Lease of that name in ns.
func newReplica(t *testing.T, id, ns, lease string, want int, act *activity) *replica {
	t.Helper()
	cfg := env.Config()
	mc := manager.Config{RESTConfig: cfg}
	if lease != "" {
		mc.LeaderElection = &reconcile.LeaderElection{
			Lock:            reconcile.NewLeaseLock(kubernetes.NewForConfigOrDie(cfg), ns, lease, id),
			LeaseDuration:   leaseDuration,
			RenewDeadline:   renewDeadline,
			RetryPeriod:     retryPeriod,
			ReleaseOnCancel: true,
		}
	}
	m, err := manager.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{m: m, seen: map[string]bool{}, want: want}
	cms, err := manager.Typed[*corev1.ConfigMap](m, manager.Options[*corev1.ConfigMap]{
		Namespace: ns,
		Transform: reflector.StripManagedFields[*corev1.ConfigMap],
	})
	if err != nil {
		t.Fatal(err)
	}
	c := reconcile.New(reconcile.Func[types.NamespacedName](func(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
		if act != nil {
			act.enter(id)
			defer act.leave(id)
		}
		now := time.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.first.IsZero() {
			r.first = now
		}
		r.seen[key.Name] = true
		if len(r.seen) == r.want && r.all.IsZero() {
			r.all = now
		}
		return reconcile.Result{}, nil
	}), reconcile.Config[types.NamespacedName]{Name: "handover", Workers: 8})
	if err := c.Watch(reconcile.FromInformer(cms, reconcile.ByObject[*corev1.ConfigMap]())); err != nil {
		t.Fatal(err)
	}
	if err := m.Add(c); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *replica) snapshot() (seen int, first, all time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen), r.first, r.all
}

func (r *replica) setWant(n int) {
	r.mu.Lock()
	r.want = n
	r.mu.Unlock()
}

// start runs the replica's manager; the function returned stops it and returns
// Run's error and when Run returned.
func (r *replica) start(ctx context.Context) (stop func() (error, time.Time)) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	var ended time.Time
	go func() {
		err := r.m.Run(ctx)
		ended = time.Now()
		done <- err
	}()
	return func() (error, time.Time) {
		cancel()
		err := <-done
		return err, ended
	}
}

// TestLeaderHandoverWarm: of two managers campaigning for one Lease, the standby
// keeps its informer synced (it caches every object and sees a change made
// while it waits) without reconciling; when the leader stops, the standby takes
// over and reconciles every key from its warm cache, faster than a cold start
// of a third manager over the same objects, and the two never reconcile at
// once. CTRLKIT_TAKEOVER_OBJECTS sets the number of objects (default 3,000).
func TestLeaderHandoverWarm(t *testing.T) {
	n := sizeFromEnv(t, "CTRLKIT_TAKEOVER_OBJECTS", 3000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := env.Namespace(t)
	kube := kubernetes.NewForConfigOrDie(env.Config())
	start := time.Now()
	createConfigMaps(ctx, t, kube, ns, n, 256, 16)
	t.Logf("created %d ConfigMaps in %v", n, time.Since(start))

	act := &activity{active: map[string]int{}}
	a := newReplica(t, "a", ns, "handover", n, act)
	stopA := a.start(ctx)
	waitFor(t, 2*time.Minute, "a to lead and reconcile every key", func() bool {
		seen, _, _ := a.snapshot()
		return a.m.Leading() && seen == n
	})

	b := newReplica(t, "b", ns, "handover", n+1, act)
	stopB := b.start(ctx)
	waitFor(t, 2*time.Minute, "the standby's cache to fill", func() bool {
		inf := b.m.Informers()[0]
		return inf.Synced && inf.Objects == n
	})
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "while-standby"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the standby's cache to see a new object", func() bool { return b.m.Informers()[0].Objects == n+1 })
	if seen, _, _ := b.snapshot(); seen != 0 || b.m.Leading() {
		t.Fatalf("standby: leading %v, %d reconciles; want a warm cache and no reconcile", b.m.Leading(), seen)
	}

	// Hand over: a stops and releases the Lease; b notices within a retry period.
	var leadAt time.Time
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		for ctx.Err() == nil && !b.m.Leading() {
			time.Sleep(time.Millisecond)
		}
		leadAt = time.Now()
	}()
	if err, _ := stopA(); err != nil {
		t.Fatalf("leader's Run: %v", err)
	}
	releasedAt := time.Now()
	<-watching
	waitFor(t, 2*time.Minute, "the new leader to reconcile every key", func() bool {
		seen, _, _ := b.snapshot()
		return seen == n+1
	})
	_, bFirst, bAll := b.snapshot()
	if err, _ := stopB(); err != nil {
		t.Fatalf("new leader's Run: %v", err)
	}
	if act.overlaps != 0 {
		t.Errorf("%d reconciles of one replica started while the other was reconciling", act.overlaps)
	}

	// A cold start over the same objects, for comparison.
	c := newReplica(t, "cold", ns, "", n+1, nil)
	coldStart := time.Now()
	stopC := c.start(ctx)
	waitFor(t, 2*time.Minute, "a cold manager to reconcile every key", func() bool {
		seen, _, _ := c.snapshot()
		return seen == n+1
	})
	_, cFirst, cAll := c.snapshot()
	if err, _ := stopC(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("cold manager's Run: %v", err)
	}

	warmAll, coldAll := bAll.Sub(leadAt), cAll.Sub(coldStart)
	t.Logf("%d objects: lease released → standby leading %v; warm takeover from leading: first reconcile %v, all %v; cold start: first reconcile %v, all %v (%.1f× the warm takeover)",
		n+1, leadAt.Sub(releasedAt).Round(time.Millisecond), bFirst.Sub(leadAt).Round(time.Millisecond), warmAll.Round(time.Millisecond),
		cFirst.Sub(coldStart).Round(time.Millisecond), coldAll.Round(time.Millisecond), float64(coldAll)/float64(warmAll))
	if warmAll >= coldAll {
		t.Errorf("warm takeover took %v to reconcile every key, a cold start %v: the standby's cache did not help", warmAll, coldAll)
	}
	if leadAt.Sub(releasedAt) > leaseDuration {
		t.Errorf("the standby took %v to lead after the lease was released", leadAt.Sub(releasedAt))
	}
}
