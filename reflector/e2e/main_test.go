//go:build e2e

// Package e2e tests the reflector against the real etcd and kube-apiserver
// that testenv starts: typed, dynamic and metadata clients, streaming and
// paginated lists, 410 after compaction and restarts, and RBAC.
package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/testenv"
)

// env is the control plane shared by every test of the package.
var env *testenv.Env

// Users without rights until a test grants them some.
const (
	userLister   = "lister"    // list but not watch
	userNSReader = "ns-reader" // list and watch ConfigMaps of one namespace
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunTests(m, testenv.Config{
		// Secrets have no watch cache: lists and watches of them reach etcd,
		// which paginates at resourceVersion "0" and forgets compacted
		// history at once.
		// Sharded list and watch (KEP-5866) is alpha in this kube-apiserver.
		APIServerFlags: []string{"--watch-cache-sizes=secrets#0", "--feature-gates=ShardedListAndWatch=true"},
		Users:          []testenv.User{{Name: userLister}, {Name: userNSReader}},
	}, &env, leakcheck.Check))
}

// waitTimeout bounds every wait for convergence.
const waitTimeout = 90 * time.Second

// admin returns a protobuf clientset for the admin user.
func admin(t *testing.T) *kubernetes.Clientset {
	t.Helper()
	return clientsetFor(t, testenv.AdminUser)
}

func clientsetFor(t *testing.T, user string) *kubernetes.Clientset {
	t.Helper()
	cfg, err := env.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(reflector.WithProtobuf(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// createConfigMaps creates n ConfigMaps cm-0 … cm-(n-1) in ns.
func createConfigMaps(t *testing.T, ns string, n int) {
	t.Helper()
	c := admin(t).CoreV1().ConfigMaps(ns)
	for i := range n {
		_, err := c.Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(i)},
			Data:       map[string]string{"i": strconv.Itoa(i)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// serverConfigMaps returns "name" → resourceVersion for the ConfigMaps of ns
// as a fresh consistent LIST sees them.
func serverConfigMaps(t *testing.T, ns string) map[string]string {
	t.Helper()
	list, err := admin(t).CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(list.Items))
	for _, c := range list.Items {
		out[c.Namespace+"/"+c.Name] = c.ResourceVersion
	}
	return out
}

// mapStore is the simplest reflector.Store: objects by namespace/name. It
// checks that watch events of a key come with increasing resourceVersions,
// and signals every change on changed.
type mapStore[T reflector.Object] struct {
	mu         sync.Mutex
	objs       map[string]T
	lastRV     map[string]int64 // key → resourceVersion of its last watch event
	violations []string
	changed    chan struct{} // capacity 1
}

func newMapStore[T reflector.Object]() *mapStore[T] {
	return &mapStore[T]{objs: map[string]T{}, lastRV: map[string]int64{}, changed: make(chan struct{}, 1)}
}

func storeKey(o metav1.Object) string { return o.GetNamespace() + "/" + o.GetName() }

func (s *mapStore[T]) event(obj T, del bool) error {
	s.mu.Lock()
	k := storeKey(obj)
	rv, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		s.violations = append(s.violations, fmt.Sprintf("%s: resourceVersion %q", k, obj.GetResourceVersion()))
	} else if rv <= s.lastRV[k] {
		s.violations = append(s.violations, fmt.Sprintf("%s: resourceVersion %d after %d", k, rv, s.lastRV[k]))
	}
	s.lastRV[k] = rv
	if del {
		delete(s.objs, k)
	} else {
		s.objs[k] = obj
	}
	s.mu.Unlock()
	s.signal()
	return nil
}

func (s *mapStore[T]) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *mapStore[T]) Add(obj T) error    { return s.event(obj, false) }
func (s *mapStore[T]) Update(obj T) error { return s.event(obj, false) }
func (s *mapStore[T]) Delete(obj T) error { return s.event(obj, true) }

func (s *mapStore[T]) Replace(objs []T, rv string) error {
	s.mu.Lock()
	s.objs = make(map[string]T, len(objs))
	for _, o := range objs {
		k := storeKey(o)
		s.objs[k] = o
		if n, err := strconv.ParseInt(o.GetResourceVersion(), 10, 64); err == nil {
			s.lastRV[k] = n
		}
	}
	s.mu.Unlock()
	s.signal()
	return nil
}

// versions returns key → resourceVersion of the stored objects.
func (s *mapStore[T]) versions() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.objs))
	for k, o := range s.objs {
		out[k] = o.GetResourceVersion()
	}
	return out
}

func (s *mapStore[T]) get(key string) (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[key]
	return o, ok
}

// waitFor waits until the store holds exactly want (key → resourceVersion).
func (s *mapStore[T]) waitFor(t *testing.T, want map[string]string) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		got := s.versions()
		if cmp.Equal(want, got) {
			break
		}
		select {
		case <-s.changed:
		case <-deadline.C:
			t.Fatalf("store did not converge in %v (-server +store):\n%s", waitTimeout, cmp.Diff(want, got))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.violations) > 0 {
		t.Errorf("resourceVersions went backwards: %v", s.violations)
	}
}

// waitError waits for an error matching ok on ch, for at most d.
func waitError(t *testing.T, ch <-chan error, d time.Duration, ok func(error) bool) error {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	var last error
	for {
		select {
		case err := <-ch:
			if ok(err) {
				return err
			}
			last = err
		case <-deadline.C:
			t.Fatalf("no matching error within %v; last one: %v", d, last)
		}
	}
}

// spy wraps a ListerWatcher, records List options and runs beforeList
// (if set) before each List.
type spy[T reflector.Object] struct {
	reflector.ListerWatcher[T]
	mu         sync.Mutex
	lists      []metav1.ListOptions
	beforeList func(metav1.ListOptions)
}

func (s *spy[T]) List(ctx context.Context, opts metav1.ListOptions) ([]T, metav1.ListMeta, error) {
	s.mu.Lock()
	s.lists = append(s.lists, opts)
	f := s.beforeList
	s.mu.Unlock()
	if f != nil {
		f(opts)
	}
	return s.ListerWatcher.List(ctx, opts)
}

// listed returns the recorded List calls as "rv=… limit=…" or
// "continue limit=…".
func (s *spy[T]) listed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.lists))
	for i, o := range s.lists {
		if o.Continue != "" {
			out[i] = fmt.Sprintf("continue limit=%d", o.Limit)
		} else {
			out[i] = fmt.Sprintf("rv=%s limit=%d", o.ResourceVersion, o.Limit)
		}
	}
	return out
}

// healthy waits until r's health satisfies ok. The reflector updates its
// health just after the store call that a test waits for, so a test that
// has seen the store converge polls briefly for the health to follow.
func healthy[T reflector.Object](t *testing.T, r *reflector.Reflector[T], ok func(reflector.Health) bool) reflector.Health {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		h := r.Health()
		if ok(h) {
			return h
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("%s: health = %+v", r.Name(), h)
		}
	}
}
