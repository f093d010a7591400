package reflector

import (
	"errors"
	"fmt"
	"runtime/debug"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// eventKind says what a watchEvent is.
type eventKind uint8

const (
	kindAdded eventKind = iota + 1
	kindModified
	kindDeleted
	kindBookmark
	// kindRefused: an event whose object was refused (see RefusedError). Only
	// its resourceVersion, rv, is kept: how far the watch has got.
	kindRefused
)

// watchEvent is one decoded watch event, ready for the store, as a plain value
// (boxing it in an interface would cost an allocation per event). Objects are
// already transformed. For kindBookmark obj is the zero T; initialEventsEnd is
// set only on bookmarks, for the one that ends a streaming list's initial
// events.
//
// rv is the resourceVersion the server sent. Without a transform, obj is the
// server's object and rv is left to be read from it (lazyRV), so that an
// event whose resourceVersion nobody asks for costs no read of it: use
// resourceVersion.
type watchEvent[T Object] struct {
	kind             eventKind
	lazyRV           bool
	initialEventsEnd bool
	obj              T
	rv               string
}

// resourceVersion is the resourceVersion the server sent with the event.
func (e *watchEvent[T]) resourceVersion() string {
	if e.lazyRV {
		return e.obj.GetResourceVersion()
	}
	return e.rv
}

// decodeEvent turns a watch event other than watch.Error into a watchEvent,
// checking its object's type and applying the transform.
func decodeEvent[T Object](e watch.Event, transform func(T) (T, error)) (watchEvent[T], error) {
	if e.Type == watch.Bookmark {
		m, ok := e.Object.(metav1.Object)
		if !ok || isNil(m) {
			return watchEvent[T]{}, fmt.Errorf("bookmark carries %T, which has no object metadata", e.Object)
		}
		return watchEvent[T]{
			kind:             kindBookmark,
			rv:               m.GetResourceVersion(),
			initialEventsEnd: m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true",
		}, nil
	}
	var kind eventKind
	switch e.Type {
	case watch.Added:
		kind = kindAdded
	case watch.Modified:
		kind = kindModified
	case watch.Deleted:
		kind = kindDeleted
	default:
		return watchEvent[T]{}, fmt.Errorf("unknown watch event type %q", e.Type)
	}
	obj, ok := e.Object.(T)
	if !ok || isNil(obj) {
		return watchEvent[T]{}, wrongObject[T](e)
	}
	if transform == nil {
		return watchEvent[T]{kind: kind, obj: obj, lazyRV: true}, nil
	}
	rv := obj.GetResourceVersion()
	out, err := applyTransform(obj, transform)
	if err != nil {
		return watchEvent[T]{}, &RefusedError{Key: objectKey(obj), ResourceVersion: rv, Err: err}
	}
	return watchEvent[T]{kind: kind, obj: out, rv: rv}, nil
}

// wrongObject is the error for an Added, Modified or Deleted event whose object is
// not a T: a *RefusedError when the object's key can be read (the ListerWatcher
// could not decode it, or it is of another type), so that only that object is
// refused; a plain error otherwise, which nothing can attribute to one object.
func wrongObject[T Object](e watch.Event) error {
	var want T
	if u, ok := e.Object.(*undecodable); ok && u != nil {
		return &RefusedError{Key: u.key(), ResourceVersion: u.rv, Err: u.err}
	}
	err := fmt.Errorf("%s event carries %T, want %T", e.Type, e.Object, want)
	if m, ok := e.Object.(metav1.Object); ok && !isNil(m) && m.GetName() != "" {
		return &RefusedError{Key: objectKey(m), ResourceVersion: m.GetResourceVersion(), Err: err}
	}
	return err
}

// undecodable is the object of an Added, Modified or Deleted watch event that a
// ListerWatcher could not decode although it could read the object's key and
// resourceVersion from the wire (FromREST does): the reflector refuses that object
// (see RefusedError) and goes on with the next event.
type undecodable struct {
	namespace, name, rv string
	err                 error
}

func (u *undecodable) key() string {
	if u.namespace != "" {
		return u.namespace + "/" + u.name
	}
	return u.name
}

func (u *undecodable) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (u *undecodable) DeepCopyObject() runtime.Object   { c := *u; return &c }

// applyTransform runs transform, if any, on obj and checks its result. A panic
// of transform is recovered and returned as a *PanicError.
func applyTransform[T Object](obj T, transform func(T) (T, error)) (out T, err error) {
	if transform == nil {
		return obj, nil
	}
	defer func() {
		if v := recover(); v != nil {
			var zero T
			out, err = zero, fmt.Errorf("transform: %w", &PanicError{Value: v, Stack: debug.Stack()})
		}
	}()
	out, err = transform(obj)
	if err != nil {
		return out, fmt.Errorf("transform: %w", err)
	}
	if isNil(out) {
		return out, errors.New("transform returned nil")
	}
	return out, nil
}

// objectKey is "namespace/name", or "name" for cluster-scoped objects.
func objectKey(obj metav1.Object) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}

// initialEvents gathers the objects of a streaming list until the server
// marks their end. Servers send only Added events there; Modified and
// Deleted are handled anyway, through an index built the first time one
// arrives. Invariant: when index is not nil, index[objectKey(items[i])] == i
// for every i, and nothing else is in it.
type initialEvents[T Object] struct {
	items []T
	index map[string]int
}

func (b *initialEvents[T]) add(obj T) {
	if b.index == nil {
		b.items = appendDoubling(b.items, obj)
		return
	}
	b.set(obj)
}

// appendDoubling is append that doubles the capacity of a full slice. append
// grows a large slice by about a quarter at a time, which leaves behind about
// four times the final slice in garbage while a list of unknown length is
// assembled; doubling leaves about one.
func appendDoubling[T any](s []T, v T) []T {
	if len(s) == cap(s) {
		grown := make([]T, len(s), max(2*cap(s), 64))
		copy(grown, s)
		s = grown
	}
	return append(s, v)
}

func (b *initialEvents[T]) set(obj T) {
	b.buildIndex()
	k := objectKey(obj)
	if i, ok := b.index[k]; ok {
		b.items[i] = obj
		return
	}
	b.index[k] = len(b.items)
	b.items = appendDoubling(b.items, obj)
}

func (b *initialEvents[T]) remove(obj T) { b.removeKey(objectKey(obj)) }

// removeKey drops the object of key k, if any.
func (b *initialEvents[T]) removeKey(k string) {
	b.buildIndex()
	i, ok := b.index[k]
	if !ok {
		return
	}
	last := len(b.items) - 1
	if i != last {
		b.items[i] = b.items[last]
		b.index[objectKey(b.items[i])] = i
	}
	var zero T
	b.items[last] = zero
	b.items = b.items[:last]
	delete(b.index, k)
}

func (b *initialEvents[T]) buildIndex() {
	if b.index != nil {
		return
	}
	b.index = make(map[string]int, len(b.items))
	// A later duplicate wins its key; earlier ones are dropped.
	kept := b.items[:0]
	for _, obj := range b.items {
		k := objectKey(obj)
		if i, ok := b.index[k]; ok {
			kept[i] = obj
			continue
		}
		b.index[k] = len(kept)
		kept = append(kept, obj)
	}
	clear(b.items[len(kept):])
	b.items = kept
}
