package foo

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The Foo API: group, version, kind and resource (upstream sample-controller's).
const (
	Group    = "samplecontroller.k8s.io"
	Version  = "v1alpha1"
	Kind     = "Foo"
	Resource = "foos"
)

// Identifiers of the Foo API for the clients and mappers that need them.
var (
	GroupVersionKind     = schema.GroupVersionKind{Group: Group, Version: Version, Kind: Kind}
	GroupVersionResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}
	// GroupKind is the kind found in the owner references of Foos' Deployments.
	GroupKind = schema.GroupKind{Group: Group, Kind: Kind}
)

// Foo asks for a Deployment named Spec.DeploymentName running Spec.Replicas
// nginx Pods. It is written by hand and decoded from the server's JSON: there is
// no generated clientset, informer, lister or deepcopy code.
type Foo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FooSpec   `json:"spec"`
	Status FooStatus `json:"status,omitempty"`
}

// FooSpec is the desired state.
type FooSpec struct {
	// DeploymentName names the Deployment, in the Foo's namespace. A Foo without
	// one is ignored.
	DeploymentName string `json:"deploymentName"`
	// Replicas is the Deployment's spec.replicas; nil leaves it to the
	// Deployment's default (1) and never changes it afterwards.
	Replicas *int32 `json:"replicas,omitempty"`
}

// FooStatus is the observed state, written by the controller through the status
// subresource.
type FooStatus struct {
	// AvailableReplicas is the Deployment's status.availableReplicas.
	AvailableReplicas int32 `json:"availableReplicas"`
}

// DeepCopy returns a copy of f that shares no memory with it.
func (f *Foo) DeepCopy() *Foo {
	if f == nil {
		return nil
	}
	out := *f
	f.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if f.Spec.Replicas != nil {
		r := *f.Spec.Replicas
		out.Spec.Replicas = &r
	}
	return &out
}

// DeepCopyObject implements runtime.Object.
func (f *Foo) DeepCopyObject() runtime.Object { return f.DeepCopy() }
