//go:build e2e

package e2e

import (
	"context"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/manager"
)

func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestReleaseFreesMemory: an informer asked for while the manager runs starts at
// once; asking twice shares it; the first Release keeps it running for the
// other user, the last one stops it and the manager forgets it, so that its
// cache is garbage-collected (heap measured); asking again makes a new one.
// CTRLKIT_RELEASE_OBJECTS sets the number of 1 KiB ConfigMaps (default 3,000).
func TestReleaseFreesMemory(t *testing.T) {
	n := sizeFromEnv(t, "CTRLKIT_RELEASE_OBJECTS", 3000)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := env.Namespace(t)
	kube := kubernetes.NewForConfigOrDie(env.Config())
	createConfigMaps(ctx, t, kube, ns, n, 1024, 16)

	m, err := manager.New(manager.Config{RESTConfig: env.Config()})
	if err != nil {
		t.Fatal(err)
	}
	runManager(ctx, t, m)
	// A first informer of another kind, so that the manager's clients and
	// discovery are warm before the baseline is taken.
	if _, err := manager.Typed[*corev1.Secret](m, manager.Options[*corev1.Secret]{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the secrets informer to sync", func() bool { return m.Informers()[0].Synced })

	before := heapInUse()
	opts := manager.Options[*corev1.ConfigMap]{Namespace: ns}
	inf, err := manager.Typed[*corev1.ConfigMap](m, opts)
	if err != nil {
		t.Fatal(err)
	}
	again, err := manager.Typed[*corev1.ConfigMap](m, opts)
	if err != nil {
		t.Fatal(err)
	}
	if again != inf {
		t.Fatal("asking twice with the same options made two informers")
	}
	// Added while Run runs: it starts at once.
	waitFor(t, time.Minute, "the informer added while running to sync", func() bool { return inf.HasSynced() && inf.Indexer().Len() == n })
	cached := heapInUse()

	if err := manager.Release(m, again); err != nil {
		t.Fatal(err)
	}
	if st := m.Informers(); len(st) != 2 || st[1].Users != 1 {
		t.Fatalf("after one of two Releases: %+v, want the informer kept with 1 user", st)
	}
	if err := manager.Release(m, inf); err != nil {
		t.Fatal(err)
	}
	if st := m.Informers(); len(st) != 1 {
		t.Fatalf("after the last Release the manager still holds %d informers", len(st))
	}
	if err := manager.Release(m, inf); err == nil {
		t.Fatal("a third Release of a two-user informer succeeded")
	}
	inf, again = nil, nil
	after := heapInUse()

	held := int64(cached) - int64(before)
	left := int64(after) - int64(before)
	t.Logf("%d ConfigMaps of 1 KiB: heap %d MiB before, %d MiB cached (+%d KiB), %d MiB after Release (%+d KiB left)",
		n, before>>20, cached>>20, held>>10, after>>20, left>>10)
	if held < int64(n)*1024 {
		t.Fatalf("the cache added only %d bytes for %d objects of 1 KiB: the measure is wrong", held, n)
	}
	if left > held/10 {
		t.Errorf("after Release %d of the cache's %d bytes are still in use", left, held)
	}

	// Asking again makes a new, running informer: it sees an object created
	// after the old one stopped.
	inf, err = manager.Typed[*corev1.ConfigMap](m, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-release"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "a new informer to sync and see a new object", func() bool { return inf.HasSynced() && inf.Indexer().Len() == n+1 })
}
