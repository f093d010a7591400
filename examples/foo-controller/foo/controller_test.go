package foo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/ctrlkit/ctrlkit/indexer"
)

const ns = "default"

// newFoo returns a Foo asking for a Deployment named deployment with replicas
// Pods; replicas < 0 leaves spec.replicas out.
func newFoo(name, deployment string, replicas int32) *Foo {
	f := &Foo{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec:       FooSpec{DeploymentName: deployment},
	}
	if replicas >= 0 {
		f.Spec.Replicas = &replicas
	}
	return f
}

// ownedDeployment returns f's Deployment as the server would hold it, with
// replicas and available Pods.
func ownedDeployment(f *Foo, replicas, available int32) *appsv1.Deployment {
	d := newDeployment(f)
	d.Spec.Replicas = &replicas
	d.Status.AvailableReplicas = available
	d.ResourceVersion = "10"
	return d
}

// TestNewDeployment checks the Deployment a Foo asks for, field by field.
// Covers upstream's newDeployment as TestCreatesDeployment expects it.
func TestNewDeployment(t *testing.T) {
	f := newFoo("example", "example-nginx", 3)
	d := newDeployment(f)
	labels := map[string]string{"app": "nginx", "controller": "example"}
	want := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "example-nginx",
			Namespace: ns,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "samplecontroller.k8s.io/v1alpha1", Kind: "Foo", Name: "example", UID: "uid-example",
				Controller: new(true), BlockOwnerDeletion: new(true),
			}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:latest"}}},
			},
		},
	}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("newDeployment (-want +got):\n%s", diff)
	}
	if !metav1.IsControlledBy(d, f) {
		t.Error("the Deployment is not controlled by its Foo")
	}
	// The Deployment's replicas are its own: the Foo in the cache stays read-only.
	*d.Spec.Replicas = 7
	if *f.Spec.Replicas != 3 {
		t.Error("newDeployment shares spec.replicas with the Foo")
	}
	if d := newDeployment(newFoo("x", "y", -1)); d.Spec.Replicas != nil {
		t.Errorf("Foo without replicas: Deployment replicas = %d, want unset", *d.Spec.Replicas)
	}
}

func TestReplicasToSet(t *testing.T) {
	for _, tc := range []struct {
		name      string
		foo, depl int32 // -1: unset
		want      int32
		update    bool
	}{
		{"equal", 2, 2, 0, false},
		{"scale up", 3, 1, 3, true},
		{"scale down", 1, 4, 1, true},
		{"Foo leaves replicas to the Deployment", -1, 5, 0, false},
		{"Deployment without replicas", 2, -1, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFoo("f", "d", tc.foo)
			d := newDeployment(newFoo("f", "d", tc.depl))
			n, ok := replicasToSet(f, d)
			if ok != tc.update || (ok && n != tc.want) {
				t.Errorf("replicasToSet = %d, %v; want %d, %v", n, ok, tc.want, tc.update)
			}
		})
	}
}

func TestStatusPatch(t *testing.T) {
	f := newFoo("f", "d", 3)
	f.Status.AvailableReplicas = 1
	if p, ok := statusPatch(f, ownedDeployment(f, 3, 1)); ok {
		t.Errorf("status in line: patch %s", p)
	}
	for _, avail := range []int32{0, 3} {
		p, ok := statusPatch(f, ownedDeployment(f, 3, avail))
		want := fmt.Sprintf(`{"status":{"availableReplicas":%d}}`, avail)
		if !ok || string(p) != want {
			t.Errorf("available %d: patch %s, %v; want %s", avail, p, ok, want)
		}
	}
}

// event is one event the reconciler recorded.
type event struct {
	regarding corev1.ObjectReference
	typ       string
	reason    string
	note      string
}

// recorder is an events.EventRecorder that keeps what it is given.
type recorder struct {
	mu     sync.Mutex
	events []event
}

func (r *recorder) Eventf(regarding, _ runtime.Object, typ, reason, _, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{*regarding.(*corev1.ObjectReference), typ, reason, fmt.Sprintf(note, args...)})
}

// step is one reconcile of Foo "foo" against caches holding foo and deployment
// (nil: absent).
type step struct {
	name       string
	foo        *Foo
	deployment *appsv1.Deployment
	createErr  error // returned by the server for a Deployment create

	wantErr     func(error) bool   // nil: success
	wantCreate  *appsv1.Deployment // the Deployment created, if any
	wantUpdate  *appsv1.Deployment // the Deployment updated, if any
	wantPatch   string             // the status merge patch, if any
	wantReasons []string           // the events' reasons, in order
	check       func(*testing.T, *recorder)
}

// runStep reconciles s.foo's key once with fake clients and checks the writes,
// the error and the events. The caches detect mutations: the reconciler must
// not change what they hand out.
func runStep(t *testing.T, s step) {
	t.Helper()
	foos := indexer.New(indexer.Config[*Foo]{DetectMutations: true})
	deployments := indexer.New(indexer.Config[*appsv1.Deployment]{DetectMutations: true})
	key := types.NamespacedName{Namespace: ns, Name: "foo"}
	if s.foo != nil {
		key = types.NamespacedName{Namespace: s.foo.Namespace, Name: s.foo.Name}
		if err := foos.Add(s.foo); err != nil {
			t.Fatal(err)
		}
	}
	kube := kubefake.NewClientset()
	if s.deployment != nil {
		if err := deployments.Add(s.deployment); err != nil {
			t.Fatal(err)
		}
		if err := kube.Tracker().Add(s.deployment.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	if s.createErr != nil {
		kube.PrependReactor("create", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, s.createErr
		})
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{GroupVersionResource: "FooList"})
	var patches []clienttesting.PatchAction
	dyn.PrependReactor("patch", Resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
		patches = append(patches, a.(clienttesting.PatchAction))
		return true, &unstructured.Unstructured{Object: map[string]any{"apiVersion": GroupVersionKind.GroupVersion().String(), "kind": Kind}}, nil
	})
	rec := &recorder{}
	r := &reconciler{
		foos:        indexer.NewLister(foos),
		deployments: indexer.NewLister(deployments),
		kube:        kube,
		dyn:         dyn,
		events:      rec,
	}

	res, err := r.Reconcile(context.Background(), key)
	if res.RequeueAfter != 0 {
		t.Errorf("RequeueAfter = %v, want 0", res.RequeueAfter)
	}
	switch {
	case s.wantErr == nil && err != nil:
		t.Errorf("Reconcile = %v, want success", err)
	case s.wantErr != nil && (err == nil || !s.wantErr(err)):
		t.Errorf("Reconcile = %v, want another error", err)
	}

	var created, updated *appsv1.Deployment
	for _, a := range kube.Actions() {
		switch a.GetVerb() {
		case "create":
			if s.createErr == nil {
				created = a.(clienttesting.CreateAction).GetObject().(*appsv1.Deployment)
			}
		case "update":
			updated = a.(clienttesting.UpdateAction).GetObject().(*appsv1.Deployment)
		default:
			t.Errorf("unexpected %s of %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	if diff := cmp.Diff(s.wantCreate, created); diff != "" {
		t.Errorf("created Deployment (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(s.wantUpdate, updated); diff != "" {
		t.Errorf("updated Deployment (-want +got):\n%s", diff)
	}
	switch {
	case s.wantPatch == "" && len(patches) > 0:
		t.Errorf("status patched with %s, want no patch", patches[0].GetPatch())
	case s.wantPatch != "" && len(patches) != 1:
		t.Errorf("%d status patches, want 1: %s", len(patches), s.wantPatch)
	case s.wantPatch != "":
		p := patches[0]
		if p.GetSubresource() != "status" || p.GetPatchType() != types.MergePatchType || p.GetName() != s.foo.Name || string(p.GetPatch()) != s.wantPatch {
			t.Errorf("patch %s %s/%s of %q: %s; want a merge patch of status: %s", p.GetPatchType(), p.GetNamespace(), p.GetName(), p.GetSubresource(), p.GetPatch(), s.wantPatch)
		}
	}
	var reasons []string
	for _, e := range rec.events {
		reasons = append(reasons, e.reason)
	}
	if diff := cmp.Diff(s.wantReasons, reasons); diff != "" {
		t.Errorf("event reasons (-want +got):\n%s", diff)
	}
	if s.check != nil {
		s.check(t, rec)
	}
	if err := errors.Join(foos.CheckMutations(), deployments.CheckMutations()); err != nil {
		t.Errorf("the reconciler changed a cached object: %v", err)
	}
}

func TestReconcile(t *testing.T) {
	foo := newFoo("foo", "foo-nginx", 2)
	synced := func(t *testing.T, r *recorder) {
		t.Helper()
		e := r.events[len(r.events)-1]
		want := corev1.ObjectReference{APIVersion: "samplecontroller.k8s.io/v1alpha1", Kind: "Foo", Namespace: ns, Name: "foo", UID: "uid-foo", ResourceVersion: "1"}
		if e.typ != corev1.EventTypeNormal || e.note != "Foo synced successfully" || e.regarding != want {
			t.Errorf("Synced event = %+v; want Normal, %q, regarding %+v", e, "Foo synced successfully", want)
		}
	}
	unowned := newDeployment(foo)
	unowned.OwnerReferences = nil
	otherFoo := newFoo("foo", "foo-nginx", 2)
	otherFoo.UID = "uid-of-an-earlier-foo"
	withAnnotation := ownedDeployment(foo, 1, 1)
	withAnnotation.Annotations = map[string]string{"kept": "yes"}
	scaled := withAnnotation.DeepCopy()
	scaled.Spec.Replicas = new(int32(2))
	statusOne := foo.DeepCopy()
	statusOne.Status.AvailableReplicas = 1
	noName := newFoo("foo", "", 2)
	isResourceExists := func(err error) bool { return errors.Is(err, ErrResourceExists) }

	for _, s := range []step{
		{name: "Foo gone: nothing to do", wantReasons: nil},
		{name: "Foo without deploymentName: ignored", foo: noName},
		// Covers sample-controller TestCreatesDeployment (upstream writes the
		// unchanged status too; here nothing is written when it is in line).
		{name: "creates the Deployment", foo: foo, wantCreate: newDeployment(foo), wantReasons: []string{"Synced"}, check: synced},
		// A Deployment created since the cache was filled: retried, no Synced.
		{name: "create refused: error, no Synced", foo: foo,
			createErr: apierrors.NewAlreadyExists(schema.GroupResource{Group: "apps", Resource: "deployments"}, "foo-nginx"),
			wantErr:   apierrors.IsAlreadyExists},
		// Covers sample-controller TestDoNothing.
		{name: "in line: no write, Synced", foo: foo, deployment: ownedDeployment(foo, 2, 0), wantReasons: []string{"Synced"}, check: synced},
		// Covers sample-controller TestUpdateDeployment: the cached Deployment
		// with the Foo's replicas, everything else kept.
		{name: "replicas differ: update", foo: foo, deployment: withAnnotation, wantUpdate: scaled, wantPatch: `{"status":{"availableReplicas":1}}`, wantReasons: []string{"Synced"}},
		{name: "Foo without replicas: Deployment's kept", foo: newFoo("foo", "foo-nginx", -1), deployment: ownedDeployment(foo, 4, 0), wantReasons: []string{"Synced"}},
		{name: "status follows the Deployment", foo: foo, deployment: ownedDeployment(foo, 2, 2), wantPatch: `{"status":{"availableReplicas":2}}`, wantReasons: []string{"Synced"}},
		{name: "status in line: no patch", foo: statusOne, deployment: ownedDeployment(foo, 2, 1), wantReasons: []string{"Synced"}},
		// Covers sample-controller TestNotControlledByUs.
		{name: "Deployment not controlled: Warning and error", foo: foo, deployment: unowned, wantErr: isResourceExists, wantReasons: []string{"ErrResourceExists"},
			check: func(t *testing.T, r *recorder) {
				if e := r.events[0]; e.typ != corev1.EventTypeWarning || e.regarding.Name != "foo" || e.note != `Deployment "foo-nginx" already exists and is not controlled by the Foo` {
					t.Errorf("event = %+v", e)
				}
			}},
		{name: "Deployment of an earlier Foo of that name: not controlled", foo: foo, deployment: newDeployment(otherFoo), wantErr: isResourceExists, wantReasons: []string{"ErrResourceExists"}},
	} {
		t.Run(s.name, func(t *testing.T) { runStep(t, s) })
	}
}
