package shard

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ctrlkit/ctrlkit/reflector"
)

// skew shifts the renewTime and acquireTime that the members it names write
// on their Leases, as those members' wall clocks would: offsets of the nodes,
// and steps of a clock, changed while the test runs.
type skew struct {
	mu     sync.Mutex
	offset map[string]time.Duration // by Lease name
}

func (s *skew) set(lease string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offset[lease] = d
}

func (s *skew) install(client *fake.Clientset) {
	shift := func(action k8stesting.Action) (bool, runtime.Object, error) {
		var obj runtime.Object
		switch a := action.(type) {
		case k8stesting.CreateAction:
			obj = a.GetObject()
		case k8stesting.UpdateAction:
			obj = a.GetObject()
		}
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return false, nil, nil
		}
		s.mu.Lock()
		d := s.offset[l.Name]
		s.mu.Unlock()
		for _, t := range []*metav1.MicroTime{l.Spec.RenewTime, l.Spec.AcquireTime} {
			if t != nil {
				t.Time = t.Add(d)
			}
		}
		return false, nil, nil // on to the fake's store, which keeps the shifted Lease
	}
	client.PrependReactor("create", "leases", shift)
	client.PrependReactor("update", "leases", shift)
}

// runMember runs m until the test ends, and returns Run's result.
func runMember(t *testing.T, m *Member) (stop func() error) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// TestSkewedClocksNeverDoubleHold: members whose wall clocks are a minute
// apart, and then step by two minutes while they run, never hold one slot at
// two members and share the slots as rendezvous hashing says: liveness is
// judged by each member's own monotonic clock, not by the renewTime another
// member wrote.
func TestSkewedClocksNeverDoubleHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset()
		sk := &skew{offset: map[string]time.Duration{"g-b": -time.Minute, "g-c": 30 * time.Second}}
		sk.install(client)
		o := &owners{slots: 16, by: map[int]map[string]bool{}}
		var members []*Member
		for _, id := range []string{"a", "b", "c"} {
			m := newTestMember(t, client, id, o)
			members = append(members, m)
			runMember(t, m)
			time.Sleep(700 * time.Millisecond)
		}
		check := func(when string) {
			t.Helper()
			synctest.Wait()
			if _, d := o.count(); d != 0 {
				t.Fatalf("%s: a slot was held by two members", when)
			}
		}
		for range 20 {
			time.Sleep(500 * time.Millisecond)
			check("with clocks a minute apart")
		}
		// Steps: b's clock jumps two minutes ahead, c's a minute back.
		sk.set("g-b", time.Minute)
		sk.set("g-c", -30*time.Second)
		for range 20 {
			time.Sleep(500 * time.Millisecond)
			check("after the clocks stepped")
		}
		owned, _ := o.count()
		if owned != o.slots {
			t.Fatalf("%d of %d slots owned once settled", owned, o.slots)
		}
		for _, m := range members {
			if st := m.Status(); st.Slots < 5 || st.Slots > 6 {
				t.Errorf("%s holds %d of 16 slots with 3 members live: it counted one of them dead", m.cfg.Identity, st.Slots)
			}
		}
	})
}

// TestForgedLeaseStallsAtMostMaxLeaseDuration: a Lease nobody renews, whose
// renewTime is far in the future and whose duration is a decade, holding
// every slot, keeps a member from those slots for MaxLeaseDuration, not for
// ever.
func TestForgedLeaseStallsAtMostMaxLeaseDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset()
		future := metav1.NewMicroTime(time.Now().Add(100 * 365 * 24 * time.Hour))
		decade := int32(10 * 365 * 24 * 3600)
		forged := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "g-x", Namespace: "ns", Labels: map[string]string{groupLabel: "g"},
				Annotations: map[string]string{holdAnnotation: "0,1,2,3", claimAnnotation: ""}},
			Spec: coordinationv1.LeaseSpec{RenewTime: &future, LeaseDurationSeconds: &decade},
		}
		if _, err := client.CoordinationV1().Leases("ns").Create(t.Context(), forged, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		m, err := New(Config{
			Client: client, Namespace: "ns", Group: "g", Identity: "a", Field: reflector.ShardByName, Slots: 4,
			LeaseDuration: 15 * time.Second, RenewPeriod: 5 * time.Second,
			Revoke: func(context.Context, reflector.Shard) error { return nil },
			Grant:  func(reflector.Shard) {},
		})
		if err != nil {
			t.Fatal(err)
		}
		runMember(t, m)
		time.Sleep(MaxLeaseDuration - 10*time.Second)
		synctest.Wait()
		if st := m.Status(); st.Slots != 0 {
			t.Fatalf("holds %d slots that a live-looking Lease holds", st.Slots)
		}
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if st := m.Status(); st.Slots != 4 {
			t.Fatalf("holds %d of 4 slots %v after the forged Lease went unchanged for MaxLeaseDuration", st.Slots, MaxLeaseDuration)
		}
	})
}

// TestDuplicateIdentityRefused: a second process started with a member's
// identity stops with ErrDuplicateIdentity and takes nothing, while the first
// keeps its slots; a Lease left by a predecessor that crashed is taken once it
// has gone unchanged for its duration.
func TestDuplicateIdentityRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset()
		o := &owners{slots: 4, by: map[int]map[string]bool{}}
		first := newTestMember(t, client, "a", o)
		runMember(t, first)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if st := first.Status(); st.Slots != 4 {
			t.Fatalf("the first holds %d of 4 slots", st.Slots)
		}
		o2 := &owners{slots: 4, by: map[int]map[string]bool{}}
		second := newTestMember(t, client, "a", o2)
		stop := runMember(t, second)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if st := second.Status(); st.Slots != 0 {
			t.Fatalf("the duplicate holds %d slots", st.Slots)
		}
		if err := stop(); !errors.Is(err, ErrDuplicateIdentity) {
			t.Fatalf("the duplicate's Run = %v, want ErrDuplicateIdentity", err)
		}
		if st := first.Status(); st.Slots != 4 || st.Revoked != 0 {
			t.Fatalf("the first holds %d slots, revoked %d, after the duplicate came and went", st.Slots, st.Revoked)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset()
		o := &owners{slots: 4, by: map[int]map[string]bool{}}
		crashed := newTestMember(t, client, "a", o)
		for range 2 {
			if err := crashed.round(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		// crashed never runs again; its successor, of the same identity:
		next := newTestMember(t, client, "a", &owners{slots: 4, by: map[int]map[string]bool{}})
		stop := runMember(t, next)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if st := next.Status(); st.Slots != 0 {
			t.Fatalf("the successor holds %d slots before its predecessor's Lease expired", st.Slots)
		}
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if st := next.Status(); st.Slots != 4 {
			t.Fatalf("the successor holds %d of 4 slots after its predecessor's Lease expired", st.Slots)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestJoinAfterACrash: a member that joins a group while the Lease of a
// member that crashed is still there (unchanged, yet not expired in the
// joiner's eyes, which first saw it just now) assigns the slots as the members
// that saw the crash do: the crashed member is no member until its Lease is
// seen to change, and no slot stays without a holder past a few rounds.
func TestJoinAfterACrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset()
		o := &owners{slots: 16, by: map[int]map[string]bool{}}
		crashed := newTestMember(t, client, "c", &owners{slots: 16, by: map[int]map[string]bool{}})
		a := newTestMember(t, client, "a", o)
		runMember(t, a)
		for range 3 { // c takes part, then dies holding its share
			if err := crashed.round(t.Context()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		time.Sleep(5 * time.Second) // a sees c's Lease expire and holds everything
		synctest.Wait()
		if st := a.Status(); st.Slots != 16 {
			t.Fatalf("a holds %d of 16 slots after c's Lease expired", st.Slots)
		}
		b := newTestMember(t, client, "b", o)
		runMember(t, b)
		time.Sleep(2 * time.Second) // four of b's rounds: well within c's Lease duration in b's eyes
		synctest.Wait()
		owned, doubles := o.count()
		sa, sb := a.Status(), b.Status()
		if owned != 16 || doubles != 0 || sa.Slots != 8 || sb.Slots != 8 {
			t.Fatalf("2 s after b joined: %d of 16 slots held (%d doubles), a %d, b %d", owned, doubles, sa.Slots, sb.Slots)
		}
	})
}
