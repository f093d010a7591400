package reflector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// storeCall is one call the recording store received.
type storeCall struct {
	op   string // add, update, delete, replace, bookmark
	key  string // object key, or "" for replace and bookmark
	rv   string // object's resourceVersion, or the list's or bookmark's
	size int    // replace: number of objects
}

func (c storeCall) String() string {
	if c.op == "replace" {
		return fmt.Sprintf("replace(%d)@%s", c.size, c.rv)
	}
	if c.op == "bookmark" {
		return "bookmark@" + c.rv
	}
	return fmt.Sprintf("%s(%s)@%s", c.op, c.key, c.rv)
}

// memStore is a Store and BookmarkStore that keeps the objects by key and
// records every call. fail, if set, can make a call fail.
type memStore[T Object] struct {
	mu    sync.Mutex
	objs  map[string]T
	calls []storeCall
	fail  func(op string) error
}

func newMemStore[T Object]() *memStore[T] { return &memStore[T]{objs: map[string]T{}} }

func (s *memStore[T]) record(op string, obj T) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		if err := s.fail(op); err != nil {
			return err
		}
	}
	k := objectKey(obj)
	s.calls = append(s.calls, storeCall{op: op, key: k, rv: obj.GetResourceVersion()})
	if op == "delete" {
		delete(s.objs, k)
	} else {
		s.objs[k] = obj
	}
	return nil
}

func (s *memStore[T]) Add(obj T) error    { return s.record("add", obj) }
func (s *memStore[T]) Update(obj T) error { return s.record("update", obj) }
func (s *memStore[T]) Delete(obj T) error { return s.record("delete", obj) }

func (s *memStore[T]) Replace(objs []T, rv string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		if err := s.fail("replace"); err != nil {
			return err
		}
	}
	s.calls = append(s.calls, storeCall{op: "replace", rv: rv, size: len(objs)})
	s.objs = make(map[string]T, len(objs))
	for _, o := range objs {
		s.objs[objectKey(o)] = o
	}
	return nil
}

func (s *memStore[T]) Bookmark(rv string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, storeCall{op: "bookmark", rv: rv})
	return nil
}

func (s *memStore[T]) setFail(f func(op string) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = f
}

func (s *memStore[T]) Calls() []storeCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]storeCall(nil), s.calls...)
}

// Contents returns "key@rv" for every object, sorted.
func (s *memStore[T]) Contents() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return contents(s.objs)
}

func contents[T Object](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for k, o := range m {
		out = append(out, k+"@"+o.GetResourceVersion())
	}
	sort.Strings(out)
	return out
}

// serverContents is Contents for the server's objects.
func serverContents[T Object](s *reflectortest.Server[T]) []string {
	m := map[string]T{}
	for _, o := range s.Items() {
		m[objectKey(o)] = o
	}
	return contents(m)
}

func cm(ns, name string, lbls ...string) *corev1.ConfigMap {
	c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if len(lbls) > 0 {
		c.Labels = map[string]string{}
		for i := 0; i+1 < len(lbls); i += 2 {
			c.Labels[lbls[i]] = lbls[i+1]
		}
	}
	return c
}

// newServer returns a server holding n ConfigMaps ns/cm-0 … ns/cm-(n-1).
func newServer(t *testing.T, cfg reflectortest.Config, n int) *reflectortest.Server[*corev1.ConfigMap] {
	t.Helper()
	s := reflectortest.NewServer[*corev1.ConfigMap](cfg)
	for i := range n {
		mustCreate(t, s, cm("ns", "cm-"+strconv.Itoa(i)))
	}
	return s
}

// watchTimes records when s receives each watch request (on the bubble's clock);
// the function it returns gives a copy of the times so far. It uses s's hook.
func watchTimes(s *reflectortest.Server[*corev1.ConfigMap]) func() []time.Time {
	var mu sync.Mutex
	var at []time.Time
	s.SetHook(func(req reflectortest.Request) error {
		if req.Verb == reflectortest.Watch {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
		}
		return nil
	})
	return func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(at)
	}
}

func mustCreate(t *testing.T, s *reflectortest.Server[*corev1.ConfigMap], c *corev1.ConfigMap) *corev1.ConfigMap {
	t.Helper()
	out, err := s.Create(c)
	if err != nil {
		t.Fatalf("create %s: %v", c.Name, err)
	}
	return out
}

// running is a reflector started by start, inside a synctest bubble.
type running[T Object] struct {
	r      *Reflector[T]
	cancel context.CancelFunc
	done   chan error
}

// start runs r in a goroutine and registers its stop with t.Cleanup, which
// also checks that Run returned nil.
func start[T Object](t *testing.T, r *Reflector[T]) *running[T] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rr := &running[T]{r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rr.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		if err := rr.stop(); err != nil {
			t.Errorf("Run returned %v, want nil", err)
		}
	})
	return rr
}

// stop cancels Run and waits for it; it may be called more than once.
func (rr *running[T]) stop() error {
	rr.cancel()
	err, ok := <-rr.done
	if ok {
		close(rr.done)
	}
	return err
}

// requestsOf filters a server's requests by verb.
func requestsOf(reqs []reflectortest.Request, v reflectortest.Verb) []reflectortest.Request {
	var out []reflectortest.Request
	for _, r := range reqs {
		if r.Verb == v {
			out = append(out, r)
		}
	}
	return out
}

// bubble runs f in a synctest bubble.
func bubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, f)
}

var errBoom = errors.New("boom")

// describe summarises requests for comparison: "list rv=0 limit=500",
// "list continue limit=500", "stream rv=" or "watch rv=12".
func describe(reqs []reflectortest.Request) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		o := r.Options
		switch {
		case r.Verb == reflectortest.List && o.Continue != "":
			out[i] = fmt.Sprintf("list continue limit=%d", o.Limit)
		case r.Verb == reflectortest.List:
			out[i] = fmt.Sprintf("list rv=%s limit=%d", o.ResourceVersion, o.Limit)
		case o.SendInitialEvents != nil:
			out[i] = "stream rv=" + o.ResourceVersion
		default:
			out[i] = "watch rv=" + o.ResourceVersion
		}
	}
	return out
}
