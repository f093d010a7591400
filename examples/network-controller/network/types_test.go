package network

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ctrlkit/ctrlkit/examples/internal/discoverytest"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reflector"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cidr, gateway string
		field, want   string // want: a part of the message; "" means valid
	}{
		{"192.168.0.0/16", "192.168.0.1", "", ""},
		{"10.0.0.0/8", "10.255.255.254", "", ""},
		{"10.0.0.0/31", "10.0.0.0", "", ""}, // point-to-point: both addresses usable
		{"10.0.0.7/32", "10.0.0.7", "", ""},
		{"fd00::/64", "fd00::1", "", ""},
		{"fd00::/64", "fd00::ffff:ffff:ffff:ffff", "", ""}, // IPv6 has no broadcast
		{"", "10.0.0.1", "spec.cidr", `spec.cidr "" is not a valid CIDR`},
		{"10.0.0.0", "10.0.0.1", "spec.cidr", "not a valid CIDR"},
		{"10.0.0.0/33", "10.0.0.1", "spec.cidr", "not a valid CIDR"},
		{"300.0.0.0/8", "10.0.0.1", "spec.cidr", "not a valid CIDR"},
		{"not-a-cidr", "10.0.0.1", "spec.cidr", "not a valid CIDR"},
		{"192.168.1.0/16", "192.168.0.1", "spec.cidr", "has host bits set (the network is 192.168.0.0/16)"},
		{"192.168.0.0/16", "", "spec.gateway", `spec.gateway "" is not a valid IP address`},
		{"192.168.0.0/16", "192.168.0.1/32", "spec.gateway", "not a valid IP address"},
		{"192.168.0.0/16", "10.0.0.1", "spec.gateway", "spec.gateway 10.0.0.1 is outside spec.cidr 192.168.0.0/16"},
		{"192.168.0.0/16", "fd00::1", "spec.gateway", "outside spec.cidr"},
		{"fd00::/64", "192.168.0.1", "spec.gateway", "outside spec.cidr"},
		{"192.168.0.0/16", "192.168.0.0", "spec.gateway", "is the network address of 192.168.0.0/16"},
		{"192.168.0.0/16", "192.168.255.255", "spec.gateway", "is the broadcast address of 192.168.0.0/16"},
		{"0.0.0.0/0", "255.255.255.255", "spec.gateway", "broadcast"},
		{"fe80::/64%eth0", "fe80::1", "spec.cidr", "not a valid CIDR"},
		{"fe80::/64", "fe80::1%eth0", "spec.gateway", "must not have a zone"},
	} {
		err := Spec{CIDR: tc.cidr, Gateway: tc.gateway}.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("Validate(%q, %q) = %v, want valid", tc.cidr, tc.gateway, err)
			}
			continue
		}
		var se *SpecError
		if !errors.As(err, &se) {
			t.Errorf("Validate(%q, %q) = %v, want a *SpecError", tc.cidr, tc.gateway, err)
			continue
		}
		if se.Field != tc.field || !strings.Contains(se.Message, tc.want) || !strings.HasPrefix(err.Error(), "network: invalid spec: ") {
			t.Errorf("Validate(%q, %q) = field %q, %q; want field %q and a message containing %q", tc.cidr, tc.gateway, se.Field, err, tc.field, tc.want)
		}
	}
}

func TestUnstructuredRoundTrip(t *testing.T) {
	n := &Network{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Generation: 3, Finalizers: []string{Finalizer}, ResourceVersion: "42"},
		Spec:       Spec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.1"},
		Status: Status{ObservedGeneration: 3, Conditions: []metav1.Condition{{
			Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonProvisioned, Message: "ok",
			ObservedGeneration: 3, LastTransitionTime: metav1.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		}}},
	}
	u, err := ToUnstructured(n)
	if err != nil {
		t.Fatal(err)
	}
	if u.GetAPIVersion() != "samplecrd.k8s.io/v1" || u.GetKind() != "Network" {
		t.Errorf("apiVersion, kind = %s, %s", u.GetAPIVersion(), u.GetKind())
	}
	if cidr, _, _ := unstructured.NestedString(u.Object, "spec", "cidr"); cidr != "10.0.0.0/24" {
		t.Errorf("spec.cidr = %q", cidr)
	}
	back, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	want := *n
	want.APIVersion, want.Kind = "samplecrd.k8s.io/v1", "Network"
	if diff := cmp.Diff(&want, back, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	// The result shares nothing with the unstructured object.
	back.Finalizers[0] = "changed"
	if got := u.GetFinalizers(); got[0] != Finalizer {
		t.Errorf("changing the converted object changed the source: %q", got)
	}

	bad := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"cidr": int64(5)}}}
	if _, err := FromUnstructured(bad); err == nil || !strings.HasPrefix(err.Error(), "network: ") {
		t.Errorf("FromUnstructured of a numeric cidr = %v, want an error", err)
	}
}

func TestCRD(t *testing.T) {
	crd := CRD()
	if crd.Name != "networks.samplecrd.k8s.io" || crd.Spec.Group != Group || crd.Spec.Names.Kind != "Network" {
		t.Errorf("CRD names: %s %s %s", crd.Name, crd.Spec.Group, crd.Spec.Names.Kind)
	}
	if crd.Annotations["api-approved.kubernetes.io"] == "" {
		t.Error("a *.k8s.io group needs the api-approved.kubernetes.io annotation")
	}
	v := crd.Spec.Versions
	if len(v) != 1 || v[0].Name != "v1" || !v[0].Served || !v[0].Storage || v[0].Subresources == nil || v[0].Subresources.Status == nil {
		t.Errorf("versions = %+v, want v1 served, stored, with the status subresource", v)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(nil, Options{BackendURL: "http://127.0.0.1:1"}); err == nil {
		t.Error("New(nil manager) succeeded")
	}
	m, err := manager.New(manager.Config{RESTConfig: discoverytest.Serve(t, networkResource)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(m, Options{}); err == nil || !strings.Contains(err.Error(), "BackendURL") {
		t.Errorf("New without BackendURL = %v", err)
	}
	if _, err := New(m, Options{BackendURL: "127.0.0.1:8080"}); err == nil {
		t.Error("New with a URL without scheme succeeded")
	}
	if got := len(m.Controllers()) + len(m.Informers()); got != 0 {
		t.Errorf("failed New calls left %d controllers and informers in the manager", got)
	}
	if _, err := New(m, Options{BackendURL: "http://127.0.0.1:8080"}); err != nil {
		t.Errorf("New = %v", err)
	}
	noCRD, err := manager.New(manager.Config{RESTConfig: discoverytest.Serve(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(noCRD, Options{BackendURL: "http://127.0.0.1:8080"}); !meta.IsNoMatchError(err) {
		t.Errorf("New without the CRD = %v, want a no-match error", err)
	}
}

var networkResource = discoverytest.Resource{GVK: GroupVersionKind, Plural: Resource, Namespaced: true}

// TestNewShares: New adds one controller to the manager and takes the Networks from
// its shared informer, which a second controller of the same namespace shares.
func TestNewShares(t *testing.T) {
	m, err := manager.New(manager.Config{RESTConfig: discoverytest.Serve(t, networkResource)})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := New(m, Options{Namespace: "ns", BackendURL: "http://127.0.0.1:8080"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := New(m, Options{Namespace: "other", BackendURL: "http://127.0.0.1:8080"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range m.Controllers() {
		got = append(got, fmt.Sprintf("%s %v", c.Name, c.State))
	}
	for _, inf := range m.Informers() {
		got = append(got, fmt.Sprintf("%s: %d users", inf.Name, inf.Users))
	}
	want := []string{
		"network waiting", "network waiting", "network waiting",
		"networks.samplecrd.k8s.io in ns: 2 users",
		"networks.samplecrd.k8s.io in other: 1 users",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("manager's controllers and informers (-want +got):\n%s", diff)
	}
}

// TestDeepCopy: the copy of a cached Network shares nothing with it, so that a
// reconcile may change its copy.
func TestDeepCopy(t *testing.T) {
	// Built twice, so that the reference shares nothing with n.
	build := func() *Network {
		return &Network{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Finalizers: []string{Finalizer}, Labels: map[string]string{"k": "v"}},
			Spec:       Spec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.1"},
			Status:     Status{ObservedGeneration: 1, Conditions: []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionTrue}}},
		}
	}
	n, orig := build(), build()
	if diff := cmp.Diff(n, n.DeepCopyObject().(*Network)); diff != "" {
		t.Fatalf("copy differs (-orig +copy):\n%s", diff)
	}
	c := n.DeepCopy()
	c.Finalizers[0] = "other"
	c.Labels["k"] = "changed"
	c.Status.Conditions[0].Status = metav1.ConditionFalse
	c.Spec.CIDR = "10.1.0.0/24"
	if diff := cmp.Diff(orig, n); diff != "" {
		t.Errorf("changing the copy changed the original (-before +after):\n%s", diff)
	}
}

// TestNewSharded: with Options.Sharded the Network cache holds this replica's shard
// (empty until the group grants it slots) and the controller is a sharded one; a
// manager without Config.Sharding refuses, and keeps no informer.
func TestNewSharded(t *testing.T) {
	served := discoverytest.Serve(t, networkResource)
	m, err := manager.New(manager.Config{RESTConfig: served, Sharding: &manager.Sharding{Namespace: "leases", Group: "networks", Identity: "r0"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(m, Options{Namespace: "ns", BackendURL: "http://127.0.0.1:8080", Sharded: true})
	if err != nil {
		t.Fatal(err)
	}
	if sh := c.inf.Shard(); sh.Field != reflector.ShardByName || len(sh.Ranges) != 0 {
		t.Errorf("Network cache's shard %+v, want the empty shard by name", sh)
	}
	if ctls := m.Controllers(); len(ctls) != 1 {
		t.Errorf("manager runs %d controllers, want 1", len(ctls))
	}

	unsharded, err := manager.New(manager.Config{RESTConfig: served})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(unsharded, Options{Namespace: "ns", BackendURL: "http://127.0.0.1:8080", Sharded: true}); err == nil {
		t.Error("New with Sharded on a manager without Config.Sharding: no error")
	}
	if infs := unsharded.Informers(); len(infs) != 0 {
		t.Errorf("the refused New left %d informers in the manager", len(infs))
	}
}
