package podset

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/examples/internal/discoverytest"
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
// run by the manager beside the controller, and not shared.
func TestNewWrapPods(t *testing.T) {
	m, err := manager.New(manager.Config{RESTConfig: discoverytest.Serve(t, served...)})
	if err != nil {
		t.Fatal(err)
	}
	wrapped := 0
	if _, err := New(m, Options{Namespace: "ns", WrapPods: func(lw reflector.ListerWatcher[*corev1.Pod]) reflector.ListerWatcher[*corev1.Pod] {
		wrapped++
		return lw
	}}); err != nil {
		t.Fatal(err)
	}
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
