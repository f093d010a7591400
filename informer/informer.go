package informer

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/ctrlkit/ctrlkit/deltafifo"
	"github.com/ctrlkit/ctrlkit/indexer"
	"github.com/ctrlkit/ctrlkit/reflector"
)

const (
	// DefaultBufferLimit is the BufferLimit of handlers when Config.BufferLimit is 0.
	DefaultBufferLimit = 1024
	// MinResyncPeriod is the shortest resync period accepted.
	MinResyncPeriod = time.Second
	// DefaultShutdownTimeout is the default of Config.ShutdownTimeout.
	DefaultShutdownTimeout = 10 * time.Second
)

// Config configures an Informer. The zero value works: no extra index, no transform,
// no resync, handlers coalescing past DefaultBufferLimit changes, and the reflector's
// defaults.
type Config[T reflector.Object] struct {
	// Name identifies the informer (and its reflector) in logs and errors. Default:
	// the Go type of T, such as "*v1.ConfigMap".
	Name string

	// Indexers are indexes maintained besides the namespace index, which is always
	// there under indexer.NamespaceIndexName (an entry of that name replaces it).
	// A nil function makes New panic. An index function that fails or panics on an
	// object does not stop the informer: the object is stored without values in that
	// index and the error, an *indexer.IndexError (wrapping a *PanicError for a
	// panic), goes to OnError and the Logger.
	Indexers indexer.Indexers[T]

	// Transform, if set, is applied to every object before it is stored (see
	// reflector.Config.Transform); reflector.StripManagedFields is a ready one.
	//
	// An object it refuses (an error, nil, or a panic), like an object that cannot
	// be decoded, is treated as absent: it is not cached, a cached version of it is
	// dropped and the handlers that knew it get OnDelete with FinalStateUnknown and
	// the last cached state, it is reported to OnError as a *reflector.RefusedError
	// and counted in Health().Stats.Refused, and the rest of the collection stays
	// live: the informer syncs without it and keeps watching past it. A later version
	// of the object that can be stored comes back as an add.
	Transform func(obj T) (T, error)

	// ResyncPeriod is the default of HandlerOptions.ResyncPeriod: how often handlers
	// get every cached object again as OnUpdate(obj, obj). 0 means never; otherwise
	// it must be at least MinResyncPeriod.
	ResyncPeriod time.Duration

	// BufferLimit is the default of HandlerOptions.BufferLimit. 0 means
	// DefaultBufferLimit; it must not be negative.
	BufferLimit int

	// DetectMutations turns on the cache's mutation detector (see
	// indexer.Config.DetectMutations); for tests.
	DetectMutations bool

	// Reflector configures the list and watch requests: selectors, page size,
	// streaming lists, backoff, watch timeouts. Its Name, Transform, Logger and
	// OnError must be left zero (New panics otherwise): the fields of the same names
	// above are used.
	Reflector reflector.Config[T]

	// ShutdownTimeout bounds how long Run waits, once its context has ended
	// and the informer has stopped, for handler calls in progress. A handler
	// still in a call then is abandoned (it gets no further call; its goroutine
	// ends when the call returns) and Run returns a *ShutdownError. Zero means
	// DefaultShutdownTimeout; negative means no bound.
	ShutdownTimeout time.Duration

	// Logger receives the informer's and the reflector's logs. Default: discard.
	Logger logr.Logger

	// OnError, if set, is called with every error the reflector backs off after
	// (including *reflector.AccessError), every refused object
	// (*reflector.RefusedError), every index function error and every panic of a
	// handler (*PanicError). It is called from the informer's goroutines, possibly
	// concurrently, with no lock held, and must return quickly.
	OnError func(error)

	// Scope names the collection the informer holds, for code that matches
	// writes to the caches that will see them (reconcile's read-your-writes).
	// Package manager sets it. The informer itself does not use it.
	Scope Scope
}

// Informer keeps an indexed cache of one API collection in step with the server
// and tells handlers about its changes. See the package documentation for the
// guarantees.
//
// Create it with New, add handlers with AddHandler (before or after Run), and run it
// with Run. Every method is safe for concurrent use. The zero value is not usable.
//
// Cost: the cache holds each object once (see indexer.Indexer: with the default keys,
// 30 to 40 bytes per object besides the object itself, no key string); a change
// costs one cache write and, per handler, one short critical section to queue it; a
// relist costs one pass over the list and one atomic replacement of the cache. While
// a list is assembled, each listed object the cache holds at the same
// resourceVersion is swapped for the cached instance as soon as it is decoded, so a
// relist holds the cache plus what changed, not two copies of the collection. Each
// running handler has one goroutine.
type Informer[T reflector.Object] struct {
	name      string
	scope     Scope
	log       logr.Logger
	onError   func(error)
	resync    time.Duration // default handler resync, 0: none
	shutdown  time.Duration // Config.ShutdownTimeout or its default; < 0: no bound
	bufLimit  int           // default handler buffer limit, > 0
	idx       *indexer.Indexer[T]
	lister    *indexer.Lister[T]
	fifo      *deltafifo.FIFO[T]
	refl      *reflector.Reflector[T]
	started   atomic.Bool
	synced    atomic.Bool   // the initial list is in the cache; only set under mu
	syncedCh  chan struct{} // closed when synced turns true
	stoppedCh chan struct{} // closed when Run has returned
	// queued counts the units handed to the FIFO: one per event or relist. Only the
	// reflector's goroutine reads or writes it (feed and bookmark), so it needs no
	// synchronization.
	queued int64
	notes  []note[T] // reused by the pop loop

	mu       sync.Mutex
	running  bool // Run started and has not stopped the handlers yet
	stopped  bool // Run has stopped the handlers
	applying bool // the pop loop is applying a batch it has not dispatched yet
	// regs are the handlers that receive every change dispatched. joining are those
	// added while a batch was being applied: they join (get the cache as it is and
	// move to regs) once it is dispatched.
	regs       []*Registration[T]
	joining    []*Registration[T]
	handlers   sync.WaitGroup // handler goroutines
	inCall     atomic.Int64   // handler goroutines running (started, not ended)
	resyncWake chan struct{}  // capacity 1: the set of resync deadlines changed

	rvMu sync.Mutex
	// appliedRV is the resourceVersion the cache has been brought up to.
	appliedRV string
	eventRV   string // of the last watch event applied (DataResourceVersion)
	// appliedUnits counts the units (see queued) applied to the cache.
	appliedUnits int64
	// mark is a bookmark waiting for the units queued before it to be applied.
	mark bookmarkMark
	// listed is the shard the last list queued covers (reflector.ListedShard),
	// complete in the cache once appliedUnits reaches listedAt; listedSet is
	// false before the first list.
	listed    reflector.Shard
	listedAt  int64
	listedSet bool
	rvWake    chan struct{} // closed when appliedRV changes; nil when nobody waits
}

type bookmarkMark struct {
	set bool
	at  int64 // applied once appliedUnits reaches it
	rv  string
}

// New returns an Informer of what lw serves. Nothing happens until Run; New starts
// no goroutine. It panics on misuse: a nil lw, a nil index function, a negative
// BufferLimit, a ResyncPeriod out of range, or Name, Transform, Logger or OnError
// set in cfg.Reflector.
func New[T reflector.Object](lw reflector.ListerWatcher[T], cfg Config[T]) *Informer[T] {
	if isNil(lw) {
		panic("informer: New called with a nil ListerWatcher")
	}
	rc := cfg.Reflector
	if rc.Name != "" || rc.Transform != nil || rc.OnError != nil || rc.Logger.GetSink() != nil {
		panic("informer: set Name, Transform, Logger and OnError in informer.Config, not in Config.Reflector")
	}
	if cfg.ResyncPeriod < 0 || (cfg.ResyncPeriod > 0 && cfg.ResyncPeriod < MinResyncPeriod) {
		panic(fmt.Sprintf("informer: Config.ResyncPeriod %v is neither 0 nor at least %v", cfg.ResyncPeriod, MinResyncPeriod))
	}
	if cfg.BufferLimit < 0 {
		panic(fmt.Sprintf("informer: negative Config.BufferLimit %d", cfg.BufferLimit))
	}
	name := cfg.Name
	if name == "" {
		name = reflect.TypeFor[T]().String()
	}
	inf := &Informer[T]{
		name:       name,
		scope:      cfg.Scope,
		log:        cfg.Logger.WithValues("informer", name),
		onError:    cfg.OnError,
		resync:     cfg.ResyncPeriod,
		bufLimit:   cfg.BufferLimit,
		shutdown:   cfg.ShutdownTimeout,
		syncedCh:   make(chan struct{}),
		stoppedCh:  make(chan struct{}),
		resyncWake: make(chan struct{}, 1),
	}
	if inf.bufLimit == 0 {
		inf.bufLimit = DefaultBufferLimit
	}
	if inf.shutdown == 0 {
		inf.shutdown = DefaultShutdownTimeout
	}
	indexers := indexer.Indexers[T]{indexer.NamespaceIndexName: indexer.NamespaceIndexFunc[T]()}
	for iname, fn := range cfg.Indexers {
		if fn == nil {
			panic(fmt.Sprintf("informer: index function %q is nil", iname))
		}
		indexers[iname] = inf.lenient(iname, fn)
	}
	inf.idx = indexer.New(indexer.Config[T]{Indexers: indexers, DetectMutations: cfg.DetectMutations})
	inf.lister = indexer.NewLister(inf.idx)
	inf.fifo = deltafifo.New(deltafifo.Config[T]{KnownObjects: inf.idx})
	rc.Name, rc.Transform, rc.Logger, rc.OnError = name, cfg.Transform, cfg.Logger, cfg.OnError
	inf.refl = reflector.New[T](lw, feed[T]{inf}, rc)
	return inf
}

// Name returns the informer's name, Config.Name or its default.
func (inf *Informer[T]) Name() string { return inf.name }

// Scope is Config.Scope.
func (inf *Informer[T]) Scope() Scope { return inf.scope }

// Scope is the collection an informer holds: a resource, in one namespace or
// in all. The zero Scope says nothing.
type Scope struct {
	// Resource is the collection's API group and resource ("pods",
	// "deployments.apps").
	Resource schema.GroupResource
	// Namespace is "" when the informer holds every namespace (or the resource
	// is cluster-scoped).
	Namespace string
}

// Covers reports whether an object of resource gr in namespace ns belongs
// to the collection. The zero Scope covers nothing.
func (s Scope) Covers(gr schema.GroupResource, ns string) bool {
	return s.Resource.Resource != "" && s.Resource == gr && (s.Namespace == "" || s.Namespace == ns)
}

// Lister reads the cache by namespace, name and labels. Objects are shared: treat
// them as read-only.
func (inf *Informer[T]) Lister() *indexer.Lister[T] { return inf.lister }

// Indexer returns the cache itself, for reads by index. Only the informer writes to
// it: calling its write methods (Add, Update, Delete, Replace) breaks every
// guarantee of the informer, and indexes should be added with
// Informer.AddIndexes. Objects are shared: treat them as read-only.
func (inf *Informer[T]) Indexer() *indexer.Indexer[T] { return inf.idx }

// Health returns the reflector's condition: state, last event, last error.
func (inf *Informer[T]) Health() reflector.Health { return inf.refl.Health() }

// HasSynced reports whether the cache holds the informer's first complete list.
func (inf *Informer[T]) HasSynced() bool { return inf.synced.Load() }

// WaitForSync waits until HasSynced is true. It returns ctx.Err() if ctx ends first,
// and ErrStopped if Run returns first.
func (inf *Informer[T]) WaitForSync(ctx context.Context) error {
	select {
	case <-inf.syncedCh:
		return nil
	default:
	}
	select {
	case <-inf.syncedCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-inf.stoppedCh:
		if inf.synced.Load() {
			return nil
		}
		return ErrStopped
	}
}

// AddIndexes adds indexes to the cache, also while it runs, and indexes what it
// holds. It fails, adding nothing, if a name is already registered or a function is
// nil. As with Config.Indexers, a function failing on an object leaves that object
// out of its index and reports an *indexer.IndexError to OnError.
func (inf *Informer[T]) AddIndexes(indexers indexer.Indexers[T]) error {
	wrapped := make(indexer.Indexers[T], len(indexers))
	for name, fn := range indexers {
		if fn == nil {
			return fmt.Errorf("informer: index function %q is nil", name)
		}
		wrapped[name] = inf.lenient(name, fn)
	}
	return inf.idx.AddIndexes(wrapped)
}

// lenient wraps an index function so that its failure, or its panic, is reported
// instead of failing the write: nobody could act on a write error inside the pop
// loop.
func (inf *Informer[T]) lenient(name string, fn indexer.IndexFunc[T]) indexer.IndexFunc[T] {
	return func(obj T) (vals []string, err error) {
		defer func() {
			if v := recover(); v != nil {
				key := keyOf(obj)
				inf.report(&indexer.IndexError{Index: name, Key: key, Err: &PanicError{
					Informer: inf.name, Key: key, Call: "index " + name, Value: v, Stack: debug.Stack(),
				}})
				vals, err = nil, nil
			}
		}()
		vals, err = fn(obj)
		if err != nil {
			inf.report(&indexer.IndexError{Index: name, Key: keyOf(obj), Err: err})
			return nil, nil
		}
		return vals, nil
	}
}

func (inf *Informer[T]) report(err error) {
	inf.log.Error(err, "informer error")
	if inf.onError == nil {
		return
	}
	defer func() {
		// A bug in error reporting must not stop the informer.
		if v := recover(); v != nil {
			inf.log.Error(&PanicError{Informer: inf.name, Key: "", Call: "OnError", Value: v, Stack: debug.Stack()}, "OnError panicked", "err", err)
		}
	}()
	inf.onError(err)
}

// AddHandler adds a handler; it may be called before Run or while the informer runs.
//
// A handler added before the informer's first list gets that list as OnAdd calls
// with inInitialList true; one added later gets the whole cache that way, and then
// every change after it, with no gap and no repeat. Either way Registration.HasSynced
// turns true once those OnAdd calls have returned. The handler runs in a goroutine
// of its own that Run starts and stops.
//
// It returns ErrNilHandler, an error matching ErrInvalidOptions, or ErrStopped once
// Run has returned.
func (inf *Informer[T]) AddHandler(h Handler[T], opts HandlerOptions) (*Registration[T], error) {
	if isNil(h) {
		return nil, ErrNilHandler
	}
	resync := opts.ResyncPeriod
	switch {
	case resync == 0:
		resync = inf.resync
	case resync < 0:
		resync = 0
	case resync < MinResyncPeriod:
		return nil, fmt.Errorf("%w: ResyncPeriod %v is shorter than %v", ErrInvalidOptions, resync, MinResyncPeriod)
	}
	limit := opts.BufferLimit
	switch {
	case limit == 0:
		limit = inf.bufLimit
	case limit < 0:
		return nil, fmt.Errorf("%w: negative BufferLimit %d", ErrInvalidOptions, limit)
	}
	r := newRegistration(inf, h, resync, limit)
	inf.mu.Lock()
	defer inf.mu.Unlock()
	switch {
	case inf.stopped:
		return nil, ErrStopped
	case !inf.running:
		r.needMarker = true
		inf.regs = append(inf.regs, r)
		return r, nil
	case inf.applying:
		inf.joining = append(inf.joining, r)
	default:
		inf.joinLocked(r)
	}
	inf.startLocked(r, time.Now())
	return r, nil
}

// joinLocked makes r receive the changes dispatched from now on, after the cache as
// it is. The cache then matches what was dispatched. It requires inf.mu held.
func (inf *Informer[T]) joinLocked(r *Registration[T]) {
	if inf.synced.Load() {
		r.enqueueList(inf.idx.List(), nil, opAdd, true)
	} else {
		r.needMarker = true // the initial list brings the marker
	}
	inf.regs = append(inf.regs, r)
}

// startLocked starts r's goroutine. It requires inf.mu held.
func (inf *Informer[T]) startLocked(r *Registration[T], now time.Time) {
	if r.resync > 0 {
		r.nextResync = now.Add(r.resync)
		inf.wakeResync()
	}
	inf.inCall.Add(1)
	inf.handlers.Go(func() {
		defer inf.inCall.Add(-1)
		r.run()
	})
}

// HandlerStats returns the Stats of every handler added and not removed, in no
// particular order; it is empty once Run has returned. It is a snapshot for
// metrics and probes: each handler's Stats is read on its own, so the entries are
// not taken at one instant. Cost: one short critical section per handler.
func (inf *Informer[T]) HandlerStats() []HandlerStats {
	inf.mu.Lock()
	regs := make([]*Registration[T], 0, len(inf.regs)+len(inf.joining))
	regs = append(regs, inf.regs...)
	regs = append(regs, inf.joining...)
	inf.mu.Unlock()
	out := make([]HandlerStats, len(regs))
	for i, r := range regs {
		out[i] = r.Stats()
	}
	return out
}

// RemoveHandler stops a handler: it gets no further call, except the one in
// progress (or just starting) when RemoveHandler returns, and its backlog is
// dropped. Removing a handler twice, or after Run returned, does nothing. It returns
// ErrUnknownRegistration for a nil Registration or one of another Informer.
func (inf *Informer[T]) RemoveHandler(r *Registration[T]) error {
	if r == nil || r.inf != inf {
		return ErrUnknownRegistration
	}
	inf.mu.Lock()
	match := func(x *Registration[T]) bool { return x == r }
	inf.regs = slices.DeleteFunc(inf.regs, match)
	inf.joining = slices.DeleteFunc(inf.joining, match)
	inf.mu.Unlock()
	if r.stop() && r.resync > 0 {
		inf.wakeResync()
	}
	return nil
}

// Run runs the informer until ctx is done: the reflector lists and watches, the
// changes are applied to the cache and dispatched to the handlers, and resyncs are
// scheduled. Failures of the server are retried (see the reflector package).
//
// Run returns when ctx is done, after every goroutine it started has ended,
// handlers' included: a handler's backlog is dropped, but a call in progress is
// waited for, at most Config.ShutdownTimeout; a handler still in a call then is
// abandoned and Run returns a *ShutdownError. It returns nil, the reflector's
// configuration error (such as a selector that does not parse) at once, or
// ErrAlreadyStarted.
func (inf *Informer[T]) Run(ctx context.Context) error {
	if !inf.started.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	inf.mu.Lock()
	inf.running = true
	now := time.Now()
	for _, r := range inf.regs {
		inf.startLocked(r, now)
	}
	inf.mu.Unlock()

	var bg sync.WaitGroup
	var reflErr error
	bg.Go(func() {
		if err := inf.refl.Run(ctx); err != nil {
			reflErr = err
			cancel()
		}
	})
	bg.Go(func() { inf.resyncLoop(ctx) })
	for {
		// process never fails: Pop returns only when ctx is done.
		if err := inf.fifo.Pop(ctx, inf.process); err != nil {
			break
		}
	}
	cancel()
	bg.Wait()
	inf.fifo.Close()

	inf.mu.Lock()
	inf.running, inf.stopped = false, true
	regs := append(inf.regs, inf.joining...)
	inf.regs, inf.joining = nil, nil
	inf.mu.Unlock()
	for _, r := range regs {
		r.stop()
	}
	err := inf.awaitHandlers()
	close(inf.stoppedCh)
	if reflErr != nil {
		return reflErr
	}
	return err
}

// awaitHandlers waits for the handler goroutines, which have been stopped, at
// most the shutdown timeout; then it returns a *ShutdownError.
func (inf *Informer[T]) awaitHandlers() error {
	if inf.shutdown < 0 {
		inf.handlers.Wait()
		return nil
	}
	done := make(chan struct{})
	go func() {
		inf.handlers.Wait()
		close(done)
	}()
	t := time.NewTimer(inf.shutdown)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	}
	err := &ShutdownError{Informer: inf.name, Timeout: inf.shutdown, Handlers: int(inf.inCall.Load())}
	inf.log.Error(err, "abandoning handlers that do not return")
	return err
}

// dispatch is what one batch tells the handlers.
type dispatch[T any] struct {
	notes []note[T]
	// list is the informer's initial list (initial) or the objects of a resync
	// (resync), with their keys.
	list    []T
	keys    []string
	initial bool
	resync  bool
}

// process applies one batch of the FIFO to the cache and dispatches it. It runs in
// Run's goroutine only, the cache's only writer.
func (inf *Informer[T]) process(b deltafifo.Batch[T]) error {
	inf.mu.Lock()
	inf.applying = true
	inf.mu.Unlock()
	var d dispatch[T]
	switch {
	case b.Relist:
		d = inf.applyRelist(b)
	case b.Resync:
		// A resync batch holds Sync deltas only, possibly none (every key had a newer
		// change queued, or the cache emptied meanwhile); the cache has these objects
		// already. Even an empty one is dispatched: it clears the handlers' resyncDue.
		d = dispatch[T]{resync: true, list: make([]T, len(b.Deltas)), keys: make([]string, len(b.Deltas))}
		for i := range b.Deltas {
			d.list[i], d.keys[i] = b.Deltas[i].Object, b.Deltas[i].Key
		}
	default:
		d = inf.applyEvents(b)
	}
	inf.dispatch(&d)
	clear(inf.notes)
	inf.notes = inf.notes[:0]
	return nil
}

// applyEvents applies watch events to the cache. The notes follow the cache: a change
// of a cached key is an update, of another key an add, and a deletion of a key the
// cache does not hold is nobody's business.
func (inf *Informer[T]) applyEvents(b deltafifo.Batch[T]) dispatch[T] {
	if len(b.Deltas) == 0 {
		return dispatch[T]{} // the FIFO never hands out an empty run; nothing to apply
	}
	notes := inf.notes[:0]
	rv := ""
	for i := range b.Deltas {
		d := &b.Deltas[i]
		if d.Type == deltafifo.Deleted {
			cached, had := inf.idx.Get(d.Key)
			if !had {
				continue
			}
			obj := d.Object
			if d.FinalStateUnknown {
				// A refused object (see feed.Refuse): its last state is the cached one.
				obj = cached
			}
			if err := inf.idx.DeleteKey(d.Key); err != nil {
				inf.report(fmt.Errorf("informer: %s: deleting %s: %w", inf.name, d.Key, err))
				continue
			}
			notes = append(notes, note[T]{op: opDelete, key: d.Key, obj: obj, flag: d.FinalStateUnknown})
			continue
		}
		old, had, err := inf.idx.Swap(d.Object)
		if err != nil {
			inf.report(fmt.Errorf("informer: %s: storing %s: %w", inf.name, d.Key, err))
			continue
		}
		if had {
			notes = append(notes, note[T]{op: opUpdate, key: d.Key, old: old, obj: d.Object})
		} else {
			notes = append(notes, note[T]{op: opAdd, key: d.Key, obj: d.Object})
		}
	}
	inf.notes = notes
	// The resourceVersion reached is the last event's. A refusal carries none: its
	// resourceVersion comes as the bookmark queued right after it (see feed.Refuse).
	for i := len(b.Deltas) - 1; i >= 0; i-- {
		if d := &b.Deltas[i]; !d.FinalStateUnknown {
			rv = d.Object.GetResourceVersion()
			break
		}
	}
	inf.applied(int64(len(b.Deltas)), rv, true)
	return dispatch[T]{notes: notes}
}

// applyRelist replaces the cache with a complete list, atomically. The informer's
// first list goes to the handlers whole; a later one as deletions (tombstones of
// keys gone meanwhile), adds of new keys, and updates of the objects whose
// resourceVersion changed: an object listed again unchanged is not news.
func (inf *Informer[T]) applyRelist(b deltafifo.Batch[T]) dispatch[T] {
	objs := make([]T, 0, len(b.Deltas))
	var keys []string
	if b.InitialList {
		keys = make([]string, 0, len(b.Deltas))
	}
	notes := inf.notes[:0]
	for i := range b.Deltas {
		d := &b.Deltas[i]
		if d.Type == deltafifo.Deleted {
			notes = append(notes, note[T]{op: opDelete, key: d.Key, obj: d.Object, flag: true})
			continue
		}
		objs = append(objs, d.Object)
		if b.InitialList {
			keys = append(keys, d.Key)
			continue
		}
		old, had := inf.idx.Get(d.Key)
		switch {
		case !had:
			notes = append(notes, note[T]{op: opAdd, key: d.Key, obj: d.Object})
		case changed(old, d.Object):
			notes = append(notes, note[T]{op: opUpdate, key: d.Key, old: old, obj: d.Object})
		default:
			// Unchanged: keep the cached instance, which the handlers hold, so that
			// the next OnUpdate's old object is the very one they were given.
			objs[len(objs)-1] = old
		}
	}
	if err := inf.idx.Replace(objs); err != nil {
		// Only a failing key or index function can make Replace fail, and both are
		// guarded against; should it happen, store what can be stored.
		inf.report(fmt.Errorf("informer: %s: storing a list: %w", inf.name, err))
		for i := range b.Deltas {
			d := &b.Deltas[i]
			if d.Type == deltafifo.Deleted {
				_ = inf.idx.DeleteKey(d.Key)
			} else if err := inf.idx.Update(d.Object); err != nil {
				inf.report(fmt.Errorf("informer: %s: storing %s: %w", inf.name, d.Key, err))
			}
		}
	}
	inf.notes = notes
	inf.applied(1, b.ResourceVersion, false)
	d := dispatch[T]{notes: notes}
	if b.InitialList {
		d.initial, d.list, d.keys = true, objs, keys
	}
	inf.log.V(2).Info("list applied", "objects", len(objs), "changes", len(notes), "resourceVersion", b.ResourceVersion)
	return d
}

// changed reports whether new may differ from old: unless both carry the same
// resourceVersion, it may.
func changed[T reflector.Object](old, new T) bool {
	rv := old.GetResourceVersion()
	return rv == "" || rv != new.GetResourceVersion()
}

// dispatch queues d for the handlers, and lets the handlers that were added while
// the batch was applied join. The cache then matches what the handlers were told.
func (inf *Informer[T]) dispatch(d *dispatch[T]) {
	inf.mu.Lock()
	defer inf.mu.Unlock()
	for _, r := range inf.regs {
		switch {
		case d.resync:
			if r.resyncDue {
				r.resyncDue = false
				r.enqueueList(d.list, d.keys, opSync, false)
			}
		default:
			r.enqueue(d.notes)
			if d.initial {
				r.enqueueList(d.list, d.keys, opAdd, r.needMarker)
				r.needMarker = false
			}
		}
	}
	if d.initial && !inf.synced.Load() {
		inf.synced.Store(true)
		close(inf.syncedCh)
	}
	for _, r := range inf.joining {
		inf.joinLocked(r)
		if r.resync > 0 {
			// The resync loop only sees handlers in regs: tell it about this one.
			inf.wakeResync()
		}
	}
	clear(inf.joining)
	inf.joining = inf.joining[:0]
	inf.applying = false
}

// resyncLoop marks the handlers whose resync is due and asks the FIFO for a resync,
// whose batch goes to them.
func (inf *Informer[T]) resyncLoop(ctx context.Context) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var next time.Time
		inf.mu.Lock()
		for _, r := range inf.regs {
			if r.resync > 0 && (next.IsZero() || r.nextResync.Before(next)) {
				next = r.nextResync
			}
		}
		inf.mu.Unlock()
		var fire <-chan time.Time
		if !next.IsZero() {
			if timer == nil {
				timer = time.NewTimer(time.Until(next))
			} else {
				timer.Reset(time.Until(next))
			}
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-inf.resyncWake:
		case now := <-fire:
			inf.markResync(now)
		}
	}
}

// markResync marks the handlers whose resync is due at now and queues a resync.
func (inf *Informer[T]) markResync(now time.Time) {
	due := false
	inf.mu.Lock()
	for _, r := range inf.regs {
		if r.resync > 0 && !now.Before(r.nextResync) {
			r.resyncDue = true
			r.nextResync = now.Add(r.resync)
			due = true
		}
	}
	inf.mu.Unlock()
	if due && inf.idx.Len() > 0 {
		_ = inf.fifo.Resync() // fails only once closed, when Run is ending
	}
}

func (inf *Informer[T]) wakeResync() {
	select {
	case inf.resyncWake <- struct{}{}:
	default:
	}
}

// LastAppliedResourceVersion returns the resourceVersion the cache has been brought
// up to: that of the last list, watch event or bookmark applied, "" before the first
// list. Everything the server had at that resourceVersion (within the informer's
// selectors) is in the cache.
func (inf *Informer[T]) LastAppliedResourceVersion() string {
	inf.rvMu.Lock()
	defer inf.rvMu.Unlock()
	return inf.appliedRV
}

// WaitForResourceVersion waits until the cache has been brought up to rv or later,
// so that a caller can read its own write: pass the resourceVersion of the object a
// create, update or delete of this collection returned.
//
// resourceVersions are opaque strings in general. This compares them as integers,
// as k8s.io/apimachinery/pkg/util/resourceversion does, which is sound only between
// resourceVersions of the same resource from one kube-apiserver backed by etcd
// (whose resourceVersions are etcd revisions). Either side not a positive decimal
// integer gives an error matching ErrInvalidResourceVersion.
//
// The cache advances with the changes of the objects the informer watches and with
// the server's bookmarks (about once a minute): a write outside the informer's
// namespace or selectors may take that long to count as seen.
//
// It returns ctx.Err() if ctx ends first, and ErrStopped if Run returns first.
func (inf *Informer[T]) WaitForResourceVersion(ctx context.Context, rv string) error {
	if _, err := resourceversion.CompareResourceVersion(rv, rv); err != nil {
		return fmt.Errorf("%w: %q: %w", ErrInvalidResourceVersion, rv, err)
	}
	for {
		inf.rvMu.Lock()
		ok, err := inf.reachedLocked(rv)
		var wake chan struct{}
		if !ok && err == nil {
			if inf.rvWake == nil {
				inf.rvWake = make(chan struct{})
			}
			wake = inf.rvWake
		}
		inf.rvMu.Unlock()
		if ok || err != nil {
			return err
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-inf.stoppedCh:
			inf.rvMu.Lock()
			ok, err := inf.reachedLocked(rv)
			inf.rvMu.Unlock()
			if ok || err != nil {
				return err
			}
			return ErrStopped
		}
	}
}

// CatchUpGrace is how long CatchUp lets the cache's own events bring it to its
// resourceVersion before it relists.
const CatchUpGrace = 2 * time.Second

// CatchUp waits until the cache has reached rv or, with rv "", everything the
// server had when CatchUp was called (read with ServerResourceVersion). Where
// the cache's own events do not bring it there within CatchUpGrace (its
// collection is quiet, or rv comes from a change its selectors leave out), the
// informer relists (reflector.Reflector.Relist), a consistent read that gets
// it there: CatchUp takes seconds, not the minute until the server's next
// periodic bookmark.
//
// It returns ctx.Err() if ctx ends first, ErrStopped if Run returns first, and
// an error wrapping ErrInvalidResourceVersion for an rv that is not a
// resourceVersion this informer can compare.
func (inf *Informer[T]) CatchUp(ctx context.Context, rv string) error {
	if rv == "" {
		var err error
		if rv, err = inf.ServerResourceVersion(ctx); err != nil {
			return fmt.Errorf("informer %s: read the server's resourceVersion: %w", inf.Name(), err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, CatchUpGrace)
	err := inf.WaitForResourceVersion(wctx, rv)
	cancel()
	if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	inf.log.V(1).Info("the cache is behind the resourceVersion to catch up with; relisting", "resourceVersion", rv, "cache", inf.LastAppliedResourceVersion())
	inf.refl.Relist()
	return inf.WaitForResourceVersion(ctx, rv)
}

// DataResourceVersion returns the resourceVersion of the newest change the
// cache holds: the greatest among its objects' and its last watch event's
// (a deletion's included), "" if it holds none. Unlike
// LastAppliedResourceVersion, which lists and bookmarks also advance, this is
// the resourceVersion of a change in the informer's own stream: another
// informer of the same collection reaches it through its own events, without a
// bookmark or a relist. It reads every cached object: O(objects).
func (inf *Informer[T]) DataResourceVersion() string {
	var newest uint64
	for _, obj := range inf.idx.List() {
		if n, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64); err == nil {
			newest = max(newest, n)
		}
	}
	inf.rvMu.Lock()
	ev := inf.eventRV
	inf.rvMu.Unlock()
	if n, err := strconv.ParseUint(ev, 10, 64); err == nil {
		newest = max(newest, n)
	}
	if newest == 0 {
		return ""
	}
	return strconv.FormatUint(newest, 10)
}

// ServerResourceVersion returns the resourceVersion the server's collection is
// at now, read with a consistent LIST of at most one object within the
// informer's selectors; see reflector.Reflector.ServerResourceVersion.
func (inf *Informer[T]) ServerResourceVersion(ctx context.Context) (string, error) {
	return inf.refl.ServerResourceVersion(ctx)
}

// reachedLocked reports whether the cache is at rv or later. It requires rvMu held.
func (inf *Informer[T]) reachedLocked(rv string) (bool, error) {
	if inf.appliedRV == "" {
		return false, nil
	}
	c, err := resourceversion.CompareResourceVersion(inf.appliedRV, rv)
	if err != nil {
		return false, fmt.Errorf("%w: the cache is at %q: %w", ErrInvalidResourceVersion, inf.appliedRV, err)
	}
	return c >= 0, nil
}

// applied records that units more were applied to the cache, the last one at rv,
// watch events if events.
func (inf *Informer[T]) applied(units int64, rv string, events bool) {
	inf.rvMu.Lock()
	defer inf.rvMu.Unlock()
	if events && rv != "" {
		inf.eventRV = rv
	}
	inf.appliedUnits += units
	if inf.mark.set && inf.appliedUnits >= inf.mark.at {
		// The bookmark came after everything up to mark.at: it is the newest unless the
		// batch went past it.
		if inf.appliedUnits == inf.mark.at || rv == "" {
			rv = inf.mark.rv
		}
		inf.mark = bookmarkMark{}
	}
	if rv != "" {
		inf.setRVLocked(rv)
	}
}

// bookmark records a watch bookmark: the cache is at rv once everything queued
// before it is applied. It is called from the reflector's goroutine, the only one
// that changes queued.
func (inf *Informer[T]) bookmark(rv string) {
	inf.rvMu.Lock()
	defer inf.rvMu.Unlock()
	if q := inf.queued; inf.appliedUnits < q {
		inf.mark = bookmarkMark{set: true, at: q, rv: rv}
		return
	}
	inf.setRVLocked(rv)
}

func (inf *Informer[T]) setRVLocked(rv string) {
	inf.appliedRV = rv
	if inf.rvWake != nil {
		close(inf.rvWake)
		inf.rvWake = nil
	}
}

// feed is the store the reflector writes to: the FIFO, counted, plus bookmarks.
type feed[T reflector.Object] struct{ inf *Informer[T] }

func (f feed[T]) Add(obj T) error    { return f.inf.count(f.inf.fifo.Add(obj)) }
func (f feed[T]) Update(obj T) error { return f.inf.count(f.inf.fifo.Update(obj)) }
func (f feed[T]) Delete(obj T) error { return f.inf.count(f.inf.fifo.Delete(obj)) }
func (f feed[T]) Replace(objs []T, rv string) error {
	if err := f.inf.count(f.inf.fifo.Replace(objs, rv)); err != nil {
		return err
	}
	sh, _ := f.inf.refl.ListedShard() // what this list covers: the reflector records it first
	f.inf.rvMu.Lock()
	f.inf.listed, f.inf.listedAt, f.inf.listedSet = sh, f.inf.queued, true
	f.inf.rvMu.Unlock()
	return nil
}
func (f feed[T]) Bookmark(rv string) error { f.inf.bookmark(rv); return nil }

// Refuse drops a refused object (see reflector.Refuser): a deletion of its key,
// whose handlers get the last cached state as a tombstone, then a bookmark at the
// refused event's resourceVersion, which the cache has reached once that deletion
// is applied.
func (f feed[T]) Refuse(key, rv string) error {
	if err := f.inf.count(f.inf.fifo.DeleteKey(key)); err != nil {
		return err
	}
	if rv != "" {
		f.inf.bookmark(rv)
	}
	return nil
}

// Len is the number of objects in the cache, for the reflector, which does not ask
// an empty cache to reuse objects (see reflector.SizedStore): the first list of an
// informer neither reads the listed objects' keys from the wire nor looks them up.
func (f feed[T]) Len() int { return f.inf.idx.Len() }

// Reuse hands the reflector the cached instance of a listed object that the cache
// holds at the same resourceVersion, so that a relist does not hold a second copy of
// unchanged objects. applyRelist keeps that instance anyway: the result is the same.
func (f feed[T]) Reuse(obj T) (T, bool) {
	var zero T
	rv := obj.GetResourceVersion()
	if rv == "" {
		return zero, false
	}
	old, ok, err := f.inf.idx.GetByObject(obj)
	if err != nil || !ok || old.GetResourceVersion() != rv {
		return zero, false
	}
	return old, true
}

func (inf *Informer[T]) count(err error) error {
	if err == nil {
		inf.queued++
	}
	return err
}

// keyOf is the key the FIFO and the cache use: "namespace/name", or "name".
func keyOf[T reflector.Object](obj T) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}

// isNil reports whether v is nil or holds a nil pointer, map, slice, channel or
// function.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
