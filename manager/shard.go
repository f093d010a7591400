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

	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/shard"
)

// Sharding makes the manager one of several replicas that split the work of
// their sharded controllers (AddSharded) and the objects of their sharded
// informers (Options.Shard), coordinated by Leases only (package shard).
//
// The placement rule: a key belongs to the replica whose shard holds the key
// itself, never to one that happens to cache an object of its name, so that no
// two replicas own one key at any moment, also across a delete and re-create,
// a stale cache or a hand-off in flight. Every replica hashes the same Field:
//   - reflector.ShardByName (the default) hashes "namespace/name": informers
//     sharded ShardByObject keep the objects of the keys this replica owns,
//     and ShardByController keeps children with their controller's key
//     (reflector.ShardByControllerName), the key reconcile.ByControllerOwner
//     maps them to, also when the owner was re-created and the children are
//     the old one's. The server cannot filter by name: each replica's
//     reflector receives the whole collection and keeps its shard.
//   - reflector.ShardByNamespace keeps everything of a namespace together,
//     owners and children alike (an owner reference never crosses
//     namespaces), and is filtered by the server for every informer
//     (KEP-5866, where the ShardedListAndWatch gate is on); it balances only
//     as well as the namespaces do, and namespaces named in a sequence
//     (team-01, team-02, ...) crowd into few slots: the server's hash
//     (FNV-1a, which ShardByName mixes further) barely moves its high bits
//     with the last characters. Cluster-scoped resources cannot be
//     sharded by namespace: Typed and the others refuse.
//
// reflector.ShardByUID is refused: a controller's keys are names, and a name
// deleted and re-created gets a new UID that may hash to another replica,
// while the first still owns the key to clean up after the old object.
//
// A replica acts on a key of a slot it was granted only once its sharded
// informers hold every object of that slot (informer.Informer.WaitForShard):
// an object missing from a cache that is still listing is never taken for a
// deleted one. An object deleted while its slot changes hands (after the
// last replica stopped and before the next listed) is seen gone by neither:
// clean up what a deleted object leaves outside the cluster through a
// finalizer (the object stays until its owner has cleaned up) or a resync of
// that outside state (a Source whose AppendKeys lists it), as a controller
// must anyway for the deletes it missed while down.
//
// What the manager enforces: a sharded informer needs Config.Sharding, a
// cluster-scoped one Field ShardByName; AddSharded needs a controller made
// with reconcile.Config.Restrictable. What it cannot see is how a source maps
// objects to keys: a mapping other than the object's own key
// (reconcile.ByObject) or its controller's (ByControllerOwner, with
// ShardByController) places keys where the objects are not.
type Sharding struct {
	// Namespace holds the members' Leases; Group names the controller whose
	// replicas split the work (every replica the same); Identity names this
	// replica, unique in the group (the pod name, say). Required.
	Namespace, Group, Identity string
	// Field is what keys are placed by: reflector.ShardByName (default) or
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
	// ShardByObject: an object is held by the replica that owns its own key
	// (Field ShardByName) or namespace (ShardByNamespace).
	ShardByObject
	// ShardByController: an object is held by the replica that owns its
	// controller's key (with Field ShardByName) or its namespace (with
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
//
// Its invariant: a sharded controller reconciles only keys of ctlShard, and
// ctlShard is within held and within what every sharded informer has listed.
// A grant widens held and the informers at once, and ctlShard only once the
// informers hold the new slots (widen); a revoke narrows held and ctlShard
// at once (the controllers drain), and the informers later (rescope).
type sharder struct {
	cfg    Sharding
	member *shard.Member

	// ctlMu serializes the changes of the controllers' shard: ctlShard and
	// the Restrict calls that follow it. Taken before mu.
	ctlMu    sync.Mutex
	ctlShard reflector.Shard // what the controllers may reconcile; the empty shard at first

	mu          sync.Mutex
	held        reflector.Shard // what the member holds; the empty shard at first
	informers   []shardedInformer
	controllers []shardedController
	// gen counts grants and revokes: a widening applies only if none came
	// since it began.
	gen int64
	// widening is the pending widening's cancel, nil when none; widens
	// counts the widening goroutines, which stop waits for.
	widening context.CancelFunc
	widens   sync.WaitGroup
	// Informers are narrowed once hand-offs have paused for settle: a
	// replica that starts or sees others start takes and gives slots over
	// a few rounds, and each re-scope lists its whole shard again.
	settle  time.Duration
	rescope *time.Timer // pending re-scope, nil when none
	stopped bool
}

// shardable is what the sharder needs of a sharded informer
// (*informer.Informer).
type shardable interface {
	SetShard(reflector.Shard) error
	Shard() reflector.Shard
	WaitForShard(context.Context, reflector.Shard) error
}

type shardedInformer struct {
	name string
	rule ShardRule
	inf  shardable
}

type shardedController struct {
	ctl      any // the *reconcile.Controller
	name     string
	restrict func(ctx context.Context, sh reflector.Shard) error
}

func newSharder(m *Manager, cfg Sharding) (*sharder, error) {
	switch cfg.Field {
	case "":
		cfg.Field = reflector.ShardByName
	case reflector.ShardByName, reflector.ShardByNamespace:
	case reflector.ShardByUID:
		return nil, errors.New("manager: Config.Sharding.Field ShardByUID: a controller's keys are names, and a name deleted and re-created gets a new UID that may hash to another replica while the first still owns the key; use reflector.ShardByName (the default) or ShardByNamespace")
	default:
		return nil, fmt.Errorf("manager: Config.Sharding.Field %q: want reflector.ShardByName or ShardByNamespace", cfg.Field)
	}
	empty := reflector.Shard{Field: cfg.Field}
	s := &sharder{cfg: cfg, held: empty, ctlShard: empty}
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
	if rule == ShardByController && sh.Field == reflector.ShardByName {
		sh.Field = reflector.ShardByControllerName
	}
	return sh
}

// revoke narrows the controllers first (their reconciles of the keys that
// leave are cancelled and drained), then, once hand-offs pause, the
// informers. A widening still waiting for its informers is cancelled; what of
// it keep retains is widened again.
func (s *sharder) revoke(ctx context.Context, keep reflector.Shard) error {
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	s.mu.Lock()
	s.held = keep // what is added from now on starts narrowed
	s.gen++
	if s.widening != nil {
		s.widening()
		s.widening = nil
	}
	ctls := s.controllers
	s.mu.Unlock()
	narrowed := intersect(s.ctlShard, keep)
	for _, c := range ctls {
		if err := c.restrict(ctx, narrowed); err != nil {
			return fmt.Errorf("controller %q: %w", c.name, err) // the member keeps the slots and retries
		}
	}
	s.ctlShard = narrowed
	if !narrowed.Covers(keep) {
		s.widen(keep)
	}
	s.scheduleRescope() // the informers may hold more than the keys meanwhile: they are fenced
	return nil
}

// grant widens the informers at once, and the controllers once the informers
// hold every object of hold.
func (s *sharder) grant(hold reflector.Shard) {
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	s.mu.Lock()
	s.held = hold
	s.gen++
	if s.widening != nil {
		s.widening()
		s.widening = nil
	}
	for _, inf := range s.informers {
		if want := forRule(hold, inf.rule); !inf.inf.Shard().Covers(want) {
			_ = inf.inf.SetShard(want) // hold is valid: it cannot fail
		}
	}
	s.mu.Unlock()
	s.widen(hold)
}

// widen restricts the controllers to target once every sharded informer
// holds it, unless a grant or revoke comes first or the sharder stops.
// Requires ctlMu held.
func (s *sharder) widen(target reflector.Shard) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.widening = cancel
	gen, infs := s.gen, s.informers
	s.widens.Go(func() {
		defer cancel()
		for _, inf := range infs {
			if err := inf.inf.WaitForShard(ctx, forRule(target, inf.rule)); err != nil {
				return // cancelled, or the informer stopped: the manager is stopping
			}
		}
		s.ctlMu.Lock()
		defer s.ctlMu.Unlock()
		s.mu.Lock()
		current := s.gen == gen && !s.stopped
		ctls := s.controllers
		s.mu.Unlock()
		if !current {
			return
		}
		for _, c := range ctls {
			_ = c.restrict(context.Background(), target) // a widening refuses nothing in flight: it returns at once
		}
		s.ctlShard = target
	})
}

// intersect returns the shard of the hashes in both a and b, of a's Field.
func intersect(a, b reflector.Shard) reflector.Shard {
	out := reflector.Shard{Field: a.Field}
	for _, ra := range a.Ranges {
		for _, rb := range b.Ranges {
			start := max(ra.Start, rb.Start)
			end := ra.End
			if end == 0 || (rb.End != 0 && rb.End < end) {
				end = rb.End
			}
			if end == 0 || start < end {
				out.Ranges = append(out.Ranges, reflector.Range{Start: start, End: end})
			}
		}
	}
	return out
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
	defer s.mu.Unlock()
	for _, inf := range s.informers {
		if want := forRule(s.held, inf.rule); !slices.Equal(inf.inf.Shard().Ranges, want.Ranges) {
			_ = inf.inf.SetShard(want) // held is valid: it cannot fail
		}
	}
}

// stop cancels a pending re-scope and widening, and waits for the widening;
// after it none starts.
func (s *sharder) stop() {
	s.mu.Lock()
	s.stopped = true
	if s.rescope != nil {
		s.rescope.Stop()
	}
	if s.widening != nil {
		s.widening()
	}
	s.mu.Unlock()
	s.widens.Wait()
}

// shardFor is the shard an informer of rule holds now.
func (s *sharder) shardFor(rule ShardRule) reflector.Shard {
	s.mu.Lock()
	defer s.mu.Unlock()
	return forRule(s.held, rule)
}

// addInformer registers a sharded informer made with shard initial, and
// re-scopes it if a hand-off came in between.
func (s *sharder) addInformer(name string, rule ShardRule, inf shardable, initial reflector.Shard) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.informers = append(s.informers, shardedInformer{name: name, rule: rule, inf: inf})
	if now := forRule(s.held, rule); !slices.Equal(now.Ranges, initial.Ranges) {
		_ = inf.SetShard(now)
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
// (nothing until the first slots are held and its informers hold them).
// Hand-offs are fenced: a key leaves with its reconciles cancelled (cause
// reconcile.ErrRevoked) and drained before another replica may take it. ctl
// must be made with reconcile.Config.Restrictable. OwnsKey is owns for keys
// that are object names.
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
	// Restricted to what the controllers may reconcile now, and known to the
	// hand-offs from now on, before it can start.
	s.ctlMu.Lock()
	err := restrict(context.Background(), s.ctlShard)
	if err == nil {
		s.mu.Lock()
		s.controllers = append(s.controllers, shardedController{ctl: ctl, name: ctl.Name(), restrict: restrict})
		s.mu.Unlock()
	}
	s.ctlMu.Unlock()
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

// OwnsKey is the owns of AddSharded for a controller whose keys name objects
// (reconcile.ByObject, ByControllerOwner): the key is owned by the replica
// whose shard holds it (reflector.Shard.ContainsKey), whatever any cache
// holds, so that one replica at most owns it at any moment.
func OwnsKey(sh reflector.Shard, key types.NamespacedName) bool {
	return sh.ContainsKey(key.Namespace, key.Name)
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
