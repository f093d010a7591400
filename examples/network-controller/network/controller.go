package network

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/ctrlkit/ctrlkit/examples/network-controller/backend"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// Defaults of Options fields left zero.
const (
	DefaultWorkers           = 2
	DefaultResyncPeriod      = 10 * time.Minute
	DefaultOrphanSweepPeriod = time.Minute
	DefaultBackendTimeout    = 10 * time.Second
	// MaxConflictRetries is how many times one write is retried from fresh state after
	// a 409 Conflict before the reconcile fails (and is retried with backoff).
	MaxConflictRetries = 5
)

// Options configures a Controller. The zero value works except for BackendURL, which
// is required.
type Options struct {
	Workers      int               // 0 means DefaultWorkers
	Logger       logr.Logger       // zero value: discard
	Metrics      reconcile.Metrics // may be nil; passed to reconcile.Config.Metrics
	QueueMetrics workqueue.Metrics // may be nil; passed to reconcile.Config.QueueMetrics

	// Namespace limits the controller to the Networks of one namespace, and its orphan
	// sweep to the backend networks of that namespace. "" means all namespaces.
	Namespace string
	// BackendURL is the base URL of the network backend (package backend), such as
	// "http://127.0.0.1:8080". Required.
	BackendURL string
	// HTTPClient sends the backend requests. Nil means a client whose requests time
	// out after DefaultBackendTimeout.
	HTTPClient *http.Client
	// ResyncPeriod is how often every Network is reconciled again even if unchanged,
	// which repairs drift in the backend (a network changed or deleted behind the
	// controller's back). 0 means DefaultResyncPeriod; negative means never.
	ResyncPeriod time.Duration
	// OrphanSweepPeriod is how often the backend is listed to find networks that have
	// no Network object (orphans), which are then deleted. A sweep also runs when the
	// controller starts. 0 means DefaultOrphanSweepPeriod; negative means only at
	// start.
	OrphanSweepPeriod time.Duration
	// Sharded makes the controller one of the replicas of m's group
	// (manager.Config.Sharding, which m must have): its Network cache holds only
	// this replica's share (manager.ShardByObject) and it reconciles only the
	// keys this replica owns (manager.AddSharded with manager.OwnsKey), a
	// deleted or orphaned network's included: each key by one replica at most.
	Sharded bool
}

// Controller reconciles Network objects against the backend. Create it with New,
// which adds it to a manager.Manager; the manager's Run runs it. Its methods are
// safe for concurrent use; the zero value is not usable.
//
// Cost: Workers worker goroutines, a handler goroutine and the orphan sweep's
// goroutine while it runs; the cache of the Networks (as unstructured objects) is
// the manager's shared informer.
type Controller struct {
	opts     Options
	log      logr.Logger
	networks dynamic.NamespaceableResourceInterface
	inf      *informer.Informer[*Network]
	ctrl     *reconcile.Controller[types.NamespacedName]
	backend  *backend.Client
}

// New builds the controller on m's dynamic client and shared Network informer and
// adds it to m (manager.Manager.Add); it starts nothing, and m.Run runs it. The
// Network CRD must be installed (Install), since m looks its resource up. The
// informer (manager.Custom) decodes the server's JSON into *Network; the dynamic
// client writes.
func New(m *manager.Manager, opts Options) (_ *Controller, err error) {
	if m == nil {
		return nil, errors.New("network: nil manager")
	}
	if opts.BackendURL == "" {
		return nil, errors.New("network: Options.BackendURL is required")
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: DefaultBackendTimeout}
	}
	bc, err := backend.NewClient(opts.BackendURL, hc)
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
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
	if opts.OrphanSweepPeriod == 0 {
		opts.OrphanSweepPeriod = DefaultOrphanSweepPeriod
	}
	log := opts.Logger
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	c := &Controller{
		opts:     opts,
		log:      log,
		networks: m.Dynamic().Resource(GroupVersionResource),
		backend:  bc,
	}
	shard := manager.Whole
	if opts.Sharded {
		shard = manager.ShardByObject
	}
	c.inf, err = manager.Custom[*Network](m, GroupVersionKind, manager.Options[*Network]{
		Namespace: opts.Namespace,
		Transform: reflector.StripManagedFields[*Network],
		Shard:     shard,
	})
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	defer func() {
		if err != nil {
			manager.Release(m, c.inf) // not used after all
		}
	}()
	c.ctrl = reconcile.New[types.NamespacedName](reconcile.Func[types.NamespacedName](c.reconcile), reconcile.Config[types.NamespacedName]{
		Name:         "network",
		Workers:      opts.Workers,
		ResyncPeriod: opts.ResyncPeriod,
		Logger:       log,
		Metrics:      opts.Metrics,
		QueueMetrics: opts.QueueMetrics,
		FairnessKey:  func(k types.NamespacedName) string { return k.Namespace },
		Restrictable: opts.Sharded,
	})
	// Every change of a Network, status writes included: a status changed behind the
	// controller's back is repaired, and the controller's own status writes end in a
	// reconcile that finds nothing to do.
	if err := c.ctrl.Watch(reconcile.FromInformer(c.inf, reconcile.ByObject[*Network]())); err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	if err := c.ctrl.Watch(&orphanSweep{c: c}); err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	if opts.Sharded {
		err = manager.AddSharded(m, c.ctrl, manager.OwnsKey)
	} else {
		err = m.Add(c.ctrl)
	}
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	return c, nil
}

// WaitForCache waits until the controller's informer has applied resourceVersion rv
// (see informer.Informer.WaitForResourceVersion).
func (c *Controller) WaitForCache(ctx context.Context, rv string) error {
	return c.inf.WaitForResourceVersion(ctx, rv)
}

// reconcile brings the backend in line with the Network key and reports the outcome
// in its status. The workers call it, never for the same key at once.
func (c *Controller) reconcile(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
	cached, err := c.inf.Lister().Get(key.Namespace, key.Name)
	if apierrors.IsNotFound(err) {
		// No object: whatever the backend has under this key is an orphan (an object
		// deleted without our finalizer running, or a network created behind our back).
		return reconcile.Result{}, c.deleteOrphan(ctx, log, key)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	// The cache is shared and read-only; the writes below change n.
	n := cached.DeepCopy()
	if n.DeletionTimestamp != nil {
		return reconcile.Result{}, c.finalize(ctx, log, n)
	}
	if !slices.Contains(n.Finalizers, Finalizer) {
		n, err = c.update(ctx, n, false, func(n *Network) bool {
			if n.DeletionTimestamp != nil || slices.Contains(n.Finalizers, Finalizer) {
				return false
			}
			n.Finalizers = append(n.Finalizers, Finalizer)
			return true
		})
		if err != nil || n == nil {
			return reconcile.Result{}, ignoreNotFound(err)
		}
		if n.DeletionTimestamp != nil {
			return reconcile.Result{}, nil // deleted meanwhile: the next reconcile finalizes
		}
	}

	if err := n.Spec.Validate(); err != nil {
		var se *SpecError
		msg := err.Error()
		if errors.As(err, &se) {
			msg = se.Message
		}
		log.V(1).Info("invalid spec", "message", msg)
		// Nothing to retry until the spec changes, which enqueues the key again.
		return reconcile.Result{}, c.setReady(ctx, n, metav1.ConditionFalse, ReasonInvalidSpec, msg)
	}

	want := backend.Network{Namespace: n.Namespace, Name: n.Name, Owner: string(n.UID), Spec: backend.Spec{CIDR: n.Spec.CIDR, Gateway: n.Spec.Gateway}}
	have, err := c.backend.Get(ctx, n.Namespace, n.Name)
	if missing := errors.Is(err, backend.ErrNotFound); missing || err == nil && (have.Spec != want.Spec || have.Owner != want.Owner) {
		// Missing, drifted from the spec, or left by an earlier Network of this
		// name: create or replace it.
		var created bool
		created, err = c.backend.Put(ctx, want)
		if err == nil {
			log.Info("backend network provisioned", "created", created, "cidr", want.CIDR, "gateway", want.Gateway)
		}
	}
	if err != nil {
		c.backendFailed(ctx, log, n, err)
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, c.setReady(ctx, n, metav1.ConditionTrue, ReasonProvisioned,
		fmt.Sprintf("network %s via %s is provisioned in the backend", want.CIDR, want.Gateway))
}

// finalize deletes the backend network of n, which is being deleted, then removes the
// finalizer so that the API server can delete n.
func (c *Controller) finalize(ctx context.Context, log logr.Logger, n *Network) error {
	if !slices.Contains(n.Finalizers, Finalizer) {
		return nil // done already; other finalizers are not ours to wait for
	}
	// Only the network made for n: one of another UID belongs to a Network
	// re-created under this name since.
	err := c.backend.DeleteOwned(ctx, n.Namespace, n.Name, string(n.UID))
	if err != nil && !errors.Is(err, backend.ErrNotFound) && !errors.Is(err, backend.ErrOwnerMismatch) {
		c.backendFailed(ctx, log, n, err)
		return err
	}
	_, err = c.update(ctx, n, false, func(n *Network) bool {
		i := slices.Index(n.Finalizers, Finalizer)
		if i < 0 {
			return false
		}
		n.Finalizers = slices.Delete(n.Finalizers, i, i+1)
		return true
	})
	if err == nil {
		log.Info("backend network deleted, finalizer removed")
	}
	return ignoreNotFound(err)
}

// deleteOrphan deletes the backend network of key, for which the cache holds no
// Network. It never deletes the network of a live Network: it asks the API server
// (not the cache, which may be behind) whether a Network of the network's owner UID
// exists, and deletes only on the condition that the network still belongs to that
// owner, so that one re-provisioned meanwhile for a Network re-created under this
// name stays.
func (c *Controller) deleteOrphan(ctx context.Context, log logr.Logger, key types.NamespacedName) error {
	have, err := c.backend.Get(ctx, key.Namespace, key.Name)
	if errors.Is(err, backend.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	u, err := c.networks.Namespace(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	switch {
	case err == nil && (have.Owner == "" || string(u.GetUID()) == have.Owner):
		// Live: the cache is behind. Its reconcile keeps the network.
		log.V(1).Info("backend network kept: its Network exists", "uid", u.GetUID())
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("network: reading %s before deleting its backend network: %w", key, err)
	}
	err = c.backend.DeleteOwned(ctx, key.Namespace, key.Name, have.Owner)
	switch {
	case err == nil:
		log.Info("orphaned backend network deleted", "owner", have.Owner)
		return nil
	case errors.Is(err, backend.ErrNotFound), errors.Is(err, backend.ErrOwnerMismatch):
		return nil // gone, or re-provisioned for another Network meanwhile
	}
	return err
}

// backendFailed reports a backend error in n's Ready condition. The reconcile fails
// anyway and is retried, so a failure to write the status is only logged.
func (c *Controller) backendFailed(ctx context.Context, log logr.Logger, n *Network, err error) {
	if serr := c.setReady(ctx, n, metav1.ConditionFalse, ReasonBackendError, err.Error()); serr != nil {
		log.Error(serr, "writing the BackendError condition")
	}
}

// setReady writes the Ready condition and observedGeneration for n's generation into
// the status subresource, unless they already say so.
func (c *Controller) setReady(ctx context.Context, n *Network, status metav1.ConditionStatus, reason, message string) error {
	gen := n.Generation
	_, err := c.update(ctx, n, true, func(n *Network) bool {
		cur := meta.FindStatusCondition(n.Status.Conditions, ConditionReady)
		if cur != nil && cur.Status == status && cur.Reason == reason && cur.Message == message &&
			cur.ObservedGeneration == gen && n.Status.ObservedGeneration == gen {
			return false
		}
		meta.SetStatusCondition(&n.Status.Conditions, metav1.Condition{
			Type: ConditionReady, Status: status, Reason: reason, Message: message, ObservedGeneration: gen,
		})
		n.Status.ObservedGeneration = gen
		return true
	})
	return ignoreNotFound(err)
}

// update applies mutate to n and writes the result (to the status subresource if
// status is set), unless mutate reports no change. On a 409 Conflict it reads the
// object again from the API server (not from the cache, which may still be behind)
// and starts over with mutate, up to MaxConflictRetries times. It returns the object
// as written (or as read, if nothing had to change); n itself may be changed.
func (c *Controller) update(ctx context.Context, n *Network, status bool, mutate func(*Network) bool) (*Network, error) {
	res := c.networks.Namespace(n.Namespace)
	for attempt := 0; ; attempt++ {
		if !mutate(n) {
			return n, nil
		}
		u, err := ToUnstructured(n)
		if err != nil {
			return nil, reconcile.Terminal(err)
		}
		if status {
			u, err = res.UpdateStatus(ctx, u, metav1.UpdateOptions{})
		} else {
			u, err = res.Update(ctx, u, metav1.UpdateOptions{})
		}
		if err == nil {
			return FromUnstructured(u)
		}
		if !apierrors.IsConflict(err) || attempt >= MaxConflictRetries {
			return nil, fmt.Errorf("network: updating %s/%s: %w", n.Namespace, n.Name, err)
		}
		logr.FromContextOrDiscard(ctx).V(1).Info("conflict, retrying from fresh state", "attempt", attempt+1)
		if u, err = res.Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("network: re-reading %s/%s after a conflict: %w", n.Namespace, n.Name, err)
		}
		if n, err = FromUnstructured(u); err != nil {
			return nil, reconcile.Terminal(err)
		}
	}
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
