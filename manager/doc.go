// Package manager runs many controllers in one process on shared informers: it
// is the piece that makes the other packages a whole, built only from them (each
// stays usable alone).
//
//	m, err := manager.New(manager.Config{RESTConfig: cfg})
//	pods, err := manager.Typed[*corev1.Pod](m, manager.Options[*corev1.Pod]{Namespace: ns})
//	c := reconcile.New(reconciler, reconcile.Config[types.NamespacedName]{Name: "pods"})
//	c.Watch(reconcile.FromInformer(pods, reconcile.ByObject[*corev1.Pod]()))
//	m.Add(c)
//	err = m.Run(ctx)
//
// # Guarantees
//
//   - Informers are shared: one per resource, Go type, namespace, label and field
//     selector and Transform function. Asking twice (Typed, Custom, Dynamic,
//     Metadata) returns the same informer and counts one more user of it; Release
//     counts one less, and the last Release stops the informer and drops it, so
//     that its cache can be garbage-collected. Asking again afterwards makes a
//     new one.
//   - Run starts every informer, waits until all have synced (bounded by
//     Config.SyncTimeout), then starts the controllers (after winning the leader
//     election, if configured). Informers and controllers added while Run runs
//     start at once. On the way out it stops in reverse order: the controllers
//     first (each drains its reconciles in flight), then the informers, then the
//     event broadcaster and the HTTP servers. When Run returns, nothing it started
//     is still running, except user code that ignored its cancelled context
//     longer than a shutdown timeout: Run's return is bounded by
//     Config.ShutdownTimeout (each controller's by its own
//     reconcile.Config.ShutdownTimeout, each informer's wait for its handlers
//     by informer.DefaultShutdownTimeout), after which it abandons what still
//     runs and returns an error wrapping reconcile.ErrShutdownTimeout that
//     names it.
//   - Run returns nil when its context ends, or the first error that stopped it,
//     naming the informer or controller it came from and wrapping its cause
//     (errors.Is(err, reflector.ErrForbidden) works on an informer that could not
//     list for lack of rights). A Runnable whose Run panics does not crash the
//     process: the panic is recovered and returned as a *PanicError.
//   - With Config.LeaderElection the process campaigns for one Lease; the
//     informers run and stay synced whether it leads or not (warm standby), so a
//     new leader reconciles at once, yet never on a cache older than what the
//     previous leader read or wrote: its controllers start once every informer
//     has reached the floor the previous leader published when it handed over
//     (usually there already), or, after a crash or a cut, what the server held
//     when the term began (see LastTakeover and FloorLeaseSuffix). When the
//     lease is lost the controllers stop
//     at once (reconciles in flight are cancelled, not drained) and Run returns
//     reconcile.ErrLeadershipLost, within the shutdown timeouts even if a
//     reconcile ignores its context.
//   - With Config.Sharding the process is one of several replicas that split
//     a controller's work (package shard: Leases, hash slots, fenced
//     hand-offs). Controllers added with AddSharded reconcile only the keys of
//     this replica's shard, placed by the key itself (never by a cached UID,
//     so that a deleted and re-created object keeps its replica), and
//     informers asked with Options.Shard hold only its objects (filtered by
//     the server with KEP-5866 sharded list and watch for ShardByNamespace,
//     by the reflector otherwise). A key leaves a replica with its
//     reconciles cancelled and drained before another may take it, and is
//     taken only once the new replica's informers hold its slot;
//     ShardStatus and the ctrlkit_shard_* series show the split. See Sharding
//     for the placement rule that keeps owners and children together.
//   - Events: EventRecorder returns a client-go tools/events recorder per
//     controller name; the broadcaster behind them starts with Run and is flushed
//     and stopped when Run returns. Events recorded while Run is not running are
//     dropped.
//   - HTTP (Config.HTTP): nothing listens on a port unless asked. /healthz
//     answers while the process serves; /readyz fails, naming each failing
//     check but never its reason (which is logged), while an informer has not
//     synced or has lost its access (a Forbidden list), or a controller is not
//     running and synced (a standby waiting for the lease counts as ready);
//     /metrics serves the controllers' controller_runtime_* and workqueue_*
//     series (Manager.ControllerMetrics), ctrlkit_informer_* for every
//     informer, ctrlkit_manager_leader and client-go's rest_client_* series;
//     pprof is optional, on a listener of its own, with bounded profiles.
//     Metrics and pprof are served over TLS only to bearer tokens the API
//     server authenticates (TokenReview) and authorizes for the path
//     (SubjectAccessReview): 401 or 403 otherwise, with no reason. Every
//     server bounds its headers, writes and idle connections. The RBAC a
//     manager needs, and the ClusterRoles of metrics and pprof readers, are in
//     manager/rbac/rbac.yaml.
//   - Clients: the manager's clientset, dynamic client and the informers' REST
//     clients share one HTTP transport built from Config.RESTConfig.
package manager
