package manager

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// TestShardingRules: what the manager refuses of sharding, each with an error
// that says why, and the shard a sharded informer starts with (the empty one:
// nothing until the member holds slots; by controller UID for children).
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
	byUID := newTestManager(t, Config{RESTMapper: mapper, Sharding: sharding("")})
	owners, err := Dynamic(byUID, gv.WithKind("Widget"), opts(ShardByObject))
	if err != nil {
		t.Fatal(err)
	}
	kids, err := Dynamic(byUID, gv.WithKind("Widget"), opts(ShardByController))
	if err != nil {
		t.Fatal(err)
	}
	whole, err := Dynamic(byUID, gv.WithKind("Widget"), opts(Whole))
	if err != nil {
		t.Fatal(err)
	}
	if owners == kids || owners == whole {
		t.Fatal("informers of different shard rules are shared")
	}
	if sh := owners.Shard(); sh.Field != reflector.ShardByUID || len(sh.Ranges) != 0 {
		t.Errorf("a sharded informer starts with %+v, want the empty shard by UID", sh)
	}
	if sh := kids.Shard(); sh.Field != reflector.ShardByControllerUID || len(sh.Ranges) != 0 {
		t.Errorf("a ShardByController informer starts with %+v, want the empty shard by controller UID", sh)
	}
	if !whole.Shard().IsZero() {
		t.Errorf("a Whole informer has shard %+v", whole.Shard())
	}
	// A grant re-scopes the sharded informers, each by its rule, and lets a
	// sharded controller's keys in; a revoke narrows them again.
	ctl := reconcile.New(reconcile.Func[types.NamespacedName](nil), reconcile.Config[types.NamespacedName]{Restrictable: true})
	if err := AddSharded(byUID, ctl, func(sh reflector.Shard, k types.NamespacedName) bool { return sh.Contains("", k.Name) }); err != nil {
		t.Fatal(err)
	}
	if err := AddSharded(byUID, reconcile.New(reconcile.Func[types.NamespacedName](nil), reconcile.Config[types.NamespacedName]{}), func(reflector.Shard, types.NamespacedName) bool { return true }); err == nil || !strings.Contains(err.Error(), "Restrictable") {
		t.Errorf("AddSharded of a controller without Restrictable: %v", err)
	}
	half := reflector.SplitShards(reflector.ShardByUID, 2)[0]
	byUID.sharder.grant(half)
	byUID.sharder.applyRescope() // at once, not after the settle delay
	if sh := kids.Shard(); sh.Field != reflector.ShardByControllerUID || len(sh.Ranges) != 1 || sh.Ranges[0] != half.Ranges[0] {
		t.Errorf("after a grant the children hold %+v", sh)
	}
	if sh := owners.Shard(); sh.Field != reflector.ShardByUID || len(sh.Ranges) != 1 || sh.Ranges[0] != half.Ranges[0] {
		t.Errorf("after a grant the owners hold %+v", sh)
	}
	if err := byUID.sharder.revoke(t.Context(), reflector.Shard{Field: reflector.ShardByUID}); err != nil {
		t.Fatal(err)
	}
	if sh := owners.Shard(); len(sh.Ranges) != 1 {
		t.Errorf("the owners were re-scoped at once on a revoke: %+v (the re-scope waits for the hand-offs to pause)", sh)
	}
	byUID.sharder.applyRescope()
	byUID.sharder.stop()
	if sh := owners.Shard(); len(sh.Ranges) != 0 {
		t.Errorf("after revoking everything the owners hold %+v", sh)
	}
}
