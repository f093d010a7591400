package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// memStore holds one leader election record in memory, for several memLocks,
// with a version for optimistic concurrency, as a Lease has its resourceVersion.
type memStore struct {
	mu      sync.Mutex
	rec     *resourcelock.LeaderElectionRecord
	version int
}

// set overwrites the record, as another party would.
func (s *memStore) set(r resourcelock.LeaderElectionRecord) {
	s.mu.Lock()
	s.rec = &r
	s.version++
	s.mu.Unlock()
}

// memLock is a resourcelock.Interface over a memStore, as one replica. Like a
// LeaseLock, it updates only the version it last read or wrote.
type memLock struct {
	store *memStore
	id    string
	seen  int // version last read or written; guarded by store.mu
}

var leases = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

func (l *memLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	if l.store.rec == nil {
		return nil, nil, apierrors.NewNotFound(leases, "mem")
	}
	l.seen = l.store.version
	r := *l.store.rec
	raw, err := json.Marshal(r)
	return &r, raw, err
}

func (l *memLock) Create(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	if l.store.rec != nil {
		return apierrors.NewAlreadyExists(leases, "mem")
	}
	l.store.rec = &r
	l.store.version++
	l.seen = l.store.version
	return nil
}

func (l *memLock) Update(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	l.store.mu.Lock()
	defer l.store.mu.Unlock()
	if l.store.version != l.seen {
		return apierrors.NewConflict(leases, "mem", errors.New("changed since last read"))
	}
	l.store.rec = &r
	l.store.version++
	l.seen = l.store.version
	return nil
}

func (l *memLock) RecordEvent(string) {}
func (l *memLock) Identity() string   { return l.id }
func (l *memLock) Describe() string   { return "mem/" + l.id }

// exclusive is a reconciler shared by replicas that records who reconciles and
// whether two replicas ever overlap.
type exclusive struct {
	mu       sync.Mutex
	active   map[string]int
	calls    map[string]int
	overlaps int
}

func (x *exclusive) forReplica(id string, hold time.Duration) Reconciler[string] {
	return Func[string](func(ctx context.Context, key string) (Result, error) {
		x.mu.Lock()
		for other, n := range x.active {
			if other != id && n > 0 {
				x.overlaps++
			}
		}
		x.active[id]++
		x.calls[id]++
		x.mu.Unlock()
		defer func() {
			x.mu.Lock()
			x.active[id]--
			x.mu.Unlock()
		}()
		select {
		case <-time.After(hold):
		case <-ctx.Done():
		}
		return Result{}, nil
	})
}

func (x *exclusive) count(id string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.calls[id]
}

func electedController(store *memStore, x *exclusive, id string) *Controller[string] {
	c := New(x.forReplica(id, 100*time.Millisecond), Config[string]{
		Name:         "elected",
		Workers:      2,
		ResyncPeriod: time.Second,
		LeaderElection: &LeaderElection{
			Lock:          &memLock{store: store, id: id},
			LeaseDuration: 4 * time.Second,
			RenewDeadline: 3 * time.Second,
			RetryPeriod:   500 * time.Millisecond,
		},
	})
	c.Watch(newKeySource("k1", "k2", "k3", "k4"))
	return c
}

func TestLeaderElectionHandover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &memStore{}
		x := &exclusive{active: map[string]int{}, calls: map[string]int{}}
		stopA := run(t, electedController(store, x, "a"))
		time.Sleep(time.Second)
		stopB := run(t, electedController(store, x, "b"))
		time.Sleep(10 * time.Second)
		if x.count("a") == 0 || x.count("b") != 0 {
			t.Fatalf("calls a=%d b=%d, want only the leader a", x.count("a"), x.count("b"))
		}
		// a stops without releasing the lease (as if it crashed): b takes over once
		// the lease expires, not before.
		if err := stopA(); err != nil {
			t.Fatalf("a: Run = %v", err)
		}
		killed := time.Now()
		for x.count("b") == 0 {
			time.Sleep(100 * time.Millisecond)
		}
		took := time.Since(killed)
		// The lease ran out between 0 and one retry period (500ms) after a's last
		// renewal before the kill; b notices a change only at its own retries (every
		// 500ms plus up to 120% jitter), so it sees the lease expire up to 1.1s late
		// and takes it at its next retry, up to 1.1s later.
		if took < 3500*time.Millisecond || took > 6300*time.Millisecond {
			t.Errorf("b took over after %v, want the lease duration (4s) within retry-period slack", took)
		}
		time.Sleep(5 * time.Second)
		if err := stopB(); err != nil {
			t.Fatalf("b: Run = %v", err)
		}
		if x.overlaps != 0 {
			t.Errorf("%d reconciles overlapped between replicas", x.overlaps)
		}
	})
}

func TestLeadershipLostAbortsReconciles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &memStore{}
		var mu sync.Mutex
		var aborted []time.Duration
		var lostAt time.Time
		c := New(Func[string](func(ctx context.Context, key string) (Result, error) {
			<-ctx.Done() // a long reconcile, only ended by its context
			mu.Lock()
			aborted = append(aborted, time.Since(lostAt))
			mu.Unlock()
			return Result{}, ctx.Err()
		}), Config[string]{
			Workers:      2,
			DrainTimeout: time.Hour,
			LeaderElection: &LeaderElection{
				Lock:          &memLock{store: store, id: "a"},
				LeaseDuration: 4 * time.Second,
				RenewDeadline: 3 * time.Second,
				RetryPeriod:   500 * time.Millisecond,
			},
		})
		c.Watch(newKeySource("k1", "k2"))
		done := make(chan error)
		go func() { done <- c.Run(context.Background()) }()
		time.Sleep(2 * time.Second)
		// Someone else holds the lock now: a cannot renew.
		intruder := resourcelock.LeaderElectionRecord{HolderIdentity: "intruder", LeaseDurationSeconds: 600}
		intruder.RenewTime.Time = time.Now()
		store.set(intruder)
		mu.Lock()
		lostAt = time.Now()
		mu.Unlock()
		err := <-done
		if !errors.Is(err, ErrLeadershipLost) {
			t.Fatalf("Run = %v, want ErrLeadershipLost", err)
		}
		mu.Lock()
		took := time.Since(lostAt)
		mu.Unlock()
		if took > 4*time.Second {
			t.Errorf("Run returned %v after the lease was taken, want within the renew deadline", took)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(aborted) != 2 {
			t.Fatalf("%d reconciles ended, want the 2 in flight", len(aborted))
		}
		for _, d := range aborted {
			if d > 4*time.Second {
				t.Errorf("in-flight reconcile cancelled %v after the lease was taken: the drain timeout applied, not the loss", d)
			}
		}
	})
}

func TestLeaderElectionBadConfig(t *testing.T) {
	src := newKeySource("k")
	c := New(Func[string](func(context.Context, string) (Result, error) { return Result{}, nil }), Config[string]{
		LeaderElection: &LeaderElection{Lock: &memLock{store: &memStore{}, id: "a"}, LeaseDuration: time.Second, RenewDeadline: 2 * time.Second},
	})
	c.Watch(src)
	if err := c.Run(context.Background()); err == nil {
		t.Fatal("Run accepted a renew deadline longer than the lease")
	}
	select {
	case <-src.started:
		t.Error("sources started before the configuration was checked")
	default:
	}
	c = New(Func[string](func(context.Context, string) (Result, error) { return Result{}, nil }), Config[string]{
		LeaderElection: &LeaderElection{},
	})
	if err := c.Run(context.Background()); err == nil {
		t.Fatal("Run accepted a nil lock")
	}
}

// TestReleaseOnCancelAfterDrain checks that with ReleaseOnCancel the lease is
// given up only once the reconciles in flight have finished, so a successor can
// never overlap with them.
func TestReleaseOnCancelAfterDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &memStore{}
		release := make(chan struct{})
		c := New(Func[string](func(ctx context.Context, key string) (Result, error) {
			<-release
			return Result{}, nil
		}), Config[string]{
			LeaderElection: &LeaderElection{
				Lock:            &memLock{store: store, id: "a"},
				LeaseDuration:   4 * time.Second,
				RenewDeadline:   3 * time.Second,
				RetryPeriod:     500 * time.Millisecond,
				ReleaseOnCancel: true,
			},
		})
		c.Watch(newKeySource("k"))
		holder := func() string {
			store.mu.Lock()
			defer store.mu.Unlock()
			return store.rec.HolderIdentity
		}
		stop := run(t, c)
		time.Sleep(time.Second) // a leads, "k" is in flight
		done := make(chan error)
		go func() { done <- stop() }()
		time.Sleep(10 * time.Second)
		if h := holder(); h != "a" {
			t.Fatalf("lease holder %q while a reconcile is in flight, want a", h)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
		if h := holder(); h != "" {
			t.Errorf("lease holder %q after Run returned, want it released", h)
		}
	})
}
