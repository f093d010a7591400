package podset

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/examples/internal/discoverytest"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reflector"
)

var served = []discoverytest.Resource{
	{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, Plural: "pods", Namespaced: true},
	{GVK: GroupVersionKind, Plural: Resource, Namespaced: true},
}

// managerState lists a manager's controllers and informers, with their users.
func managerState(m *manager.Manager) []string {
	var got []string
	for _, c := range m.Controllers() {
		got = append(got, fmt.Sprintf("%s %v", c.Name, c.State))
	}
	for _, inf := range m.Informers() {
		got = append(got, fmt.Sprintf("%s: %d users", inf.Name, inf.Users))
	}
	return got
}

// TestNewShares: New adds the controller to the manager and takes the PodSets and
// the Pods from its shared informers; another user of the Pods of that namespace
// (with the same Transform) gets the same informer, with the controller's index.
func TestNewShares(t *testing.T) {
	m, err := manager.New(manager.Config{RESTConfig: discoverytest.Serve(t, served...)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(m, Options{Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := manager.Typed[*corev1.Pod](m, manager.Options[*corev1.Pod]{Namespace: "ns", Transform: reflector.StripManagedFields[*corev1.Pod]})
	if err != nil {
		t.Fatal(err)
	}
	if pods != c.pods {
		t.Error("the manager made a second Pod informer for the same namespace and Transform")
	}
	if _, err := pods.Indexer().ByIndex(byController, "orphan/ns"); err != nil {
		t.Errorf("the shared Pod informer lacks the controller's index: %v", err)
	}
	checkScopes(t, c)
	want := []string{
		"podset waiting",
		"podsets.examples.ctrlkit.dev in ns: 1 users",
		"pods in ns: 2 users",
	}
	if diff := cmp.Diff(want, managerState(m)); diff != "" {
		t.Errorf("manager (-want +got):\n%s", diff)
	}
}

// TestNewWrapPods: with Options.WrapPods the Pod informer is the controller's own,
// run by the manager beside the controller, and not shared; its scope names the
// Pods of the namespace, as the manager's would, for read-your-writes.
func TestNewWrapPods(t *testing.T) {
	m, err := manager.New(manager.Config{RESTConfig: discoverytest.Serve(t, served...)})
	if err != nil {
		t.Fatal(err)
	}
	wrapped := 0
	c, err := New(m, Options{Namespace: "ns", WrapPods: func(lw reflector.ListerWatcher[*corev1.Pod]) reflector.ListerWatcher[*corev1.Pod] {
		wrapped++
		return lw
	}})
	if err != nil {
		t.Fatal(err)
	}
	checkScopes(t, c)
	if wrapped != 1 {
		t.Errorf("WrapPods called %d times, want 1", wrapped)
	}
	want := []string{
		"pods (podset's own) waiting",
		"podset waiting",
		"podsets.examples.ctrlkit.dev in ns: 1 users",
	}
	if diff := cmp.Diff(want, managerState(m)); diff != "" {
		t.Errorf("manager (-want +got):\n%s", diff)
	}
}

// checkScopes checks that both informers of c name their collection, so that
// read-your-writes matches the controller's writes to them.
func checkScopes(t *testing.T, c *Controller) {
	t.Helper()
	for _, tc := range []struct {
		name      string
		got, want informer.Scope
	}{
		{"Pod", c.pods.Scope(), informer.Scope{Resource: schema.GroupResource{Resource: "pods"}, Namespace: "ns"}},
		{"PodSet", c.podSets.Scope(), informer.Scope{Resource: GroupVersionResource.GroupResource(), Namespace: "ns"}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s informer's scope = %+v, want %+v", tc.name, tc.got, tc.want)
		}
		if !tc.got.Covers(tc.want.Resource, "ns") {
			t.Errorf("%s informer's scope does not cover a write of %v in ns", tc.name, tc.want.Resource)
		}
	}
}

// TestLoopConfig: read-your-writes is on (the reconcile default) unless
// Options.UnsafeNoReadYourWrites turns it off.
func TestLoopConfig(t *testing.T) {
	if got := loopConfig(Options{}).CacheWaitTimeout; got != 0 {
		t.Errorf("CacheWaitTimeout = %v by default, want 0 (reconcile.DefaultCacheWaitTimeout)", got)
	}
	if got := loopConfig(Options{UnsafeNoReadYourWrites: true}).CacheWaitTimeout; got >= 0 {
		t.Errorf("CacheWaitTimeout = %v with UnsafeNoReadYourWrites, want negative (off)", got)
	}
}

// TestNewErrors: New needs a manager and the PodSet CRD, and a failed New leaves
// no informer behind.
func TestNewErrors(t *testing.T) {
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New(nil manager) succeeded")
	}
	m, err := manager.New(manager.Config{RESTConfig: discoverytest.Serve(t, served[0])})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(m, Options{}); !meta.IsNoMatchError(err) {
		t.Errorf("New without the CRD = %v, want a no-match error", err)
	}
	m, err = manager.New(manager.Config{RESTConfig: discoverytest.Serve(t, served[1])})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(m, Options{}); !meta.IsNoMatchError(err) {
		t.Errorf("New without Pods served = %v, want a no-match error", err)
	}
	if got := managerState(m); len(got) != 0 {
		t.Errorf("a failed New left %v in the manager", got)
	}
}

// TestNewSharded: with Options.Sharded the PodSet cache holds this replica's shard
// by UID and the Pod cache the Pods its PodSets control (both empty until the group
// grants slots), and the loop is restrictable; Sharded excludes WrapPods, and a
// manager without Config.Sharding refuses, keeping no informer.
func TestNewSharded(t *testing.T) {
	rc := discoverytest.Serve(t, served...)
	m, err := manager.New(manager.Config{RESTConfig: rc, Sharding: &manager.Sharding{Namespace: "leases", Group: "podsets", Identity: "r0"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(m, Options{Namespace: "ns", Sharded: true})
	if err != nil {
		t.Fatal(err)
	}
	checkScopes(t, c)
	if sh := c.podSets.Shard(); sh.Field != reflector.ShardByName || len(sh.Ranges) != 0 {
		t.Errorf("PodSet cache's shard %+v, want the empty shard by name", sh)
	}
	if sh := c.pods.Shard(); sh.Field != reflector.ShardByControllerName || len(sh.Ranges) != 0 {
		t.Errorf("Pod cache's shard %+v, want the empty shard by controller name", sh)
	}
	if !loopConfig(Options{Sharded: true}).Restrictable || loopConfig(Options{}).Restrictable {
		t.Error("the loop is restrictable other than exactly with Sharded")
	}
	wrap := func(lw reflector.ListerWatcher[*corev1.Pod]) reflector.ListerWatcher[*corev1.Pod] { return lw }
	if _, err := New(m, Options{Namespace: "other", Sharded: true, WrapPods: wrap}); err == nil {
		t.Error("New with Sharded and WrapPods: no error")
	}

	unsharded, err := manager.New(manager.Config{RESTConfig: rc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(unsharded, Options{Namespace: "ns", Sharded: true}); err == nil {
		t.Error("New with Sharded on a manager without Config.Sharding: no error")
	}
	if got := managerState(unsharded); len(got) != 0 {
		t.Errorf("the refused New left %v in the manager", got)
	}
}
