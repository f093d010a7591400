package manager

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
