package network

import (
	"fmt"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// API names of the Network custom resource.
const (
	Group    = "samplecrd.k8s.io"
	Version  = "v1"
	Kind     = "Network"
	Resource = "networks"
	// CRDName is the name of the CustomResourceDefinition Install creates.
	CRDName = Resource + "." + Group
	// Finalizer is the finalizer the controller puts on every Network it provisions,
	// so that it can delete the backend's network before the object goes away.
	Finalizer = Group + "/network-cleanup"
)

// Condition type and reasons the controller reports in Network.Status.Conditions.
const (
	// ConditionReady is True when the backend has the network as specified.
	ConditionReady = "Ready"
	// ReasonProvisioned: the backend has the network with the object's spec.
	ReasonProvisioned = "Provisioned"
	// ReasonInvalidSpec: the spec was rejected (see the message); the backend was not
	// called for this generation.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonBackendError: the backend failed or could not be reached; the controller
	// retries with backoff.
	ReasonBackendError = "BackendError"
)

// GroupVersionKind is the kind of the Network CRD, for the manager's informers.
var GroupVersionKind = schema.GroupVersionKind{Group: Group, Version: Version, Kind: Kind}

// GroupVersionResource is the resource served for the Network CRD.
var GroupVersionResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// Network is the typed form of the custom resource, without generated code: the
// controller's informer decodes it from the server's JSON (manager.Custom), and its
// writes go through the dynamic client, converted with ToUnstructured and
// FromUnstructured.
type Network struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   Spec   `json:"spec"`
	Status Status `json:"status,omitempty"`
}

// DeepCopy returns a copy of n that shares nothing with it.
func (n *Network) DeepCopy() *Network {
	if n == nil {
		return nil
	}
	out := &Network{TypeMeta: n.TypeMeta, Spec: n.Spec, Status: n.Status}
	n.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if n.Status.Conditions != nil {
		out.Status.Conditions = make([]metav1.Condition, len(n.Status.Conditions))
		for i := range n.Status.Conditions {
			n.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
	return out
}

// DeepCopyObject implements runtime.Object, so that the manager's informers can
// hold Networks (manager.Custom).
func (n *Network) DeepCopyObject() runtime.Object { return n.DeepCopy() }

// Spec is the desired network, as in the seed: a CIDR and a gateway inside it.
type Spec struct {
	// CIDR is the network's prefix, such as "192.168.0.0/16" (IPv4 or IPv6), with no
	// host bits set.
	CIDR string `json:"cidr"`
	// Gateway is an address of the CIDR, such as "192.168.0.1".
	Gateway string `json:"gateway"`
}

// Status is what the controller reports.
type Status struct {
	// Conditions holds the Ready condition.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the metadata.generation the conditions describe.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// FromUnstructured converts an object of the dynamic client into a new Network that
// shares nothing with u. It fails on fields of the wrong type.
func FromUnstructured(u *unstructured.Unstructured) (*Network, error) {
	var n Network
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &n); err != nil {
		return nil, fmt.Errorf("network: converting %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &n, nil
}

// ToUnstructured converts n for the dynamic client, with its apiVersion and kind set.
func ToUnstructured(n *Network) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(n)
	if err != nil {
		return nil, fmt.Errorf("network: converting %s/%s: %w", n.Namespace, n.Name, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(Group + "/" + Version)
	u.SetKind(Kind)
	return u, nil
}

// SpecError is the error of Spec.Validate. Its Message is meant for the Ready
// condition and for the user.
type SpecError struct {
	Field   string // "spec.cidr" or "spec.gateway"
	Message string
}

func (e *SpecError) Error() string { return "network: invalid spec: " + e.Message }

// Validate checks that the CIDR is a network prefix without host bits and that the
// gateway is a usable address inside it (not the network address, nor the IPv4
// broadcast address, where those exist). It returns a *SpecError.
func (s Spec) Validate() error {
	prefix, err := netip.ParsePrefix(s.CIDR)
	if err != nil {
		return &SpecError{Field: "spec.cidr", Message: fmt.Sprintf("spec.cidr %q is not a valid CIDR (want an address/prefix-length such as 192.168.0.0/16)", s.CIDR)}
	}
	if prefix.Addr().Zone() != "" {
		return &SpecError{Field: "spec.cidr", Message: fmt.Sprintf("spec.cidr %q must not have a zone", s.CIDR)}
	}
	if m := prefix.Masked(); m != prefix {
		return &SpecError{Field: "spec.cidr", Message: fmt.Sprintf("spec.cidr %q has host bits set (the network is %s)", s.CIDR, m)}
	}
	gw, err := netip.ParseAddr(s.Gateway)
	if err != nil {
		return &SpecError{Field: "spec.gateway", Message: fmt.Sprintf("spec.gateway %q is not a valid IP address", s.Gateway)}
	}
	if gw.Zone() != "" {
		return &SpecError{Field: "spec.gateway", Message: fmt.Sprintf("spec.gateway %q must not have a zone", s.Gateway)}
	}
	if !prefix.Contains(gw) {
		return &SpecError{Field: "spec.gateway", Message: fmt.Sprintf("spec.gateway %s is outside spec.cidr %s", gw, prefix)}
	}
	// Point-to-point (/31, /127) and host (/32, /128) prefixes have no network or
	// broadcast address to avoid.
	if prefix.Bits() < gw.BitLen()-1 {
		if gw == prefix.Addr() {
			return &SpecError{Field: "spec.gateway", Message: fmt.Sprintf("spec.gateway %s is the network address of %s", gw, prefix)}
		}
		if gw.Is4() && gw == lastAddr(prefix) {
			return &SpecError{Field: "spec.gateway", Message: fmt.Sprintf("spec.gateway %s is the broadcast address of %s", gw, prefix)}
		}
	}
	return nil
}

// lastAddr returns the highest address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
