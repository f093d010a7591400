//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
)

// TestScale: a PodSet gets exactly its replicas as Pods it controls, scales up,
// replaces a deleted Pod, scales down (sparing the scheduled Pod, which ranks last
// for deletion), and reports its status.
func TestScale(t *testing.T) {
	ns := env.Namespace(t)
	c := start(t, podset.Options{Namespace: ns})
	ps := createPodSet(t, ns, "web", 3)
	if err := c.WaitForCache(t.Context(), ps.ResourceVersion); err != nil {
		t.Fatal(err)
	}

	owned := waitConverged(t, ns, "web", 3)
	for _, p := range owned {
		ref := metav1.GetControllerOfNoCopy(&p)
		if ref.Kind != podset.Kind || ref.APIVersion != podset.Group+"/"+podset.Version || ref.Name != "web" ||
			ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
			t.Errorf("Pod %s: controller reference %+v", p.Name, ref)
		}
		if p.Labels["app"] != "web" || !strings.HasPrefix(p.Name, "web-") {
			t.Errorf("Pod %s: labels %v, not made from the template", p.Name, p.Labels)
		}
	}
	if got := len(pods(t, ns)); got != 3 {
		t.Errorf("%d Pods in the namespace, want 3", got)
	}
	if st := getPodSet(t, ns, "web").Status; st.Selector != "app=web" {
		t.Errorf("status.selector = %q, want app=web", st.Selector)
	}

	patchSpec(t, ns, "web", `{"replicas":5}`)
	owned = waitConverged(t, ns, "web", 5)

	// Schedule one Pod (no scheduler runs: bind it by hand) and delete another
	// (unscheduled, so it goes at once): it is replaced. The replacement also
	// shows that the controller's cache has seen the binding, which came first.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-node"}}
	if _, err := adminKube(t).CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kept, victim := owned[2].Name, owned[0].Name
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: kept}, Target: corev1.ObjectReference{Kind: "Node", Name: node.Name}}
	if err := adminKube(t).CoreV1().Pods(ns).Bind(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := adminKube(t).CoreV1().Pods(ns).Delete(t.Context(), victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, converge, func() string {
		owned = ownedBy(pods(t, ns), ps.UID)
		if len(owned) != 5 {
			return fmt.Sprintf("%d owned Pods %v, want 5", len(owned), names(owned))
		}
		for _, p := range owned {
			if p.Name == victim {
				return fmt.Sprintf("deleted Pod %s still there", victim)
			}
		}
		return ""
	})
	if got := len(pods(t, ns)); got != 5 {
		t.Errorf("%d Pods in the namespace after the replacement, want 5", got)
	}

	// Scaling down to 1 keeps the scheduled Pod, since unscheduled Pods go first.
	patchSpec(t, ns, "web", `{"replicas":1}`)
	owned = waitConverged(t, ns, "web", 1)
	if owned[0].Name != kept {
		t.Errorf("scale-down kept %s, want the scheduled Pod %s", owned[0].Name, kept)
	}
}

// TestAdoptAndRelease: an orphan Pod matching the selector is adopted and the
// surplus deleted; a Pod relabelled out of the selector is released and replaced.
func TestAdoptAndRelease(t *testing.T) {
	ns := env.Namespace(t)
	start(t, podset.Options{Namespace: ns})
	ps := createPodSet(t, ns, "db", 2)
	waitConverged(t, ns, "db", 2)

	// The orphan is scheduled, so that it ranks last for deletion: the
	// controller adopts it and deletes one of its own Pods instead.
	orphan := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "orphan", Labels: map[string]string{"app": "db"}},
		Spec:       corev1.PodSpec{NodeName: "nowhere", Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if _, err := adminKube(t).CoreV1().Pods(ns).Create(t.Context(), orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, converge, func() string {
		p, err := adminKube(t).CoreV1().Pods(ns).Get(t.Context(), "orphan", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if ref := metav1.GetControllerOfNoCopy(p); ref == nil || ref.UID != ps.UID {
			return fmt.Sprintf("orphan not adopted: controller %+v", ref)
		}
		return ""
	})
	owned := waitConverged(t, ns, "db", 2)
	var adopted *corev1.Pod
	for i := range owned {
		if owned[i].Name == "orphan" {
			adopted = &owned[i]
		}
	}
	if adopted == nil {
		t.Fatalf("orphan not adopted: owned Pods %v", names(owned))
	}
	if ref := metav1.GetControllerOfNoCopy(adopted); ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion || ref.Name != "db" {
		t.Errorf("adopted Pod's controller reference %+v", ref)
	}
	if got := len(pods(t, ns)); got != 2 {
		t.Errorf("%d Pods in the namespace after adoption, want 2", got)
	}

	// Relabel the other Pod out of the selector.
	released := owned[0].Name
	if released == "orphan" {
		released = owned[1].Name
	}
	if _, err := adminKube(t).CoreV1().Pods(ns).Patch(t.Context(), released, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"app":"elsewhere"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, converge, func() string {
		p, err := adminKube(t).CoreV1().Pods(ns).Get(t.Context(), released, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if len(p.OwnerReferences) != 0 {
			return fmt.Sprintf("relabelled Pod %s still has owner references %+v", released, p.OwnerReferences)
		}
		return ""
	})
	owned = waitConverged(t, ns, "db", 2)
	for _, p := range owned {
		if p.Name == released {
			t.Errorf("released Pod %s still counted", released)
		}
	}
	if got := len(pods(t, ns)); got != 3 {
		t.Errorf("%d Pods in the namespace, want 3 (2 owned + the released one)", got)
	}
}

// TestDeletedPodSet: once a PodSet is gone (no garbage collector runs here, so its
// Pods stay behind with a dangling owner reference), the controller neither
// recreates a deleted Pod of it nor touches the others.
func TestDeletedPodSet(t *testing.T) {
	ns := env.Namespace(t)
	var gone atomic.Int64 // reconciles that found the PodSet missing
	logger := funcr.New(func(_, args string) {
		if strings.Contains(args, `"msg"="PodSet gone`) {
			gone.Add(1)
		}
	}, funcr.Options{Verbosity: 1})
	start(t, podset.Options{Namespace: ns, Logger: logger})
	ps := createPodSet(t, ns, "job", 2)
	owned := waitConverged(t, ns, "job", 2)

	if err := adminPodSets(t, ns).Delete(t.Context(), "job", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, converge, func() string {
		if gone.Load() == 0 {
			return "no reconcile saw the PodSet gone"
		}
		return ""
	})
	before := gone.Load()
	if err := adminKube(t).CoreV1().Pods(ns).Delete(t.Context(), owned[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The Pod's deletion enqueues its (missing) owner: wait for that reconcile.
	eventually(t, converge, func() string {
		if gone.Load() == before {
			return "the Pod's deletion did not reach a reconcile"
		}
		return ""
	})
	left := pods(t, ns)
	if len(left) != 1 || left[0].Name != owned[1].Name {
		t.Fatalf("Pods after deleting the PodSet and one Pod: %v, want only %s", names(left), owned[1].Name)
	}
	if ref := metav1.GetControllerOfNoCopy(&left[0]); ref == nil || ref.UID != ps.UID {
		t.Errorf("the remaining Pod's controller reference changed: %+v", ref)
	}
}

// TestInvalidPodSet: a PodSet whose selector does not match its template (which the
// CRD's schema cannot reject) gets a clear terminal error and no Pod; fixed, it gets
// its Pods.
func TestInvalidPodSet(t *testing.T) {
	ns := env.Namespace(t)
	var mu sync.Mutex
	var errs []string
	logger := funcr.New(func(_, args string) {
		if strings.Contains(args, "terminal error") {
			mu.Lock()
			errs = append(errs, args)
			mu.Unlock()
		}
	}, funcr.Options{})
	start(t, podset.Options{Namespace: ns, Logger: logger})
	u := newPodSet(t, "broken", 2)
	if err := unstructured.SetNestedStringMap(u.Object, map[string]string{"app": "other"}, "spec", "template", "metadata", "labels"); err != nil {
		t.Fatal(err)
	}
	if _, err := adminPodSets(t, ns).Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, converge, func() string {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range errs {
			if strings.Contains(e, "does not match the template") && strings.Contains(e, "broken") {
				return ""
			}
		}
		return fmt.Sprintf("no terminal error about the selector logged; got %q", errs)
	})
	if got := pods(t, ns); len(got) != 0 {
		t.Errorf("Pods created for an invalid PodSet: %v", names(got))
	}

	patchSpec(t, ns, "broken", `{"template":{"metadata":{"labels":{"app":"broken"}}}}`)
	waitConverged(t, ns, "broken", 2)
}
