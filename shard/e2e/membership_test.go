//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/internal/netcut"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/shard"
)

const (
	slots         = 32
	leaseDuration = 3 * time.Second
	renewPeriod   = 500 * time.Millisecond
	renewDeadline = 2 * time.Second
)

// ledger records, outside the members, who works on which slot: a slot is a
// member's from its Grant until its Revoke returns (or the member dies).
type ledger struct {
	mu      sync.Mutex
	by      [slots]map[string]bool
	doubles []string
}

func (l *ledger) set(id string, sh reflector.Shard) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range slots {
		if l.by[s] == nil {
			l.by[s] = map[string]bool{}
		}
		if sh.ContainsHash(start(s)) {
			l.by[s][id] = true
			if len(l.by[s]) > 1 {
				l.doubles = append(l.doubles, fmt.Sprintf("slot %d: %v", s, l.by[s]))
			}
		} else {
			delete(l.by[s], id)
		}
	}
}

// owned returns how many slots have exactly one member.
func (l *ledger) owned() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for s := range slots {
		if len(l.by[s]) == 1 {
			n++
		}
	}
	return n
}

// start is a hash in slot s: its first.
func start(s int) uint64 {
	for h, step := uint64(0), ^uint64(0)/slots; ; h += step / 2 {
		if shard.SlotOf(h, slots) == s {
			return h
		}
	}
}

type member struct {
	id   string
	m    *shard.Member
	cut  *netcut.Cutter
	dead chan struct{} // closed when the member "dies": it stops working at once
	stop context.CancelFunc
	done chan error
}

func startMember(t *testing.T, ns, id string, l *ledger) *member {
	t.Helper()
	mb := &member{id: id, cut: netcut.New(), dead: make(chan struct{}), done: make(chan error, 1)}
	record := func(sh reflector.Shard) {
		select {
		case <-mb.dead: // a dead process does nothing
		default:
			l.set(id, sh)
		}
	}
	m, err := shard.New(shard.Config{
		Client:    kubernetes.NewForConfigOrDie(mb.cut.Wrap(env.Config())),
		Namespace: ns, Group: "workers", Identity: id, Field: reflector.ShardByUID, Slots: slots,
		LeaseDuration: leaseDuration, RenewPeriod: renewPeriod, RenewDeadline: renewDeadline,
		Revoke: func(_ context.Context, keep reflector.Shard) error { record(keep); return nil },
		Grant:  record,
	})
	if err != nil {
		t.Fatal(err)
	}
	mb.m = m
	ctx, cancel := context.WithCancel(context.Background())
	mb.stop = cancel
	go func() { mb.done <- m.Run(ctx) }()
	return mb
}

// TestMembershipChanges: members of a group join, leave, die (they stop at
// once and their Leases stay until they expire) and are cut off from the
// server (they give their slots up before their Leases expire), 20 times, in
// a seeded order. A ledger kept outside the members shows no slot worked on
// by two members at once, ever, and every slot owned again within the lease
// duration + 2 s of each change.
func TestMembershipChanges(t *testing.T) {
	ns := env.Namespace(t)
	l := &ledger{}
	rnd := rand.New(rand.NewPCG(3, 3))
	var live []*member
	next := 0
	add := func() {
		next++
		live = append(live, startMember(t, ns, fmt.Sprintf("m-%d", next), l))
	}
	remove := func(i int) *member {
		mb := live[i]
		live = append(live[:i:i], live[i+1:]...)
		return mb
	}
	defer func() {
		for _, mb := range live {
			mb.stop()
			<-mb.done
		}
	}()
	add()
	add()
	// settle waits until every slot is owned and every member sees the same
	// members, and returns how long that took.
	settle := func(what string) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			agreed := true
			for _, mb := range live {
				if st := mb.m.Status(); len(st.Members) != len(live) {
					agreed = false
				}
			}
			if agreed && l.owned() == slots {
				return time.Since(start)
			}
			if time.Since(start) > leaseDuration+2*time.Second {
				t.Fatalf("%s: %d of %d slots owned, members agree: %v, after %v", what, l.owned(), slots, agreed, time.Since(start))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	settle("start")
	var worst time.Duration
	kinds := map[string]int{}
	for change := range 20 {
		kind := []string{"join", "leave", "die", "cut"}[rnd.IntN(4)]
		switch {
		case len(live) <= 1:
			kind = "join"
		case len(live) >= 5:
			kind = []string{"leave", "die", "cut"}[rnd.IntN(3)]
		}
		kinds[kind]++
		switch kind {
		case "join":
			add()
		case "leave":
			mb := remove(rnd.IntN(len(live)))
			mb.stop()
			if err := <-mb.done; err != nil {
				t.Fatalf("change %d: leave: %v", change, err)
			}
		case "die":
			mb := remove(rnd.IntN(len(live)))
			close(mb.dead)
			l.set(mb.id, reflector.Shard{Field: reflector.ShardByUID}) // its work stops with it
			mb.cut.Cut()                                               // and so does its renewal
			mb.stop()
			<-mb.done
		case "cut":
			mb := remove(rnd.IntN(len(live)))
			mb.cut.Cut()
			// It gives its slots up on its own, before its Lease expires.
			deadline := time.Now().Add(leaseDuration)
			for mb.m.Status().Slots > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("change %d: a cut-off member still holds %d slots after the lease duration", change, mb.m.Status().Slots)
				}
				time.Sleep(20 * time.Millisecond)
			}
			mb.stop()
			<-mb.done
		}
		d := settle(fmt.Sprintf("change %d (%s)", change, kind))
		worst = max(worst, d)
		if len(l.doubles) > 0 {
			t.Fatalf("change %d (%s): slots worked on by two members: %v", change, kind, l.doubles)
		}
	}
	t.Logf("20 membership changes %v: 0 slots worked on by two members; every slot owned again within %v of a change (bound %v)", kinds, worst.Round(time.Millisecond), leaseDuration+2*time.Second)
}
