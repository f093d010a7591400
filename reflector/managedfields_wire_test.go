package reflector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// randomPod returns a Pod with metadata of every kind, i managedFields entries and
// a spec, so that its message has fields before and after the ObjectMeta.
func randomPod(rng *rand.Rand, entries int) *corev1.Pod {
	now := metav1.NewTime(time.Unix(1700000000+rng.Int64N(1000), 0))
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: fmt.Sprint("ns-", rng.IntN(10)), Name: fmt.Sprint("pod-", rng.Int()), UID: types.UID(fmt.Sprint("uid-", rng.Int())),
			ResourceVersion: fmt.Sprint(rng.IntN(1e6)), Generation: rng.Int64N(10), CreationTimestamp: now,
			Labels:          map[string]string{"app": fmt.Sprint("app-", rng.IntN(5))},
			Annotations:     map[string]string{"note": string(bytes.Repeat([]byte{'x'}, rng.IntN(300)))},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid"}},
			Finalizers:      []string{"example.com/f"},
		},
		Spec:   corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "img", Args: []string{"a", "b"}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"},
	}
	for j := range entries {
		p.ManagedFields = append(p.ManagedFields, metav1.ManagedFieldsEntry{
			Manager: fmt.Sprint("manager-", j), Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", Time: &now,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: fmt.Appendf(nil, `{"f:spec":{"f:containers":{}},"f:n%d":{}}`, rng.IntN(1000))},
			Subresource: []string{"", "status"}[rng.IntN(2)],
		})
	}
	return p
}

// TestWithoutManagedFields checks that a message read through withoutManagedFields
// decodes to the object without its managedFields and with everything else, that
// objects decoded one after the other from the same buffer keep their own values,
// that a message without managedFields is handed back as it is, and that malformed
// messages are handed back as they are.
func TestWithoutManagedFields(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var buf []byte
	var decoded, want []*corev1.Pod
	for i := range 200 {
		p := randomPod(rng, i%4)
		raw, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		got := withoutManagedFields(raw, &buf)
		if i%4 == 0 {
			if &got[0] != &raw[0] || len(got) != len(raw) {
				t.Fatalf("pod %d without managedFields: got a copy", i)
			}
		} else if len(got) >= len(raw) {
			t.Fatalf("pod %d: %d bytes without managedFields, %d with", i, len(got), len(raw))
		}
		var d corev1.Pod
		if err := d.Unmarshal(got); err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
		p.ManagedFields = nil
		decoded, want = append(decoded, &d), append(want, p)
	}
	for i := range want {
		if !reflect.DeepEqual(decoded[i], want[i]) {
			t.Fatalf("pod %d decoded as %+v, want %+v", i, decoded[i], want[i])
		}
	}
	p := randomPod(rng, 2)
	raw, _ := p.Marshal()
	for _, bad := range [][]byte{raw[:len(raw)/2], append([]byte{0x0f}, raw...), {0x0a, 0x7f}, {0x0a, 0x03, 0x8a, 0x01, 0x05}} {
		if got := withoutManagedFields(bad, &buf); !bytes.Equal(got, bad) {
			t.Errorf("withoutManagedFields(% x) = % x, want its input", bad, got)
		}
	}
}

// FuzzWithoutManagedFields checks that withoutManagedFields never panics, and that
// what it returns for a message that decodes is a message that decodes to the same
// object, but for managedFields.
func FuzzWithoutManagedFields(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 4 {
		raw, _ := randomPod(rng, i).Marshal()
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var buf []byte
		got := withoutManagedFields(raw, &buf)
		var whole corev1.Pod
		if whole.Unmarshal(raw) != nil {
			return
		}
		var stripped corev1.Pod
		if err := stripped.Unmarshal(got); err != nil {
			t.Fatalf("the message decodes, but not without its managedFields: %v", err)
		}
		// An ObjectMeta field after the first keeps its managedFields (the server
		// sends one only); the Transform strips them.
		whole.ManagedFields, stripped.ManagedFields = nil, nil
		if !reflect.DeepEqual(&whole, &stripped) {
			t.Fatalf("decoded without managedFields as %+v, want %+v", &stripped, &whole)
		}
	})
}

// TestJSONWithoutManagedFields checks that JSON read through
// jsonWithoutManagedFields decodes to the object without its managedFields and
// with everything else, compact or indented, with the member first, last, in the
// middle or alone; that "managedFields" elsewhere (an annotation, a label, the
// metadata of a Pod template) is kept; and that JSON without them, or not well
// formed, is handed back as it is.
func TestJSONWithoutManagedFields(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var buf []byte
	check := func(name string, raw []byte, want *corev1.Pod, cut bool) {
		t.Helper()
		got := jsonWithoutManagedFields(raw, &buf)
		if copied := &got[0] != &raw[0]; copied != cut {
			t.Errorf("%s: copied %v, want %v", name, copied, cut)
		}
		var d corev1.Pod
		if err := utiljson.Unmarshal(got, &d); err != nil {
			t.Fatalf("%s: %v in %s", name, err, got)
		}
		w := want.DeepCopy()
		w.ManagedFields = nil
		if !reflect.DeepEqual(&d, w) {
			t.Fatalf("%s: decoded as %+v, want %+v (from %s)", name, &d, w, got)
		}
	}
	for i := range 100 {
		p := randomPod(rng, i%4)
		p.Annotations["managedFields"] = `{"managedFields": [1, "}"]}`
		p.Labels["x"] = "managedFields"
		compact, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprint("compact pod ", i), compact, p, i%4 != 0)
		indented, _ := json.MarshalIndent(p, "", "  ")
		check(fmt.Sprint("indented pod ", i), indented, p, i%4 != 0)
	}
	for _, tc := range []struct {
		name, json string
		cut        bool
	}{
		{"first", `{"metadata":{"managedFields":[{"manager":"m"}],"name":"a"},"spec":{}}`, true},
		{"middle", `{"kind":"Pod", "metadata" : { "name" : "a" , "managedFields" : [ {"manager":"m\"}"} ] , "namespace":"n" } }`, true},
		{"last", `{"metadata":{"name":"a","managedFields":null}}`, true},
		{"alone", "{\n\"metadata\": {\n  \"managedFields\": []\n}\n}", true},
		{"template", `{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","env":[{"name":"metadata","value":"{\"managedFields\":1}"}]}]}}`, false},
	} {
		var want corev1.Pod
		if err := utiljson.Unmarshal([]byte(tc.json), &want); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		check(tc.name, []byte(tc.json), &want, tc.cut)
	}
	for _, bad := range []string{
		``, `[]`, `{"metadata":{"managedFields":[}]}}`, `{"metadata":{"managedFields":[1,2}`, `{"metadata":{"managedFields" [1]}}`,
		`{"metadata":{"name":"a" "managedFields":[]}}`, `{"metadata":{"managedFields":"unterminated}}`, `{"metadata":{"managedFields":}}`,
	} {
		if got := jsonWithoutManagedFields([]byte(bad), &buf); string(got) != bad {
			t.Errorf("jsonWithoutManagedFields(%s) = %s, want its input", bad, got)
		}
	}
}

// FuzzJSONWithoutManagedFields checks that jsonWithoutManagedFields never panics,
// and that what it returns for JSON that decodes is JSON that decodes to the same
// object, but for managedFields.
func FuzzJSONWithoutManagedFields(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 4 {
		raw, _ := json.Marshal(randomPod(rng, i))
		f.Add(raw)
	}
	f.Add([]byte(`{"metadata":{"name":"a","managedFields":[{"manager":"m"}]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var buf []byte
		got := jsonWithoutManagedFields(raw, &buf)
		var whole corev1.Pod
		if utiljson.Unmarshal(raw, &whole) != nil {
			return
		}
		var stripped corev1.Pod
		if err := utiljson.Unmarshal(got, &stripped); err != nil {
			t.Fatalf("the JSON decodes, but not without its managedFields: %v (%s)", err, got)
		}
		whole.ManagedFields, stripped.ManagedFields = nil, nil
		if !reflect.DeepEqual(&whole, &stripped) {
			t.Fatalf("decoded without managedFields as %+v, want %+v", &stripped, &whole)
		}
	})
}

// TestJSONListParts checks that jsonListParts finds the kind, metadata and items
// of lists as encoding/json writes them, compact and indented, that they decode
// as the whole list does, and that it declines lists it cannot read exactly
// (repeated or escaped members, trailing bytes, malformed JSON).
func TestJSONListParts(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{0, 1, 2, 17} {
		l := &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: fmt.Sprint(n), Continue: "c{]\"", RemainingItemCount: ptrTo(int64(n))}}
		for i := range n {
			l.Items = append(l.Items, *randomPod(rng, i%3))
		}
		compact, _ := json.Marshal(l)
		indented, _ := json.MarshalIndent(l, " ", "\t")
		for _, body := range [][]byte{compact, indented} {
			var whole corev1.PodList
			if err := utiljson.Unmarshal(body, &whole); err != nil {
				t.Fatal(err)
			}
			kind, meta, items, ok := jsonListParts(body)
			if !ok || string(kind) != "PodList" || len(items) != n {
				t.Fatalf("%d items: jsonListParts = %q, %d items, %v", n, kind, len(items), ok)
			}
			var lm metav1.ListMeta
			if err := utiljson.Unmarshal(meta, &lm); err != nil || !reflect.DeepEqual(lm, l.ListMeta) {
				t.Fatalf("%d items: metadata %+v (%v), want %+v", n, lm, err, l.ListMeta)
			}
			for i, raw := range items {
				var p corev1.Pod
				if err := utiljson.Unmarshal(raw, &p); err != nil || !reflect.DeepEqual(&p, &whole.Items[i]) {
					t.Fatalf("%d items: item %d decodes as %+v (%v)", n, i, &p, err)
				}
			}
		}
	}
	if kind, _, items, ok := jsonListParts([]byte(` {"kind":"PodList","items":null} `)); !ok || string(kind) != "PodList" || items != nil {
		t.Errorf("a list of null items: %q, %v, %v", kind, items, ok)
	}
	for _, bad := range []string{
		``, `[]`, `{"kind":"PodList","kind":"PodList"}`, `{"items":[],"items":[]}`, `{"metadata":{},"metadata":{}}`,
		`{"\u006bind":"PodList"}`, `{"kind":"Pod\u004cist"}`, `{"kind":"PodList"} x`, `{"kind":"PodList",}`,
		`{"items":[{"a":1},]}`, `{"items":[{"a":1}`, `{"items":{}}`, `{"kind":PodList}`, `{"items":[{]}`, `{"kind":"PodList"`,
	} {
		if _, _, _, ok := jsonListParts([]byte(bad)); ok {
			t.Errorf("jsonListParts(%s) read it, want it declined", bad)
		}
	}
}

// FuzzJSONListParts checks that jsonListParts never panics, and that when it and
// the decoding of the whole list both read a body, they agree on the kind, the
// metadata and every item.
func FuzzJSONListParts(f *testing.F) {
	rng := rand.New(rand.NewPCG(11, 12))
	for n := range 3 {
		l := &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList"}}
		for range n {
			l.Items = append(l.Items, *randomPod(rng, 1))
		}
		b, _ := json.Marshal(l)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		kind, meta, items, ok := jsonListParts(body)
		var whole struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ListMeta   `json:"metadata"`
			Items    []json.RawMessage `json:"items"`
		}
		if !ok || utiljson.Unmarshal(body, &whole) != nil {
			return
		}
		var lm metav1.ListMeta
		if meta != nil && utiljson.Unmarshal(meta, &lm) != nil {
			t.Fatalf("the list decodes, its metadata alone does not: %s", meta)
		}
		if string(kind) != whole.Kind || !reflect.DeepEqual(lm, whole.Metadata) || len(items) != len(whole.Items) {
			t.Fatalf("parts %q %+v %d items, whole %q %+v %d items", kind, lm, len(items), whole.Kind, whole.Metadata, len(whole.Items))
		}
		for i := range items {
			var a, b any
			if utiljson.Unmarshal(items[i], &a) != nil || utiljson.Unmarshal(whole.Items[i], &b) != nil || !reflect.DeepEqual(a, b) {
				t.Fatalf("item %d: %s, whole %s", i, items[i], whole.Items[i])
			}
		}
	})
}
