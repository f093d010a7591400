package reflector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kstreaming "k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// apiServer serves a reflectortest.Server over HTTP the way kube-apiserver
// does, encoding with apimachinery's own serializers (not with this
// package's reader): lists as one body, watches as a stream of framed
// metav1.WatchEvents whose objects are encoded bodies, errors as Status
// bodies with their HTTP code.
type apiServer struct {
	s         *reflectortest.Server[*corev1.ConfigMap]
	mediaType string // runtime.ContentTypeProtobuf or runtime.ContentTypeJSON
}

// serveAPI starts an HTTP server for s and returns a REST client of core/v1
// pointed at it. The server stops at the end of the test.
func serveAPI(t *testing.T, s *reflectortest.Server[*corev1.ConfigMap], mediaType string) rest.Interface {
	t.Helper()
	srv := httptest.NewServer(&apiServer{s: s, mediaType: mediaType})
	t.Cleanup(srv.Close)
	return restClient(t, srv.URL)
}

func restClient(t *testing.T, url string) rest.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: url, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c.CoreV1().RESTClient()
}

func serializerFor(mediaType string) runtime.SerializerInfo {
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		panic("no serializer for " + mediaType)
	}
	return info
}

// encodeObject encodes obj as the API server does, with its kind set.
func encodeObject(mediaType string, obj runtime.Object) []byte {
	enc := scheme.Codecs.EncoderForVersion(serializerFor(mediaType).Serializer, corev1.SchemeGroupVersion)
	b, err := runtime.Encode(enc, obj)
	if err != nil {
		panic(err)
	}
	return b
}

// encodeFrames encodes watch events as a watch response body.
func encodeFrames(mediaType string, events ...watch.Event) []byte {
	var buf bytes.Buffer
	info := serializerFor(mediaType)
	enc := kstreaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(&buf), info.StreamSerializer.Serializer)
	for _, e := range events {
		ev := &metav1.WatchEvent{Type: string(e.Type), Object: runtime.RawExtension{Raw: encodeObject(mediaType, e.Object)}}
		if err := enc.Encode(ev); err != nil {
			panic(err)
		}
	}
	return buf.Bytes()
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var opts metav1.ListOptions
	if err := scheme.ParameterCodec.DecodeParameters(r.URL.Query(), corev1.SchemeGroupVersion, &opts); err != nil {
		a.status(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	if !opts.Watch {
		items, lm, err := a.s.List(r.Context(), opts)
		if err != nil {
			a.status(w, err)
			return
		}
		list := &corev1.ConfigMapList{ListMeta: lm}
		for _, o := range items {
			list.Items = append(list.Items, *o)
		}
		w.Header().Set("Content-Type", a.mediaType)
		w.Write(encodeObject(a.mediaType, list))
		return
	}
	wi, err := a.s.Watch(r.Context(), opts)
	if err != nil {
		a.status(w, err)
		return
	}
	defer wi.Stop()
	w.Header().Set("Content-Type", a.mediaType)
	w.WriteHeader(http.StatusOK)
	flush := func() { w.(http.Flusher).Flush() }
	flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case e, ok := <-wi.ResultChan():
			if !ok {
				return
			}
			if _, err := w.Write(encodeFrames(a.mediaType, e)); err != nil {
				return
			}
			flush()
		}
	}
}

func (a *apiServer) status(w http.ResponseWriter, err error) {
	var s apierrors.APIStatus
	if !errors.As(err, &s) {
		s = apierrors.NewInternalError(err)
	}
	st := s.Status()
	w.Header().Set("Content-Type", a.mediaType)
	w.WriteHeader(int(st.Code))
	w.Write(encodeObject(a.mediaType, &st))
}

// keyStore is a Store and ReuseKeyStore keeping objects by key; changed is
// signalled after every call.
type keyStore struct {
	mu       sync.Mutex
	objs     map[string]*corev1.ConfigMap
	replaces int
	changed  chan struct{}
}

func newKeyStore() *keyStore {
	return &keyStore{objs: map[string]*corev1.ConfigMap{}, changed: make(chan struct{}, 1)}
}

func (s *keyStore) do(f func()) error {
	s.mu.Lock()
	f()
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return nil
}

func (s *keyStore) Add(o *corev1.ConfigMap) error    { return s.do(func() { s.objs[objectKey(o)] = o }) }
func (s *keyStore) Update(o *corev1.ConfigMap) error { return s.Add(o) }
func (s *keyStore) Delete(o *corev1.ConfigMap) error {
	return s.do(func() { delete(s.objs, objectKey(o)) })
}
func (s *keyStore) Replace(objs []*corev1.ConfigMap, _ string) error {
	return s.do(func() {
		s.replaces++
		s.objs = make(map[string]*corev1.ConfigMap, len(objs))
		for _, o := range objs {
			s.objs[objectKey(o)] = o
		}
	})
}

func (s *keyStore) ReuseKey(namespace, name, rv string) (*corev1.ConfigMap, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[namespace+"/"+name]
	if !ok || o.ResourceVersion != rv {
		return nil, false
	}
	return o, true
}

func (s *keyStore) snapshot() (map[string]*corev1.ConfigMap, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*corev1.ConfigMap, len(s.objs))
	for k, o := range s.objs {
		out[k] = o
	}
	return out, s.replaces
}

// waitFor waits until ok holds for the store's contents, for at most 30s.
func (s *keyStore) waitFor(t *testing.T, what string, ok func(objs map[string]*corev1.ConfigMap, replaces int) bool) {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		if ok(s.snapshot()) {
			return
		}
		select {
		case <-s.changed:
		case <-deadline.C:
			objs, replaces := s.snapshot()
			t.Fatalf("%s: not reached within 30s; the store holds %d objects after %d replaces", what, len(objs), replaces)
		}
	}
}

// marked is what the tests' transform does to an object.
func marked(o *corev1.ConfigMap) *corev1.ConfigMap {
	o = o.DeepCopy()
	if o.Annotations == nil {
		o.Annotations = map[string]string{}
	}
	o.Annotations["transformed"] = "yes"
	return o
}

// countingTransform marks objects in place and counts its calls.
func countingTransform(n *atomic.Int64) func(*corev1.ConfigMap) (*corev1.ConfigMap, error) {
	return func(o *corev1.ConfigMap) (*corev1.ConfigMap, error) {
		n.Add(1)
		if o.Annotations == nil {
			o.Annotations = map[string]string{}
		}
		o.Annotations["transformed"] = "yes"
		return o, nil
	}
}

// serverMarked returns the server's objects by key, as the transform marks
// them.
func serverMarked(s *reflectortest.Server[*corev1.ConfigMap]) map[string]*corev1.ConfigMap {
	out := map[string]*corev1.ConfigMap{}
	for _, o := range s.Items() {
		out[objectKey(o)] = marked(o)
	}
	return out
}

var restModes = []struct {
	name string
	mode WatchListMode
}{
	{"streaming", WatchListOn},
	{"paginated", WatchListOff},
}

// TestFromRESTSyncsAndFollows: through FromREST, in protobuf and in JSON,
// by streaming list and by paginated LIST, the store ends up with exactly
// the server's objects (compared field by field), transformed, and then
// follows creates, updates and deletes.
func TestFromRESTSyncsAndFollows(t *testing.T) {
	for _, mt := range []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
		for _, m := range restModes {
			t.Run(mt+"/"+m.name, func(t *testing.T) {
				s := newServer(t, reflectortest.Config{WatchList: true, PaginateAtZero: true}, 1203)
				lw := FromREST[*corev1.ConfigMap](serveAPI(t, s, mt), "configmaps", "ns")
				st := newKeyStore()
				var transforms atomic.Int64
				r := New(lw, st, Config[*corev1.ConfigMap]{WatchList: m.mode, Transform: countingTransform(&transforms)})
				start(t, r)
				want := serverMarked(s)
				st.waitFor(t, "sync", func(objs map[string]*corev1.ConfigMap, _ int) bool { return cmp.Equal(want, objs) })

				mustCreate(t, s, cm("ns", "new"))
				up := s.Items()[7].DeepCopy()
				up.Data = map[string]string{"k": "v"}
				if _, err := s.Update(up); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Delete("ns", "cm-3"); err != nil {
					t.Fatal(err)
				}
				want = serverMarked(s)
				st.waitFor(t, "watch", func(objs map[string]*corev1.ConfigMap, _ int) bool { return cmp.Equal(want, objs) })
				if got := transforms.Load(); got != 1203+3 {
					t.Errorf("transform called %d times, want %d", got, 1203+3)
				}
				h := r.Health()
				if h.Stats.ListedObjects != 1203 || h.Stats.ListedFromStore != 0 {
					t.Errorf("Stats = %+v, want 1203 objects listed, none from the store", h.Stats)
				}
				if m.mode == WatchListOn && h.Stats.StreamingLists != 1 || m.mode == WatchListOff && h.Stats.Lists != 1 {
					t.Errorf("Stats = %+v, want one list of mode %v", h.Stats, m.mode)
				}
			})
		}
	}
}

// TestFromRESTRelistSkipsKnownObjects: a list through FromREST, into a
// store that holds some of the objects at the listed resourceVersion,
// decodes and transforms only the others, and lists the store's own
// instances for the known ones. First a new reflector over a store filled by
// an earlier one, after changes made while none ran; then a relist forced
// by 410 Gone, where every object is known.
func TestFromRESTRelistSkipsKnownObjects(t *testing.T) {
	for _, m := range restModes {
		t.Run(m.name, func(t *testing.T) {
			const n = 1100
			s := newServer(t, reflectortest.Config{WatchList: true, PaginateAtZero: true}, n)
			lw := FromREST[*corev1.ConfigMap](serveAPI(t, s, runtime.ContentTypeProtobuf), "configmaps", "ns")
			st := newKeyStore()
			var transforms atomic.Int64
			cfg := Config[*corev1.ConfigMap]{WatchList: m.mode, Transform: countingTransform(&transforms)}
			first := start(t, New(lw, st, cfg))
			want := serverMarked(s)
			st.waitFor(t, "first sync", func(objs map[string]*corev1.ConfigMap, _ int) bool { return cmp.Equal(want, objs) })
			if err := first.stop(); err != nil {
				t.Fatal(err)
			}
			before, _ := st.snapshot()

			// While no reflector runs: 5 updates, 2 deletes, 3 creates.
			for i := range 5 {
				o := s.Items()[100+i].DeepCopy()
				o.Data = map[string]string{"changed": "yes"}
				if _, err := s.Update(o); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range []string{"cm-1", "cm-2"} {
				if _, err := s.Delete("ns", name); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 3 {
				mustCreate(t, s, cm("ns", "late-"+strconv.Itoa(i)))
			}
			transforms.Store(0)
			r := New(lw, st, cfg)
			start(t, r)
			want = serverMarked(s)
			st.waitFor(t, "second sync", func(objs map[string]*corev1.ConfigMap, replaces int) bool {
				return replaces == 2 && cmp.Equal(want, objs)
			})
			after, _ := st.snapshot()
			same := 0
			for k, o := range after {
				if before[k] == o {
					same++
				}
			}
			if same != n-7 {
				t.Errorf("%d objects are the store's earlier instances, want the %d unchanged ones", same, n-7)
			}
			if got := transforms.Load(); got != 8 {
				t.Errorf("transform called %d times, want 8 (the changed and created objects)", got)
			}
			h := healthy(t, r, func(h Health) bool { return h.Stats.ListedObjects == n+1 })
			if h.Stats.ListedFromStore != n-7 {
				t.Errorf("ListedFromStore = %d, want %d", h.Stats.ListedFromStore, n-7)
			}

			// A relist forced by 410: nothing to decode.
			s.Compact()
			s.BreakWatches(apierrors.NewResourceExpired("too old resource version"))
			st.waitFor(t, "relist", func(_ map[string]*corev1.ConfigMap, replaces int) bool { return replaces == 3 })
			h = healthy(t, r, func(h Health) bool { return h.Stats.ListedObjects == 2*(n+1) })
			if h.Stats.ListedFromStore != n-7+n+1 || h.Stats.Expired == 0 {
				t.Errorf("after a relist of unchanged objects, Stats = %+v, want ListedFromStore %d and an expiry", h.Stats, n-7+n+1)
			}
			if got := transforms.Load(); got != 8 {
				t.Errorf("transform called %d times in all, want 8: the relist transformed objects", got)
			}
		})
	}
}

// healthy polls r's health until ok holds: Stats are published just after
// the store call that a test waits for.
func healthy[T Object](t *testing.T, r *Reflector[T], ok func(Health) bool) Health {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		h := r.Health()
		if ok(h) || time.Now().After(deadline) {
			return h
		}
		<-tick.C
	}
}

// TestFromRESTWithoutReuseDecodesAll: with a store that is not a
// ReuseKeyStore, FromREST decodes everything.
func TestFromRESTWithoutReuseDecodesAll(t *testing.T) {
	s := newServer(t, reflectortest.Config{WatchList: true}, 10)
	lw := FromREST[*corev1.ConfigMap](serveAPI(t, s, runtime.ContentTypeProtobuf), "configmaps", "ns")
	items, lm, err := lw.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 10 || lm.ResourceVersion != s.ResourceVersion() {
		t.Fatalf("List = %d items at %q, want 10 at %q", len(items), lm.ResourceVersion, s.ResourceVersion())
	}
	if diff := cmp.Diff(s.Items(), items); diff != "" {
		t.Errorf("List (-server +got):\n%s", diff)
	}
}

// TestFromRESTPaginationAndSelectors: limit, continue, remainingItemCount
// and selectors travel both ways.
func TestFromRESTPaginationAndSelectors(t *testing.T) {
	s := reflectortest.NewServer[*corev1.ConfigMap](reflectortest.Config{PaginateAtZero: true})
	for i := range 30 {
		mustCreate(t, s, cm("ns", "cm-"+strconv.Itoa(i), "even", strconv.FormatBool(i%2 == 0)))
	}
	lw := FromREST[*corev1.ConfigMap](serveAPI(t, s, runtime.ContentTypeProtobuf), "configmaps", "ns")
	opts := metav1.ListOptions{Limit: 4, LabelSelector: "even=true", ResourceVersion: "0"}
	items, lm, err := lw.List(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 4 || lm.Continue == "" || lm.RemainingItemCount == nil || *lm.RemainingItemCount != 11 {
		t.Fatalf("first page: %d items, continue %q, remaining %v; want 4, a token, 11", len(items), lm.Continue, lm.RemainingItemCount)
	}
	n := len(items)
	for lm.Continue != "" {
		opts = metav1.ListOptions{Limit: 4, LabelSelector: "even=true", Continue: lm.Continue}
		items, lm, err = lw.List(t.Context(), opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range items {
			if o.Labels["even"] != "true" {
				t.Errorf("selector not applied: %s", o.Name)
			}
		}
		n += len(items)
	}
	if n != 15 {
		t.Errorf("listed %d objects, want 15", n)
	}
	got := s.Requests()
	if len(got) != 4 || got[0].Options.LabelSelector != "even=true" || got[0].Options.Limit != 4 {
		t.Errorf("server saw %+v", got)
	}
}

// rawServer answers every request with the status code and body given.
func rawServer(t *testing.T, code int, mediaType string, body []byte) rest.Interface {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", mediaType)
		w.WriteHeader(code)
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return restClient(t, srv.URL)
}

// watchAll opens a watch on c and returns all its events.
func watchAll(t *testing.T, c rest.Interface) ([]watch.Event, error) {
	t.Helper()
	w, err := FromREST[*corev1.ConfigMap](c, "configmaps", "ns").Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	var out []watch.Event
	for e := range w.ResultChan() {
		out = append(out, e)
	}
	return out, nil
}

// frame prefixes b with its length.
func frame(b []byte) []byte {
	return append([]byte{byte(len(b) >> 24), byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))}, b...)
}

// TestFromRESTBadAnswers: malformed or unexpected answers are errors that
// say what is wrong; error answers keep their API status.
func TestFromRESTBadAnswers(t *testing.T) {
	pb := runtime.ContentTypeProtobuf
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", ResourceVersion: "3"}}
	goodCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", ResourceVersion: "4"}}
	t.Run("list", func(t *testing.T) {
		for _, tc := range []struct {
			name, mediaType string
			code            int
			body            []byte
			want            string
			is              func(error) bool
		}{
			{"garbage", pb, 200, []byte("k8s\x00\xff\xff"), "malformed protobuf", nil},
			// A list's answer is read as a stream, its type told by its first bytes.
			{"no magic", pb, 200, []byte("hello"), `unexpected content type: the answer is not protobuf or JSON (it starts with "hell")`, nil},
			{"json after white space", runtime.ContentTypeJSON, 200, append([]byte("\n\n\n\n\n\n"), encodeObject(runtime.ContentTypeJSON, &corev1.SecretList{})...), `"SecretList", want a ConfigMapList`, nil},
			{"cut short", pb, 200, encodeObject(pb, &corev1.ConfigMapList{Items: []corev1.ConfigMap{*goodCM}})[:30], "malformed protobuf: truncated message", nil},
			{"wrong kind", pb, 200, encodeObject(pb, &corev1.SecretList{Items: []corev1.Secret{*secret}}), `"SecretList", want a ConfigMapList`, nil},
			{"wrong kind json", runtime.ContentTypeJSON, 200, encodeObject(runtime.ContentTypeJSON, &corev1.SecretList{}), `"SecretList", want a ConfigMapList`, nil},
			{"html", "text/html", 200, []byte("<html>"), "unexpected content type", nil},
			{"forbidden", pb, 403, encodeObject(pb, &apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no")).ErrStatus), "forbidden", apierrors.IsForbidden},
			{"gone", pb, 410, encodeObject(pb, &apierrors.NewResourceExpired("too old").ErrStatus), "too old", apierrors.IsResourceExpired},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := rawServer(t, tc.code, tc.mediaType, tc.body)
				_, _, err := FromREST[*corev1.ConfigMap](c, "configmaps", "ns").List(t.Context(), metav1.ListOptions{})
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("List error = %v, want one containing %q", err, tc.want)
				}
				if tc.is != nil && !tc.is(err) {
					t.Errorf("List error %v lost its API status", err)
				}
			})
		}
	})
	t.Run("watch", func(t *testing.T) {
		good := encodeFrames(pb, watch.Event{Type: watch.Added, Object: goodCM})
		for _, tc := range []struct {
			name string
			body []byte
			want string // in the Error event that ends the stream
		}{
			{"garbage frame", append(good, frame([]byte{0xff, 0xff, 0xff})...), "malformed protobuf"},
			{"huge frame", append(good, 0x7f, 0xff, 0xff, 0xff), "exceeds the limit"},
			{"wrong kind", append(good, encodeFrames(pb, watch.Event{Type: watch.Added, Object: secret})...), `carries a "Secret", want a ConfigMap`},
			{"unknown type", append(good, encodeFrames(pb, watch.Event{Type: "JUMPED", Object: goodCM})...), `unknown watch event type "JUMPED"`},
			{"no magic", append(good, frame(mustMarshal(&metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: []byte("xx")}}))...), "malformed protobuf"},
			{"bad object", append(good, encodeFrames(pb, watch.Event{Type: watch.Added, Object: goodCM})[:4+2]...), ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				events, err := watchAll(t, rawServer(t, 200, pb, tc.body))
				if err != nil {
					t.Fatal(err)
				}
				if len(events) == 0 || events[0].Type != watch.Added || cmp.Diff(goodCM, events[0].Object) != "" {
					t.Fatalf("first event = %+v, want the good ConfigMap", events)
				}
				last := events[len(events)-1]
				if tc.want == "" {
					// A stream cut inside a frame just ends, as a broken connection does.
					if len(events) != 1 {
						t.Fatalf("events = %+v, want only the good one", events)
					}
					return
				}
				if len(events) != 2 || last.Type != watch.Error {
					t.Fatalf("events = %+v, want the good one and an error", events)
				}
				err = apierrors.FromObject(last.Object)
				if !strings.Contains(err.Error(), tc.want) || !apierrors.IsInternalError(err) {
					t.Errorf("error event = %v, want an internal error containing %q", err, tc.want)
				}
			})
		}
	})
	t.Run("watch error event", func(t *testing.T) {
		gone := apierrors.NewResourceExpired("too old resource version")
		events, err := watchAll(t, rawServer(t, 200, pb, encodeFrames(pb, watch.Event{Type: watch.Error, Object: &gone.ErrStatus})))
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != 1 || events[0].Type != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(events[0].Object)) {
			t.Fatalf("events = %+v, want one 410 error", events)
		}
	})
	t.Run("watch refused", func(t *testing.T) {
		st := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no watch for you"))
		_, err := watchAll(t, rawServer(t, 403, pb, encodeObject(pb, &st.ErrStatus)))
		if !apierrors.IsForbidden(err) {
			t.Fatalf("Watch error = %v, want Forbidden", err)
		}
	})
	t.Run("json watch", func(t *testing.T) {
		js := runtime.ContentTypeJSON
		body := encodeFrames(js, watch.Event{Type: watch.Added, Object: goodCM}, watch.Event{Type: watch.Deleted, Object: goodCM})
		events, err := watchAll(t, rawServer(t, 200, js, append(body, "{not json"...)))
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != 3 || events[0].Type != watch.Added || events[1].Type != watch.Deleted || events[2].Type != watch.Error {
			t.Fatalf("events = %+v, want added, deleted, error", events)
		}
		if diff := cmp.Diff(goodCM, events[1].Object); diff != "" {
			t.Errorf("deleted object (-want +got):\n%s", diff)
		}
	})
}

func mustMarshal(e *metav1.WatchEvent) []byte {
	b, err := e.Marshal()
	if err != nil {
		panic(err)
	}
	return b
}

// TestFromRESTStopEndsTheWatch: Stop ends the stream's goroutine even
// while the server stays silent (goleak checks it is gone).
func TestFromRESTStopEndsTheWatch(t *testing.T) {
	s := newServer(t, reflectortest.Config{}, 0)
	w, err := FromREST[*corev1.ConfigMap](serveAPI(t, s, runtime.ContentTypeProtobuf), "configmaps", "ns").Watch(context.Background(), metav1.ListOptions{ResourceVersion: s.ResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	w.Stop()
	for range w.ResultChan() {
	}
}

// readKeyCases are ConfigMaps whose key readKey must find as Unmarshal does.
func readKeyCases() [][]byte {
	var out [][]byte
	for _, c := range []*corev1.ConfigMap{
		{},
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", ResourceVersion: "123", Labels: map[string]string{"x": "y"}, UID: "u"}, Data: map[string]string{"k": "v"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "c", ResourceVersion: "9", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}, BinaryData: map[string][]byte{"b": {0, 1}}},
	} {
		b, err := c.Marshal()
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	// Metadata twice: protobuf merges them; readKey must not guess.
	out = append(out, append(append([]byte{}, out[1]...), out[2]...))
	return out
}

// TestReadKey: readKey finds what a full decode finds.
func TestReadKey(t *testing.T) {
	for i, b := range readKeyCases() {
		k, ok, err := readKey(b)
		var c corev1.ConfigMap
		if err := c.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		switch {
		case err != nil:
			t.Errorf("case %d: readKey error %v", i, err)
		case i == 4:
			if ok {
				t.Errorf("case %d: readKey found %q/%q@%q, want no key", i, k.namespace, k.name, k.resourceVersion)
			}
		case !ok || string(k.namespace) != c.Namespace || string(k.name) != c.Name || string(k.resourceVersion) != c.ResourceVersion:
			t.Errorf("case %d: readKey = %q/%q@%q ok=%v, want %q/%q@%q", i, k.namespace, k.name, k.resourceVersion, ok, c.Namespace, c.Name, c.ResourceVersion)
		}
	}
}

// FuzzReadKey: on any input readKey returns, never panics, and whenever it
// finds a key in a message that decodes, the key is the decoded one.
func FuzzReadKey(f *testing.F) {
	for _, b := range readKeyCases() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		k, ok, err := readKey(b)
		if err != nil || !ok {
			return
		}
		var c corev1.ConfigMap
		if c.Unmarshal(b) != nil {
			return
		}
		if string(k.namespace) != c.Namespace || string(k.name) != c.Name || string(k.resourceVersion) != c.ResourceVersion {
			t.Errorf("readKey = %q/%q@%q, Unmarshal = %q/%q@%q", k.namespace, k.name, k.resourceVersion, c.Namespace, c.Name, c.ResourceVersion)
		}
	})
}

// FuzzWatchStream: any bytes as a watch body (protobuf or JSON) end the
// stream with at most one Error event, never a panic or a hang. Before it
// come events that keep the reader's promises:
//   - a decoded ConfigMap, never the lookup's instance, in an Added,
//     Modified, Deleted or Bookmark event;
//   - the lookup's own instance, as a storedObject, in an Added or Modified
//     event, and only until a Bookmark ends the initial events;
//   - an undecodable object, which the reflector refuses by its key, in an
//     Added, Modified or Deleted event, with a name and the decoding error.
//
// A watch that batches events, as the reflector's own does, hands over the
// same events in the same order, in eventBatches that hold no Error event
// and, during the initial events, Added events only.
func FuzzWatchStream(f *testing.F) {
	pb := runtime.ContentTypeProtobuf
	known := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "known", ResourceVersion: "5"}}
	endInitial := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	f.Add(encodeFrames(pb,
		watch.Event{Type: watch.Added, Object: known},
		watch.Event{Type: watch.Added, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other", ResourceVersion: "6"}, Data: map[string]string{"a": "b"}}},
		watch.Event{Type: watch.Bookmark, Object: endInitial},
		watch.Event{Type: watch.Modified, Object: known},
		watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("gone").ErrStatus},
	))
	f.Add([]byte{0, 0, 0, 2, 0x0a, 0x00})
	f.Add([]byte("{\"type\":\"ADDED\",\"object\":{}}"))
	f.Add([]byte(`{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"namespace":"ns","name":"known","resourceVersion":"5"}}}
{"type":"MODIFIED","object":{"kind":"ConfigMap","metadata":{"name":"bad","resourceVersion":"8"},"data":{"a":1}}}
{"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}
{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"namespace":"ns","name":"known","resourceVersion":"5"}}}
{"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{"name":"bad","resourceVersion":"10"},"data":{"a":1}}}`))
	lw := FromREST[*corev1.ConfigMap](fakeREST{}, "configmaps", "ns").(*restLW[*corev1.ConfigMap, corev1.ConfigMap])
	f.Fuzz(func(t *testing.T, b []byte) {
		plain := watchEvents(t, lw, b, known, false)
		batched := watchEvents(t, lw, b, known, true)
		if diff := cmp.Diff(plain, batched); diff != "" {
			t.Fatalf("batched events differ from the plain ones (-plain +batched):\n%s", diff)
		}
	})
}

// watchEvents runs a restWatch of lw on body, with a lookup that knows the
// object known, checks the events against FuzzWatchStream's promises, and
// returns them as strings to compare.
func watchEvents(t *testing.T, lw *restLW[*corev1.ConfigMap, corev1.ConfigMap], body []byte, known *corev1.ConfigMap, batching bool) []string {
	w := &restWatch[*corev1.ConfigMap, corev1.ConfigMap]{
		lw:       lw,
		body:     io.NopCloser(bytes.NewReader(body)),
		result:   make(chan watch.Event),
		done:     make(chan struct{}),
		batching: batching,
		initial:  batching, // as a streaming list's watch: batches Added events only until the bookmark
		keys: keyReader[*corev1.ConfigMap]{lookup: func(ns, name, rv string) (*corev1.ConfigMap, bool) {
			return known, ns == "ns" && name == "known" && rv == "5"
		}},
	}
	if batching {
		w.free = make(chan []watch.Event, 2)
	}
	go w.run()
	var out []string
	errs, initial := 0, true
	check := func(e watch.Event, inBatch bool) {
		if inBatch && initial && e.Type != watch.Added {
			t.Fatalf("%s event batched during the initial events", e.Type)
		}
		if errs > 0 {
			t.Fatalf("event %+v after an error", e)
		}
		switch o := e.Object.(type) {
		case *metav1.Status:
			if e.Type != watch.Error || o == nil || inBatch {
				t.Fatalf("%s event with a Status (in a batch: %v)", e.Type, inBatch)
			}
			errs++
			out = append(out, fmt.Sprintf("%s %s", e.Type, o.Message))
			return
		case *storedObject[*corev1.ConfigMap]:
			if o.obj != known {
				t.Fatalf("stored object %p is not the lookup's", o.obj)
			}
			if e.Type != watch.Added && e.Type != watch.Modified {
				t.Fatalf("stored object in a %s event", e.Type)
			}
			if !initial {
				t.Fatalf("stored object after the initial events ended")
			}
			out = append(out, fmt.Sprintf("%s stored", e.Type))
		case *corev1.ConfigMap:
			if o == nil || o == known {
				t.Fatalf("decoded object %p", o)
			}
			switch e.Type {
			case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
			default:
				t.Fatalf("decoded object in a %s event", e.Type)
			}
			if e.Type == watch.Bookmark && o.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
				initial = false
			}
			out = append(out, fmt.Sprintf("%s %s/%s@%s", e.Type, o.Namespace, o.Name, o.ResourceVersion))
		case *undecodable:
			switch e.Type {
			case watch.Added, watch.Modified, watch.Deleted:
			default:
				t.Fatalf("undecodable object in a %s event", e.Type)
			}
			if o.name == "" || o.err == nil {
				t.Fatalf("undecodable object without a name or an error: %+v", o)
			}
			out = append(out, fmt.Sprintf("%s undecodable %s@%s", e.Type, o.key(), o.rv))
		default:
			t.Fatalf("event object %T", e.Object)
		}
	}
	for e := range w.ResultChan() {
		b, ok := e.Object.(*eventBatch)
		if !ok {
			check(e, false)
			continue
		}
		if !batching || len(b.events) == 0 {
			t.Fatalf("batch of %d events from a watch that batches: %v", len(b.events), batching)
		}
		for _, be := range b.events {
			check(be, true)
		}
		b.release()
	}
	return out
}

// FuzzListBody: any bytes as a protobuf list body give items or an error,
// never a panic; items the lookup knows are its own instance.
func FuzzListBody(f *testing.F) {
	pb := runtime.ContentTypeProtobuf
	f.Add(encodeObject(pb, &corev1.ConfigMapList{
		ListMeta: metav1.ListMeta{ResourceVersion: "9", Continue: "token"},
		Items: []corev1.ConfigMap{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "known", ResourceVersion: "5"}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other", ResourceVersion: "6"}, Data: map[string]string{"a": "b"}},
		},
	}))
	f.Add([]byte("k8s\x00"))
	known := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "known", ResourceVersion: "5"}}
	lookup := func(ns, name, rv string) (*corev1.ConfigMap, bool) {
		return known, ns == "ns" && name == "known" && rv == "5"
	}
	lw := FromREST[*corev1.ConfigMap](fakeREST{}, "configmaps", "ns").(*restLW[*corev1.ConfigMap, corev1.ConfigMap])
	f.Fuzz(func(t *testing.T, b []byte) {
		items, fromStore, refused, _, err := lw.protoList(b, lookup)
		if err != nil {
			return
		}
		for i, o := range items {
			if o == nil || fromStore[i] != (o == known) {
				t.Fatalf("item %d = %p, from the store %v", i, o, fromStore[i])
			}
		}
		for _, r := range refused {
			if r == nil || r.Key == "" || r.Err == nil {
				t.Fatalf("refused item without a key or a cause: %+v", r)
			}
		}
	})
}

// fakeREST is a rest.Interface for tests that make no request.
type fakeREST struct{ rest.Interface }

func ExampleFromREST() {
	// An API server with three ConfigMaps (in tests, an in-memory one).
	s := reflectortest.NewServer[*corev1.ConfigMap](reflectortest.Config{})
	for _, name := range []string{"a", "b", "c"} {
		s.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
	}
	srv := httptest.NewServer(&apiServer{s: s, mediaType: runtime.ContentTypeProtobuf})
	defer srv.Close()

	client, err := kubernetes.NewForConfig(WithProtobuf(&rest.Config{Host: srv.URL}))
	if err != nil {
		panic(err)
	}
	lw := FromREST[*corev1.ConfigMap](client.CoreV1().RESTClient(), "configmaps", "default")
	items, lm, err := lw.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		panic(err)
	}
	for _, o := range items {
		fmt.Println(o.Namespace, o.Name, o.ResourceVersion)
	}
	fmt.Println("list at", lm.ResourceVersion)
	// Output:
	// default a 1
	// default b 2
	// default c 3
	// list at 3
}

// TestFromRESTBadArguments: a nil client or an empty resource is reported by
// every List and Watch, not a panic.
func TestFromRESTBadArguments(t *testing.T) {
	client, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	for name, lw := range map[string]ListerWatcher[*corev1.ConfigMap]{
		"nil client":     FromREST[*corev1.ConfigMap](nil, "configmaps", ""),
		"empty resource": FromREST[*corev1.ConfigMap](client.CoreV1().RESTClient(), "", ""),
	} {
		if _, _, err := lw.List(context.Background(), metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "FromREST was given") {
			t.Errorf("%s: List error %v, want one naming the bad argument", name, err)
		}
		if w, err := lw.Watch(context.Background(), metav1.ListOptions{}); err == nil || w != nil || !strings.Contains(err.Error(), "FromREST was given") {
			t.Errorf("%s: Watch = %v, %v, want an error naming the bad argument", name, w, err)
		}
	}
}

// TestFromRESTStreamBatchesInitialEvents: the reflector's own streaming watch
// (watchReusing) hands over Added events of the initial events that were read
// together as *eventBatch, in the server's order, and the events of every type
// that follow, batched or not, in order; Watch never batches.
func TestFromRESTStreamBatchesInitialEvents(t *testing.T) {
	const n = 600
	s := newServer(t, reflectortest.Config{WatchList: true}, n)
	lw := FromREST[*corev1.ConfigMap](serveAPI(t, s, runtime.ContentTypeProtobuf), "configmaps", "ns")
	yes := true
	opts := metav1.ListOptions{
		SendInitialEvents:    &yes,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks:  true,
		ResourceVersion:      s.ResourceVersion(),
	}
	// read takes the events of w up to the end of the initial events, after
	// letting the watch's goroutine run ahead, and returns the names of the
	// objects and the number of batches.
	read := func(w watch.Interface) (names []string, batches int) {
		t.Helper()
		time.Sleep(100 * time.Millisecond) // the server writes the whole list meanwhile
		for e := range w.ResultChan() {
			switch o := e.Object.(type) {
			case *eventBatch:
				batches++
				if len(o.events) == 0 || len(o.events) > batchMax {
					t.Fatalf("a batch of %d events", len(o.events))
				}
				for _, be := range o.events {
					c, ok := be.Object.(*corev1.ConfigMap)
					if be.Type != watch.Added || !ok {
						t.Fatalf("batched event %s of a %T", be.Type, be.Object)
					}
					names = append(names, c.Name)
				}
				o.release()
			case *corev1.ConfigMap:
				if e.Type == watch.Bookmark {
					if o.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
						return names, batches
					}
					continue
				}
				names = append(names, o.Name)
			default:
				t.Fatalf("event %s of a %T", e.Type, e.Object)
			}
		}
		t.Fatal("the watch ended before the end of the initial events")
		return nil, 0
	}
	plain, err := lw.Watch(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop()
	want, batches := read(plain)
	if batches != 0 || len(want) != n {
		t.Fatalf("Watch: %d objects in %d batches, want %d in none", len(want), batches, n)
	}
	own, err := lw.(reusingLister[*corev1.ConfigMap]).watchReusing(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Stop()
	got, batches := read(own)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("batched initial events differ from Watch's (-want +got):\n%s", diff)
	}
	if batches == 0 || batches > n/2 {
		t.Errorf("%d objects in %d batches, want batches of several", n, batches)
	}
	// After them, events of every type may come batched, in order.
	after := mustCreate(t, s, cm("ns", "after"))
	after.Data = map[string]string{"k": "v"}
	if _, err := s.Update(after); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete("ns", want[0]); err != nil {
		t.Fatal(err)
	}
	var seen []string
	timeout := time.After(10 * time.Second)
	for len(seen) < 3 {
		var e watch.Event
		select {
		case e = <-own.ResultChan():
		case <-timeout:
			t.Fatalf("after the initial events, only %v", seen)
		}
		events := []watch.Event{e}
		if b, ok := e.Object.(*eventBatch); ok {
			events = b.events
		}
		for _, e := range events {
			if c, ok := e.Object.(*corev1.ConfigMap); ok && e.Type != watch.Bookmark {
				seen = append(seen, string(e.Type)+" "+c.Name)
			}
		}
	}
	if diff := cmp.Diff([]string{"ADDED after", "MODIFIED after", "DELETED " + want[0]}, seen); diff != "" {
		t.Errorf("events after the initial ones (-want +got):\n%s", diff)
	}
}

// batchCountingLW is FromREST's ListerWatcher, whose own watches count the
// events they hand over in batches.
type batchCountingLW struct {
	*restLW[*corev1.ConfigMap, corev1.ConfigMap]
	batched atomic.Int64
}

func (l *batchCountingLW) watchReusing(ctx context.Context, opts metav1.ListOptions, lookup lookupFunc[*corev1.ConfigMap]) (watch.Interface, error) {
	w, err := l.restLW.watchReusing(ctx, opts, lookup)
	if err != nil {
		return nil, err
	}
	out := make(chan watch.Event)
	go func() {
		defer close(out)
		for e := range w.ResultChan() {
			if b, ok := e.Object.(*eventBatch); ok && !(opts.SendInitialEvents != nil && *opts.SendInitialEvents) {
				l.batched.Add(int64(len(b.events)))
			}
			out <- e
		}
	}()
	return &forwardedWatch{Interface: w, out: out}, nil
}

type forwardedWatch struct {
	watch.Interface
	out chan watch.Event
}

func (w *forwardedWatch) ResultChan() <-chan watch.Event { return w.out }

// gatedStore is a keyStore whose first Update waits for gate to close.
type gatedStore struct {
	*keyStore
	gate chan struct{}
	once sync.Once
}

func (s *gatedStore) Update(o *corev1.ConfigMap) error {
	s.once.Do(func() { <-s.gate })
	return s.keyStore.Update(o)
}

// TestFromRESTWatchBatchesBursts: the events of a burst that reached the
// client while the reflector was busy come to it in batches, and the store
// follows every one, in order.
func TestFromRESTWatchBatchesBursts(t *testing.T) {
	const n, updates = 20, 400
	s := newServer(t, reflectortest.Config{}, n)
	lw := &batchCountingLW{restLW: FromREST[*corev1.ConfigMap](serveAPI(t, s, runtime.ContentTypeProtobuf), "configmaps", "ns").(*restLW[*corev1.ConfigMap, corev1.ConfigMap])}
	st := &gatedStore{keyStore: newKeyStore(), gate: make(chan struct{})}
	var transforms atomic.Int64
	r := New(lw, st, Config[*corev1.ConfigMap]{WatchList: WatchListOff, Transform: countingTransform(&transforms)})
	start(t, r)
	want := serverMarked(s)
	st.waitFor(t, "sync", func(objs map[string]*corev1.ConfigMap, _ int) bool { return cmp.Equal(want, objs) })
	// The first update's event holds the reflector in Update while the others
	// reach the client.
	for i := range updates {
		c := s.Items()[i%n].DeepCopy()
		c.Data = map[string]string{"i": strconv.Itoa(i)}
		if _, err := s.Update(c); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(t, s, cm("ns", "last"))
	if _, err := s.Delete("ns", s.Items()[0].Name); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	close(st.gate)
	want = serverMarked(s)
	st.waitFor(t, "the burst", func(objs map[string]*corev1.ConfigMap, _ int) bool { return cmp.Equal(want, objs) })
	if got := lw.batched.Load(); got < updates/2 {
		t.Errorf("%d events of the burst came batched, want most of %d", got, updates+2)
	}
	if got := r.Health().Stats.Events; got < updates+2 {
		t.Errorf("Stats.Events = %d, want at least %d", got, updates+2)
	}
}
