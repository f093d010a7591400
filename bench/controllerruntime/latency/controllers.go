package latency

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// Config selects what a controller under test watches and how many keys it
// reconciles at once.
type Config struct {
	// Namespace is the only namespace the controller's cache holds. Required.
	Namespace string
	// Workers is the number of concurrent reconciles; 0 means 1.
	Workers int
	// Recorder receives every reconcile. Required.
	Recorder *Recorder
}

func (c Config) check() error {
	if c.Namespace == "" || c.Recorder == nil {
		return errors.New("latency: namespace and recorder are required")
	}
	return nil
}

// Start is how a side starts its controller: it runs until ctx ends, and stop
// waits for it to return and reports its error.
type Start func(ctx context.Context, restCfg *rest.Config, cfg Config) (stop func() error, err error)

// StartCtrlkit runs a ctrlkit manager with one controller of the ConfigMaps of
// cfg.Namespace: a shared informer with managedFields stripped, FromInformer
// ByObject, and a reconcile that gets the ConfigMap from the informer's lister
// and records its resourceVersion. Metrics, probes and leader election are off
// (the manager's defaults). A second handler of the informer records when each
// update arrives (Recorder.Arrive).
func StartCtrlkit(ctx context.Context, restCfg *rest.Config, cfg Config) (func() error, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	m, err := manager.New(manager.Config{RESTConfig: restCfg})
	if err != nil {
		return nil, fmt.Errorf("latency: ctrlkit manager: %w", err)
	}
	cms, err := manager.Typed[*corev1.ConfigMap](m, manager.Options[*corev1.ConfigMap]{
		Namespace: cfg.Namespace,
		Transform: reflector.StripManagedFields[*corev1.ConfigMap],
	})
	if err != nil {
		return nil, fmt.Errorf("latency: ctrlkit informer: %w", err)
	}
	lister := cms.Lister()
	rec := cfg.Recorder
	_, err = cms.AddHandler(informer.HandlerFuncs[*corev1.ConfigMap]{UpdateFunc: func(_, cm *corev1.ConfigMap) {
		rec.Arrive(cm.Name, cm.ResourceVersion)
	}}, informer.HandlerOptions{})
	if err != nil {
		return nil, fmt.Errorf("latency: ctrlkit arrival handler: %w", err)
	}
	c := reconcile.New(reconcile.Func[types.NamespacedName](func(_ context.Context, key types.NamespacedName) (reconcile.Result, error) {
		cm, err := lister.Get(key.Namespace, key.Name)
		if err != nil {
			if apierrors.IsNotFound(err) {
				return reconcile.Result{}, nil
			}
			return reconcile.Result{}, err
		}
		rec.Observe(cm.Name, cm.ResourceVersion)
		return reconcile.Result{}, nil
	}), reconcile.Config[types.NamespacedName]{Name: "latency", Workers: cfg.Workers})
	if err := c.Watch(reconcile.FromInformer(cms, reconcile.ByObject[*corev1.ConfigMap]())); err != nil {
		return nil, fmt.Errorf("latency: ctrlkit watch: %w", err)
	}
	if err := m.Add(c); err != nil {
		return nil, fmt.Errorf("latency: ctrlkit add: %w", err)
	}
	return run(ctx, m.Run), nil
}

// StartControllerRuntime runs a controller-runtime manager with one controller
// of the ConfigMaps of cfg.Namespace, written the usual way:
// For(&ConfigMap{}), MaxConcurrentReconciles cfg.Workers, the default priority
// queue, the cache limited to the namespace with managedFields stripped
// (cache.TransformStripManagedFields), and a reconcile that gets the ConfigMap
// through the manager's client (a deep copy out of the cache, controller-runtime's
// default) and records its resourceVersion. Metrics serving, probes and leader
// election are off; controller-runtime's metrics are still updated, as in every
// controller-runtime controller. A second handler of the informer records when
// each update arrives (Recorder.Arrive).
func StartControllerRuntime(ctx context.Context, restCfg *rest.Config, cfg Config) (func() error, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	mgr, err := crmanager.New(restCfg, ManagerOptions(cfg.Namespace))
	if err != nil {
		return nil, fmt.Errorf("latency: controller-runtime manager: %w", err)
	}
	cl := mgr.GetClient()
	rec := cfg.Recorder
	inf, err := mgr.GetCache().GetInformer(ctx, &corev1.ConfigMap{}, crcache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("latency: controller-runtime informer: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			rec.Arrive(cm.Name, cm.ResourceVersion)
		}
	}})
	if err != nil {
		return nil, fmt.Errorf("latency: controller-runtime arrival handler: %w", err)
	}
	err = builder.ControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}).
		WithOptions(crcontroller.Options{
			MaxConcurrentReconciles: max(cfg.Workers, 1),
			// One manager after another in one process.
			SkipNameValidation: ptr.To(true),
		}).
		Complete(crreconcile.Func(func(ctx context.Context, req crreconcile.Request) (crreconcile.Result, error) {
			var cm corev1.ConfigMap
			if err := cl.Get(ctx, req.NamespacedName, &cm); err != nil {
				return crreconcile.Result{}, client.IgnoreNotFound(err)
			}
			rec.Observe(cm.Name, cm.ResourceVersion)
			return crreconcile.Result{}, nil
		}))
	if err != nil {
		return nil, fmt.Errorf("latency: controller-runtime controller: %w", err)
	}
	return run(ctx, mgr.Start), nil
}

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

// ManagerOptions are the options of the controller-runtime managers the
// benchmarks compare with ctrlkit's: client-go's scheme, metrics serving and
// probes off, and the cache limited to namespace with managedFields stripped.
func ManagerOptions(namespace string) crmanager.Options {
	return crmanager.Options{
		Scheme:                 clientgoscheme.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: crcache.Options{
			DefaultNamespaces: map[string]crcache.Config{namespace: {}},
			DefaultTransform:  crcache.TransformStripManagedFields(),
		},
	}
}
