// Package shard splits one controller's keyspace among its replicas, on
// coordination.k8s.io Leases and nothing else.
//
// Each replica (a Member) holds a Lease of its own in a group. The hash space
// of reflector.Shard is cut into Slots equal slots, and each slot is assigned
// to one live member by rendezvous hashing: a member that joins or leaves moves
// only its own share of the slots, about 1/N of the keys.
//
// Hand-offs are fenced. A member lists, on its Lease, the slots it claims and
// the slots it holds. It gives a slot up only after its Revoke callback has
// returned (its controller has stopped and drained every key of that slot), by
// writing its Lease without it. It takes a slot in two steps: it claims it on
// its Lease, then holds it (and calls Grant) only after reading every other
// live Lease, after its own write, and finding the slot on none. Reads and
// writes are linearizable (etcd behind kube-apiserver), so two members never
// hold one slot at once.
//
// Liveness is judged by each member's own monotonic clock, never by another's
// wall clock: a member counts another's Lease live until LeaseDuration (as the
// Lease states it, at most MaxLeaseDuration) has passed since it last saw the
// Lease change, and drops every slot once RenewDeadline has passed since it
// sent its own last successful renewal. The renewTime written on a Lease is for
// people and tools; no member reads it. What this assumes:
//   - clocks advance at about the same rate on every node (their offsets and
//     steps of the wall clock do not matter): LeaseDuration - RenewDeadline
//     must cover the drift over a LeaseDuration, and the drain (Revoke) must
//     end within it;
//   - every member of a group uses the same Slots, and LeaseDuration no
//     shorter than any other member's RenewDeadline;
//   - identities are unique: a member whose Lease another process writes (the
//     same Identity started twice) stops with ErrDuplicateIdentity, and a
//     member that finds its Lease held by an instance it does not know waits
//     until it has seen that Lease unchanged for its duration before taking it.
//
// A member that dies holds its slots until the others have seen its Lease
// unchanged for its duration, which bounds the take-over; a Lease nobody
// renews, whatever it states, stalls its slots for MaxLeaseDuration at most.
// A member deletes a Lease it has seen expire (on its resourceVersion: a
// renewal since keeps it), and counts a Lease it sees for the first time in
// the assignment only once it has seen it change, so that a member that joins
// later does not wait a LeaseDuration of its own for a dead member's slots.
package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/reflector"
)

// Defaults of Config.
const (
	DefaultSlots         = 64
	DefaultLeaseDuration = 15 * time.Second
)

// MaxLeaseDuration bounds Config.LeaseDuration, and how long a member counts
// another's unchanging Lease live whatever duration that Lease states.
const MaxLeaseDuration = 5 * time.Minute

// ErrDuplicateIdentity is Run's error when another process writes this
// member's Lease: two replicas run with one Identity.
var ErrDuplicateIdentity = errors.New("shard: another replica runs with this identity")

const (
	groupLabel         = "ctrlkit.io/shard-group"
	claimAnnotation    = "ctrlkit.io/shard-claimed"
	holdAnnotation     = "ctrlkit.io/shard-held"
	instanceAnnotation = "ctrlkit.io/shard-instance"
)

// Config configures a Member.
type Config struct {
	// Client reads and writes the group's Leases. Required.
	Client kubernetes.Interface
	// Namespace and Group name the group: each member's Lease is
	// "<Group>-<Identity>" in Namespace, labelled with the group. Required.
	Namespace, Group string
	// Identity names this member, unique in the group (the pod name, say).
	// Required.
	Identity string
	// Field is what the slots' hashes place: reflector.ShardByName,
	// ShardByNamespace or ShardByUID (the Shard handed to Revoke and Grant
	// has it). Required.
	Field string
	// Slots is how many equal slots the hash space is cut into; every member
	// must use the same. Default DefaultSlots.
	Slots int
	// LeaseDuration is how long a Lease stays live without renewal, at most
	// MaxLeaseDuration. Default DefaultLeaseDuration. RenewPeriod is how often a member renews its
	// Lease and looks at the others (default LeaseDuration/5); RenewDeadline
	// how long it keeps its slots without a successful renewal (default
	// LeaseDuration*2/3).
	LeaseDuration, RenewPeriod, RenewDeadline time.Duration

	// Revoke is called before the member gives slots up, with the shard it
	// keeps: it must stop every use of objects outside keep (cancel and drain
	// their reconciles) before it returns. An error keeps the slots and is
	// retried next round. Required.
	Revoke func(ctx context.Context, keep reflector.Shard) error
	// Grant is called after the member took slots, with the shard it holds
	// now: objects in it are this member's alone until the next Revoke.
	// Required.
	Grant func(hold reflector.Shard)

	Logger logr.Logger
}

// Member is one replica's membership of a group. Create it with New and call
// Run once.
type Member struct {
	cfg      Config
	name     string // of the member's Lease
	instance string // written on the Lease: tells this process from another of the same Identity

	// seen is what the rounds saw of each Lease of the group, by name; only
	// Run's goroutine uses it.
	seen map[string]sighting

	mu      sync.Mutex
	held    map[int]bool
	claimed map[int]bool
	members []string // live members in the last round, sorted
	// renewed is when (this process's clock, with its monotonic reading) the
	// last Lease write that succeeded was sent: the others saw the Lease
	// change after that, and count it live until at least renewed +
	// LeaseDuration.
	renewed time.Time
	// wrote is set by the first write of the Lease: from then on, another
	// instance's mark on it is a duplicate identity. Before it, foreignSince
	// is when the Lease, marked by another instance, was first seen: a
	// change after that is a duplicate too. Both are Run's goroutine's.
	wrote        bool
	foreignSince time.Time
	// duplicate is set once another process was found writing this
	// member's Lease; Run then stops.
	duplicate bool
	// epoch counts dropAll's: a round that began before one does not hold
	// or grant what it decided.
	epoch int64
	// cb serializes the Revoke and Grant callbacks (a round's and the
	// deadline's), so that no Grant runs after a Revoke that dropped it.
	cb sync.Mutex
	// lease (capacity 1) serializes this member's writes of its Lease: a
	// round's write and the keep-alive's would otherwise conflict, the
	// round losing.
	lease chan struct{}
	// Slots taken (Grant) and given up (Revoke) since New: the hand-offs.
	granted, revoked int64
}

// New checks cfg and returns a Member.
func New(cfg Config) (*Member, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("shard: Config.Client is nil")
	case cfg.Namespace == "" || cfg.Group == "" || cfg.Identity == "":
		return nil, errors.New("shard: Config.Namespace, Group and Identity are required")
	case cfg.Field != reflector.ShardByName && cfg.Field != reflector.ShardByNamespace && cfg.Field != reflector.ShardByUID:
		return nil, fmt.Errorf("shard: Config.Field %q: want %q, %q or %q", cfg.Field, reflector.ShardByName, reflector.ShardByNamespace, reflector.ShardByUID)
	case cfg.Revoke == nil || cfg.Grant == nil:
		return nil, errors.New("shard: Config.Revoke and Grant are required")
	case cfg.Slots < 0 || cfg.LeaseDuration < 0 || cfg.RenewPeriod < 0 || cfg.RenewDeadline < 0:
		return nil, errors.New("shard: negative Slots or durations")
	}
	if cfg.Slots == 0 {
		cfg.Slots = DefaultSlots
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewPeriod == 0 {
		cfg.RenewPeriod = cfg.LeaseDuration / 5
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = cfg.LeaseDuration * 2 / 3
	}
	if cfg.RenewDeadline >= cfg.LeaseDuration || cfg.RenewPeriod >= cfg.RenewDeadline {
		return nil, errors.New("shard: want RenewPeriod < RenewDeadline < LeaseDuration")
	}
	if cfg.LeaseDuration > MaxLeaseDuration {
		return nil, fmt.Errorf("shard: Config.LeaseDuration %v is over MaxLeaseDuration %v", cfg.LeaseDuration, MaxLeaseDuration)
	}
	var token [12]byte
	if _, err := rand.Read(token[:]); err != nil {
		return nil, fmt.Errorf("shard: instance token: %w", err)
	}
	return &Member{
		cfg: cfg, name: cfg.Group + "-" + cfg.Identity, instance: hex.EncodeToString(token[:]),
		seen: map[string]sighting{}, held: map[int]bool{}, claimed: map[int]bool{}, lease: make(chan struct{}, 1),
	}, nil
}

// Status is a snapshot of a member.
type Status struct {
	Members []string        // live members seen in the last round
	Held    reflector.Shard // what this member may work on now
	Slots   int             // how many slots it holds, of Config.Slots
	// Granted and Revoked count the slots this member took and gave up since
	// New: its hand-offs.
	Granted, Revoked int64
}

// Status returns a snapshot of the member.
func (m *Member) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Status{Members: slices.Clone(m.members), Held: m.shardOf(m.held), Slots: len(m.held), Granted: m.granted, Revoked: m.revoked}
}

// Run holds the member's Lease and follows the group until ctx ends; then it
// revokes everything and deletes its Lease, so that the others take its slots
// at once. It returns nil after a clean stop, and ErrDuplicateIdentity, having
// revoked everything and left the Lease to the other process, if another
// process writes this member's Lease.
func (m *Member) Run(ctx context.Context) error {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var watched sync.WaitGroup
	watched.Go(func() { m.deadline(runCtx) })
	watched.Go(func() { m.keepAlive(runCtx, stop) })
	tick := time.NewTicker(m.cfg.RenewPeriod)
	defer tick.Stop()
	for {
		err := m.round(runCtx)
		if errors.Is(err, ErrDuplicateIdentity) {
			m.markDuplicate()
			stop()
		} else if err != nil && runCtx.Err() == nil {
			m.cfg.Logger.Info("shard round failed", "err", err)
		}
		select {
		case <-runCtx.Done():
			stop()
			watched.Wait()
			if m.isDuplicate() {
				dctx, cancel := context.WithTimeout(context.Background(), m.cfg.LeaseDuration-m.cfg.RenewDeadline)
				m.dropAll(dctx)
				cancel()
				return fmt.Errorf("%w: %q (Lease %s/%s)", ErrDuplicateIdentity, m.cfg.Identity, m.cfg.Namespace, m.name)
			}
			return m.leave()
		case <-tick.C:
		}
	}
}

func (m *Member) markDuplicate() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.duplicate {
		m.cfg.Logger.Error(ErrDuplicateIdentity, "another process writes this member's Lease: stopping", "identity", m.cfg.Identity)
	}
	m.duplicate = true
}

func (m *Member) isDuplicate() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.duplicate
}

// requestTimeout bounds one request to the server: a renew period, or more
// while the deadline is further away (a slow server's answer still counts if
// it comes before the slots must be dropped).
func (m *Member) requestTimeout() time.Duration {
	m.mu.Lock()
	renewed := m.renewed
	m.mu.Unlock()
	if renewed.IsZero() {
		return m.cfg.RenewPeriod
	}
	return max(m.cfg.RenewPeriod, time.Until(renewed.Add(m.cfg.RenewDeadline)))
}

// keepAlive renews the Lease, as it stands, whenever no round has for a
// RenewPeriod: a round may wait long in Revoke or Grant (a drain), and the
// member is alive meanwhile. Renewing keeps what the Lease names: slots this
// member holds, or, after a drop, slots it no longer works on, which the
// others then wait for (safe) until the next round writes.
func (m *Member) keepAlive(ctx context.Context, stop context.CancelFunc) {
	tick := time.NewTicker(m.cfg.RenewPeriod / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		m.mu.Lock()
		due := !m.renewed.IsZero() && time.Since(m.renewed) >= m.cfg.RenewPeriod
		m.mu.Unlock()
		if !due {
			continue
		}
		stamp, err := m.touch(ctx)
		switch {
		case errors.Is(err, ErrDuplicateIdentity):
			m.markDuplicate()
			stop()
		case err == nil:
			m.mu.Lock()
			if stamp.After(m.renewed) {
				m.renewed = stamp
			}
			m.mu.Unlock()
		}
	}
}

// touch sets the Lease's renewTime, and nothing else.
func (m *Member) touch(ctx context.Context) (time.Time, error) {
	select {
	case m.lease <- struct{}{}:
		defer func() { <-m.lease }()
	default:
		return time.Time{}, errors.New("shard: a round is writing the Lease") // that renews it
	}
	ctx, cancel := context.WithTimeout(ctx, m.requestTimeout())
	defer cancel()
	leases := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace)
	cur, err := leases.Get(ctx, m.name, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, err
	}
	if cur.Annotations[instanceAnnotation] != m.instance {
		return time.Time{}, ErrDuplicateIdentity // a round wrote it first: another process has since
	}
	stamp := time.Now() // with its monotonic reading: the deadline counts from it
	now := metav1.NewMicroTime(stamp)
	cur.Spec.RenewTime = &now
	if _, err := leases.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return time.Time{}, err
	}
	return stamp, nil
}

// deadline drops every slot once RenewDeadline has passed since the last
// renewal, whatever the rounds are doing (one may be stuck in a slow
// request): the drain then has LeaseDuration - RenewDeadline to finish
// before the others may count the Lease expired.
func (m *Member) deadline(ctx context.Context) {
	t := time.NewTimer(m.cfg.RenewPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.mu.Lock()
		renewed, held := m.renewed, len(m.held)
		m.mu.Unlock()
		next := m.cfg.RenewPeriod / 4
		if !renewed.IsZero() && held > 0 {
			if left := time.Until(renewed.Add(m.cfg.RenewDeadline)); left > 0 {
				next = min(next, left)
			} else {
				m.cfg.Logger.Info("shard Lease not renewed in time: dropping every slot", "renewed", renewed)
				dctx, cancel := context.WithTimeout(ctx, m.cfg.LeaseDuration-m.cfg.RenewDeadline)
				m.dropAll(dctx)
				cancel()
			}
		}
		t.Reset(next)
	}
}

// leave gives everything up and deletes the Lease.
func (m *Member) leave() error {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.RenewDeadline)
	defer cancel()
	m.dropAll(ctx)
	err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).Delete(ctx, m.name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("shard: delete Lease %s: %w", m.name, err)
	}
	return nil
}

// dropAll revokes every slot held (the Revoke callback is retried until it
// succeeds or ctx ends) and forgets claims, without writing the Lease.
func (m *Member) dropAll(ctx context.Context) {
	m.cb.Lock()
	defer m.cb.Unlock()
	m.mu.Lock()
	m.epoch++ // a round under way holds nothing it decided
	had := len(m.held) > 0
	m.mu.Unlock()
	if had {
		for m.revoke(ctx, reflector.Shard{Field: m.cfg.Field}) != nil && ctx.Err() == nil {
			time.Sleep(m.cfg.RenewPeriod / 4)
		}
	}
	m.mu.Lock()
	m.revoked += int64(len(m.held))
	clear(m.held)
	clear(m.claimed)
	m.mu.Unlock()
}

// lease is what a round reads of one member's Lease.
type lease struct {
	identity string
	// live: the Lease may still be renewed (it changed within its duration,
	// as this member saw it), so the slots it names are fenced. member: it
	// was also seen to change at least once, so it takes part in the
	// assignment. A Lease seen for the first time is live but no member until
	// it changes: a dead member's Lease, found by a member that just started,
	// would otherwise keep its slots assigned to nobody alive for a
	// LeaseDuration.
	live, member    bool
	claimed, held   map[int]bool
	resourceVersion string
}

// round renews the Lease and moves slots: gives up what is no longer this
// member's, claims what is, and holds what it claimed in an earlier round
// and nobody else mentions.
func (m *Member) round(ctx context.Context) error {
	others, err := m.read(ctx)
	if err != nil {
		return err
	}
	members := []string{m.cfg.Identity}
	for _, o := range others {
		if o.member {
			members = append(members, o.identity)
		}
	}
	sort.Strings(members)
	target := map[int]bool{}
	for s, o := range assign(m.cfg.Slots, members) {
		if o == m.cfg.Identity {
			target[s] = true
		}
	}

	m.mu.Lock()
	m.members = members
	held, claimed := copySet(m.held), copySet(m.claimed)
	epoch := m.epoch
	m.mu.Unlock()
	// current reports whether no dropAll came since the round began.
	current := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.epoch == epoch
	}

	// Give up held slots that are no longer ours: stop their work first.
	keep := map[int]bool{}
	for s := range held {
		if target[s] {
			keep[s] = true
		}
	}
	if len(keep) < len(held) {
		m.cb.Lock()
		if !current() {
			m.cb.Unlock()
			return errors.New("shard: every slot was dropped during the round")
		}
		if err := m.revoke(ctx, m.shardOf(keep)); err != nil {
			m.cb.Unlock()
			return fmt.Errorf("shard: revoke: %w", err)
		}
		m.mu.Lock()
		m.revoked += int64(len(held) - len(keep))
		m.held = keep
		m.mu.Unlock()
		m.cb.Unlock()
		held = copySet(keep) // this round goes on changing held
	}
	// Hold the claims of earlier rounds that no other live Lease mentions:
	// that read came after our claim's write.
	var granted []int
	for s := range claimed {
		if !target[s] {
			delete(claimed, s)
			continue
		}
		free := true
		for _, o := range others {
			if o.live && (o.claimed[s] || o.held[s]) {
				free = false
				// Both claim it, neither holds it: the member the slot
				// prefers keeps claiming, the other withdraws.
				if !o.held[s] && score(s, o.identity) > score(s, m.cfg.Identity) {
					delete(claimed, s)
				}
				break
			}
		}
		if free {
			delete(claimed, s)
			held[s] = true
			granted = append(granted, s)
		}
	}
	// Claim what is ours and neither held nor claimed yet.
	for s := range target {
		if !held[s] && !claimed[s] {
			claimed[s] = true
		}
	}
	// Write: the Lease must show a hold before work on it starts.
	stamp, err := m.write(ctx, claimed, held)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.renewed = stamp
	dropped := m.epoch != epoch
	if !dropped {
		m.held, m.claimed = held, claimed
		m.granted += int64(len(granted))
	}
	m.mu.Unlock()
	if dropped {
		// The Lease names slots this member no longer works on: safe, and
		// the next round sets it right.
		return errors.New("shard: every slot was dropped during the round")
	}
	if len(granted) > 0 {
		m.cb.Lock()
		if current() {
			m.grant(m.shardOf(held))
		}
		m.cb.Unlock()
	}
	return nil
}

// revoke calls Config.Revoke; a panic is its error (the slots are kept).
func (m *Member) revoke(ctx context.Context, keep reflector.Shard) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("shard: Revoke panicked: %v\n%s", v, debug.Stack())
		}
	}()
	return m.cfg.Revoke(ctx, keep)
}

// grant calls Config.Grant; a panic is logged: the slots are held whatever the
// callback did.
func (m *Member) grant(hold reflector.Shard) {
	defer func() {
		if v := recover(); v != nil {
			m.cfg.Logger.Error(fmt.Errorf("shard: Grant panicked: %v", v), "Grant panicked", "stack", string(debug.Stack()))
		}
	}()
	m.cfg.Grant(hold)
}
