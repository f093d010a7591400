package injector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/indexer"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

const (
	// DefaultConfigNamespace and DefaultConfigName name the sidecar ConfigMap when
	// Options leaves them empty.
	DefaultConfigNamespace = "ctrlkit-system"
	DefaultConfigName      = "sidecar-injector"

	// DefaultWorkers is the number of workers when Options.Workers is 0.
	DefaultWorkers = 2

	// DefaultResyncPeriod is the resync period when Options.ResyncPeriod is 0.
	DefaultResyncPeriod = 10 * time.Minute

	// FieldManager is the field manager of the controller's patches.
	FieldManager = "ctrlkit-sidecar-injector"

	// EventSource is the component named in the Events the controller records.
	EventSource = "sidecar-injector"

	// ConfigIndex begins the name of the index of the Deployment cache that maps
	// the sidecar ConfigMap's key ("namespace/name") to the Deployments that opt
	// in; the name goes on with "/" and that key, since the cache may be shared by
	// injectors of other ConfigMaps.
	ConfigIndex = "sidecar-config"
)

// Reasons of the Events the controller records on Deployments.
const (
	ReasonInjected      = "SidecarInjected"      // Normal: sidecar added
	ReasonReinjected    = "SidecarReinjected"    // Normal: sidecar replaced by the current definition
	ReasonRemoved       = "SidecarRemoved"       // Normal: sidecar taken out after opting out
	ReasonConfigMissing = "SidecarConfigMissing" // Warning: opted in, but the ConfigMap does not exist
	ReasonConfigInvalid = "SidecarConfigInvalid" // Warning: the ConfigMap's definition is unusable
	ReasonConflict      = "SidecarConflict"      // Warning: a sidecar name is already used by the Deployment
	ReasonRecordInvalid = "SidecarRecordInvalid" // Warning: RecordAnnotation was damaged
	ReasonRejected      = "SidecarRejected"      // Warning: the API server refused the patched Deployment
)

// ErrConfigNotFound is matched by the error of a reconcile that needed the sidecar
// ConfigMap while it does not exist.
var ErrConfigNotFound = errors.New("injector: sidecar ConfigMap not found")

// Options configures a Controller. The zero value works: two workers, the ConfigMap
// ctrlkit-system/sidecar-injector, Deployments of every namespace, a resync every ten
// minutes, no logs and no metrics.
type Options struct {
	Workers      int               // 0 means DefaultWorkers
	Logger       logr.Logger       // zero value: discard
	Metrics      reconcile.Metrics // may be nil; passed to reconcile.Config.Metrics
	QueueMetrics workqueue.Metrics // may be nil; passed to reconcile.Config.QueueMetrics

	// ConfigNamespace and ConfigName name the ConfigMap whose data key ConfigKey
	// holds the Sidecar. Empty means DefaultConfigNamespace and DefaultConfigName.
	ConfigNamespace string
	ConfigName      string

	// Namespace restricts the controller to the Deployments of one namespace; empty
	// means every namespace.
	Namespace string

	// ResyncPeriod is how often every opted-in Deployment is checked again although
	// nothing changed. 0 means DefaultResyncPeriod; negative means never.
	ResyncPeriod time.Duration

	// Sharded makes the controller one of the replicas of m's group
	// (manager.Config.Sharding, which m must have): its Deployment cache holds
	// only this replica's share (manager.ShardByObject) and it injects only into
	// those (manager.AddSharded). Every replica caches the sidecar ConfigMap, and
	// a change of it reaches each replica's own opted-in Deployments.
	Sharded bool
}

// Controller injects the sidecar defined in a ConfigMap into the pod template of every
// Deployment that opts in with InjectAnnotation, and takes it out again when the
// Deployment opts out; see the package documentation.
//
// Create it with New, which adds it to a manager.Manager; the manager's Run runs
// it. Its methods are safe for concurrent use. Cost: Options.Workers reconcile
// goroutines while it runs; its two caches (every Deployment in Options.Namespace,
// and the one ConfigMap) are the manager's shared informers.
type Controller struct {
	client      kubernetes.Interface
	log         logr.Logger
	cmNamespace string
	cmName      string
	cmKey       string // cmNamespace/cmName, the only value of ConfigIndex

	deployments *informer.Informer[*appsv1.Deployment]
	configMaps  *informer.Informer[*corev1.ConfigMap]
	ctl         *reconcile.Controller[types.NamespacedName]

	mu     sync.Mutex
	parsed parsedConfig // requires mu held
}

// parsedConfig remembers the last ConfigMap parsed, so that re-patching N Deployments
// parses the definition once.
type parsedConfig struct {
	uid, rv string // of the ConfigMap parsed; "" before the first
	sc      *Sidecar
	err     error
}

// Install does nothing and returns nil: the injector needs no CRD. It exists so that
// every example has the same API; the sidecar ConfigMap is the user's to create.
func Install(ctx context.Context, cfg *rest.Config) error { return nil }

// New builds the controller on m's clientset and shared informers and adds it to m
// (manager.Manager.Add); it starts nothing, and m.Run runs it. Every request goes
// through m's rest.Config (its WrapTransport, rate limits and credentials apply).
func New(m *manager.Manager, opts Options) (_ *Controller, err error) {
	if m == nil {
		return nil, errors.New("injector: nil manager")
	}
	if opts.Workers < 0 {
		return nil, fmt.Errorf("injector: negative Workers %d", opts.Workers)
	}
	if opts.Workers == 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.ConfigNamespace == "" {
		opts.ConfigNamespace = DefaultConfigNamespace
	}
	if opts.ConfigName == "" {
		opts.ConfigName = DefaultConfigName
	}
	switch {
	case opts.ResyncPeriod == 0:
		opts.ResyncPeriod = DefaultResyncPeriod
	case opts.ResyncPeriod < 0:
		opts.ResyncPeriod = 0
	}
	c := &Controller{
		client:      m.Kubernetes(),
		log:         opts.Logger.WithName("sidecar-injector"),
		cmNamespace: opts.ConfigNamespace,
		cmName:      opts.ConfigName,
		cmKey:       opts.ConfigNamespace + "/" + opts.ConfigName,
	}
	// A shared informer keeps the first index function of a name: the index's name
	// carries the ConfigMap's key that its function puts in.
	shard := manager.Whole
	if opts.Sharded {
		shard = manager.ShardByObject
	}
	c.deployments, err = manager.Typed[*appsv1.Deployment](m, manager.Options[*appsv1.Deployment]{
		Namespace: opts.Namespace,
		Transform: reflector.StripManagedFields[*appsv1.Deployment],
		Indexers:  indexer.Indexers[*appsv1.Deployment]{c.configIndexName(): c.configIndex},
		Shard:     shard,
	})
	if err != nil {
		return nil, fmt.Errorf("injector: %w", err)
	}
	defer func() {
		if err != nil {
			manager.Release(m, c.deployments) // not used after all
		}
	}()
	c.configMaps, err = manager.Typed[*corev1.ConfigMap](m, manager.Options[*corev1.ConfigMap]{
		Namespace:     opts.ConfigNamespace,
		FieldSelector: "metadata.name=" + opts.ConfigName,
		Transform:     reflector.StripManagedFields[*corev1.ConfigMap],
	})
	if err != nil {
		return nil, fmt.Errorf("injector: %w", err)
	}
	defer func() {
		if err != nil {
			manager.Release(m, c.configMaps)
		}
	}()
	c.ctl = reconcile.New(reconcile.Func[types.NamespacedName](c.reconcile), reconcile.Config[types.NamespacedName]{
		Name:         "sidecar-injector",
		Workers:      opts.Workers,
		ResyncPeriod: opts.ResyncPeriod,
		Logger:       c.log,
		Metrics:      opts.Metrics,
		QueueMetrics: opts.QueueMetrics,
		Restrictable: opts.Sharded,
	})
	// A Deployment is looked at when its annotations change (opting in or out, the
	// record) or its spec does (someone removed an injected container); status
	// updates are ignored.
	if err := c.ctl.Watch(reconcile.FromInformer(c.deployments, reconcile.ByObject[*appsv1.Deployment](),
		reconcile.Or(reconcile.AnnotationsChanged[*appsv1.Deployment](), reconcile.GenerationChanged[*appsv1.Deployment]()))); err != nil {
		return nil, fmt.Errorf("injector: %w", err)
	}
	// A change of the ConfigMap (created, edited, deleted) reaches every opted-in
	// Deployment through the index.
	if err := c.ctl.Watch(reconcile.FromInformer(c.configMaps, c.optedInDeployments)); err != nil {
		return nil, fmt.Errorf("injector: %w", err)
	}
	if opts.Sharded {
		err = manager.AddSharded(m, c.ctl, manager.OwnsKey)
	} else {
		err = m.Add(c.ctl)
	}
	if err != nil {
		return nil, fmt.Errorf("injector: %w", err)
	}
	return c, nil
}

// WaitForCache waits until the Deployment cache has applied resourceVersion rv
// (informer.Informer.WaitForResourceVersion), so a caller can measure cache lag.
func (c *Controller) WaitForCache(ctx context.Context, rv string) error {
	return c.deployments.WaitForResourceVersion(ctx, rv)
}

// configIndexName is the name of the Deployment cache's index of c's ConfigMap.
func (c *Controller) configIndexName() string { return ConfigIndex + "/" + c.cmKey }

// configIndex indexes opted-in Deployments under the sidecar ConfigMap's key.
func (c *Controller) configIndex(d *appsv1.Deployment) ([]string, error) {
	if OptedIn(d) {
		return []string{c.cmKey}, nil
	}
	return nil, nil
}

// optedInDeployments maps the sidecar ConfigMap to the keys of the Deployments that
// use it, through ConfigIndex.
func (c *Controller) optedInDeployments(cm *corev1.ConfigMap) []types.NamespacedName {
	if cm.Namespace != c.cmNamespace || cm.Name != c.cmName {
		return nil
	}
	ds, err := c.deployments.Indexer().ByIndex(c.configIndexName(), c.cmKey)
	if err != nil { // only for an unknown index, which New rules out
		c.log.Error(err, "reading the deployment index")
		return nil
	}
	keys := make([]types.NamespacedName, len(ds))
	for i, d := range ds {
		keys[i] = types.NamespacedName{Namespace: d.Namespace, Name: d.Name}
	}
	return keys
}

// sidecar returns the parsed definition of the ConfigMap in the cache.
func (c *Controller) sidecar() (*Sidecar, error) {
	cm, err := c.configMaps.Lister().Get(c.cmNamespace, c.cmName)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s", ErrConfigNotFound, c.cmKey)
	}
	if err != nil {
		return nil, fmt.Errorf("injector: reading ConfigMap %s: %w", c.cmKey, err)
	}
	uid, rv := string(cm.UID), cm.ResourceVersion
	c.mu.Lock()
	p := c.parsed
	c.mu.Unlock()
	if p.uid == uid && p.rv == rv {
		return p.sc, p.err
	}
	source := "ConfigMap " + c.cmKey
	p = parsedConfig{uid: uid, rv: rv}
	if data, ok := cm.Data[ConfigKey]; ok {
		p.sc, p.err = ParseSidecar(source, []byte(data))
	} else {
		p.err = &ConfigError{Source: source, Err: fmt.Errorf("no data key %q", ConfigKey)}
	}
	c.mu.Lock()
	c.parsed = p
	c.mu.Unlock()
	return p.sc, p.err
}

// reconcile brings one Deployment in line: see ComputePatch. Problems that only a
// change of the Deployment or of the ConfigMap can fix (bad definition, name clash,
// damaged record, patch refused as invalid) are recorded as a Warning Event on the
// Deployment and returned as terminal errors, the Deployment left untouched; other
// failures (network, conflict with a concurrent write) are retried with backoff.
func (c *Controller) reconcile(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
	d, err := c.deployments.Lister().Get(key.Namespace, key.Name)
	if apierrors.IsNotFound(err) {
		return reconcile.Result{}, nil // the sidecar went with the Deployment
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	var sc *Sidecar
	if OptedIn(d) {
		sc, err = c.sidecar()
		if err != nil {
			reason := ReasonConfigInvalid
			if errors.Is(err, ErrConfigNotFound) {
				reason = ReasonConfigMissing
			}
			c.event(ctx, d, corev1.EventTypeWarning, reason, err.Error())
			return reconcile.Result{}, reconcile.Terminal(err)
		}
	}
	plan, err := ComputePatch(d, sc)
	if err != nil {
		reason := ReasonConflict
		if errors.Is(err, ErrInvalidRecord) {
			reason = ReasonRecordInvalid
		}
		c.event(ctx, d, corev1.EventTypeWarning, reason, err.Error())
		return reconcile.Result{}, reconcile.Terminal(err)
	}
	if plan.Action == NoAction {
		return reconcile.Result{}, nil
	}
	out, err := c.client.AppsV1().Deployments(d.Namespace).Patch(ctx, d.Name, types.StrategicMergePatchType, plan.Patch, metav1.PatchOptions{FieldManager: FieldManager})
	switch {
	case apierrors.IsNotFound(err):
		return reconcile.Result{}, nil
	case apierrors.IsInvalid(err):
		c.event(ctx, d, corev1.EventTypeWarning, ReasonRejected, fmt.Sprintf("%s of the sidecar refused: %v", plan.Action, err))
		return reconcile.Result{}, reconcile.Terminal(fmt.Errorf("injector: %s refused for deployment %s: %w", plan.Action, key, err))
	case err != nil:
		// A Conflict means the cache was behind the server: retry once it caught up.
		return reconcile.Result{}, fmt.Errorf("injector: patching deployment %s: %w", key, err)
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("patched", "action", plan.Action.String(), "resourceVersion", out.ResourceVersion)
	reason, msg := ReasonInjected, "sidecar injected"
	switch plan.Action {
	case Reinject:
		reason, msg = ReasonReinjected, "sidecar re-injected"
	case Remove:
		reason, msg = ReasonRemoved, "sidecar removed"
	}
	if sc != nil {
		msg += " (definition " + sc.Hash() + ")"
	}
	c.event(ctx, out, corev1.EventTypeNormal, reason, msg)
	// Read our own write before this key can be reconciled again, so that the next
	// reconcile does not compute the same patch from the old state (which its
	// resourceVersion precondition would refuse with a Conflict anyway).
	if err := c.deployments.WaitForResourceVersion(ctx, out.ResourceVersion); err != nil && ctx.Err() == nil {
		return reconcile.Result{}, fmt.Errorf("injector: waiting for the cache: %w", err)
	}
	return reconcile.Result{}, nil
}

// event records an Event about d. Failing to record it is logged, not returned:
// it must not make the reconcile fail.
func (c *Controller) event(ctx context.Context, d *appsv1.Deployment, typ, reason, msg string) {
	log := logr.FromContextOrDiscard(ctx)
	if typ == corev1.EventTypeWarning {
		log.Info("warning", "reason", reason, "message", msg)
	}
	const maxMessage = 1000
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: d.Name + ".", Namespace: d.Namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "apps/v1", Kind: "Deployment",
			Namespace: d.Namespace, Name: d.Name, UID: d.UID, ResourceVersion: d.ResourceVersion,
		},
		Reason:         reason,
		Message:        msg,
		Type:           typ,
		Source:         corev1.EventSource{Component: EventSource},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	if _, err := c.client.CoreV1().Events(d.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		log.Error(err, "recording event", "reason", reason)
	}
}
