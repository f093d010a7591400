// Package informer keeps a local, indexed cache of one Kubernetes API collection in
// step with the server, and tells any number of handlers about its changes.
//
// An Informer[T] composes the three lower pieces: a reflector.Reflector lists and
// watches the server and queues what it sees in a deltafifo.FIFO; Run pops the FIFO
// in batches, applies each to an indexer.Indexer (the cache, read through Lister
// and Indexer) and hands the resulting changes to the handlers:
//
//	inf := informer.New(reflector.FromTyped(client.CoreV1().ConfigMaps("")), informer.Config[*corev1.ConfigMap]{})
//	reg, err := inf.AddHandler(informer.HandlerFuncs[*corev1.ConfigMap]{...}, informer.HandlerOptions{})
//	go inf.Run(ctx)
//	err = inf.WaitForSync(ctx)
//
// # Guarantees
//
//   - The cache changes in the server's order. A list (the first one, and every
//     relist after a 410 Gone or a reconnection) replaces the cache in one atomic
//     step: readers see the old contents or the new, never a mix.
//   - Handlers are told what changed in the cache, after it changed: OnAdd for a key
//     the cache did not hold, OnUpdate(old, new) with old the previous cached
//     object, OnDelete with a Deleted[T] for a key it held. A key deleted while the
//     informer was disconnected is found missing by the relist and reported with
//     Deleted.FinalStateUnknown set and the last cached object. An object listed
//     again with an unchanged resourceVersion is not reported, and the cache keeps
//     the instance it had.
//   - Per key, each handler's calls form a consistent story: OnUpdate's old is the
//     object it was last given, no OnUpdate or OnDelete for a key it does not know,
//     no OnAdd for one it knows. Nothing is repeated and nothing is skipped, except
//     as coalescing allows (below).
//   - Each handler has its own goroutine and backlog: a slow or stuck handler never
//     blocks the informer or other handlers. Past HandlerOptions.BufferLimit waiting
//     changes the backlog coalesces to the latest state per key until the handler
//     has caught up, so it holds at most BufferLimit changes plus one entry per key.
//     Coalescing keeps the story consistent and loses no deletion of an object the
//     handler knew (a deletion and re-creation becomes OnDelete then OnAdd); it only
//     skips intermediate states, and an object created and deleted while coalescing
//     is not reported at all. Registration.Stats counts what was coalesced.
//   - A handler added after the first list gets the whole cache as OnAdd calls (with
//     inInitialList true) and then every later change, with no gap and no repeat.
//     Registration.HasSynced turns true once those OnAdd calls have returned;
//     Informer.HasSynced once the cache holds the first list.
//   - Per-handler resync: every ResyncPeriod (about; resyncs of several handlers may
//     be merged) the handler gets OnUpdate(obj, obj) for every cached object that
//     has no change queued.
//   - LastAppliedResourceVersion tells how far the cache is in step with the server
//     (lists, events and bookmarks), and WaitForResourceVersion lets a caller wait
//     until its own write is visible in the cache.
//   - User code cannot stop the informer. A handler that panics is recovered, the
//     panic reported (OnError, Logger) and counted (HandlerStats.Panicked), and the
//     handler goes on with its next change; the change it panicked on is not
//     delivered again (a later change of the key or a resync brings the key back).
//     An index function that fails or panics leaves the object out of that index.
//     An object the Transform refuses or that cannot be decoded is left out of the
//     cache, reported and counted, while the rest of the collection stays live
//     (see Config.Transform).
//   - New starts no goroutine. Run starts the reflector, the resync timer and the
//     handlers' goroutines, and returns only after all of them have ended, except
//     a handler call that outlasts Config.ShutdownTimeout past the end of Run's
//     context: Run then abandons it and returns a *ShutdownError (errors.Is
//     ErrShutdownTimeout). No user code (handlers, transform, index functions,
//     OnError) is called with a lock of the informer held.
//
// Objects in the cache and given to handlers are shared between them: treat them as
// read-only, and copy before changing (Config.DetectMutations catches violations in
// tests).
//
// Errors are prefixed "informer:" and can be matched with errors.Is; failures of the
// server are not errors of Run but are retried by the reflector and visible in
// Health and Config.OnError, a denied list or watch as a *reflector.AccessError.
package informer
