package foo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"

	"github.com/ctrlkit/ctrlkit/indexer"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
)

// Name is the controller's name: in logs and metrics, the reporting controller of
// its events and the field manager of its writes.
const Name = "foo-controller"

// The reasons of the events recorded about a Foo.
const (
	ReasonSynced         = "Synced"
	ReasonResourceExists = "ErrResourceExists"
)

// ErrResourceExists is wrapped by the error of a reconcile that found the Foo's
// Deployment name taken by a Deployment the Foo does not control.
var ErrResourceExists = errors.New("foo: Deployment exists and is not controlled by the Foo")

// Config configures the controller. The zero value works.
type Config struct {
	// Namespace restricts the controller to the Foos and Deployments of one
	// namespace; "" means all.
	Namespace string
	// Workers is how many Foos are reconciled at once; zero means 2.
	Workers int
	// Logger is the controller's base logger; default: discard.
	Logger logr.Logger
}

// Add adds the Foo controller to m, with the shared informers of Foos (a
// manager.Custom informer of the Foo struct) and Deployments it reads from. It
// makes no request beyond the discovery of the two resources, so the Foo CRD must
// be installed first. The controller starts when m runs.
func Add(m *manager.Manager, cfg Config) error {
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	foos, err := manager.Custom[*Foo](m, GroupVersionKind, manager.Options[*Foo]{Namespace: cfg.Namespace})
	if err != nil {
		return fmt.Errorf("foo: %w", err)
	}
	deployments, err := manager.Typed[*appsv1.Deployment](m, manager.Options[*appsv1.Deployment]{Namespace: cfg.Namespace})
	if err != nil {
		return fmt.Errorf("foo: %w", err)
	}
	r := &reconciler{
		foos:        foos.Lister(),
		deployments: deployments.Lister(),
		kube:        m.Kubernetes(),
		dyn:         m.Dynamic(),
		events:      m.EventRecorder(Name),
	}
	c := reconcile.New(r, reconcile.Config[types.NamespacedName]{Name: Name, Workers: cfg.Workers, Logger: cfg.Logger})
	if err := errors.Join(
		c.Watch(reconcile.FromInformer(foos, reconcile.ByObject[*Foo]())),
		c.Watch(reconcile.FromInformer(deployments, reconcile.ByControllerOwner[*appsv1.Deployment](GroupKind))),
	); err != nil {
		return fmt.Errorf("foo: %w", err)
	}
	return m.Add(c)
}

// reconciler brings one Foo's Deployment and status in line with its spec.
type reconciler struct {
	foos        *indexer.Lister[*Foo]
	deployments *indexer.Lister[*appsv1.Deployment]
	kube        kubernetes.Interface
	dyn         dynamic.Interface
	events      events.EventRecorder
}

// Reconcile implements reconcile.Reconciler.
func (r *reconciler) Reconcile(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
	f, err := r.foos.Get(key.Namespace, key.Name)
	if apierrors.IsNotFound(err) {
		return reconcile.Result{}, nil // deleted: the garbage collector deletes its Deployment
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("foo: %w", err)
	}
	if f.Spec.DeploymentName == "" {
		logr.FromContextOrDiscard(ctx).Info("Foo has no spec.deploymentName; ignored")
		return reconcile.Result{}, nil
	}
	d, err := r.deployments.Get(f.Namespace, f.Spec.DeploymentName)
	if apierrors.IsNotFound(err) {
		d, err = r.kube.AppsV1().Deployments(f.Namespace).Create(ctx, newDeployment(f), metav1.CreateOptions{FieldManager: Name})
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("foo: Deployment %s/%s: %w", f.Namespace, f.Spec.DeploymentName, err)
	}
	if !metav1.IsControlledBy(d, f) {
		r.events.Eventf(reference(f), nil, corev1.EventTypeWarning, ReasonResourceExists, "Sync", "Deployment %q already exists and is not controlled by the Foo", d.Name)
		return reconcile.Result{}, fmt.Errorf("%w: %s/%s", ErrResourceExists, d.Namespace, d.Name)
	}
	if n, ok := replicasToSet(f, d); ok {
		d = d.DeepCopy() // the cache's copy is read-only
		d.Spec.Replicas = &n
		if d, err = r.kube.AppsV1().Deployments(f.Namespace).Update(ctx, d, metav1.UpdateOptions{FieldManager: Name}); err != nil {
			return reconcile.Result{}, fmt.Errorf("foo: Deployment %s/%s: %w", f.Namespace, f.Spec.DeploymentName, err)
		}
	}
	if patch, ok := statusPatch(f, d); ok {
		_, err := r.dyn.Resource(GroupVersionResource).Namespace(f.Namespace).Patch(ctx, f.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: Name}, "status")
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("foo: status of %s/%s: %w", f.Namespace, f.Name, err)
		}
	}
	r.events.Eventf(reference(f), nil, corev1.EventTypeNormal, ReasonSynced, "Sync", "Foo synced successfully")
	return reconcile.Result{}, nil
}

// newDeployment returns the Deployment f asks for: spec.replicas nginx Pods
// labelled app=nginx and controller=<f's name>, controlled by f.
func newDeployment(f *Foo) *appsv1.Deployment {
	labels := map[string]string{"app": "nginx", "controller": f.Name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:            f.Spec.DeploymentName,
			Namespace:       f.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(f, GroupVersionKind)},
		},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:latest"}}},
			},
		},
	}
	if f.Spec.Replicas != nil {
		n := *f.Spec.Replicas
		d.Spec.Replicas = &n
	}
	return d
}

// replicasToSet returns f's spec.replicas and true if d's differ from them; a
// Foo without spec.replicas leaves d's as they are.
func replicasToSet(f *Foo, d *appsv1.Deployment) (int32, bool) {
	if f.Spec.Replicas == nil {
		return 0, false
	}
	want := *f.Spec.Replicas
	return want, d.Spec.Replicas == nil || *d.Spec.Replicas != want
}

// statusPatch returns the JSON merge patch that gives f the status d implies, and
// false if f has it already.
func statusPatch(f *Foo, d *appsv1.Deployment) ([]byte, bool) {
	want := FooStatus{AvailableReplicas: d.Status.AvailableReplicas}
	if f.Status == want {
		return nil, false
	}
	patch, err := json.Marshal(map[string]FooStatus{"status": want})
	if err != nil {
		panic(err) // a struct of one int32 always marshals
	}
	return patch, true
}

// reference returns the reference events make to f. Foos come from the cache
// without apiVersion and kind, and the scheme does not know them, so the
// reference is written out here.
func reference(f *Foo) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion:      GroupVersionKind.GroupVersion().String(),
		Kind:            Kind,
		Namespace:       f.Namespace,
		Name:            f.Name,
		UID:             f.UID,
		ResourceVersion: f.ResourceVersion,
	}
}
