package reflector

// StripManagedFields is a Transform that drops metadata.managedFields, the
// server-side-apply bookkeeping that often makes up a large share of an
// object's memory and that controllers rarely read:
//
//	reflector.Config[*corev1.Pod]{Transform: reflector.StripManagedFields[*corev1.Pod]}
//
// It changes obj in place and never fails.
//
// Given as the Transform itself (not called from a function of one's own),
// it also tells a reflector over FromREST or FromJSON not to decode
// managedFields at all: they are cut out of the answer's bytes, protobuf or
// JSON, before the object is decoded. For a ConfigMap with one managedFields
// entry that takes protobuf decoding from 450 to 315 ns and 16 to 8
// allocations, JSON from 4.4 to 2.9 µs and 35 to 21 allocations.
func StripManagedFields[T Object](obj T) (T, error) {
	obj.SetManagedFields(nil)
	return obj, nil
}
