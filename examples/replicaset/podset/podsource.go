package podset

import (
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reconcile"
)

// podSource feeds the controller the PodSets whose Pods changed. It is a Source of
// its own rather than reconcile.FromInformer with reconcile.ByControllerOwner because
// it must lower the expectations before it enqueues the owner, in the same handler
// call: a reconcile that ran between the two would find the expectations unmet and
// wait for their timeout.
//
// A Pod maps to its controller if that is a PodSet; an orphan Pod maps to the PodSets
// of its namespace whose selector matches it, which may adopt it.
type podSource struct {
	c   *Controller
	reg atomic.Pointer[informer.Registration[*corev1.Pod]]
}

func (s *podSource) Name() string { return "pods" }

func (s *podSource) Start(enqueue func(types.NamespacedName, reconcile.Priority)) (func(), error) {
	h := &podHandler{c: s.c, enqueue: enqueue}
	reg, err := s.c.pods.AddHandler(informer.HandlerFuncs[*corev1.Pod]{
		AddFunc:    h.add,
		UpdateFunc: h.update,
		DeleteFunc: h.delete,
	}, informer.HandlerOptions{ResyncPeriod: -1}) // the controller's resync covers every PodSet
	if err != nil {
		return nil, err
	}
	s.reg.Store(reg)
	return func() { s.c.pods.RemoveHandler(reg) }, nil
}

func (s *podSource) HasSynced() bool {
	reg := s.reg.Load()
	return reg != nil && reg.HasSynced()
}

// AppendKeys adds nothing: the PodSet source already holds every key to resync.
func (s *podSource) AppendKeys(dst []types.NamespacedName) []types.NamespacedName { return dst }

type podHandler struct {
	c       *Controller
	enqueue func(types.NamespacedName, reconcile.Priority)
}

func (h *podHandler) add(p *corev1.Pod, inInitialList bool) {
	prio := reconcile.Live
	if inInitialList {
		prio = reconcile.Background
	}
	if key, ok := controllerKey(p); ok {
		if p.DeletionTimestamp != nil {
			// Seen for the first time already being deleted (after a restart).
			h.c.exp.DeletionObserved(key, string(p.UID))
		} else {
			h.c.exp.CreationObserved(key)
		}
		h.enqueue(key, prio)
		return
	}
	if isOrphan(p) {
		h.enqueueMatching(p, prio)
	}
}

func (h *podHandler) update(old, p *corev1.Pod) {
	oldKey, oldOwned := controllerKey(old)
	key, owned := controllerKey(p)
	if owned {
		if p.DeletionTimestamp != nil && old.DeletionTimestamp == nil {
			// A graceful deletion has begun: for the controller the Pod is gone.
			h.c.exp.DeletionObserved(key, string(p.UID))
		}
		h.enqueue(key, reconcile.Live)
	}
	if oldOwned && (!owned || oldKey != key) {
		h.enqueue(oldKey, reconcile.Live) // released, or taken by another PodSet
	}
	if isOrphan(p) && (!isOrphan(old) || !labels.Equals(old.Labels, p.Labels)) {
		h.enqueueMatching(p, reconcile.Live) // an orphan that may now be adopted
	}
}

func (h *podHandler) delete(d informer.Deleted[*corev1.Pod]) {
	if key, ok := controllerKey(d.Obj); ok {
		h.c.exp.DeletionObserved(key, string(d.Obj.UID))
		h.enqueue(key, reconcile.Live)
	}
}

// enqueueMatching enqueues the PodSets of the orphan p's namespace that could adopt
// it: not being deleted, with a valid selector (see PodSet.selector) that matches.
// Cost: one pass over the namespace's cached PodSets, parsing each selector.
func (h *podHandler) enqueueMatching(p *corev1.Pod, prio reconcile.Priority) {
	if p.DeletionTimestamp != nil {
		return
	}
	sets, err := h.c.podSets.Lister().Namespace(p.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, ps := range sets {
		if ps.DeletionTimestamp != nil {
			continue
		}
		if sel, err := ps.selector(); err == nil && sel.Matches(labels.Set(p.Labels)) {
			h.enqueue(types.NamespacedName{Namespace: ps.Namespace, Name: ps.Name}, prio)
		}
	}
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
