//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/ctrlkit/ctrlkit/examples/foo-controller/foo"
)

func adminFoos(t *testing.T, ns string) dynamic.ResourceInterface {
	t.Helper()
	d, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	return d.Resource(foo.GroupVersionResource).Namespace(ns)
}

// createFoo creates a Foo as admin and returns its UID. The first creates after
// the CRD is established are held by the API server for about 2 s.
func createFoo(t *testing.T, ns, name, deployment string, replicas int64) types.UID {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": foo.GroupVersionKind.GroupVersion().String(),
		"kind":       foo.Kind,
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"deploymentName": deployment, "replicas": replicas},
	}}
	got, err := adminFoos(t, ns).Create(t.Context(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.GetUID()
}

// getDeployment reads a Deployment from the server; nil if it does not exist.
func getDeployment(t *testing.T, ns, name string) *appsv1.Deployment {
	t.Helper()
	d, err := adminKube(t).AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return d
}

// waitReplicas waits until the Deployment ns/name exists with spec.replicas n.
func waitReplicas(t *testing.T, ns, name string, n int32) *appsv1.Deployment {
	t.Helper()
	var d *appsv1.Deployment
	waitFor(t, fmt.Sprintf("Deployment %s with %d replicas", name, n), func() (bool, string) {
		d = getDeployment(t, ns, name)
		if d == nil {
			return false, "no Deployment"
		}
		return d.Spec.Replicas != nil && *d.Spec.Replicas == n, fmt.Sprintf("replicas %v", d.Spec.Replicas)
	})
	return d
}

// fooEvents returns the events.k8s.io Events about Foo ns/name of the given reason.
func fooEvents(t *testing.T, ns, name, reason string) []string {
	t.Helper()
	list, err := adminKube(t).EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, e := range list.Items {
		if e.Reason == reason && e.ReportingController == foo.Name && e.Regarding.Kind == foo.Kind &&
			e.Regarding.APIVersion == foo.GroupVersionKind.GroupVersion().String() && e.Regarding.Name == name {
			notes = append(notes, e.Type+": "+e.Note)
		}
	}
	return notes
}

// TestDeploymentFollowsFoo: a Foo gets a Deployment it controls, with its
// replicas and upstream's labels and container; a change of spec.replicas is
// applied to the Deployment; the Deployment's available replicas reach the Foo's
// status; and a Synced event reaches the server. Covers sample-controller's
// TestCreatesDeployment, TestUpdateDeployment and TestDoNothing against a real
// server.
func TestDeploymentFollowsFoo(t *testing.T) {
	ns := env.Namespace(t)
	start(t, ns)
	uid := createFoo(t, ns, "web", "web-nginx", 1)

	d := waitReplicas(t, ns, "web-nginx", 1)
	ref := metav1.GetControllerOf(d)
	if ref == nil || ref.UID != uid || ref.Kind != foo.Kind || ref.APIVersion != "samplecontroller.k8s.io/v1alpha1" || ref.Name != "web" ||
		ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("controller reference = %+v, want Foo web (uid %s) blocking owner deletion", ref, uid)
	}
	wantLabels := map[string]string{"app": "nginx", "controller": "web"}
	if got := d.Spec.Template.Labels; !maps.Equal(got, wantLabels) {
		t.Errorf("Pod labels = %v, want %v", got, wantLabels)
	}
	if got := d.Spec.Selector.MatchLabels; !maps.Equal(got, wantLabels) {
		t.Errorf("selector = %v, want %v", got, wantLabels)
	}
	if c := d.Spec.Template.Spec.Containers; len(c) != 1 || c[0].Name != "nginx" || c[0].Image != "nginx:latest" {
		t.Errorf("containers = %+v, want one nginx:latest", c)
	}
	waitFor(t, "a Synced event about the Foo", func() (bool, string) {
		notes := fooEvents(t, ns, "web", foo.ReasonSynced)
		return len(notes) > 0 && notes[0] == corev1.EventTypeNormal+": Foo synced successfully", fmt.Sprint(notes)
	})

	if _, err := adminFoos(t, ns).Patch(t.Context(), "web", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	d = waitReplicas(t, ns, "web-nginx", 3)

	// No kube-controller-manager runs: play its part for the Deployment's status.
	d.Status.Replicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas = 3, 3, 2
	if _, err := adminKube(t).AppsV1().Deployments(ns).UpdateStatus(t.Context(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Foo status.availableReplicas 2", func() (bool, string) {
		u, err := adminFoos(t, ns).Get(t.Context(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n, _, _ := unstructured.NestedInt64(u.Object, "status", "availableReplicas")
		return n == 2, fmt.Sprint(u.Object["status"])
	})
}

// TestDeletedDeploymentIsRecreated: a change to a Deployment reconciles its
// controlling Foo, so a deleted Deployment comes back. Covers the Deployment
// handler of sample-controller (handleObject on delete).
func TestDeletedDeploymentIsRecreated(t *testing.T) {
	ns := env.Namespace(t)
	start(t, ns)
	createFoo(t, ns, "again", "again-nginx", 2)
	old := waitReplicas(t, ns, "again-nginx", 2)
	if err := adminKube(t).AppsV1().Deployments(ns).Delete(t.Context(), "again-nginx", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new Deployment again-nginx", func() (bool, string) {
		d := getDeployment(t, ns, "again-nginx")
		if d == nil {
			return false, "none"
		}
		return d.UID != old.UID && metav1.GetControllerOf(d) != nil, fmt.Sprintf("uid %s (old %s)", d.UID, old.UID)
	})
}

// TestUnownedDeploymentIsNotTakenOver: a Deployment of the Foo's name that the
// Foo does not control is left exactly as it is, and a Warning event
// ErrResourceExists about the Foo reaches the server (no Synced event). Covers
// sample-controller's TestNotControlledByUs against a real server.
func TestUnownedDeploymentIsNotTakenOver(t *testing.T) {
	ns := env.Namespace(t)
	labels := map[string]string{"app": "someone-else"}
	five := int32(5)
	before, err := adminKube(t).AppsV1().Deployments(ns).Create(t.Context(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "taken"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &five,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start(t, ns)
	createFoo(t, ns, "intruder", "taken", 1)

	want := corev1.EventTypeWarning + `: Deployment "taken" already exists and is not controlled by the Foo`
	waitFor(t, "a Warning event ErrResourceExists about the Foo", func() (bool, string) {
		notes := fooEvents(t, ns, "intruder", foo.ReasonResourceExists)
		return len(notes) > 0 && notes[0] == want, fmt.Sprint(notes)
	})
	after := getDeployment(t, ns, "taken")
	if after == nil || after.ResourceVersion != before.ResourceVersion || len(after.OwnerReferences) != 0 || *after.Spec.Replicas != 5 {
		t.Errorf("the Deployment was changed: %+v", after)
	}
	if notes := fooEvents(t, ns, "intruder", foo.ReasonSynced); len(notes) != 0 {
		t.Errorf("Synced events for a Foo whose Deployment is taken: %v", notes)
	}
}
