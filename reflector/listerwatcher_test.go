package reflector

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/rest"
)

// stubClient is a TypedClient returning a fixed list and recording options.
type stubClient[T Object, L runtime.Object] struct {
	list L
	err  error
	opts []metav1.ListOptions
}

func (s *stubClient[T, L]) Get(context.Context, string, metav1.GetOptions) (T, error) {
	panic("Get is only there for type inference")
}

func (s *stubClient[T, L]) List(_ context.Context, opts metav1.ListOptions) (L, error) {
	s.opts = append(s.opts, opts)
	return s.list, s.err
}

func (s *stubClient[T, L]) Watch(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	s.opts = append(s.opts, opts)
	return watch.NewEmptyWatch(), nil
}

func TestFromTypedPointsIntoTheList(t *testing.T) {
	remaining := int64(40)
	list := &corev1.ConfigMapList{
		ListMeta: metav1.ListMeta{ResourceVersion: "12", Continue: "next", RemainingItemCount: &remaining},
		Items:    []corev1.ConfigMap{*cm("ns", "a"), *cm("ns", "b")},
	}
	c := &stubClient[*corev1.ConfigMap, *corev1.ConfigMapList]{list: list}
	lw := FromTyped(c) // T, E and L inferred from the client
	opts := metav1.ListOptions{ResourceVersion: "0", Limit: 2, LabelSelector: "x=y"}
	items, lm, err := lw.List(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[0] != &list.Items[0] || items[1] != &list.Items[1] {
		t.Errorf("items are not pointers into the list's array")
	}
	if diff := cmp.Diff(list.ListMeta, lm); diff != "" {
		t.Errorf("list meta (-want +got):\n%s", diff)
	}
	if _, err := lw.Watch(t.Context(), opts); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]metav1.ListOptions{opts, opts}, c.opts); diff != "" {
		t.Errorf("options passed on (-want +got):\n%s", diff)
	}

	c.list, c.err = nil, errBoom
	if _, _, err := lw.List(t.Context(), opts); err != errBoom {
		t.Errorf("List error = %v, want boom", err)
	}
	c.err = nil
	if _, _, err := lw.List(t.Context(), opts); err != errNilList {
		t.Errorf("List of a nil list = %v, want errNilList", err)
	}
}

func TestFromTypedFallsBackToExtractList(t *testing.T) {
	// A list type whose Items are not []ConfigMap.
	list := &metav1.List{
		ListMeta: metav1.ListMeta{ResourceVersion: "5"},
		Items:    []runtime.RawExtension{{Object: cm("ns", "a")}, {Object: cm("ns", "b")}},
	}
	c := &stubClient[*corev1.ConfigMap, *metav1.List]{list: list}
	lw := FromTyped(c)
	items, lm, err := lw.List(t.Context(), metav1.ListOptions{})
	if err != nil || len(items) != 2 || items[1].Name != "b" || lm.ResourceVersion != "5" {
		t.Errorf("List = %v, %+v, %v", items, lm, err)
	}
	list.Items = append(list.Items, runtime.RawExtension{Object: &corev1.Secret{}})
	if _, _, err := lw.List(t.Context(), metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "holds a *v1.Secret") {
		t.Errorf("List with a foreign item = %v", err)
	}
}

// TestFromTypedWithFakeClientset runs a reflector over client-go's fake
// clientset, whose objects carry no resourceVersion.
func TestFromTypedWithFakeClientset(t *testing.T) {
	bubble(t, func(t *testing.T) {
		client := fake.NewClientset(cm("ns", "a"), cm("ns", "b"), cm("other", "c"))
		st := newMemStore[*corev1.ConfigMap]()
		r := New(FromTyped(client.CoreV1().ConfigMaps("ns")), st, Config[*corev1.ConfigMap]{WatchList: WatchListOff})
		start(t, r)
		synctest.Wait()
		if _, err := client.CoreV1().ConfigMaps("ns").Create(t.Context(), cm("ns", "d"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if diff := cmp.Diff([]string{"ns/a@", "ns/b@", "ns/d@"}, st.Contents()); diff != "" {
			t.Errorf("store (-want +got):\n%s", diff)
		}
		if h := r.Health(); h.State != StateWatching || h.Stats.Events != 1 {
			t.Errorf("health = %+v", h)
		}
	})
}

func TestFromDynamic(t *testing.T) {
	bubble(t, func(t *testing.T) {
		gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
		widget := func(name string) *unstructured.Unstructured {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("example.com/v1")
			u.SetKind("Widget")
			u.SetNamespace("ns")
			u.SetName(name)
			return u
		}
		client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{gvr: "WidgetList"}, widget("a"))
		st := newMemStore[*unstructured.Unstructured]()
		r := New(FromDynamic(client.Resource(gvr).Namespace("ns")), st, Config[*unstructured.Unstructured]{WatchList: WatchListOff})
		start(t, r)
		synctest.Wait()
		if _, err := client.Resource(gvr).Namespace("ns").Create(t.Context(), widget("b"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if diff := cmp.Diff([]string{"ns/a@", "ns/b@"}, st.Contents()); diff != "" {
			t.Errorf("store (-want +got):\n%s", diff)
		}
	})
}

func TestFromMetadata(t *testing.T) {
	bubble(t, func(t *testing.T) {
		gvr := corev1.SchemeGroupVersion.WithResource("configmaps")
		pom := func(name string) *metav1.PartialObjectMetadata {
			return &metav1.PartialObjectMetadata{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			}
		}
		scheme := metadatafake.NewTestScheme()
		if err := metav1.AddMetaToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		client := metadatafake.NewSimpleMetadataClient(scheme, pom("a"), pom("b"))
		st := newMemStore[*metav1.PartialObjectMetadata]()
		r := New(FromMetadata(client.Resource(gvr).Namespace("ns")), st, Config[*metav1.PartialObjectMetadata]{WatchList: WatchListOff})
		start(t, r)
		synctest.Wait()
		if diff := cmp.Diff([]string{"ns/a@", "ns/b@"}, st.Contents()); diff != "" {
			t.Errorf("store (-want +got):\n%s", diff)
		}
		if h := r.Health(); !h.Synced {
			t.Errorf("health = %+v", h)
		}
	})
}

func TestFuncs(t *testing.T) {
	var got []string
	lw := Funcs[configMap]{
		ListFunc: func(_ context.Context, o metav1.ListOptions) ([]configMap, metav1.ListMeta, error) {
			got = append(got, "list "+o.ResourceVersion)
			return nil, metav1.ListMeta{ResourceVersion: "1"}, nil
		},
		WatchFunc: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
			got = append(got, "watch "+o.ResourceVersion)
			return watch.NewEmptyWatch(), nil
		},
	}
	lw.List(t.Context(), metav1.ListOptions{ResourceVersion: "0"})
	lw.Watch(t.Context(), metav1.ListOptions{ResourceVersion: "1"})
	if diff := cmp.Diff([]string{"list 0", "watch 1"}, got); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	var empty Funcs[configMap]
	if _, _, err := empty.List(t.Context(), metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "ListFunc is nil") {
		t.Errorf("List with no ListFunc = %v", err)
	}
	if _, err := empty.Watch(t.Context(), metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "WatchFunc is nil") {
		t.Errorf("Watch with no WatchFunc = %v", err)
	}
}

func TestWithProtobuf(t *testing.T) {
	in := &rest.Config{Host: "https://example", ContentConfig: rest.ContentConfig{ContentType: "application/json"}}
	out := WithProtobuf(in)
	if out == in || in.ContentType != "application/json" || in.AcceptContentTypes != "" {
		t.Errorf("the input config was changed: %+v", in.ContentConfig)
	}
	if out.ContentType != "application/vnd.kubernetes.protobuf" ||
		out.AcceptContentTypes != "application/vnd.kubernetes.protobuf,application/json" || out.Host != in.Host {
		t.Errorf("WithProtobuf = %+v", out.ContentConfig)
	}
}
