// Package rywcost measures what read-your-writes costs a controller that
// writes, on a real kube-apiserver: ctrlkit with and without it
// (reconcile.TrackWrites, which package manager's clients carry, against
// reconcile.Config.CacheWaitTimeout < 0) and controller-runtime with and
// without client.CacheOptions.EnableReadYourWritesConsistency.
//
// Every side runs the same reconcile logic (Logic) over the ConfigMaps of one
// namespace, through its own cache and client; only the plumbing differs. Two
// shapes:
//
//   - Steps: a reconcile that finds data["spec"] ahead of its annotations walks
//     annotation "step" from 1 to Steps, one Update (optimistic concurrency) per
//     reconcile, asking to be requeued after each write. A stale cache read
//     makes the next Update fail with 409 Conflict (or, were it a patch,
//     write twice).
//   - Child: a reconcile makes sure one Secret of the current spec exists,
//     controlled by the ConfigMap (created with generateName), deletes the
//     Secrets of older specs and records the spec it acted on in an
//     annotation. A Secret cache that has not seen the create makes the next
//     reconcile (woken by its own ConfigMap update) create a duplicate.
//
// The measurement is a benchmark with build tag e2e; see the README of
// bench/controllerruntime.
package rywcost

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ctrlkit/ctrlkit/bench/controllerruntime/latency"
	"github.com/ctrlkit/ctrlkit/indexer"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// Shape is what a reconcile writes.
type Shape int

const (
	// Steps: Steps Updates of the ConfigMap itself, one per reconcile, each
	// followed by a requeue.
	Steps Shape = iota
	// Child: create a controlled Secret for the current spec, delete older
	// ones, then Update the ConfigMap's annotation.
	Child
)

func (s Shape) String() string {
	if s == Child {
		return "child"
	}
	return "steps"
}

// NumSteps is how many Updates the Steps shape makes per ConfigMap and spec.
const NumSteps = 3

// Annotations and labels the logic reads and writes.
const (
	SpecKey      = "spec"                         // ConfigMap data: the desired state, changed by the benchmark
	ObservedAnno = "rywcost.ctrlkit.dev/observed" // the spec the controller last acted on
	StepAnno     = "rywcost.ctrlkit.dev/step"     // Steps: how far it got for that spec
	OwnerLabel   = "rywcost.ctrlkit.dev/owner"    // Child: the ConfigMap's name
	SpecLabel    = "rywcost.ctrlkit.dev/spec"     // Child: the spec the Secret was made for
)

// requeueAfterWrite is the requeue the Steps shape asks for after each write.
const requeueAfterWrite = time.Millisecond

// Counters count what a side's reconciles did; goroutine-safe.
type Counters struct {
	Reconciles atomic.Int64
	Writes     atomic.Int64 // successful creates, updates and deletes
	Conflicts  atomic.Int64 // Updates answered 409
	Errors     atomic.Int64 // reconciles that returned an error
	inFlight   atomic.Int64
	lastEnd    atomic.Int64 // unix nanoseconds of the end of the last reconcile
}

// Idle reports whether no reconcile runs and none ended in the last quiet, and
// when the last one ended.
func (c *Counters) Idle(now time.Time, quiet time.Duration) (bool, time.Time) {
	last := time.Unix(0, c.lastEnd.Load())
	return c.inFlight.Load() == 0 && now.Sub(last) >= quiet, last
}

// ops is how the shared logic reaches a side's cache and client.
type ops interface {
	// getConfigMap returns the cached ConfigMap, which the caller must not
	// modify, or false if the cache has none.
	getConfigMap(ctx context.Context, key types.NamespacedName) (*corev1.ConfigMap, bool, error)
	// listChildren returns the cached Secrets labelled as cm's, read-only.
	listChildren(ctx context.Context, cm *corev1.ConfigMap) ([]*corev1.Secret, error)
	updateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error
	createSecret(ctx context.Context, s *corev1.Secret) error
	deleteSecret(ctx context.Context, s *corev1.Secret) error
}

// Logic is the reconcile both frameworks run, counting into C.
type Logic struct {
	Shape Shape
	C     *Counters
}

// reconcile reconciles one ConfigMap and reports whether to requeue it soon.
func (l Logic) reconcile(ctx context.Context, o ops, key types.NamespacedName) (requeue bool, err error) {
	l.C.inFlight.Add(1)
	l.C.Reconciles.Add(1)
	defer func() {
		if err != nil {
			l.C.Errors.Add(1)
		}
		l.C.lastEnd.Store(time.Now().UnixNano())
		l.C.inFlight.Add(-1)
	}()
	cm, ok, err := o.getConfigMap(ctx, key)
	if err != nil || !ok {
		return false, err
	}
	if l.Shape == Child {
		return false, l.child(ctx, o, cm)
	}
	return l.steps(ctx, o, cm)
}

func (l Logic) steps(ctx context.Context, o ops, cm *corev1.ConfigMap) (bool, error) {
	spec := cm.Data[SpecKey]
	step, _ := strconv.Atoi(cm.Annotations[StepAnno])
	if cm.Annotations[ObservedAnno] == spec && step >= NumSteps {
		return false, nil
	}
	if cm.Annotations[ObservedAnno] != spec {
		step = 0
	}
	upd := cm.DeepCopy()
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	upd.Annotations[ObservedAnno] = spec
	upd.Annotations[StepAnno] = strconv.Itoa(step + 1)
	if err := l.update(ctx, o, upd); err != nil {
		return false, err
	}
	return true, nil
}

func (l Logic) child(ctx context.Context, o ops, cm *corev1.ConfigMap) error {
	spec := cm.Data[SpecKey]
	children, err := o.listChildren(ctx, cm)
	if err != nil {
		return err
	}
	have := false
	for _, s := range children {
		if !metav1.IsControlledBy(s, cm) {
			continue
		}
		if s.Labels[SpecLabel] == spec {
			have = true
			continue
		}
		if err := o.deleteSecret(ctx, s); err != nil {
			if apierrors.IsNotFound(err) {
				continue // deleted already: the cache was behind
			}
			return fmt.Errorf("rywcost: delete %s: %w", s.Name, err)
		}
		l.C.Writes.Add(1)
	}
	if !have {
		if err := o.createSecret(ctx, newChild(cm, spec)); err != nil {
			return fmt.Errorf("rywcost: create child of %s: %w", cm.Name, err)
		}
		l.C.Writes.Add(1)
	}
	if cm.Annotations[ObservedAnno] == spec {
		return nil
	}
	upd := cm.DeepCopy()
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	upd.Annotations[ObservedAnno] = spec
	return l.update(ctx, o, upd)
}

func (l Logic) update(ctx context.Context, o ops, cm *corev1.ConfigMap) error {
	if err := o.updateConfigMap(ctx, cm); err != nil {
		if apierrors.IsConflict(err) {
			l.C.Conflicts.Add(1)
		}
		return fmt.Errorf("rywcost: update %s: %w", cm.Name, err)
	}
	l.C.Writes.Add(1)
	return nil
}

// newChild is the Secret of cm for spec.
func newChild(cm *corev1.ConfigMap, spec string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    cm.Namespace,
			GenerateName: cm.Name + "-",
			Labels:       map[string]string{OwnerLabel: cm.Name, SpecLabel: spec},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID,
				Controller: ptr.To(true),
			}},
		},
		StringData: map[string]string{"spec": spec},
	}
}

// Config configures a side.
type Config struct {
	Namespace      string // required
	Workers        int    // concurrent reconciles
	Logic          Logic
	ReadYourWrites bool
}

func (c Config) check() error {
	if c.Namespace == "" || c.Logic.C == nil || c.Workers < 1 {
		return errors.New("rywcost: namespace, counters and workers are required")
	}
	return nil
}

// Start starts a side's controller; stop cancels it and waits for it.
type Start func(ctx context.Context, restCfg *rest.Config, cfg Config) (stop func() error, err error)

// StartCtrlkit runs a ctrlkit manager with one controller of the ConfigMaps of
// cfg.Namespace (FromInformer ByObject) and, in the Child shape, of their
// Secrets (ByControllerOwner); managedFields stripped, reads from the
// informers' listers, writes through the manager's protobuf clientset, whose
// transport carries TrackWrites. ReadYourWrites false sets CacheWaitTimeout -1.
func StartCtrlkit(ctx context.Context, restCfg *rest.Config, cfg Config) (func() error, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	m, err := manager.New(manager.Config{RESTConfig: restCfg})
	if err != nil {
		return nil, fmt.Errorf("rywcost: ctrlkit manager: %w", err)
	}
	cms, err := manager.Typed[*corev1.ConfigMap](m, manager.Options[*corev1.ConfigMap]{
		Namespace: cfg.Namespace,
		Transform: reflector.StripManagedFields[*corev1.ConfigMap],
	})
	if err != nil {
		return nil, fmt.Errorf("rywcost: ctrlkit informer: %w", err)
	}
	o := &ctrlkitOps{kube: m.Kubernetes(), cms: cms.Lister()}
	var secretSrc reconcile.Source[types.NamespacedName]
	if cfg.Logic.Shape == Child {
		secrets, err := manager.Typed[*corev1.Secret](m, manager.Options[*corev1.Secret]{
			Namespace: cfg.Namespace,
			Transform: reflector.StripManagedFields[*corev1.Secret],
		})
		if err != nil {
			return nil, fmt.Errorf("rywcost: ctrlkit informer: %w", err)
		}
		o.secrets = secrets.Lister()
		secretSrc = reconcile.FromInformer(secrets, reconcile.ByControllerOwner[*corev1.Secret](schema.GroupKind{Kind: "ConfigMap"}))
	}
	wait := time.Duration(0)
	if !cfg.ReadYourWrites {
		wait = -1
	}
	logic := cfg.Logic
	c := reconcile.New(reconcile.Func[types.NamespacedName](func(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
		requeue, err := logic.reconcile(ctx, o, key)
		if requeue {
			return reconcile.Result{RequeueAfter: requeueAfterWrite}, err
		}
		return reconcile.Result{}, err
	}), reconcile.Config[types.NamespacedName]{Name: "rywcost", Workers: cfg.Workers, CacheWaitTimeout: wait})
	if err := c.Watch(reconcile.FromInformer(cms, reconcile.ByObject[*corev1.ConfigMap]())); err != nil {
		return nil, fmt.Errorf("rywcost: ctrlkit watch: %w", err)
	}
	if secretSrc != nil {
		if err := c.Watch(secretSrc); err != nil {
			return nil, fmt.Errorf("rywcost: ctrlkit watch: %w", err)
		}
	}
	if err := m.Add(c); err != nil {
		return nil, fmt.Errorf("rywcost: ctrlkit add: %w", err)
	}
	return run(ctx, m.Run), nil
}

type ctrlkitOps struct {
	kube    kubernetes.Interface
	cms     *indexer.Lister[*corev1.ConfigMap]
	secrets *indexer.Lister[*corev1.Secret]
}

func (o *ctrlkitOps) getConfigMap(_ context.Context, key types.NamespacedName) (*corev1.ConfigMap, bool, error) {
	cm, err := o.cms.Get(key.Namespace, key.Name)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	return cm, err == nil, err
}

func (o *ctrlkitOps) listChildren(_ context.Context, cm *corev1.ConfigMap) ([]*corev1.Secret, error) {
	return o.secrets.Namespace(cm.Namespace).List(labels.SelectorFromSet(labels.Set{OwnerLabel: cm.Name}))
}

func (o *ctrlkitOps) updateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	_, err := o.kube.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

func (o *ctrlkitOps) createSecret(ctx context.Context, s *corev1.Secret) error {
	_, err := o.kube.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
	return err
}

func (o *ctrlkitOps) deleteSecret(ctx context.Context, s *corev1.Secret) error {
	return o.kube.CoreV1().Secrets(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{})
}

// StartControllerRuntime runs a controller-runtime manager with one controller
// For(&ConfigMap{}) and, in the Child shape, Owns(&Secret{}); the cache limited
// to cfg.Namespace with managedFields stripped, MaxConcurrentReconciles
// cfg.Workers, reads and writes through the manager's client. ReadYourWrites
// sets client.CacheOptions.EnableReadYourWritesConsistency.
func StartControllerRuntime(ctx context.Context, restCfg *rest.Config, cfg Config) (func() error, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	opts := latency.ManagerOptions(cfg.Namespace)
	if cfg.ReadYourWrites {
		opts.Client = client.Options{Cache: &client.CacheOptions{EnableReadYourWritesConsistency: ptr.To(true)}}
	}
	mgr, err := crmanager.New(restCfg, opts)
	if err != nil {
		return nil, fmt.Errorf("rywcost: controller-runtime manager: %w", err)
	}
	o := crOps{mgr.GetClient()}
	logic := cfg.Logic
	b := builder.ControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}).
		WithOptions(crcontroller.Options{
			MaxConcurrentReconciles: cfg.Workers,
			SkipNameValidation:      ptr.To(true), // one manager after another in one process
		})
	if logic.Shape == Child {
		b = b.Owns(&corev1.Secret{})
	}
	err = b.Complete(crreconcile.Func(func(ctx context.Context, req crreconcile.Request) (crreconcile.Result, error) {
		requeue, err := logic.reconcile(ctx, o, req.NamespacedName)
		if requeue {
			return crreconcile.Result{RequeueAfter: requeueAfterWrite}, err
		}
		return crreconcile.Result{}, err
	}))
	if err != nil {
		return nil, fmt.Errorf("rywcost: controller-runtime controller: %w", err)
	}
	return run(ctx, mgr.Start), nil
}

type crOps struct{ c client.Client }

func (o crOps) getConfigMap(ctx context.Context, key types.NamespacedName) (*corev1.ConfigMap, bool, error) {
	var cm corev1.ConfigMap
	if err := o.c.Get(ctx, key, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return &cm, true, nil
}

func (o crOps) listChildren(ctx context.Context, cm *corev1.ConfigMap) ([]*corev1.Secret, error) {
	var list corev1.SecretList
	if err := o.c.List(ctx, &list, client.InNamespace(cm.Namespace), client.MatchingLabels{OwnerLabel: cm.Name}); err != nil {
		return nil, err
	}
	out := make([]*corev1.Secret, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

func (o crOps) updateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	return o.c.Update(ctx, cm)
}

func (o crOps) createSecret(ctx context.Context, s *corev1.Secret) error { return o.c.Create(ctx, s) }

func (o crOps) deleteSecret(ctx context.Context, s *corev1.Secret) error { return o.c.Delete(ctx, s) }

// run calls fn in a goroutine with a context derived from ctx and returns the
// function that cancels it and waits for fn's error.
func run(ctx context.Context, fn func(context.Context) error) func() error {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}
