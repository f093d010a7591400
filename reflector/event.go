package reflector

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// event is one decoded watch event, ready for the store: exactly one of
// added, modified, deleted or bookmark. Objects are already transformed;
// resourceVersion is the one the server sent, read before the transform.
type event[T Object] interface {
	resourceVersion() string
}

type added[T Object] struct {
	obj T
	rv  string
}

type modified[T Object] struct {
	obj T
	rv  string
}

type deleted[T Object] struct {
	obj T
	rv  string
}

// bookmark carries no object: only how far the server has got, and whether
// it ends the initial events of a streaming list.
type bookmark struct {
	rv               string
	initialEventsEnd bool
}

func (e added[T]) resourceVersion() string    { return e.rv }
func (e modified[T]) resourceVersion() string { return e.rv }
func (e deleted[T]) resourceVersion() string  { return e.rv }
func (e bookmark) resourceVersion() string    { return e.rv }

// decode turns a watch event other than watch.Error into an event,
// checking its object's type and applying the transform.
func decode[T Object](e watch.Event, transform func(T) (T, error)) (event[T], error) {
	if e.Type == watch.Bookmark {
		m, ok := e.Object.(metav1.Object)
		if !ok || isNil(m) {
			return nil, fmt.Errorf("bookmark carries %T, which has no object metadata", e.Object)
		}
		return bookmark{
			rv:               m.GetResourceVersion(),
			initialEventsEnd: m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true",
		}, nil
	}
	if e.Type != watch.Added && e.Type != watch.Modified && e.Type != watch.Deleted {
		return nil, fmt.Errorf("unknown watch event type %q", e.Type)
	}
	obj, ok := e.Object.(T)
	if !ok || isNil(obj) {
		return nil, fmt.Errorf("%s event carries %T, want %T", e.Type, e.Object, obj)
	}
	rv := obj.GetResourceVersion()
	obj, err := applyTransform(obj, transform)
	if err != nil {
		return nil, err
	}
	switch e.Type {
	case watch.Added:
		return added[T]{obj, rv}, nil
	case watch.Modified:
		return modified[T]{obj, rv}, nil
	default:
		return deleted[T]{obj, rv}, nil
	}
}

// applyTransform runs transform, if any, on obj and checks its result.
func applyTransform[T Object](obj T, transform func(T) (T, error)) (T, error) {
	if transform == nil {
		return obj, nil
	}
	out, err := transform(obj)
	if err != nil {
		return out, fmt.Errorf("transform of %s: %w", objectKey(obj), err)
	}
	if isNil(out) {
		return out, fmt.Errorf("transform of %s returned nil", objectKey(obj))
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
		b.items = append(b.items, obj)
		return
	}
	b.set(obj)
}

func (b *initialEvents[T]) set(obj T) {
	b.buildIndex()
	k := objectKey(obj)
	if i, ok := b.index[k]; ok {
		b.items[i] = obj
		return
	}
	b.index[k] = len(b.items)
	b.items = append(b.items, obj)
}

func (b *initialEvents[T]) remove(obj T) {
	b.buildIndex()
	k := objectKey(obj)
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
