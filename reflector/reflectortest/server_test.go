package reflectortest

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func cm(ns, name string, kv ...string) *corev1.ConfigMap {
	c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if len(kv) == 2 {
		c.Labels = map[string]string{kv[0]: kv[1]}
	}
	return c
}

func names(items []*corev1.ConfigMap) []string {
	out := make([]string, len(items))
	for i, o := range items {
		out[i] = o.Namespace + "/" + o.Name + "@" + o.ResourceVersion
	}
	return out
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func seeded(t *testing.T, cfg Config, n int) *Server[*corev1.ConfigMap] {
	s := NewServer[*corev1.ConfigMap](cfg)
	for i := range n {
		must[*corev1.ConfigMap](t)(s.Create(cm("ns", "o"+strconv.Itoa(i))))
	}
	return s
}

func TestWrites(t *testing.T) {
	s := NewServer[*corev1.ConfigMap](Config{})
	a := must[*corev1.ConfigMap](t)(s.Create(cm("ns", "a")))
	if a.ResourceVersion != "1" {
		t.Errorf("created at %q", a.ResourceVersion)
	}
	a.Labels = map[string]string{"changed": "locally"} // a copy: the server keeps its own
	if got := s.Items()[0]; got.Labels != nil {
		t.Errorf("the server shares objects with callers")
	}
	if _, err := s.Create(cm("ns", "a")); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create = %v", err)
	}
	if _, err := s.Create(cm("ns", "")); !apierrors.IsBadRequest(err) {
		t.Errorf("create without name = %v", err)
	}
	if u := must[*corev1.ConfigMap](t)(s.Update(cm("ns", "a"))); u.ResourceVersion != "2" {
		t.Errorf("updated at %q", u.ResourceVersion)
	}
	if _, err := s.Update(cm("ns", "zz")); !apierrors.IsNotFound(err) {
		t.Errorf("update of a missing object = %v", err)
	}
	if d := must[*corev1.ConfigMap](t)(s.Delete("ns", "a")); d.ResourceVersion != "3" {
		t.Errorf("deleted at %q", d.ResourceVersion)
	}
	if _, err := s.Delete("ns", "a"); !apierrors.IsNotFound(err) {
		t.Errorf("second delete = %v", err)
	}
	if s.ResourceVersion() != "3" || len(s.Items()) != 0 {
		t.Errorf("rv %s, items %v", s.ResourceVersion(), s.Items())
	}
}

func TestListSemantics(t *testing.T) {
	ctx := t.Context()
	s := seeded(t, Config{}, 5)
	list := func(o metav1.ListOptions) ([]string, metav1.ListMeta, error) {
		items, lm, err := s.List(ctx, o)
		return names(items), lm, err
	}

	// Watch cache: limit ignored at "0".
	items, lm, err := list(metav1.ListOptions{ResourceVersion: "0", Limit: 2})
	if err != nil || len(items) != 5 || lm.Continue != "" || lm.ResourceVersion != "5" {
		t.Errorf("list at 0 = %v, %+v, %v", items, lm, err)
	}
	// Pages at "".
	items, lm, err = list(metav1.ListOptions{Limit: 2})
	if err != nil || len(items) != 2 || lm.Continue == "" || *lm.RemainingItemCount != 3 {
		t.Fatalf("first page = %v, %+v, %v", items, lm, err)
	}
	must[*corev1.ConfigMap](t)(s.Create(cm("ns", "late"))) // not in the snapshot
	var all []string
	all = append(all, items...)
	for lm.Continue != "" {
		items, lm, err = list(metav1.ListOptions{Limit: 2, Continue: lm.Continue})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, items...)
	}
	want := []string{"ns/o0@1", "ns/o1@2", "ns/o2@3", "ns/o3@4", "ns/o4@5"}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("pages (-want +got):\n%s", diff)
	}
	// Exact at an old resourceVersion.
	must[*corev1.ConfigMap](t)(s.Update(cm("ns", "o0", "v", "2")))
	must[*corev1.ConfigMap](t)(s.Delete("ns", "o1"))
	items, lm, err = list(metav1.ListOptions{ResourceVersion: "5", ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if diff := cmp.Diff(want, items); diff != "" || err != nil || lm.ResourceVersion != "5" {
		t.Errorf("exact list at 5 (-want +got), %v:\n%s", err, diff)
	}
	// Not older than: the current state.
	items, lm, _ = list(metav1.ListOptions{ResourceVersion: "5"})
	if len(items) != 5 || lm.ResourceVersion != "8" {
		t.Errorf("list not older than 5 = %v at %s", items, lm.ResourceVersion)
	}
	// Errors.
	if _, _, err := list(metav1.ListOptions{ResourceVersion: "99"}); !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		t.Errorf("too large = %v", err)
	}
	if _, _, err := list(metav1.ListOptions{ResourceVersion: "x"}); !apierrors.IsBadRequest(err) {
		t.Errorf("bad rv = %v", err)
	}
	if _, _, err := list(metav1.ListOptions{Continue: "1:1", ResourceVersion: "3"}); !apierrors.IsBadRequest(err) {
		t.Errorf("continue with rv = %v", err)
	}
	if _, _, err := list(metav1.ListOptions{LabelSelector: "a in (b"}); !apierrors.IsBadRequest(err) {
		t.Errorf("bad selector = %v", err)
	}
	if _, _, err := list(metav1.ListOptions{FieldSelector: "spec.x=y"}); !apierrors.IsBadRequest(err) {
		t.Errorf("unsupported field = %v", err)
	}

	// Compaction.
	_, lm, _ = list(metav1.ListOptions{Limit: 1})
	must[*corev1.ConfigMap](t)(s.Update(cm("ns", "o0")))
	s.Compact()
	if _, _, err := list(metav1.ListOptions{Limit: 1, Continue: lm.Continue}); !apierrors.IsResourceExpired(err) {
		t.Errorf("continue after compaction = %v", err)
	}
	if _, _, err := list(metav1.ListOptions{ResourceVersion: "5", Limit: 1}); !apierrors.IsResourceExpired(err) {
		t.Errorf("exact (legacy) list at a compacted rv = %v", err)
	}
}

func TestSelectors(t *testing.T) {
	s := NewServer[*corev1.ConfigMap](Config{})
	must[*corev1.ConfigMap](t)(s.Create(cm("a", "x", "app", "web")))
	must[*corev1.ConfigMap](t)(s.Create(cm("a", "y", "app", "db")))
	must[*corev1.ConfigMap](t)(s.Create(cm("b", "z", "app", "web")))
	items, _, err := s.List(t.Context(), metav1.ListOptions{LabelSelector: "app=web", FieldSelector: "metadata.namespace=a"})
	if diff := cmp.Diff([]string{"a/x@1"}, names(items)); diff != "" || err != nil {
		t.Errorf("selected (-want +got), %v:\n%s", err, diff)
	}
}

// recv reads n events from w.
func recv(t *testing.T, w watch.Interface, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ev, ok := <-w.ResultChan()
		if !ok {
			t.Fatalf("watch closed after %v", out)
		}
		out = append(out, describe(ev))
	}
	return out
}

func describe(ev watch.Event) string {
	if ev.Type == watch.Error {
		return "ERROR " + apierrors.FromObject(ev.Object).Error()
	}
	m := ev.Object.(metav1.Object)
	s := string(ev.Type) + " " + m.GetNamespace() + "/" + m.GetName() + "@" + m.GetResourceVersion()
	if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
		s += " end"
	}
	return s
}

func closed(w watch.Interface) bool {
	_, ok := <-w.ResultChan()
	return !ok
}

func TestWatchReplayAndLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := seeded(t, Config{}, 3)
		w := must[watch.Interface](t)(s.Watch(t.Context(), metav1.ListOptions{ResourceVersion: "1"}))
		defer w.Stop()
		must[*corev1.ConfigMap](t)(s.Update(cm("ns", "o0")))
		must[*corev1.ConfigMap](t)(s.Delete("ns", "o1"))
		want := []string{"ADDED ns/o1@2", "ADDED ns/o2@3", "MODIFIED ns/o0@4", "DELETED ns/o1@5"}
		if diff := cmp.Diff(want, recv(t, w, 4)); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		s.Bookmark() // not allowed on this watch
		must[*corev1.ConfigMap](t)(s.Create(cm("ns", "n")))
		if got := recv(t, w, 1); got[0] != "ADDED ns/n@6" {
			t.Errorf("event = %v", got)
		}
	})
}

func TestWatchSelectorTransitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewServer[*corev1.ConfigMap](Config{})
		must[*corev1.ConfigMap](t)(s.Create(cm("ns", "a", "app", "web")))
		w := must[watch.Interface](t)(s.Watch(t.Context(), metav1.ListOptions{ResourceVersion: "1", LabelSelector: "app=web"}))
		defer w.Stop()
		must[*corev1.ConfigMap](t)(s.Update(cm("ns", "a", "app", "db")))  // leaves
		must[*corev1.ConfigMap](t)(s.Create(cm("ns", "b", "app", "db")))  // never in
		must[*corev1.ConfigMap](t)(s.Update(cm("ns", "b", "app", "web"))) // enters
		must[*corev1.ConfigMap](t)(s.Update(cm("ns", "b", "app", "web"))) // stays
		must[*corev1.ConfigMap](t)(s.Delete("ns", "a"))                   // was out
		must[*corev1.ConfigMap](t)(s.Delete("ns", "b"))                   // was in
		want := []string{"DELETED ns/a@2", "ADDED ns/b@4", "MODIFIED ns/b@5", "DELETED ns/b@7"}
		if diff := cmp.Diff(want, recv(t, w, 4)); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
	})
}

func TestWatchErrorsAndStreaming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		yes := true
		stream := metav1.ListOptions{SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true}

		s := seeded(t, Config{}, 2)
		if _, err := s.Watch(ctx, stream); !apierrors.IsInvalid(err) {
			t.Errorf("streaming on a server without it = %v", err)
		}
		if _, err := s.Watch(ctx, metav1.ListOptions{ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}); !apierrors.IsInvalid(err) {
			t.Errorf("resourceVersionMatch without sendInitialEvents = %v", err)
		}

		s = seeded(t, Config{WatchList: true}, 2)
		w := must[watch.Interface](t)(s.Watch(ctx, stream))
		want := []string{"ADDED ns/o0@1", "ADDED ns/o1@2", "BOOKMARK /@2 end"}
		if diff := cmp.Diff(want, recv(t, w, 3)); diff != "" {
			t.Errorf("streamed (-want +got):\n%s", diff)
		}
		w.Stop()
		noMatch := stream
		noMatch.ResourceVersionMatch = ""
		if _, err := s.Watch(ctx, noMatch); !apierrors.IsInvalid(err) {
			t.Errorf("streaming without NotOlderThan = %v", err)
		}

		w = must[watch.Interface](t)(s.Watch(ctx, metav1.ListOptions{ResourceVersion: "9"}))
		if got := recv(t, w, 1); got[0] != "ERROR Timeout: Too large resource version: 9, current: 2" || !closed(w) {
			t.Errorf("watch from the future = %v", got)
		}
		must[*corev1.ConfigMap](t)(s.Create(cm("ns", "x")))
		s.Compact()
		w = must[watch.Interface](t)(s.Watch(ctx, metav1.ListOptions{ResourceVersion: "1"}))
		if got := recv(t, w, 1); got[0] != "ERROR too old resource version: 1" || !closed(w) {
			t.Errorf("watch from a compacted rv = %v", got)
		}
		w = must[watch.Interface](t)(s.Watch(ctx, metav1.ListOptions{ResourceVersion: "3"}))
		defer w.Stop()
		synctest.Wait() // stopped watches unregister
		if s.OpenWatches() != 1 {
			t.Errorf("open watches = %d", s.OpenWatches())
		}
	})
}

func TestWatchEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := seeded(t, Config{}, 1)
		secs := int64(30)
		w := must[watch.Interface](t)(s.Watch(t.Context(), metav1.ListOptions{ResourceVersion: "1", TimeoutSeconds: &secs}))
		t0 := time.Now()
		if !closed(w) || time.Since(t0) != 30*time.Second {
			t.Errorf("watch closed after %v, want its 30s timeout", time.Since(t0))
		}
		synctest.Wait()
		if s.OpenWatches() != 0 {
			t.Errorf("a closed watch is still registered")
		}

		ctx, cancel := context.WithCancel(t.Context())
		w = must[watch.Interface](t)(s.Watch(ctx, metav1.ListOptions{ResourceVersion: "1"}))
		cancel()
		if !closed(w) {
			t.Error("cancelling the context did not close the watch")
		}

		w = must[watch.Interface](t)(s.Watch(t.Context(), metav1.ListOptions{ResourceVersion: "1"}))
		w.Stop()
		w.Stop()
		if !closed(w) {
			t.Error("Stop did not close the watch")
		}

		// CloseWatches drops what is queued; BreakWatches sends it first.
		w1 := must[watch.Interface](t)(s.Watch(t.Context(), metav1.ListOptions{ResourceVersion: "0"}))
		s.CloseWatches()
		if !closed(w1) {
			t.Error("CloseWatches did not drop the queued events")
		}
		w2 := must[watch.Interface](t)(s.Watch(t.Context(), metav1.ListOptions{ResourceVersion: "0", AllowWatchBookmarks: true}))
		s.Bookmark()
		s.BreakWatches(apierrors.NewResourceExpired("gone"))
		want := []string{"ADDED ns/o0@1", "BOOKMARK /@1", "ERROR gone"}
		if diff := cmp.Diff(want, recv(t, w2, 3)); diff != "" || !closed(w2) {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		w3 := must[watch.Interface](t)(s.Watch(t.Context(), metav1.ListOptions{ResourceVersion: "1"}))
		s.BreakWatches(errors.New("plain"))
		if got := recv(t, w3, 1); got[0] != "ERROR Internal error occurred: plain" {
			t.Errorf("a plain error = %v", got)
		}

		s = seeded(t, Config{IgnoreWatchTimeout: true}, 1)
		w = must[watch.Interface](t)(s.Watch(t.Context(), metav1.ListOptions{ResourceVersion: "1", TimeoutSeconds: &secs}))
		time.Sleep(time.Hour)
		synctest.Wait()
		if s.OpenWatches() != 1 {
			t.Error("IgnoreWatchTimeout: the watch ended")
		}
		w.Stop()
	})
}

func TestFaults(t *testing.T) {
	ctx := t.Context()
	s := seeded(t, Config{}, 1)
	s.FailNext(List, nil, errors.New("second"))
	if _, _, err := s.List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("first list = %v", err)
	}
	if _, _, err := s.List(ctx, metav1.ListOptions{}); err == nil || err.Error() != "second" {
		t.Errorf("second list = %v", err)
	}
	s.Forbid(Watch, true)
	if _, err := s.Watch(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("forbidden watch = %v", err)
	}
	s.Forbid(Watch, false)
	var seen []Verb
	s.SetHook(func(r Request) error {
		seen = append(seen, r.Verb)
		if r.Verb == Watch {
			return errors.New("hooked")
		}
		return nil
	})
	if _, _, err := s.List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("hooked list = %v", err)
	}
	if _, err := s.Watch(ctx, metav1.ListOptions{}); err == nil || err.Error() != "hooked" {
		t.Errorf("hooked watch = %v", err)
	}
	s.SetHook(nil)
	if diff := cmp.Diff([]Verb{List, Watch}, seen); diff != "" {
		t.Errorf("hook saw (-want +got):\n%s", diff)
	}
	if n := len(s.Requests()); n != 5 {
		t.Errorf("%d requests recorded, want 5", n)
	}
}

func TestNewServerRejectsNonPointers(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	NewServer[Object](Config{}) // an interface type: no objects to make bookmarks with
}
