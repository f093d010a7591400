package podset

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// handlerFixture is a podHandler whose controller has a PodSet cache filled from an
// in-memory server, and which records what it enqueues.
type handlerFixture struct {
	c *Controller
	h *podHandler

	mu   sync.Mutex
	keys []string
}

func newHandlerFixture(t *testing.T, sets ...*PodSet) *handlerFixture {
	t.Helper()
	server := reflectortest.NewServer[*PodSet](reflectortest.Config{})
	for _, ps := range sets {
		if _, err := server.Create(ps); err != nil {
			t.Fatal(err)
		}
	}
	f := &handlerFixture{c: &Controller{podSets: informer.New(server, informer.Config[*PodSet]{})}}
	f.h = &podHandler{c: f.c, enqueue: func(k types.NamespacedName, _ reconcile.Priority) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.keys = append(f.keys, k.String())
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.c.podSets.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := f.c.podSets.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	return f
}

// took returns, sorted, and forgets the keys enqueued so far.
func (f *handlerFixture) took() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.keys
	f.keys = nil
	slices.Sort(k)
	return k
}

func (f *handlerFixture) check(t *testing.T, step string, want ...string) {
	t.Helper()
	if diff := cmp.Diff(want, f.took()); diff != "" {
		t.Errorf("%s: enqueued keys (-want +got):\n%s", step, diff)
	}
}

func testPodSet(ns, name, app string) *PodSet {
	ps := validPodSet()
	ps.Namespace, ps.Name, ps.UID = ns, name, types.UID(ns+"-"+name)
	ps.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	ps.Spec.Template.Labels = map[string]string{"app": app}
	return ps
}

func testPod(ns, name, app string, owner *PodSet) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("pod-" + name), Labels: map[string]string{"app": app}}}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{ownerRef(owner)}
	}
	return p
}

// TestPodHandler: a Pod event lowers its owner's expectations before enqueueing
// the owner; orphans reach the PodSets that may adopt them (with a valid selector
// that matches, not being deleted), and only those.
func TestPodHandler(t *testing.T) {
	web, web2, db := testPodSet("ns", "web", "web"), testPodSet("ns", "web2", "web"), testPodSet("ns", "db", "db")
	elsewhere := testPodSet("other", "web", "web")
	dying := testPodSet("ns", "dying", "web") // being deleted: adopts nothing
	dying.DeletionTimestamp = new(metav1.Now())
	empty := testPodSet("ns", "empty", "web") // an empty selector selects nothing
	empty.Spec.Selector = &metav1.LabelSelector{}
	f := newHandlerFixture(t, web, web2, db, elsewhere, dying, empty)
	x := &f.c.exp
	webKey := types.NamespacedName{Namespace: "ns", Name: "web"}

	x.ExpectCreations(webKey, 2)
	f.h.add(testPod("ns", "w1", "web", web), false)
	f.check(t, "owned Pod added", "ns/web")
	if c, _ := x.Pending(webKey); c != 1 {
		t.Errorf("creations pending after one add: %d, want 1", c)
	}

	f.h.add(testPod("ns", "o1", "web", nil), false)
	f.check(t, "orphan added", "ns/web", "ns/web2")
	f.h.add(testPod("ns", "o2", "cache", nil), true)
	f.check(t, "orphan nobody selects")

	foreign := testPod("ns", "rs1", "web", nil)
	foreign.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "x", UID: "rs", Controller: new(true)}}
	f.h.add(foreign, false)
	f.check(t, "Pod of another controller")

	// Deletion: marked, then gone, lowers the expectation once.
	w2 := testPod("ns", "w2", "web", web)
	x.ExpectDeletions(webKey, []string{string(w2.UID), "other-uid"})
	marked := w2.DeepCopy()
	now := metav1.Now()
	marked.DeletionTimestamp = &now
	f.h.update(w2, marked)
	f.check(t, "owned Pod marked for deletion", "ns/web")
	if _, d := x.Pending(webKey); d != 1 {
		t.Errorf("deletions pending after the mark: %d, want 1", d)
	}
	f.h.delete(informer.Deleted[*corev1.Pod]{Key: "ns/w2", Obj: marked})
	f.check(t, "owned Pod deleted", "ns/web")
	if _, d := x.Pending(webKey); d != 1 {
		t.Errorf("deletions pending after the deletion: %d, want still 1", d)
	}

	// Release: the old owner and the PodSets the orphan now matches.
	w3 := testPod("ns", "w3", "web", web)
	relabelled := w3.DeepCopy()
	relabelled.Labels = map[string]string{"app": "db"}
	f.h.update(w3, relabelled)
	f.check(t, "owned Pod relabelled", "ns/web")
	released := relabelled.DeepCopy()
	released.OwnerReferences = nil
	f.h.update(relabelled, released)
	f.check(t, "Pod released", "ns/db", "ns/web")

	// An orphan's update that changes no label enqueues nothing.
	status := released.DeepCopy()
	status.Status.Phase = corev1.PodRunning
	f.h.update(released, status)
	f.check(t, "orphan's status changed")

	f.h.delete(informer.Deleted[*corev1.Pod]{Key: "ns/o1", Obj: testPod("ns", "o1", "web", nil)})
	f.check(t, "orphan deleted")
	if c, _ := x.Pending(webKey); c != 1 {
		t.Errorf("creations pending at the end: %d, want 1", c)
	}
}

func TestControllerIndex(t *testing.T) {
	web := testPodSet("ns", "web", "web")
	foreign := testPod("ns", "rs1", "web", nil)
	foreign.OwnerReferences = []metav1.OwnerReference{
		{APIVersion: "v1", Kind: "ConfigMap", Name: "not-controller", UID: "cm"},
		{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "x", UID: "rs", Controller: new(true)},
	}
	notController := testPod("ns", "o2", "web", nil)
	notController.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "cm", UID: "cm"}}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{testPod("ns", "w1", "web", web), string(web.UID)},
		{testPod("ns", "o1", "web", nil), "orphan/ns"},
		{notController, "orphan/ns"},
		{foreign, "rs"},
	} {
		got, err := controllerIndex(tc.pod)
		if err != nil || len(got) != 1 || got[0] != tc.want {
			t.Errorf("controllerIndex(%s) = %q, %v; want [%q]", tc.pod.Name, got, err, tc.want)
		}
	}
}
