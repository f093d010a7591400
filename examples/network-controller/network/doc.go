// Package network is the controller of the Network custom resource of seed 002
// (samplecrd.k8s.io/v1, spec cidr and gateway), built on ctrlkit's informer and
// reconcile packages. It keeps an external network backend (package backend, an HTTP
// service standing in for Neutron) in line with the Networks of the cluster.
//
// Install creates the CRD through the apiextensions API; New builds a Controller on a
// manager.Manager's clients and shared informers and adds it to the manager, whose
// Run runs it with the process's other controllers:
//
//	m, err := manager.New(manager.Config{RESTConfig: cfg})
//	...
//	if _, err := network.New(m, network.Options{BackendURL: url}); err != nil { ... }
//	err = m.Run(ctx)
//
// There is no generated code: the informer (manager.Custom) decodes the server's
// JSON straight into the hand-written Network struct (which has its own DeepCopy),
// so a reconcile reads a typed object from the cache and converts nothing; the
// writes go through the dynamic client (ToUnstructured, FromUnstructured). The
// typed struct is the only place that spells out the schema.
//
// # What a reconcile does
//
// For the key namespace/name, reading the Network from the informer's cache:
//
//   - No Network: whatever the backend has under that key is an orphan and is
//     deleted (404 counts as done).
//   - A Network being deleted: if it carries the finalizer
//     samplecrd.k8s.io/network-cleanup, the backend network is deleted, then the
//     finalizer removed, and the API server deletes the object.
//   - Otherwise the finalizer is added first, then the spec is validated (Spec.Validate,
//     with net/netip): an invalid CIDR or a gateway outside it gives Ready=False,
//     reason InvalidSpec, with a message naming the field, and the backend is not
//     called. A valid spec is created in the backend if missing and replaced if it
//     drifted; then Ready=True, reason Provisioned.
//   - A backend failure gives Ready=False, reason BackendError, with the error as
//     message, and the reconcile returns the error so the key is retried with the
//     controller's exponential backoff until the backend recovers.
//
// Status (the Ready condition and observedGeneration, which is the generation the
// condition describes) is written through the status subresource, and only when it
// changes, so the controller's own writes do not make it loop.
//
// # Guarantees
//
//   - Optimistic concurrency: every write (finalizer, status) is an Update carrying
//     the resourceVersion it was computed from. On a 409 Conflict the object is read
//     again from the API server (the cache may still be behind) and the change is
//     computed again from that fresh state, up to MaxConflictRetries times; past
//     that the reconcile fails and is retried with backoff. A concurrent writer
//     therefore never makes the controller drop a finalizer or overwrite a newer
//     change, and the controller never overwrites the writer's changes.
//   - Orphans: objects deleted without the finalizer running (it was removed by
//     hand, or the controller was not installed yet) and networks created behind the
//     controller's back are found by the orphan sweep: the backend is listed when
//     the controller starts and every Options.OrphanSweepPeriod, and the keys of
//     backend networks with no Network in the cache are reconciled (and deleted).
//     With Options.Namespace set only that namespace's backend networks are
//     considered.
//   - Drift of a network that has a Network object (changed or deleted in the
//     backend) is repaired at the next reconcile of that object: any change of it,
//     or the periodic resync (Options.ResyncPeriod).
//   - New starts no goroutine; the manager's Run returns only after every
//     goroutine the controller started has ended.
//
// Errors are prefixed "network:"; an invalid spec is a *SpecError.
package network
