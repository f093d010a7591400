package injector

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/examples/internal/discoverytest"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// TestNewShares: two injectors of one namespace, each with its own ConfigMap, share
// the manager's Deployment informer, and each finds through its own index the
// Deployments that opt in, keyed by its own ConfigMap.
func TestNewShares(t *testing.T) {
	m, err := manager.New(manager.Config{RESTConfig: discoverytest.Serve(t,
		discoverytest.Resource{GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Plural: "deployments", Namespaced: true},
		discoverytest.Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Plural: "configmaps", Namespaced: true},
	)})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(m, Options{Namespace: "apps", ConfigName: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(m, Options{Namespace: "apps", ConfigName: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if a.deployments != b.deployments {
		t.Fatal("the two injectors have Deployment informers of their own")
	}
	var got []string
	for _, inf := range m.Informers() {
		got = append(got, fmt.Sprintf("%s: %d users", inf.Name, inf.Users))
	}
	want := []string{
		"deployments.apps in apps: 2 users",
		"configmaps in ctrlkit-system fields metadata.name=a: 1 users",
		"configmaps in ctrlkit-system fields metadata.name=b: 1 users",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("informers (-want +got):\n%s", diff)
	}

	optedIn := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web", Annotations: map[string]string{InjectAnnotation: "true"}}}
	other := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db"}}
	for _, d := range []*appsv1.Deployment{optedIn, other} {
		if err := a.deployments.Indexer().Add(d); err != nil {
			t.Fatal(err)
		}
	}
	web := []types.NamespacedName{{Namespace: "apps", Name: "web"}}
	for _, c := range []*Controller{a, b} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultConfigNamespace, Name: c.cmName}}
		if diff := cmp.Diff(web, c.optedInDeployments(cm)); diff != "" {
			t.Errorf("ConfigMap %s maps to (-want +got):\n%s", c.cmName, diff)
		}
	}
}

// TestNewSharded: with Options.Sharded the Deployment cache holds this replica's
// shard (empty until the group grants it slots) and the ConfigMap cache all of its
// one object; a manager without Config.Sharding refuses, and keeps no informer.
func TestNewSharded(t *testing.T) {
	served := discoverytest.Serve(t,
		discoverytest.Resource{GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Plural: "deployments", Namespaced: true},
		discoverytest.Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Plural: "configmaps", Namespaced: true},
	)
	m, err := manager.New(manager.Config{RESTConfig: served, Sharding: &manager.Sharding{Namespace: "leases", Group: "injectors", Identity: "r0"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(m, Options{Namespace: "apps", Sharded: true})
	if err != nil {
		t.Fatal(err)
	}
	if sh := c.deployments.Shard(); sh.Field != reflector.ShardByName || len(sh.Ranges) != 0 {
		t.Errorf("Deployment cache's shard %+v, want the empty shard by name", sh)
	}
	if sh := c.configMaps.Shard(); !sh.IsZero() {
		t.Errorf("ConfigMap cache's shard %+v, want none", sh)
	}

	unsharded, err := manager.New(manager.Config{RESTConfig: served})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(unsharded, Options{Namespace: "apps", Sharded: true}); err == nil {
		t.Error("New with Sharded on a manager without Config.Sharding: no error")
	}
	if infs := unsharded.Informers(); len(infs) != 0 {
		t.Errorf("the refused New left %d informers in the manager", len(infs))
	}
}
