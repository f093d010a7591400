package reconcile

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// Defaults for Config fields left zero.
const (
	DefaultName         = "controller"
	DefaultSyncTimeout  = 2 * time.Minute
	DefaultDrainTimeout = 30 * time.Second
	// DefaultShutdownTimeout is the default of Config.ShutdownTimeout.
	DefaultShutdownTimeout = 10 * time.Second
)

var (
	// ErrAlreadyStarted is returned by Run and Watch once Run has been called: a
	// Controller runs once.
	ErrAlreadyStarted = errors.New("reconcile: controller already started")
	// ErrNilSource is returned by Watch for a nil Source.
	ErrNilSource = errors.New("reconcile: nil source")
	// ErrLeadershipLost is returned by Run when the controller lost its leader
	// election lease (its workers have stopped).
	ErrLeadershipLost = errors.New("reconcile: leader election lost")
	// ErrShutdownTimeout is wrapped by the error of a Run that stopped waiting
	// for user code which did not return within its shutdown timeout: a
	// *ShutdownError here, package manager's Run too. It is
	// informer.ErrShutdownTimeout: one test covers every package's Run.
	ErrShutdownTimeout = informer.ErrShutdownTimeout
)

// ShutdownError is returned by Run when reconciles in flight did not return
// within Config.ShutdownTimeout after their contexts were cancelled: Run
// returns anyway and abandons them, and each goroutine running one ends
// whenever its Reconcile returns. Their reconcilers ignore their context; that
// is the bug to fix. It wraps ErrShutdownTimeout.
type ShutdownError struct {
	Controller string
	// Timeout is Config.ShutdownTimeout.
	Timeout time.Duration
	// Keys are the keys still being reconciled, formatted with %v, the
	// longest-running first.
	Keys []string
}

func (e *ShutdownError) Error() string {
	return fmt.Sprintf("reconcile: controller %q: %d reconciles still running %v after their contexts were cancelled, abandoned: %v",
		e.Controller, len(e.Keys), e.Timeout, e.Keys)
}

// Unwrap returns ErrShutdownTimeout.
func (e *ShutdownError) Unwrap() error { return ErrShutdownTimeout }

// SyncError is returned by Run when a source did not sync: within
// Config.SyncTimeout, or before Run's context ended. Its informer could not list
// (often a missing RBAC permission) or its handler is stuck. It wraps the
// source's last error, if the source reports one (see Source), and the
// context's error when the context ended first, so that
// errors.Is(err, reflector.ErrForbidden) and errors.Is(err, context.Canceled)
// work on it.
type SyncError struct {
	Controller string
	Source     string
	// Timeout is Config.SyncTimeout when it ran out; 0 when Run's context ended
	// first.
	Timeout time.Duration
	// Cause is the error of Run's context when it ended first; nil otherwise.
	Cause error
	// Err is the source's last error, such as an informer's
	// *reflector.AccessError; nil if the source reported none.
	Err error
}

func (e *SyncError) Error() string {
	var msg string
	if e.Cause != nil {
		msg = fmt.Sprintf("reconcile: controller %q: stopped before source %s synced: %v", e.Controller, e.Source, e.Cause)
	} else {
		msg = fmt.Sprintf("reconcile: controller %q: source %s did not sync within %v", e.Controller, e.Source, e.Timeout)
	}
	if e.Err != nil {
		msg += "; its last error: " + e.Err.Error()
	}
	return msg
}

// Unwrap returns Cause and Err, those that are set.
func (e *SyncError) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.Cause, e.Err} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// PanicError is the error a recovered panic is turned into: a panic in Reconcile,
// after which the key is retried with backoff like after any other error, or a
// panic in a source's Mapper or Predicate (Source is set), after which the change
// being mapped is dropped (a later change of the object, or a resync, brings its
// keys again). Both are logged with the stack and counted (Metrics.Panicked,
// Metrics.SourcePanicked).
type PanicError struct {
	// Source is the source whose Mapper or Predicate panicked; "" for Reconcile.
	Source string
	// Object is the key ("namespace/name") of the object being mapped or
	// filtered; "" for Reconcile.
	Object string
	// Value is what was passed to panic.
	Value any
	// Stack is the panicking goroutine's stack.
	Stack []byte
}

func (e *PanicError) Error() string {
	if e.Source != "" {
		return fmt.Sprintf("reconcile: source %s: panic while mapping %s: %v", e.Source, e.Object, e.Value)
	}
	return fmt.Sprintf("reconcile: panic: %v", e.Value)
}

// Config configures a Controller. The zero value works: one worker, client-go's
// default rate limiter, no resync, no per-reconcile timeout, no leader election,
// logs discarded.
type Config[K comparable] struct {
	// Name identifies the controller in logs ("controller" key), metrics and errors.
	// Default DefaultName.
	Name string
	// Workers is how many keys are reconciled at once. Zero or negative means 1.
	Workers int
	// RateLimiter decides how long a failed key waits before its retry. Nil means
	// workqueue.DefaultRateLimiter. It is reset when the controller stops: do not
	// share it between controllers.
	RateLimiter workqueue.RateLimiter[K]
	// FairnessKey, if set, makes keys of different groups (for example namespaces)
	// take turns in the queue; see workqueue.Config.FairnessKey.
	FairnessKey func(K) string
	// ResyncPeriod, if positive, re-enqueues every key the sources hold once per
	// period, at Background priority, spread evenly over the period with jitter.
	// Zero or negative means no resync.
	ResyncPeriod time.Duration
	// ReconcileTimeout, if positive, bounds each Reconcile call: its context ends
	// after that long. The reconciler must honour its context.
	ReconcileTimeout time.Duration
	// SyncTimeout bounds the wait for the sources to sync at start. Zero means
	// DefaultSyncTimeout; negative means no bound.
	SyncTimeout time.Duration
	// DrainTimeout is how long in-flight reconciles may go on after Run's context
	// ends before their own contexts are cancelled. Zero means DefaultDrainTimeout;
	// negative cancels them at once.
	DrainTimeout time.Duration
	// ShutdownTimeout bounds how long Run waits for the reconciles in flight once
	// their contexts have been cancelled (DrainTimeout after Run's context ends,
	// at once when leadership is lost); so Run returns at most DrainTimeout plus
	// ShutdownTimeout after its context ends. A reconcile still running then is
	// abandoned and Run returns a *ShutdownError naming its key. Zero means
	// DefaultShutdownTimeout; negative means no bound.
	ShutdownTimeout time.Duration
	// Logger is the base logger; Reconcile finds it in its context (logr.FromContext)
	// with the values "controller" and "key". Default: discard, and then the context
	// is Run's (logr.FromContextOrDiscard still works), which saves allocations.
	Logger logr.Logger
	// Metrics receives reconcile events; nil means none. See package prommetrics.
	Metrics Metrics
	// QueueMetrics receives the work queue's events (workqueue.Config.Metrics).
	QueueMetrics workqueue.Metrics
	// LeaderElection, if set, makes the controller reconcile only while it holds a
	// Lease; see LeaderElection.
	LeaderElection *LeaderElection
	// CacheWaitTimeout bounds read-your-writes (see TrackWrites): a key whose
	// reconcile wrote what one of its sources' caches holds is not reconciled
	// again until that cache has seen the write, or this long after the write.
	// Zero means DefaultCacheWaitTimeout; negative turns read-your-writes off.
	CacheWaitTimeout time.Duration

	// Restrictable lets Restrict narrow the keys the controller reconciles while
	// it runs (for sharding: see package shard). It costs each reconcile a
	// context and two uncontended locks; without it Restrict returns an error.
	Restrictable bool
}

// Controller runs a Reconciler for the keys its sources deliver: it owns the work
// queue and the workers and hides the queue's Get/Done/Forget protocol.
//
// Create it with New, add sources with Watch, and call Run once. Methods are safe
// for concurrent use. The zero Controller is not usable. Cost: one goroutine per
// worker, one for the resync while running, and the queue's memory (see workqueue).
type Controller[K comparable] struct {
	cfg     Config[K]
	rec     Reconciler[K]
	queue   *workqueue.Queue[K]
	log     logr.Logger
	metrics Metrics
	timed   bool // reconciles are timed: a Metrics wants their durations

	mu      sync.Mutex
	sources []Source[K] // appended by Watch until started
	started bool

	synced atomic.Bool // the sources synced and the workers may start
	ryw    *rywGate[K] // set by Run before the workers start; nil: read-your-writes off

	// Restrict (restrict.go).
	owns  atomic.Pointer[func(K) bool] // nil: every key
	slots []*workerSlot[K]             // one per worker, with Config.Restrictable
}

// New returns a controller calling r. It starts no goroutine. It panics if r is nil.
func New[K comparable](r Reconciler[K], cfg Config[K]) *Controller[K] {
	if r == nil {
		panic("reconcile: New with a nil Reconciler")
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.SyncTimeout == 0 {
		cfg.SyncTimeout = DefaultSyncTimeout
	}
	if cfg.CacheWaitTimeout == 0 {
		cfg.CacheWaitTimeout = DefaultCacheWaitTimeout
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	c := &Controller[K]{
		cfg:     cfg,
		rec:     r,
		log:     cfg.Logger.WithValues("controller", cfg.Name),
		metrics: cfg.Metrics,
		queue: workqueue.New(workqueue.Config[K]{
			RateLimiter: cfg.RateLimiter,
			FairnessKey: cfg.FairnessKey,
			Metrics:     cfg.QueueMetrics,
		}),
	}
	if c.metrics == nil {
		c.metrics = noMetrics{}
	} else {
		c.timed = true
	}
	if cfg.Restrictable {
		for range cfg.Workers {
			c.slots = append(c.slots, &workerSlot[K]{})
		}
	}
	return c
}

// Name returns the controller's name.
func (c *Controller[K]) Name() string { return c.cfg.Name }

// Watch adds a source. It must be called before Run; it returns ErrNilSource or
// ErrAlreadyStarted otherwise.
func (c *Controller[K]) Watch(src Source[K]) error {
	if src == nil {
		return ErrNilSource
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return ErrAlreadyStarted
	}
	c.sources = append(c.sources, src)
	return nil
}

// enqueue is the function handed to the sources.
func (c *Controller[K]) enqueue(key K, p Priority) {
	c.queue.AddWithOptions(key, workqueue.AddOptions{Priority: int(p)})
}

// Run starts the sources, waits until they have synced, then (after winning the
// leader election, if configured) reconciles with Config.Workers workers and
// resyncs every Config.ResyncPeriod, until ctx ends or leadership is lost.
//
// On the way out it stops taking keys, lets the reconciles in flight finish (their
// contexts are cancelled after Config.DrainTimeout, or at once when leadership is
// lost: its own, or a caller's who cancels ctx with the cause ErrLeadershipLost, as
// package manager does), stops the sources and shuts the queue down; when Run
// returns, no goroutine it started is left and Reconcile is not running, unless
// a Reconcile ignored its cancelled context for longer than
// Config.ShutdownTimeout: Run then returns without it.
//
// It returns nil when ctx ends after the sources synced, a *SyncError if a source
// did not sync in time or before ctx ended (wrapping ctx's error then, and the
// source's last error), an error from a source's Start or from the leader
// election's setup, ErrLeadershipLost, a *ShutdownError (wrapped with
// ErrLeadershipLost when leadership was lost), or ErrAlreadyStarted.
func (c *Controller[K]) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return ErrAlreadyStarted
	}
	c.started = true
	sources := c.sources
	c.mu.Unlock()
	defer c.queue.ShutDown()

	var el *election[K]
	if c.cfg.LeaderElection != nil {
		var err error
		if el, err = c.newElection(); err != nil {
			return err
		}
		el.sources = sources
	}
	for _, src := range sources {
		if rs, ok := src.(panicReportingSource); ok {
			rs.reportPanicsTo(c.sourcePanicked)
		}
		stop, err := src.Start(c.enqueue)
		if err != nil {
			return err
		}
		if stop != nil {
			defer stop()
		}
	}
	if err := c.waitForSync(ctx, sources); err != nil {
		return err
	}
	if c.cfg.CacheWaitTimeout > 0 {
		c.ryw = newRYWGate(c.cfg.CacheWaitTimeout, sources, c.metrics)
	}
	c.log.Info("sources synced", "sources", len(sources))
	c.synced.Store(true)
	if el != nil {
		return el.run(ctx)
	}
	abort, cancelAbort := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelAbort()
	return c.work(ctx, abort, cancelAbort, sources)
}

// HasSynced reports whether Run's sources have synced, so that the workers run
// (or, with leader election, may run once the lease is won). It stays true after
// Run returns.
func (c *Controller[K]) HasSynced() bool { return c.synced.Load() }

// The sources' sync is polled first every syncPollMin, the period doubling up to
// syncPollMax: a source on an informer that has already synced only replays its
// cache to the new handler, which takes well under a millisecond for a small
// cache, and a fixed 10 ms period made every such controller wait 10 ms before
// its first reconcile.
const (
	syncPollMin = 50 * time.Microsecond
	syncPollMax = 10 * time.Millisecond
)

// waitForSync polls the sources until all have synced.
func (c *Controller[K]) waitForSync(ctx context.Context, sources []Source[K]) error {
	var deadline <-chan time.Time
	if c.cfg.SyncTimeout > 0 {
		t := time.NewTimer(c.cfg.SyncTimeout)
		defer t.Stop()
		deadline = t.C
	}
	period := syncPollMin
	var poll *time.Timer
	for _, src := range sources {
		for !src.HasSynced() {
			if poll == nil {
				poll = time.NewTimer(period)
				defer poll.Stop()
			}
			select {
			case <-ctx.Done():
				return &SyncError{Controller: c.cfg.Name, Source: src.Name(), Cause: ctx.Err(), Err: lastError(src)}
			case <-deadline:
				return &SyncError{Controller: c.cfg.Name, Source: src.Name(), Timeout: c.cfg.SyncTimeout, Err: lastError(src)}
			case <-poll.C:
				period = min(2*period, syncPollMax)
				poll.Reset(period)
			}
		}
	}
	return nil
}

// lastError returns the last error of src, if it reports one (see Source).
func lastError[K comparable](src Source[K]) error {
	if e, ok := src.(interface{ LastError() error }); ok {
		return e.LastError()
	}
	return nil
}

// sourcePanicked reports a panic of a source's Mapper or Predicate.
func (c *Controller[K]) sourcePanicked(err *PanicError) {
	c.metrics.SourcePanicked()
	c.log.Error(err, "a source's mapper or predicate panicked; the change is dropped", "source", err.Source, "object", err.Object, "stack", string(err.Stack))
}

// work runs the workers and the resync until stop ends, then waits for the
// reconciles in flight, cancelling abort (their contexts' parent) after the drain
// timeout. It returns a *ShutdownError if they outlast the shutdown timeout.
func (c *Controller[K]) work(stop, abort context.Context, cancelAbort context.CancelFunc, sources []Source[K]) error {
	c.metrics.Workers(c.cfg.Workers)
	var wg sync.WaitGroup
	for i := range c.cfg.Workers {
		var ws *workerSlot[K]
		if c.slots != nil {
			ws = c.slots[i]
		}
		wg.Go(func() { c.worker(stop, abort, ws) })
	}
	if c.cfg.ResyncPeriod > 0 {
		wg.Go(func() { c.resync(stop, sources) })
	}
	if c.ryw != nil {
		for _, wait := range c.ryw.waiters(func(k K) { c.enqueue(k, Live) }) {
			wg.Go(func() { wait(stop) })
		}
	}
	c.log.Info("workers started", "workers", c.cfg.Workers)
	<-stop.Done()
	var timer *time.Timer
	if c.cfg.DrainTimeout < 0 || errors.Is(context.Cause(stop), ErrLeadershipLost) {
		cancelAbort()
	} else {
		timer = time.AfterFunc(c.cfg.DrainTimeout, cancelAbort)
	}
	err := c.await(&wg, abort)
	if timer != nil {
		timer.Stop()
	}
	if err != nil {
		c.log.Error(err, "abandoning reconciles that ignore their cancelled context")
		return err
	}
	c.log.Info("workers stopped")
	return nil
}

// await waits for the workers of wg, at most Config.ShutdownTimeout after abort
// (the parent of the reconciles' contexts) ends; then it returns a
// *ShutdownError naming the keys in flight and leaves the workers behind.
func (c *Controller[K]) await(wg *sync.WaitGroup, abort context.Context) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-abort.Done():
	}
	if c.cfg.ShutdownTimeout < 0 {
		<-done
		return nil
	}
	t := time.NewTimer(c.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	}
	keys := c.queue.Processing()
	err := &ShutdownError{Controller: c.cfg.Name, Timeout: c.cfg.ShutdownTimeout, Keys: make([]string, len(keys))}
	for i, k := range keys {
		err.Keys[i] = fmt.Sprint(k)
	}
	return err
}

// worker reconciles keys until stop ends.
func (c *Controller[K]) worker(stop, abort context.Context, ws *workerSlot[K]) {
	// The reconciles' writes are found through this worker's slot (TrackWrites).
	slot := &writeSlot{}
	if c.ryw != nil {
		abort = context.WithValue(abort, slotKey{}, slot)
	}
	for stop.Err() == nil {
		key, err := c.queue.Get(stop)
		if err != nil {
			return
		}
		if stop.Err() != nil {
			// Stopping: leave the key unprocessed; the queue is being discarded.
			c.queue.Done(key)
			return
		}
		if !c.owned(key) {
			// Restricted away (Restrict): another replica's now.
			c.queue.Forget(key)
			c.queue.Done(key)
			continue
		}
		if c.ryw != nil && !c.ryw.admit(key) {
			// Its cache lags its last writes: the gate enqueues it again.
			c.queue.Done(key)
			continue
		}
		c.process(abort, key, slot, ws)
		c.queue.Done(key)
	}
}

// process reconciles one key and files the outcome with the queue.
func (c *Controller[K]) process(parent context.Context, key K, slot *writeSlot, ws *workerSlot[K]) {
	ctx, log := parent, c.log
	if ws != nil {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		if !ws.begin(c, key, cancel) {
			c.queue.Forget(key) // restricted away since the check in worker
			return
		}
		defer ws.end()
	}
	if c.log.GetSink() != nil {
		// Only a real logger is worth its allocations per reconcile.
		log = c.log.WithValues("key", key)
		ctx = logr.NewContext(parent, log)
	}
	cancel := context.CancelFunc(func() {})
	if c.cfg.ReconcileTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.cfg.ReconcileTimeout)
	}
	c.metrics.ReconcileStarted()
	if c.ryw != nil {
		slot.begin()
	}
	// The clock is read only for whoever uses the duration: a clock read costs 30 to
	// 55 ns on some virtual machines, more than the rest of a no-op reconcile's loop.
	var start time.Time
	if c.timed || c.ryw != nil {
		start = time.Now()
	}
	res, err, panicked := c.call(ctx, key)
	var took time.Duration
	if !start.IsZero() {
		took = time.Since(start)
	}
	cancel()
	if c.ryw != nil {
		if writes := slot.end(); len(writes) > 0 {
			c.ryw.require(key, writes, start.Add(took))
		}
	}

	var outcome Outcome
	switch {
	case err == nil && res.RequeueAfter > 0:
		outcome = RequeuedAfter
		c.queue.Forget(key)
		c.queue.AddAfter(key, res.RequeueAfter)
	case err == nil:
		outcome = Succeeded
		c.queue.Forget(key)
	case errors.Is(err, ErrTerminal):
		outcome = FailedTerminal
		c.queue.Forget(key)
		log.Error(err, "reconcile failed with a terminal error; not retrying")
	default:
		outcome = Failed
		if panicked {
			c.metrics.Panicked()
			log.Error(err, "reconcile panicked; retrying", "stack", string(err.(*PanicError).Stack))
		} else {
			log.Error(err, "reconcile failed; retrying", "retries", c.queue.NumRequeues(key))
		}
		c.queue.AddRateLimited(key)
	}
	c.metrics.ReconcileFinished(outcome, took)
}

// call runs Reconcile and turns a panic into a *PanicError.
func (c *Controller[K]) call(ctx context.Context, key K) (res Result, err error, panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			res, err, panicked = Result{}, &PanicError{Value: v, Stack: debug.Stack()}, true
		}
	}()
	res, err = c.rec.Reconcile(ctx, key)
	return res, err, false
}
