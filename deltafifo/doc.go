// Package deltafifo is the ordered queue of deltas between a reflector and the store
// it feeds: the reflector queues what it saw (Add, Update, Delete, and a whole relist
// with Replace), and a consumer pops batches and applies them.
//
// Guarantees:
//
//   - Deltas are delivered in the order they arrived, across all keys. Nothing is
//     coalesced or reordered.
//   - Replace(list, resourceVersion) is delivered as one batch (Batch.Relist) carrying
//     the resourceVersion: a Deleted delta with FinalStateUnknown (the typed tombstone,
//     carrying the last known object) for every key the store knows that the list
//     lacks, then a Replaced delta per listed object. Deletions are computed against
//     Config.KnownObjects when the relist is popped, after every earlier batch was
//     applied, so they are exact even when deltas were still queued at Replace time.
//     The relist keeps the caller's list, not a copy, and one key per object.
//   - Resync queues a Sync delta for each known object without a newer delta queued;
//     like a relist, it is computed when popped, from the store's current objects.
//   - Pop runs its function without holding the lock: producers never wait on a slow
//     consumer for longer than one queue operation. One batch is in flight at a time.
//     A failed (or panicking) batch goes back to the front of the queue unchanged.
//   - HasSynced becomes true once the first relist has been popped and processed
//     without error. Close makes every blocked or later Pop return ErrClosed.
//   - Bad input (a nil object, a key function error, an empty key) is returned as an
//     error and nothing is queued. Errors are prefixed "deltafifo:" and can be matched
//     with errors.Is or errors.As.
//
// FIFO[T] satisfies the reflector's Store[T] interface (Add, Update, Delete,
// Replace(objs, resourceVersion)) without importing it, and *indexer.Indexer[T]
// satisfies KnownObjects[T] and AbsentFinder[T].
//
// Compared with client-go's RealFIFO: the delivered deltas are the same for the same
// input when the consumer applies each batch to KnownObjects (a test checks this),
// except that a resync is evaluated when popped, so it skips the keys queued after the
// Resync call rather than before it.
package deltafifo
