package manager

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

func (w *Widget) DeepCopyObject() runtime.Object {
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// TestCustomKindMustBeTheStructName: a kind that is not the struct's name is
// refused before any request, with an error that names both.
func TestCustomKindMustBeTheStructName(t *testing.T) {
	m := newTestManager(t, Config{})
	_, err := Custom[*Widget](m, schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"}, Options[*Widget]{})
	if err == nil || !strings.Contains(err.Error(), "Gadget") || !strings.Contains(err.Error(), "Widget") {
		t.Fatalf("Custom with another kind: %v, want an error naming both", err)
	}
}

// TestStaticRESTMapper: with Config.RESTMapper the informer functions ask the
// server nothing (the server here does not exist), and a kind the mapper does
// not know is a clear error.
func TestStaticRESTMapper(t *testing.T) {
	gv := schema.GroupVersion{Group: "example.com", Version: "v1"}
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{gv})
	mapper.Add(gv.WithKind("Widget"), meta.RESTScopeNamespace)
	m := newTestManager(t, Config{RESTMapper: mapper})
	a, err := Custom[*Widget](m, gv.WithKind("Widget"), Options[*Widget]{Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Custom[*Widget](m, gv.WithKind("Widget"), Options[*Widget]{Namespace: "ns"})
	if err != nil || a != b {
		t.Fatalf("second Custom: %p, %v; want the shared %p", b, err, a)
	}
	if st := m.Informers(); len(st) != 1 || st[0].Name != "widgets.example.com in ns" || st[0].Users != 2 {
		t.Errorf("informers: %+v", st)
	}
	if _, err := Dynamic(m, gv.WithKind("Gadget"), Options[*unstructured.Unstructured]{}); err == nil || !strings.Contains(err.Error(), "Gadget") {
		t.Errorf("unknown kind: %v", err)
	}
}
