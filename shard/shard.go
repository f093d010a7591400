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
package shard

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
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
	identity        string
	live            bool
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
		if o.live {
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

// sighting is what a member saw of one Lease: its version (resourceVersion
// and renewTime: any write changes one), and when, by this process's monotonic
// clock, it first saw that version.
type sighting struct {
	version string
	since   time.Time
}

// observe records that the Lease l was read at now (after the answer came)
// and returns since when, by this process's clock, it has been unchanged.
// Requires Run's goroutine.
func (m *Member) observe(l *coordinationv1.Lease, now time.Time) time.Time {
	v := l.ResourceVersion
	if l.Spec.RenewTime != nil {
		v += "@" + l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	s, ok := m.seen[l.Name]
	if !ok || s.version != v {
		s = sighting{version: v, since: now}
		m.seen[l.Name] = s
	}
	return s.since
}

// leaseDuration is how long a Lease counts live unchanged: what it states, at
// most MaxLeaseDuration, and this member's own when it states none.
func (m *Member) leaseDuration(l *coordinationv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return m.cfg.LeaseDuration
	}
	return min(time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second, MaxLeaseDuration)
}

// read lists the group's Leases, others than this member's, each judged live
// by how long this member has seen it unchanged. A Lease seen for the first
// time counts as renewed now: a member that starts waits a LeaseDuration
// before it counts another's Lease expired. Requires Run's goroutine.
func (m *Member) read(ctx context.Context) ([]lease, error) {
	ctx, cancel := context.WithTimeout(ctx, m.requestTimeout())
	defer cancel()
	list, err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: groupLabel + "=" + m.cfg.Group})
	if err != nil {
		return nil, fmt.Errorf("shard: list Leases: %w", err)
	}
	now := time.Now()
	var out []lease
	present := make(map[string]bool, len(list.Items))
	prefix := m.cfg.Group + "-"
	for i := range list.Items {
		l := &list.Items[i]
		present[l.Name] = true
		since := m.observe(l, now)
		identity, ok := strings.CutPrefix(l.Name, prefix)
		if l.Name == m.name || !ok || identity == "" {
			continue // this member's own, or not a member's: no identity to assign slots to
		}
		out = append(out, lease{
			identity: identity,
			live:     now.Sub(since) < m.leaseDuration(l),
			claimed:  parseSlots(l.Annotations[claimAnnotation]),
			held:     parseSlots(l.Annotations[holdAnnotation]),
		})
	}
	for name := range m.seen {
		if !present[name] {
			delete(m.seen, name)
		}
	}
	return out, nil
}

// write renews this member's Lease with its claims and holds. It returns when
// the write was sent (by this process's clock, with its monotonic reading), and
// ErrDuplicateIdentity once another process is found writing the Lease. A
// Lease left by an instance this member does not know (its predecessor, or a
// duplicate) is taken only once this member has seen it unchanged for its
// duration. Requires Run's goroutine.
func (m *Member) write(ctx context.Context, claimed, held map[int]bool) (renewed time.Time, err error) {
	m.lease <- struct{}{}
	defer func() { <-m.lease }()
	ctx, cancel := context.WithTimeout(ctx, m.requestTimeout())
	defer cancel()
	leases := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace)
	secs := int32((m.cfg.LeaseDuration + time.Second - 1) / time.Second)
	ann := map[string]string{claimAnnotation: formatSlots(claimed), holdAnnotation: formatSlots(held), instanceAnnotation: m.instance}
	cur, err := leases.Get(ctx, m.name, metav1.GetOptions{})
	sent := time.Now()
	now := metav1.NewMicroTime(sent)
	switch {
	case apierrors.IsNotFound(err):
		if m.wrote {
			// Deleted behind this member's back (by another instance that
			// left, say): written again, as a member that starts would.
			m.cfg.Logger.Info("shard Lease deleted while held: writing it again", "lease", m.name)
		}
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: m.name, Namespace: m.cfg.Namespace, Labels: map[string]string{groupLabel: m.cfg.Group}, Annotations: ann},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &m.cfg.Identity, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{})
	case err == nil:
		if cur.Annotations[instanceAnnotation] != m.instance {
			if m.wrote {
				return time.Time{}, ErrDuplicateIdentity
			}
			since := m.observe(cur, time.Now())
			if m.foreignSince.IsZero() {
				m.foreignSince = since
			}
			if since.After(m.foreignSince) {
				return time.Time{}, ErrDuplicateIdentity // it changed while this member waited: another process renews it
			}
			if time.Since(since) < m.leaseDuration(cur) {
				return time.Time{}, fmt.Errorf("shard: Lease %s is held by another instance (a predecessor, or a replica of the same identity): waiting until it has been unchanged for %v", m.name, m.leaseDuration(cur))
			}
			cur.Spec.AcquireTime = &now
		}
		cur.Annotations = ann
		cur.Labels = map[string]string{groupLabel: m.cfg.Group}
		cur.Spec.HolderIdentity, cur.Spec.LeaseDurationSeconds, cur.Spec.RenewTime = &m.cfg.Identity, &secs, &now
		_, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("shard: write Lease %s: %w", m.name, err)
	}
	m.wrote = true
	return sent, nil
}

// shardOf returns the reflector.Shard of a set of slots, adjacent slots merged
// into one range.
func (m *Member) shardOf(slots map[int]bool) reflector.Shard {
	s := reflector.Shard{Field: m.cfg.Field}
	n := uint64(m.cfg.Slots)
	for i := 0; i < m.cfg.Slots; i++ {
		if !slots[i] {
			continue
		}
		j := i
		for j+1 < m.cfg.Slots && slots[j+1] {
			j++
		}
		s.Ranges = append(s.Ranges, reflector.Range{Start: slotStart(i, n), End: slotStart(j+1, n)})
		i = j
	}
	return s
}

// slotStart is where slot i of n begins; slot n begins at 2^64, written 0.
func slotStart(i int, n uint64) uint64 {
	if uint64(i) >= n {
		return 0
	}
	// i * 2^64 / n without overflow.
	q, r := ^uint64(0)/n, ^uint64(0)%n+1
	return uint64(i)*q + (uint64(i)*r)/n
}

// SlotOf returns the slot of a hash among n slots (the inverse of the ranges
// shardOf writes).
func SlotOf(h uint64, n int) int {
	lo, hi := 0, n-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if slotStart(mid, uint64(n)) <= h {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// assign returns the owner of each slot among members: rendezvous hashing
// with bounded loads. Pairs (slot, member) are taken by score, highest
// first, and a member takes no more than its fair share: the shares differ
// by at most one slot (plain
// rendezvous hashing leaves one member of four with 28% of 64 slots), and a
// join or leave still moves about 1/N of them, nearly all to or from the
// member that came or went. Every member computes the same from the same
// members.
func assign(slots int, members []string) []string {
	owners := make([]string, slots)
	if len(members) == 0 {
		return owners
	}
	type pair struct {
		slot, member int
		score        uint64
	}
	pairs := make([]pair, 0, slots*len(members))
	for s := range slots {
		for i, mb := range members {
			pairs = append(pairs, pair{s, i, score(s, mb)})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		switch {
		case a.score != b.score:
			return cmpDesc(a.score, b.score)
		case a.slot != b.slot:
			return a.slot - b.slot
		}
		return a.member - b.member
	})
	// Each member takes slots/N, and the first slots%N members to want one
	// more take one more.
	fair, extra := slots/len(members), slots%len(members)
	load := make([]int, len(members))
	for _, p := range pairs {
		if owners[p.slot] != "" {
			continue
		}
		switch {
		case load[p.member] < fair:
		case load[p.member] == fair && extra > 0:
			extra--
		default:
			continue
		}
		owners[p.slot] = members[p.member]
		load[p.member]++
	}
	return owners
}

func cmpDesc(a, b uint64) int {
	if a > b {
		return -1
	}
	return 1
}

func score(slot int, member string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(slot))
	h.Write(b[:])
	h.Write([]byte(member))
	x := h.Sum64()
	// Finalize: FNV's high bits move little with the last bytes.
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}

func copySet(m map[int]bool) map[int]bool {
	out := make(map[int]bool, len(m))
	for k, v := range m {
		if v {
			out[k] = true
		}
	}
	return out
}

func formatSlots(s map[int]bool) string {
	keys := make([]int, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = strconv.Itoa(k)
	}
	return strings.Join(parts, ",")
}

func parseSlots(v string) map[int]bool {
	out := map[int]bool{}
	for _, p := range strings.Split(v, ",") {
		if n, err := strconv.Atoi(p); err == nil {
			out[n] = true
		}
	}
	return out
}
