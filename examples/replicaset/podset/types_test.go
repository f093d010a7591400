package podset

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func validPodSet() *PodSet {
	return &PodSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: PodSetSpec{
			Replicas: new(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", "tier": "front"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
			},
		},
	}
}

func TestRoundTrip(t *testing.T) {
	ps := validPodSet()
	u, err := ps.ToUnstructured()
	if err != nil {
		t.Fatal(err)
	}
	if u.GetAPIVersion() != "examples.ctrlkit.dev/v1alpha1" || u.GetKind() != "PodSet" {
		t.Errorf("apiVersion, kind = %s, %s", u.GetAPIVersion(), u.GetKind())
	}
	if r, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); r != 3 {
		t.Errorf("spec.replicas = %d, want 3", r)
	}
	back, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	back.TypeMeta = metav1.TypeMeta{}
	if diff := cmp.Diff(ps, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestFromUnstructuredInvalid(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": "ns", "name": "bad"},
		"spec":     map[string]any{"replicas": "three"},
	}}
	if _, err := FromUnstructured(u); !errors.Is(err, ErrInvalid) {
		t.Errorf("FromUnstructured(replicas: \"three\") = %v, want ErrInvalid", err)
	}
}

func TestSelector(t *testing.T) {
	if sel, err := validPodSet().selector(); err != nil || sel.String() != "app=web" {
		t.Fatalf("valid PodSet: selector %v, %v", sel, err)
	}
	if n := (&PodSet{}).replicas(); n != 1 {
		t.Errorf("replicas of a nil spec.replicas = %d, want 1", n)
	}
	for name, change := range map[string]func(*PodSet){
		"nil selector":      func(ps *PodSet) { ps.Spec.Selector = nil },
		"empty selector":    func(ps *PodSet) { ps.Spec.Selector = &metav1.LabelSelector{} },
		"template mismatch": func(ps *PodSet) { ps.Spec.Template.Labels = map[string]string{"app": "other"} },
		"bad operator": func(ps *PodSet) {
			ps.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}
		},
		"negative replicas": func(ps *PodSet) { ps.Spec.Replicas = new(int32(-1)) },
	} {
		ps := validPodSet()
		change(ps)
		if _, err := ps.selector(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestCRDMatchesTypes: a PodSet converted for the API server only uses fields that
// the CRD's schema declares (the template is kept whole), so none would be pruned.
func TestCRDMatchesTypes(t *testing.T) {
	ps := validPodSet()
	ps.Status = PodSetStatus{Replicas: 1, ReadyReplicas: 1, ObservedGeneration: 2, Selector: "app=web"}
	u, err := ps.ToUnstructured()
	if err != nil {
		t.Fatal(err)
	}
	schema := CRD().Spec.Versions[0].Schema.OpenAPIV3Schema
	for _, part := range []string{"spec", "status"} {
		props := schema.Properties[part].Properties
		fields, _, _ := unstructured.NestedMap(u.Object, part)
		for f := range fields {
			if _, ok := props[f]; !ok {
				t.Errorf("%s.%s is not in the CRD's schema", part, f)
			}
		}
	}
	if got := CRD().Name; got != "podsets.examples.ctrlkit.dev" {
		t.Errorf("CRD name %q", got)
	}
}

// TestDeepCopy: the copy of a cached PodSet shares nothing with it (maps, slices,
// pointers, the selector, the template), so that changing a copy never changes
// the informer's cache.
func TestDeepCopy(t *testing.T) {
	build := func() *PodSet {
		ps := validPodSet()
		ps.TypeMeta = metav1.TypeMeta{APIVersion: Group + "/" + Version, Kind: Kind}
		ps.Labels = map[string]string{"k": "v"}
		ps.Finalizers = []string{"f"}
		ps.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"front"}}}
		ps.Status = PodSetStatus{Replicas: 2, ReadyReplicas: 1, ObservedGeneration: 4, Selector: "app=web"}
		return ps
	}
	ps, want := build(), build() // want is built apart: it shares nothing with ps
	if diff := cmp.Diff(want, ps.DeepCopyObject()); diff != "" {
		t.Fatalf("DeepCopyObject differs (-orig +copy):\n%s", diff)
	}
	c := ps.DeepCopy()
	c.Labels["k"] = "changed"
	c.Finalizers[0] = "changed"
	*c.Spec.Replicas = 7
	c.Spec.Selector.MatchLabels["app"] = "changed"
	c.Spec.Selector.MatchExpressions[0].Values[0] = "changed"
	c.Spec.Template.Labels["tier"] = "changed"
	c.Spec.Template.Spec.Containers[0].Image = "changed"
	c.Status.Replicas = 9
	if diff := cmp.Diff(want, ps); diff != "" {
		t.Errorf("changing the copy changed the original (-before +after):\n%s", diff)
	}
	if (*PodSet)(nil).DeepCopy() != nil {
		t.Error("DeepCopy of nil is not nil")
	}
}

// TestOwnerRefWithoutTypeMeta: the informer leaves a PodSet's TypeMeta empty; the
// owner reference of its Pods still names the PodSet's apiVersion and kind, so
// that the Pods map back to it.
func TestOwnerRefWithoutTypeMeta(t *testing.T) {
	ps := testPodSet("ns", "web", "web")
	ps.TypeMeta = metav1.TypeMeta{}
	ref := ownerRef(ps)
	if ref.APIVersion != "examples.ctrlkit.dev/v1alpha1" || ref.Kind != "PodSet" || ref.Name != "web" || ref.UID != ps.UID {
		t.Errorf("owner reference %+v", ref)
	}
	if key, ok := controllerKey(testPod("ns", "w1", "web", ps)); !ok || key != podSetKey(ps) {
		t.Errorf("controllerKey = %v, %t; want %v", key, ok, podSetKey(ps))
	}
}
