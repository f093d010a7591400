//go:build e2e

package e2e

import (
	"testing"

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
