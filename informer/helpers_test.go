package informer_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

type cm = *corev1.ConfigMap

func configMap(name string, data ...string) cm {
	c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	if len(data) > 0 {
		c.Data = map[string]string{}
		for i := 0; i+1 < len(data); i += 2 {
			c.Data[data[i]] = data[i+1]
		}
	}
	return c
}

// newServer returns an in-memory server holding cm-0 … cm-(n-1) in namespace ns.
func newServer(t *testing.T, cfg reflectortest.Config, n int) *reflectortest.Server[cm] {
	t.Helper()
	s := reflectortest.NewServer[cm](cfg)
	for i := range n {
		mustCreate(t, s, configMap("cm-"+strconv.Itoa(i), "i", strconv.Itoa(i)))
	}
	return s
}

func mustCreate(t *testing.T, s *reflectortest.Server[cm], c cm) cm {
	t.Helper()
	out, err := s.Create(c)
	if err != nil {
		t.Fatalf("create %s: %v", c.Name, err)
	}
	return out
}

func mustUpdate(t *testing.T, s *reflectortest.Server[cm], c cm) cm {
	t.Helper()
	out, err := s.Update(c)
	if err != nil {
		t.Fatalf("update %s: %v", c.Name, err)
	}
	return out
}

func mustDelete(t *testing.T, s *reflectortest.Server[cm], name string) cm {
	t.Helper()
	out, err := s.Delete("ns", name)
	if err != nil {
		t.Fatalf("delete %s: %v", name, err)
	}
	return out
}

// start runs inf until the end of the test and checks that Run returns nil. The
// returned function stops it earlier (and may be called more than once).
func start(t *testing.T, inf *informer.Informer[cm]) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v, want nil", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func rv(o metav1.Object) int {
	n, err := strconv.Atoi(o.GetResourceVersion())
	if err != nil {
		panic(fmt.Sprintf("resourceVersion %q of %s: %v", o.GetResourceVersion(), o.GetName(), err))
	}
	return n
}

func describe(o cm) string { return o.Name + "@" + o.ResourceVersion }

// recorder is a Handler that checks that its calls tell a consistent story per key
// (see informer.Handler) and keeps its view of the objects.
type recorder struct {
	// gate, if not nil, is received from before every call: a stuck handler until
	// it is closed.
	gate chan struct{}

	mu         sync.Mutex
	view       map[string]cm
	calls      []string // "initial a@1", "add a@1", "update a@1>a@2", "sync a@1", "delete a@2", "tombstone a@2"
	violations []string
}

func newRecorder() *recorder { return &recorder{view: map[string]cm{}} }

func (r *recorder) wait() {
	if r.gate != nil {
		<-r.gate
	}
}

func (r *recorder) violate(format string, args ...any) {
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
}

func (r *recorder) OnAdd(obj cm, initial bool) {
	r.wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	k := obj.Namespace + "/" + obj.Name
	if cur, ok := r.view[k]; ok {
		r.violate("add %s for a known key (holding %s)", describe(obj), describe(cur))
	}
	r.view[k] = obj
	if initial {
		r.calls = append(r.calls, "initial "+describe(obj))
	} else {
		r.calls = append(r.calls, "add "+describe(obj))
	}
}

func (r *recorder) OnUpdate(old, obj cm) {
	r.wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	k := obj.Namespace + "/" + obj.Name
	cur, ok := r.view[k]
	switch {
	case !ok:
		r.violate("update %s for an unknown key", describe(obj))
	case cur != old:
		r.violate("update %s>%s but the handler holds %s", describe(old), describe(obj), describe(cur))
	case old != obj && rv(obj) <= rv(old):
		r.violate("update %s>%s goes back", describe(old), describe(obj))
	}
	r.view[k] = obj
	if old == obj {
		r.calls = append(r.calls, "sync "+describe(obj))
	} else {
		r.calls = append(r.calls, "update "+describe(old)+">"+describe(obj))
	}
}

func (r *recorder) OnDelete(d informer.Deleted[cm]) {
	r.wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.view[d.Key]
	switch {
	case !ok:
		r.violate("delete %s for an unknown key", describe(d.Obj))
	case d.Key != d.Obj.Namespace+"/"+d.Obj.Name:
		r.violate("delete key %q for %s", d.Key, describe(d.Obj))
	case d.FinalStateUnknown && rv(d.Obj) < rv(cur):
		r.violate("tombstone %s older than %s", describe(d.Obj), describe(cur))
	case !d.FinalStateUnknown && rv(d.Obj) <= rv(cur):
		r.violate("delete %s not newer than %s", describe(d.Obj), describe(cur))
	}
	delete(r.view, d.Key)
	if d.FinalStateUnknown {
		r.calls = append(r.calls, "tombstone "+describe(d.Obj))
	} else {
		r.calls = append(r.calls, "delete "+describe(d.Obj))
	}
}

// versions returns key → resourceVersion of the handler's view.
func (r *recorder) versions() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.view))
	for k, o := range r.view {
		out[k] = o.ResourceVersion
	}
	return out
}

// takeCalls returns the calls recorded since the last takeCalls.
func (r *recorder) takeCalls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

func (r *recorder) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.violations) > 0 {
		t.Errorf("inconsistent calls: %q", r.violations)
	}
}

func serverVersions(s *reflectortest.Server[cm]) map[string]string {
	out := map[string]string{}
	for _, o := range s.Items() {
		out[o.Namespace+"/"+o.Name] = o.ResourceVersion
	}
	return out
}

func cacheVersions(inf *informer.Informer[cm]) map[string]string {
	out := map[string]string{}
	for _, o := range inf.Indexer().List() {
		out[o.Namespace+"/"+o.Name] = o.ResourceVersion
	}
	return out
}

// checkInSync checks that the cache and every handler's view equal the server.
func checkInSync(t *testing.T, s *reflectortest.Server[cm], inf *informer.Informer[cm], recs ...*recorder) {
	t.Helper()
	want := serverVersions(s)
	if diff := cmp.Diff(want, cacheVersions(inf)); diff != "" {
		t.Errorf("cache differs from the server (-server +cache):\n%s", diff)
	}
	for i, r := range recs {
		if diff := cmp.Diff(want, r.versions()); diff != "" {
			t.Errorf("handler %d differs from the server (-server +handler):\n%s", i, diff)
		}
		r.check(t)
	}
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return s
}

func mustAdd(t *testing.T, inf *informer.Informer[cm], h informer.Handler[cm], opts informer.HandlerOptions) *informer.Registration[cm] {
	t.Helper()
	reg, err := inf.AddHandler(h, opts)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}
