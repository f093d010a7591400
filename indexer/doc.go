// Package indexer is a typed, thread-safe local store of objects with named secondary
// indexes: the cache that sits behind a list-watch informer.
//
// An Indexer[T] stores objects by a key computed with a typed KeyFunc (MetaKey,
// "namespace/name", by default for Kubernetes types) and keeps any number of named
// indexes, each computed by a typed IndexFunc that maps an object to zero or more
// values. A Lister[T] adds Kubernetes-style reads: Get(namespace, name) with a
// NotFound error, List by label selector, and per-namespace listing through the
// namespace index.
//
// Guarantees:
//
//   - Writes are atomic across all indexes. Key and index functions run before the
//     lock is taken; if any of them fails, or the object is nil, or its key is empty,
//     the error is returned and the store is exactly as it was. Nothing panics on bad
//     input (only New panics, on a misconfigured Config).
//   - Key and index functions never run while the Indexer's lock is held, and removing
//     or replacing an object never calls an index function on the old object: the
//     values it was indexed under are remembered.
//   - Reads do not copy objects. Everything returned is shared with the store and must
//     be treated as read-only; Config.DetectMutations reports violations in tests.
//   - Index bookkeeping is tight: a value with no objects left is forgotten, member
//     lists shrink as values empty, and freed slots are reused or compacted away, so
//     churning through millions of keys or index values does not grow memory. With
//     the default key (MetaKey, for pointer types) no key string is stored: keys are
//     hashed and compared from the objects' namespace and name, and built only when
//     returned (ListKeys, IndexKeys, Absent). Reads by key, by object and through the
//     Lister allocate nothing.
//   - Swap(obj) stores obj and returns the object it replaced in one atomic write.
//   - Replace(objs) makes objs the whole contents; it updates the store in place
//     (no second copy of the store) and is atomic to readers.
//   - AddIndexes works while the store holds data and while other goroutines read and
//     write it.
//
// Unknown index names are reported with ErrUnknownIndex; every error is prefixed
// "indexer:" and can be matched with errors.Is or errors.As.
package indexer
