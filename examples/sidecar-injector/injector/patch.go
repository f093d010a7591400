package injector

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

const (
	// InjectAnnotation opts a Deployment in: with the value "true" (exactly) the
	// controller injects the sidecar into its pod template; any other value, or none,
	// means no sidecar, and a sidecar injected earlier is removed.
	InjectAnnotation = "sidecar.ctrlkit.dev/inject"

	// RecordAnnotation is written by the controller on the Deployments it injected:
	// a JSON Record of what it added. Users should not edit it.
	RecordAnnotation = "sidecar.ctrlkit.dev/injected"
)

// Record is what the controller injected into a Deployment, kept in its
// RecordAnnotation: the names of the containers and volumes it added (so that it
// removes exactly those, and never a user's own) and the Hash of the Sidecar they came
// from (so that an unchanged definition costs no request).
type Record struct {
	Hash       string   `json:"hash"`
	Containers []string `json:"containers"`
	Volumes    []string `json:"volumes,omitempty"`
}

// ErrInvalidRecord is matched (errors.Is) by the error of a RecordAnnotation that is
// not a Record: the controller then cannot know what it injected and leaves the
// Deployment alone.
var ErrInvalidRecord = errors.New("injector: invalid " + RecordAnnotation + " annotation")

// ErrNoSidecar is returned by ComputePatch for an opted-in Deployment when no sidecar
// definition is given.
var ErrNoSidecar = errors.New("injector: no sidecar definition")

// ConflictError reports that the sidecar would add a container or volume whose name a
// Deployment's pod template already uses for one of its own.
type ConflictError struct {
	Deployment string // namespace/name
	Kind       string // "container" or "volume"
	Name       string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("injector: deployment %s already has a %s named %q, which the sidecar would add", e.Deployment, e.Kind, e.Name)
}

// OptedIn reports whether d asks for the sidecar (InjectAnnotation is "true").
func OptedIn(d *appsv1.Deployment) bool { return d.Annotations[InjectAnnotation] == "true" }

// ReadRecord returns the Record of d's RecordAnnotation, nil if it has none, or an
// error matching ErrInvalidRecord.
func ReadRecord(d *appsv1.Deployment) (*Record, error) {
	s, ok := d.Annotations[RecordAnnotation]
	if !ok {
		return nil, nil
	}
	var r Record
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return nil, fmt.Errorf("%w on deployment %s/%s: %v", ErrInvalidRecord, d.Namespace, d.Name, err)
	}
	if r.Hash == "" || len(r.Containers) == 0 {
		return nil, fmt.Errorf("%w on deployment %s/%s: no hash or no containers", ErrInvalidRecord, d.Namespace, d.Name)
	}
	return &r, nil
}

// Action says what a Plan does to a Deployment.
type Action int

const (
	// NoAction: the Deployment is as it should be; no request is needed.
	NoAction Action = iota
	// Inject adds the sidecar to a Deployment that has none.
	Inject
	// Reinject replaces a sidecar injected earlier with the current definition (it
	// changed, or injected parts were removed or edited by hand).
	Reinject
	// Remove takes an injected sidecar out of a Deployment that no longer opts in.
	Remove
)

var actionNames = [...]string{NoAction: "none", Inject: "inject", Reinject: "reinject", Remove: "remove"}

func (a Action) String() string {
	if a < 0 || int(a) >= len(actionNames) {
		return fmt.Sprintf("Action(%d)", int(a))
	}
	return actionNames[a]
}

// Plan is the change ComputePatch found necessary.
type Plan struct {
	Action Action
	// Patch is the strategic merge patch to send (types.StrategicMergePatchType);
	// nil for NoAction. It carries the Deployment's resourceVersion as a
	// precondition, so a patch computed from a stale copy fails with a Conflict
	// instead of acting on state the computation did not see.
	Patch []byte
}

// ComputePatch compares d with what it should be and returns the patch that gets it
// there, built with strategicpatch.CreateTwoWayMergePatch from d and the desired
// Deployment:
//
//   - d opts in (OptedIn): its pod template should hold its own containers and
//     volumes followed by the sidecar's, and RecordAnnotation should record them.
//     If the Record already names sc's Hash and the injected containers and volumes
//     still hold every field sc sets, nothing is done: fields the API server
//     defaulted in them, and a user's changes to their own containers, are never
//     fought over. An injected container or volume removed or edited by hand (in a
//     field sc sets) is put back (Reinject).
//   - d does not opt in: the containers and volumes its Record names, and the Record,
//     should be gone; nothing else is touched.
//
// sc is only needed, and must be non-nil, when d opts in (ErrNoSidecar otherwise).
// A sidecar container or volume whose name d already uses for its own is a
// *ConflictError; a damaged Record an error matching ErrInvalidRecord. On error
// the Plan is zero: nothing is ever half done. ComputePatch does not modify d.
func ComputePatch(d *appsv1.Deployment, sc *Sidecar) (Plan, error) {
	rec, err := ReadRecord(d)
	if err != nil {
		return Plan{}, err
	}
	optedIn := OptedIn(d)
	if !optedIn && rec == nil {
		return Plan{}, nil
	}
	if optedIn && sc == nil {
		return Plan{}, fmt.Errorf("%w for deployment %s/%s", ErrNoSidecar, d.Namespace, d.Name)
	}
	if optedIn && rec != nil && upToDate(d, rec, sc) {
		return Plan{}, nil
	}

	want := d.DeepCopy()
	spec := &want.Spec.Template.Spec
	if rec != nil {
		spec.Containers = slices.DeleteFunc(spec.Containers, func(c corev1.Container) bool { return slices.Contains(rec.Containers, c.Name) })
		spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool { return slices.Contains(rec.Volumes, v.Name) })
		delete(want.Annotations, RecordAnnotation)
	}
	action := Remove
	if optedIn {
		action = Inject
		if rec != nil {
			action = Reinject
		}
		key := d.Namespace + "/" + d.Name
		for _, c := range sc.Containers {
			if hasContainer(spec.Containers, c.Name) || hasContainer(spec.InitContainers, c.Name) || hasEphemeral(spec.EphemeralContainers, c.Name) {
				return Plan{}, &ConflictError{Deployment: key, Kind: "container", Name: c.Name}
			}
		}
		for _, v := range sc.Volumes {
			if slices.ContainsFunc(spec.Volumes, func(u corev1.Volume) bool { return u.Name == v.Name }) {
				return Plan{}, &ConflictError{Deployment: key, Kind: "volume", Name: v.Name}
			}
		}
		for i := range sc.Containers {
			spec.Containers = append(spec.Containers, *sc.Containers[i].DeepCopy())
		}
		for i := range sc.Volumes {
			spec.Volumes = append(spec.Volumes, *sc.Volumes[i].DeepCopy())
		}
		recJSON, err := json.Marshal(Record{Hash: sc.Hash(), Containers: sc.containerNames(), Volumes: sc.volumeNames()})
		if err != nil {
			return Plan{}, fmt.Errorf("injector: %w", err)
		}
		if want.Annotations == nil {
			want.Annotations = map[string]string{}
		}
		want.Annotations[RecordAnnotation] = string(recJSON)
	}

	patch, err := twoWayPatch(d, want)
	if err != nil {
		return Plan{}, err
	}
	if patch == nil {
		return Plan{}, nil
	}
	return Plan{Action: action, Patch: patch}, nil
}

// upToDate reports whether d carries sc as recorded in rec.
func upToDate(d *appsv1.Deployment, rec *Record, sc *Sidecar) bool {
	if rec.Hash != sc.Hash() || !slices.Equal(rec.Containers, sc.containerNames()) || !slices.Equal(rec.Volumes, sc.volumeNames()) {
		return false
	}
	spec := &d.Spec.Template.Spec
	for i := range sc.Containers {
		j := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == sc.Containers[i].Name })
		if j < 0 || !covers(&spec.Containers[j], &sc.Containers[i]) {
			return false
		}
	}
	for i := range sc.Volumes {
		j := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == sc.Volumes[i].Name })
		if j < 0 || !covers(&spec.Volumes[j], &sc.Volumes[i]) {
			return false
		}
	}
	return true
}

// covers reports whether have already holds every field that want sets: applying
// want to have as a strategic merge patch changes nothing. Fields that want leaves
// out (such as those the API server defaults) do not count, so an injected
// container that someone edited is found out, while one the server defaulted is not.
// T is corev1.Container or corev1.Volume.
func covers[T any](have, want *T) bool {
	h, err := json.Marshal(have)
	if err != nil {
		return false
	}
	w, err := json.Marshal(want)
	if err != nil {
		return false
	}
	merged, err := strategicpatch.StrategicMergePatch(h, w, *new(T))
	if err != nil {
		return false
	}
	var m T
	if err := json.Unmarshal(merged, &m); err != nil {
		return false
	}
	return apiequality.Semantic.DeepEqual(&m, have)
}

// twoWayPatch returns the strategic merge patch from d to want with d's
// resourceVersion as a precondition, or nil if they do not differ.
func twoWayPatch(d, want *appsv1.Deployment) ([]byte, error) {
	original, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("injector: %w", err)
	}
	modified, err := json.Marshal(want)
	if err != nil {
		return nil, fmt.Errorf("injector: %w", err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(original, modified, appsv1.Deployment{})
	if err != nil {
		return nil, fmt.Errorf("injector: computing patch for deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, fmt.Errorf("injector: %w", err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	if d.ResourceVersion != "" {
		meta, _ := m["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
			m["metadata"] = meta
		}
		meta["resourceVersion"] = d.ResourceVersion
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("injector: %w", err)
	}
	return out, nil
}

func hasContainer(cs []corev1.Container, name string) bool {
	return slices.ContainsFunc(cs, func(c corev1.Container) bool { return c.Name == name })
}

func hasEphemeral(cs []corev1.EphemeralContainer, name string) bool {
	return slices.ContainsFunc(cs, func(c corev1.EphemeralContainer) bool { return c.Name == name })
}
