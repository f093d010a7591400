// Package nilcheck tells whether a value of a type parameter is nil. indexer and
// deltafifo share it to reject nil objects without importing each other.
package nilcheck

import "reflect"

// For returns a function reporting whether a T is nil (for an interface T, also a typed
// nil pointer, map, slice, ... inside it). For types that cannot be nil it always reports
// false. The reflection happens once, here; the returned function is cheap for pointer T.
func For[T any]() func(T) bool {
	switch reflect.TypeFor[T]().Kind() {
	case reflect.Interface:
		return func(v T) bool {
			a := any(v)
			if a == nil {
				return true
			}
			switch rv := reflect.ValueOf(a); rv.Kind() {
			case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.UnsafePointer:
				return rv.IsNil()
			}
			return false
		}
	case reflect.Pointer, reflect.Chan, reflect.UnsafePointer:
		// Comparable, so comparing with the zero value is cheap and exact.
		return func(v T) bool { var zero T; return any(v) == any(zero) }
	case reflect.Map, reflect.Slice, reflect.Func:
		return func(v T) bool { return reflect.ValueOf(&v).Elem().IsNil() }
	default:
		return func(T) bool { return false }
	}
}
