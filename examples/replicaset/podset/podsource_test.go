package podset

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// sourceFixture runs the controller's Pod source, reconcile.FromInformer with
// podSetsOf and podEvents, on an informer of an in-memory Pod server, beside a
// PodSet cache filled from another, and records what the source enqueues.
type sourceFixture struct {
	c       *Controller
	pods    *reflectortest.Server[*corev1.Pod]
	barrier int // Pods made by sync so far

	mu    sync.Mutex
	keys  []string
	added chan struct{} // capacity 1: a key was recorded
}

func newSourceFixture(t *testing.T, sets ...*PodSet) *sourceFixture {
	t.Helper()
	server := reflectortest.NewServer[*PodSet](reflectortest.Config{})
	for _, ps := range sets {
		if _, err := server.Create(ps); err != nil {
			t.Fatal(err)
		}
	}
	f := &sourceFixture{pods: reflectortest.NewServer[*corev1.Pod](reflectortest.Config{}), added: make(chan struct{}, 1)}
	f.c = &Controller{
		podSets: informer.New(server, informer.Config[*PodSet]{}),
		pods:    informer.New(f.pods, informer.Config[*corev1.Pod]{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f.c.podSets.Run(ctx) })
	wg.Go(func() { f.c.pods.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	src := reconcile.FromInformer(f.c.pods, f.c.podSetsOf, podEvents)
	stop, err := src.Start(func(k types.NamespacedName, _ reconcile.Priority) {
		f.mu.Lock()
		f.keys = append(f.keys, k.String())
		f.mu.Unlock()
		select {
		case f.added <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if err := f.c.podSets.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := f.c.pods.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	return f
}

// sync waits until the source has handled every change made so far: it creates a
// Pod that a PodSet "barrier" controls, waits for that key (the informer hands the
// changes over in order), and removes it from what was recorded.
func (f *sourceFixture) sync(t *testing.T) {
	t.Helper()
	f.barrier++
	b := testPod("ns", fmt.Sprintf("barrier-%d", f.barrier), "barrier", testPodSet("ns", "barrier", "barrier"))
	if _, err := f.pods.Create(b); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		i := slices.Index(f.keys, "ns/barrier")
		if i >= 0 {
			f.keys = slices.Delete(f.keys, i, i+1)
		}
		f.mu.Unlock()
		if i >= 0 {
			return
		}
		select {
		case <-f.added:
		case <-timeout:
			t.Fatal("the Pod source did not deliver the barrier Pod's owner")
		}
	}
}

// check waits for the source to handle every change so far and compares the
// keys it enqueued meanwhile, without repeats, with want; then forgets them.
func (f *sourceFixture) check(t *testing.T, step string, want ...string) {
	t.Helper()
	f.sync(t)
	f.mu.Lock()
	k := f.keys
	f.keys = nil
	f.mu.Unlock()
	slices.Sort(k)
	if diff := cmp.Diff(want, slices.Compact(k), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("%s: enqueued keys (-want +got):\n%s", step, diff)
	}
}

func (f *sourceFixture) create(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	p, err := f.pods.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *sourceFixture) update(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	p, err := f.pods.Update(p)
	if err != nil {
		t.Fatal(err)
	}
	return p
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

// TestPodSource: through the controller's Pod source, a Pod event enqueues the
// PodSet that controls the Pod; orphans reach the PodSets that may adopt them (with
// a valid selector that matches, not being deleted), and only those; a released
// Pod reaches its old owner and the PodSets it now matches; an orphan's status
// change or deletion, and a Pod of another controller, enqueue nothing.
func TestPodSource(t *testing.T) {
	web, web2, db := testPodSet("ns", "web", "web"), testPodSet("ns", "web2", "web"), testPodSet("ns", "db", "db")
	elsewhere := testPodSet("other", "web", "web")
	dying := testPodSet("ns", "dying", "web") // being deleted: adopts nothing
	dying.DeletionTimestamp = new(metav1.Now())
	empty := testPodSet("ns", "empty", "web") // an empty selector selects nothing
	empty.Spec.Selector = &metav1.LabelSelector{}
	f := newSourceFixture(t, web, web2, db, elsewhere, dying, empty)

	f.create(t, testPod("ns", "w1", "web", web))
	f.check(t, "owned Pod added", "ns/web")

	o1 := f.create(t, testPod("ns", "o1", "web", nil))
	f.check(t, "orphan added", "ns/web", "ns/web2")
	f.create(t, testPod("ns", "o2", "cache", nil))
	f.check(t, "orphan nobody selects")

	foreign := testPod("ns", "rs1", "web", nil)
	foreign.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "x", UID: "rs", Controller: new(true)}}
	foreign = f.create(t, foreign)
	f.check(t, "Pod of another controller")
	foreign.Status.Phase = corev1.PodRunning
	f.update(t, foreign)
	f.check(t, "status of a Pod of another controller")

	// Deletion: marked, then gone.
	w2 := f.create(t, testPod("ns", "w2", "web", web))
	f.check(t, "second owned Pod added", "ns/web")
	w2.DeletionTimestamp = new(metav1.Now())
	f.update(t, w2)
	f.check(t, "owned Pod marked for deletion", "ns/web")
	if _, err := f.pods.Delete("ns", "w2"); err != nil {
		t.Fatal(err)
	}
	f.check(t, "owned Pod deleted", "ns/web")

	// Release: the old owner and the PodSets the orphan now matches.
	w3 := f.create(t, testPod("ns", "w3", "web", web))
	f.check(t, "third owned Pod added", "ns/web")
	w3.Labels = map[string]string{"app": "db"}
	w3 = f.update(t, w3)
	f.check(t, "owned Pod relabelled", "ns/web")
	w3.OwnerReferences = nil
	w3 = f.update(t, w3)
	f.check(t, "Pod released", "ns/db", "ns/web")

	// An orphan's update that changes no label enqueues nothing, nor its deletion.
	w3.Status.Phase = corev1.PodRunning
	f.update(t, w3)
	f.check(t, "orphan's status changed")
	if _, err := f.pods.Delete(o1.Namespace, o1.Name); err != nil {
		t.Fatal(err)
	}
	f.check(t, "orphan deleted")

	// An orphan being deleted adopts nobody; relabelled, it reaches the new match.
	o3 := testPod("ns", "o3", "web", nil)
	o3.DeletionTimestamp = new(metav1.Now())
	f.create(t, o3)
	f.check(t, "orphan added while being deleted")
	o2 := testPod("ns", "o2", "cache", nil)
	o2.Labels = map[string]string{"app": "db"}
	f.update(t, o2)
	f.check(t, "orphan relabelled", "ns/db")
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
