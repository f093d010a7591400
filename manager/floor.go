package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/ctrlkit/ctrlkit/reconcile"
)

// The floor: a new leader does not start its controllers on caches older than
// what the previous leader read or wrote.
//
// A leader that stops while it still holds a Lease lock publishes, on a Lease
// of its own named after the lock with FloorLeaseSuffix, the resourceVersion of
// the newest change each of its informers holds (informer.DataResourceVersion:
// a change the next leader's informer of the same collection sees as an event
// of its own, so that a warm standby is usually there already), raised to the
// newest write the process made into that informer's collection, stamped with
// its term (the lock's LeaderTransitions). The next leader trusts that floor only if it was
// published by the term just before its own; then nothing can have been read or
// written by a leader since. Otherwise (the previous leader crashed or was cut
// off, the lock is not a Lease, or the floor could not be read) the floor is
// what the server holds when the term starts, read with one consistent LIST of
// at most one object per informer. Either way the controllers start only once
// every informer has caught up (informer.Informer.CatchUp, which relists an
// informer that its events do not bring there within informer.CatchUpGrace).
//
// Not covered: a deletion the previous leader learnt of only by relisting,
// after the newest change its caches hold; the next leader's watch brings it
// as an event, but the floor does not wait for it.

// FloorLeaseSuffix names the Lease a leader publishes its floor on: the lock
// Lease's name plus this suffix, in its namespace.
const FloorLeaseSuffix = "-floor"

const (
	floorTermAnnotation = "ctrlkit.io/floor-term"
	floorAnnotation     = "ctrlkit.io/floor"
)

// Takeover describes how the last term of leadership started.
type Takeover struct {
	// Term is the lock's LeaderTransitions in this term; -1 if the lock is not a
	// Lease or could not be read.
	Term int32
	// FromPreviousLeader is true when the floor was the one the previous term
	// published, false when it was read from the server.
	FromPreviousLeader bool
	// Floor is the resourceVersion every informer was brought to, by informer
	// name.
	Floor map[string]string
	// Waited is how long the controllers waited for the caches.
	Waited time.Duration
}

// LastTakeover returns how the last term of leadership started, and false if
// none has.
func (m *Manager) LastTakeover() (Takeover, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.takeover == nil {
		return Takeover{}, false
	}
	t := *m.takeover
	t.Floor = maps.Clone(t.Floor)
	return t, true
}

// floorKey names an informer's collection in a published floor: informers that
// differ only in Go type or Transform read the same stream.
func (k informerKey) floorKey() string {
	return k.gvr.String() + "|" + k.namespace + "|" + k.labels + "|" + k.fields
}

// covers reports whether an object of gr in namespace ns is in the collection
// of the informer of k (selectors aside).
func (k informerKey) covers(gr schema.GroupResource, ns string) bool {
	return k.gvr.GroupResource() == gr && (k.namespace == "" || k.namespace == ns)
}

// floorLease returns the Lease lock of the leader election, or nil.
func (m *Manager) floorLock() *resourcelock.LeaseLock {
	if m.cfg.LeaderElection == nil {
		return nil
	}
	ll, _ := m.cfg.LeaderElection.Lock.(*resourcelock.LeaseLock)
	if ll == nil || ll.Client == nil {
		return nil
	}
	return ll
}

// readFloor returns this term's number and the floor the previous term
// published, nil if there is none to trust.
func (m *Manager) readFloor(ctx context.Context) (term int32, floor map[string]string) {
	ll := m.floorLock()
	if ll == nil {
		return -1, nil
	}
	// The lock's Lease is read with a client of our own: LeaseLock.Get would
	// race with the elector, which uses the lock meanwhile.
	leases := ll.Client.Leases(ll.LeaseMeta.Namespace)
	lock, err := leases.Get(ctx, ll.LeaseMeta.Name, metav1.GetOptions{})
	if err != nil || lock.Spec.HolderIdentity == nil || *lock.Spec.HolderIdentity != ll.Identity() {
		m.log.Info("leader floor: cannot read this term's number; reading the floor from the server", "err", err)
		return -1, nil
	}
	if lock.Spec.LeaseTransitions != nil {
		term = *lock.Spec.LeaseTransitions
	}
	lease, err := ll.Client.Leases(ll.LeaseMeta.Namespace).Get(ctx, ll.LeaseMeta.Name+FloorLeaseSuffix, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			m.log.Info("leader floor: cannot read the previous leader's floor; reading it from the server", "err", err)
		}
		return term, nil
	}
	if lease.Annotations[floorTermAnnotation] != strconv.Itoa(int(term)-1) {
		return term, nil // published by an older term: a leader since has not
	}
	if err := json.Unmarshal([]byte(lease.Annotations[floorAnnotation]), &floor); err != nil {
		m.log.Info("leader floor: the previous leader's floor does not parse; reading it from the server", "err", err)
		return term, nil
	}
	return term, floor
}

// catchUp brings every informer to the floor before a term's controllers start.
func (m *Manager) catchUp(ctx context.Context) error {
	start := time.Now()
	term, floor := m.readFloor(ctx)
	if m.cfg.SyncTimeout >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, orDefault(m.cfg.SyncTimeout, DefaultSyncTimeout))
		defer cancel()
	}
	m.mu.Lock()
	entries := append([]*informerEntry(nil), m.order...)
	m.mu.Unlock()
	t := &Takeover{Term: term, FromPreviousLeader: floor != nil, Floor: map[string]string{}}
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for _, e := range entries {
		rv, ok := floor[e.key.floorKey()]
		if !ok {
			rv = "" // not in the previous leader's floor: read it from the server
		}
		wg.Go(func() {
			if rv == "" {
				var err error
				if rv, err = e.inf.ServerResourceVersion(ctx); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("manager: leader floor: informer %q: read the server's resourceVersion: %w", e.inf.Name(), err)
					}
					mu.Unlock()
					return
				}
			}
			err := e.inf.CatchUp(ctx, rv)
			mu.Lock()
			defer mu.Unlock()
			t.Floor[e.inf.Name()] = rv
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("manager: leader floor: informer %q did not reach resourceVersion %s: %w", e.inf.Name(), rv, err)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	t.Waited = time.Since(start)
	m.mu.Lock()
	m.takeover, m.term = t, term
	m.mu.Unlock()
	m.log.Info("leader floor reached", "term", term, "fromPreviousLeader", t.FromPreviousLeader, "waited", t.Waited)
	return nil
}

// publishFloor records, for the next leader, how far this term read and wrote.
// It is called once the controllers have stopped, while the lock is still held.
func (m *Manager) publishFloor(ctx context.Context) {
	ll := m.floorLock()
	m.mu.Lock()
	term := m.term
	entries := append([]*informerEntry(nil), m.order...)
	m.mu.Unlock()
	if ll == nil || term < 0 {
		return
	}
	floor := map[string]string{}
	for _, e := range entries {
		rv := e.inf.DataResourceVersion()
		if w, ok := m.writes.Newest(e.key.covers); ok {
			rv = newerRV(rv, w)
		}
		k := e.key.floorKey()
		floor[k] = newerRV(floor[k], rv)
	}
	data, err := json.Marshal(floor)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, orDefault(m.cfg.LeaderElection.RenewDeadline, reconcile.DefaultRenewDeadline))
	defer cancel()
	leases := ll.Client.Leases(ll.LeaseMeta.Namespace)
	name := ll.LeaseMeta.Name + FloorLeaseSuffix
	ann := map[string]string{floorTermAnnotation: strconv.Itoa(int(term)), floorAnnotation: string(data)}
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ll.LeaseMeta.Namespace, Annotations: ann}}, metav1.CreateOptions{})
	case err == nil:
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		maps.Copy(lease.Annotations, ann)
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		m.log.Error(err, "leader floor: cannot publish it; the next leader will read it from the server")
		return
	}
	m.log.Info("leader floor published", "term", term)
}

// newerRV returns the newer of two resourceVersions, b if a is empty or they do
// not compare.
func newerRV(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	if c, err := resourceversion.CompareResourceVersion(a, b); err == nil && c > 0 {
		return a
	}
	return b
}
