package informer

// ReuseKey hands the reflector's ListerWatcher the cached instance of the object
// namespace/name when the cache holds it at exactly resourceVersion, so that a
// relist through reflector.FromREST does not even decode unchanged objects (see
// reflector.ReuseKeyStore). The cached instance was transformed when it was
// stored. It is safe to call from any goroutine, takes the cache's read lock
// briefly, and allocates nothing for keys of up to 32 bytes.
func (f feed[T]) ReuseKey(namespace, name, resourceVersion string) (T, bool) {
	var zero T
	if resourceVersion == "" || f.inf.idx.Len() == 0 {
		return zero, false
	}
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	old, ok := f.inf.idx.Get(key)
	if !ok || old.GetResourceVersion() != resourceVersion {
		return zero, false
	}
	return old, true
}
