package indexer

import (
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Lister reads Kubernetes objects from an Indexer by namespace and name and by label
// selector. It requires the Indexer to key objects with MetaKey (the default for
// metav1.Object types); per-namespace listing also requires NamespaceIndex registered
// under NamespaceIndexName.
//
// Like the Indexer, it returns the stored objects themselves: treat them as read-only.
// A Lister is safe for concurrent use and costs nothing beyond its Indexer.
type Lister[T metav1.Object] struct {
	idx      *Indexer[T]
	resource schema.GroupResource
	what     string // resource.String(), the start of a NotFound message
}

// NewLister returns a Lister over idx. NotFound errors name the resource after T's
// type in lower case (for *corev1.Pod: "pod").
func NewLister[T metav1.Object](idx *Indexer[T]) *Lister[T] {
	t := reflect.TypeFor[T]()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	gr := schema.GroupResource{Resource: strings.ToLower(t.Name())}
	return &Lister[T]{idx: idx, resource: gr, what: gr.String()}
}

// Get returns the object with the given namespace ("" for cluster-scoped objects) and
// name, or an error for which k8s.io/apimachinery/pkg/api/errors.IsNotFound is true.
func (l *Lister[T]) Get(namespace, name string) (T, error) {
	if obj, ok := l.idx.getNsName(namespace, name); ok {
		return obj, nil
	}
	var zero T
	return zero, l.notFound(name)
}

// notFound returns an error equal, field for field, to apierrors.NewNotFound of the
// lister's resource and name, in two allocations instead of six: the error with its
// details, and the message, built without fmt. A controller asks for the object of
// every key whose object was deleted, so this is the cost of each deletion it sees.
func (l *Lister[T]) notFound(name string) *apierrors.StatusError {
	e := &struct {
		apierrors.StatusError
		details metav1.StatusDetails
	}{details: metav1.StatusDetails{Group: l.resource.Group, Kind: l.resource.Resource, Name: name}}
	e.ErrStatus = metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusNotFound,
		Reason:  metav1.StatusReasonNotFound,
		Details: &e.details,
	}
	if plainQuoted(name) {
		e.ErrStatus.Message = l.what + ` "` + name + `" not found`
	} else {
		e.ErrStatus.Message = l.what + " " + strconv.Quote(name) + " not found"
	}
	return &e.StatusError
}

// plainQuoted reports whether strconv.Quote(s) is s between double quotes: s holds only
// printable ASCII other than the quote and the backslash, as Kubernetes names do.
func plainQuoted(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// List returns every object whose labels match selector; a nil selector matches
// everything.
func (l *Lister[T]) List(selector labels.Selector) ([]T, error) {
	if selector != nil && labels.MatchesNothing(selector) {
		return nil, nil
	}
	return filter(l.idx.List(), selector), nil
}

// Namespace returns a lister restricted to one namespace. metav1.NamespaceAll ("")
// means every namespace.
func (l *Lister[T]) Namespace(namespace string) NamespaceLister[T] {
	return NamespaceLister[T]{l: l, namespace: namespace}
}

// NamespaceLister reads the objects of one namespace. Its zero value is not usable;
// get one from Lister.Namespace.
type NamespaceLister[T metav1.Object] struct {
	l         *Lister[T]
	namespace string
}

// Get returns the object with the given name in the lister's namespace, or an error
// for which apierrors.IsNotFound is true.
func (n NamespaceLister[T]) Get(name string) (T, error) {
	return n.l.Get(n.namespace, name)
}

// List returns the objects of the namespace whose labels match selector (nil matches
// everything), read from the namespace index: O(objects in the namespace), not
// O(all objects). The slice is new and belongs to the caller: it is copied from the
// namespace's ByIndex snapshot, which List builds if needed and the Indexer then
// keeps until the namespace changes. It fails with ErrUnknownIndex if the Indexer
// has no index named NamespaceIndexName.
func (n NamespaceLister[T]) List(selector labels.Selector) ([]T, error) {
	if n.namespace == metav1.NamespaceAll {
		return n.l.List(selector)
	}
	if selector != nil && labels.MatchesNothing(selector) {
		return nil, nil
	}
	// The namespace's ByIndex snapshot is shared and read-only: copy from it.
	objs, err := n.l.idx.ByIndex(NamespaceIndexName, n.namespace)
	if err != nil || len(objs) == 0 {
		return nil, err
	}
	return filter(slices.Clone(objs), selector), nil
}

// filter keeps the objects matching selector, in place: objs must be the caller's.
// It runs without any lock.
func filter[T metav1.Object](objs []T, selector labels.Selector) []T {
	if selector == nil || selector.Empty() {
		return objs
	}
	out := objs[:0]
	for _, obj := range objs {
		if selector.Matches(labels.Set(obj.GetLabels())) {
			out = append(out, obj)
		}
	}
	clear(objs[len(out):])
	if len(out) < cap(out)/4 {
		// Do not pin a large backing array for a small result.
		out = append([]T(nil), out...)
	}
	return out
}
