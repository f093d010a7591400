package reconcile

import (
	"context"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// Priority orders keys waiting in a controller's queue: higher first, with aging so
// that lower priorities are never starved (see workqueue).
type Priority int

const (
	// Live is the priority of keys whose objects just changed.
	Live Priority = 0
	// Background is the priority of keys from an initial list and from resyncs, so
	// that a live change overtakes a backlog of them.
	Background Priority = -1
)

// Source feeds keys to a Controller. FromInformer makes one from an informer; other
// implementations may feed keys from anything (a channel, a timer, another system).
type Source[K comparable] interface {
	// Name identifies the source in logs and errors.
	Name() string
	// Start begins delivering keys by calling enqueue, which is safe for concurrent
	// use and never blocks for long. Start must not block. It is called once, by
	// Controller.Run, which calls stop before it returns.
	Start(enqueue func(key K, p Priority)) (stop func(), err error)
	// HasSynced reports whether the source has delivered the keys of everything it
	// held when it started (an informer's initial list). It is called after Start.
	HasSynced() bool
	// AppendKeys appends to dst every key the source currently holds, for the
	// controller's level-triggered resync, and returns the extended slice.
	AppendKeys(dst []K) []K
}

// A Source may also have a method LastError() error returning what keeps it from
// syncing (FromInformer's returns the informer's Health().LastError): a
// SyncError then wraps it.

// panicReportingSource is implemented by the package's own sources, which recover
// the panics of the user's Mapper and Predicates: the controller hands them the
// function to report them to before Start.
type panicReportingSource interface {
	reportPanicsTo(report func(*PanicError))
}

// Mapper maps an object to the keys to reconcile when it changes. It must be safe
// for concurrent use and must not keep or modify obj. Returning no key ignores the
// object.
type Mapper[T any, K comparable] func(obj T) []K

// ByObject maps an object to its own namespace and name.
func ByObject[T reflector.Object]() Mapper[T, types.NamespacedName] {
	return func(obj T) []types.NamespacedName {
		return []types.NamespacedName{{Namespace: obj.GetNamespace(), Name: obj.GetName()}}
	}
}

// ByControllerOwner maps an object to the namespace and name of its controller
// owner (the owner reference with controller: true) if that owner is of the given
// group and kind; objects with no such owner map to no key. Owner references never
// cross namespaces, so the owner's namespace is the object's.
func ByControllerOwner[T reflector.Object](owner schema.GroupKind) Mapper[T, types.NamespacedName] {
	return func(obj T) []types.NamespacedName {
		ref := metav1.GetControllerOfNoCopy(obj)
		if ref == nil || ref.Kind != owner.Kind {
			return nil
		}
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil || gv.Group != owner.Group {
			return nil
		}
		return []types.NamespacedName{{Namespace: obj.GetNamespace(), Name: ref.Name}}
	}
}

// EventType says what happened to an object.
type EventType int

const (
	// Create: an object appeared (in the initial list or later).
	Create EventType = iota
	// Update: an object changed.
	Update
	// Delete: an object is gone.
	Delete
)

// Event is what a Predicate looks at.
type Event[T any] struct {
	Type EventType
	// Old is the previous state, for Update only.
	Old T
	// Obj is the object: the new state for Update, the last known one for Delete.
	Obj T
	// InInitialList is true for the Create events of an informer's initial list.
	InInitialList bool
}

// Predicate filters the events of a source: an event whose predicate returns false
// enqueues nothing. Predicates must be safe for concurrent use and must not modify
// the objects.
type Predicate[T any] func(e Event[T]) bool

// GenerationChanged passes creates, deletes, and updates that changed
// metadata.generation (the spec, for types with a status subresource).
func GenerationChanged[T reflector.Object]() Predicate[T] {
	return func(e Event[T]) bool {
		return e.Type != Update || e.Old.GetGeneration() != e.Obj.GetGeneration()
	}
}

// LabelsChanged passes creates, deletes, and updates that changed the labels.
func LabelsChanged[T reflector.Object]() Predicate[T] {
	return func(e Event[T]) bool {
		return e.Type != Update || !maps.Equal(e.Old.GetLabels(), e.Obj.GetLabels())
	}
}

// AnnotationsChanged passes creates, deletes, and updates that changed the
// annotations.
func AnnotationsChanged[T reflector.Object]() Predicate[T] {
	return func(e Event[T]) bool {
		return e.Type != Update || !maps.Equal(e.Old.GetAnnotations(), e.Obj.GetAnnotations())
	}
}

// ResourceVersionChanged passes creates, deletes, and updates that changed the
// resourceVersion (any change the server recorded).
func ResourceVersionChanged[T reflector.Object]() Predicate[T] {
	return func(e Event[T]) bool {
		return e.Type != Update || e.Old.GetResourceVersion() != e.Obj.GetResourceVersion()
	}
}

// Or passes an event that any of preds passes.
func Or[T any](preds ...Predicate[T]) Predicate[T] {
	return func(e Event[T]) bool {
		for _, p := range preds {
			if p(e) {
				return true
			}
		}
		return false
	}
}

// host is what a Source needs from an informer; *informer.Informer satisfies it
// through informerHost. It exists so the source can be tested without a server.
type host[T any] interface {
	name() string
	// add registers h and returns its sync state and its removal.
	add(h informer.Handler[T]) (synced func() bool, remove func(), err error)
	// list returns every cached object.
	list() []T
	// lastError returns the informer's last error (Health().LastError).
	lastError() error
}

type informerHost[T reflector.Object] struct{ inf *informer.Informer[T] }

func (h informerHost[T]) name() string { return h.inf.Name() }
func (h informerHost[T]) list() []T    { return h.inf.Indexer().List() }
func (h informerHost[T]) lastError() error {
	return h.inf.Health().LastError
}
func (h informerHost[T]) add(hd informer.Handler[T]) (func() bool, func(), error) {
	// The controller does its own, evenly spread resync: the informer's is off.
	reg, err := h.inf.AddHandler(hd, informer.HandlerOptions{ResyncPeriod: -1})
	if err != nil {
		return nil, nil, err
	}
	return reg.HasSynced, func() { _ = h.inf.RemoveHandler(reg) }, nil
}

// FromInformer returns a Source of the keys m maps the informer's objects to,
// filtered by preds (all must pass). The caller runs the informer (Informer.Run);
// the source only adds a handler to it when the controller starts, and removes it
// when the controller stops.
//
// Creates of the informer's initial list are enqueued at Background priority, live
// changes at Live. A Mapper or Predicate that panics on an object is recovered:
// the panic is logged by the controller with the object's key and stack and
// counted (Metrics.SourcePanicked), and that change enqueues nothing; other
// objects and later changes of the same object go on as usual. An update enqueues
// the keys of both the old and the new object,
// so a changed owner reference reaches both owners; a delete enqueues the keys of
// the object's last known state, so the reconciler finds it missing and cleans up.
// The informer's own per-handler resync is turned off for this handler: the
// controller's resync (Config.ResyncPeriod) replaces it, spread over the period.
func FromInformer[T reflector.Object, K comparable](inf *informer.Informer[T], m Mapper[T, K], preds ...Predicate[T]) Source[K] {
	if inf == nil || m == nil {
		panic("reconcile: FromInformer needs an informer and a mapper")
	}
	return newInformerSource[T, K](informerHost[T]{inf}, m, preds)
}

func newInformerSource[T any, K comparable](h host[T], m Mapper[T, K], preds []Predicate[T]) *informerSource[T, K] {
	return &informerSource[T, K]{host: h, mapper: m, preds: preds}
}

// informerSource adapts an informer to a Source.
type informerSource[T any, K comparable] struct {
	host   host[T]
	mapper Mapper[T, K]
	preds  []Predicate[T]

	mu      sync.Mutex
	synced  func() bool // set by Start
	enqueue func(K, Priority)
	report  func(*PanicError) // set by the controller before Start; nil: ignore
}

func (s *informerSource[T, K]) reportPanicsTo(report func(*PanicError)) {
	s.mu.Lock()
	s.report = report
	s.mu.Unlock()
}

func (s *informerSource[T, K]) LastError() error { return s.host.lastError() }

// recovered turns a panic of the user's Mapper or Predicate on obj, if any, into
// a report. It must be deferred.
func (s *informerSource[T, K]) recovered(obj T) {
	v := recover()
	if v == nil {
		return
	}
	s.mu.Lock()
	report := s.report
	s.mu.Unlock()
	if report != nil {
		report(&PanicError{Source: s.Name(), Object: objectName(obj), Value: v, Stack: debug.Stack()})
	}
}

// objectName is obj's "namespace/name", if it has object metadata.
func objectName(obj any) string {
	m, ok := obj.(metav1.Object)
	if !ok || m == nil {
		return fmt.Sprintf("%T", obj)
	}
	if ns := m.GetNamespace(); ns != "" {
		return ns + "/" + m.GetName()
	}
	return m.GetName()
}

func (s *informerSource[T, K]) Name() string { return "informer " + s.host.name() }

func (s *informerSource[T, K]) Start(enqueue func(K, Priority)) (func(), error) {
	s.mu.Lock()
	started := s.enqueue != nil
	if !started {
		s.enqueue = enqueue
	}
	s.mu.Unlock()
	if started {
		return nil, fmt.Errorf("reconcile: source %s started twice", s.Name())
	}
	synced, remove, err := s.host.add(informer.HandlerFuncs[T]{
		AddFunc:    s.onAdd,
		UpdateFunc: s.onUpdate,
		DeleteFunc: s.onDelete,
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile: source %s: %w", s.Name(), err)
	}
	s.mu.Lock()
	s.synced = synced
	s.mu.Unlock()
	return remove, nil
}

func (s *informerSource[T, K]) HasSynced() bool {
	s.mu.Lock()
	synced := s.synced
	s.mu.Unlock()
	return synced != nil && synced()
}

func (s *informerSource[T, K]) AppendKeys(dst []K) []K {
	for _, obj := range s.host.list() {
		dst = s.appendMapped(dst, obj)
	}
	return dst
}

// appendMapped appends the keys of obj to dst, or returns dst as it was if the
// Mapper panics: the keys already in dst stay.
func (s *informerSource[T, K]) appendMapped(dst []K, obj T) (out []K) {
	out = dst
	defer s.recovered(obj)
	return append(dst, s.mapper(obj)...)
}

func (s *informerSource[T, K]) pass(e Event[T]) bool {
	for _, p := range s.preds {
		if !p(e) {
			return false
		}
	}
	return true
}

func (s *informerSource[T, K]) send(obj T, p Priority) {
	for _, k := range s.mapper(obj) {
		s.enqueue(k, p)
	}
}

func (s *informerSource[T, K]) onAdd(obj T, inInitialList bool) {
	defer s.recovered(obj)
	if !s.pass(Event[T]{Type: Create, Obj: obj, InInitialList: inInitialList}) {
		return
	}
	p := Live
	if inInitialList {
		p = Background
	}
	s.send(obj, p)
}

func (s *informerSource[T, K]) onUpdate(old, obj T) {
	defer s.recovered(obj)
	if any(old) == any(obj) {
		// An informer resync: re-enqueue at background priority, unfiltered.
		s.send(obj, Background)
		return
	}
	if !s.pass(Event[T]{Type: Update, Old: old, Obj: obj}) {
		return
	}
	// The old state's keys first (an object that moved from one owner to
	// another concerns both), but a key of both states once: enqueued twice,
	// a key taken by an idle worker in between would be reconciled twice.
	keys := s.mapper(obj)
	for _, k := range s.mapper(old) {
		if !slices.Contains(keys, k) {
			s.enqueue(k, Live)
		}
	}
	for _, k := range keys {
		s.enqueue(k, Live)
	}
}

func (s *informerSource[T, K]) onDelete(d informer.Deleted[T]) {
	defer s.recovered(d.Obj)
	if !s.pass(Event[T]{Type: Delete, Obj: d.Obj}) {
		return
	}
	s.send(d.Obj, Live)
}

// cacheHost is a host whose cache reports its progress: informerHost.
type cacheHost interface {
	scope() informer.Scope
	applied() string
	waitFor(ctx context.Context, rv string) error
}

func (h informerHost[T]) scope() informer.Scope { return h.inf.Scope() }
func (h informerHost[T]) applied() string       { return h.inf.LastAppliedResourceVersion() }
func (h informerHost[T]) waitFor(ctx context.Context, rv string) error {
	return h.inf.WaitForResourceVersion(ctx, rv)
}

// cache returns the source's cache view, or nil if its host has none.
func (s *informerSource[T, K]) cache() cacheHost {
	c, _ := s.host.(cacheHost)
	return c
}
