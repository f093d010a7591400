package podset_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
)

// ExampleExpectations shows the protocol that keeps a controller from acting on a
// cache that does not show its own writes yet.
func ExampleExpectations() {
	var exp podset.Expectations[types.NamespacedName]
	key := types.NamespacedName{Namespace: "default", Name: "web"}

	// Reconcile: 3 Pods are missing. Record, then create.
	exp.ExpectCreations(key, 3)
	// ... 3 creates succeed, but the informer has shown only one so far:
	exp.CreationObserved(key)
	ok, _ := exp.Satisfied(key)
	fmt.Println("act on the cache:", ok) // it would count 1 Pod and create 2 more

	exp.CreationObserved(key)
	exp.CreationObserved(key)
	ok, _ = exp.Satisfied(key)
	fmt.Println("act on the cache:", ok)

	// Scale-down: the deletion of a Pod is seen twice (marked, then gone), but
	// counts once.
	exp.ExpectDeletions(key, []string{"uid-1"})
	exp.DeletionObserved(key, "uid-1")
	exp.DeletionObserved(key, "uid-1")
	creations, deletions := exp.Pending(key)
	fmt.Println("pending:", creations, deletions)
	// Output:
	// act on the cache: false
	// act on the cache: true
	// pending: 0 0
}

// ExamplePodSet_ToUnstructured builds a PodSet for the dynamic client.
func ExamplePodSet_ToUnstructured() {
	replicas := int32(3)
	ps := &podset.PodSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: podset.PodSetSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	u, err := ps.ToUnstructured()
	if err != nil {
		panic(err)
	}
	// dyn.Resource(podset.GroupVersionResource).Namespace("default").Create(ctx, u, metav1.CreateOptions{})
	fmt.Println(u.GetAPIVersion(), u.GetKind(), u.GetName())
	back, err := podset.FromUnstructured(u)
	if err != nil {
		panic(err)
	}
	fmt.Println(*back.Spec.Replicas, back.Spec.Template.Spec.Containers[0].Image)
	// Output:
	// examples.ctrlkit.dev/v1alpha1 PodSet web
	// 3 registry.k8s.io/pause:3.10
}
