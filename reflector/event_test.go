package reflector

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
)

func TestDecode(t *testing.T) {
	obj := cm("ns", "a")
	obj.ResourceVersion = "7"
	end := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	unstructuredEnd := &unstructured.Unstructured{}
	unstructuredEnd.SetResourceVersion("10")
	unstructuredEnd.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	for _, tc := range []struct {
		in   watch.Event
		want event[configMap]
	}{
		{watch.Event{Type: watch.Added, Object: obj}, added[configMap]{obj, "7"}},
		{watch.Event{Type: watch.Modified, Object: obj}, modified[configMap]{obj, "7"}},
		{watch.Event{Type: watch.Deleted, Object: obj}, deleted[configMap]{obj, "7"}},
		{watch.Event{Type: watch.Bookmark, Object: obj}, bookmark{rv: "7"}},
		{watch.Event{Type: watch.Bookmark, Object: end}, bookmark{rv: "9", initialEventsEnd: true}},
		// A bookmark's object need not be of type T.
		{watch.Event{Type: watch.Bookmark, Object: unstructuredEnd}, bookmark{rv: "10", initialEventsEnd: true}},
	} {
		got, err := decode[configMap](tc.in, nil)
		if err != nil || got != tc.want {
			t.Errorf("decode(%s) = %#v, %v; want %#v", tc.in.Type, got, err, tc.want)
		}
	}
}

func TestDecodeTransformKeepsServerResourceVersion(t *testing.T) {
	obj := cm("ns", "a")
	obj.ResourceVersion = "7"
	got, err := decode(watch.Event{Type: watch.Added, Object: obj}, func(c configMap) (configMap, error) {
		out := c.DeepCopy()
		out.ResourceVersion = ""
		out.Labels = map[string]string{"t": "1"}
		return out, nil
	})
	a, ok := got.(added[configMap])
	if err != nil || !ok || a.rv != "7" || a.obj.Labels["t"] != "1" || a.obj == obj {
		t.Errorf("decode = %#v, %v", got, err)
	}
	_, err = decode(watch.Event{Type: watch.Deleted, Object: obj}, func(configMap) (configMap, error) { return nil, errBoom })
	if !errors.Is(err, errBoom) || !strings.Contains(err.Error(), "ns/a") {
		t.Errorf("transform error = %v", err)
	}
}

func TestObjectKey(t *testing.T) {
	if got := objectKey(cm("ns", "a")); got != "ns/a" {
		t.Errorf("namespaced key = %q", got)
	}
	if got := objectKey(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}); got != "kube-system" {
		t.Errorf("cluster-scoped key = %q", got)
	}
}

// FuzzInitialEvents checks the streaming buffer against a map: whatever the
// sequence of adds, updates and deletes, the buffer read with later entries
// winning holds exactly the model's objects, and once indexed it holds no
// duplicates and its index is exact.
func FuzzInitialEvents(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 1, 2, 1, 0, 3})
	f.Add([]byte{0, 0, 0, 0, 2, 0, 0, 0})
	f.Add([]byte{2, 5, 1, 5, 0, 5, 0, 5})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var b initialEvents[configMap]
		model := map[string]string{}
		for i := 0; i+1 < len(ops); i += 2 {
			name := "o" + strconv.Itoa(int(ops[i+1]%8))
			obj := cm("ns", name)
			obj.ResourceVersion = strconv.Itoa(i)
			switch ops[i] % 3 {
			case 0:
				b.add(obj)
				model["ns/"+name] = obj.ResourceVersion
			case 1:
				b.set(obj)
				model["ns/"+name] = obj.ResourceVersion
			case 2:
				b.remove(obj)
				delete(model, "ns/"+name)
			}
			got := map[string]string{}
			for _, o := range b.items {
				got[objectKey(o)] = o.ResourceVersion
			}
			if diff := cmp.Diff(model, got); diff != "" {
				t.Fatalf("after op %d (-model +buffer):\n%s", i/2, diff)
			}
			if b.index != nil {
				if len(b.index) != len(b.items) {
					t.Fatalf("index has %d keys for %d items", len(b.index), len(b.items))
				}
				for k, j := range b.index {
					if objectKey(b.items[j]) != k {
						t.Fatalf("index[%s] = %d holds %s", k, j, objectKey(b.items[j]))
					}
				}
			}
			for _, o := range b.items[len(b.items):cap(b.items)] {
				if o != nil {
					t.Fatalf("a removed item is still referenced past the end")
				}
			}
		}
	})
}

// scriptedLW serves lists from a server but answers watches with the
// given events, then leaves the watch open.
type scriptedLW struct {
	ListerWatcher[configMap]
	events []watch.Event
}

func (s scriptedLW) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w := watch.NewRaceFreeFake()
	for _, e := range s.events {
		w.Action(e.Type, e.Object)
	}
	return w, nil
}

func TestStreamingHandlesChangesBeforeItsEnd(t *testing.T) {
	bubble(t, func(t *testing.T) {
		at := func(c *corev1.ConfigMap, rv string) *corev1.ConfigMap { c.ResourceVersion = rv; return c }
		end := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
		lw := scriptedLW{events: []watch.Event{
			{Type: watch.Added, Object: at(cm("ns", "a"), "1")},
			{Type: watch.Added, Object: at(cm("ns", "b"), "2")},
			{Type: watch.Bookmark, Object: at(&corev1.ConfigMap{}, "3")}, // a plain bookmark changes nothing
			{Type: watch.Modified, Object: at(cm("ns", "a"), "4")},
			{Type: watch.Added, Object: at(cm("ns", "c"), "5")},
			{Type: watch.Deleted, Object: at(cm("ns", "b"), "6")},
			{Type: watch.Bookmark, Object: end},
			{Type: watch.Modified, Object: at(cm("ns", "c"), "10")},
		}}
		st := newMemStore[configMap]()
		r := New[configMap](lw, st, Config[configMap]{})
		start(t, r)
		synctest.Wait()
		want := []storeCall{{op: "replace", rv: "9", size: 2}, {op: "update", key: "ns/c", rv: "10"}}
		if diff := cmp.Diff(want, st.Calls(), cmp.AllowUnexported(storeCall{})); diff != "" {
			t.Errorf("store calls (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"ns/a@4", "ns/c@10"}, st.Contents()); diff != "" {
			t.Errorf("store (-want +got):\n%s", diff)
		}
		if h := r.Health(); h.LastResourceVersion != "10" || h.Stats.StreamingLists != 1 {
			t.Errorf("health = %+v", h)
		}
	})
}
