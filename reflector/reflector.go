package reflector

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// Store receives what the reflector learns. Add is called for watch Added
// events, Update for Modified, Delete for Deleted (with the object's last
// state), and Replace once per complete list, with every object of the list
// and the list's resourceVersion. The reflector calls it from its Run
// goroutine only, never concurrently, and holds no lock while doing so.
//
// An error fails the list or watch in progress; the reflector backs off and
// retries (a failed Replace is retried as a whole relist).
type Store[T any] interface {
	Add(obj T) error
	Update(obj T) error
	Delete(obj T) error
	Replace(objs []T, resourceVersion string) error
}

// BookmarkStore is an optional interface of a Store: when the store has it,
// the reflector calls Bookmark with the resourceVersion of every watch
// bookmark, so the store can tell how far it is in step with the server even
// when no object changes.
type BookmarkStore interface {
	Bookmark(resourceVersion string) error
}

// Refuser is an optional interface of a Store. The reflector calls Refuse, in
// place of Add, Update or Delete, for a watch event whose object it could not
// store (see RefusedError), with the object's key ("namespace/name" or "name") and
// the event's resourceVersion: the store should drop what it holds under key, as
// the server's current version of that object cannot be represented. Later events
// for the key are delivered as usual (an Update for a key the store dropped is an
// add). Lists leave refused objects out, so Replace drops them as well. A store
// without Refuse keeps what it held for the key until the next list.
type Refuser interface {
	Refuse(key, resourceVersion string) error
}

// ReuseStore is an optional interface of a Store. While the reflector
// assembles a list, it passes every listed object (transformed) to Reuse
// as soon as it is decoded, page by page or event by event; when Reuse
// returns ok, the reflector lists the object Reuse returned instead and
// drops the decoded one at once.
//
// A store that already holds an object of the same key and the same
// non-empty resourceVersion returns it: the two are the same version of
// the same object. A relist of mostly unchanged objects then holds the
// store's objects plus the changed ones and one page, instead of a second
// copy of the whole collection, and the store keeps its own instances.
// Reuse is called from the Run goroutine, possibly while other goroutines
// read or apply the store, and must not block. The reflector ignores an
// answer whose namespace, name or resourceVersion differ from obj's.
type ReuseStore[T any] interface {
	Reuse(obj T) (T, bool)
}

// ReuseKeyStore is an optional interface of a Store, for ListerWatchers that
// can skip decoding listed objects (FromREST). While the reflector
// assembles a list, such a ListerWatcher reads each object's namespace, name
// and resourceVersion from the wire and calls ReuseKey; when it returns ok,
// the object is not decoded and the reflector lists the returned object as
// it is: no Transform, no Reuse.
//
// A store that holds the object of that namespace and name at exactly that
// (non-empty) resourceVersion returns it; it must return an object it
// stored, which was transformed when it was. ReuseKey may be called from a
// goroutine of the ListerWatcher, while other goroutines read or apply the
// store, and must not block. The reflector ignores an answer whose
// namespace, name or resourceVersion differ from the ones asked for.
type ReuseKeyStore[T any] interface {
	ReuseKey(namespace, name, resourceVersion string) (T, bool)
}

// SizedStore is an optional interface of a ReuseStore or ReuseKeyStore. A
// list that starts while Len returns 0 does not ask the store to reuse
// anything: an empty store has nothing to give, and asking costs, for every
// listed object, a lookup (and, through FromREST, reading its key from the
// wire). The informer's store has it.
type SizedStore interface {
	Len() int
}

// WatchListMode selects how the reflector fetches a full list.
type WatchListMode int

const (
	// WatchListAuto streams the list (a watch with sendInitialEvents) and falls
	// back to a paginated LIST when the server rejects such a watch as
	// invalid, which it does when its WatchList feature is off; the fallback
	// then holds for the rest of Run. It also falls back, for one list, when a
	// stream ends before the server marked the end of the initial events.
	WatchListAuto WatchListMode = iota
	// WatchListOn always streams; failures are retried with backoff.
	WatchListOn
	// WatchListOff always uses paginated LIST requests. Use it with fake
	// clients that ignore sendInitialEvents.
	WatchListOff
)

func (m WatchListMode) String() string {
	switch m {
	case WatchListAuto:
		return "auto"
	case WatchListOn:
		return "on"
	case WatchListOff:
		return "off"
	}
	return fmt.Sprintf("WatchListMode(%d)", int(m))
}

// Config configures a Reflector. The zero value works: every zero field
// means the documented default.
type Config[T Object] struct {
	// Name identifies the reflector in logs and errors. Default: the Go type
	// of T, such as "*v1.ConfigMap".
	Name string

	// Transform, if set, is applied to every object before the store sees it:
	// list items and the objects of Added, Modified and Deleted events. It
	// may change obj in place and return it, or return another object. An
	// object on which it returns an error or nil, or panics, is refused: left
	// out of the store as if absent, reported to OnError as a *RefusedError
	// and counted in Stats.Refused, while the rest of the collection goes on
	// (see Refuser). StripManagedFields is a ready one.
	Transform func(obj T) (T, error)

	// LabelSelector and FieldSelector restrict the objects the reflector
	// lists and watches, in the syntax of kubectl's --selector and
	// --field-selector. Run returns an error if one does not parse.
	LabelSelector string
	FieldSelector string
	// Shard, if set, restricts the reflector to one shard of the collection
	// (see Shard), filtered by the server where it can and by the reflector
	// where it cannot. Objects are hashed after Transform.
	Shard Shard

	// PageSize is the limit of each LIST page. 0 means 500; a negative value
	// asks for whole lists. Lists at a known resourceVersion are not
	// paginated unless the server showed it paginates lists at "0", so that
	// they are served from the watch cache.
	PageSize int64

	// WatchList selects streaming lists or paginated LISTs. Default:
	// WatchListAuto.
	WatchList WatchListMode

	// Backoff configures the delays between retries after failures.
	Backoff Backoff

	// MinWatchTimeout is the shortest timeout asked of the server for a watch;
	// each watch gets one at random in [MinWatchTimeout, 2·MinWatchTimeout),
	// which spreads reconnections. When a watch ends this way the reflector
	// watches again at once from where it was. Default: 5 minutes. The
	// reflector also gives up on a watch 30s after its timeout if the server
	// failed to close it.
	MinWatchTimeout time.Duration

	// Logger receives the reflector's logs. Default: discard.
	Logger logr.Logger

	// OnError, if set, is called with every error that makes the reflector
	// back off, including *AccessError, from the Run goroutine and without
	// any lock held. It must return quickly.
	OnError func(error)
}

const (
	defaultPageSize        = 500
	defaultMinWatchTimeout = 5 * time.Minute
	// watchGrace is how long after its requested timeout the reflector waits
	// for the server to end a watch before ending it itself.
	watchGrace = 30 * time.Second
	// shortWatch: a watch that ends sooner than this without any event is a
	// failure (backoff), not a normal end, so a server that closes watches
	// at once cannot make the reflector spin.
	shortWatch = time.Second
)

// State is where a Reflector stands in its list-watch cycle.
type State int

const (
	// StateStopped: Run has not been called, or has returned.
	StateStopped State = iota
	// StateListing: fetching a complete list, by paginated LIST or by the
	// initial events of a streaming list.
	StateListing
	// StateWatching: a watch is open and its events reach the store. A
	// reflector of the empty shard (see Shard), which holds nothing whatever
	// changes, opens no watch: it waits in this state for SetShard or Relist.
	StateWatching
	// StateBackingOff: waiting before retrying after a failure.
	StateBackingOff
)

func (s State) String() string {
	switch s {
	case StateStopped:
		return "Stopped"
	case StateListing:
		return "Listing"
	case StateWatching:
		return "Watching"
	case StateBackingOff:
		return "BackingOff"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Health is a snapshot of a Reflector's condition, from Reflector.Health.
type Health struct {
	State State
	// Synced is true once a complete list has been handed to Store.Replace.
	Synced bool
	// LastResourceVersion is the resourceVersion the store has been brought
	// up to: that of the last list, applied event or bookmark.
	LastResourceVersion string
	// LastEventTime is when the reflector last heard from the server: a list
	// page, a watch event (an Error event the server sent included) or a
	// bookmark. An error the client made up itself (a broken stream, an
	// event it could not decode) is not news from the server and leaves it
	// as it was. Zero before the first.
	//
	// While watch events arrive back to back, LastEventTime,
	// LastResourceVersion and Stats.Events are published together once per
	// batch of at most 64 events (LastEventTime is then when the batch's last
	// event was applied), and always before the reflector waits for the next
	// event or leaves the watch: a snapshot taken during a burst may lag the
	// store by at most 64 events, never more, and never once the burst ends.
	LastEventTime time.Time
	// LastError is the last error that made the reflector back off; it stays
	// set after recovery (see ConsecutiveFailures). Forbidden and
	// Unauthorized answers are *AccessError.
	LastError error
	// ConsecutiveFailures counts failures since the last progress: a stored
	// list, a watch event, or a watch open for a second. 0 means the
	// reflector is not failing now.
	ConsecutiveFailures int
	// RetryAt is when the next attempt starts, while State is
	// StateBackingOff.
	RetryAt time.Time
	// Stats counts what happened since Run started.
	Stats Stats
	// ShardFiltering says, with Config.Shard set, who keeps objects outside
	// the shard out: ShardFilteringServer once a LIST's answer carried
	// ShardInfo or a streaming list brought no object outside the shard,
	// ShardFilteringClient once the server sent an object outside the shard
	// (it stays so); "" before the first list (or without a Shard).
	ShardFiltering string
}

// Stats are cumulative counters of a Reflector.
type Stats struct {
	// Lists counts complete lists stored through paginated LIST requests.
	Lists int64
	// StreamingLists counts complete lists stored through streaming
	// watch-list requests.
	StreamingLists int64
	// Watches counts watch requests opened (streaming lists not included).
	Watches int64
	// Events counts Added, Modified and Deleted events stored from watches.
	Events int64
	// Expired counts relists forced by an expired or too large
	// resourceVersion (410 Gone and the like).
	Expired int64
	// Failures counts errors that made the reflector back off.
	Failures int64
	// ListedObjects counts the objects received while listing: the items of
	// LIST pages and the objects of a streaming list's initial events,
	// whether the list completed or not. They are counted when the page, or
	// the streaming list, ends.
	ListedObjects int64
	// ListedFromStore counts the ListedObjects that were never decoded: the
	// ListerWatcher read only their key and took the store's instance (see
	// ReuseKeyStore). ListedObjects - ListedFromStore objects were decoded.
	ListedFromStore int64
	// Refused counts the objects left out of the store because they could
	// not be transformed or decoded (see RefusedError), in lists and watch
	// events.
	Refused int64
}

// Reflector keeps a Store in step with one collection of the API server: it
// lists the collection, then watches it from the list's resourceVersion,
// and lists again only when the server no longer has that history.
//
// The zero value is not usable: create one with New, start it with Run.
// Health, LastSyncResourceVersion and Name are safe to call from any
// goroutine at any time. The reflector itself starts no goroutine: all its
// work happens in Run. Beyond a few words of state, it holds memory only
// while a list is assembled: the list's items, until Store.Replace (with a
// ReuseStore, only the items the store did not already hold; with FromREST
// and a ReuseKeyStore, those items are not even decoded).
type Reflector[T Object] struct {
	lw        ListerWatcher[T]
	store     Store[T]
	bookmarks BookmarkStore // store as a BookmarkStore, or nil
	reuse     ReuseStore[T] // store as a ReuseStore, or nil
	refuser   Refuser       // store as a Refuser, or nil
	cfg       Config[T]     // as given; defaults are applied in Run
	name      string
	log       logr.Logger
	// reuseKey is store as a ReuseKeyStore when lw can use one (it is a
	// reusingLister), or nil.
	reuseKey ReuseKeyStore[T]
	// sized is store as a SizedStore, or nil.
	sized SizedStore

	started atomic.Bool
	// relistWanted is set by Relist until the reflector lists again.
	relistWanted atomic.Bool
	// shard is Config.Shard, or what SetShard set since; never nil.
	shard atomic.Pointer[Shard]
	// listed is what the last list handed to the store covers (ListedShard);
	// nil before the first.
	listed atomic.Pointer[Shard]

	mu sync.Mutex
	// endWatch ends the open watch for Relist; nil when none is open.
	// Guarded by mu.
	endWatch context.CancelCauseFunc
	health   Health // guarded by mu
	// watchSince is when the open watch started, zero when no watch is open or
	// it has settled (see settleLocked). Guarded by mu.
	watchSince time.Time
}

// New returns a Reflector that keeps store in step with what lw serves. It
// panics if lw or store is nil. Nothing happens until Run.
func New[T Object](lw ListerWatcher[T], store Store[T], cfg Config[T]) *Reflector[T] {
	if isNil(lw) {
		panic("reflector: New called with a nil ListerWatcher")
	}
	if isNil(store) {
		panic("reflector: New called with a nil Store")
	}
	name := cfg.Name
	if name == "" {
		name = reflect.TypeFor[T]().String()
	}
	r := &Reflector[T]{
		lw:    lw,
		store: store,
		cfg:   cfg,
		name:  name,
		log:   cfg.Logger.WithValues("reflector", name),
	}
	sh := cfg.Shard
	r.shard.Store(&sh)
	r.bookmarks, _ = store.(BookmarkStore)
	r.reuse, _ = store.(ReuseStore[T])
	r.refuser, _ = store.(Refuser)
	r.sized, _ = store.(SizedStore)
	if d, ok := lw.(managedFieldsDropper[T]); ok && isStripManagedFields(cfg.Transform) {
		r.lw = d.withoutManagedFields()
	}
	if _, ok := r.lw.(reusingLister[T]); ok {
		r.reuseKey, _ = store.(ReuseKeyStore[T])
	}
	return r
}

// managedFieldsDropper is implemented by ListerWatchers that can decode objects
// without their managedFields: FromREST's.
type managedFieldsDropper[T Object] interface {
	withoutManagedFields() ListerWatcher[T]
}

// isStripManagedFields reports whether f is StripManagedFields (of any type),
// which drops what a managedFieldsDropper need not decode. A Transform that
// merely calls it is not recognized, and gets every object decoded whole.
//
// It compares the function's name: inside generic code such as New, the value
// StripManagedFields[T] is a closure of its own, not the function the caller
// passed, so their pointers differ. The runtime names every instantiation of a
// generic function after the function, with "[...]" for its type arguments.
func isStripManagedFields[T Object](f func(T) (T, error)) bool {
	if f == nil {
		return false
	}
	fn := runtime.FuncForPC(reflect.ValueOf(f).Pointer())
	return fn != nil && fn.Name() == stripManagedFieldsName
}

var stripManagedFieldsName = reflect.TypeFor[Shard]().PkgPath() + ".StripManagedFields[...]"

// errRelistRequested ends a watch for Relist.
var errRelistRequested = errors.New("reflector: relist requested")

// Relist makes the reflector list again now, with a consistent read, so that
// the store reaches what the server holds (a resourceVersion no event of its
// own brings it to: its collection is quiet, or the change was outside its
// selectors), rather than at the server's next periodic bookmark, about a
// minute away. The open watch, if any, ends; the list replaces the store's
// contents as any relist does (an informer keeps the objects that did not
// change and tells its handlers only of changes). Safe to call from any
// goroutine, at any time; calls while one is pending add nothing.
func (r *Reflector[T]) Relist() {
	if r.relistWanted.Swap(true) {
		return
	}
	r.mu.Lock()
	end := r.endWatch
	r.mu.Unlock()
	if end != nil {
		end(errRelistRequested)
	}
}

// SetShard makes the reflector hold shard s from now on (the zero Shard: the
// whole collection): it relists with the new selector (see Relist), and the
// store's Replace drops the objects that left the shard (an informer tells its
// handlers of them as deletions whose final state is unknown: they left the
// shard, which is not their deletion) and adds those that came in. Events
// already received are filtered by s at once. It returns an error for an
// invalid s, and changes nothing then.
func (r *Reflector[T]) SetShard(s Shard) error {
	if err := s.validate(); err != nil {
		return err
	}
	s.Ranges = slices.Clone(s.Ranges)
	r.shard.Store(&s)
	r.Relist()
	return nil
}

// ListedShard returns what the last complete list handed to the store (its
// Replace) covers: the store then held every object of that shard, as of the
// list's resourceVersion. It is the shard the list was asked for, or the empty
// shard if SetShard changed the shard while it ran (a relist follows), and
// false before the first list. A store may call it from its Replace to learn
// what the list it is given covers.
func (r *Reflector[T]) ListedShard() (Shard, bool) {
	p := r.listed.Load()
	if p == nil {
		return Shard{}, false
	}
	s := *p
	s.Ranges = slices.Clone(s.Ranges)
	return s, true
}

// Shard returns the shard the reflector holds: Config.Shard, or the last
// SetShard.
func (r *Reflector[T]) Shard() Shard {
	s := *r.shard.Load()
	s.Ranges = slices.Clone(s.Ranges)
	return s
}

// ServerResourceVersion returns the resourceVersion the server's collection
// is at now, read with a consistent LIST of at most one object within the
// reflector's selectors: once the store has reached it, the store has seen
// every change the server had made when ServerResourceVersion was called.
func (r *Reflector[T]) ServerResourceVersion(ctx context.Context) (string, error) {
	opts := metav1.ListOptions{LabelSelector: r.cfg.LabelSelector, FieldSelector: r.cfg.FieldSelector, ShardSelector: r.shard.Load().Selector(), Limit: 1}
	_, lm, err := r.lw.List(ctx, opts)
	if err != nil {
		return "", err
	}
	if lm.ResourceVersion == "" {
		return "", errors.New("reflector: the server's list carried no resourceVersion")
	}
	return lm.ResourceVersion, nil
}

// Name returns the reflector's name, Config.Name or its default.
func (r *Reflector[T]) Name() string { return r.name }

// Health returns a snapshot of the reflector's condition.
func (r *Reflector[T]) Health() Health {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settleLocked(time.Now())
	return r.health
}

// settleLocked ends the run of consecutive failures if the open watch has
// been open for shortWatch at now: a quiet collection is not a failing one.
// It is evaluated when it matters, when Health is read or the watch ends,
// rather than by a timer. It requires r.mu held.
func (r *Reflector[T]) settleLocked(now time.Time) {
	if !r.watchSince.IsZero() && now.Sub(r.watchSince) >= shortWatch {
		r.health.ConsecutiveFailures = 0
		r.watchSince = time.Time{}
	}
}

// LastSyncResourceVersion returns the resourceVersion the store has been
// brought up to, "" before the first list. During a burst of watch events
// it may lag the store by up to 64 events (see Health.LastEventTime).
func (r *Reflector[T]) LastSyncResourceVersion() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.health.LastResourceVersion
}

// Run lists, watches and feeds the store until ctx is done, then returns nil.
// Failures do not end it: they are retried (see the package documentation).
// It returns an error at once only if the Config is invalid (a selector that
// does not parse, a bad Backoff) or if Run was called before
// (ErrAlreadyStarted).
func (r *Reflector[T]) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	m, err := r.newMachine()
	if err != nil {
		return err
	}
	r.log.V(2).Info("starting", "watchList", m.cfg.WatchList)
	defer func() {
		r.update(func(h *Health) { h.State = StateStopped; h.RetryAt = time.Time{} })
		r.log.V(2).Info("stopped")
	}()
	m.run(ctx)
	return nil
}

// update applies f to the health record under the lock.
func (r *Reflector[T]) update(f func(h *Health)) {
	r.mu.Lock()
	f(&r.health)
	r.mu.Unlock()
}

// validate returns cfg with defaults applied, or the first problem found.
func (c Config[T]) validate() (Config[T], error) {
	if _, err := labels.Parse(c.LabelSelector); err != nil {
		return c, fmt.Errorf("reflector: invalid LabelSelector %q: %w", c.LabelSelector, err)
	}
	if _, err := fields.ParseSelector(c.FieldSelector); err != nil {
		return c, fmt.Errorf("reflector: invalid FieldSelector %q: %w", c.FieldSelector, err)
	}
	if err := c.Shard.validate(); err != nil {
		return c, err
	}
	switch {
	case c.PageSize == 0:
		c.PageSize = defaultPageSize
	case c.PageSize < 0:
		c.PageSize = 0
	}
	if c.WatchList < WatchListAuto || c.WatchList > WatchListOff {
		return c, fmt.Errorf("reflector: invalid WatchList mode %v", c.WatchList)
	}
	b, err := c.Backoff.withDefaults()
	if err != nil {
		return c, err
	}
	c.Backoff = b
	switch {
	case c.MinWatchTimeout == 0:
		c.MinWatchTimeout = defaultMinWatchTimeout
	case c.MinWatchTimeout < 0:
		return c, fmt.Errorf("reflector: negative MinWatchTimeout %v", c.MinWatchTimeout)
	}
	return c, nil
}

// isNil reports whether v is nil or holds a nil pointer, map, slice,
// channel or function. Reflection here allocates nothing.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
