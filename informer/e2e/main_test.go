//go:build e2e

// Package e2e tests the informer against the real etcd and kube-apiserver that
// testenv starts: a 50,000-object initial sync, a write storm through API server
// restarts and etcd compactions, tombstones after a disconnection, RBAC, a
// custom resource through the dynamic client, and storms with a panicking
// handler and with objects the Transform refuses.
package e2e

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/testenv"
)

// env is the control plane shared by every test of the package.
var env *testenv.Env

// Users without rights until a test grants them some.
const (
	userNSReader = "ns-reader" // list and watch ConfigMaps of one namespace
	userLister   = "lister"    // list but not watch
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunTests(m, testenv.Config{
		Users: []testenv.User{{Name: userNSReader}, {Name: userLister}},
	}, &env, leakcheck.Check))
}

// converge bounds every wait for the cache to match the server after a change or
// a fault.
const converge = 30 * time.Second

type configMap = *corev1.ConfigMap

func clientsetFor(t *testing.T, user string) *kubernetes.Clientset {
	t.Helper()
	cfg, err := env.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 30 * time.Second
	c, err := kubernetes.NewForConfig(reflector.WithProtobuf(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func admin(t *testing.T) *kubernetes.Clientset { return clientsetFor(t, testenv.AdminUser) }

func newConfigMap(name string, i int) configMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": strconv.Itoa(i)}}
}

// createConfigMaps creates cm-0 … cm-(n-1) in ns from workers goroutines.
func createConfigMaps(t *testing.T, ns string, n, workers int) {
	t.Helper()
	createEach(t, ns, n, workers, func(i int) configMap { return newConfigMap("cm-"+strconv.Itoa(i), i) })
}

// serverVersions returns key → resourceVersion of the ConfigMaps of ns, from a
// consistent LIST.
func serverVersions(t *testing.T, ns string) map[string]string {
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

func cacheVersions[T reflector.Object](inf *informer.Informer[T]) map[string]string {
	objs := inf.Indexer().List()
	out := make(map[string]string, len(objs))
	for _, o := range objs {
		out[key(o)] = o.GetResourceVersion()
	}
	return out
}

func key(o metav1.Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

func rvOf(o metav1.Object) int64 {
	n, err := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// checker is a Handler that checks, per key, that resourceVersions strictly
// increase from call to call (a tombstone may repeat the last one: it carries the
// last state the handler was given), that OnUpdate's old object is the one it was
// last given, and that nothing but OnAdd follows a deletion. It keeps its view of
// the objects.
type checker[T reflector.Object] struct {
	// pause, if set, is called before every call: a slow handler.
	pause func()

	mu         sync.Mutex
	view       map[string]T
	lastRV     map[string]int64 // kept after a deletion
	violations []string
	initial    int
	adds       int
	updates    int
	deletes    int
	tombstones []string
	changed    chan struct{} // capacity 1: signalled after every call
}

func newChecker[T reflector.Object]() *checker[T] {
	return &checker[T]{view: map[string]T{}, lastRV: map[string]int64{}, changed: make(chan struct{}, 1)}
}

func (c *checker[T]) violate(format string, args ...any) {
	if len(c.violations) < 20 {
		c.violations = append(c.violations, fmt.Sprintf(format, args...))
	}
}

func (c *checker[T]) done() {
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *checker[T]) OnAdd(obj T, inInitialList bool) {
	if c.pause != nil {
		c.pause()
	}
	c.mu.Lock()
	defer c.done()
	k, rv := key(obj), rvOf(obj)
	if _, ok := c.view[k]; ok {
		c.violate("%s: add at %d of a known key", k, rv)
	}
	if last, ok := c.lastRV[k]; ok && rv <= last {
		c.violate("%s: add at %d after %d", k, rv, last)
	}
	c.view[k], c.lastRV[k] = obj, rv
	if inInitialList {
		c.initial++
	} else {
		c.adds++
	}
}

func (c *checker[T]) OnUpdate(old, obj T) {
	if c.pause != nil {
		c.pause()
	}
	c.mu.Lock()
	defer c.done()
	k, rv := key(obj), rvOf(obj)
	cur, ok := c.view[k]
	switch {
	case !ok:
		c.violate("%s: update at %d of an unknown key", k, rv)
	case any(cur) != any(old):
		c.violate("%s: update from %d but the handler holds %d", k, rvOf(old), rvOf(cur))
	case rv <= c.lastRV[k]:
		c.violate("%s: update at %d after %d", k, rv, c.lastRV[k])
	}
	c.view[k], c.lastRV[k] = obj, rv
	c.updates++
}

func (c *checker[T]) OnDelete(d informer.Deleted[T]) {
	if c.pause != nil {
		c.pause()
	}
	c.mu.Lock()
	defer c.done()
	rv := rvOf(d.Obj)
	_, ok := c.view[d.Key]
	switch {
	case !ok:
		c.violate("%s: delete at %d of an unknown key", d.Key, rv)
	case d.FinalStateUnknown && rv < c.lastRV[d.Key]:
		c.violate("%s: tombstone at %d after %d", d.Key, rv, c.lastRV[d.Key])
	case !d.FinalStateUnknown && rv <= c.lastRV[d.Key]:
		c.violate("%s: delete at %d after %d", d.Key, rv, c.lastRV[d.Key])
	}
	delete(c.view, d.Key)
	c.lastRV[d.Key] = max(c.lastRV[d.Key], rv)
	c.deletes++
	if d.FinalStateUnknown {
		c.tombstones = append(c.tombstones, d.Key)
	}
}

func (c *checker[T]) versions() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]string, len(c.view))
	for k, o := range c.view {
		out[k] = o.GetResourceVersion()
	}
	return out
}

func (c *checker[T]) check(t *testing.T, name string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.violations) > 0 {
		t.Errorf("%s: inconsistent calls: %q", name, c.violations)
	}
}

// waitInSync waits until the cache and every checker's view equal want, for at
// most d, and returns how long it took.
func waitInSync[T reflector.Object](t *testing.T, d time.Duration, want map[string]string, inf *informer.Informer[T], checkers ...*checker[T]) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var wake <-chan struct{}
	if len(checkers) > 0 {
		wake = checkers[0].changed
	}
	for {
		diff := cmp.Diff(want, cacheVersions(inf))
		who := "cache"
		for i, c := range checkers {
			if diff != "" {
				break
			}
			diff, who = cmp.Diff(want, c.versions()), fmt.Sprintf("handler %d", i)
		}
		if diff == "" {
			return time.Since(start)
		}
		select {
		case <-wake:
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("%s did not converge to the server in %v (-server +%s):\n%s\nhealth: %+v", who, d, who, diff, inf.Health())
		}
	}
}

// grant gives user the verbs on ConfigMaps of ns.
func grant(t *testing.T, ns, user string, verbs ...string) {
	t.Helper()
	env.Grant(t, ns, user, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs})
}

// tolerable reports whether a write error is expected in a storm: conflicts with
// other writers, or the API server being down.
func tolerable(err error) bool {
	return err == nil || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) ||
		!apierrors.IsBadRequest(err) && !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) && !apierrors.IsUnauthorized(err)
}
