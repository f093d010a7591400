package podset

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The PodSet API: group, version, kind and resource.
const (
	Group    = "examples.ctrlkit.dev"
	Version  = "v1alpha1"
	Kind     = "PodSet"
	Resource = "podsets"
)

// GroupVersionResource is the PodSet resource, for the dynamic client.
var GroupVersionResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// GroupVersionKind is the PodSet kind and version, for the manager's informers.
var GroupVersionKind = schema.GroupVersionKind{Group: Group, Version: Version, Kind: Kind}

// GroupKind is the PodSet kind, as found in the owner references of its Pods.
var GroupKind = schema.GroupKind{Group: Group, Kind: Kind}

// PodSet keeps Spec.Replicas Pods made from Spec.Template running: a ReplicaSet
// under another name. There is no generated code: the controller's informer
// decodes PodSets from the server's JSON (manager.Custom), which leaves TypeMeta
// empty; the dynamic client writes, and FromUnstructured and ToUnstructured convert
// for it.
type PodSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodSetSpec   `json:"spec"`
	Status PodSetStatus `json:"status,omitempty"`
}

// DeepCopy returns a copy of ps that shares nothing with it.
func (ps *PodSet) DeepCopy() *PodSet {
	if ps == nil {
		return nil
	}
	out := &PodSet{TypeMeta: ps.TypeMeta, Status: ps.Status} // Status holds values only
	ps.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if ps.Spec.Replicas != nil {
		out.Spec.Replicas = new(*ps.Spec.Replicas)
	}
	out.Spec.Selector = ps.Spec.Selector.DeepCopy()
	ps.Spec.Template.DeepCopyInto(&out.Spec.Template)
	return out
}

// DeepCopyObject implements runtime.Object, so that the manager's informers can
// hold PodSets (manager.Custom).
func (ps *PodSet) DeepCopyObject() runtime.Object { return ps.DeepCopy() }

// PodSetSpec is the desired state.
type PodSetSpec struct {
	// Replicas is the number of Pods wanted. Nil means 1 (the CRD defaults it).
	Replicas *int32 `json:"replicas,omitempty"`
	// Selector selects the Pods the PodSet owns. It must not be empty and must
	// match Template's labels.
	Selector *metav1.LabelSelector `json:"selector"`
	// Template is what new Pods are made of.
	Template corev1.PodTemplateSpec `json:"template"`
}

// PodSetStatus is the observed state, written by the controller through the status
// subresource.
type PodSetStatus struct {
	// Replicas is the number of active Pods the PodSet owned when last reconciled.
	Replicas int32 `json:"replicas"`
	// ReadyReplicas is how many of them were Ready.
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// ObservedGeneration is the metadata.generation the status describes.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Selector is Spec.Selector as a string, for the scale subresource.
	Selector string `json:"selector,omitempty"`
}

// ErrInvalid is wrapped by the errors about a PodSet whose spec cannot be acted on.
var ErrInvalid = errors.New("podset: invalid PodSet")

// FromUnstructured converts what the dynamic client returns into a PodSet.
func FromUnstructured(u *unstructured.Unstructured) (*PodSet, error) {
	ps := new(PodSet)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ps); err != nil {
		return nil, fmt.Errorf("%w %s/%s: %w", ErrInvalid, u.GetNamespace(), u.GetName(), err)
	}
	return ps, nil
}

// ToUnstructured converts a PodSet for the dynamic client, setting its apiVersion and
// kind.
func (ps *PodSet) ToUnstructured() (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ps)
	if err != nil {
		return nil, fmt.Errorf("podset: %w", err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(Group + "/" + Version)
	u.SetKind(Kind)
	return u, nil
}

// replicas returns the wanted number of Pods.
func (ps *PodSet) replicas() int {
	if ps.Spec.Replicas == nil {
		return 1
	}
	return int(*ps.Spec.Replicas)
}

// selector parses and checks the spec's selector: it must select something, and
// the template's Pods, or the controller would create Pods it does not own.
func (ps *PodSet) selector() (labels.Selector, error) {
	if ps.Spec.Selector == nil || len(ps.Spec.Selector.MatchLabels)+len(ps.Spec.Selector.MatchExpressions) == 0 {
		return nil, fmt.Errorf("%w %s/%s: empty selector", ErrInvalid, ps.Namespace, ps.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(ps.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("%w %s/%s: selector: %w", ErrInvalid, ps.Namespace, ps.Name, err)
	}
	if !sel.Matches(labels.Set(ps.Spec.Template.Labels)) {
		return nil, fmt.Errorf("%w %s/%s: selector %q does not match the template's labels %v", ErrInvalid, ps.Namespace, ps.Name, sel, ps.Spec.Template.Labels)
	}
	if ps.replicas() < 0 {
		return nil, fmt.Errorf("%w %s/%s: negative replicas %d", ErrInvalid, ps.Namespace, ps.Name, ps.replicas())
	}
	return sel, nil
}
