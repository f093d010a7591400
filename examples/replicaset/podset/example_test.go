package podset_test

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
)

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
