package shard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/ctrlkit/ctrlkit/reflector"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// owners records, outside the members, which member works on which slot: a
// slot joins a member's set at Grant and leaves it in Revoke, before Revoke
// returns.
type owners struct {
	mu      sync.Mutex
	slots   int
	by      map[int]map[string]bool
	doubles int
}

func (o *owners) set(id string, sh reflector.Shard) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for s := range o.slots {
		in := sh.ContainsHash(slotStart(s, uint64(o.slots)))
		if o.by[s] == nil {
			o.by[s] = map[string]bool{}
		}
		if in {
			o.by[s][id] = true
		} else {
			delete(o.by[s], id)
		}
		if len(o.by[s]) > 1 {
			o.doubles++
		}
	}
}

func (o *owners) count() (owned, doubles int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for s := range o.slots {
		if len(o.by[s]) == 1 {
			owned++
		}
	}
	return owned, o.doubles
}

func newTestMember(t *testing.T, client *fake.Clientset, id string, o *owners) *Member {
	t.Helper()
	m, err := New(Config{
		Client: client, Namespace: "ns", Group: "g", Identity: id, Field: reflector.ShardByUID, Slots: o.slots,
		LeaseDuration: 3 * time.Second, RenewPeriod: 500 * time.Millisecond,
		Revoke: func(_ context.Context, keep reflector.Shard) error { o.set(id, keep); return nil },
		Grant:  func(hold reflector.Shard) { o.set(id, hold) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRoundsNeverDoubleHold: members joining and leaving, their rounds run in
// a seeded random order, never hold one slot at two members, and converge to
// every slot held once, each member holding its rendezvous share.
func TestRoundsNeverDoubleHold(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			ctx := context.Background()
			rnd := rand.New(rand.NewPCG(seed, 1))
			client := fake.NewClientset()
			o := &owners{slots: 16, by: map[int]map[string]bool{}}
			var live []*Member
			next := 0
			join := func() {
				next++
				live = append(live, newTestMember(t, client, fmt.Sprintf("m%d", next), o))
			}
			join()
			join()
			for step := range 100 {
				switch r := rnd.IntN(20); {
				case r == 0 && len(live) < 5:
					join()
				case r == 1 && len(live) > 1:
					i := rnd.IntN(len(live))
					if err := live[i].leave(); err != nil {
						t.Fatal(err)
					}
					live = append(live[:i], live[i+1:]...)
				default:
					// Every member's round at once: their reads and writes
					// interleave.
					var wg sync.WaitGroup
					errs := make([]error, len(live))
					for i, m := range live {
						wg.Go(func() { errs[i] = m.round(ctx) })
					}
					wg.Wait()
					for _, err := range errs {
						if err != nil {
							t.Fatalf("step %d: %v", step, err)
						}
					}
				}
				if _, d := o.count(); d != 0 {
					t.Fatalf("step %d: a slot held by two members", step)
				}
			}
			// Settle: a few rounds each, in turn.
			for range 4 {
				for _, m := range live {
					if err := m.round(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			owned, doubles := o.count()
			if owned != o.slots || doubles != 0 {
				t.Fatalf("after settling: %d of %d slots owned, %d doubles", owned, o.slots, doubles)
			}
			var ids []string
			for _, m := range live {
				ids = append(ids, m.cfg.Identity)
			}
			for _, m := range live {
				st := m.Status()
				if st.Granted-st.Revoked != int64(st.Slots) || st.Granted < int64(st.Slots) {
					t.Fatalf("%s holds %d slots, yet counts %d granted and %d revoked", m.cfg.Identity, st.Slots, st.Granted, st.Revoked)
				}
				for s := range o.slots {
					want := assign(o.slots, slices.Sorted(slices.Values(ids)))[s] == m.cfg.Identity
					if got := st.Held.ContainsHash(slotStart(s, uint64(o.slots))); got != want {
						t.Fatalf("%s holds slot %d: %v, rendezvous says %v", m.cfg.Identity, s, got, want)
					}
				}
			}
		})
	}
}

// TestRendezvousMovesAboutOneNth: the shares differ by at most one slot, and
// a member joining N takes its share, moving few other slots: at most 1/8
// of the slots move between the members that stay (as N grows from 1 to 7,
// for 64 and 1,024 slots).
func TestRendezvousMovesAboutOneNth(t *testing.T) {
	for _, slots := range []int{64, 1024} {
		members := []string{"member-a"}
		before := assign(slots, members)
		for n := 2; n <= 8; n++ {
			joined := fmt.Sprintf("member-%c", 'a'+n-1)
			members = append(members, joined)
			after := assign(slots, slices.Sorted(slices.Values(members)))
			load := map[string]int{}
			toNew, between := 0, 0
			for s := range slots {
				load[after[s]]++
				switch {
				case after[s] == joined:
					toNew++
				case after[s] != before[s]:
					between++
				}
			}
			for mb, l := range load {
				if l < slots/n || l > (slots+n-1)/n {
					t.Fatalf("%d slots, %d members: %s holds %d, want %d or %d", slots, n, mb, l, slots/n, (slots+n-1)/n)
				}
			}
			if len(load) != n {
				t.Fatalf("%d slots, %d members: only %d hold slots", slots, n, len(load))
			}
			if between > slots/8 {
				t.Fatalf("%d slots, %d → %d members: %d slots moved between the members that stayed", slots, n-1, n, between)
			}
			t.Logf("%d slots, %d → %d members: %d to the new member, %d between the others", slots, n-1, n, toNew, between)
			before = after
		}
	}
}

// TestSlotRanges: the ranges of the slots cover the hash space without gaps,
// and SlotOf inverts them.
func TestSlotRanges(t *testing.T) {
	for _, n := range []int{1, 3, 7, 64, 1000} {
		all := map[int]bool{}
		for s := range n {
			all[s] = true
		}
		m := &Member{cfg: Config{Field: reflector.ShardByUID, Slots: n}}
		if sh := m.shardOf(all); len(sh.Ranges) != 1 || sh.Ranges[0] != (reflector.Range{Start: 0, End: 0}) {
			t.Fatalf("%d slots: all of them make %v, want the whole space", n, sh.Ranges)
		}
		for _, h := range []uint64{0, 1, 1 << 63, ^uint64(0), 12345678901234567890} {
			s := SlotOf(h, n)
			one := m.shardOf(map[int]bool{s: true})
			if !one.ContainsHash(h) {
				t.Fatalf("%d slots: hash %#x in slot %d, whose range %v does not hold it", n, h, s, one.Ranges)
			}
		}
	}
}

// TestCallbackPanics: a Revoke that panics keeps the slots (it is an error,
// retried next round) and a Grant that panics does not stop the member.
func TestCallbackPanics(t *testing.T) {
	client := fake.NewClientset()
	var revokes int
	m, err := New(Config{
		Client: client, Namespace: "ns", Group: "g", Identity: "a", Field: reflector.ShardByUID, Slots: 4,
		LeaseDuration: 3 * time.Second, RenewPeriod: 500 * time.Millisecond,
		Revoke: func(context.Context, reflector.Shard) error { revokes++; panic("revoke") },
		Grant:  func(reflector.Shard) { panic("grant") },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 { // claim, then hold (Grant panics)
		if err := m.round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st := m.Status(); st.Slots != 4 {
		t.Fatalf("after Grant panicked the member holds %d slots, want 4", st.Slots)
	}
	// A second member takes a share: the first must revoke, which panics.
	// (It counts b a member once it has seen b's Lease change.)
	other := newTestMember(t, client, "b", &owners{slots: 4, by: map[int]map[string]bool{}})
	if err := other.round(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.round(ctx); err != nil || revokes != 0 {
		t.Fatalf("round before b is a member: %v (%d revokes)", err, revokes)
	}
	if err := other.round(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.round(ctx); err == nil || revokes != 1 {
		t.Fatalf("round with a panicking Revoke: %v (%d revokes), want its error", err, revokes)
	}
	if st := m.Status(); st.Slots != 4 {
		t.Fatalf("a failed Revoke gave slots up: %d held", st.Slots)
	}
}

// TestDeadlineWhileARoundHangs: a member whose Lease writes time out drops
// every slot once RenewDeadline has passed since its last renewal, well
// before the others can count its Lease expired; a round under way then
// neither holds nor grants what it decided.
func TestDeadlineWhileARoundHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hang atomic.Bool
		release := make(chan struct{})
		client := &hangingLeases{Clientset: fake.NewClientset(), hang: &hang, release: release}
		var mu sync.Mutex
		var revokedAt time.Time
		var held reflector.Shard
		m, err := New(Config{
			Client: client, Namespace: "ns", Group: "g", Identity: "a", Field: reflector.ShardByUID, Slots: 4,
			LeaseDuration: 3 * time.Second, RenewPeriod: 500 * time.Millisecond, RenewDeadline: 2 * time.Second,
			Revoke: func(_ context.Context, keep reflector.Shard) error {
				mu.Lock()
				defer mu.Unlock()
				held, revokedAt = keep, time.Now()
				return nil
			},
			Grant: func(hold reflector.Shard) {
				mu.Lock()
				defer mu.Unlock()
				held = hold
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if st := m.Status(); st.Slots != 4 {
			t.Fatalf("holds %d of 4 slots before the hang", st.Slots)
		}
		hang.Store(true)
		time.Sleep(time.Second) // the next round's write hangs
		m.mu.Lock()
		renewed := m.renewed
		m.mu.Unlock()
		time.Sleep(time.Until(renewed.Add(2*time.Second)) + 10*time.Millisecond)
		synctest.Wait()
		mu.Lock()
		// At RenewDeadline (2 s), within a quarter renew period: not after a
		// failed round happens to look (about 2.5 s here), nor at expiry (3 s).
		if len(held.Ranges) != 0 || revokedAt.IsZero() || revokedAt.After(renewed.Add(2*time.Second+200*time.Millisecond)) {
			t.Errorf("while a round hangs the member still works on %v (revoked at %v, renewed %v)", held.Ranges, revokedAt, renewed)
		}
		mu.Unlock()
		if st := m.Status(); st.Slots != 0 {
			t.Errorf("holds %d slots after the deadline", st.Slots)
		}
		// The hung round returns: it holds and grants nothing it decided.
		close(release)
		hang.Store(false)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		if len(held.Ranges) != 0 {
			t.Errorf("the round that hung granted %v after the deadline dropped everything", held.Ranges)
		}
		mu.Unlock()
		// Renewing again, it takes its slots back through claim and hold.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if st := m.Status(); st.Slots != 4 {
			t.Errorf("holds %d of 4 slots once renewing again", st.Slots)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// hangingLeases is a clientset whose Lease Gets do not answer while hang is
// set (until their context ends or release is closed), outside the fake's
// lock, which its reactors hold.
type hangingLeases struct {
	*fake.Clientset
	hang    *atomic.Bool
	release chan struct{}
}

func (h *hangingLeases) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return hangingCoordination{h.Clientset.CoordinationV1(), h}
}

type hangingCoordination struct {
	coordinationv1client.CoordinationV1Interface
	h *hangingLeases
}

func (c hangingCoordination) Leases(ns string) coordinationv1client.LeaseInterface {
	return hangingLeaseClient{c.CoordinationV1Interface.Leases(ns), c.h}
}

type hangingLeaseClient struct {
	coordinationv1client.LeaseInterface
	h *hangingLeases
}

func (c hangingLeaseClient) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	if c.h.hang.Load() {
		select {
		case <-c.h.release:
		case <-ctx.Done(): // a request that times out, as real ones do
			return nil, ctx.Err()
		}
	}
	return c.LeaseInterface.Get(ctx, name, opts)
}
