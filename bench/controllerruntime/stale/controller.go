// Package stale measures what a ReplicaSet-like controller written the usual
// controller-runtime way does when its Pod cache lags behind the API server.
//
// The controller manages the PodSets of ctrlkit's replicaset example (the same
// CRD, podsets.examples.ctrlkit.dev): each reconcile reads the PodSet and its Pods
// from the manager's cache (Pods through an owner index), creates the missing Pods
// with generateName and deletes the extra ones. It keeps no expectations: it
// trusts the cache to show its own writes. Config.ReadYourWrites switches on
// controller-runtime's experimental read-your-writes client, which makes cache
// reads wait until the cache has seen the client's earlier writes.
//
// The measurement itself is an end-to-end test (build tag e2e) that runs the
// controller against testenv's kube-apiserver behind a faultproxy delaying the
// Pod watch events; see the README of bench/controllerruntime.
package stale

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
)

// PodSetList is the list kind of podset.PodSet, which controller-runtime's typed
// client and cache need next to the object kind.
type PodSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []podset.PodSet `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (l *PodSetList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &PodSetList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]podset.PodSet, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopy()
	}
	return out
}

// NewScheme returns a scheme holding client-go's built-in types and PodSet.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("stale: scheme: %w", err)
	}
	gv := podset.GroupVersionKind.GroupVersion()
	s.AddKnownTypeWithName(podset.GroupVersionKind, &podset.PodSet{})
	s.AddKnownTypeWithName(gv.WithKind(podset.Kind+"List"), &PodSetList{})
	metav1.AddToGroupVersion(s, gv)
	return s, nil
}

// Config configures NewManager.
type Config struct {
	// Namespace is the only namespace the manager's cache watches. Required.
	Namespace string
	// ReadYourWrites sets controller-runtime's
	// client.CacheOptions.EnableReadYourWritesConsistency on the manager's client.
	// False is controller-runtime's default client: reads from the cache, writes to
	// the server, no waiting.
	ReadYourWrites bool
}

// ownerField is the cache index of Pods by the name of the PodSet that controls them.
const ownerField = ".metadata.controller"

// NewManager returns a controller-runtime manager for restCfg with the PodSet
// controller registered: metrics and health probes off, no leader election, one
// reconcile worker (controller-runtime's default). Start it with its Start method.
func NewManager(ctx context.Context, restCfg *rest.Config, cfg Config) (manager.Manager, error) {
	if cfg.Namespace == "" {
		return nil, errors.New("stale: no namespace")
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	opts := manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{cfg.Namespace: {}}},
	}
	if cfg.ReadYourWrites {
		opts.Client = client.Options{Cache: &client.CacheOptions{EnableReadYourWritesConsistency: ptr.To(true)}}
	}
	mgr, err := manager.New(restCfg, opts)
	if err != nil {
		return nil, fmt.Errorf("stale: manager: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, ownerField, controllerName); err != nil {
		return nil, fmt.Errorf("stale: owner index: %w", err)
	}
	err = builder.ControllerManagedBy(mgr).
		For(&podset.PodSet{}).
		Owns(&corev1.Pod{}).
		// Tests build one manager after another in one process.
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		Complete(&Reconciler{Client: mgr.GetClient()})
	if err != nil {
		return nil, fmt.Errorf("stale: controller: %w", err)
	}
	return mgr, nil
}

// controllerName is the owner index function: the name of the PodSet that
// controls a Pod, if any.
func controllerName(o client.Object) []string {
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != podset.Kind || !strings.HasPrefix(ref.APIVersion, podset.Group+"/") {
		return nil
	}
	return []string{ref.Name}
}

// Reconciler keeps spec.replicas Pods for each PodSet, counting the Pods it sees
// in Client's cache. It is goroutine-safe if Client is.
type Reconciler struct {
	// Client is the manager's client: reads from the cache, writes to the server.
	Client client.Client
}

// Reconcile creates the Pods the cache does not show and deletes the ones it
// shows too many of, newest first.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var ps podset.PodSet
	if err := r.Client.Get(ctx, req.NamespacedName, &ps); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(ps.Namespace), client.MatchingFields{ownerField: ps.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("stale: list pods of %s: %w", req, err)
	}
	var active []*corev1.Pod
	for i := range list.Items {
		if p := &list.Items[i]; p.DeletionTimestamp == nil && metav1.IsControlledBy(p, &ps) {
			active = append(active, p)
		}
	}
	want := int(ptr.Deref(ps.Spec.Replicas, 1))
	for range want - len(active) {
		if err := r.Client.Create(ctx, newPod(&ps)); err != nil {
			return reconcile.Result{}, fmt.Errorf("stale: create pod of %s: %w", req, err)
		}
	}
	if extra := len(active) - want; extra > 0 {
		slices.SortFunc(active, newestFirst)
		for _, p := range active[:extra] {
			if err := r.Client.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
				return reconcile.Result{}, fmt.Errorf("stale: delete pod %s of %s: %w", p.Name, req, err)
			}
		}
	}
	return reconcile.Result{}, nil
}

// newestFirst orders Pods by creation time, newest first, then by name.
func newestFirst(a, b *corev1.Pod) int {
	if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// newPod makes a Pod of ps's template, controlled by ps.
func newPod(ps *podset.PodSet) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    ps.Namespace,
			GenerateName: ps.Name + "-",
			Labels:       ps.Spec.Template.Labels,
			Annotations:  ps.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: podset.Group + "/" + podset.Version,
				Kind:       podset.Kind,
				Name:       ps.Name,
				UID:        ps.UID,
				Controller: ptr.To(true),
			}},
		},
	}
	ps.Spec.Template.Spec.DeepCopyInto(&p.Spec)
	return p
}
