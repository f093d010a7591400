//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
)

// createConfigMaps creates n ConfigMaps named cm-0 … cm-(n-1) in ns, each with
// a value of size bytes, from workers goroutines.
func createConfigMaps(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns string, n, size, workers int) {
	t.Helper()
	value := string(make([]byte, size))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)},
					Data:       map[string]string{"v": value},
				}
				if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating ConfigMaps: %v", err)
	}
}

// sizeFromEnv reads a positive count from the environment, or returns def.
func sizeFromEnv(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// waitFor polls cond every 5ms until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runManager runs m until the function it returns is called (or the test ends),
// which then checks that Run returned nil.
func runManager(ctx context.Context, t *testing.T, m *manager.Manager) (stop func()) {
	t.Helper()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// addConfigMapController adds to m a controller named by cfg that reconciles
// every ConfigMap of inf with fn.
func addConfigMapController(t *testing.T, m *manager.Manager, inf *informer.Informer[*corev1.ConfigMap], cfg reconcile.Config[types.NamespacedName], fn reconcile.Func[types.NamespacedName]) {
	t.Helper()
	c := reconcile.New(fn, cfg)
	if err := c.Watch(reconcile.FromInformer(inf, reconcile.ByObject[*corev1.ConfigMap]())); err != nil {
		t.Fatal(err)
	}
	if err := m.Add(c); err != nil {
		t.Fatal(err)
	}
}
