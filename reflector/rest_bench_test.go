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
