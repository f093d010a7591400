package podset

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ctrlkit/ctrlkit/reconcile"
)

var podsResource = schema.GroupResource{Resource: "pods"}

// manageFixture is a controller whose Pod writes go to a fake clientset, which
// names Pods from their generateName as the API server does.
func manageFixture(opts Options) (*Controller, *fake.Clientset) {
	client := fake.NewClientset()
	var n atomic.Int64
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		if p.Name == "" {
			p.Name = fmt.Sprintf("%s%d", p.GenerateName, n.Add(1))
		}
		return false, nil, nil
	})
	return &Controller{opts: opts, kube: client}, client
}

func podSetKey(ps *PodSet) types.NamespacedName {
	return types.NamespacedName{Namespace: ps.Namespace, Name: ps.Name}
}

// TestManageCreates: missing Pods are created from the template with a controller
// reference.
func TestManageCreates(t *testing.T) {
	c, client := manageFixture(Options{})
	ps := testPodSet("ns", "web", "web")
	if err := c.manage(t.Context(), ps, nil); err != nil {
		t.Fatal(err)
	}
	list, err := client.CoreV1().Pods("ns").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 3 {
		t.Fatalf("%d Pods created, want 3", len(list.Items))
	}
	for _, p := range list.Items {
		if p.GenerateName != "web-" || p.Labels["app"] != "web" || len(p.Spec.Containers) != 1 {
			t.Errorf("Pod not made from the template: %+v", p.ObjectMeta)
		}
		if diff := cmp.Diff([]metav1.OwnerReference{ownerRef(ps)}, p.OwnerReferences); diff != "" {
			t.Errorf("owner references (-want +got):\n%s", diff)
		}
	}
}

// TestManageCreateFailures: a failed creation ends the slow start after its batch
// with a retriable error; an invalid template is a terminal error.
func TestManageCreateFailures(t *testing.T) {
	c, client := manageFixture(Options{})
	var calls atomic.Int64
	client.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if calls.Add(1) == 2 {
			return true, nil, apierrors.NewInternalError(errors.New("etcd hiccup"))
		}
		return false, nil, nil
	})
	ps := testPodSet("ns", "web", "web")
	ps.Spec.Replicas = new(int32(10))
	err := c.manage(t.Context(), ps, nil)
	if !apierrors.IsInternalError(err) || errors.Is(err, reconcile.ErrTerminal) {
		t.Errorf("manage = %v, want the retriable internal error", err)
	}
	// Slow start: 1 call, then 2 of which one fails, then no more: 2 Pods exist.
	list, lerr := client.CoreV1().Pods("ns").List(t.Context(), metav1.ListOptions{})
	if lerr != nil {
		t.Fatal(lerr)
	}
	if len(list.Items) != 2 || calls.Load() != 3 {
		t.Errorf("%d Pods after %d calls; want 2 after 3", len(list.Items), calls.Load())
	}

	c, client = manageFixture(Options{})
	client.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "", field.ErrorList{field.Required(field.NewPath("spec", "containers"), "")})
	})
	if err := c.manage(t.Context(), ps, nil); !errors.Is(err, reconcile.ErrTerminal) || !apierrors.IsInvalid(err) {
		t.Errorf("manage with an invalid template = %v, want a terminal Invalid error", err)
	}
}

// TestManageDeletes: surplus Pods go in deletion order, with UID preconditions;
// a Pod already gone is no error, any other failure is returned.
func TestManageDeletes(t *testing.T) {
	c, client := manageFixture(Options{})
	ps := testPodSet("ns", "web", "web") // 3 replicas
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var owned []*corev1.Pod
	for i, name := range []string{"a", "b", "c", "d", "e", "f"} {
		p := testPod("ns", name, "web", ps)
		p.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(i) * time.Minute)) // f is the newest
		if name == "f" {
			p.Spec.NodeName = "n" // scheduled: last to go
		}
		owned = append(owned, p)
	}
	var mu sync.Mutex
	var deleted []string
	client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteAction)
		mu.Lock()
		defer mu.Unlock()
		deleted = append(deleted, d.GetName())
		if pre := d.GetDeleteOptions().Preconditions; pre == nil || pre.UID == nil || *pre.UID != types.UID("pod-"+d.GetName()) {
			t.Errorf("delete %s without its UID precondition: %+v", d.GetName(), pre)
		}
		switch d.GetName() {
		case "e":
			return true, nil, apierrors.NewNotFound(podsResource, "e")
		case "d":
			return true, nil, apierrors.NewServiceUnavailable("try later")
		}
		return true, nil, nil
	})
	err := c.manage(t.Context(), ps, owned)
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("manage = %v, want the failure of d", err)
	}
	slices.Sort(deleted)
	if diff := cmp.Diff([]string{"c", "d", "e"}, deleted); diff != "" {
		t.Errorf("deleted (-want +got):\n%s", diff)
	}
}
