// Package injector is a controller that injects a sidecar (containers and volumes,
// such as an Envoy proxy) into the pod template of the Deployments that ask for it:
// the "initializer" of the seeds, written as a level-triggered controller on ctrlkit's
// informer, indexer and reconcile packages.
//
// The sidecar is defined in a ConfigMap (Options.ConfigNamespace/ConfigName, by
// default ctrlkit-system/sidecar-injector) under the data key ConfigKey, as YAML with
// "containers:" and "volumes:" (see Sidecar). A Deployment opts in with the annotation
// InjectAnnotation: "true".
//
// # Guarantees
//
//   - Changes are PATCHes: a strategic merge patch computed with
//     strategicpatch.CreateTwoWayMergePatch from the cached Deployment and the desired
//     one (ComputePatch), never an Update of the whole object, so other writers'
//     fields are kept. Each patch carries the resourceVersion it was computed from:
//     a patch from a stale cache fails with a Conflict and is retried, it never
//     acts on state it did not see.
//   - The controller records what it injected in the RecordAnnotation of the
//     Deployment (container and volume names, hash of the definition). A Deployment
//     whose record names the current definition, and whose injected parts still hold
//     what the definition sets, costs no request; opting out
//     removes exactly the recorded containers and volumes and the record, and the
//     user's own containers and volumes are never changed.
//   - When the ConfigMap changes, every opted-in Deployment is re-patched: an index
//     of the Deployment cache (ConfigIndex) maps the ConfigMap to them. Reformatting
//     the YAML without changing its meaning re-patches nothing.
//   - A definition that cannot be used (YAML that does not parse, unknown fields, no
//     container, a missing or repeated name, the ConfigMap missing) or a sidecar
//     name that an opted-in Deployment already uses for its own container or volume
//     leaves that Deployment untouched and is reported as a Warning Event on it
//     (reasons Reason*) and in the log. Nothing is ever half injected: each
//     Deployment gets one patch that does all or nothing.
//   - Deployments opted in before the definition became unusable keep the sidecar
//     they have until it is fixed; opting out always works, since removal does not
//     need the definition.
//
// Injected containers and volumes are compared with the definition only in the fields
// it sets: values the API server defaults are not fought over, a field it sets that
// was edited by hand is restored, and a field it does not mention, set on an injected
// container by hand, is kept until the definition changes (then the sidecar is
// replaced whole). The sidecar goes into Deployments, not Pods: the Deployment's own
// rollout replaces its Pods.
package injector
