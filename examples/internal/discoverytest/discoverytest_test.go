package discoverytest

import (
	"testing"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leakcheck.Options()...) }

// TestServe: a manager finds the served resources, with their scope, and no other.
func TestServe(t *testing.T) {
	widget := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	cfg := Serve(t,
		Resource{GVK: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, Plural: "pods", Namespaced: true},
		Resource{GVK: widget, Plural: "widgets"},
	)
	m, err := manager.New(manager.Config{RESTConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	mapping, err := m.RESTMapper().RESTMapping(widget.GroupKind(), widget.Version)
	if err != nil {
		t.Fatal(err)
	}
	if mapping.Resource.Resource != "widgets" || mapping.Scope.Name() != meta.RESTScopeNameRoot {
		t.Errorf("Widget maps to %v, scope %s; want widgets, cluster-scoped", mapping.Resource, mapping.Scope.Name())
	}
	if _, err := manager.Typed[*corev1.Pod](m, manager.Options[*corev1.Pod]{Namespace: "ns"}); err != nil {
		t.Errorf("Typed Pods: %v", err)
	}
	if _, err := manager.Typed[*corev1.ConfigMap](m, manager.Options[*corev1.ConfigMap]{}); !meta.IsNoMatchError(err) {
		t.Errorf("Typed ConfigMaps = %v, want a no-match error (not served)", err)
	}
}
