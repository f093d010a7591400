package podset

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/reconcile"
)

// podSetsOf is the Mapper of the controller's Pod source: a Pod maps to its
// controller if that is a PodSet; an orphan Pod not being deleted maps to the
// PodSets of its namespace that could adopt it (not being deleted, with a valid
// selector, see PodSet.selector, that matches); any other Pod maps to nothing.
// Cost: for an orphan, one pass over the namespace's cached PodSets, parsing each
// selector. The controller's resync maps every cached Pod too; its queue drops
// the keys the PodSet source already gave.
func (c *Controller) podSetsOf(p *corev1.Pod) []types.NamespacedName {
	if key, ok := controllerKey(p); ok {
		return []types.NamespacedName{key}
	}
	if !isOrphan(p) || p.DeletionTimestamp != nil {
		return nil
	}
	sets, err := c.podSets.Lister().Namespace(p.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	var keys []types.NamespacedName
	for _, ps := range sets {
		if ps.DeletionTimestamp != nil {
			continue
		}
		if sel, err := ps.selector(); err == nil && sel.Matches(labels.Set(p.Labels)) {
			keys = append(keys, types.NamespacedName{Namespace: ps.Namespace, Name: ps.Name})
		}
	}
	return keys
}

// podEvents is the Predicate of the controller's Pod source. It passes every
// creation; the deletion of a Pod a PodSet controls (an orphan that goes changes
// nothing for anyone); and an update of a Pod a PodSet controls before or after
// it (a released Pod reaches its old owner, an adopted one its new owner), or
// that changes the labels or whether the Pod has a controller at all (an orphan
// that another PodSet may now adopt). An orphan's status changing passes nothing.
func podEvents(e reconcile.Event[*corev1.Pod]) bool {
	switch e.Type {
	case reconcile.Delete:
		_, owned := controllerKey(e.Obj)
		return owned
	case reconcile.Update:
		_, oldOwned := controllerKey(e.Old)
		_, owned := controllerKey(e.Obj)
		return oldOwned || owned || isOrphan(e.Old) != isOrphan(e.Obj) || !labels.Equals(e.Old.Labels, e.Obj.Labels)
	}
	return true
}

// isOrphan reports whether p has no controller at all.
func isOrphan(p *corev1.Pod) bool { return metav1.GetControllerOfNoCopy(p) == nil }

// controllerKey returns the key of p's controller if that is a PodSet.
func controllerKey(p *corev1.Pod) (types.NamespacedName, bool) {
	ref := metav1.GetControllerOfNoCopy(p)
	if ref == nil || ref.Kind != Kind {
		return types.NamespacedName{}, false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != Group {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: p.Namespace, Name: ref.Name}, true
}
