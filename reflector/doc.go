// Package reflector keeps a local store in step with one collection of the
// Kubernetes API server, through list and watch requests, whatever the
// network and the server do.
//
// A Reflector[T] reads through a ListerWatcher[T] (FromTyped, FromDynamic
// and FromMetadata adapt client-go's clients in one line; FromREST reads a
// REST client's protobuf responses itself; FromJSON reads JSON into a custom
// resource's own Go struct, with no generated code, through a REST client
// that JSONClient makes) and writes to a Store[T], typically a deltafifo.
// Run is an explicit state machine:
//
//   - Listing. A streaming list (a watch with sendInitialEvents) where the
//     server supports it: the objects arrive as events and end with a
//     bookmark annotated "k8s.io/initial-events-end". Otherwise, or with
//     Config.WatchList set to WatchListOff, a paginated LIST whose first
//     request asks for resourceVersion "0" so that the watch cache answers.
//   - Watching from the list's resourceVersion, with bookmarks and a random
//     timeout, again and again from the last resourceVersion applied.
//   - Relisting when the server no longer has that resourceVersion.
//   - Backing off between attempts after a failure.
//
// # Guarantees
//
//   - A list reaches the store as one Store.Replace carrying every object
//     of the list and the list's resourceVersion; pages and streamed
//     objects are never stored on their own. Then each watch event is one
//     Add (Added), Update (Modified) or Delete (Deleted), in the server's
//     order.
//   - No change is lost or applied twice: a new watch starts from the
//     resourceVersion of the last event (or bookmark) the store accepted.
//     When a store call fails, the event is delivered again by the next
//     watch.
//   - 410 Gone / Expired relists at the last resourceVersion (the watch
//     cache answers, and the result is never older than the store); if that
//     is gone too, or the server says the resourceVersion is too large
//     (after a restore or behind a lagging server), it relists at the most
//     recent one. An expired continue token restarts the list at the most
//     recent resourceVersion, and the second time asks for the whole list in
//     one response. None of these waits, unless they repeat with no watch
//     event in between.
//   - Every other failure backs off: delays from 800ms doubling to 30s, with
//     jitter, back to 800ms after two healthy minutes (see Backoff). A
//     server's Retry-After is honoured up to the maximum delay. A watch the
//     server ends on schedule is reopened at once; one that ends within a
//     second without any event counts as a failure, so the reflector never
//     spins.
//   - 401 and 403 answers become an *AccessError (errors.Is ErrUnauthorized
//     or ErrForbidden), visible in Health().LastError and passed to
//     Config.OnError as soon as the server answers; the reflector keeps
//     retrying with backoff, so fixing RBAC is enough to recover.
//   - Config.Transform runs on every object before the store sees it.
//   - One bad object never stops a collection. An object the Transform
//     refuses (an error, nil or a panic), or that the ListerWatcher cannot
//     decode but can name (FromREST, FromJSON), is a *RefusedError:
//     reported to OnError, counted in Stats.Refused, left out of lists and,
//     on a watch, dropped from the store (Refuser) while the watch goes on
//     past it. A client-made watch error (an event no one can attribute)
//     is retried once from the same resourceVersion, then relisted past; a
//     StoreReadError (an unsafely deleted corrupt object) relists at once.
//   - A watch or streaming list whose request's time is up is given up even
//     if the ListerWatcher keeps it open (as client-go's fake clients do);
//     ListerWatchers that say they cannot stream lists (fake clients) are
//     listed from the start in WatchListAuto mode.
//   - With a ReuseStore, a listed object is replaced in the list by the
//     store's own instance only when Reuse returns one of the same
//     namespace, name and resourceVersion. With FromREST or FromJSON and a
//     ReuseKeyStore, such an object is not even decoded, nor transformed:
//     the store's instance is listed as it is.
//   - Run starts no goroutine and returns when its context is done; Health
//     and LastSyncResourceVersion are safe from any goroutine. The
//     reflector calls the store, Transform and OnError from Run's goroutine
//     only, one at a time, with no lock held.
//   - Objects handed to the store belong to it: the reflector keeps no
//     reference and never changes them afterwards.
//
// # Costs
//
// A list is held in memory once while it is assembled (the items of every
// page, or the streamed objects) and handed to Replace without copying.
// When the store is a ReuseStore (an informer's is), each listed object the
// store already holds at the same resourceVersion is swapped for the
// store's instance as soon as it is decoded, so a relist of mostly
// unchanged objects holds one copy of the collection plus what changed.
// With FromREST or FromJSON and a ReuseKeyStore (an informer's is), those
// objects are not decoded at all: the relist allocates little more than the
// changed objects, a key per object and one page or watch frame at a time
// (with JSON, also a copy of each item's bytes while its page is read). A
// store that is also a SizedStore is not asked to reuse anything during a
// list that starts while it is empty, such as the first. Per watch event the
// reflector does a type assertion, the transform and the store call, and it
// updates Health in one short critical section per run of at most 64 events
// back to back. The protobuf watches FromREST opens for the reflector hand
// over the events that reached the client together (at most 64 at once, as
// soon as the next event is not all read), so that the reflector is not woken
// up for each.
package reflector
