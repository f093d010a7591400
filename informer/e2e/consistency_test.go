//go:build e2e

package e2e

import (
	"context"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/testrun"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// TestReadYourWrites: after WaitForResourceVersion with the resourceVersion a
// write returned, the cache shows that write.
func TestReadYourWrites(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	inf := informer.New(reflector.FromTyped(admin(t).CoreV1().ConfigMaps(ns)), informer.Config[configMap]{})
	testrun.Run(t, inf.Run)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	c := admin(t).CoreV1().ConfigMaps(ns)
	for i := range 20 {
		created, err := c.Create(ctx, newConfigMap("mine", i), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := inf.WaitForResourceVersion(ctx, created.ResourceVersion); err != nil {
			t.Fatal(err)
		}
		got, err := inf.Lister().Get(ns, "mine")
		if err != nil || got.ResourceVersion != created.ResourceVersion {
			t.Fatalf("round %d: cache has %v, %v after waiting for %s", i, got, err, created.ResourceVersion)
		}
		created.Data["round"] = "updated"
		updated, err := c.Update(ctx, created, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := inf.WaitForResourceVersion(ctx, updated.ResourceVersion); err != nil {
			t.Fatal(err)
		}
		if got, err := inf.Lister().Namespace(ns).Get("mine"); err != nil || got.Data["round"] != "updated" {
			t.Fatalf("round %d: cache has %v, %v after the update", i, got, err)
		}
		if err := c.Delete(ctx, "mine", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// A delete's resourceVersion is not returned; the object as the server
		// last had it is gone once the cache is past a later write elsewhere in
		// the collection.
		marker, err := c.Create(ctx, newConfigMap("marker-"+updated.ResourceVersion, i), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := inf.WaitForResourceVersion(ctx, marker.ResourceVersion); err != nil {
			t.Fatal(err)
		}
		if _, err := inf.Lister().Get(ns, "mine"); !apierrors.IsNotFound(err) {
			t.Fatalf("round %d: deleted object still cached: %v", i, err)
		}
	}
}

// TestCatchUpOnAQuietCollection: CatchUp brings the cache of a collection that
// nothing changes to what the server holds now, which writes elsewhere have
// moved past the cache's last resourceVersion, within seconds (by one relist
// at most): the server's own bookmarks would take about a minute.
func TestCatchUpOnAQuietCollection(t *testing.T) {
	ctx := t.Context()
	quiet := env.Namespace(t)
	createConfigMaps(t, quiet, 3, 1)
	// Paginated lists and plain watches, which the server bookmarks about once a
	// minute (its streaming lists' watches get bookmarks sooner).
	inf := informer.New(reflector.FromTyped(admin(t).CoreV1().ConfigMaps(quiet)), informer.Config[configMap]{
		Reflector: reflector.Config[configMap]{WatchList: reflector.WatchListOff},
	})
	testrun.Run(t, inf.Run)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		createConfigMaps(t, env.Namespace(t), 5, 1) // the server moves on; the quiet collection does not
		before := inf.LastAppliedResourceVersion()
		server, err := inf.ServerResourceVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rvOfString(t, server) <= rvOfString(t, before) {
			t.Fatalf("round %d: the server is at %s, the cache at %s: the test needs the server ahead", round, server, before)
		}
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err = inf.CatchUp(cctx, "")
		cancel()
		if err != nil {
			t.Fatalf("round %d: CatchUp from %s to the server's %s: %v (after %v)", round, before, server, err, time.Since(start))
		}
		if after := inf.LastAppliedResourceVersion(); rvOfString(t, after) < rvOfString(t, server) {
			t.Fatalf("round %d: CatchUp returned with the cache at %s, below %s", round, after, server)
		}
		h := inf.Health()
		if h.Stats.Failures != 0 || h.Stats.Lists > int64(round)+2 {
			t.Fatalf("round %d: %+v: %v", round, h.Stats, h.LastError)
		}
		t.Logf("round %d: cache %s -> %s (server %s) in %v; %+v", round, before, inf.LastAppliedResourceVersion(), server, time.Since(start), h.Stats)
	}
	// Still in step: a change of the collection reaches the cache.
	created, err := admin(t).CoreV1().ConfigMaps(quiet).Create(ctx, newConfigMap("after", 0), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.WaitForResourceVersion(ctx, created.ResourceVersion); err != nil {
		t.Fatal(err)
	}
}

func rvOfString(t *testing.T, rv string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	return n
}
