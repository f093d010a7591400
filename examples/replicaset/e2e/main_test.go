//go:build e2e

// Package e2e runs the PodSet controller against the real etcd and kube-apiserver
// that testenv starts, as a user holding exactly the rights of ../rbac.yaml: scaling,
// replacement, adoption and release, the stale-cache race with and without
// read-your-writes, scale changes under delayed watch events (the proof that
// read-your-writes alone prevents over-creation), and a deleted PodSet.
package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/rbacfile"
	"github.com/ctrlkit/ctrlkit/internal/testrun"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunTests(m, testenv.Config{Users: []testenv.User{{Name: "controller"}}}, &env, leakcheck.Check))
}

// converge bounds every wait for the controller to reach a state.
const converge = 30 * time.Second

var setupOnce sync.Once
var setupErr error

// setup installs the CRD (as admin) and grants the controller user the rules of
// rbac.yaml, once per package.
func setup(t *testing.T) {
	t.Helper()
	setupOnce.Do(func() {
		ctx := context.Background()
		if setupErr = podset.Install(ctx, env.Config()); setupErr != nil {
			return
		}
		setupErr = rbacfile.Apply(ctx, adminKube(t), "../rbac.yaml", "controller")
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
}

func adminKube(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func adminPodSets(t *testing.T, ns string) dynamic.ResourceInterface {
	t.Helper()
	d, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	return d.Resource(podset.GroupVersionResource).Namespace(ns)
}

// start runs a controller for namespace ns as the least-privilege user, in a
// manager of its own, until the end of the test, and checks that the manager's Run
// returned nil.
func start(t *testing.T, opts podset.Options) *podset.Controller {
	t.Helper()
	setup(t)
	cfg, err := env.UserConfig("controller")
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.Config{RESTConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	c, err := podset.New(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	testrun.Run(t, m.Run)
	return c
}

// newPodSet returns a PodSet selecting and labelling its Pods app=<name>.
func newPodSet(t *testing.T, name string, replicas int32) *unstructured.Unstructured {
	t.Helper()
	ps := &podset.PodSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: podset.PodSetSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	u, err := ps.ToUnstructured()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// createPodSet creates a PodSet as admin and returns it as the server stored it.
func createPodSet(t *testing.T, ns, name string, replicas int32) *podset.PodSet {
	t.Helper()
	u, err := adminPodSets(t, ns).Create(t.Context(), newPodSet(t, name, replicas), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := podset.FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// getPodSet reads a PodSet from the server.
func getPodSet(t *testing.T, ns, name string) *podset.PodSet {
	t.Helper()
	u, err := adminPodSets(t, ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ps, err := podset.FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// patchSpec merge-patches a PodSet's spec as admin and returns its new generation.
func patchSpec(t *testing.T, ns, name, spec string) int64 {
	t.Helper()
	u, err := adminPodSets(t, ns).Patch(t.Context(), name, types.MergePatchType, []byte(`{"spec":`+spec+`}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u.GetGeneration()
}

// pods lists the active Pods of ns on the server (not finished, not being deleted).
func pods(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	list, err := adminKube(t).CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

// ownedBy returns the Pods of ps controlled by uid.
func ownedBy(ps []corev1.Pod, uid types.UID) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range ps {
		if ref := metav1.GetControllerOfNoCopy(&p); ref != nil && ref.UID == uid {
			out = append(out, p)
		}
	}
	return out
}

func names(ps []corev1.Pod) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// eventually polls cond every 50ms until it returns "" or d passes, and then fails
// the test with cond's last description of what is missing.
func eventually(t *testing.T, d time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, msg)
		}
		select {
		case <-tick.C:
		case <-t.Context().Done():
			t.Fatalf("test ended: %s", msg)
		}
	}
}

// waitConverged waits until ps has exactly want active Pods on the server and its
// status says so for the latest generation, and returns those Pods.
func waitConverged(t *testing.T, ns, name string, want int) []corev1.Pod {
	t.Helper()
	var owned []corev1.Pod
	eventually(t, converge, func() string {
		ps := getPodSet(t, ns, name)
		owned = ownedBy(pods(t, ns), ps.UID)
		if len(owned) != want || ps.Status.Replicas != int32(want) || ps.Status.ObservedGeneration != ps.Generation {
			return fmt.Sprintf("%s: %d owned Pods %v, status %+v at generation %d; want %d", name, len(owned), names(owned), ps.Status, ps.Generation, want)
		}
		return ""
	})
	return owned
}

// waitObserved waits until the controller has written the status for generation gen
// of the PodSet, which it does at the end of every reconcile that saw it.
func waitObserved(t *testing.T, ns, name string, gen int64) {
	t.Helper()
	eventually(t, converge, func() string {
		if ps := getPodSet(t, ns, name); ps.Status.ObservedGeneration < gen {
			return fmt.Sprintf("%s: observedGeneration %d, want %d", name, ps.Status.ObservedGeneration, gen)
		}
		return ""
	})
}
