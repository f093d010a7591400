// Package reflectortest provides an in-memory API server collection that
// implements reflector.ListerWatcher, for tests of code built on the
// reflector.
//
// A Server keeps objects with resourceVersions and a history of changes, and
// answers List and Watch with the semantics of kube-apiserver that the
// reflector depends on: resourceVersion "0", "" and exact or not-older-than
// matches, pagination with continue tokens (and the watch cache's habit of
// ignoring limit at "0"), watches from a resourceVersion with replay,
// bookmarks, streaming lists (sendInitialEvents) ending with the
// "k8s.io/initial-events-end" bookmark, label and field selectors, watch
// timeouts, and compaction, after which old resourceVersions and continue
// tokens get 410 Expired.
//
// Faults are injected on purpose: errors for the next requests (FailNext), a
// permanent Forbidden for a verb (Forbid), a hook run before every request
// (SetHook), watches closed cleanly (CloseWatches) or with an error event
// (BreakWatches).
//
// Objects handed out are deep copies: callers may change them. All methods
// are safe for concurrent use. Each open watch runs one goroutine, which
// ends when the watch is stopped, its context is done, its timeout passes or
// the server closes it.
package reflectortest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
)

// Object is the same constraint as reflector.Object.
type Object interface {
	runtime.Object
	metav1.Object
}

// Verb names a request kind.
type Verb string

const (
	List  Verb = "list"
	Watch Verb = "watch"
)

// Request is one List or Watch call the server received.
type Request struct {
	Verb    Verb
	Options metav1.ListOptions
}

// Config configures a Server. The zero value is a server with a watch cache
// and without streaming lists.
type Config struct {
	// Resource names the collection in errors. Default: "objects".
	Resource schema.GroupResource
	// WatchList makes the server accept watches with sendInitialEvents, as
	// with the WatchList feature on; otherwise they get 422 Invalid.
	WatchList bool
	// PaginateAtZero makes lists at resourceVersion "0" honour limit, as a
	// server without watch cache does. By default they return everything at
	// once, as the watch cache does.
	PaginateAtZero bool
	// IgnoreWatchTimeout keeps watches open past their timeoutSeconds.
	IgnoreWatchTimeout bool
}

// change is one entry of the history.
type change[T Object] struct {
	rv   int64
	typ  watch.EventType // Added, Modified or Deleted
	key  string
	obj  T // the new state; for Deleted the last state with the deletion's RV
	prev T // the state before, for Modified and Deleted
}

type snapshot[T Object] struct {
	rv    int64
	items []T
}

// Server is an in-memory collection of T served with API server semantics.
// The zero value is not usable: create one with NewServer. Safe for
// concurrent use. It holds the objects, the history since the last Compact,
// and the snapshots of paginated lists not read to the end.
type Server[T Object] struct {
	cfg Config

	mu        sync.Mutex
	rv        int64        // resourceVersion of the last change
	objects   map[string]T // key → current state; never handed out, never changed in place
	history   []change[T]  // changes with rv > compacted, oldest first
	compacted int64        // resourceVersions up to this one are gone
	snapshots map[string]snapshot[T]
	nextToken int
	watches   map[*fakeWatch]struct{}
	failures  map[Verb][]error
	forbidden map[Verb]bool
	hook      func(Request) error
	requests  []Request
}

// NewServer returns an empty server. It panics unless T is a pointer type.
func NewServer[T Object](cfg Config) *Server[T] {
	if reflect.TypeFor[T]().Kind() != reflect.Pointer {
		panic(fmt.Sprintf("reflectortest: %v is not a pointer type", reflect.TypeFor[T]()))
	}
	if cfg.Resource.Empty() {
		cfg.Resource = schema.GroupResource{Resource: "objects"}
	}
	return &Server[T]{
		cfg:       cfg,
		objects:   map[string]T{},
		snapshots: map[string]snapshot[T]{},
		watches:   map[*fakeWatch]struct{}{},
		failures:  map[Verb][]error{},
		forbidden: map[Verb]bool{},
	}
}

func key(o metav1.Object) string { return o.GetNamespace() + "/" + o.GetName() }

func copyOf[T Object](o T) T { return o.DeepCopyObject().(T) }

// Create stores a copy of obj with the next resourceVersion and returns
// another copy. The name must be set and unused.
func (s *Server[T]) Create(obj T) (T, error) {
	if obj.GetName() == "" {
		var zero T
		return zero, apierrors.NewBadRequest("reflectortest: object has no name")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(obj)
	if _, ok := s.objects[k]; ok {
		var zero T
		return zero, apierrors.NewAlreadyExists(s.cfg.Resource, obj.GetName())
	}
	o := copyOf(obj)
	s.rv++
	o.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	s.objects[k] = o
	var zero T
	s.recordLocked(change[T]{rv: s.rv, typ: watch.Added, key: k, obj: o, prev: zero})
	return copyOf(o), nil
}

// Update replaces the stored object with a copy of obj under the next
// resourceVersion, whatever resourceVersion obj carries.
func (s *Server[T]) Update(obj T) (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(obj)
	prev, ok := s.objects[k]
	if !ok {
		var zero T
		return zero, apierrors.NewNotFound(s.cfg.Resource, obj.GetName())
	}
	o := copyOf(obj)
	s.rv++
	o.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	s.objects[k] = o
	s.recordLocked(change[T]{rv: s.rv, typ: watch.Modified, key: k, obj: o, prev: prev})
	return copyOf(o), nil
}

// Delete removes an object and returns its last state, which carries the
// deletion's resourceVersion as the server's Deleted event does.
func (s *Server[T]) Delete(namespace, name string) (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := namespace + "/" + name
	prev, ok := s.objects[k]
	if !ok {
		var zero T
		return zero, apierrors.NewNotFound(s.cfg.Resource, name)
	}
	delete(s.objects, k)
	o := copyOf(prev)
	s.rv++
	o.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	s.recordLocked(change[T]{rv: s.rv, typ: watch.Deleted, key: k, obj: o, prev: prev})
	return copyOf(o), nil
}

// Items returns copies of the current objects, sorted by namespace/name.
func (s *Server[T]) Items() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sortedLocked(s.objects, nil)
	for i := range out {
		out[i] = copyOf(out[i])
	}
	return out
}

// ResourceVersion returns the resourceVersion of the last change.
func (s *Server[T]) ResourceVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strconv.FormatInt(s.rv, 10)
}

// Compact forgets the history up to the current resourceVersion, like an
// etcd compaction: watches and exact lists from older resourceVersions and
// continue tokens of older lists then get 410 Expired. Open watches go on.
func (s *Server[T]) Compact() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compacted = s.rv
	s.history = nil
	for t, snap := range s.snapshots {
		if snap.rv < s.compacted {
			delete(s.snapshots, t)
		}
	}
}

// FailNext makes the next len(errs) requests of verb v fail with errs, in
// order; a nil entry lets its request through.
func (s *Server[T]) FailNext(v Verb, errs ...error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[v] = append(s.failures[v], errs...)
}

// Forbid makes every request of verb v fail with 403 Forbidden while on is
// true.
func (s *Server[T]) Forbid(v Verb, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forbidden[v] = on
}

// SetHook sets a function called at the start of every List and Watch,
// without the server's lock held; a non-nil error fails the request. nil
// removes it.
func (s *Server[T]) SetHook(h func(Request) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = h
}

// Requests returns the List and Watch calls received so far, in order.
func (s *Server[T]) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// OpenWatches returns how many watches are open.
func (s *Server[T]) OpenWatches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watches)
}

// CloseWatches ends every open watch cleanly, as a server does at a watch's
// timeout; events not yet received are dropped (a watch from the last
// resourceVersion received replays them).
func (s *Server[T]) CloseWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watches {
		w.end(nil, true)
	}
}

// BreakWatches sends an Error event carrying err's status to every open
// watch, after the events already queued, and then closes it.
func (s *Server[T]) BreakWatches(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := errorEvent(err)
	for w := range s.watches {
		w.end(&ev, false)
	}
}

// Bookmark sends a bookmark at the current resourceVersion to every open
// watch that allows them, after the events already queued.
func (s *Server[T]) Bookmark() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watches {
		if w.bookmarks {
			w.push(watch.Event{Type: watch.Bookmark, Object: s.bookmarkLocked(false)})
		}
	}
}

// before records a request and returns the error it must fail with, if any.
func (s *Server[T]) before(v Verb, opts metav1.ListOptions) error {
	s.mu.Lock()
	s.requests = append(s.requests, Request{Verb: v, Options: opts})
	hook := s.hook
	var injected error
	if q := s.failures[v]; len(q) > 0 {
		injected, s.failures[v] = q[0], q[1:]
	}
	forbidden := s.forbidden[v]
	s.mu.Unlock()
	if injected != nil {
		return injected
	}
	if forbidden {
		return apierrors.NewForbidden(s.cfg.Resource, "", fmt.Errorf("reflectortest: %s is forbidden", v))
	}
	if hook != nil {
		return hook(Request{Verb: v, Options: opts})
	}
	return nil
}

// selector filters objects by labels and by the fields metadata.name and
// metadata.namespace.
type selector struct {
	labels labels.Selector
	fields fields.Selector
}

func newSelector(opts metav1.ListOptions) (selector, error) {
	ls, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return selector{}, apierrors.NewBadRequest(err.Error())
	}
	fs, err := fields.ParseSelector(opts.FieldSelector)
	if err != nil {
		return selector{}, apierrors.NewBadRequest(err.Error())
	}
	for _, r := range fs.Requirements() {
		if r.Field != "metadata.name" && r.Field != "metadata.namespace" {
			return selector{}, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", r.Field))
		}
	}
	return selector{ls, fs}, nil
}

func (sel selector) matches(o metav1.Object) bool {
	return sel.labels.Matches(labels.Set(o.GetLabels())) &&
		sel.fields.Matches(fields.Set{"metadata.name": o.GetName(), "metadata.namespace": o.GetNamespace()})
}

func (s *Server[T]) sortedLocked(m map[string]T, sel *selector) []T {
	keys := make([]string, 0, len(m))
	for k, o := range m {
		if sel == nil || sel.matches(o) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := make([]T, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

// stateAtLocked returns the objects as they were at rv, from the current
// state and the history. Requires rv >= compacted.
func (s *Server[T]) stateAtLocked(rv int64) map[string]T {
	m := make(map[string]T, len(s.objects))
	for k, o := range s.objects {
		m[k] = o
	}
	for i := len(s.history) - 1; i >= 0 && s.history[i].rv > rv; i-- {
		c := s.history[i]
		if c.typ == watch.Added {
			delete(m, c.key)
		} else {
			m[c.key] = c.prev
		}
	}
	return m
}

func parseRV(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version %q", v))
	}
	return n, nil
}

func tooLarge(rv, current int64) error {
	err := apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", rv, current), 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{
		Type:    metav1.CauseTypeResourceVersionTooLarge,
		Message: "Too large resource version",
	}}
	return err
}

func tooOld(rv int64) error {
	return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d", rv))
}

// List implements reflector.ListerWatcher.
func (s *Server[T]) List(ctx context.Context, opts metav1.ListOptions) ([]T, metav1.ListMeta, error) {
	if err := s.before(List, opts); err != nil {
		return nil, metav1.ListMeta{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, metav1.ListMeta{}, err
	}
	if opts.Watch || opts.SendInitialEvents != nil {
		return nil, metav1.ListMeta{}, invalid("sendInitialEvents", "forbidden for list")
	}
	sel, err := newSelector(opts)
	if err != nil {
		return nil, metav1.ListMeta{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()

	var snap snapshot[T]
	var offset int
	if opts.Continue != "" {
		if opts.ResourceVersion != "" {
			return nil, metav1.ListMeta{}, apierrors.NewBadRequest("specifying resource version is not allowed when using continue")
		}
		token, off, ok := parseToken(opts.Continue)
		snap, found := s.snapshots[token]
		if !ok {
			return nil, metav1.ListMeta{}, apierrors.NewBadRequest("invalid continue token")
		}
		if !found || snap.rv < s.compacted {
			return nil, metav1.ListMeta{}, apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
		}
		return s.pageLocked(snap, token, off, opts.Limit)
	}
	rv, err := parseRV(opts.ResourceVersion)
	if err != nil {
		return nil, metav1.ListMeta{}, err
	}
	if rv > s.rv {
		return nil, metav1.ListMeta{}, tooLarge(rv, s.rv)
	}
	exact := opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact ||
		(opts.ResourceVersionMatch == "" && rv > 0 && opts.Limit > 0)
	switch {
	case exact && rv < s.compacted:
		return nil, metav1.ListMeta{}, tooOld(rv)
	case exact:
		snap = snapshot[T]{rv: rv, items: s.sortedLocked(s.stateAtLocked(rv), &sel)}
	default:
		snap = snapshot[T]{rv: s.rv, items: s.sortedLocked(s.objects, &sel)}
	}
	limit := opts.Limit
	if opts.ResourceVersion == "0" && !s.cfg.PaginateAtZero {
		limit = 0
	}
	s.nextToken++
	token := strconv.Itoa(s.nextToken)
	s.snapshots[token] = snap
	return s.pageLocked(snap, token, offset, limit)
}

func (s *Server[T]) pageLocked(snap snapshot[T], token string, offset int, limit int64) ([]T, metav1.ListMeta, error) {
	end := len(snap.items)
	if limit > 0 && offset+int(limit) < end {
		end = offset + int(limit)
	}
	if offset > end {
		offset = end
	}
	page := make([]T, end-offset)
	for i, o := range snap.items[offset:end] {
		page[i] = copyOf(o)
	}
	lm := metav1.ListMeta{ResourceVersion: strconv.FormatInt(snap.rv, 10)}
	if end < len(snap.items) {
		lm.Continue = token + ":" + strconv.Itoa(end)
		remaining := int64(len(snap.items) - end)
		lm.RemainingItemCount = &remaining
	} else {
		delete(s.snapshots, token)
	}
	return page, lm, nil
}

func parseToken(t string) (string, int, bool) {
	for i := len(t) - 1; i >= 0; i-- {
		if t[i] == ':' {
			off, err := strconv.Atoi(t[i+1:])
			return t[:i], off, err == nil && off >= 0
		}
	}
	return "", 0, false
}

func invalid(fieldName, msg string) error {
	return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "",
		field.ErrorList{field.Forbidden(field.NewPath(fieldName), msg)})
}

func errorEvent(err error) watch.Event {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		status = apierrors.NewInternalError(err)
	}
	st := status.Status()
	return watch.Event{Type: watch.Error, Object: &st}
}

// bookmarkLocked returns a new T holding only the current resourceVersion,
// and the end-of-initial-events annotation if end is set.
func (s *Server[T]) bookmarkLocked(end bool) T {
	o := reflect.New(reflect.TypeFor[T]().Elem()).Interface().(T)
	o.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	if end {
		o.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	}
	return o
}

// Watch implements reflector.ListerWatcher.
func (s *Server[T]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if err := s.before(Watch, opts); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch {
	case opts.SendInitialEvents != nil && !s.cfg.WatchList:
		return nil, invalid("sendInitialEvents", "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")
	case opts.SendInitialEvents != nil && opts.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan:
		return nil, invalid("resourceVersionMatch", "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
	case opts.SendInitialEvents == nil && opts.ResourceVersionMatch != "":
		return nil, invalid("resourceVersionMatch", "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
	}
	sel, err := newSelector(opts)
	if err != nil {
		return nil, err
	}
	rv, err := parseRV(opts.ResourceVersion)
	if err != nil {
		return nil, err
	}
	var timeout time.Duration
	if opts.TimeoutSeconds != nil && !s.cfg.IgnoreWatchTimeout {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	w := newFakeWatch(sel, opts.AllowWatchBookmarks)
	initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	legacy := opts.SendInitialEvents == nil && (opts.ResourceVersion == "" || opts.ResourceVersion == "0")
	failed := false
	switch {
	case rv > s.rv:
		ev := errorEvent(tooLarge(rv, s.rv))
		w.end(&ev, false)
		failed = true
	case initial || legacy:
		for _, o := range s.sortedLocked(s.objects, &sel) {
			w.push(watch.Event{Type: watch.Added, Object: copyOf(o)})
		}
		if initial && opts.AllowWatchBookmarks {
			w.push(watch.Event{Type: watch.Bookmark, Object: s.bookmarkLocked(true)})
		}
	case rv < s.compacted:
		ev := errorEvent(tooOld(rv))
		w.end(&ev, false)
		failed = true
	default:
		for _, c := range s.history {
			if c.rv > rv {
				w.deliver(c.typ, c.obj, c.prev)
			}
		}
	}
	if !failed {
		s.watches[w] = struct{}{}
	}
	go w.pump(ctx, timeout, func() {
		s.mu.Lock()
		delete(s.watches, w)
		s.mu.Unlock()
	})
	return w, nil
}

// recordLocked appends c to the history and sends it to the open watches.
func (s *Server[T]) recordLocked(c change[T]) {
	s.history = append(s.history, c)
	for w := range s.watches {
		w.deliver(c.typ, c.obj, c.prev)
	}
}
