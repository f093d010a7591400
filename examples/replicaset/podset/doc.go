// Package podset is a ReplicaSet controller for a custom resource, PodSet: the
// Deployment → ReplicaSet → Pod chain of the seeds, built only on ctrlkit's manager,
// informer, reflector and reconcile packages and client-go's clients.
//
// A PodSet (group examples.ctrlkit.dev, version v1alpha1) says how many Pods to keep
// (spec.replicas), which Pods are its own (spec.selector) and what new ones look like
// (spec.template). Install creates its CRD; there is no generated code: the PodSet
// informer (manager.Custom) decodes the server's JSON straight into the PodSet
// struct, which has a hand-written DeepCopy; the dynamic client writes the status
// and reads a PodSet live before an adoption.
//
// The controller takes its clients and its two informers (PodSets, Pods) from a
// manager.Manager, whose informers other controllers of the process share, and adds
// itself to it; the manager's Run runs everything:
//
//	if err := podset.Install(ctx, cfg); err != nil { ... }
//	m, err := manager.New(manager.Config{RESTConfig: cfg})
//	...
//	if _, err := podset.New(m, podset.Options{}); err != nil { ... }
//	err = m.Run(ctx)
//
// # Guarantees
//
//   - Each PodSet ends up controlling spec.replicas active Pods (not finished, not
//     being deleted) that its selector matches. The Pods carry an owner reference
//     with controller and blockOwnerDeletion set, so the garbage collector deletes
//     them with their PodSet; the controller never deletes Pods of a deleted PodSet
//     itself and never creates Pods for it.
//   - Scale-down deletes Pods in a documented order: unscheduled before scheduled,
//     Pending before Unknown before Running, not Ready before Ready, newer before
//     older, then by name. Each deletion has a UID precondition, so a Pod replaced
//     under the same name is never deleted by mistake.
//   - Adoption: an orphan Pod (no controller) that a PodSet's selector matches is
//     adopted with a patch adding the owner reference, after a live read confirms
//     the PodSet still exists and is not being deleted; surplus Pods are then deleted
//     like any others. Release: a controlled Pod whose labels no longer match loses
//     the owner reference, and is replaced. Both patches carry the Pod's UID as a
//     precondition.
//   - Never over-create, with no bookkeeping of its own: the controller writes
//     through the manager's clients, which record the resourceVersion of every
//     create, delete and patch a reconcile makes (reconcile.TrackWrites), and its
//     two sources are reconcile.FromInformer sources whose informers name their
//     collection (informer.Config.Scope). reconcile's read-your-writes then runs a
//     PodSet's next reconcile only once the Pod and PodSet caches have reached
//     those resourceVersions, or reconcile.DefaultCacheWaitTimeout after the
//     writes. A cache that lags behind the controller's own writes by less than that
//     therefore never makes it create or delete twice. Options.UnsafeNoReadYourWrites turns this
//     off, for tests that show the race.
//   - Creations start slowly (1, 2, 4, … in parallel), so a template the API server
//     rejects costs one failed call per attempt; an invalid template or selector is a
//     terminal error, not retried until the PodSet changes. A PodSet that cannot be
//     decoded into the struct (a template of the wrong shape) is left out of the
//     cache and reported by the informer: the controller leaves it alone.
//   - The status (replicas, readyReplicas, observedGeneration, and the selector for
//     the scale subresource) is written with a merge patch on the status subresource.
//   - New starts no goroutine; when the manager's Run returns, nothing the
//     controller started runs.
//
// Errors are prefixed "podset:"; ErrInvalid marks a PodSet that cannot be acted on.
package podset
