package podset

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/indexer"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// Defaults of Options.
const (
	DefaultWorkers      = 4
	DefaultResyncPeriod = 10 * time.Minute
	// maxBurst bounds the creations or deletions one reconcile issues, so that a
	// PodSet scaled to a huge number advances in steps the cache can follow.
	maxBurst = 500
)

// Options configures the controller. The zero value works: DefaultWorkers workers,
// logs discarded, no metrics, every namespace, read-your-writes on (with
// reconcile.DefaultCacheWaitTimeout), a resync every DefaultResyncPeriod.
type Options struct {
	Workers      int               // 0 means DefaultWorkers
	Logger       logr.Logger       // zero value: discard
	Metrics      reconcile.Metrics // may be nil; passed to reconcile.Config.Metrics
	QueueMetrics workqueue.Metrics // may be nil; passed to reconcile.Config.QueueMetrics

	// Namespace restricts the controller to the PodSets and Pods of one namespace;
	// "" means every namespace.
	Namespace string
	// ResyncPeriod is how often every PodSet is reconciled even without a change
	// (reconcile.Config.ResyncPeriod). 0 means DefaultResyncPeriod; negative, never.
	ResyncPeriod time.Duration

	// WrapPods, if set, wraps the ListerWatcher of the Pod informer. Tests use it to
	// hold watch events back and make the cache lag behind the server. The Pod
	// informer is then the controller's own, not the manager's shared one (a shared
	// informer's events cannot be held back for one of its users): New adds it to
	// the manager, which runs it beside the controller. Its informer.Config.Scope
	// names the Pods of Namespace, as the manager's would, so that read-your-writes
	// waits for it.
	WrapPods func(reflector.ListerWatcher[*corev1.Pod]) reflector.ListerWatcher[*corev1.Pod]
	// UnsafeNoReadYourWrites turns read-your-writes off
	// (reconcile.Config.CacheWaitTimeout < 0): the controller then acts on whatever
	// its cache shows, even while its own writes are missing from it, and creates
	// too many Pods when the cache lags. It exists only to show that race in tests;
	// never set it.
	UnsafeNoReadYourWrites bool
	// Sharded makes the controller one of the replicas of m's group
	// (manager.Config.Sharding, which m must have): its PodSet cache holds only
	// this replica's share (manager.ShardByObject), its Pod cache the Pods of
	// those PodSets (manager.ShardByController: a Pod is placed by its
	// controller's key, or with Field reflector.ShardByNamespace by its
	// namespace, so that it lands with its PodSet), and it reconciles only the
	// keys it owns (manager.AddSharded with manager.OwnsKey). By name, a Pod
	// without a controller is placed by its own key: a replica adopts only the
	// orphans it sees, for its own PodSets. Not with WrapPods.
	Sharded bool
}

// Controller keeps, for every PodSet, Spec.Replicas Pods that it controls (an owner
// reference with controller: true): it creates and deletes Pods, adopts orphan Pods
// its selector matches, releases the Pods it no longer matches, and writes the
// status. See the package documentation for the guarantees.
//
// Create it with New, which adds it to a manager.Manager; the manager's Run runs
// it. Its methods are safe for concurrent use. Cost: one reconcile goroutine per
// worker and one handler on each of its two informers while it runs; the PodSet
// and Pod caches are the manager's shared informers (of Options.Namespace,
// managedFields stripped).
type Controller struct {
	opts    Options
	kube    kubernetes.Interface
	dyn     dynamic.NamespaceableResourceInterface
	podSets *informer.Informer[*PodSet]
	pods    *informer.Informer[*corev1.Pod]
	loop    *reconcile.Controller[types.NamespacedName]
}

// New builds the controller on m's clients and shared informers and adds it to m
// (manager.Manager.Add); it starts nothing, and m.Run runs it. The PodSet CRD must
// be installed (Install), since m looks its resource up. m's identity needs the
// rights of the controller's ClusterRole in rbac.yaml.
func New(m *manager.Manager, opts Options) (_ *Controller, err error) {
	if m == nil {
		return nil, errors.New("podset: nil manager")
	}
	if opts.Sharded && opts.WrapPods != nil {
		return nil, errors.New("podset: Options.Sharded and WrapPods exclude each other")
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	switch {
	case opts.ResyncPeriod == 0:
		opts.ResyncPeriod = DefaultResyncPeriod
	case opts.ResyncPeriod < 0:
		opts.ResyncPeriod = 0
	}
	c := &Controller{opts: opts, kube: m.Kubernetes(), dyn: m.Dynamic().Resource(GroupVersionResource)}

	shard := manager.Whole
	if opts.Sharded {
		shard = manager.ShardByObject
	}
	c.podSets, err = manager.Custom[*PodSet](m, GroupVersionKind, manager.Options[*PodSet]{
		Namespace: opts.Namespace,
		Transform: reflector.StripManagedFields[*PodSet],
		Shard:     shard,
	})
	if err != nil {
		return nil, fmt.Errorf("podset: %w", err)
	}
	defer func() {
		if err != nil {
			manager.Release(m, c.podSets) // not used after all
		}
	}()
	if c.pods, err = c.podInformer(m); err != nil {
		return nil, err
	}
	if opts.WrapPods == nil {
		defer func() {
			if err != nil {
				manager.Release(m, c.pods)
			}
		}()
	}

	c.loop = reconcile.New(reconcile.Func[types.NamespacedName](c.reconcile), loopConfig(opts))
	if err := c.loop.Watch(reconcile.FromInformer(c.podSets, reconcile.ByObject[*PodSet]())); err != nil {
		return nil, fmt.Errorf("podset: %w", err)
	}
	// Both sources come from reconcile.FromInformer, so that read-your-writes
	// knows their caches: a reconcile that created, deleted or patched Pods, or
	// wrote a status, is not followed by another of the same PodSet until the
	// Pod and PodSet caches show those writes.
	if err := c.loop.Watch(reconcile.FromInformer(c.pods, c.podSetsOf, podEvents)); err != nil {
		return nil, fmt.Errorf("podset: %w", err)
	}
	if opts.WrapPods != nil {
		if err := m.Add(c.pods); err != nil {
			return nil, fmt.Errorf("podset: %w", err)
		}
	}
	if opts.Sharded {
		err = manager.AddSharded(m, c.loop, manager.OwnsKey)
	} else {
		err = m.Add(c.loop)
	}
	if err != nil {
		return nil, fmt.Errorf("podset: %w", err)
	}
	return c, nil
}

// loopConfig is the configuration of the controller's reconcile loop; opts has
// its defaults applied.
func loopConfig(opts Options) reconcile.Config[types.NamespacedName] {
	cfg := reconcile.Config[types.NamespacedName]{
		Name:         "podset",
		Workers:      opts.Workers,
		ResyncPeriod: opts.ResyncPeriod,
		Logger:       opts.Logger,
		Metrics:      opts.Metrics,
		QueueMetrics: opts.QueueMetrics,
		Restrictable: opts.Sharded,
	}
	if opts.UnsafeNoReadYourWrites {
		cfg.CacheWaitTimeout = -1
	}
	return cfg
}

// podInformer returns the Pod informer: m's shared one, indexed by controller, or,
// with Options.WrapPods, one of the controller's own, which New adds to m as a
// Runnable.
func (c *Controller) podInformer(m *manager.Manager) (*informer.Informer[*corev1.Pod], error) {
	indexers := indexer.Indexers[*corev1.Pod]{byController: controllerIndex}
	if c.opts.WrapPods == nil {
		shard := manager.Whole
		if c.opts.Sharded {
			shard = manager.ShardByController
		}
		pods, err := manager.Typed[*corev1.Pod](m, manager.Options[*corev1.Pod]{
			Namespace: c.opts.Namespace,
			Transform: reflector.StripManagedFields[*corev1.Pod],
			Indexers:  indexers,
			Shard:     shard,
		})
		if err != nil {
			return nil, fmt.Errorf("podset: %w", err)
		}
		return pods, nil
	}
	lw := c.opts.WrapPods(reflector.FromREST[*corev1.Pod](c.kube.CoreV1().RESTClient(), "pods", c.opts.Namespace))
	pods := informer.New(lw, informer.Config[*corev1.Pod]{
		Name:      "pods (podset's own)",
		Indexers:  indexers,
		Transform: reflector.StripManagedFields[*corev1.Pod],
		Logger:    c.opts.Logger,
		Scope:     informer.Scope{Resource: schema.GroupResource{Resource: "pods"}, Namespace: c.opts.Namespace},
	})
	return pods, nil
}

// WaitForCache waits until the PodSet informer has applied resourceVersion rv (that
// of a PodSet write), so that a caller can measure cache lag.
func (c *Controller) WaitForCache(ctx context.Context, rv string) error {
	return c.podSets.WaitForResourceVersion(ctx, rv)
}

// reconcile brings one PodSet's Pods in line with its spec. It trusts its caches:
// read-your-writes (see reconcile.TrackWrites; the manager's clients track) runs
// it for a PodSet only once the Pod and PodSet caches show what its previous
// reconcile of that PodSet wrote, so Pods it created are never missing from the
// cache, nor Pods it deleted still in it.
func (c *Controller) reconcile(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
	// The cache is shared and read-only: nothing below changes ps, so no copy.
	ps, err := c.podSets.Lister().Get(key.Namespace, key.Name)
	if apierrors.IsNotFound(err) {
		// Its Pods carry an owner reference to it: the garbage collector deletes
		// them.
		log.V(1).Info("PodSet gone, leaving its Pods to the garbage collector")
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	sel, err := ps.selector()
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err)
	}
	// The Pods it controls and the orphans of its namespace: all it may claim.
	candidates, err := c.pods.Indexer().AppendByIndex(nil, byController, string(ps.UID))
	if err == nil {
		candidates, err = c.pods.Indexer().AppendByIndex(candidates, byController, orphanValue(ps.Namespace))
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	owned, claimErr := c.claim(ctx, ps, sel, candidates)

	var manageErr error
	if ps.DeletionTimestamp == nil && claimErr == nil {
		manageErr = c.manage(ctx, ps, owned)
	}
	statusErr := c.writeStatus(ctx, ps, sel, owned)
	return reconcile.Result{}, errors.Join(claimErr, manageErr, statusErr)
}

// byController is the name of the Pod cache's index by controller: the UID of a
// Pod's controller, or orphanValue(namespace) for a Pod without one. The cache may
// be shared with other controllers of the manager: the name says what it computes.
const byController = "controller-uid-or-orphan"

func controllerIndex(p *corev1.Pod) ([]string, error) {
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil {
		return []string{string(ref.UID)}, nil
	}
	return []string{orphanValue(p.Namespace)}, nil
}

// orphanValue is the index value of the orphans of a namespace; a UID never
// contains a slash.
func orphanValue(namespace string) string { return "orphan/" + namespace }

// claim returns the active Pods of ps: those it controls and its selector matches,
// plus the orphans it matches, which it adopts. It releases the Pods it controls
// but no longer matches. pods are the cached Pods it controls and the orphans of its
// namespace.
func (c *Controller) claim(ctx context.Context, ps *PodSet, sel labels.Selector, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	var owned, orphans []*corev1.Pod
	var errs []error
	for _, p := range pods {
		if !isActive(p) {
			continue
		}
		ref := metav1.GetControllerOfNoCopy(p)
		switch {
		case ref != nil && ref.UID == ps.UID:
			if sel.Matches(labels.Set(p.Labels)) {
				owned = append(owned, p)
			} else if ps.DeletionTimestamp == nil {
				errs = append(errs, c.release(ctx, ps, p))
			}
		case ref == nil && ps.DeletionTimestamp == nil && sel.Matches(labels.Set(p.Labels)):
			orphans = append(orphans, p)
		}
	}
	if len(orphans) == 0 {
		return owned, errors.Join(errs...)
	}
	// The cache may be stale: adopt only if the PodSet, read from the server, is
	// still the same object and not being deleted, or the adopted Pods would be
	// deleted with an owner that no longer wants them.
	fresh, err := c.dyn.Namespace(ps.Namespace).Get(ctx, ps.Name, metav1.GetOptions{})
	switch {
	case err != nil:
		return owned, errors.Join(append(errs, fmt.Errorf("podset: check %s/%s before adopting: %w", ps.Namespace, ps.Name, err))...)
	case fresh.GetUID() != ps.UID || fresh.GetDeletionTimestamp() != nil:
		return owned, errors.Join(errs...)
	}
	for _, p := range orphans {
		switch err := c.adopt(ctx, ps, p); {
		case err == nil:
			owned = append(owned, p)
		case apierrors.IsNotFound(err), apierrors.IsInvalid(err), apierrors.IsConflict(err):
			// Gone, replaced by another Pod of that name, or adopted by another
			// controller meanwhile: not ours.
		default:
			errs = append(errs, err)
		}
	}
	return owned, errors.Join(errs...)
}

// ownerRef is the controller reference of ps's Pods. Its apiVersion and kind are
// the package's: the informer leaves ps.TypeMeta empty.
func ownerRef(ps *PodSet) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         Group + "/" + Version,
		Kind:               Kind,
		Name:               ps.Name,
		UID:                ps.UID,
		Controller:         new(true),
		BlockOwnerDeletion: new(true),
	}
}

// adopt adds ps's controller reference to the orphan p, with a strategic merge
// patch (owner references merge by uid) that fails if p was replaced by another Pod
// of the same name.
func (c *Controller) adopt(ctx context.Context, ps *PodSet, p *corev1.Pod) error {
	ref := ownerRef(ps)
	patch := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":%q,"kind":%q,"name":%q,"uid":%q,"controller":true,"blockOwnerDeletion":true}],"uid":%q}}`,
		ref.APIVersion, ref.Kind, ref.Name, ref.UID, p.UID)
	_, err := c.kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("podset: adopt Pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	logr.FromContextOrDiscard(ctx).Info("adopted Pod", "pod", p.Name)
	return nil
}

// release removes ps's owner reference from p. A Pod that is gone or was replaced
// needs no release.
func (c *Controller) release(ctx context.Context, ps *PodSet, p *corev1.Pod) error {
	patch := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"$patch":"delete","uid":%q}],"uid":%q}}`, ps.UID, p.UID)
	_, err := c.kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
			return nil
		}
		return fmt.Errorf("podset: release Pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	logr.FromContextOrDiscard(ctx).Info("released Pod", "pod", p.Name)
	return nil
}

// manage creates or deletes Pods so that ps has its replicas; owned are the Pods
// it controls, from the cache.
func (c *Controller) manage(ctx context.Context, ps *PodSet, owned []*corev1.Pod) error {
	diff := len(owned) - ps.replicas()
	switch {
	case diff < 0:
		_, err := slowStart(min(-diff, maxBurst), func() error { return c.createPod(ctx, ps) })
		return err
	case diff > 0:
		victims := append([]*corev1.Pod(nil), owned...)
		deletionOrder(victims)
		return c.deletePods(ctx, victims[:min(diff, maxBurst)])
	}
	return nil
}

// slowStart calls create n times, in batches of 1, 2, 4, … calls in parallel,
// stopping after the first batch with a failure, so that a PodSet whose Pods cannot
// be created (a quota, an invalid template) costs one failed call, not n. It returns
// how many calls succeeded and the errors.
func slowStart(n int, create func() error) (int, error) {
	done := 0
	for batch := 1; done < n; batch *= 2 {
		batch = min(batch, n-done)
		errs := make([]error, batch)
		var wg sync.WaitGroup
		for i := range batch {
			wg.Go(func() { errs[i] = create() })
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			}
		}
		done += ok
		if ok < batch {
			return done, errors.Join(errs...)
		}
	}
	return done, nil
}

// createPod creates one Pod from ps's template, controlled by ps.
func (c *Controller) createPod(ctx context.Context, ps *PodSet) error {
	t := &ps.Spec.Template
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    ps.Name + "-",
			Namespace:       ps.Namespace,
			Labels:          maps.Clone(t.Labels),
			Annotations:     maps.Clone(t.Annotations),
			Finalizers:      append([]string(nil), t.Finalizers...),
			OwnerReferences: []metav1.OwnerReference{ownerRef(ps)},
		},
		Spec: *t.Spec.DeepCopy(),
	}
	created, err := c.kube.CoreV1().Pods(ps.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		err = fmt.Errorf("podset: create Pod for %s/%s: %w", ps.Namespace, ps.Name, err)
		if apierrors.IsInvalid(err) {
			// The template is invalid: retrying will not help until it changes.
			return reconcile.Terminal(err)
		}
		return err
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("created Pod", "pod", created.Name)
	return nil
}

// deletePods deletes victims in parallel, each only if it is still the Pod the
// cache showed (a UID precondition).
func (c *Controller) deletePods(ctx context.Context, victims []*corev1.Pod) error {
	errs := make([]error, len(victims))
	var wg sync.WaitGroup
	for i, p := range victims {
		wg.Go(func() {
			uid := p.UID
			err := c.kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if err == nil {
				logr.FromContextOrDiscard(ctx).V(1).Info("deleted Pod", "pod", p.Name)
				return
			}
			if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs[i] = fmt.Errorf("podset: delete Pod %s/%s: %w", p.Namespace, p.Name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// writeStatus writes ps's status through the status subresource if it changed. A
// merge patch of the whole status: no conflict with other writers of the object.
func (c *Controller) writeStatus(ctx context.Context, ps *PodSet, sel labels.Selector, owned []*corev1.Pod) error {
	st := PodSetStatus{Replicas: int32(len(owned)), ObservedGeneration: ps.Generation, Selector: sel.String()}
	for _, p := range owned {
		if isReady(p) {
			st.ReadyReplicas++
		}
	}
	if st == ps.Status {
		return nil
	}
	patch := fmt.Appendf(nil, `{"status":{"replicas":%d,"readyReplicas":%d,"observedGeneration":%d,"selector":%q}}`,
		st.Replicas, st.ReadyReplicas, st.ObservedGeneration, st.Selector)
	_, err := c.dyn.Namespace(ps.Namespace).Patch(ctx, ps.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("podset: write status of %s/%s: %w", ps.Namespace, ps.Name, err)
	}
	return nil
}
