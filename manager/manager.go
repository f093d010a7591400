package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/events"

	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// Defaults of Config fields left zero.
const (
	DefaultSyncTimeout = 2 * time.Minute
	// DefaultShutdownTimeout is longer than a reconcile.Controller's default
	// DrainTimeout plus ShutdownTimeout, so that such a controller returns by its
	// own bound, naming its stuck keys, before the manager's passes.
	DefaultShutdownTimeout = time.Minute
)

var (
	// ErrAlreadyStarted is returned by Run when called more than once.
	ErrAlreadyStarted = errors.New("manager: Run called more than once")
	// ErrStopped is returned by Add and the informer functions once Run has
	// returned.
	ErrStopped = errors.New("manager: stopped")
)

// Config configures a Manager. Only RESTConfig is required; the zero value of
// every other field means its documented default.
type Config struct {
	// RESTConfig is the cluster to talk to, for example from LoadRESTConfig.
	// Required. Every client of the manager shares one HTTP transport built from
	// it (its WrapTransport included).
	RESTConfig *rest.Config

	// Logger receives the manager's logs and is the base of its informers'.
	// Default: discard.
	Logger logr.Logger

	// SyncTimeout bounds Run's wait for the informers to sync before it starts the
	// controllers. 0 means DefaultSyncTimeout; negative means no bound.
	SyncTimeout time.Duration

	// ShutdownTimeout bounds how long Run waits for the controllers and other
	// Runnables to return once their context has been cancelled (when Run's
	// context ends, a controller fails or the lease is lost). Those still
	// running then are abandoned and Run returns a *ShutdownError naming them.
	// Keep it above the controllers' reconcile.Config DrainTimeout plus
	// ShutdownTimeout. Zero means DefaultShutdownTimeout; negative means no
	// bound.
	ShutdownTimeout time.Duration

	// LeaderElection, if set, runs the controllers only while this process holds
	// the lock (reconcile.NewLeaseLock makes one); the informers run and stay
	// synced in any case, so that a new leader starts from warm caches. Leave the
	// controllers' own reconcile.Config.LeaderElection nil then.
	//
	// A new leader starts its controllers only once its caches have reached the
	// floor: what the previous leader read and wrote, which a leader that stops
	// while holding a Lease lock publishes on the Lease named after the lock with
	// FloorLeaseSuffix (the lock's RBAC must allow creating and updating it), or,
	// failing that, what the server holds when the term starts. See LastTakeover.
	LeaderElection *reconcile.LeaderElection

	// UnsafeNoLeaderFloor starts a new leader's controllers at once, whatever
	// its caches hold: a warm standby's caches may lag what the previous leader
	// wrote, and its first reconciles act on that. For comparisons only.
	UnsafeNoLeaderFloor bool

	// Scheme resolves the Go types of typed informers and the objects events are
	// about. Default: client-go's kubernetes/scheme.Scheme (every built-in type).
	Scheme *runtime.Scheme

	// RESTMapper finds the resource of a kind for Typed, Custom, Dynamic and
	// Metadata. Default: one backed by the server's discovery, asked lazily and
	// cached, asked again when a kind is not found (a CRD installed since).
	// A static mapper (meta.DefaultRESTMapper) makes those calls free of
	// requests, for unit tests.
	RESTMapper meta.RESTMapper

	// HTTP serves the probes, metrics and pprof; nothing listens by default,
	// and metrics and pprof are served over TLS to callers the API server
	// authenticates and authorizes (see HTTPConfig).
	HTTP HTTPConfig

	// Sharding, if set, makes this process one of several replicas that split
	// the work of the controllers added with AddSharded and the objects of the
	// informers asked with Options.Shard (see Sharding); the other
	// controllers and informers run whole in every replica. It excludes
	// LeaderElection: every replica works.
	Sharding *Sharding
}

// Runnable is what Add runs: a reconcile.Controller, or anything with a Run that
// blocks until its context ends. It may also implement Name() string (for logs,
// errors and probes) and HasSynced() bool (readiness: true once it can work).
type Runnable interface {
	Run(ctx context.Context) error
}

// Manager runs informers and controllers together; see the package
// documentation for its guarantees. Create it with New and call Run once. Its
// methods are safe for concurrent use. Cost: one goroutine per running informer
// (besides the informers' own) and per running controller.
type Manager struct {
	cfg    Config
	log    logr.Logger
	scheme *runtime.Scheme
	rest   *rest.Config
	http   *http.Client
	kube   kubernetes.Interface
	dyn    dynamic.Interface
	meta   metadata.Interface
	mapper meta.RESTMapper

	leading atomic.Bool
	srv     serving // HTTP servers and metrics registry (http.go)

	mu        sync.Mutex
	state     runState
	informers map[informerKey]*informerEntry
	byPointer map[any]*informerEntry
	order     []*informerEntry // in the order they were made
	clients   map[clientKey]rest.Interface
	runnables []*runnableEntry
	recorders map[string]events.EventRecorder // by controller name, while running
	// Set by Run while it runs, so that what is added meanwhile starts at once.
	startInformer func(*informerEntry)    // nil unless running
	startRunnable func(*runnableEntry)    // nil unless controllers may run
	broadcaster   events.EventBroadcaster // nil unless running
	// The leader floor (floor.go).
	writes   reconcile.WriteLog // every write made through the manager's clients
	term     int32              // this term's number while leading, -1 if unknown
	takeover *Takeover          // how the last term started
	sharder  *sharder           // nil without Config.Sharding (shard.go)
}

type runState int

const (
	notStarted runState = iota
	running
	stopped
)

type clientKey struct {
	gv   schema.GroupVersion
	json bool
}

// runnableEntry is one Runnable and its state.
type runnableEntry struct {
	r    Runnable
	name string

	mu      sync.Mutex
	running bool
	err     error // what Run returned, if it returned
	ended   bool
}

// New checks cfg and makes the clients; it starts nothing and makes no request.
func New(cfg Config) (*Manager, error) {
	if cfg.RESTConfig == nil {
		return nil, errors.New("manager: Config.RESTConfig is nil")
	}
	if cfg.SyncTimeout == 0 {
		cfg.SyncTimeout = DefaultSyncTimeout
	}
	if err := cfg.HTTP.check(); err != nil {
		return nil, err
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	m := &Manager{
		cfg:       cfg,
		log:       cfg.Logger,
		scheme:    cfg.Scheme,
		rest:      rest.CopyConfig(cfg.RESTConfig),
		informers: map[informerKey]*informerEntry{},
		byPointer: map[any]*informerEntry{},
		clients:   map[clientKey]rest.Interface{},
		recorders: map[string]events.EventRecorder{},
		term:      -1,
	}
	if m.scheme == nil {
		m.scheme = scheme.Scheme
	}
	if m.rest.UserAgent == "" {
		m.rest.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	// Writes made from a Reconcile through the manager's clients (or clients
	// built from RESTConfig()) are reported to its controller (read-your-writes).
	// Every write is also logged, for the floor a leader hands over.
	m.rest = reconcile.TrackWritesTo(m.rest, &m.writes)
	var err error
	if m.http, err = rest.HTTPClientFor(m.rest); err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	if m.kube, err = kubernetes.NewForConfigAndClient(reflector.WithProtobuf(m.rest), m.http); err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	if m.dyn, err = dynamic.NewForConfigAndClient(m.rest, m.http); err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	if m.meta, err = metadata.NewForConfigAndClient(m.rest, m.http); err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfigAndClient(m.rest, m.http)
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	m.mapper = cfg.RESTMapper
	if m.mapper == nil {
		m.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	}
	if cfg.HTTP.MetricsAddress != "" || cfg.HTTP.Registry != nil {
		// client-go's hooks are globals that its requests read unguarded:
		// set them before this manager makes any request, not when Run
		// serves (another manager's requests may be on the way by then).
		restClientHooked.Do(func() { hookRESTClient(m) })
	}
	if cfg.Sharding != nil {
		if cfg.LeaderElection != nil {
			return nil, errors.New("manager: Config.Sharding and LeaderElection exclude each other")
		}
		if m.sharder, err = newSharder(m, *cfg.Sharding); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// RESTConfig returns a copy of the manager's rest.Config.
func (m *Manager) RESTConfig() *rest.Config { return rest.CopyConfig(m.rest) }

// Kubernetes returns the manager's clientset for built-in types, which speaks
// protobuf and shares the manager's transport.
func (m *Manager) Kubernetes() kubernetes.Interface { return m.kube }

// Dynamic returns the manager's dynamic client, sharing its transport.
func (m *Manager) Dynamic() dynamic.Interface { return m.dyn }

// RESTMapper returns the manager's RESTMapper: Config.RESTMapper, or the one
// backed by the server's discovery.
func (m *Manager) RESTMapper() meta.RESTMapper { return m.mapper }

// Leading reports whether the controllers may run: true while this process holds
// the leader election's lock, or while Run runs past the informers' sync when
// there is no leader election.
func (m *Manager) Leading() bool { return m.leading.Load() }

// Add adds a controller (or any Runnable). Added before Run, it starts once the
// informers have synced (and the election is won, if configured); added while
// Run runs, it starts at once under the same conditions. It fails for a nil
// Runnable, one added twice, and once Run has returned.
func (m *Manager) Add(r Runnable) error {
	if r == nil {
		return errors.New("manager: Add with a nil Runnable")
	}
	e := &runnableEntry{r: r, name: runnableName(r)}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == stopped {
		return ErrStopped
	}
	for _, o := range m.runnables {
		if o.r == r {
			return fmt.Errorf("manager: %q added twice", e.name)
		}
	}
	m.runnables = append(m.runnables, e)
	if m.startRunnable != nil {
		m.startRunnable(e)
	}
	return nil
}

func runnableName(r Runnable) string {
	if n, ok := r.(interface{ Name() string }); ok {
		return n.Name()
	}
	return fmt.Sprintf("%T", r)
}

// Run runs the informers and the controllers until ctx ends or one of them
// fails; see the package documentation for the order. It returns nil when ctx
// ends, the first error otherwise (reconcile.ErrLeadershipLost when the lease
// is lost), or ErrAlreadyStarted. If stopping ran into a shutdown timeout (a
// controller's or an informer's own, or Config.ShutdownTimeout), the error also
// wraps reconcile.ErrShutdownTimeout and the *ShutdownError,
// *reconcile.ShutdownError or *informer.ShutdownError that says which code was
// left running.
func (m *Manager) Run(ctx context.Context) (err error) {
	m.mu.Lock()
	if m.state != notStarted {
		m.mu.Unlock()
		return ErrAlreadyStarted
	}
	m.state = running
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.state = stopped
		m.mu.Unlock()
	}()

	// One failure stops everything; the first one is Run's error.
	runCtx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	var failOnce sync.Once
	var firstErr error
	failWith := func(err error) {
		failOnce.Do(func() { firstErr = err })
		fail(err)
	}
	result := func() error {
		failOnce.Do(func() {}) // no failure from now on counts
		return firstErr
	}

	stopHTTP, err := m.serveHTTP(runCtx, failWith)
	if err != nil {
		return err
	}
	defer stopHTTP()

	stopEvents := m.startEvents(runCtx)
	defer stopEvents()

	// The shard member follows its group from the start (the sharded
	// controllers and informers hold nothing until it holds slots); it
	// leaves first on the way out, handing its slots over at once.
	if m.sharder != nil {
		memberCtx, stopMember := context.WithCancel(context.WithoutCancel(ctx))
		memberDone := make(chan struct{})
		go func() {
			defer close(memberDone)
			if err := m.sharder.member.Run(memberCtx); err != nil {
				m.log.Error(err, "leaving the shard group")
			}
		}()
		defer func() {
			stopMember()
			<-memberDone
			m.sharder.stop()
		}()
		context.AfterFunc(runCtx, stopMember)
	}

	// Informers run on a context of their own: they stop after the controllers.
	infCtx, stopInformers := context.WithCancel(context.WithoutCancel(ctx))
	var informers sync.WaitGroup
	var infMu sync.Mutex
	var infShutdown []error // the informers' shutdown timeouts; guarded by infMu
	defer func() {
		stopInformers()
		informers.Wait()
		infMu.Lock()
		err = withShutdown(err, errors.Join(infShutdown...))
		infMu.Unlock()
	}()
	m.mu.Lock()
	m.startInformer = func(e *informerEntry) {
		ectx, cancel := context.WithCancel(infCtx)
		e.stop, e.done = cancel, make(chan struct{})
		informers.Go(func() {
			defer close(e.done)
			err := e.inf.Run(ectx)
			switch {
			case err == nil:
			case ectx.Err() == nil:
				failWith(fmt.Errorf("manager: informer %q: %w", e.inf.Name(), err))
			case errors.Is(err, reconcile.ErrShutdownTimeout):
				infMu.Lock()
				infShutdown = append(infShutdown, fmt.Errorf("manager: informer %q: %w", e.inf.Name(), err))
				infMu.Unlock()
			}
		})
	}
	for _, e := range m.order {
		m.startInformer(e)
	}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.startInformer = nil
		m.mu.Unlock()
	}()

	if err := m.waitForSync(runCtx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped by the caller while syncing
		}
		failWith(err)
		return result()
	}
	m.log.Info("informers synced")

	// Controllers: at once, or while leading.
	ctlCtx, stopControllers := context.WithCancelCause(context.WithoutCancel(ctx))
	var controllers sync.WaitGroup
	startRunnable := func(e *runnableEntry) {
		e.mu.Lock()
		e.running = true
		e.mu.Unlock()
		controllers.Go(func() {
			err := runRecovered(ctlCtx, e.r)
			e.mu.Lock()
			e.running, e.ended, e.err = false, true, err
			e.mu.Unlock()
			if err != nil && ctlCtx.Err() == nil {
				failWith(fmt.Errorf("manager: controller %q: %w", e.name, err))
			}
		})
	}
	ctlStopped := false // guarded by m.mu: once set, nothing starts, so Wait is safe
	startAll := func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if ctlStopped || runCtx.Err() != nil {
			return
		}
		m.leading.Store(true)
		m.startRunnable = startRunnable
		for _, e := range m.runnables {
			startRunnable(e)
		}
	}
	var shutdownErr error // what stopping the controllers ran into; set by stopAll
	stopAll := func(cause error) {
		m.mu.Lock()
		m.startRunnable, ctlStopped = nil, true
		m.leading.Store(false)
		m.mu.Unlock()
		stopControllers(cause)
		shutdownErr = m.awaitRunnables(&controllers)
	}

	if m.cfg.LeaderElection == nil {
		startAll()
		<-runCtx.Done()
		stopAll(context.Canceled)
		return withShutdown(result(), shutdownErr)
	}
	lost, err := m.lead(runCtx, startAll, stopAll, failWith)
	if err != nil {
		failWith(err)
	} else if lost {
		failWith(reconcile.ErrLeadershipLost)
	}
	return withShutdown(result(), shutdownErr)
}

// ShutdownError is returned by Run when Runnables did not return within
// Config.ShutdownTimeout after their context was cancelled: Run returns anyway
// and abandons them (their goroutines end whenever their Run returns). It
// wraps reconcile.ErrShutdownTimeout.
type ShutdownError struct {
	// Timeout is Config.ShutdownTimeout.
	Timeout time.Duration
	// Runnables names the Runnables still running.
	Runnables []string
}

func (e *ShutdownError) Error() string {
	return fmt.Sprintf("manager: %d runnables still running %v after they were told to stop, abandoned: %q", len(e.Runnables), e.Timeout, e.Runnables)
}

// Unwrap returns reconcile.ErrShutdownTimeout.
func (e *ShutdownError) Unwrap() error { return reconcile.ErrShutdownTimeout }

// awaitRunnables waits for the Runnables of wg, whose context has been
// cancelled, at most Config.ShutdownTimeout. It returns the shutdown timeouts
// the Runnables returned (a reconcile.Controller's *ShutdownError) and a
// *ShutdownError naming those still running when the bound passed.
func (m *Manager) awaitRunnables(wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	var timeout <-chan time.Time
	if m.cfg.ShutdownTimeout > 0 {
		t := time.NewTimer(m.cfg.ShutdownTimeout)
		defer t.Stop()
		timeout = t.C
	}
	var abandoned *ShutdownError
	select {
	case <-done:
	case <-timeout:
		abandoned = &ShutdownError{Timeout: m.cfg.ShutdownTimeout}
	}
	var errs []error
	m.mu.Lock()
	for _, e := range m.runnables {
		e.mu.Lock()
		switch {
		case e.running && abandoned != nil:
			abandoned.Runnables = append(abandoned.Runnables, e.name)
		case e.ended && errors.Is(e.err, reconcile.ErrShutdownTimeout):
			errs = append(errs, fmt.Errorf("manager: controller %q: %w", e.name, e.err))
		}
		e.mu.Unlock()
	}
	m.mu.Unlock()
	if abandoned != nil {
		errs = append(errs, abandoned)
		m.log.Error(abandoned, "abandoning runnables that ignore their cancelled context")
	}
	return errors.Join(errs...)
}

// withShutdown returns err, and shutdown (what stopping the controllers ran
// into) with it.
func withShutdown(err, shutdown error) error {
	switch {
	case shutdown == nil:
		return err
	case err == nil:
		return shutdown
	}
	return fmt.Errorf("%w; then %w", err, shutdown)
}

// PanicError is the error of a Runnable whose Run panicked: the manager
// recovers it and stops as for any other error of a controller.
type PanicError struct {
	Value any    // what Run panicked with
	Stack []byte // the goroutine's stack at the panic
}

func (e *PanicError) Error() string { return fmt.Sprintf("manager: Run panicked: %v", e.Value) }

// runRecovered runs r, turning a panic of its Run into a *PanicError.
func runRecovered(ctx context.Context, r Runnable) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return r.Run(ctx)
}

// waitForSync waits until every informer started so far has synced, or has been
// released, within the sync timeout.
func (m *Manager) waitForSync(ctx context.Context) error {
	var deadline <-chan time.Time
	if m.cfg.SyncTimeout > 0 {
		t := time.NewTimer(m.cfg.SyncTimeout)
		defer t.Stop()
		deadline = t.C
	}
	// Polled first after syncPollMin, the period doubling up to syncPollMax: an
	// informer of a small or nearby collection syncs in well under a
	// millisecond, and a fixed 10 ms period held every controller back that long.
	period := syncPollMin
	var poll *time.Timer
	for {
		var waiting *informerEntry
		m.mu.Lock()
		for _, e := range m.order {
			if !e.inf.HasSynced() {
				waiting = e
				break
			}
		}
		m.mu.Unlock()
		if waiting == nil {
			return nil
		}
		if poll == nil {
			poll = time.NewTimer(period)
			defer poll.Stop()
		} else {
			poll.Reset(period)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("manager: informer %q did not sync: %w", waiting.inf.Name(), errors.Join(context.Cause(ctx), waiting.inf.Health().LastError))
		case <-deadline:
			return fmt.Errorf("manager: informer %q did not sync within %v: %w", waiting.inf.Name(), m.cfg.SyncTimeout, errors.Join(context.DeadlineExceeded, waiting.inf.Health().LastError))
		case <-poll.C:
		}
		period = min(2*period, syncPollMax)
	}
}

// The period of waitForSync's polls: see there.
const (
	syncPollMin = 50 * time.Microsecond
	syncPollMax = 10 * time.Millisecond
)
