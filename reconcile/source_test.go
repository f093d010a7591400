package reconcile

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/informer"
)

type cm = *corev1.ConfigMap

func configMap(ns, name string, mod ...func(*corev1.ConfigMap)) cm {
	c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1", Generation: 1}}
	for _, m := range mod {
		m(c)
	}
	return c
}

func ownedBy(apiVersion, kind, name string, controller bool) func(*corev1.ConfigMap) {
	return func(c *corev1.ConfigMap) {
		c.OwnerReferences = append(c.OwnerReferences, metav1.OwnerReference{
			APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(name), Controller: &controller,
		})
	}
}

func TestByObject(t *testing.T) {
	got := ByObject[cm]()(configMap("ns", "a"))
	want := []types.NamespacedName{{Namespace: "ns", Name: "a"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestByControllerOwner(t *testing.T) {
	m := ByControllerOwner[cm](schema.GroupKind{Group: "apps", Kind: "Deployment"})
	tests := []struct {
		name string
		obj  cm
		want []types.NamespacedName
	}{
		{"controller owner of the kind", configMap("ns", "c", ownedBy("apps/v1", "Deployment", "d", true)), []types.NamespacedName{{Namespace: "ns", Name: "d"}}},
		{"owner not controller", configMap("ns", "c", ownedBy("apps/v1", "Deployment", "d", false)), nil},
		{"other kind", configMap("ns", "c", ownedBy("apps/v1", "StatefulSet", "d", true)), nil},
		{"other group", configMap("ns", "c", ownedBy("example.com/v1", "Deployment", "d", true)), nil},
		{"core group", configMap("ns", "c", ownedBy("v1", "Deployment", "d", true)), nil},
		{"no owner", configMap("ns", "c"), nil},
		{"second reference is the controller", configMap("ns", "c", ownedBy("apps/v1", "Deployment", "x", false), ownedBy("apps/v1", "Deployment", "y", true)), []types.NamespacedName{{Namespace: "ns", Name: "y"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, m(tt.obj)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestPredicates(t *testing.T) {
	base := configMap("ns", "a")
	gen := configMap("ns", "a", func(c *corev1.ConfigMap) { c.Generation = 2; c.ResourceVersion = "2" })
	lbl := configMap("ns", "a", func(c *corev1.ConfigMap) { c.Labels = map[string]string{"x": "y"}; c.ResourceVersion = "2" })
	ann := configMap("ns", "a", func(c *corev1.ConfigMap) { c.Annotations = map[string]string{"x": "y"}; c.ResourceVersion = "2" })
	rv := configMap("ns", "a", func(c *corev1.ConfigMap) { c.ResourceVersion = "2" })
	preds := map[string]Predicate[cm]{
		"generation":      GenerationChanged[cm](),
		"labels":          LabelsChanged[cm](),
		"annotations":     AnnotationsChanged[cm](),
		"resourceVersion": ResourceVersionChanged[cm](),
	}
	tests := []struct {
		name string
		new  cm
		pass []string // predicates that pass the update base → new
	}{
		{"generation", gen, []string{"generation", "resourceVersion"}},
		{"labels", lbl, []string{"labels", "resourceVersion"}},
		{"annotations", ann, []string{"annotations", "resourceVersion"}},
		{"status only", rv, []string{"resourceVersion"}},
		{"nothing", base, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for name, p := range preds {
				if p(Event[cm]{Type: Update, Old: base, Obj: tt.new}) {
					got = append(got, name)
				}
				// Creates and deletes always pass.
				if !p(Event[cm]{Type: Create, Obj: tt.new}) || !p(Event[cm]{Type: Delete, Obj: tt.new}) {
					t.Errorf("%s filtered a create or delete", name)
				}
			}
			slices.Sort(got)
			slices.Sort(tt.pass)
			if diff := cmp.Diff(tt.pass, got); diff != "" {
				t.Errorf("passing predicates (-want +got):\n%s", diff)
			}
		})
	}
	or := Or(LabelsChanged[cm](), AnnotationsChanged[cm]())
	if !or(Event[cm]{Type: Update, Old: base, Obj: ann}) || or(Event[cm]{Type: Update, Old: base, Obj: gen}) {
		t.Error("Or does not pass exactly what one of its predicates passes")
	}
}

// fakeHost stands for an informer: the test calls the registered handler.
type fakeHost struct {
	objs    []cm
	err     error
	handler informer.Handler[cm]
	synced  atomic.Bool
	removed atomic.Bool
}

func (h *fakeHost) name() string { return "configmaps" }
func (h *fakeHost) list() []cm   { return h.objs }
func (h *fakeHost) lastError() error {
	return h.err
}
func (h *fakeHost) add(hd informer.Handler[cm]) (func() bool, func(), error) {
	if h.err != nil {
		return nil, nil, h.err
	}
	h.handler = hd
	return h.synced.Load, func() { h.removed.Store(true) }, nil
}

type enqueued struct {
	key types.NamespacedName
	p   Priority
}

type sink struct {
	mu  sync.Mutex
	got []enqueued
}

func (s *sink) enqueue(k types.NamespacedName, p Priority) {
	s.mu.Lock()
	s.got = append(s.got, enqueued{k, p})
	s.mu.Unlock()
}

func (s *sink) take() []enqueued {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.got
	s.got = nil
	return got
}

func nn(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }

func TestInformerSourceEvents(t *testing.T) {
	h := &fakeHost{}
	owner := ByControllerOwner[cm](schema.GroupKind{Group: "apps", Kind: "Deployment"})
	src := newInformerSource(h, owner, []Predicate[cm]{GenerationChanged[cm]()})
	if src.HasSynced() {
		t.Error("HasSynced before Start")
	}
	var s sink
	stop, err := src.Start(s.enqueue)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Start(s.enqueue); err == nil {
		t.Error("second Start succeeded")
	}

	d1 := ownedBy("apps/v1", "Deployment", "d1", true)
	d2 := ownedBy("apps/v1", "Deployment", "d2", true)
	a1 := configMap("ns", "a", d1)
	steps := []struct {
		name string
		do   func()
		want []enqueued
	}{
		{"initial list at background priority", func() { h.handler.OnAdd(a1, true) }, []enqueued{{nn("ns", "d1"), Background}}},
		{"live create at live priority", func() { h.handler.OnAdd(configMap("ns", "b", d2), false) }, []enqueued{{nn("ns", "d2"), Live}}},
		{"unowned object maps to nothing", func() { h.handler.OnAdd(configMap("ns", "c"), false) }, nil},
		{"update filtered by the predicate", func() {
			h.handler.OnUpdate(a1, configMap("ns", "a", d1, func(c *corev1.ConfigMap) { c.ResourceVersion = "2" }))
		}, nil},
		{"owner change reaches old and new owner", func() {
			h.handler.OnUpdate(a1, configMap("ns", "a", d2, func(c *corev1.ConfigMap) { c.Generation = 2 }))
		}, []enqueued{{nn("ns", "d1"), Live}, {nn("ns", "d2"), Live}}},
		{"an update within one owner enqueues it once", func() {
			h.handler.OnUpdate(a1, configMap("ns", "a", d1, func(c *corev1.ConfigMap) { c.Generation = 3 }))
		}, []enqueued{{nn("ns", "d1"), Live}}},
		{"informer resync at background, unfiltered", func() { h.handler.OnUpdate(a1, a1) }, []enqueued{{nn("ns", "d1"), Background}}},
		{"delete seen late still maps", func() {
			h.handler.OnDelete(informer.Deleted[cm]{Key: "ns/a", Obj: a1, FinalStateUnknown: true})
		}, []enqueued{{nn("ns", "d1"), Live}}},
	}
	for _, st := range steps {
		st.do()
		if diff := cmp.Diff(st.want, s.take(), cmp.AllowUnexported(enqueued{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, diff)
		}
	}
	if src.HasSynced() {
		t.Error("HasSynced before the informer handler synced")
	}
	h.synced.Store(true)
	if !src.HasSynced() {
		t.Error("HasSynced false after the handler synced")
	}
	h.objs = []cm{a1, configMap("ns", "x"), configMap("ns", "y", d2)}
	if diff := cmp.Diff([]types.NamespacedName{nn("ns", "d1"), nn("ns", "d2")}, src.AppendKeys(nil)); diff != "" {
		t.Errorf("AppendKeys (-want +got):\n%s", diff)
	}
	stop()
	if !h.removed.Load() {
		t.Error("stop did not remove the handler")
	}
}

func TestInformerSourceStartError(t *testing.T) {
	h := &fakeHost{err: informer.ErrStopped}
	src := newInformerSource(h, ByObject[cm](), nil)
	_, err := src.Start(func(types.NamespacedName, Priority) {})
	if !errors.Is(err, informer.ErrStopped) {
		t.Errorf("Start = %v, want it to wrap informer.ErrStopped", err)
	}
}
