//go:build e2e

package e2e

import (
	"cmp"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/testrun"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// TestInitialSync50k creates 50,000 ConfigMaps, syncs an informer and compares
// its cache, object by object, with a fresh LIST. A handler registered before Run
// gets them as initial adds; one added after the sync gets the whole cache.
func TestInitialSync50k(t *testing.T) {
	const n = 50_000
	ctx := t.Context()
	ns := env.Namespace(t)
	begin := time.Now()
	createConfigMaps(t, ns, n, 32)
	t.Logf("created %d ConfigMaps in %v", n, time.Since(begin).Round(time.Millisecond))

	inf := informer.New(reflector.FromTyped(admin(t).CoreV1().ConfigMaps(ns)), informer.Config[configMap]{Name: "sync"})
	first := newChecker[configMap]()
	firstReg := mustAdd(t, inf, first, informer.HandlerOptions{})
	begin = time.Now()
	testrun.Run(t, inf.Run)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("informer synced in %v (health %+v)", time.Since(begin).Round(time.Millisecond), inf.Health().Stats)
	if err := firstReg.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	late := newChecker[configMap]()
	lateReg := mustAdd(t, inf, late, informer.HandlerOptions{})
	if err := lateReg.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}

	list, err := admin(t).CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != n {
		t.Fatalf("the server lists %d ConfigMaps, want %d", len(list.Items), n)
	}
	want := make([]configMap, len(list.Items))
	for i := range list.Items {
		want[i] = &list.Items[i]
	}
	got := inf.Indexer().List()
	byName := func(a, b configMap) int { return cmp.Compare(a.Name, b.Name) }
	slices.SortFunc(want, byName)
	slices.SortFunc(got, byName)
	begin = time.Now()
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Fatalf("cache differs from a fresh LIST (-list +cache):\n%s", diff)
	}
	t.Logf("compared in %v", time.Since(begin).Round(time.Millisecond))

	for name, c := range map[string]*checker[configMap]{"first": first, "late": late} {
		c.check(t, name)
		c.mu.Lock()
		if c.initial != n || c.adds != 0 || c.updates != 0 || len(c.view) != n {
			t.Errorf("%s handler: %d initial adds, %d adds, %d updates, %d objects; want %d initial adds only", name, c.initial, c.adds, c.updates, len(c.view), n)
		}
		c.mu.Unlock()
	}
	if s := firstReg.Stats(); s.Delivered != n || s.Coalesced != 0 {
		t.Errorf("first handler stats = %+v", s)
	}
	if got, want := inf.LastAppliedResourceVersion(), list.ResourceVersion; got == "" || rvOf(&metav1.ObjectMeta{ResourceVersion: got}) > rvOf(&metav1.ObjectMeta{ResourceVersion: want}) {
		t.Errorf("LastAppliedResourceVersion = %q, list at %q", got, want)
	}
}
