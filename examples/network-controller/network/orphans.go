package network

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/reconcile"
)

// orphanSweep is a reconcile.Source of the keys of backend networks that have no
// Network object: the informer cannot tell about those (there is no object whose
// deletion it could see), so the backend is listed at start and then every
// Options.OrphanSweepPeriod. The keys go through the same queue as the Networks'
// own, so an orphan is never handled concurrently with a Network of the same name;
// the reconciler decides from its cache whether a key is really an orphan.
type orphanSweep struct {
	c *Controller

	mu   sync.Mutex
	last []types.NamespacedName // orphans found by the last successful sweep
}

var _ reconcile.Source[types.NamespacedName] = (*orphanSweep)(nil)

func (s *orphanSweep) Name() string { return "backend-orphans" }

// Start runs the sweeps in a goroutine until stop is called; stop waits for it.
func (s *orphanSweep) Start(enqueue func(types.NamespacedName, reconcile.Priority)) (stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.loop(ctx, enqueue)
	}()
	return func() { cancel(); <-done }, nil
}

func (s *orphanSweep) loop(ctx context.Context, enqueue func(types.NamespacedName, reconcile.Priority)) {
	period := s.c.opts.OrphanSweepPeriod
	var tick <-chan time.Time
	if period > 0 {
		t := time.NewTicker(period)
		defer t.Stop()
		tick = t.C
	}
	for {
		s.sweep(ctx, enqueue)
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}

// sweep lists the backend and enqueues the keys of the networks that the informer's
// cache does not hold. Before the cache has synced every key is enqueued: the
// controller reconciles nothing before the sync, and the reconciler checks the cache
// again then.
func (s *orphanSweep) sweep(ctx context.Context, enqueue func(types.NamespacedName, reconcile.Priority)) {
	list, err := s.c.backend.List(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.c.log.Error(err, "orphan sweep: listing the backend")
		}
		return
	}
	synced := s.c.inf.HasSynced()
	var orphans []types.NamespacedName
	for _, n := range list {
		if ns := s.c.opts.Namespace; ns != "" && n.Namespace != ns {
			continue // another controller's namespace
		}
		if synced {
			if _, err := s.c.inf.Lister().Get(n.Namespace, n.Name); !apierrors.IsNotFound(err) {
				continue
			}
		}
		key := types.NamespacedName{Namespace: n.Namespace, Name: n.Name}
		orphans = append(orphans, key)
		enqueue(key, reconcile.Background)
	}
	s.mu.Lock()
	s.last = orphans
	s.mu.Unlock()
}

// HasSynced is true at once: a backend that is down must not keep the controller
// from reconciling the Networks; its orphans are found by a later sweep.
func (s *orphanSweep) HasSynced() bool { return true }

// AppendKeys appends the orphans of the last sweep, for the controller's resync.
func (s *orphanSweep) AppendKeys(dst []types.NamespacedName) []types.NamespacedName {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(dst, s.last...)
}
