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
// it also tells a reflector over FromREST not to decode managedFields at all:
// they are skipped on the wire, which takes about a third off the decoding of
// a small object and half its allocations (a ConfigMap with one managedFields
// entry: 450 → 315 ns, 16 → 8 allocations).
func StripManagedFields[T Object](obj T) (T, error) {
	obj.SetManagedFields(nil)
	return obj, nil
}
