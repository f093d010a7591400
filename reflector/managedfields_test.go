package reflector_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ctrlkit/ctrlkit/reflector"
)

// mapStore keeps what a reflector stores, by name.
type mapStore struct {
	mu   sync.Mutex
	objs map[string]*corev1.ConfigMap
}

func (s *mapStore) put(o *corev1.ConfigMap) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objs[o.Name] = o
	return nil
}
func (s *mapStore) Add(o *corev1.ConfigMap) error    { return s.put(o) }
func (s *mapStore) Update(o *corev1.ConfigMap) error { return s.put(o) }
func (s *mapStore) Delete(o *corev1.ConfigMap) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objs, o.Name)
	return nil
}
func (s *mapStore) Replace(objs []*corev1.ConfigMap, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.objs)
	for _, o := range objs {
		s.objs[o.Name] = o
	}
	return nil
}

// badManagedFieldsConfigMap returns the protobuf message of ConfigMap ns/name at
// resourceVersion rv whose ObjectMeta holds a managedFields entry that cannot be
// decoded (a field of wire type 7).
func badManagedFieldsConfigMap(t *testing.T, name, rv string) []byte {
	t.Helper()
	whole, err := (&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}, Data: map[string]string{"k": "v"}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for b := whole; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if n < 0 || m < 0 {
			t.Fatal("cannot read the ConfigMap's own message")
		}
		if num != 1 {
			out = append(out, b[:n+m]...)
		} else {
			meta, _ := protowire.ConsumeBytes(b[n:])
			meta = protowire.AppendTag(append([]byte(nil), meta...), 17, protowire.BytesType)
			meta = protowire.AppendBytes(meta, []byte{0x07}) // tag 0, wire type 7
			out = protowire.AppendTag(out, 1, protowire.BytesType)
			out = protowire.AppendBytes(out, meta)
		}
		b = b[n+m:]
	}
	return out
}

// TestStripManagedFieldsSkipsTheirDecoding checks that a reflector over FromREST
// whose Transform is StripManagedFields does not decode managedFields at all, in
// protobuf and in JSON answers, listed or watched: an object whose managedFields
// cannot be decoded is stored (without them), with the other objects'
// managedFields gone too; with a Transform that strips them after decoding, the
// same object is refused.
func TestStripManagedFieldsSkipsTheirDecoding(t *testing.T) {
	now := metav1.NewTime(time.Unix(1700000000, 0))
	good := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", ResourceVersion: "4", Labels: map[string]string{"app": "web"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m", Operation: "Update", APIVersion: "v1", Time: &now, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{}}`)}}}},
		Data: map[string]string{"k": "v"},
	}
	l, err := (&corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}, Items: []corev1.ConfigMap{*good}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	bad := badManagedFieldsConfigMap(t, "b", "5")
	l = append(l, 2<<3|2)
	l = binary.AppendUvarint(l, uint64(len(bad)))
	l = append(l, bad...)
	u, err := (&runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"}, Raw: l}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	list := append([]byte("k8s\x00"), u...)
	// The watch from the list brings c, whose managedFields cannot be decoded either.
	ue, err := (&runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, Raw: badManagedFieldsConfigMap(t, "c", "6")}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	ev, err := (&metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: append([]byte("k8s\x00"), ue...)}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	events := append(binary.BigEndian.AppendUint32(nil, uint32(len(ev))), ev...)
	// The same in JSON: managedFields of the wrong type.
	goodJSON, err := json.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	badJSON := func(name, rv string) string {
		return `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"namespace":"ns","name":"` + name + `","resourceVersion":"` + rv + `","managedFields":7},"data":{"k":"v"}}`
	}
	jsonList := []byte(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[` + string(goodJSON) + `,` + badJSON("b", "5") + `]}`)
	jsonEvents := []byte(`{"type":"ADDED","object":` + badJSON("c", "6") + "}\n")
	t.Run("protobuf", func(t *testing.T) { testStripManagedFields(t, runtime.ContentTypeProtobuf, list, events) })
	t.Run("JSON", func(t *testing.T) { testStripManagedFields(t, runtime.ContentTypeJSON, jsonList, jsonEvents) })
}

func testStripManagedFields(t *testing.T, mediaType string, list, events []byte) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", mediaType)
		if r.URL.Query().Get("watch") != "true" {
			w.Write(list)
			return
		}
		w.WriteHeader(200)
		if r.URL.Query().Get("resourceVersion") == "5" {
			w.Write(events)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name      string
		transform func(*corev1.ConfigMap) (*corev1.ConfigMap, error)
		want      []string
	}{
		{"StripManagedFields", reflector.StripManagedFields[*corev1.ConfigMap], []string{"a", "b", "c"}},
		{"a Transform of its own", func(o *corev1.ConfigMap) (*corev1.ConfigMap, error) {
			return reflector.StripManagedFields(o)
		}, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lw := reflector.FromREST[*corev1.ConfigMap](c.CoreV1().RESTClient(), "configmaps", "ns")
			st := &mapStore{objs: map[string]*corev1.ConfigMap{}}
			var mu sync.Mutex
			var refused []string
			r := reflector.New(lw, st, reflector.Config[*corev1.ConfigMap]{
				WatchList: reflector.WatchListOff,
				Transform: tc.transform,
				OnError: func(err error) {
					var re *reflector.RefusedError
					if errors.As(err, &re) {
						mu.Lock()
						refused = append(refused, re.Key)
						mu.Unlock()
					}
				},
			})
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error)
			go func() { done <- r.Run(ctx) }()
			defer func() {
				cancel()
				<-done
			}()
			// Wait until the three objects are stored or refused.
			deadline := time.Now().Add(10 * time.Second)
			for {
				st.mu.Lock()
				mu.Lock()
				n := len(st.objs) + len(refused)
				mu.Unlock()
				if n >= 3 {
					break // st.mu stays locked for the checks below
				}
				st.mu.Unlock()
				if time.Now().After(deadline) {
					t.Fatal("the list is not stored after 10s")
				}
				time.Sleep(time.Millisecond)
			}
			defer st.mu.Unlock()
			if len(st.objs) != len(tc.want) {
				t.Fatalf("stored %d objects, want %v (refused %v)", len(st.objs), tc.want, refused)
			}
			for _, name := range tc.want {
				o := st.objs[name]
				if o == nil || o.ManagedFields != nil || o.Data["k"] != "v" || o.Namespace != "ns" {
					t.Errorf("stored %s = %+v, want it with its data and without managedFields", name, o)
				}
			}
			mu.Lock()
			nrefused := len(refused)
			mu.Unlock()
			if nrefused != 3-len(tc.want) {
				t.Errorf("refused %d objects, want %d", nrefused, 3-len(tc.want))
			}
			if a := st.objs["a"]; a != nil && a.Labels["app"] != "web" {
				t.Errorf("a's labels = %v, want app=web", a.Labels)
			}
		})
	}
}
