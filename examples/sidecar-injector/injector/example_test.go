package injector_test

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/ctrlkit/ctrlkit/examples/sidecar-injector/injector"
)

// ExampleComputePatch computes the patch that injects a sidecar into an opted-in
// Deployment, applies it as the API server would, and finds nothing left to do.
func ExampleComputePatch() {
	sc, err := injector.ParseSidecar("example", []byte(`
containers:
  - name: envoy
    image: envoyproxy/envoy:v1.31.0
`))
	if err != nil {
		panic(err)
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Annotations: map[string]string{injector.InjectAnnotation: "true"}},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "nginx"}},
		}}},
	}
	plan, err := injector.ComputePatch(d, sc)
	if err != nil {
		panic(err)
	}
	fmt.Println(plan.Action)

	// What the API server does with the patch.
	original, _ := json.Marshal(d)
	patched, err := strategicpatch.StrategicMergePatch(original, plan.Patch, appsv1.Deployment{})
	if err != nil {
		panic(err)
	}
	d = &appsv1.Deployment{}
	if err := json.Unmarshal(patched, d); err != nil {
		panic(err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		fmt.Println(c.Name, c.Image)
	}
	rec, _ := injector.ReadRecord(d)
	fmt.Println("recorded:", rec.Containers)

	plan, _ = injector.ComputePatch(d, sc)
	fmt.Println(plan.Action)
	// Output:
	// inject
	// app nginx
	// envoy envoyproxy/envoy:v1.31.0
	// recorded: [envoy]
	// none
}
