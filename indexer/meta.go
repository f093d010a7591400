package indexer

import (
	"errors"
	"reflect"

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
func NamespaceIndex[T metav1.Object](obj T) ([]string, error) {
	if isNilMeta(obj) {
		return nil, ErrNilObject
	}
	return []string{obj.GetNamespace()}, nil
}

func isNilMeta(obj metav1.Object) bool {
	if obj == nil {
		return true
	}
	v := reflect.ValueOf(obj)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
