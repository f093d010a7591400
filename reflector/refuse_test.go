package reflector

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// refusingStore is a memStore that is also a Refuser: Refuse drops the key.
type refusingStore struct{ *memStore[configMap] }

func (s refusingStore) Refuse(key, rv string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, storeCall{op: "refuse", key: key, rv: rv})
	delete(s.objs, key)
	return nil
}

// errorLog collects what a reflector reports to OnError.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

// refused returns "key@rv" of every RefusedError reported so far, and fails the
// test for any other error.
func (l *errorLog) refused(t *testing.T, name string, cause error) []string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, err := range l.errs {
		var ref *RefusedError
		if !errors.As(err, &ref) {
			t.Errorf("OnError got %v, want only *RefusedError", err)
			continue
		}
		var pe *PanicError
		causeOK := ref.Err != nil && (cause == nil || errors.Is(err, cause))
		if cause == errPanic {
			causeOK = errors.As(err, &pe) && pe.Value == errBad && len(pe.Stack) > 0
		}
		if ref.Name != name || !causeOK || !strings.Contains(err.Error(), ref.Key) {
			t.Errorf("refusal %v: name %q, cause %v; want name %q and cause %v", err, ref.Name, ref.Err, name, cause)
		}
		out = append(out, ref.Key+"@"+ref.ResourceVersion)
	}
	l.errs = nil
	return out
}

var (
	errBad = errors.New("labelled bad")
	// errPanic stands for "a *PanicError carrying errBad" in causes.
	errPanic = errors.New("panic")
)

// TestRefusedObjects: an object that Transform refuses (an error, nil, or a
// panic) is left out of the store and reported with its key, while the rest of
// the collection stays live and the resourceVersion keeps advancing, in every
// list mode; when the object changes into something storable, the store gets it
// again; when it is deleted, nothing stalls.
func TestRefusedObjects(t *testing.T) {
	transforms := map[string]func(configMap) (configMap, error){
		"error": func(c configMap) (configMap, error) {
			if c.Labels["bad"] != "" {
				return nil, errBad
			}
			return c, nil
		},
		"nil": func(c configMap) (configMap, error) {
			if c.Labels["bad"] != "" {
				return nil, nil
			}
			return c, nil
		},
		"panic": func(c configMap) (configMap, error) {
			if c.Labels["bad"] != "" {
				panic(errBad)
			}
			return c, nil
		},
	}
	causes := map[string]error{"error": errBad, "nil": nil, "panic": errPanic}
	for tname, transform := range transforms {
		for _, mode := range []WatchListMode{WatchListOff, WatchListOn} {
			t.Run(tname+"/"+mode.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					testRefusedObjects(t, transform, causes[tname], mode)
				})
			})
		}
	}
}

func testRefusedObjects(t *testing.T, transform func(configMap) (configMap, error), cause error, mode WatchListMode) {
	srv := reflectortest.NewServer[configMap](reflectortest.Config{WatchList: true})
	for i := range 4 {
		c := cm("ns", "cm-"+strconv.Itoa(i))
		if i == 1 {
			c = cm("ns", "cm-1", "bad", "yes")
		}
		mustCreate(t, srv, c)
	}
	st := refusingStore{newMemStore[configMap]()}
	var log errorLog
	r := New(srv, st, Config[configMap]{Name: "cms", WatchList: mode, PageSize: 2, Transform: transform, OnError: log.add})
	start(t, r)
	synctest.Wait()

	// checkRefused compares the refusals reported since the last call.
	checkRefused := func(want ...string) {
		t.Helper()
		got := log.refused(t, "cms", cause)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("refusals (-want +got):\n%s", diff)
		}
	}
	// checkStore compares the store with the server's good objects.
	checkStore := func() {
		t.Helper()
		m := map[string]configMap{}
		for _, o := range srv.Items() {
			if o.Labels["bad"] == "" {
				m[objectKey(o)] = o
			}
		}
		if diff := cmp.Diff(contents(m), st.Contents()); diff != "" {
			t.Errorf("store (-server's good objects +store):\n%s", diff)
		}
		if h := r.Health(); h.State != StateWatching || h.ConsecutiveFailures != 0 || h.Stats.Failures != 0 {
			t.Errorf("health = %+v, want watching with no failure", h)
		}
		if got, want := r.Health().LastResourceVersion, srv.ResourceVersion(); got != want {
			t.Errorf("LastResourceVersion = %s, want the server's %s", got, want)
		}
	}

	checkRefused("ns/cm-1@2")
	checkStore()
	if got := r.Health().Stats.Refused; got != 1 {
		t.Errorf("Stats.Refused = %d after the list, want 1", got)
	}

	// Watching: a good object turns bad; the store drops it, and the objects
	// changed after it still arrive.
	bad0 := cm("ns", "cm-0", "bad", "yes")
	if _, err := srv.Update(bad0); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, srv, cm("ns", "cm-4"))
	synctest.Wait()
	checkRefused("ns/cm-0@" + rvOf(t, srv, "cm-0"))
	if slices.ContainsFunc(st.Contents(), func(s string) bool { return strings.HasPrefix(s, "ns/cm-0@") }) {
		t.Error("the store still holds cm-0 after it was refused")
	}
	if !slices.Contains(st.Contents(), "ns/cm-4@"+rvOf(t, srv, "cm-4")) {
		t.Errorf("cm-4, created after the refused event, is not stored: %v", st.Contents())
	}
	if h := r.Health(); h.LastResourceVersion != srv.ResourceVersion() || h.State != StateWatching {
		t.Errorf("health after a refused event = %+v", h)
	}

	// The refused objects become good again: the store follows.
	for _, name := range []string{"cm-0", "cm-1"} {
		if _, err := srv.Update(cm("ns", name)); err != nil {
			t.Fatal(err)
		}
	}
	synctest.Wait()
	checkRefused()
	checkStore()

	// A bad object deleted while bad: the event is refused, nothing stalls.
	if _, err := srv.Update(cm("ns", "cm-2", "bad", "yes")); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	if _, err := srv.Delete("ns", "cm-2"); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, srv, cm("ns", "cm-5"))
	synctest.Wait()
	if got := log.refused(t, "cms", cause); len(got) != 2 {
		t.Errorf("refusals of cm-2's update and deletion: %v", got)
	}
	checkStore()
	if got := r.Health().Stats.Refused; got != 4 {
		t.Errorf("Stats.Refused = %d, want 4", got)
	}
}

func rvOf(t *testing.T, s *reflectortest.Server[configMap], name string) string {
	t.Helper()
	for _, o := range s.Items() {
		if o.Name == name {
			return o.ResourceVersion
		}
	}
	t.Fatalf("no %s on the server", name)
	return ""
}

// undecodableConfigMap is the protobuf of a ConfigMap whose key can be read but
// which does not decode: its data field has the wrong wire type. With list set,
// it is the message of a list item; otherwise a whole object, with the envelope.
func undecodableConfigMap(ns, name, rv string, list bool) []byte {
	raw, err := (&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}}).Marshal()
	if err != nil {
		panic(err)
	}
	raw = append(raw, 2<<3|0, 1) // field 2 (data, a map) as a varint
	if list {
		return raw
	}
	u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, Raw: raw}
	b, err := u.Marshal()
	if err != nil {
		panic(err)
	}
	return append([]byte("k8s\x00"), b...)
}

// TestFromRESTRefusesUndecodableObjects: an object that FromREST cannot decode
// but can name is refused alone, in a list page and in a watch stream, in
// protobuf and in JSON; the rest of the collection is stored and the watch goes
// on past it.
func TestFromRESTRefusesUndecodableObjects(t *testing.T) {
	good := func(name, rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
	}
	pb, js := runtime.ContentTypeProtobuf, runtime.ContentTypeJSON
	for _, mediaType := range []string{pb, js} {
		t.Run(mediaType, func(t *testing.T) {
			var list, events []byte
			if mediaType == pb {
				// A list of a and an undecodable b: append b as one more item
				// (field 2 of the list message) inside the envelope.
				l, err := (&corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}, Items: []corev1.ConfigMap{*good("a", "4")}}).Marshal()
				if err != nil {
					t.Fatal(err)
				}
				bad := undecodableConfigMap("ns", "b", "5", true)
				l = append(l, 2<<3|2, byte(len(bad)))
				l = append(l, bad...)
				u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"}, Raw: l}
				ub, err := u.Marshal()
				if err != nil {
					t.Fatal(err)
				}
				list = append([]byte("k8s\x00"), ub...)
				events = append(frame(mustMarshal(&metav1.WatchEvent{Type: "MODIFIED", Object: runtime.RawExtension{Raw: undecodableConfigMap("ns", "a", "6", false)}})),
					encodeFrames(pb, watch.Event{Type: watch.Added, Object: good("c", "7")})...)
			} else {
				badJSON := func(name, rv string) string {
					return `{"metadata":{"namespace":"ns","name":"` + name + `","resourceVersion":"` + rv + `"},"data":7}`
				}
				list = []byte(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[` +
					string(encodeObject(js, good("a", "4"))) + `,` + badJSON("b", "5") + `]}`)
				events = append([]byte(`{"type":"MODIFIED","object":`+badJSON("a", "6")+"}\n"),
					encodeFrames(js, watch.Event{Type: watch.Added, Object: good("c", "7")})...)
			}
			var watches atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", mediaType)
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

			lw := FromREST[*corev1.ConfigMap](restClient(t, srv.URL), "configmaps", "ns")
			if _, _, err := lw.List(t.Context(), metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "ns/b") {
				t.Errorf("List alone = %v, want an error naming ns/b", err)
			}
			st := refusingStore{newMemStore[configMap]()}
			var log errorLog
			r := New(lw, st, Config[configMap]{Name: "cms", WatchList: WatchListOff, OnError: log.add})
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
			want := []string{"replace(1)@5", "refuse(ns/a)@6", "add(ns/c)@7"}
			var got []string
			for _, c := range st.Calls() {
				got = append(got, c.String())
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("store calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"ns/b@5", "ns/a@6"}, log.refused(t, "cms", nil)); diff != "" {
				t.Errorf("refusals (-want +got):\n%s", diff)
			}
		})
	}
}
