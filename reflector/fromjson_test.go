package reflector

import (
	"bytes"
	"context"
	"encoding/json"
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// Foo is a custom resource's Go type as a user writes it by hand: no
// generated code, no protobuf.
type Foo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              FooSpec   `json:"spec"`
	Status            FooStatus `json:"status,omitempty"`
}

type FooSpec struct {
	Color    string `json:"color"`
	Replicas int32  `json:"replicas"`
}

type FooStatus struct {
	Ready bool `json:"ready,omitempty"`
}

func (f *Foo) DeepCopyObject() runtime.Object {
	c := *f
	f.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// fooGV is the API group version of Foo in these tests.
var fooGV = schema.GroupVersion{Group: "example.com", Version: "v1"}

func foo(ns, name, color string) *Foo {
	return &Foo{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"color": color}}, Spec: FooSpec{Color: color, Replicas: int32(len(name))}}
}

// newFooServer returns a server holding n Foos ns/foo-0 … ns/foo-(n-1).
func newFooServer(t *testing.T, cfg reflectortest.Config, n int) *reflectortest.Server[*Foo] {
	t.Helper()
	s := reflectortest.NewServer[*Foo](cfg)
	for i := range n {
		if _, err := s.Create(foo("ns", "foo-"+strconv.Itoa(i), []string{"red", "blue"}[i%2])); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// crdServer serves a reflectortest.Server of Foos over HTTP as
// kube-apiserver serves a custom resource, at
// /apis/example.com/v1/namespaces/<ns>/foos: JSON lists of kind FooList
// whose items carry their apiVersion and kind, watches as a stream of JSON
// watch events, errors as Status bodies with their HTTP code. It encodes
// with encoding/json, not with this package's code.
type crdServer struct {
	s *reflectortest.Server[*Foo]

	mu       sync.Mutex
	requests []string // "path accept" of each request
}

// serveFoos starts an HTTP server for s and returns it with a client made
// by JSONClient. The server stops at the end of the test.
func serveFoos(t *testing.T, s *reflectortest.Server[*Foo]) (*crdServer, rest.Interface) {
	t.Helper()
	cs := &crdServer{s: s}
	srv := httptest.NewServer(cs)
	t.Cleanup(srv.Close)
	c, err := JSONClient(&rest.Config{Host: srv.URL, QPS: -1}, fooGV)
	if err != nil {
		t.Fatal(err)
	}
	return cs, c
}

// withKind returns o as the API server sends it: with its apiVersion and kind.
func withKind(o *Foo) *Foo {
	o = o.DeepCopyObject().(*Foo)
	o.APIVersion, o.Kind = fooGV.String(), "Foo"
	return o
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// fooEvent encodes one watch event as a line of a JSON watch stream.
func fooEvent(t watch.EventType, obj runtime.Object) []byte {
	switch o := obj.(type) {
	case *Foo:
		obj = withKind(o)
	case *metav1.Status:
		c := *o
		c.APIVersion, c.Kind = "v1", "Status"
		obj = &c
	}
	return append(mustJSON(metav1.WatchEvent{Type: string(t), Object: runtime.RawExtension{Raw: mustJSON(obj)}}), '\n')
}

func (a *crdServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.requests = append(a.requests, r.URL.Path+" "+r.Header.Get("Accept"))
	a.mu.Unlock()
	if r.URL.Path != "/apis/example.com/v1/namespaces/ns/foos" {
		a.status(w, apierrors.NewNotFound(schema.GroupResource{Group: fooGV.Group, Resource: "foos"}, r.URL.Path))
		return
	}
	var opts metav1.ListOptions
	if err := listParams.DecodeParameters(r.URL.Query(), paramsVersion, &opts); err != nil {
		a.status(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if !opts.Watch {
		items, lm, err := a.s.List(r.Context(), opts)
		if err != nil {
			a.status(w, err)
			return
		}
		list := struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        metav1.ListMeta `json:"metadata"`
			Items           []*Foo          `json:"items"`
		}{TypeMeta: metav1.TypeMeta{APIVersion: fooGV.String(), Kind: "FooList"}, Metadata: lm, Items: []*Foo{}}
		for _, o := range items {
			list.Items = append(list.Items, withKind(o))
		}
		w.Write(mustJSON(list))
		return
	}
	wi, err := a.s.Watch(r.Context(), opts)
	if err != nil {
		a.status(w, err)
		return
	}
	defer wi.Stop()
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case e, ok := <-wi.ResultChan():
			if !ok {
				return
			}
			if _, err := w.Write(fooEvent(e.Type, e.Object)); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}
}

func (a *crdServer) status(w http.ResponseWriter, err error) {
	var s apierrors.APIStatus
	if !errors.As(err, &s) {
		s = apierrors.NewInternalError(err)
	}
	st := s.Status()
	st.APIVersion, st.Kind = "v1", "Status"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	w.Write(mustJSON(st))
}

func (a *crdServer) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.requests...)
}

// reuseMemStore is a memStore that offers its objects for reuse
// (ReuseKeyStore).
type reuseMemStore[T Object] struct{ *memStore[T] }

func (s reuseMemStore[T]) ReuseKey(namespace, name, rv string) (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[namespace+"/"+name]
	if !ok || o.GetResourceVersion() != rv {
		var zero T
		return zero, false
	}
	return o, true
}

func (s reuseMemStore[T]) snapshot() map[string]T {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]T, len(s.objs))
	for k, o := range s.objs {
		out[k] = o
	}
	return out
}

// refusingMemStore is a memStore that is also a Refuser: Refuse drops the
// key.
type refusingMemStore[T Object] struct{ *memStore[T] }

func (s refusingMemStore[T]) Refuse(key, rv string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, storeCall{op: "refuse", key: key, rv: rv})
	delete(s.objs, key)
	return nil
}

// waitStore polls st until ok holds for its objects, for at most 30s.
func waitStore[T Object](t *testing.T, st reuseMemStore[T], what string, ok func(map[string]T) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !ok(st.snapshot()) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within 30s; the store holds %v", what, st.Contents())
		}
		<-tick.C
	}
}

// serverFoos returns the server's Foos by key, as the transform marks them.
func serverFoos(s *reflectortest.Server[*Foo]) map[string]*Foo {
	out := map[string]*Foo{}
	for _, o := range s.Items() {
		out[objectKey(o)] = markedFoo(o)
	}
	return out
}

func markedFoo(o *Foo) *Foo {
	o = o.DeepCopyObject().(*Foo)
	o.Status.Ready = true
	return o
}

// countingFooTransform marks Foos in place (Status.Ready) and counts its calls.
func countingFooTransform(n *atomic.Int64) func(*Foo) (*Foo, error) {
	return func(o *Foo) (*Foo, error) {
		n.Add(1)
		o.Status.Ready = true
		return o, nil
	}
}

// TestFromJSONSyncsAndFollows: through FromJSON over a JSONClient, by
// streaming list and by paginated LIST, the store ends up with exactly the
// server's Foos (compared field by field, TypeMeta left empty), transformed,
// then follows creates, updates and deletes; every request asks for JSON
// only, at the group's path.
func TestFromJSONSyncsAndFollows(t *testing.T) {
	for _, m := range restModes {
		t.Run(m.name, func(t *testing.T) {
			s := newFooServer(t, reflectortest.Config{WatchList: true, PaginateAtZero: true}, 1203)
			cs, c := serveFoos(t, s)
			lw := FromJSON[*Foo](c, "foos", "ns")
			st := reuseMemStore[*Foo]{newMemStore[*Foo]()}
			var transforms atomic.Int64
			r := New(lw, st, Config[*Foo]{WatchList: m.mode, Transform: countingFooTransform(&transforms)})
			start(t, r)
			want := serverFoos(s)
			waitStore(t, st, "sync", func(objs map[string]*Foo) bool { return cmp.Equal(want, objs) })

			if _, err := s.Create(foo("ns", "new", "green")); err != nil {
				t.Fatal(err)
			}
			up := s.Items()[7]
			up.Spec.Replicas = 42
			if _, err := s.Update(up); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Delete("ns", "foo-3"); err != nil {
				t.Fatal(err)
			}
			want = serverFoos(s)
			waitStore(t, st, "watch", func(objs map[string]*Foo) bool { return cmp.Equal(want, objs) })
			if got := st.snapshot()["ns/"+up.Name].Spec.Replicas; got != 42 {
				t.Errorf("updated Foo has %d replicas, want 42", got)
			}
			if got := transforms.Load(); got != 1203+3 {
				t.Errorf("transform called %d times, want %d", got, 1203+3)
			}
			h := r.Health()
			if h.Stats.ListedObjects != 1203 || h.Stats.ListedFromStore != 0 {
				t.Errorf("Stats = %+v, want 1203 objects listed, none from the store", h.Stats)
			}
			for _, req := range cs.seen() {
				if req != "/apis/example.com/v1/namespaces/ns/foos application/json" {
					t.Errorf("request %q, want the foos of ns asking for JSON only", req)
				}
			}
		})
	}
}

// TestFromJSONRelistSkipsKnownObjects covers for JSON what
// TestFromRESTRelistSkipsKnownObjects covers for protobuf: a list into a
// store that holds some Foos at the listed resourceVersion decodes and
// transforms only the others and lists the store's own instances; a relist
// forced by 410 decodes nothing.
func TestFromJSONRelistSkipsKnownObjects(t *testing.T) {
	for _, m := range restModes {
		t.Run(m.name, func(t *testing.T) {
			const n = 1100
			s := newFooServer(t, reflectortest.Config{WatchList: true, PaginateAtZero: true}, n)
			_, c := serveFoos(t, s)
			lw := FromJSON[*Foo](c, "foos", "ns")
			st := reuseMemStore[*Foo]{newMemStore[*Foo]()}
			var transforms atomic.Int64
			cfg := Config[*Foo]{WatchList: m.mode, Transform: countingFooTransform(&transforms)}
			first := start(t, New(lw, st, cfg))
			want := serverFoos(s)
			waitStore(t, st, "first sync", func(objs map[string]*Foo) bool { return cmp.Equal(want, objs) })
			if err := first.stop(); err != nil {
				t.Fatal(err)
			}
			before := st.snapshot()

			// While no reflector runs: 5 updates, 2 deletes, 3 creates.
			for i := range 5 {
				o := s.Items()[100+i]
				o.Spec.Color = "changed"
				if _, err := s.Update(o); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range []string{"foo-1", "foo-2"} {
				if _, err := s.Delete("ns", name); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 3 {
				if _, err := s.Create(foo("ns", "late-"+strconv.Itoa(i), "green")); err != nil {
					t.Fatal(err)
				}
			}
			transforms.Store(0)
			r := New(lw, st, cfg)
			start(t, r)
			want = serverFoos(s)
			waitStore(t, st, "second sync", func(objs map[string]*Foo) bool { return cmp.Equal(want, objs) })
			same := 0
			for k, o := range st.snapshot() {
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

			s.Compact()
			s.BreakWatches(apierrors.NewResourceExpired("too old resource version"))
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

// TestFromJSONPaginationAndSelectors covers for JSON what
// TestFromRESTPaginationAndSelectors covers for protobuf: limit, continue,
// remainingItemCount and selectors travel both ways.
func TestFromJSONPaginationAndSelectors(t *testing.T) {
	s := newFooServer(t, reflectortest.Config{PaginateAtZero: true}, 30)
	_, c := serveFoos(t, s)
	lw := FromJSON[*Foo](c, "foos", "ns")
	opts := metav1.ListOptions{Limit: 4, LabelSelector: "color=red", ResourceVersion: "0"}
	items, lm, err := lw.List(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 4 || lm.Continue == "" || lm.RemainingItemCount == nil || *lm.RemainingItemCount != 11 || lm.ResourceVersion != s.ResourceVersion() {
		t.Fatalf("first page: %d items, continue %q, remaining %v, rv %q; want 4, a token, 11, %q", len(items), lm.Continue, lm.RemainingItemCount, lm.ResourceVersion, s.ResourceVersion())
	}
	got := map[string]*Foo{}
	for {
		for _, o := range items {
			got[objectKey(o)] = o
		}
		if lm.Continue == "" {
			break
		}
		items, lm, err = lw.List(t.Context(), metav1.ListOptions{Limit: 4, LabelSelector: "color=red", Continue: lm.Continue})
		if err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]*Foo{}
	for _, o := range s.Items() {
		if o.Labels["color"] == "red" {
			want[objectKey(o)] = o
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("listed Foos (-server +got):\n%s", diff)
	}
	reqs := s.Requests()
	if len(reqs) != 4 || reqs[0].Options.LabelSelector != "color=red" || reqs[0].Options.Limit != 4 || reqs[1].Options.Continue == "" {
		t.Errorf("server saw %+v", reqs)
	}
}

// fooStream answers every request with the status code and JSON body given.
func fooStream(t *testing.T, code int, contentType string, body []byte) rest.Interface {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(code)
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	c, err := JSONClient(&rest.Config{Host: srv.URL, QPS: -1}, fooGV)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// watchFoos opens a watch through FromJSON on c and returns all its events.
func watchFoos(t *testing.T, c rest.Interface) ([]watch.Event, error) {
	t.Helper()
	w, err := FromJSON[*Foo](c, "foos", "ns").Watch(t.Context(), metav1.ListOptions{})
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

// TestFromJSONWatchEvents: every event type of a JSON watch stream comes
// out as the server sent it: objects decoded into Foos with TypeMeta left
// empty, a bookmark's resourceVersion, an error event's Status (keeping its
// reason, so that 410 Expired is recognised).
func TestFromJSONWatchEvents(t *testing.T) {
	a := foo("ns", "a", "red")
	a.ResourceVersion = "4"
	a2 := a.DeepCopyObject().(*Foo)
	a2.ResourceVersion, a2.Spec.Replicas = "5", 9
	bm := &Foo{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "6"}}
	gone := apierrors.NewResourceExpired("too old resource version")
	body := bytes.Join([][]byte{
		fooEvent(watch.Added, a),
		fooEvent(watch.Modified, a2),
		fooEvent(watch.Bookmark, bm),
		fooEvent(watch.Deleted, a2),
		fooEvent(watch.Error, &gone.ErrStatus),
	}, nil)
	events, err := watchFoos(t, fooStream(t, 200, "application/json", body))
	if err != nil {
		t.Fatal(err)
	}
	want := []watch.Event{
		{Type: watch.Added, Object: a},
		{Type: watch.Modified, Object: a2},
		{Type: watch.Bookmark, Object: bm},
		{Type: watch.Deleted, Object: a2},
	}
	if len(events) != 5 {
		t.Fatalf("got %d events, want 5: %+v", len(events), events)
	}
	if diff := cmp.Diff(want, events[:4]); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if events[4].Type != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(events[4].Object)) {
		t.Errorf("last event = %+v, want the 410 Expired Status", events[4])
	}
}

// TestFromJSONBadAnswers covers for JSON what TestFromRESTBadAnswers covers
// for protobuf: malformed or unexpected answers are errors that say what is
// wrong, never panics; error answers keep their API status through
// JSONClient's decoding.
func TestFromJSONBadAnswers(t *testing.T) {
	js := "application/json"
	status := func(err apierrors.APIStatus) []byte {
		st := err.Status()
		st.APIVersion, st.Kind = "v1", "Status"
		return mustJSON(st)
	}
	t.Run("list", func(t *testing.T) {
		for _, tc := range []struct {
			name, contentType string
			code              int
			body              []byte
			want              string
			is                func(error) bool
		}{
			{"garbage", js, 200, []byte(`{"kind":"FooList","items":[{`), "unexpected end of JSON input", nil},
			{"not an object", js, 200, []byte(`[1,2]`), "cannot unmarshal array", nil},
			{"wrong kind", js, 200, []byte(`{"kind":"BarList","items":[]}`), `the server sent a "BarList", want a FooList (the kind is the name of the Go type reflector.Foo)`, nil},
			{"item not an object", js, 200, []byte(`{"kind":"FooList","items":[7]}`), "item 0: cannot decode a Foo", nil},
			{"protobuf", runtime.ContentTypeProtobuf, 200, []byte("k8s\x00"), "unexpected content type", nil},
			{"forbidden", js, 403, status(apierrors.NewForbidden(schema.GroupResource{Group: "example.com", Resource: "foos"}, "", errors.New("no"))), "forbidden", apierrors.IsForbidden},
			{"expired", js, 410, status(apierrors.NewResourceExpired("too old")), "too old", apierrors.IsResourceExpired},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := fooStream(t, tc.code, tc.contentType, tc.body)
				items, _, err := FromJSON[*Foo](c, "foos", "ns").List(t.Context(), metav1.ListOptions{})
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("List = %d items, error %v; want an error containing %q", len(items), err, tc.want)
				}
				if tc.is != nil && !tc.is(err) {
					t.Errorf("List error %v lost its API status", err)
				}
			})
		}
	})
	t.Run("watch", func(t *testing.T) {
		good := foo("ns", "good", "red")
		good.ResourceVersion = "3"
		first := fooEvent(watch.Added, good)
		first = first[:len(first):len(first)] // each case appends to its own copy
		for _, tc := range []struct {
			name string
			body []byte
			want string // in the Error event that ends the stream; "" for none
		}{
			{"garbage", append(first, "{not json"...), "invalid character"},
			{"wrong json type", append(first, `{"type":7}`...), "cannot unmarshal number"},
			{"unknown type", append(first, `{"type":"JUMPED","object":{}}`...), `unknown watch event type "JUMPED"`},
			{"wrong kind unnamed", append(first, `{"type":"ADDED","object":{"kind":"Bar","metadata":{}}}`...), `the server sent a "Bar", want a Foo (the kind is the name of the Go type reflector.Foo)`},
			{"bad bookmark", append(first, `{"type":"BOOKMARK","object":{"kind":"Foo","metadata":{"name":"x","resourceVersion":7}}}`...), "cannot decode a Foo"},
			{"bad status", append(first, `{"type":"ERROR","object":{"code":"x"}}`...), "cannot decode the Status"},
			{"cut", first[:len(first)-5], ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				events, err := watchFoos(t, fooStream(t, 200, js, tc.body))
				if err != nil {
					t.Fatal(err)
				}
				if tc.want == "" {
					// A stream cut inside an event just ends, as a broken connection does.
					if len(events) != 0 {
						t.Fatalf("events = %+v, want none", events)
					}
					return
				}
				if len(events) != 2 || events[0].Type != watch.Added || cmp.Diff(good, events[0].Object) != "" || events[1].Type != watch.Error {
					t.Fatalf("events = %+v, want the good Foo and an error", events)
				}
				err = apierrors.FromObject(events[1].Object)
				if !strings.Contains(err.Error(), tc.want) || !apierrors.IsInternalError(err) || !clientSide(events[1].Object) {
					t.Errorf("error event = %v, want a client-side internal error containing %q", err, tc.want)
				}
			})
		}
	})
	t.Run("protobuf watch", func(t *testing.T) {
		events, err := watchFoos(t, fooStream(t, 200, runtime.ContentTypeProtobuf, frame([]byte{0x0a, 0})))
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != 1 || events[0].Type != watch.Error || !strings.Contains(apierrors.FromObject(events[0].Object).Error(), "the stream is not JSON") {
			t.Fatalf("events = %+v, want one error saying the stream is not JSON", events)
		}
	})
	t.Run("watch refused", func(t *testing.T) {
		_, err := watchFoos(t, fooStream(t, 403, js, status(apierrors.NewForbidden(schema.GroupResource{Resource: "foos"}, "", errors.New("no watch for you")))))
		if !apierrors.IsForbidden(err) {
			t.Fatalf("Watch error = %v, want Forbidden", err)
		}
	})
}

// TestFromJSONRefusesUndecodableObjects covers for a custom resource what
// TestFromRESTRefusesUndecodableObjects covers for ConfigMaps: a Foo that
// does not decode (replicas is not a number) but whose key can be read is
// refused alone, in a list page and in a watch stream; the rest of the
// collection is stored and the watch goes on past it.
func TestFromJSONRefusesUndecodableObjects(t *testing.T) {
	good := func(name, rv string) *Foo {
		f := foo("ns", name, "red")
		f.ResourceVersion = rv
		return f
	}
	bad := func(name, rv string) string {
		return `{"apiVersion":"example.com/v1","kind":"Foo","metadata":{"namespace":"ns","name":"` + name + `","resourceVersion":"` + rv + `"},"spec":{"replicas":"many"}}`
	}
	list := []byte(`{"kind":"FooList","apiVersion":"example.com/v1","metadata":{"resourceVersion":"5"},"items":[` +
		string(mustJSON(withKind(good("a", "4")))) + `,` + bad("b", "5") + `]}`)
	events := append([]byte(`{"type":"MODIFIED","object":`+bad("a", "6")+"}\n"), fooEvent(watch.Added, good("c", "7"))...)
	var watches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			w.Write(list)
			return
		}
		if watches.Add(1) == 1 {
			w.Write(events)
			return
		}
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // later watches stay quiet
	}))
	defer srv.Close()
	c, err := JSONClient(&rest.Config{Host: srv.URL}, fooGV)
	if err != nil {
		t.Fatal(err)
	}

	lw := FromJSON[*Foo](c, "foos", "ns")
	if _, _, err := lw.List(t.Context(), metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "ns/b") {
		t.Errorf("List alone = %v, want an error naming ns/b", err)
	}
	st := refusingMemStore[*Foo]{newMemStore[*Foo]()}
	var refusals []string
	var other []error
	var mu sync.Mutex
	onError := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		var ref *RefusedError
		if errors.As(err, &ref) {
			refusals = append(refusals, ref.Key+"@"+ref.ResourceVersion)
		} else {
			other = append(other, err)
		}
	}
	r := New(lw, st, Config[*Foo]{WatchList: WatchListOff, OnError: onError})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	h := healthy(t, r, func(h Health) bool { return h.LastResourceVersion == "7" })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h.LastResourceVersion != "7" || h.Stats.Refused != 2 || h.Stats.Failures != 0 {
		t.Errorf("health = %+v, want resourceVersion 7, 2 refused, no failure", h)
	}
	if diff := cmp.Diff([]string{"ns/c@7"}, st.Contents()); diff != "" {
		t.Errorf("store (-want +got):\n%s", diff)
	}
	var calls []string
	for _, c := range st.Calls() {
		calls = append(calls, c.String())
	}
	if diff := cmp.Diff([]string{"replace(1)@5", "refuse(ns/a)@6", "add(ns/c)@7"}, calls); diff != "" {
		t.Errorf("store calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ns/b@5", "ns/a@6"}, refusals); diff != "" || len(other) > 0 {
		t.Errorf("refusals (-want +got):\n%s\nother errors: %v", diff, other)
	}
}

// TestFromJSONWatchEndsWithItsContext: a watch whose context is done ends
// its goroutine and closes its channel without Stop, even while the server
// stays silent (goleak checks the goroutine is gone); Stop after that, and
// twice, is harmless.
func TestFromJSONWatchEndsWithItsContext(t *testing.T) {
	s := newFooServer(t, reflectortest.Config{}, 0)
	_, c := serveFoos(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := FromJSON[*Foo](c, "foos", "ns").Watch(ctx, metav1.ListOptions{ResourceVersion: s.ResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	if s.OpenWatches() != 1 {
		t.Fatalf("%d watches open on the server, want 1", s.OpenWatches())
	}
	cancel()
	for e := range w.ResultChan() {
		t.Errorf("event %+v after the context ended", e)
	}
	w.Stop()
	w.Stop()
}

// TestFromJSONBadArguments: a nil client or an empty resource is reported
// by every List and Watch, not a panic.
func TestFromJSONBadArguments(t *testing.T) {
	c, err := JSONClient(&rest.Config{Host: "http://127.0.0.1:1"}, fooGV)
	if err != nil {
		t.Fatal(err)
	}
	for name, lw := range map[string]ListerWatcher[*Foo]{
		"nil client":     FromJSON[*Foo](nil, "foos", ""),
		"empty resource": FromJSON[*Foo](c, "", ""),
	} {
		if _, _, err := lw.List(context.Background(), metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "FromJSON was given") {
			t.Errorf("%s: List error %v, want one naming the bad argument", name, err)
		}
		if w, err := lw.Watch(context.Background(), metav1.ListOptions{}); err == nil || w != nil || !strings.Contains(err.Error(), "FromJSON was given") {
			t.Errorf("%s: Watch = %v, %v, want an error naming the bad argument", name, w, err)
		}
	}
}

// TestJSONClient: the client's requests go to the core group's /api/v1 or a
// named group's /apis/<group>/<version>, ask for JSON only, and the config
// given is left as it was; a nil config or a missing version is an error.
func TestJSONClient(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" "+r.Header.Get("Accept"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"kind":"FooList","metadata":{"resourceVersion":"1"},"items":[]}`))
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeProtobuf}}
	for _, gv := range []schema.GroupVersion{{Version: "v1"}, fooGV} {
		c, err := JSONClient(cfg, gv)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := FromJSON[*Foo](c, "foos", "ns").List(t.Context(), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := FromJSON[*Foo](c, "foos", "").List(t.Context(), metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"/api/v1/namespaces/ns/foos application/json",
		"/api/v1/foos application/json",
		"/apis/example.com/v1/namespaces/ns/foos application/json",
		"/apis/example.com/v1/foos application/json",
	}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	if cfg.GroupVersion != nil || cfg.APIPath != "" || cfg.ContentType != runtime.ContentTypeProtobuf || cfg.NegotiatedSerializer != nil {
		t.Errorf("JSONClient changed its config: %+v", cfg)
	}
	if _, err := JSONClient(nil, fooGV); err == nil || !strings.Contains(err.Error(), "nil config") {
		t.Errorf("JSONClient(nil) error = %v", err)
	}
	if _, err := JSONClient(cfg, schema.GroupVersion{Group: "example.com"}); err == nil || !strings.Contains(err.Error(), "no version") {
		t.Errorf("JSONClient without a version: error = %v", err)
	}
}

// readJSONKeyCases are Foos whose key readJSONKey must find as a full
// decode does.
func readJSONKeyCases() [][]byte {
	out := [][]byte{
		[]byte(`{}`),
		[]byte(`{"metadata":{"name":"a"}}`),
		mustJSON(withKind(&Foo{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", ResourceVersion: "12", Labels: map[string]string{"x": "y"}}, Spec: FooSpec{Color: "red"}})),
		// Field names match case-sensitively, as in the full decode.
		[]byte(`{"Metadata":{"name":"wrong"},"metadata":{"Name":"wrong","name":"c","resourceVersion":"3"}}`),
		// Repeated fields: the last one wins, as in the full decode.
		[]byte(`{"metadata":{"name":"d","resourceVersion":"1"},"metadata":{"resourceVersion":"2"}}`),
		[]byte(`{"metadata":{"name":"e"},"spec":{"replicas":"many"}}`),
	}
	return out
}

// TestReadJSONKey: readJSONKey finds what a full decode finds.
func TestReadJSONKey(t *testing.T) {
	want := []string{"/@", "/a@", "ns/b@12", "/c@3", "/d@2", "/e@"}
	for i, b := range readJSONKeyCases() {
		k, ok := readJSONKey(b)
		got := k.Metadata.Namespace + "/" + k.Metadata.Name + "@" + k.Metadata.ResourceVersion
		if !ok || got != want[i] {
			t.Errorf("case %d: readJSONKey = %q, %v; want %q", i, got, ok, want[i])
		}
		var f Foo
		if utiljson.Unmarshal(b, &f) == nil {
			if dec := f.Namespace + "/" + f.Name + "@" + f.ResourceVersion; dec != got {
				t.Errorf("case %d: readJSONKey = %q, decoding finds %q", i, got, dec)
			}
		}
	}
}

// FuzzReadJSONKey: on any input readJSONKey returns, never panics, and
// whenever the object decodes, the key is the decoded one.
func FuzzReadJSONKey(f *testing.F) {
	for _, b := range readJSONKeyCases() {
		f.Add(b)
	}
	lw := FromJSON[*Foo](fakeREST{}, "foos", "ns").(*restLW[*Foo, Foo])
	f.Fuzz(func(t *testing.T, b []byte) {
		k, ok := readJSONKey(b)
		o, err := lw.decodeJSON(b, nil)
		if err != nil {
			return
		}
		if !ok || k.Metadata.Namespace != o.Namespace || k.Metadata.Name != o.Name || k.Metadata.ResourceVersion != o.ResourceVersion {
			t.Errorf("readJSONKey = %+v, %v; decoding finds %q/%q@%q", k, ok, o.Namespace, o.Name, o.ResourceVersion)
		}
	})
}

// FuzzJSONWatchStream: any bytes as a FromJSON watch body end the stream
// with at most one Error event, never a panic or a hang; the events before
// it carry decoded Foos, refusals, or, as storedObjects, the lookup's own
// instance, which is never handed over as if decoded.
func FuzzJSONWatchStream(f *testing.F) {
	known := &Foo{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "known", ResourceVersion: "5"}}
	f.Add(bytes.Join([][]byte{
		fooEvent(watch.Added, known),
		fooEvent(watch.Added, foo("ns", "other", "red")),
		fooEvent(watch.Bookmark, &Foo{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}),
		fooEvent(watch.Modified, known),
		fooEvent(watch.Error, &apierrors.NewResourceExpired("gone").ErrStatus),
	}, nil))
	f.Add([]byte(`{"type":"ADDED","object":{"metadata":{"name":"x"},"spec":7}}`))
	f.Add([]byte("k8s\x00"))
	lw := FromJSON[*Foo](fakeREST{}, "foos", "ns").(*restLW[*Foo, Foo])
	f.Fuzz(func(t *testing.T, b []byte) {
		w := &restWatch[*Foo, Foo]{
			lw:     lw,
			body:   io.NopCloser(bytes.NewReader(b)),
			result: make(chan watch.Event),
			done:   make(chan struct{}),
			keys: keyReader[*Foo]{lookup: func(ns, name, rv string) (*Foo, bool) {
				return known, ns == "ns" && name == "known" && rv == "5"
			}},
		}
		go w.run()
		errs := 0
		for e := range w.ResultChan() {
			if errs > 0 {
				t.Fatalf("event %+v after an error", e)
			}
			switch o := e.Object.(type) {
			case *metav1.Status:
				if e.Type != watch.Error {
					t.Fatalf("%s event with a Status", e.Type)
				}
				errs++
			case *storedObject[*Foo]:
				if o.obj != known || e.Type != watch.Added && e.Type != watch.Modified {
					t.Fatalf("%s event with stored object %p, not the lookup's", e.Type, o.obj)
				}
			case *undecodable:
				if o.name == "" || o.err == nil || e.Type == watch.Bookmark {
					t.Fatalf("%s event refusing %+v", e.Type, o)
				}
			case *Foo:
				if o == nil || o == known || o.Kind != "" {
					t.Fatalf("decoded object %+v", o)
				}
			default:
				t.Fatalf("event object %T", e.Object)
			}
		}
	})
}

func ExampleFromJSON() {
	// An API server with three Foos, a custom resource of example.com/v1
	// (in tests, an in-memory one).
	s := reflectortest.NewServer[*Foo](reflectortest.Config{})
	for _, name := range []string{"a", "b", "c"} {
		s.Create(&Foo{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: FooSpec{Color: "red", Replicas: 3}})
	}
	srv := httptest.NewServer(&crdServer{s: s})
	defer srv.Close()

	client, err := JSONClient(&rest.Config{Host: srv.URL}, schema.GroupVersion{Group: "example.com", Version: "v1"})
	if err != nil {
		panic(err)
	}
	lw := FromJSON[*Foo](client, "foos", "ns")
	items, lm, err := lw.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		panic(err)
	}
	for _, o := range items {
		fmt.Println(o.Namespace, o.Name, o.ResourceVersion, o.Spec.Color, o.Spec.Replicas)
	}
	fmt.Println("list at", lm.ResourceVersion)
	// Output:
	// ns a 1 red 3
	// ns b 2 red 3
	// ns c 3 red 3
	// list at 3
}

// TestFromJSONListReusesOnlyExactMatches: in a JSON list, an item is taken
// from the store only when its namespace, name and resourceVersion are the
// store's and its kind (when it names one) is T's; any other is decoded, or
// refused when it cannot be.
func TestFromJSONListReusesOnlyExactMatches(t *testing.T) {
	known := &Foo{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "known", ResourceVersion: "5"}}
	lookup := func(ns, name, rv string) (*Foo, bool) {
		return known, ns == "ns" && name == "known" && rv == "5"
	}
	item := func(kind, ns, rv string) string {
		return `{"kind":"` + kind + `","metadata":{"namespace":"` + ns + `","name":"known","resourceVersion":"` + rv + `"},"spec":{"color":"c` + rv + `"}}`
	}
	body := `{"kind":"FooList","metadata":{"resourceVersion":"9"},"items":[` + strings.Join([]string{
		item("Foo", "ns", "5"), // the store's
		item("", "ns", "5"),    // no kind: the store's
		item("Foo", "ns", "6"), // a newer version
		item("Foo", "ns2", "5"),
		item("Bar", "ns", "5"), // another kind: refused, not the store's
	}, ",") + `]}`
	lw := FromJSON[*Foo](fakeREST{}, "foos", "ns").(*restLW[*Foo, Foo])
	items, fromStore, refused, lm, err := lw.jsonList([]byte(body), lookup)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, o := range items {
		got = append(got, objectKey(o)+"@"+o.ResourceVersion+" "+strconv.FormatBool(fromStore[i])+" "+strconv.FormatBool(o == known))
	}
	want := []string{"ns/known@5 true true", "ns/known@5 true true", "ns/known@6 false false", "ns2/known@5 false false"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("items (-want +got):\n%s", diff)
	}
	if len(refused) != 1 || refused[0].Key != "ns/known" || !strings.Contains(refused[0].Error(), `"Bar"`) || lm.ResourceVersion != "9" {
		t.Errorf("refused %v at %q, want ns/known of kind Bar at 9", refused, lm.ResourceVersion)
	}
	if items[2].Spec.Color != "c6" {
		t.Errorf("decoded item = %+v", items[2])
	}
	// Without a lookup, everything is decoded.
	items, fromStore, _, _, err = lw.jsonList([]byte(body), nil)
	if err != nil || len(items) != 4 || fromStore != nil || items[0] == known {
		t.Errorf("without lookup: %d items, fromStore %v, error %v", len(items), fromStore, err)
	}
}

// TestFromJSONListReadWhole: a list that jsonListParts declines (here its
// metadata member is repeated, and a key escaped) is decoded whole, with the
// same items as the list read in parts.
func TestFromJSONListReadWhole(t *testing.T) {
	items := `"items":[{"metadata":{"namespace":"ns","name":"a","resourceVersion":"3"},"spec":{"color":"red"}},` +
		`{"metadata":{"namespace":"ns","name":"b","resourceVersion":"4"},"spec":{"color":"blue"}}]`
	lw := FromJSON[*Foo](fakeREST{}, "foos", "ns").(*restLW[*Foo, Foo])
	want, _, _, wantLM, err := lw.jsonList([]byte(`{"kind":"FooList","metadata":{"resourceVersion":"9"},`+items+`}`), nil)
	if err != nil || len(want) != 2 {
		t.Fatalf("the list read in parts: %d items, %v", len(want), err)
	}
	for _, body := range []string{
		`{"kind":"FooList","metadata":{},"metadata":{"resourceVersion":"9"},` + items + `}`,
		`{"\u006bind":"FooList","metadata":{"resourceVersion":"9"},` + items + `}`,
	} {
		if _, _, _, ok := jsonListParts([]byte(body)); ok {
			t.Fatalf("jsonListParts read %s, want it declined", body)
		}
		got, _, refused, lm, err := lw.jsonList([]byte(body), nil)
		if err != nil || len(refused) != 0 {
			t.Fatalf("%s: error %v, refused %v", body, err, refused)
		}
		if d := cmp.Diff(want, got); d != "" || lm.ResourceVersion != wantLM.ResourceVersion {
			t.Errorf("%s: items (-parts +whole):\n%s\nresourceVersion %q", body, d, lm.ResourceVersion)
		}
	}
}

// TestFromJSONStreamReusesOnlyInitialEvents: in a JSON streaming list, an
// Added or Modified event of an object the store holds at that
// resourceVersion hands over the store's instance until the bookmark that
// ends the initial events; after it, events are decoded as usual.
func TestFromJSONStreamReusesOnlyInitialEvents(t *testing.T) {
	known := &Foo{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "known", ResourceVersion: "5"}}
	end := &Foo{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	body := bytes.Join([][]byte{
		fooEvent(watch.Added, known),
		fooEvent(watch.Added, foo("ns", "other", "red")),
		fooEvent(watch.Bookmark, end),
		fooEvent(watch.Modified, known),
	}, nil)
	w := &restWatch[*Foo, Foo]{
		lw:     FromJSON[*Foo](fakeREST{}, "foos", "ns").(*restLW[*Foo, Foo]),
		body:   io.NopCloser(bytes.NewReader(body)),
		result: make(chan watch.Event),
		done:   make(chan struct{}),
		keys: keyReader[*Foo]{lookup: func(ns, name, rv string) (*Foo, bool) {
			return known, ns == "ns" && name == "known" && rv == "5"
		}},
	}
	go w.run()
	var got []string
	for e := range w.ResultChan() {
		switch o := e.Object.(type) {
		case *storedObject[*Foo]:
			got = append(got, string(e.Type)+" stored "+objectKey(o.obj)+" "+strconv.FormatBool(o.obj == known))
		case *Foo:
			got = append(got, string(e.Type)+" decoded "+objectKey(o)+" "+strconv.FormatBool(o == known))
		default:
			got = append(got, string(e.Type)+" "+fmt.Sprintf("%T", o))
		}
	}
	want := []string{"ADDED stored ns/known true", "ADDED decoded ns/other false", "BOOKMARK decoded  false", "MODIFIED decoded ns/known false"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}
