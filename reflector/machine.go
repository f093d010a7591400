package reflector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// The list-watch cycle is a state machine. Each state below is one step:
// run it and it returns the next state, nil to stop.
//
//	streaming ──initial-events-end──▶ watching (same stream)
//	    │ rejected as invalid (auto mode)      ▲ │ ends after a while: watching again
//	    ▼                                      │ │ 410 Gone: streaming or listing
//	listing ───────all pages stored────────────┘ │ other errors:
//	                                             ▼
//	                        backingOff ──delay──▶ the state that failed
type state interface{ isState() }

// listing fetches a complete list with paginated LIST requests.
type listing struct {
	// rv is the list's resourceVersion: "0" for any (the watch cache
	// answers), "" for the most recent (a consistent read), anything else
	// for "not older than".
	rv string
	// whole asks for the list in one response: set after a continue token
	// expired twice, so a list too slow to page through still succeeds.
	whole bool
	// restarted is set after a continue token expired once.
	restarted bool
}

// streaming fetches a complete list as the initial events of a watch
// (sendInitialEvents), then keeps that watch.
type streaming struct {
	rv string // as in listing, "" for the most recent
}

// watching watches from the last synced resourceVersion. A stream carried
// over from streaming comes with it; otherwise a new watch is opened.
type watching struct {
	w      watch.Interface    // open stream, or nil
	cancel context.CancelFunc // ends w's request; set iff w is
	wctx   context.Context    // w's request's context; set iff w is
	start  time.Time          // when w was requested
}

// backingOff waits delay, then goes to next.
type backingOff struct {
	delay time.Duration
	next  state
}

func (listing) isState()    {}
func (streaming) isState()  {}
func (watching) isState()   {}
func (backingOff) isState() {}

// machine is the state of one Run: owned by the Run goroutine, so not
// locked. What other goroutines may read lives in Reflector.health.
type machine[T Object] struct {
	shardMode string // Health.ShardFiltering as last recorded
	r         *Reflector[T]
	cfg       Config[T] // with defaults applied

	backoff backoff
	// streamUnsupported is set in WatchListAuto mode once the server has
	// rejected a streaming list; the rest of Run uses LIST.
	streamUnsupported bool
	// serverPaginates is set when a LIST at resourceVersion "0" returned a
	// continue token: the watch cache is off for this resource, so every
	// list is paginated.
	serverPaginates bool
	// expiredInARow counts expired or too large resourceVersions since the
	// last watch event; past one, relists wait a backoff delay.
	expiredInARow int
	// clientErrorsInARow counts watches ended by an error of the client's own
	// (an event it could not decode, see clientSide) since the last watch
	// event; past one, the reflector relists instead of watching again from
	// the same resourceVersion, which would meet the same event again.
	clientErrorsInARow int
	// reusing is set while a list runs for which the store may reuse
	// objects (see SizedStore).
	reusing bool
	// lastRV mirrors health.LastResourceVersion; synced mirrors health.Synced.
	lastRV string
	synced bool
	// rand returns a number in [0, 1), for watch timeouts.
	rand func() float64
}

func (r *Reflector[T]) newMachine() (*machine[T], error) {
	cfg, err := r.cfg.validate()
	if err != nil {
		return nil, err
	}
	return &machine[T]{r: r, cfg: cfg, backoff: newBackoff(cfg.Backoff), rand: rand.Float64}, nil
}

func (m *machine[T]) run(ctx context.Context) {
	if m.cfg.WatchList == WatchListAuto && streamingUnsupported(m.r.lw) {
		m.streamUnsupported = true
	}
	var s state = listing{rv: "0"}
	if m.cfg.WatchList == WatchListOn || (m.cfg.WatchList == WatchListAuto && !m.streamUnsupported) {
		s = streaming{rv: ""}
	}
	for s != nil {
		if ctx.Err() != nil {
			if w, ok := s.(watching); ok && w.w != nil {
				w.w.Stop()
				w.cancel()
			}
			return
		}
		s = m.step(ctx, s)
	}
}

func (m *machine[T]) step(ctx context.Context, s state) state {
	switch s := s.(type) {
	case listing:
		if m.r.shard.Load().isEmpty() {
			return m.empty(ctx, s)
		}
		return m.list(ctx, s)
	case streaming:
		if m.r.shard.Load().isEmpty() {
			return m.empty(ctx, s)
		}
		return m.stream(ctx, s)
	case watching:
		return m.watch(ctx, s)
	case backingOff:
		return m.wait(ctx, s)
	}
	panic(fmt.Sprintf("reflector: unknown state %T", s))
}

// relist is where to go for a new complete list at rv.
func (m *machine[T]) relist(rv string) state {
	if m.cfg.WatchList == WatchListOn || (m.cfg.WatchList == WatchListAuto && !m.streamUnsupported) {
		return streaming{rv: rv}
	}
	return listing{rv: rv}
}

// list runs a listing step.
func (m *machine[T]) list(ctx context.Context, s listing) state {
	m.setState(StateListing)
	m.startReusing()
	listed := m.r.shard.Load()
	opts := m.optionsFor(listed)
	opts.ResourceVersion = s.rv
	if m.cfg.PageSize > 0 && !s.whole && (s.rv == "" || s.rv == "0" || m.serverPaginates) {
		opts.Limit = m.cfg.PageSize
	}
	var (
		items []T
		rv    string
	)
	for first := true; ; first = false {
		page, fromStore, refused, lm, err := m.listPage(ctx, opts)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if opts.Continue != "" && classify(err) == failExpired {
				// The snapshot behind the continue token was compacted away.
				// Start again at the most recent version; the second time,
				// in one response.
				m.r.log.V(2).Info("continue token expired, listing again", "err", err)
				m.countExpired()
				return listing{rv: "", restarted: true, whole: s.restarted}
			}
			return m.listFailed(err, s)
		}
		m.heard()
		if sh := m.r.shard.Load(); first && !sh.IsZero() {
			switch {
			case !sh.ServerFiltered():
				m.shardFiltering(ShardFilteringClient)
			case lm.ShardInfo != nil:
				m.shardFiltering(ShardFilteringServer)
			}
		}
		if first {
			rv = lm.ResourceVersion
			if s.rv == "0" && lm.Continue != "" && opts.Limit > 0 {
				m.serverPaginates = true
			}
			items = make([]T, 0, capacity(len(page), lm.RemainingItemCount))
		}
		m.countListed(len(page)+len(refused), countTrue(fromStore))
		for _, ref := range refused {
			m.refused(ref)
		}
		for i, obj := range page {
			if isNil(obj) {
				return m.fail("list", errors.New("the list holds a nil item"), s)
			}
			if fromStore != nil && fromStore[i] {
				if m.inShard(obj) {
					items = append(items, obj) // the store's own, transformed
				}
				continue
			}
			out, err := applyTransform(obj, m.cfg.Transform)
			if err != nil {
				m.refused(&RefusedError{Key: objectKey(obj), ResourceVersion: obj.GetResourceVersion(), Err: err})
				continue
			}
			if m.inShard(out) {
				items = append(items, m.reuse(out))
			}
		}
		if lm.Continue == "" {
			break
		}
		if lm.Continue == opts.Continue {
			return m.fail("list", fmt.Errorf("the server returned the same continue token twice: %q", lm.Continue), s)
		}
		opts.Continue = lm.Continue
		opts.ResourceVersion = "" // the token carries it
	}
	if err := m.replace(items, rv, listed); err != nil {
		return m.fail("store", fmt.Errorf("replace: %w", err), s)
	}
	m.stored(rv, false)
	m.r.log.V(2).Info("listed", "resourceVersion", rv, "items", len(items), "paginated", opts.Limit > 0)
	return watching{}
}

func (m *machine[T]) listFailed(err error, s listing) state {
	switch classify(err) {
	case failExpired, failTooLarge:
		if s.rv != "" {
			m.r.log.V(2).Info("resourceVersion unavailable, listing the most recent", "resourceVersion", s.rv, "err", err)
			m.countExpired()
			return listing{rv: ""}
		}
	}
	return m.fail("list", err, s)
}

// empty runs a listing or streaming step (s, retried after a failure) for the
// empty shard. It holds no object, so rather than list and watch a collection
// only to drop all of it (all of it arrives where the server does not filter),
// the reflector reads the collection's resourceVersion with a LIST of at most
// one object, empties the store at that version, and waits for SetShard or
// Relist: the empty shard stays empty whatever changes.
func (m *machine[T]) empty(ctx context.Context, s state) state {
	m.setState(StateListing)
	m.r.relistWanted.Store(false) // this is the list asked for
	listed := m.r.shard.Load()
	opts := m.optionsFor(listed)
	opts.Limit = 1
	page, _, refused, lm, err := m.listPage(ctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return m.fail("list", err, s)
	}
	m.heard()
	sh := m.r.shard.Load()
	switch {
	case !sh.ServerFiltered():
		m.shardFiltering(ShardFilteringClient)
	case lm.ShardInfo != nil:
		m.shardFiltering(ShardFilteringServer)
	}
	for _, obj := range page {
		if !isNil(obj) {
			m.inShard(obj) // an object here is the sign that the server does not filter
		}
	}
	m.countListed(len(page)+len(refused), 0)
	if lm.ResourceVersion == "" {
		return m.fail("list", errors.New("the server's list carried no resourceVersion"), s)
	}
	if err := m.replace(nil, lm.ResourceVersion, listed); err != nil {
		return m.fail("store", fmt.Errorf("replace: %w", err), s)
	}
	m.stored(lm.ResourceVersion, false)
	m.r.log.V(2).Info("holding the empty shard", "resourceVersion", lm.ResourceVersion)

	wake := make(chan struct{})
	var once sync.Once
	m.r.mu.Lock()
	m.r.endWatch = func(error) { once.Do(func() { close(wake) }) }
	m.r.mu.Unlock()
	defer func() {
		m.r.mu.Lock()
		m.r.endWatch = nil
		m.r.mu.Unlock()
	}()
	m.setState(StateWatching)
	m.backoff.healthyAt(time.Now())
	if !m.r.relistWanted.Load() { // else asked for before endWatch was set
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		}
	}
	m.r.relistWanted.Store(false)
	return m.relist("")
}

// capacity guesses a list's length from its first page, within reason: the
// remaining count is the server's claim, so it reserves room for at most
// maxGuessedItems more (append grows past that as items really arrive).
func capacity(first int, remaining *int64) int {
	if remaining == nil || *remaining <= 0 {
		return first
	}
	return first + int(min(*remaining, maxGuessedItems))
}

// maxGuessedItems bounds the items capacity reserves on a server's word.
const maxGuessedItems = 1 << 16

// stream runs a streaming step.
func (m *machine[T]) stream(ctx context.Context, s streaming) state {
	m.setState(StateListing)
	m.startReusing()
	asked := m.r.shard.Load()
	opts := m.optionsFor(asked)
	opts.ResourceVersion = s.rv
	opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	yes := true
	opts.SendInitialEvents = &yes
	opts.AllowWatchBookmarks = true
	wctx, cancel := m.watchContext(ctx, &opts)
	start := time.Now()
	w, err := m.openStream(wctx, opts)
	if err == nil && isNil(w) {
		err = errNilWatch
	}
	if err != nil {
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		return m.streamFailed(err, s)
	}
	stop := func() { w.Stop(); cancel() }
	// A ListerWatcher that does not end the stream when the request's time is
	// up (client-go's fake clients do not) is stopped then.
	defer context.AfterFunc(wctx, w.Stop)()
	var buf initialEvents[T]
	var listed, fromStore int
	defer func() { m.countListed(listed, fromStore) }()
	// unheard counts the events taken since LastEventTime was last set: as
	// in watch, it is set before the loop waits for an event and at least
	// every publishEvery events while they arrive back to back.
	unheard := 0
	defer func() {
		if unheard > 0 {
			m.heard()
		}
	}()
	results, done := w.ResultChan(), ctx.Done()
	for {
		var e watch.Event
		var ok bool
		// As in watch: an event already waiting is taken without a blocking
		// select, which costs several times more.
		select {
		case <-done:
			stop()
			return nil
		default:
		}
		if unheard >= publishEvery {
			m.heard()
			unheard = 0
		}
		select {
		case e, ok = <-results:
		default:
			if unheard > 0 {
				m.heard()
				unheard = 0
			}
			select {
			case <-done:
				stop()
				return nil
			case e, ok = <-results:
			}
		}
		if !ok {
			stop()
			if ctx.Err() != nil {
				return nil
			}
			err := fmt.Errorf("the stream ended after %d objects, before the end of its initial events", len(buf.items))
			if m.cfg.WatchList == WatchListAuto {
				m.r.log.V(1).Info("streaming list failed, falling back to LIST for this list", "err", err)
				return m.fallback(s)
			}
			return m.fail("watch", err, s)
		}
		if e.Type == watch.Error {
			stop()
			if clientSide(e.Object) {
				return m.fail("watch", apierrors.FromObject(e.Object), s)
			}
			unheard = 0
			m.heard()
			return m.streamFailed(apierrors.FromObject(e.Object), s)
		}
		if b, ok := e.Object.(*eventBatch); ok {
			for _, e := range b.events {
				if err := m.streamAdd(&buf, e, &listed, &fromStore); err != nil {
					stop()
					return m.fail("watch", err, s)
				}
			}
			unheard += len(b.events)
			b.release()
			continue
		}
		unheard++
		if e.Type == watch.Added || e.Type == watch.Modified {
			if err := m.streamAdd(&buf, e, &listed, &fromStore); err != nil {
				stop()
				return m.fail("watch", err, s)
			}
			continue
		}
		ev, err := decodeEvent(e, m.cfg.Transform)
		if err != nil {
			var ref *RefusedError
			if errors.As(err, &ref) {
				// As in streamAdd: Replace drops the store's copy.
				buf.removeKey(ref.Key)
				m.refused(ref)
				continue
			}
			stop()
			return m.fail("watch", err, s)
		}
		switch ev.kind {
		case kindDeleted:
			buf.remove(ev.obj)
		case kindBookmark:
			if !ev.initialEventsEnd {
				continue
			}
			unheard = 0 // stored sets LastEventTime
			// Counted before the list reaches the store, so that whoever sees
			// the store synced sees the counts too.
			m.countListed(listed, fromStore)
			listed, fromStore = 0, 0
			if sh := m.r.shard.Load(); !sh.IsZero() && !sh.ServerFiltered() {
				m.shardFiltering(ShardFilteringClient)
			} else if !sh.IsZero() && m.shardMode != ShardFilteringClient {
				// A whole streaming list without another shard's object: the
				// server filtered (its streams carry no ShardInfo to say so).
				m.shardFiltering(ShardFilteringServer)
			}
			if err := m.replace(buf.items, ev.rv, asked); err != nil {
				stop()
				return m.fail("store", fmt.Errorf("replace: %w", err), s)
			}
			m.stored(ev.rv, true)
			m.r.log.V(2).Info("listed by streaming", "resourceVersion", ev.rv, "items", len(buf.items))
			return watching{w: w, cancel: cancel, wctx: wctx, start: start}
		}
	}
}

// streamAdd takes an Added or Modified event of a streaming list's initial
// events into buf, counting it in listed (and fromStore, for the store's own
// object). An object that cannot be stored is refused and left out; the error
// returned fails the stream.
func (m *machine[T]) streamAdd(buf *initialEvents[T], e watch.Event, listed, fromStore *int) error {
	*listed++
	if so, ok := e.Object.(*storedObject[T]); ok {
		// The store's own, transformed: neither decoded nor transformed.
		*fromStore++
		if !m.inShard(so.obj) {
			return nil
		}
		if e.Type == watch.Added {
			buf.add(so.obj)
		} else {
			buf.set(so.obj)
		}
		return nil
	}
	ev, err := decodeEvent(e, m.cfg.Transform)
	if err != nil {
		var ref *RefusedError
		if !errors.As(err, &ref) {
			return err
		}
		// Left out of the list, like a refused LIST item: Replace drops the
		// store's copy.
		buf.removeKey(ref.Key)
		m.refused(ref)
		return nil
	}
	if !m.inShard(ev.obj) {
		return nil
	}
	if ev.kind == kindAdded {
		buf.add(m.reuse(ev.obj))
	} else {
		buf.set(m.reuse(ev.obj))
	}
	return nil
}

var errNilWatch = errors.New("the ListerWatcher returned a nil watch and no error")

func (m *machine[T]) streamFailed(err error, s streaming) state {
	switch classify(err) {
	case failExpired, failTooLarge:
		if s.rv != "" {
			m.r.log.V(2).Info("resourceVersion unavailable, streaming the most recent", "resourceVersion", s.rv, "err", err)
			m.countExpired()
			return streaming{rv: ""}
		}
	case failUnsupported:
		if m.cfg.WatchList == WatchListAuto {
			m.r.log.V(1).Info("the server rejected a streaming list, using LIST from now on", "err", err)
			m.streamUnsupported = true
			return m.fallback(s)
		}
	}
	return m.fail("watch", err, s)
}

// fallback is the listing that replaces a streaming list.
func (m *machine[T]) fallback(s streaming) state {
	if s.rv == "" && !m.synced {
		return listing{rv: "0"}
	}
	return listing{rv: s.rv}
}

// watch runs a watching step.
func (m *machine[T]) watch(ctx context.Context, s watching) state {
	w, cancel, wctx, start := s.w, s.cancel, s.wctx, s.start
	if w == nil {
		opts := m.options()
		opts.ResourceVersion = m.lastRV
		opts.AllowWatchBookmarks = true
		if m.r.relistWanted.Swap(false) {
			return m.relist("") // Relist
		}
		var c context.CancelFunc
		wctx, c = m.watchContext(ctx, &opts)
		start = time.Now()
		var err error
		if rl, ok := m.r.lw.(reusingLister[T]); ok {
			w, err = rl.watchReusing(wctx, opts, nil) // it batches events
		} else {
			w, err = m.r.lw.Watch(wctx, opts)
		}
		if err == nil && isNil(w) {
			err = errNilWatch
		}
		if err != nil {
			c()
			if ctx.Err() != nil {
				return nil
			}
			return m.watchFailed(err)
		}
		cancel = c
		m.r.update(func(h *Health) { h.Stats.Watches++ })
	}
	defer cancel()
	defer w.Stop()
	// Relist ends this watch through wctx, with errRelistRequested.
	wctx, endWatch := context.WithCancelCause(wctx)
	defer endWatch(nil)
	m.r.mu.Lock()
	m.r.endWatch = endWatch
	m.r.mu.Unlock()
	defer func() {
		m.r.mu.Lock()
		m.r.endWatch = nil
		m.r.mu.Unlock()
	}()
	if m.r.relistWanted.Load() {
		endWatch(errRelistRequested) // asked for while this watch was opening
	}
	// A ListerWatcher that does not end the stream when the request's time is
	// up (client-go's fake clients do not) is stopped then, and the loop below
	// sees the stream end, as after a timeout. This costs nothing per event,
	// unlike a third case in the select.
	defer context.AfterFunc(wctx, w.Stop)()
	m.setState(StateWatching)
	m.backoff.healthyAt(time.Now())
	// Watching without a resourceVersion (only with ListerWatchers that
	// provide none) replays the collection in no particular order: its
	// resourceVersions say nothing about progress.
	fromScratch := m.lastRV == ""
	events := 0
	// A watch that stays open past shortWatch is progress, even without
	// events: a quiet collection is not a failing one. That is evaluated
	// when Health is read and when the watch ends (see settleLocked), not
	// by a timer case in the select below: a timer channel makes every
	// blocking select several times dearer.
	m.openSettle(time.Now())
	defer m.endSettle()
	results := w.ResultChan()
	done := ctx.Done()
	// p is the progress not yet published to Health: it is published before
	// the loop waits for an event, and at least every publishEvery events
	// while events arrive back to back (see Health.LastEventTime).
	var p unpublished[T]
	// pending are the events of batch (see reusingLister) not taken yet.
	var batch *eventBatch
	var pending []watch.Event
	for {
		var e watch.Event
		var ok bool
		// An event already waiting is taken without a blocking select, and
		// the progress is published only when there is none.
		select {
		case <-done:
			m.publish(&p)
			return nil
		default:
		}
		if len(pending) > 0 {
			e, ok, pending = pending[0], true, pending[1:]
		} else {
			if batch != nil {
				batch.release()
				batch = nil
			}
			select {
			case e, ok = <-results:
			default:
				m.publish(&p)
				select {
				case <-done:
					return nil
				case e, ok = <-results:
				}
			}
			if b, isBatch := e.Object.(*eventBatch); ok && isBatch && len(b.events) > 0 {
				batch, e, pending = b, b.events[0], b.events[1:]
			}
		}
		if !ok {
			m.leave(&p)
			if ctx.Err() != nil {
				return nil
			}
			if context.Cause(wctx) == errRelistRequested {
				m.r.relistWanted.Store(false)
				m.r.log.V(4).Info("watch ended for a relist", "events", events)
				return m.relist("")
			}
			if events == 0 && time.Since(start) < shortWatch {
				return m.fail("watch", errShortWatch, watching{})
			}
			m.r.log.V(4).Info("watch ended, watching again", "events", events)
			return watching{}
		}
		events++
		if e.Type == watch.Error {
			m.leave(&p)
			if context.Cause(wctx) == errRelistRequested {
				// The client's report of the stream it was told to close.
				m.r.relistWanted.Store(false)
				m.r.log.V(4).Info("watch ended for a relist", "events", events)
				return m.relist("")
			}
			if clientSide(e.Object) {
				return m.clientFailed(apierrors.FromObject(e.Object))
			}
			m.heard()
			return m.watchFailed(apierrors.FromObject(e.Object))
		}
		ev, err := decodeEvent(e, m.cfg.Transform)
		if err != nil {
			var ref *RefusedError
			if !errors.As(err, &ref) {
				// Nothing ties the event to one object: the store may have missed
				// a change that no watch from lastRV can give again. Relist.
				m.leave(&p)
				m.heard()
				return m.fail("watch", err, m.relist(""))
			}
			m.refused(ref)
			if m.r.refuser != nil {
				if err := m.r.refuser.Refuse(ref.Key, ref.ResourceVersion); err != nil {
					m.leave(&p)
					m.heard()
					return m.fail("store", fmt.Errorf("refuse %s: %w", ref.Key, err), watching{})
				}
			}
			ev = watchEvent[T]{kind: kindRefused, rv: ref.ResourceVersion}
		} else if (ev.kind == kindAdded || ev.kind == kindModified || ev.kind == kindDeleted) && !m.inShard(ev.obj) {
			// Another shard's: only its resourceVersion, as a bookmark.
			ev = watchEvent[T]{kind: kindBookmark, rv: ev.resourceVersion()}
			if err := m.apply(ev); err != nil {
				m.leave(&p)
				m.heard()
				return m.fail("store", err, watching{})
			}
		} else if err := m.apply(ev); err != nil {
			m.leave(&p)
			m.heard()
			return m.fail("store", err, watching{})
		}
		m.progress(&p, &ev, fromScratch)
	}
}

var errShortWatch = fmt.Errorf("the watch ended within %v without any event", shortWatch)

// clientSideCause is the status cause type of the Error events that a watch's
// client makes up itself when it cannot read the stream (client-go's stream
// watcher and FromREST alike): they are not news from the server.
const clientSideCause metav1.CauseType = "ClientWatchDecoding"

// clientSide reports whether the object of an Error event was made up by the
// client rather than sent by the server.
func clientSide(obj any) bool {
	st, ok := obj.(*metav1.Status)
	if !ok || st == nil || st.Details == nil {
		return false
	}
	for _, c := range st.Details.Causes {
		if c.Type == clientSideCause {
			return true
		}
	}
	return false
}

// clientFailed handles a watch ended by the client's own error: a stream it
// could not read, from a broken connection or an event it cannot decode. The
// first time, it watches again from the same resourceVersion; a second time in a
// row with no event in between, that resourceVersion leads to the same event, so
// it relists at the most recent resourceVersion instead.
func (m *machine[T]) clientFailed(err error) state {
	m.clientErrorsInARow++
	if m.clientErrorsInARow > 1 {
		m.r.log.V(1).Info("the watch failed on the client side twice in a row, relisting", "err", err)
		return m.fail("watch", err, m.relist(""))
	}
	return m.fail("watch", err, watching{})
}

// refused reports an object left out of the store (see RefusedError).
func (m *machine[T]) refused(ref *RefusedError) {
	ref.Name = m.r.name
	m.r.update(func(h *Health) { h.Stats.Refused++ })
	m.r.log.Error(ref, "object refused", "key", ref.Key, "resourceVersion", ref.ResourceVersion)
	m.onError(ref)
}

// onError calls Config.OnError, if set, with err. A panic of OnError is logged
// and goes no further: a bug in error reporting must not stop the reflector.
func (m *machine[T]) onError(err error) {
	if m.cfg.OnError == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			m.r.log.Error(&PanicError{Value: v, Stack: debug.Stack()}, "OnError panicked", "err", err)
		}
	}()
	m.cfg.OnError(err)
}

func (m *machine[T]) watchFailed(err error) state {
	var next state
	switch classify(err) {
	case failExpired:
		// A list at the last resourceVersion is served from the watch
		// cache and cannot go back in time.
		next = m.relist(m.lastRV)
	case failTooLarge:
		// This server is behind the resourceVersion we have: only the most
		// recent one is safe.
		next = m.relist("")
	case failStoreRead:
		// The server cannot send an object between lastRV and now (a corrupt
		// one, deleted unsafely): no watch from lastRV gets past it, but a list
		// of the most recent state no longer holds it.
		m.r.log.V(1).Info("the server could not read an object for the watch, relisting", "err", err)
		return m.fail("watch", err, m.relist(""))
	default:
		return m.fail("watch", err, watching{})
	}
	m.countExpired()
	m.expiredInARow++
	if m.expiredInARow > 1 {
		// Expired again with no event in between: do not spin.
		return m.fail("watch", err, next)
	}
	m.r.log.V(2).Info("watch resourceVersion unavailable, relisting", "resourceVersion", m.lastRV, "err", err)
	return next
}

// reuse returns the store's instance of a listed object when the store has
// the same version (see ReuseStore), or obj. An answer of another object or
// version is ignored.
func (m *machine[T]) reuse(obj T) T {
	if m.r.reuse == nil || !m.reusing {
		return obj
	}
	got, ok := m.r.reuse.Reuse(obj)
	if !ok || isNil(got) || got.GetResourceVersion() != obj.GetResourceVersion() ||
		got.GetName() != obj.GetName() || got.GetNamespace() != obj.GetNamespace() {
		return obj
	}
	return got
}

// apply hands one watch event to the store.
func (m *machine[T]) apply(ev watchEvent[T]) error {
	switch ev.kind {
	case kindAdded:
		return m.r.store.Add(ev.obj)
	case kindModified:
		return m.r.store.Update(ev.obj)
	case kindDeleted:
		return m.r.store.Delete(ev.obj)
	case kindBookmark:
		if m.r.bookmarks != nil {
			return m.r.bookmarks.Bookmark(ev.rv)
		}
	}
	return nil
}

// wait runs a backingOff step.
func (m *machine[T]) wait(ctx context.Context, s backingOff) state {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil
	case <-t.C:
		return s.next
	}
}

// fail records err, reports it, and returns the backoff before retry.
func (m *machine[T]) fail(verb string, err error, retry state) state {
	if classify(err) == failAccess {
		err = &AccessError{Name: m.r.name, Verb: verb, Reason: apierrors.ReasonForError(err), Err: err}
	} else {
		err = fmt.Errorf("reflector: %s: %s: %w", m.r.name, verb, err)
	}
	now := time.Now()
	d := m.backoff.failAt(now)
	if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
		d = max(d, min(time.Duration(s)*time.Second, m.cfg.Backoff.Max))
	}
	var failures int
	m.r.update(func(h *Health) {
		h.State = StateBackingOff
		h.RetryAt = now.Add(d)
		h.LastError = err
		h.ConsecutiveFailures++
		h.Stats.Failures++
		failures = h.ConsecutiveFailures
	})
	m.r.log.V(1).Info("failed, backing off", "err", err, "delay", d, "consecutiveFailures", failures)
	m.onError(err)
	return backingOff{delay: d, next: retry}
}

// options returns the ListOptions common to every request.
func (m *machine[T]) options() metav1.ListOptions {
	return m.optionsFor(m.r.shard.Load())
}

func (m *machine[T]) optionsFor(sh *Shard) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: m.cfg.LabelSelector, FieldSelector: m.cfg.FieldSelector, ShardSelector: sh.Selector()}
}

// replace hands a complete list to the store, after recording for ListedShard
// what it covers: the shard it was asked for with (listed), unless SetShard
// came since (then nothing: a relist follows).
func (m *machine[T]) replace(items []T, rv string, listed *Shard) error {
	covered := listed
	if m.r.shard.Load() != listed {
		covered = &Shard{Field: cmp.Or(listed.Field, ShardByUID)} // the empty shard
	}
	m.r.listed.Store(covered)
	return m.r.store.Replace(items, rv)
}

// watchContext sets a random timeout in opts and returns the context for
// the watch request: it ends watchGrace after that timeout.
func (m *machine[T]) watchContext(ctx context.Context, opts *metav1.ListOptions) (context.Context, context.CancelFunc) {
	timeout := m.cfg.MinWatchTimeout + time.Duration(m.rand()*float64(m.cfg.MinWatchTimeout))
	secs := max(1, int64(timeout/time.Second))
	opts.TimeoutSeconds = &secs
	return context.WithTimeout(ctx, time.Duration(secs)*time.Second+watchGrace)
}

func (m *machine[T]) setState(s State) {
	m.r.update(func(h *Health) { h.State = s; h.RetryAt = time.Time{} })
}

// heard records that the server answered.
func (m *machine[T]) heard() {
	now := time.Now()
	m.r.update(func(h *Health) { h.LastEventTime = now })
}

// stored records a complete list handed to the store.
func (m *machine[T]) stored(rv string, streamed bool) {
	m.lastRV, m.synced = rv, true
	now := time.Now()
	m.r.update(func(h *Health) {
		h.Synced = true
		h.LastResourceVersion = rv
		h.LastEventTime = now
		h.ConsecutiveFailures = 0
		if streamed {
			h.Stats.StreamingLists++
		} else {
			h.Stats.Lists++
		}
	})
}

// openSettle records that a watch opened at t (see settleLocked).
func (m *machine[T]) openSettle(t time.Time) {
	m.r.mu.Lock()
	m.r.watchSince = t
	m.r.mu.Unlock()
}

// endSettle records that the open watch ends now: if it was open for
// shortWatch, that ends the run of failures before it; either way a failure
// recorded afterwards is not erased. It may be called more than once.
func (m *machine[T]) endSettle() {
	m.r.mu.Lock()
	m.r.settleLocked(time.Now())
	m.r.watchSince = time.Time{}
	m.r.mu.Unlock()
}

// leave is what the watch loop does before it returns: publish its progress
// and end the watch's settling.
func (m *machine[T]) leave(p *unpublished[T]) {
	m.publish(p)
	m.endSettle()
}

// publishEvery is the most watch events the reflector applies before it
// publishes its progress to Health while events arrive back to back.
const publishEvery = 64

// unpublished is what a watch loop has applied since it last published to
// Health: seen events (bookmarks included), of which events were Added,
// Modified or Deleted, and the last event that tells the resourceVersion
// reached (hasLast).
type unpublished[T Object] struct {
	seen    int
	events  int64
	hasLast bool
	last    watchEvent[T]
}

// progress records a watch event applied to the store; fromScratch when its
// resourceVersion says nothing about progress. Health, and the machine's
// lastRV, are updated by publish, here once every publishEvery events: the
// watch loop publishes before it waits and before it returns, so nothing
// reads lastRV in between. Only the last event's resourceVersion is read.
func (m *machine[T]) progress(p *unpublished[T], ev *watchEvent[T], fromScratch bool) {
	m.expiredInARow = 0
	m.clientErrorsInARow = 0
	p.seen++
	if ev.kind != kindBookmark && ev.kind != kindRefused {
		p.events++
	}
	if !fromScratch {
		p.hasLast, p.last = true, *ev
	}
	if p.seen >= publishEvery {
		m.publish(p)
	}
}

// publish brings lastRV up to the last event recorded, copies the progress
// recorded since the last publish to Health, with the current time as
// LastEventTime, and resets p. It does nothing if there is none.
func (m *machine[T]) publish(p *unpublished[T]) {
	if p.seen == 0 {
		return
	}
	if p.hasLast {
		// An event without a resourceVersion (no server sends one) keeps the
		// last one known.
		if rv := p.last.resourceVersion(); rv != "" {
			m.lastRV = rv
		}
	}
	now := time.Now()
	m.r.mu.Lock()
	h := &m.r.health
	h.LastEventTime = now
	h.LastResourceVersion = m.lastRV
	h.ConsecutiveFailures = 0
	h.Stats.Events += p.events
	m.r.mu.Unlock()
	*p = unpublished[T]{}
}

func (m *machine[T]) countExpired() {
	m.r.update(func(h *Health) { h.Stats.Expired++ })
}

// listPage lists one page. A ListerWatcher that reads the wire itself
// (FromREST, a reusingLister) is asked through its reusing form, which also
// returns the items it could not decode but could name (refused), and, when
// the store offers its objects (see ReuseKeyStore), skips decoding those.
func (m *machine[T]) listPage(ctx context.Context, opts metav1.ListOptions) ([]T, []bool, []*RefusedError, metav1.ListMeta, error) {
	if rl, ok := m.r.lw.(reusingLister[T]); ok {
		var lookup lookupFunc[T]
		if m.r.reuseKey != nil && m.reusing {
			lookup = m.lookup
		}
		return rl.listReusing(ctx, opts, lookup)
	}
	page, lm, err := m.r.lw.List(ctx, opts)
	return page, nil, nil, lm, err
}

// openStream opens a streaming list, through the ListerWatcher's reusing form
// when it has one (FromREST): that stream batches the initial events (see
// reusingLister) and, when the store offers its objects (see ReuseKeyStore),
// does not decode those it holds.
func (m *machine[T]) openStream(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if rl, ok := m.r.lw.(reusingLister[T]); ok {
		var lookup lookupFunc[T]
		if m.r.reuseKey != nil && m.reusing {
			lookup = m.lookup
		}
		return rl.watchReusing(ctx, opts, lookup)
	}
	return m.r.lw.Watch(ctx, opts)
}

// startReusing sets m.reusing for a list that starts: false when the store
// says it is empty (see SizedStore).
func (m *machine[T]) startReusing() {
	m.reusing = m.r.sized == nil || m.r.sized.Len() > 0
}

// lookup asks the store for its instance of one version of an object, and
// checks the answer. It is called from the ListerWatcher, possibly on
// another goroutine: it reads nothing but the store.
func (m *machine[T]) lookup(namespace, name, resourceVersion string) (T, bool) {
	var zero T
	if resourceVersion == "" {
		return zero, false
	}
	got, ok := m.r.reuseKey.ReuseKey(namespace, name, resourceVersion)
	if !ok || isNil(got) || got.GetResourceVersion() != resourceVersion ||
		got.GetName() != name || got.GetNamespace() != namespace {
		return zero, false
	}
	return got, true
}

// countListed adds to the listing counters of Stats.
func (m *machine[T]) countListed(listed, fromStore int) {
	if listed == 0 {
		return
	}
	m.r.update(func(h *Health) {
		h.Stats.ListedObjects += int64(listed)
		h.Stats.ListedFromStore += int64(fromStore)
	})
}

func countTrue(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}

// inShard reports whether obj is in the reflector's shard (every object without
// one). An object outside it is the server's sign that it does not filter.
func (m *machine[T]) inShard(obj T) bool {
	sh := m.r.shard.Load()
	if sh.IsZero() {
		return true
	}
	if sh.ContainsObject(obj) {
		return true
	}
	m.shardFiltering(ShardFilteringClient)
	return false
}

// shardFiltering records who filters the shard.
func (m *machine[T]) shardFiltering(mode string) {
	if m.shardMode == mode {
		return
	}
	m.shardMode = mode
	m.r.mu.Lock()
	m.r.health.ShardFiltering = mode
	m.r.mu.Unlock()
}
