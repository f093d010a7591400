package reflector

// StripManagedFields is a Transform that drops metadata.managedFields, the
// server-side-apply bookkeeping that often makes up a large share of an
// object's memory and that controllers rarely read:
//
//	reflector.Config[*corev1.Pod]{Transform: reflector.StripManagedFields[*corev1.Pod]}
//
// It changes obj in place and never fails.
func StripManagedFields[T Object](obj T) (T, error) {
	obj.SetManagedFields(nil)
	return obj, nil
}
