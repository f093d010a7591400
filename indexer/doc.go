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
//   - ByIndex returns a shared, read-only snapshot slice per index value, not a
//     fresh slice: it is built on the first ByIndex of the value and returned again,
//     in O(1) and without allocating, until a write changes the objects indexed under
//     that value (the next call then builds a new one; slices already returned never
//     change). Like the objects, the slice must not be modified: do not sort it,
//     reorder it, overwrite or clear its elements, or filter it in place. Copy it
//     first (slices.Clone) or use AppendByIndex, which fills a slice of the caller's.
//     Its capacity equals its length, so an append copies. Snapshots exist only for
//     values that were read with ByIndex (one T per object), and the mutation
//     detector reports a caller that changed one. Everything else that returns a
//     slice (List, ListKeys, IndexKeys, IndexValues, the Lister) returns a fresh one
//     that belongs to the caller; AppendByIndex, AppendList and AppendKeys append to
//     a slice of the caller's and allocate nothing when it has room, so a loop that
//     reads the store again and again can reuse one.
//   - Index bookkeeping is tight: a value with no objects left is forgotten, member
//     lists shrink as values empty, and freed slots are reused or compacted away, so
//     churning through millions of keys or index values does not grow memory. With
//     the default key (MetaKey, for pointer types) no key string is built or
//     allocated: keys are hashed and compared from namespace and name (the object's
//     name string, whose header the store keeps, and its namespace as the namespace
//     index holds it, or as the object has it when there is no such index), and built
//     only when returned (ListKeys, IndexKeys, Absent). A store listed with ListKeys
//     more than once keeps the keys it built (about their bytes plus 16 bytes an
//     object), so that later listings build only the keys of objects stored since; they
//     are dropped when more than half the store leaves between two listings. Reads by
//     key, by object and through the Lister allocate nothing.
//   - Such an Indexer recognizes NamespaceIndex among its index functions and indexes
//     the namespace it reads for the key without calling it, so an Update that
//     only uses it allocates nothing. While every object is in one namespace (an
//     informer of one namespace, or of a cluster-scoped resource) that index keeps
//     nothing per object, 12 bytes an object less; an object in a second namespace
//     makes it keep its per-object state from then on (a Replace of mostly new
//     contents, which builds a new store, starts without it again).
//   - Swap(obj) stores obj and returns the object it replaced in one atomic write.
//   - Replace(objs) makes objs the whole contents; it updates the store in place
//     (no second copy of the store) and is atomic to readers.
//   - AddIndexes works while the store holds data and while other goroutines read and
//     write it.
//
// Unknown index names are reported with ErrUnknownIndex; every error is prefixed
// "indexer:" and can be matched with errors.Is or errors.As.
package indexer
