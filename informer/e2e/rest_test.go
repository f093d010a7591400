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

// TestRelistThroughFromRESTDecodesNothingUnchanged syncs an informer through
// reflector.FromREST, forces a relist (compaction and an API server killed and
// restarted: 410 Gone), and checks that the relist decoded none of the unchanged
// objects (the informer offers its cache through ReuseKey), that the cache kept
// its instances and that it equals a fresh LIST object by object. Handlers see
// no update for the unchanged objects.
func TestRelistThroughFromRESTDecodesNothingUnchanged(t *testing.T) {
	const n = 2000
	ctx := t.Context()
	ns := env.Namespace(t)
	createConfigMaps(t, ns, n, 16)
	client := admin(t)
	lw := reflector.FromREST[configMap](client.CoreV1().RESTClient(), "configmaps", ns)
	inf := informer.New(lw, informer.Config[configMap]{
		Name:      "from-rest",
		Transform: reflector.StripManagedFields[configMap],
	})
	c := newChecker[configMap]()
	mustAdd(t, inf, c, informer.HandlerOptions{})
	testrun.Run(t, inf.Run)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if s := inf.Health().Stats; s.ListedObjects != n || s.ListedFromStore != 0 {
		t.Fatalf("first sync Stats = %+v, want %d objects listed and decoded", s, n)
	}
	before := map[string]configMap{}
	for _, o := range inf.Indexer().List() {
		before[key(o)] = o
	}

	lists := func() int64 { s := inf.Health().Stats; return s.Lists + s.StreamingLists }
	relisted := false
	for try := 0; try < 3 && !relisted; try++ {
		if err := env.Expire(ctx); err != nil {
			t.Fatal(err)
		}
		tick := time.NewTicker(10 * time.Millisecond)
		deadline := time.NewTimer(converge)
	wait:
		for {
			if lists() == 2 && inf.LastAppliedResourceVersion() == inf.Health().LastResourceVersion {
				relisted = true
				break
			}
			select {
			case <-tick.C:
			case <-deadline.C:
				break wait
			}
		}
		tick.Stop()
		deadline.Stop()
	}
	if !relisted {
		t.Fatalf("no relist after three API server restarts: %+v", inf.Health())
	}
	s := inf.Health().Stats
	if s.ListedObjects != 2*n || s.ListedFromStore != n {
		t.Errorf("after the relist Stats = %+v, want %d objects listed of which %d (all the relisted ones) not decoded", s, 2*n, n)
	}

	list, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]configMap, len(list.Items))
	for i := range list.Items {
		want[i] = &list.Items[i]
		want[i].ManagedFields = nil
	}
	got := inf.Indexer().List()
	byName := func(a, b configMap) int { return cmp.Compare(a.Name, b.Name) }
	slices.SortFunc(want, byName)
	slices.SortFunc(got, byName)
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Fatalf("cache differs from a fresh LIST (-list +cache):\n%s", diff)
	}
	kept := 0
	for _, o := range got {
		if before[key(o)] == o {
			kept++
		}
	}
	if kept != n {
		t.Errorf("the cache kept %d of its %d instances through the relist", kept, n)
	}
	c.check(t, "handler")
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.updates != 0 || c.initial != n {
		t.Errorf("handler saw %d initial adds and %d updates; want %d and none", c.initial, c.updates, n)
	}
}
