package manager

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// TestShardingRules: what the manager refuses of sharding, each with an error
// that says why, and the shard a sharded informer starts with (the empty one:
// nothing until the member holds slots; by controller name for children).
func TestShardingRules(t *testing.T) {
	gv := schema.GroupVersion{Group: "example.com", Version: "v1"}
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{gv})
	mapper.Add(gv.WithKind("Widget"), meta.RESTScopeNamespace)
	mapper.Add(gv.WithKind("Cluster"), meta.RESTScopeRoot)
	sharding := func(field string) *Sharding {
		return &Sharding{Namespace: "ns", Group: "g", Identity: "a", Field: field}
	}
	if _, err := New(Config{RESTConfig: newTestManager(t, Config{}).rest, Sharding: sharding(""), LeaderElection: &reconcile.LeaderElection{}}); err == nil || !strings.Contains(err.Error(), "exclude") {
		t.Errorf("Sharding with LeaderElection: %v", err)
	}
	if _, err := New(Config{RESTConfig: newTestManager(t, Config{}).rest, Sharding: &Sharding{Group: "g", Identity: "a"}}); err == nil || !strings.Contains(err.Error(), "Namespace") {
		t.Errorf("Sharding without a namespace: %v", err)
	}
	opts := func(rule ShardRule) Options[*unstructured.Unstructured] {
		return Options[*unstructured.Unstructured]{Shard: rule}
	}
	plain := newTestManager(t, Config{RESTMapper: mapper})
	if _, err := Dynamic(plain, gv.WithKind("Widget"), opts(ShardByObject)); err == nil || !strings.Contains(err.Error(), "without Config.Sharding") {
		t.Errorf("a sharded informer without Sharding: %v", err)
	}
	if err := AddSharded(plain, reconcile.New(reconcile.Func[types.NamespacedName](nil), reconcile.Config[types.NamespacedName]{Restrictable: true}), func(reflector.Shard, types.NamespacedName) bool { return true }); err == nil {
		t.Error("AddSharded without Sharding succeeded")
	}
	byNS := newTestManager(t, Config{RESTMapper: mapper, Sharding: sharding(reflector.ShardByNamespace)})
	if _, err := Dynamic(byNS, gv.WithKind("Cluster"), opts(ShardByObject)); err == nil || !strings.Contains(err.Error(), "cluster-scoped") {
		t.Errorf("a cluster-scoped informer sharded by namespace: %v", err)
	}
	if _, err := Dynamic(byNS, gv.WithKind("Widget"), opts(ShardRule(7))); err == nil || !strings.Contains(err.Error(), "unknown rule") {
		t.Errorf("an unknown rule: %v", err)
	}
	if _, err := New(Config{RESTConfig: newTestManager(t, Config{}).rest, Sharding: sharding(reflector.ShardByUID)}); err == nil || !strings.Contains(err.Error(), "re-created") {
		t.Errorf("Sharding by UID: %v", err)
	}
	byName := newTestManager(t, Config{RESTMapper: mapper, Sharding: sharding("")})
	owners, err := Dynamic(byName, gv.WithKind("Widget"), opts(ShardByObject))
	if err != nil {
		t.Fatal(err)
	}
	kids, err := Dynamic(byName, gv.WithKind("Widget"), opts(ShardByController))
	if err != nil {
		t.Fatal(err)
	}
	whole, err := Dynamic(byName, gv.WithKind("Widget"), opts(Whole))
	if err != nil {
		t.Fatal(err)
	}
	if owners == kids || owners == whole {
		t.Fatal("informers of different shard rules are shared")
	}
	if sh := owners.Shard(); sh.Field != reflector.ShardByName || len(sh.Ranges) != 0 {
		t.Errorf("a sharded informer starts with %+v, want the empty shard by name", sh)
	}
	if sh := kids.Shard(); sh.Field != reflector.ShardByControllerName || len(sh.Ranges) != 0 {
		t.Errorf("a ShardByController informer starts with %+v, want the empty shard by controller name", sh)
	}
	if !whole.Shard().IsZero() {
		t.Errorf("a Whole informer has shard %+v", whole.Shard())
	}
	// A grant re-scopes the sharded informers, each by its rule, and lets a
	// sharded controller's keys in; a revoke narrows them again.
	ctl := reconcile.New(reconcile.Func[types.NamespacedName](nil), reconcile.Config[types.NamespacedName]{Restrictable: true})
	if err := AddSharded(byName, ctl, OwnsKey); err != nil {
		t.Fatal(err)
	}
	if err := AddSharded(byName, reconcile.New(reconcile.Func[types.NamespacedName](nil), reconcile.Config[types.NamespacedName]{}), func(reflector.Shard, types.NamespacedName) bool { return true }); err == nil || !strings.Contains(err.Error(), "Restrictable") {
		t.Errorf("AddSharded of a controller without Restrictable: %v", err)
	}
	half := reflector.SplitShards(reflector.ShardByName, 2)[0]
	byName.sharder.grant(half) // the informers at once
	if sh := kids.Shard(); sh.Field != reflector.ShardByControllerName || len(sh.Ranges) != 1 || sh.Ranges[0] != half.Ranges[0] {
		t.Errorf("after a grant the children hold %+v", sh)
	}
	if sh := owners.Shard(); sh.Field != reflector.ShardByName || len(sh.Ranges) != 1 || sh.Ranges[0] != half.Ranges[0] {
		t.Errorf("after a grant the owners hold %+v", sh)
	}
	if err := byName.sharder.revoke(t.Context(), reflector.Shard{Field: reflector.ShardByName}); err != nil {
		t.Fatal(err)
	}
	if sh := owners.Shard(); len(sh.Ranges) != 1 {
		t.Errorf("the owners were re-scoped at once on a revoke: %+v (the re-scope waits for the hand-offs to pause)", sh)
	}
	byName.sharder.applyRescope()
	byName.sharder.stop()
	if sh := owners.Shard(); len(sh.Ranges) != 0 {
		t.Errorf("after revoking everything the owners hold %+v", sh)
	}
}

// fakeInformer is a shardable whose lists complete when the test says.
type fakeInformer struct {
	mu     sync.Mutex
	shard  reflector.Shard
	listed reflector.Shard
	wake   chan struct{}
}

func newFakeInformer() *fakeInformer {
	return &fakeInformer{shard: reflector.Shard{Field: reflector.ShardByName}, listed: reflector.Shard{Field: reflector.ShardByName}, wake: make(chan struct{})}
}

func (f *fakeInformer) SetShard(s reflector.Shard) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shard = s
	return nil
}

func (f *fakeInformer) Shard() reflector.Shard {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.shard
}

// list completes a list of the shard set last.
func (f *fakeInformer) list() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listed = f.shard
	close(f.wake)
	f.wake = make(chan struct{})
}

func (f *fakeInformer) WaitForShard(ctx context.Context, s reflector.Shard) error {
	for {
		f.mu.Lock()
		ok, wake := f.listed.Covers(s), f.wake
		f.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TestShardGrantWaitsForTheInformers: a granted slot's keys reach the
// controllers only once every sharded informer has listed it (before, a key
// missing from a cache still listing would pass for a deleted object); a
// revoke narrows the controllers at once and cancels a widening still
// waiting, so that a slot given up is never let in by it.
func TestShardGrantWaitsForTheInformers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		empty := reflector.Shard{Field: reflector.ShardByName}
		s := &sharder{cfg: Sharding{Field: reflector.ShardByName}, held: empty, ctlShard: empty, settle: time.Second}
		infs := []*fakeInformer{newFakeInformer(), newFakeInformer()}
		for i, inf := range infs {
			s.addInformer(fmt.Sprint(i), ShardByObject, inf, empty)
		}
		var mu sync.Mutex
		var ctl reflector.Shard // what the controller may reconcile
		s.controllers = []shardedController{{name: "c", restrict: func(_ context.Context, sh reflector.Shard) error {
			mu.Lock()
			defer mu.Unlock()
			ctl = sh
			return nil
		}}}
		allowed := func() reflector.Shard {
			mu.Lock()
			defer mu.Unlock()
			return ctl
		}
		halves := reflector.SplitShards(reflector.ShardByName, 2)
		s.grant(halves[0])
		for _, inf := range infs {
			if !inf.Shard().Covers(halves[0]) {
				t.Fatalf("an informer holds %v after the grant", inf.Shard())
			}
		}
		infs[0].list()
		synctest.Wait()
		if len(allowed().Ranges) != 0 {
			t.Fatalf("the controller reconciles %v before every informer listed it", allowed())
		}
		infs[1].list()
		synctest.Wait()
		if !allowed().Covers(halves[0]) {
			t.Fatalf("the controller reconciles %v after the informers listed %v", allowed(), halves[0])
		}
		// Granted the second half too, then revoked the first before the
		// informers list: the controller keeps nothing of the first and gets
		// the second only once it is listed.
		whole := reflector.SplitShards(reflector.ShardByName, 1)[0]
		s.grant(whole)
		if err := s.revoke(t.Context(), halves[1]); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if len(allowed().Ranges) != 0 {
			t.Fatalf("after revoking the first half, the controller reconciles %v (the second is not listed yet)", allowed())
		}
		for _, inf := range infs {
			inf.list()
		}
		synctest.Wait()
		if got := allowed(); !got.Covers(halves[1]) || got.Covers(halves[0]) {
			t.Fatalf("the controller reconciles %v, want the second half only", got)
		}
		s.stop()
	})
}

// TestIntersect: intersect of slot ranges, 2^64 written 0.
func TestIntersect(t *testing.T) {
	q := uint64(1) << 62
	a := reflector.Shard{Field: reflector.ShardByName, Ranges: []reflector.Range{{Start: 0, End: 2 * q}, {Start: 3 * q, End: 0}}}
	b := reflector.Shard{Field: reflector.ShardByName, Ranges: []reflector.Range{{Start: q, End: 0}}}
	got := intersect(a, b)
	want := []reflector.Range{{Start: q, End: 2 * q}, {Start: 3 * q, End: 0}}
	if !slices.Equal(got.Ranges, want) {
		t.Fatalf("intersect = %v, want %v", got.Ranges, want)
	}
	if r := intersect(a, reflector.Shard{Field: reflector.ShardByName}); len(r.Ranges) != 0 {
		t.Fatalf("intersect with the empty shard = %v", r.Ranges)
	}
}
