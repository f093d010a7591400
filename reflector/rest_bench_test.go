package reflector

import (
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// benchConfigMaps returns n small ConfigMaps of namespace ns.
func benchConfigMaps(n int) []corev1.ConfigMap {
	out := make([]corev1.ConfigMap, n)
	for i := range out {
		out[i] = corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm-" + strconv.Itoa(i), ResourceVersion: strconv.Itoa(100 + i), Labels: map[string]string{"app": "bench"}},
			Data:       map[string]string{"key": "value-" + strconv.Itoa(i)},
		}
	}
	return out
}

// BenchmarkFromRESTProtoList: FromREST decoding a protobuf page of 500
// ConfigMaps, none of them known to the store. One op is one page.
func BenchmarkFromRESTProtoList(b *testing.B) {
	body := encodeObject(runtime.ContentTypeProtobuf, &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "999"}, Items: benchConfigMaps(500)})
	lw := FromREST[*corev1.ConfigMap](fakeREST{}, "configmaps", "ns").(*restLW[*corev1.ConfigMap, corev1.ConfigMap])
	b.ReportAllocs()
	for b.Loop() {
		items, _, _, _, err := lw.protoList(body, nil)
		if err != nil || len(items) != 500 {
			b.Fatal(len(items), err)
		}
	}
}

// BenchmarkFromRESTProtoWatchFrame: FromREST decoding one protobuf watch
// frame carrying a ConfigMap. One op is one event.
func BenchmarkFromRESTProtoWatchFrame(b *testing.B) {
	cm := benchConfigMaps(1)[0]
	body := encodeFrames(runtime.ContentTypeProtobuf, watch.Event{Type: watch.Modified, Object: &cm})
	lw := FromREST[*corev1.ConfigMap](fakeREST{}, "configmaps", "ns").(*restLW[*corev1.ConfigMap, corev1.ConfigMap])
	w := &restWatch[*corev1.ConfigMap, corev1.ConfigMap]{lw: lw}
	frame := body[4:]
	b.ReportAllocs()
	for b.Loop() {
		e, err := w.decodeFrame(frame)
		if err != nil || e.Type != watch.Modified {
			b.Fatal(e, err)
		}
	}
}

// BenchmarkFromJSONList: FromJSON reading a JSON page of 500 Foos, decoding
// every one (decode) or finding every one in the store (reuse, as in a
// relist of an unchanged collection). One op is one page.
func BenchmarkFromJSONList(b *testing.B) {
	items := make([]*Foo, 500)
	stored := map[string]*Foo{}
	for i := range items {
		f := foo("ns", "foo-"+strconv.Itoa(i), "red")
		f.ResourceVersion = strconv.Itoa(100 + i)
		f.Annotations = map[string]string{"note": "value-" + strconv.Itoa(i)}
		stored[f.Name] = f
		items[i] = withKind(f)
	}
	body := mustJSON(map[string]any{"kind": "FooList", "apiVersion": fooGV.String(), "metadata": metav1.ListMeta{ResourceVersion: "999"}, "items": items})
	lookup := func(ns, name, rv string) (*Foo, bool) {
		f, ok := stored[name]
		return f, ok && f.ResourceVersion == rv
	}
	lw := FromJSON[*Foo](fakeREST{}, "foos", "ns").(*restLW[*Foo, Foo])
	for _, bc := range []struct {
		name   string
		lookup lookupFunc[*Foo]
	}{{"decode", nil}, {"reuse", lookup}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				items, _, _, _, err := lw.jsonList(body, bc.lookup)
				if err != nil || len(items) != 500 {
					b.Fatal(len(items), err)
				}
			}
		})
	}
}
