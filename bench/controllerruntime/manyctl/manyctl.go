// Package manyctl measures one process running many controllers through a
// manager on shared caches: ctrlkit's manager against controller-runtime's, on a
// real API server. Every controller watches the ConfigMaps of one namespace
// (one shared informer), every third also its Secrets (a second shared
// informer), and each reconcile reads its ConfigMap from the cache and nothing
// else. The benchmarks live in manyctl_test.go (build tag e2e).
package manyctl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ctrlkit/ctrlkit/bench/controllerruntime/latency"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// SecretEvery makes controller i also watch Secrets when i%SecretEvery == 0.
const SecretEvery = 3

// Recorder keeps what one controller reconciled: per key, the first reconcile's
// time and the highest resourceVersion seen with the time it was first seen.
// Times are latency.Now(). Goroutine-safe.
type Recorder struct {
	mu    sync.Mutex
	first []time.Duration // 0: never reconciled
	rv    []int64         // highest resourceVersion observed
	at    []time.Duration // when rv was first observed

	distinct atomic.Int64 // keys with first != 0
	errs     atomic.Int64 // reconciles that failed or saw an unknown name
}

// NewRecorder returns a Recorder of keys keys.
func NewRecorder(keys int) *Recorder {
	return &Recorder{first: make([]time.Duration, keys), rv: make([]int64, keys), at: make([]time.Duration, keys)}
}

// Observe records a reconcile that read ConfigMap name at resourceVersion rv.
func (r *Recorder) Observe(name, rv string) {
	now := latency.Now()
	k := latency.KeyIndex(name)
	v, err := strconv.ParseInt(rv, 10, 64)
	if k < 0 || k >= len(r.first) || err != nil {
		r.errs.Add(1)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first[k] == 0 {
		r.first[k] = now
		r.distinct.Add(1)
	}
	if v > r.rv[k] {
		r.rv[k], r.at[k] = v, now
	}
}

// Fail records a reconcile that failed.
func (r *Recorder) Fail() { r.errs.Add(1) }

// Distinct is the number of keys reconciled at least once.
func (r *Recorder) Distinct() int { return int(r.distinct.Load()) }

// Errors is the number of failed reconciles.
func (r *Recorder) Errors() int { return int(r.errs.Load()) }

// LastFirst is the latest first reconcile of any key.
func (r *Recorder) LastFirst() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var m time.Duration
	for _, t := range r.first {
		m = max(m, t)
	}
	return m
}

// Covered reports whether every key k with target[k] > 0 was reconciled at
// that resourceVersion or a newer one.
func (r *Recorder) Covered(target []int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, t := range target {
		if t > 0 && r.rv[k] < t {
			return false
		}
	}
	return true
}

// Delays appends, for every key k with target[k] > 0, the time from sent[k]
// to the reconcile that first saw target[k], and returns the latest such
// reconcile. It fails if a key was seen at a version other than its target
// (the burst writes each key once, so nothing newer can exist).
func (r *Recorder) Delays(dst []time.Duration, target []int64, sent []time.Duration) ([]time.Duration, time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last time.Duration
	for k, t := range target {
		if t <= 0 {
			continue
		}
		if r.rv[k] != t {
			return dst, 0, fmt.Errorf("manyctl: key %d seen at resourceVersion %d, want %d", k, r.rv[k], t)
		}
		dst = append(dst, r.at[k]-sent[k])
		last = max(last, r.at[k])
	}
	return dst, last, nil
}

// Config is what a side starts.
type Config struct {
	Namespace string
	// Recorders has one Recorder per controller.
	Recorders []*Recorder
	// NoCopy makes controller-runtime's client hand out the cached objects
	// themselves (cache.Options.DefaultUnsafeDisableDeepCopy), as ctrlkit's
	// lister does. ctrlkit ignores it.
	NoCopy bool
}

// Start runs one manager with len(cfg.Recorders) controllers until ctx ends;
// stop waits for it to return and reports its error. informers reports how
// many informers the manager holds, or -1 if the side cannot tell.
type Start func(ctx context.Context, restCfg *rest.Config, cfg Config) (stop func() error, informers func() int, err error)

func (c Config) check() error {
	if c.Namespace == "" || len(c.Recorders) == 0 {
		return errors.New("manyctl: namespace and recorders are required")
	}
	return nil
}

// StartCtrlkit runs a ctrlkit manager the documented way (manager/doc.go):
// each controller asks manager.Typed for the ConfigMaps (and Secrets) of the
// namespace with managedFields stripped, which hands every controller the same
// informer, watches it with FromInformer ByObject, and reconciles by getting
// the ConfigMap from the shared informer's lister. One worker per controller,
// metrics, probes and leader election off (the defaults).
func StartCtrlkit(ctx context.Context, restCfg *rest.Config, cfg Config) (func() error, func() int, error) {
	if err := cfg.check(); err != nil {
		return nil, nil, err
	}
	m, err := manager.New(manager.Config{RESTConfig: restCfg})
	if err != nil {
		return nil, nil, fmt.Errorf("manyctl: ctrlkit manager: %w", err)
	}
	for i, rec := range cfg.Recorders {
		cms, err := manager.Typed[*corev1.ConfigMap](m, manager.Options[*corev1.ConfigMap]{
			Namespace: cfg.Namespace,
			Transform: reflector.StripManagedFields[*corev1.ConfigMap],
		})
		if err != nil {
			return nil, nil, fmt.Errorf("manyctl: ctrlkit configmaps: %w", err)
		}
		lister := cms.Lister()
		c := reconcile.New(reconcile.Func[types.NamespacedName](func(_ context.Context, key types.NamespacedName) (reconcile.Result, error) {
			cm, err := lister.Get(key.Namespace, key.Name)
			if err != nil {
				rec.Fail()
				if apierrors.IsNotFound(err) {
					return reconcile.Result{}, nil
				}
				return reconcile.Result{}, err
			}
			rec.Observe(cm.Name, cm.ResourceVersion)
			return reconcile.Result{}, nil
		}), reconcile.Config[types.NamespacedName]{Name: fmt.Sprintf("c%02d", i)})
		if err := c.Watch(reconcile.FromInformer(cms, reconcile.ByObject[*corev1.ConfigMap]())); err != nil {
			return nil, nil, fmt.Errorf("manyctl: ctrlkit watch: %w", err)
		}
		if i%SecretEvery == 0 {
			secrets, err := manager.Typed[*corev1.Secret](m, manager.Options[*corev1.Secret]{
				Namespace: cfg.Namespace,
				Transform: reflector.StripManagedFields[*corev1.Secret],
			})
			if err != nil {
				return nil, nil, fmt.Errorf("manyctl: ctrlkit secrets: %w", err)
			}
			if err := c.Watch(reconcile.FromInformer(secrets, reconcile.ByObject[*corev1.Secret]())); err != nil {
				return nil, nil, fmt.Errorf("manyctl: ctrlkit watch secrets: %w", err)
			}
		}
		if err := m.Add(c); err != nil {
			return nil, nil, fmt.Errorf("manyctl: ctrlkit add: %w", err)
		}
	}
	return run(ctx, m.Run), func() int { return len(m.Informers()) }, nil
}

// StartControllerRuntime runs a controller-runtime manager with the
// controllers written the usual way: builder For(&ConfigMap{}) (and
// Watches(&Secret{}, EnqueueRequestForObject)), the default options (one
// worker, the default queue), the cache limited to the namespace with
// managedFields stripped, and a reconcile that gets the ConfigMap through the
// manager's client (a deep copy out of the shared cache, controller-runtime's
// default, unless cfg.NoCopy). Metrics serving, probes and leader election are off.
func StartControllerRuntime(ctx context.Context, restCfg *rest.Config, cfg Config) (func() error, func() int, error) {
	if err := cfg.check(); err != nil {
		return nil, nil, err
	}
	opts := latency.ManagerOptions(cfg.Namespace)
	opts.Cache.DefaultUnsafeDisableDeepCopy = noCopy(cfg.NoCopy) // nil, controller-runtime's default, deep-copies
	mgr, err := crmanager.New(restCfg, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("manyctl: controller-runtime manager: %w", err)
	}
	cl := mgr.GetClient()
	for i, rec := range cfg.Recorders {
		b := builder.ControllerManagedBy(mgr).
			Named(fmt.Sprintf("c%02d", i)).
			For(&corev1.ConfigMap{}).
			// One manager after another in one process.
			WithOptions(crcontroller.Options{SkipNameValidation: ptr.To(true)})
		if i%SecretEvery == 0 {
			b = b.Watches(&corev1.Secret{}, &handler.EnqueueRequestForObject{})
		}
		err := b.Complete(crreconcile.Func(func(ctx context.Context, req crreconcile.Request) (crreconcile.Result, error) {
			var cm corev1.ConfigMap
			if err := cl.Get(ctx, req.NamespacedName, &cm); err != nil {
				rec.Fail()
				return crreconcile.Result{}, client.IgnoreNotFound(err)
			}
			rec.Observe(cm.Name, cm.ResourceVersion)
			return crreconcile.Result{}, nil
		}))
		if err != nil {
			return nil, nil, fmt.Errorf("manyctl: controller-runtime controller: %w", err)
		}
	}
	return run(ctx, mgr.Start), func() int { return -1 }, nil
}

func noCopy(b bool) *bool {
	if b {
		return ptr.To(true)
	}
	return nil
}

// StartControllerRuntimeNoCopy is StartControllerRuntime with cfg.NoCopy set:
// its reconciles read the cached ConfigMaps without a deep copy.
func StartControllerRuntimeNoCopy(ctx context.Context, restCfg *rest.Config, cfg Config) (func() error, func() int, error) {
	cfg.NoCopy = true
	return StartControllerRuntime(ctx, restCfg, cfg)
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
