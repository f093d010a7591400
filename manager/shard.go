package manager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/shard"
)

// Sharding makes the manager one of several replicas that split the work of
// their sharded controllers (AddSharded) and the objects of their sharded
// informers (Options.Shard), coordinated by Leases only (package shard).
//
// The placement rule: every replica hashes the same Field, and a key is
// reconciled by the replica whose shard holds its object.
//   - reflector.ShardByUID (the default) suits a controller of one resource:
//     its primary informer is sharded ShardByObject and the server filters
//     it (KEP-5866, where the ShardedListAndWatch gate is on; the reflector
//     otherwise). Informers of children that a source maps to their owner
//     (reconcile.ByControllerOwner) must be sharded ShardByController: the
//     children are then hashed by their controller's UID, so that they land
//     with their owner (the reflector filters them; the server cannot).
//   - reflector.ShardByNamespace keeps everything of a namespace together,
//     owners and children alike (an owner reference never crosses
//     namespaces), and is filtered by the server for every informer; it
//     balances only as well as the namespaces do. Cluster-scoped resources
//     cannot be sharded by namespace: Typed and the others refuse.
//
// What the manager enforces: a sharded informer needs Config.Sharding, a
// cluster-scoped one Field ShardByUID; AddSharded needs a controller made
// with reconcile.Config.Restrictable. What it cannot see is how a source maps
// objects to keys: pairing an informer sharded ShardByObject with
// ByControllerOwner splits owners from their children.
type Sharding struct {
	// Namespace holds the members' Leases; Group names the controller whose
	// replicas split the work (every replica the same); Identity names this
	// replica, unique in the group (the pod name, say). Required.
	Namespace, Group, Identity string
	// Field is what objects are placed by: reflector.ShardByUID (default) or
	// reflector.ShardByNamespace.
	Field string
	// Slots, LeaseDuration, RenewPeriod and RenewDeadline are
	// shard.Config's; zero means its default. A replica that dies holds its
	// slots until its Lease expires: LeaseDuration bounds the take-over.
	Slots                                     int
	LeaseDuration, RenewPeriod, RenewDeadline time.Duration
}

// ShardRule says how an informer's objects are split among the replicas (see
// Sharding).
type ShardRule int

const (
	// Whole: every replica holds every object (the default).
	Whole ShardRule = iota
	// ShardByObject: an object is held by the replica whose shard holds its
	// own UID or namespace (Sharding.Field).
	ShardByObject
	// ShardByController: an object is held by the replica whose shard holds
	// its controller's UID (with Field ShardByUID) or its namespace (with
	// ShardByNamespace): children with their owner.
	ShardByController
)

func (r ShardRule) String() string {
	switch r {
	case Whole:
		return "whole"
	case ShardByObject:
		return "by-object"
	case ShardByController:
		return "by-controller"
	}
	return fmt.Sprintf("ShardRule(%d)", int(r))
}

// sharder is a manager's part in its group (nil without Config.Sharding).
type sharder struct {
	cfg    Sharding
	member *shard.Member

	mu          sync.Mutex
	held        reflector.Shard // what the member holds; the empty shard at first
	informers   []shardedInformer
	controllers []shardedController
	// Informers are re-scoped once hand-offs have paused for settle: a
	// replica that starts or sees others start takes and gives slots over
	// a few rounds, and each re-scope lists its whole shard again.
	settle  time.Duration
	rescope *time.Timer // pending re-scope, nil when none
	stopped bool
}

type shardedInformer struct {
	name     string
	rule     ShardRule
	setShard func(reflector.Shard) error
	shard    func() reflector.Shard
}

type shardedController struct {
	ctl      any // the *reconcile.Controller
	name     string
	restrict func(ctx context.Context, sh reflector.Shard) error
}

func newSharder(m *Manager, cfg Sharding) (*sharder, error) {
	if cfg.Field == "" {
		cfg.Field = reflector.ShardByUID
	}
	s := &sharder{cfg: cfg, held: reflector.Shard{Field: cfg.Field}}
	lease := cmp.Or(cfg.LeaseDuration, shard.DefaultLeaseDuration)
	s.settle = min(cmp.Or(cfg.RenewPeriod, lease/5), time.Second)
	member, err := shard.New(shard.Config{
		Client:    m.kube,
		Namespace: cfg.Namespace, Group: cfg.Group, Identity: cfg.Identity, Field: cfg.Field,
		Slots: cfg.Slots, LeaseDuration: cfg.LeaseDuration, RenewPeriod: cfg.RenewPeriod, RenewDeadline: cfg.RenewDeadline,
		Revoke: s.revoke,
		Grant:  s.grant,
		Logger: m.log.WithName("shard"),
	})
	if err != nil {
		return nil, fmt.Errorf("manager: Config.Sharding: %w", err)
	}
	s.member = member
	return s, nil
}

// forRule is sh as an informer of rule holds it.
func forRule(sh reflector.Shard, rule ShardRule) reflector.Shard {
	if rule == ShardByController && sh.Field == reflector.ShardByUID {
		sh.Field = reflector.ShardByControllerUID
	}
	return sh
}

// revoke narrows the controllers first (their reconciles of the keys that
// leave are cancelled and drained), then the informers.
func (s *sharder) revoke(ctx context.Context, keep reflector.Shard) error {
	s.mu.Lock()
	s.held = keep // what is added from now on starts narrowed
	ctls := s.controllers
	s.mu.Unlock()
	for _, c := range ctls {
		if err := c.restrict(ctx, keep); err != nil {
			return fmt.Errorf("controller %q: %w", c.name, err) // the member keeps the slots and retries
		}
	}
	s.scheduleRescope() // the informers may hold more than the keys meanwhile: they are fenced
	return nil
}

// scheduleRescope re-scopes the informers to what is held once hand-offs
// have paused for settle.
func (s *sharder) scheduleRescope() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	if s.rescope != nil {
		s.rescope.Stop()
	}
	s.rescope = time.AfterFunc(s.settle, s.applyRescope)
}

func (s *sharder) applyRescope() {
	s.mu.Lock()
	held, infs := s.held, s.informers
	s.mu.Unlock()
	for _, inf := range infs {
		if !slices.Equal(inf.shard().Ranges, forRule(held, inf.rule).Ranges) {
			_ = inf.setShard(forRule(held, inf.rule)) // held is valid: it cannot fail
		}
	}
}

// stop cancels a pending re-scope; after it none starts.
func (s *sharder) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.rescope != nil {
		s.rescope.Stop()
	}
}

// grant widens the controllers, then the informers, whose new objects then
// find their keys let in.
func (s *sharder) grant(hold reflector.Shard) {
	s.mu.Lock()
	s.held = hold
	ctls := s.controllers
	s.mu.Unlock()
	for _, c := range ctls {
		_ = c.restrict(context.Background(), hold) // nothing in flight is refused: it returns at once
	}
	s.scheduleRescope()
}

// shardFor is the shard an informer of rule holds now.
func (s *sharder) shardFor(rule ShardRule) reflector.Shard {
	s.mu.Lock()
	defer s.mu.Unlock()
	return forRule(s.held, rule)
}

// addInformer registers a sharded informer made with shard initial, and
// re-scopes it if a hand-off came in between.
func (s *sharder) addInformer(name string, rule ShardRule, setShard func(reflector.Shard) error, shard func() reflector.Shard, initial reflector.Shard) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.informers = append(s.informers, shardedInformer{name: name, rule: rule, setShard: setShard, shard: shard})
	if now := forRule(s.held, rule); !slices.Equal(now.Ranges, initial.Ranges) {
		_ = setShard(now)
	}
}

func (s *sharder) removeInformer(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.informers = slices.DeleteFunc(slices.Clone(s.informers), func(inf shardedInformer) bool { return inf.name == name })
}

// checkMapping refuses what cannot be sharded by rule.
func (s *sharder) checkMapping(mapping *meta.RESTMapping, rule ShardRule) error {
	switch {
	case rule == Whole:
		return nil
	case rule != ShardByObject && rule != ShardByController:
		return fmt.Errorf("manager: Options.Shard %v: unknown rule", rule)
	case s == nil:
		return fmt.Errorf("manager: Options.Shard %v for %s without Config.Sharding", rule, mapping.Resource.Resource)
	case s.cfg.Field == reflector.ShardByNamespace && mapping.Scope.Name() != meta.RESTScopeNameNamespace:
		return fmt.Errorf("manager: %s is cluster-scoped: it cannot be sharded by namespace", mapping.Resource.Resource)
	}
	return nil
}

// AddSharded adds ctl (see Manager.Add) as a sharded controller: it reconciles
// only the keys owns places in the shard this replica holds, from the start
// (nothing until the first slots are held). Hand-offs are fenced: a key
// leaves with its reconciles cancelled (cause reconcile.ErrRevoked) and
// drained before another replica may take it. ctl must be made with
// reconcile.Config.Restrictable. OwnsByObject makes owns for the usual
// controller, whose keys name objects of a ShardByObject informer.
func AddSharded[K comparable](m *Manager, ctl *reconcile.Controller[K], owns func(sh reflector.Shard, key K) bool) error {
	s := m.sharder
	switch {
	case s == nil:
		return errors.New("manager: AddSharded without Config.Sharding")
	case ctl == nil || owns == nil:
		return errors.New("manager: AddSharded with a nil controller or owns")
	}
	restrict := func(ctx context.Context, sh reflector.Shard) error {
		return ctl.Restrict(ctx, func(k K) bool { return owns(sh, k) })
	}
	// Restricted to the shard held now, and known to the hand-offs from now
	// on, before it can start.
	s.mu.Lock()
	err := restrict(context.Background(), s.held)
	if err == nil {
		s.controllers = append(s.controllers, shardedController{ctl: ctl, name: ctl.Name(), restrict: restrict})
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("manager: AddSharded %q: %w", ctl.Name(), err)
	}
	if err := m.Add(ctl); err != nil {
		s.mu.Lock()
		s.controllers = slices.DeleteFunc(slices.Clone(s.controllers), func(c shardedController) bool { return c.ctl == any(ctl) })
		s.mu.Unlock()
		return err
	}
	return nil
}

// OwnsByObject is the owns of AddSharded for a controller whose keys name
// objects of inf, an informer sharded ShardByObject: by namespace, the key's
// namespace places it; by UID, the object's UID as inf holds it, or, for an
// object gone from inf, the UID it had (informer.DepartedUID); a key of an
// object inf never held is refused.
func OwnsByObject[T reflector.Object](inf *informer.Informer[T]) func(reflector.Shard, types.NamespacedName) bool {
	return func(sh reflector.Shard, key types.NamespacedName) bool {
		if sh.Field == reflector.ShardByNamespace {
			return sh.Contains(key.Namespace, "")
		}
		k := key.Name
		if key.Namespace != "" {
			k = key.Namespace + "/" + key.Name
		}
		if obj, ok := inf.Indexer().Get(k); ok {
			return sh.ContainsObject(obj)
		}
		if uid, ok := inf.DepartedUID(k); ok {
			return sh.Contains("", string(uid))
		}
		return false
	}
}

// ShardStatus is a snapshot of this replica's part in its group.
type ShardStatus struct {
	shard.Status
	Identity string
	// Fraction is the share of the hash space held, 0 to 1.
	Fraction float64
}

// ShardStatus returns this replica's part in its group; false without
// Config.Sharding.
func (m *Manager) ShardStatus() (ShardStatus, bool) {
	if m.sharder == nil {
		return ShardStatus{}, false
	}
	st := m.sharder.member.Status()
	var f float64
	for _, r := range st.Held.Ranges {
		end := math.Ldexp(1, 64)
		if r.End != 0 {
			end = float64(r.End)
		}
		f += (end - float64(r.Start)) / math.Ldexp(1, 64)
	}
	return ShardStatus{Status: st, Identity: m.sharder.cfg.Identity, Fraction: f}, true
}
