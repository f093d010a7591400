package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kstreaming "k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// The wire benchmarks put both informers behind an httptest server that answers
// a LIST of the namespace "ns" with one pre-encoded page (protobuf or JSON) and
// the first watch with a pre-encoded stream of events, later watches with an
// idle stream. ctrlkit reads through reflector.FromREST on the clientset's
// core/v1 REST client, client-go through the same clientset's typed client.
// Both lists are paginated LISTs (no streaming list). One op is one informer
// started until its one handler has seen the list and every event.

type wireShape struct {
	list, events int
	dataBytes    int  // size of each object's data
	managed      bool // objects carry managedFields; both sides strip them
}

func wireConfigMap(i, rv int, sh wireShape) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "cm-" + strconv.Itoa(i), ResourceVersion: strconv.Itoa(rv),
			UID:    "7d3c4a5e-0b1f-4c2d-9e8f-1a2b3c4d5e6f",
			Labels: map[string]string{"app": "app-" + strconv.Itoa(i%7), "tier": "backend"},
		},
		Data: map[string]string{"n": strconv.Itoa(rv)},
	}
	if sh.dataBytes > 0 {
		cm.Data["blob"] = strings.Repeat("abcdefghij", sh.dataBytes/10)
	}
	if sh.managed {
		for j := range 4 {
			cm.ManagedFields = append(cm.ManagedFields, metav1.ManagedFieldsEntry{
				Manager: "manager-" + strconv.Itoa(j), Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1",
				Time: &metav1.Time{Time: time.Unix(1700000000, 0)}, FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:n":{},"f:blob":{}},"f:metadata":{"f:labels":{"f:app":{},"f:tier":{}}}}`)},
			})
		}
	}
	return cm
}

func wireEncode(mediaType string, obj runtime.Object) []byte {
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
	b, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion), obj)
	if err != nil {
		panic(err)
	}
	return b
}

func wireFrames(mediaType string, events []watch.Event) []byte {
	var buf bytes.Buffer
	info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
	enc := kstreaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(&buf), info.StreamSerializer.Serializer)
	for _, e := range events {
		ev := &metav1.WatchEvent{Type: string(e.Type), Object: runtime.RawExtension{Raw: wireEncode(mediaType, e.Object)}}
		if err := enc.Encode(ev); err != nil {
			panic(err)
		}
	}
	return buf.Bytes()
}

// wireBodies encodes the list and the event stream of a shape.
func wireBodies(mediaType string, sh wireShape) (list, stream []byte) {
	l := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(sh.list + 1)}}
	for i := range sh.list {
		l.Items = append(l.Items, *wireConfigMap(i, i+1, sh))
	}
	keys := max(sh.list, 1)
	evs := make([]watch.Event, sh.events)
	for i := range evs {
		evs[i] = watch.Event{Type: watch.Modified, Object: wireConfigMap(i%keys, sh.list+2+i, sh)}
		if sh.list == 0 {
			evs[i] = watch.Event{Type: watch.Added, Object: wireConfigMap(i, 2+i, sh)}
		}
	}
	return wireEncode(mediaType, l), wireFrames(mediaType, evs)
}

// wireServer serves the bodies; the first watch request gets the stream.
func wireServer(mediaType string, list, stream []byte) (*httptest.Server, *atomic.Int64) {
	var watches atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", mediaType)
		if r.URL.Query().Get("watch") != "true" {
			w.Write(list)
			return
		}
		w.WriteHeader(http.StatusOK)
		if watches.Add(1) == 1 {
			w.Write(stream)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	return srv, &watches
}

type wireCount struct {
	n, target int64
	done      chan struct{}
}

func (c *wireCount) call() {
	if atomic.AddInt64(&c.n, 1) == c.target {
		close(c.done)
	}
}

type cgNoWatchList struct{ cache.ListerWatcher }

func (cgNoWatchList) IsWatchListSemanticsUnSupported() bool { return true }

func wireClient(b *testing.B, url, mediaType string) *kubernetes.Clientset {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: url, QPS: -1, ContentConfig: rest.ContentConfig{ContentType: mediaType}})
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

func wireRunCtrlkit(b *testing.B, cs *kubernetes.Clientset, sh wireShape, c *wireCount) func() {
	cfg := informer.Config[*corev1.ConfigMap]{Reflector: reflector.Config[*corev1.ConfigMap]{WatchList: reflector.WatchListOff}}
	if sh.managed {
		cfg.Transform = reflector.StripManagedFields[*corev1.ConfigMap]
	}
	inf := informer.New(reflector.FromREST[*corev1.ConfigMap](cs.CoreV1().RESTClient(), "configmaps", "ns"), cfg)
	if _, err := inf.AddHandler(informer.HandlerFuncs[*corev1.ConfigMap]{
		AddFunc:    func(*corev1.ConfigMap, bool) { c.call() },
		UpdateFunc: func(_, _ *corev1.ConfigMap) { c.call() },
		DeleteFunc: func(informer.Deleted[*corev1.ConfigMap]) { c.call() },
	}, informer.HandlerOptions{BufferLimit: 1 << 40}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

func wireRunClientgo(b *testing.B, cs *kubernetes.Clientset, sh wireShape, c *wireCount) func() {
	// The typed client, as client-go users write it.
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cs.CoreV1().ConfigMaps("ns").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().ConfigMaps("ns").Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(cgNoWatchList{lw}, &corev1.ConfigMap{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if sh.managed {
		if err := inf.SetTransform(func(o any) (any, error) {
			if m, ok := o.(metav1.Object); ok {
				m.SetManagedFields(nil)
			}
			return o, nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.call() },
		UpdateFunc: func(_, _ any) { c.call() },
		DeleteFunc: func(any) { c.call() },
	}); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { inf.Run(stop); close(done) }()
	return func() { close(stop); <-done }
}

var wireImpls = []struct {
	name string
	run  func(*testing.B, *kubernetes.Clientset, wireShape, *wireCount) func()
}{
	{"ctrlkit", wireRunCtrlkit},
	{"client-go", wireRunClientgo},
}

var wireMedia = []struct{ name, mediaType string }{
	{"proto", runtime.ContentTypeProtobuf},
	{"json", runtime.ContentTypeJSON},
}

func wireBench(b *testing.B, shapes []struct {
	name string
	sh   wireShape
}) {
	for _, s := range shapes {
		for _, m := range wireMedia {
			var once sync.Once
			var list, stream []byte
			for _, impl := range wireImpls {
				b.Run(fmt.Sprintf("%s/%s/impl=%s", s.name, m.name, impl.name), func(b *testing.B) {
					once.Do(func() { list, stream = wireBodies(m.mediaType, s.sh) })
					b.ReportAllocs()
					for b.Loop() {
						// Each sync starts from a heap handed back to the operating
						// system, as a new process's is: each side pays for the pages
						// its own peak touches, not for those the side before it left
						// (ctrlkit runs first in every process).
						b.StopTimer()
						debug.FreeOSMemory()
						srv, _ := wireServer(m.mediaType, list, stream)
						cs := wireClient(b, srv.URL, m.mediaType)
						b.StartTimer()
						c := &wireCount{target: int64(s.sh.list + s.sh.events), done: make(chan struct{})}
						stop := impl.run(b, cs, s.sh, c)
						select {
						case <-c.done:
						case <-time.After(2 * time.Minute):
							b.Fatalf("%d of %d calls", atomic.LoadInt64(&c.n), c.target)
						}
						b.StopTimer()
						stop()
						srv.CloseClientConnections()
						srv.Close()
						b.StartTimer()
					}
					b.ReportMetric(float64(len(list)+len(stream))/1e6, "wire-MB")
				})
			}
		}
	}
}

// BenchmarkWireSync: a list of small, 100 KB and 1 MB ConfigMaps, with and
// without managedFields (stripped by a Transform on both sides).
func BenchmarkWireSync(b *testing.B) {
	wireBench(b, []struct {
		name string
		sh   wireShape
	}{
		{"small-1k", wireShape{list: 1000}},
		{"small-10k", wireShape{list: 10000}},
		{"managed-1k", wireShape{list: 1000, managed: true}},
		{"managed-10k", wireShape{list: 10000, managed: true}},
		{"100KB-20", wireShape{list: 20, dataBytes: 100_000}},
		{"100KB-200", wireShape{list: 200, dataBytes: 100_000}},
		{"1MB-5", wireShape{list: 5, dataBytes: 1_000_000}},
		{"1MB-50", wireShape{list: 50, dataBytes: 1_000_000}},
	})
}

// BenchmarkWireWatch: a stream of events after a list of 100 keys (Modified),
// of small and 100 KB ConfigMaps, with and without managedFields.
func BenchmarkWireWatch(b *testing.B) {
	wireBench(b, []struct {
		name string
		sh   wireShape
	}{
		{"small-10k", wireShape{list: 100, events: 10000}},
		{"small-100k", wireShape{list: 100, events: 100000}},
		{"managed-10k", wireShape{list: 100, events: 10000, managed: true}},
		{"managed-100k", wireShape{list: 100, events: 100000, managed: true}},
		{"100KB-100", wireShape{list: 100, events: 100, dataBytes: 100_000}},
		{"100KB-1000", wireShape{list: 100, events: 1000, dataBytes: 100_000}},
	})
}
