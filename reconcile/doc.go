// Package reconcile is the level-triggered controller loop: users write a
// Reconciler for one key, and a Controller feeds it keys from sources (informers),
// with retries, resync, workers, metrics and leader election.
//
//	c := reconcile.New[types.NamespacedName](reconcile.Func[types.NamespacedName](
//		func(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
//			obj, err := lister.Get(key.Namespace, key.Name) // from the informer's cache
//			...                                            // missing: clean up
//		}), reconcile.Config[types.NamespacedName]{Name: "demo", Workers: 4, ResyncPeriod: 10 * time.Minute})
//	c.Watch(reconcile.FromInformer(owners, reconcile.ByObject[*v1.ConfigMap]()))
//	c.Watch(reconcile.FromInformer(children, reconcile.ByControllerOwner[*v1.Secret](ownerGK)))
//	go owners.Run(ctx); go children.Run(ctx)
//	err := c.Run(ctx)
//
// # Guarantees
//
//   - The work queue's Get/Done/Forget protocol is the controller's job: a nil
//     error forgets the key's backoff, Result.RequeueAfter schedules the key again,
//     Terminal errors are not retried, any other error is retried with the rate
//     limiter's backoff.
//   - A key is never reconciled by two workers at once; a key changed while being
//     reconciled is reconciled again afterwards. Keys changed many times while
//     waiting are reconciled once.
//   - A panic in Reconcile is recovered, logged with the key and its stack,
//     counted (Metrics.Panicked) and retried with backoff. Panics in goroutines
//     the reconciler starts itself are not recoverable and crash the process.
//   - Each Reconcile gets a context carrying a logr.Logger with the values
//     "controller" and "key", bounded by Config.ReconcileTimeout if set.
//   - Run starts nothing until every source has synced (bounded by
//     Config.SyncTimeout; the error names the source that did not), so the first
//     reconciles see a complete cache.
//   - Priorities: keys from the sources' initial lists and from resyncs wait at
//     Background priority, live changes at Live: a live change overtakes a resync
//     backlog, and aging in the queue keeps the backlog from starving.
//   - Level-triggered resync: every Config.ResyncPeriod each key the sources hold
//     is enqueued again, n keys spread over n equal slots of the period at a random
//     point of each slot, so the rate is even (never a burst) and varies run to run.
//   - Deletions reach the reconciler: a deleted object's key is enqueued (from its
//     last known state, also when the informer only inferred the deletion on a
//     relist). Objects deleted while the controller was down are reached through
//     their dependents: a source mapping children to their owner (ByControllerOwner)
//     enqueues the owner's key from the initial list, and the reconciler finds the
//     owner missing.
//   - Shutdown: when Run's context ends the workers stop taking keys, reconciles in
//     flight finish (their contexts are cancelled after Config.DrainTimeout), the
//     sources' handlers are removed and the queue is shut down. When Run returns,
//     no goroutine it started runs and no Reconcile is in progress.
//   - Run's return is bounded, also when a Reconcile ignores its context: once
//     the reconciles' contexts are cancelled, Run waits for them at most
//     Config.ShutdownTimeout, then abandons them and returns a *ShutdownError
//     (errors.Is ErrShutdownTimeout) naming the keys still being reconciled.
//   - Leader election (Config.LeaderElection, client-go's tools/leaderelection):
//     sources sync before the election, only the leader reconciles, and losing the
//     lease stops the workers and cancels the reconciles in flight before Run
//     returns ErrLeadershipLost.
//   - New starts no goroutine; no user code (Reconciler, Mapper, Predicate,
//     Metrics) is called with a lock of the controller held.
//
// Errors are prefixed "reconcile:" and matched with errors.Is/As (ErrTerminal,
// ErrAlreadyStarted, ErrLeadershipLost, ErrShutdownTimeout, *SyncError,
// *ShutdownError, *PanicError).
package reconcile
