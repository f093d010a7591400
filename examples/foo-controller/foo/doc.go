// Package foo is Kubernetes' sample-controller (k8s.io/sample-controller) on
// ctrlkit's manager: for every Foo (group samplecontroller.k8s.io, version
// v1alpha1) it keeps a Deployment of spec.replicas nginx Pods and reports the
// Deployment's available replicas in the Foo's status.
//
// Foo is a plain Go struct read from the server's JSON by manager.Custom; nothing
// is generated. Install creates its CRD; Add puts the controller into a manager:
//
//	m, err := manager.New(manager.Config{RESTConfig: cfg})
//	err = foo.Add(m, foo.Config{})
//	err = m.Run(ctx)
//
// # Behaviour
//
//   - A Foo's Deployment is named spec.deploymentName, lives in the Foo's
//     namespace, is controlled by the Foo (an owner reference with controller and
//     blockOwnerDeletion set, so the garbage collector deletes it with the Foo),
//     and runs one container "nginx" (image nginx:latest) in Pods labelled
//     app=nginx and controller=<Foo name>, which are also its selector.
//   - A Deployment of that name that the Foo does not control is left alone: a
//     Warning event ErrResourceExists is recorded about the Foo and the key is
//     retried with backoff (the name may be freed).
//   - When spec.replicas differs from the Deployment's, the Deployment is updated
//     (an Update of the cached copy: a conflict is retried from fresh state).
//   - status.availableReplicas follows the Deployment's, written with a JSON merge
//     patch on the status subresource when it differs.
//   - Every successful reconcile records a Normal event "Synced".
//   - A Deployment change reconciles its controlling Foo; a Foo without
//     spec.deploymentName, or deleted, is left alone.
//
// Events are events.k8s.io/v1 Events (the manager's recorder), reporting
// controller "foo-controller"; upstream records core/v1 Events.
package foo
