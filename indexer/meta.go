package indexer

import (
	"errors"
	"reflect"
	"runtime"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NamespaceIndexName is the name under which NamespaceIndex is expected to be
// registered; the Lister's per-namespace listing uses the index of this name.
const NamespaceIndexName = "namespace"

var errNoName = errors.New("object has no name")

// MetaKey is the conventional key of a Kubernetes object: "namespace/name" for a
// namespaced object and "name" for a cluster-scoped one. It fails for a nil object or
// one without a name.
func MetaKey[T metav1.Object](obj T) (string, error) {
	return metaKey(obj)
}

func metaKey(obj metav1.Object) (string, error) {
	if isNilMeta(obj) {
		return "", ErrNilObject
	}
	name := obj.GetName()
	if name == "" {
		return "", errNoName
	}
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + name, nil
	}
	return name, nil
}

// NamespaceIndex indexes an object by its namespace ("" for cluster-scoped objects).
// Register it under NamespaceIndexName.
//
// An Indexer whose keys are MetaKey of a pointer type (the default for Kubernetes
// types) recognizes NamespaceIndex among its index functions and does not call it:
// it indexes the namespace it already read for the key, which saves the one-element
// slice a call allocates on every write, and keeps nothing per object while every
// object is in one namespace. The result is the same. In generic code, where T is a
// type parameter, use NamespaceIndexFunc[T]() instead: there a function value of
// NamespaceIndex[T] is a wrapper of the calling function's, which the Indexer does
// not recognize (it then calls it, and loses those savings).
func NamespaceIndex[T metav1.Object](obj T) ([]string, error) {
	if isNilMeta(obj) {
		return nil, ErrNilObject
	}
	return []string{obj.GetNamespace()}, nil
}

// NamespaceIndexFunc returns NamespaceIndex[T] as a function value the Indexer
// recognizes also when T is a type parameter of the caller. It is not inlined, so
// that the wrapper it returns is its own, under one name.
//
//go:noinline
func NamespaceIndexFunc[T metav1.Object]() IndexFunc[T] {
	return NamespaceIndex[T]
}

// namespaceIndexNames are the names the runtime gives a function value of
// NamespaceIndex: "<package path>.NamespaceIndex[...]" for the function itself, and
// the wrapper NamespaceIndexFunc makes of it (a generic function value made inside
// a generic function is a closure of that function).
var namespaceIndexNames = func() map[string]bool {
	pkg := strings.TrimSuffix(funcName(metaKey), "metaKey")
	return map[string]bool{
		pkg + "NamespaceIndex[...]":              true,
		funcName(NamespaceIndexFunc[*nsProbe]()): true,
	}
}()

// nsProbe instantiates NamespaceIndexFunc to learn its wrapper's name, which is
// the same for every type argument.
type nsProbe struct{ metav1.ObjectMeta }

func funcName(fn any) string {
	if f := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()); f != nil {
		return f.Name()
	}
	return ""
}

// namespaceIndexes reports, for each of fns, whether it is NamespaceIndex and the
// Indexer can index the namespace it reads for the key instead of calling it (see
// indexSet.byNamespace); nil if none is. A function is recognized by its name, which
// no function outside this package can have; wrapping NamespaceIndex in another
// function only loses the saving.
func (x *Indexer[T]) namespaceIndexes(fns []IndexFunc[T]) []bool {
	if x.kf.nsName == nil {
		return nil
	}
	var out []bool
	for j, fn := range fns {
		if namespaceIndexNames[funcName(fn)] {
			if out == nil {
				out = make([]bool, len(fns))
			}
			out[j] = true
		}
	}
	return out
}

func isNilMeta(obj metav1.Object) bool {
	if obj == nil {
		return true
	}
	v := reflect.ValueOf(obj)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
