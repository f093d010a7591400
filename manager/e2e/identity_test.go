//go:build e2e

package e2e

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/indexer"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reflector"
)

func dropData(cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	cm.Data = nil
	return cm, nil
}

// TestInformerIdentity: the same resource, type, namespace, selectors and
// Transform give the same informer; any difference gives another; indexes asked
// by a second user are added to the shared informer; a namespace on a
// cluster-scoped resource and an unknown kind are clear errors.
func TestInformerIdentity(t *testing.T) {
	ns := env.Namespace(t)
	m, err := manager.New(manager.Config{RESTConfig: env.Config()})
	if err != nil {
		t.Fatal(err)
	}
	typed := func(o manager.Options[*corev1.ConfigMap]) any {
		t.Helper()
		inf, err := manager.Typed[*corev1.ConfigMap](m, o)
		if err != nil {
			t.Fatal(err)
		}
		return inf
	}
	base := typed(manager.Options[*corev1.ConfigMap]{Namespace: ns})
	if typed(manager.Options[*corev1.ConfigMap]{Namespace: ns}) != base {
		t.Error("the same options gave two informers")
	}
	byName := indexer.Indexers[*corev1.ConfigMap]{"byName": func(cm *corev1.ConfigMap) ([]string, error) { return []string{cm.Name}, nil }}
	if typed(manager.Options[*corev1.ConfigMap]{Namespace: ns, Indexers: byName}) != base {
		t.Error("asking for an index made another informer")
	}
	for name, o := range map[string]manager.Options[*corev1.ConfigMap]{
		"all namespaces":       {},
		"label selector":       {Namespace: ns, LabelSelector: "a=b"},
		"field selector":       {Namespace: ns, FieldSelector: "metadata.name=x"},
		"transform":            {Namespace: ns, Transform: reflector.StripManagedFields[*corev1.ConfigMap]},
		"another transform":    {Namespace: ns, Transform: dropData},
		"another namespace":    {Namespace: ns + "-other"},
		"labels and transform": {Namespace: ns, LabelSelector: "a=b", Transform: dropData},
	} {
		if typed(o) == base {
			t.Errorf("%s: shared with the plain informer", name)
		}
	}
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	dyn, err := manager.Dynamic(m, gvk, manager.Options[*unstructured.Unstructured]{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	meta, err := manager.Metadata(m, gvk, manager.Options[*metav1.PartialObjectMetadata]{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if any(dyn) == base || any(meta) == base {
		t.Error("dynamic or metadata informer shared with the typed one")
	}
	// 1 plain + 7 variants + dynamic + metadata.
	st := m.Informers()
	if len(st) != 10 {
		t.Errorf("manager holds %d informers, want 10", len(st))
	}
	if st[0].Users != 3 {
		t.Errorf("the plain informer has %d users, want 3", st[0].Users)
	}
	names := map[string]bool{}
	for _, s := range st {
		if names[s.Name] && s.Name != st[0].Name {
			t.Errorf("two informers are named %q", s.Name)
		}
		names[s.Name] = true
	}
	if idx := base.(interface {
		Indexer() *indexer.Indexer[*corev1.ConfigMap]
	}).Indexer().IndexNames(); !contains(idx, "byName") {
		t.Errorf("indexes of the shared informer: %v, want byName added", idx)
	}

	if _, err := manager.Typed[*corev1.Namespace](m, manager.Options[*corev1.Namespace]{Namespace: ns}); err == nil {
		t.Error("a namespace on a cluster-scoped resource was accepted")
	}
	if _, err := manager.Dynamic(m, schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Nothing"}, manager.Options[*unstructured.Unstructured]{}); err == nil {
		t.Error("an unknown kind was accepted")
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
