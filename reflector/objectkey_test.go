package reflector

import (
	"bytes"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

// TestReadObjectKey: the key of an object answer is read from JSON and from
// protobuf; a Status answer is named as such; garbage is not an object.
func TestReadObjectKey(t *testing.T) {
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", ResourceVersion: "42", Labels: map[string]string{"a": "b"}},
		Spec:       corev1.PodSpec{NodeName: "n"},
	}
	js, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var pb bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(pod, &pb); err != nil {
		t.Fatal(err)
	}
	st, _ := json.Marshal(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess})
	want := ObjectKey{Kind: "Pod", Namespace: "ns", Name: "p", ResourceVersion: "42"}
	for name, body := range map[string][]byte{"json": js, "protobuf": pb.Bytes()} {
		if k, ok := ReadObjectKey(body); !ok || k != want {
			t.Errorf("%s: %+v, %v; want %+v", name, k, ok, want)
		}
	}
	if k, ok := ReadObjectKey(st); !ok || k.Kind != "Status" || k.ResourceVersion != "" {
		t.Errorf("status: %+v, %v", k, ok)
	}
	for _, bad := range [][]byte{nil, []byte("not json"), []byte("k8s\x00\xff\xff"), pb.Bytes()[:10]} {
		if k, ok := ReadObjectKey(bad); ok && k.ResourceVersion != "" {
			t.Errorf("%q read as %+v", bad, k)
		}
	}
	var _ runtime.Object = pod
}

func FuzzReadObjectKey(f *testing.F) {
	f.Add([]byte(`{"kind":"Pod","metadata":{"resourceVersion":"1"}}`))
	f.Add([]byte("k8s\x00\x0a\x04\x0a\x02v1"))
	f.Fuzz(func(t *testing.T, b []byte) { ReadObjectKey(b) })
}
