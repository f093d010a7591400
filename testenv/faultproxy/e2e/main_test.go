//go:build e2e

// Package e2e tests the fault proxy in front of the real etcd and kube-apiserver that
// testenv starts, with a ctrlkit informer as the client: delayed events, dropped
// watches, injected 410s and stale LISTs.
package e2e

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/testenv"
	"github.com/ctrlkit/ctrlkit/testenv/faultproxy"
)

// env is the control plane shared by every test of the package.
var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunTests(m, testenv.Config{}, &env, leakcheck.Check))
}

// converge bounds every wait for the cache to match the server.
const converge = 30 * time.Second

// startProxy starts a proxy in front of the environment's API server, closed at the
// end of the test.
func startProxy(t *testing.T, cfg faultproxy.Config) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(t.Context(), env.Config(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// direct is a client that bypasses the proxy.
func direct(t *testing.T) *kubernetes.Clientset {
	t.Helper()
	return kubernetes.NewForConfigOrDie(env.Config())
}

// runInformer runs an informer of the ConfigMaps of ns through cfg (the proxy's)
// until the end of the test, and waits for it to sync.
func runInformer(t *testing.T, cfg *rest.Config, ns string, wl reflector.WatchListMode) *informer.Informer[*corev1.ConfigMap] {
	t.Helper()
	cfg.Timeout = 30 * time.Second
	inf := informer.New(reflector.FromTyped(kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps(ns)), informer.Config[*corev1.ConfigMap]{
		Reflector: reflector.Config[*corev1.ConfigMap]{
			WatchList: wl,
			Backoff:   reflector.Backoff{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond},
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Error(err)
		}
	})
	sctx, scancel := context.WithTimeout(t.Context(), converge)
	defer scancel()
	if err := inf.WaitForSync(sctx); err != nil {
		t.Fatalf("sync: %v (health %+v)", err, inf.Health())
	}
	return inf
}

// createConfigMaps creates n ConfigMaps prefix-0 … directly and returns the
// resourceVersion of the last.
func createConfigMaps(t *testing.T, ns, prefix string, n int) string {
	t.Helper()
	var rv string
	for i := range n {
		cm, err := direct(t).CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + strconv.Itoa(i)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rv = cm.ResourceVersion
	}
	return rv
}

// waitConverged waits until the cache holds exactly what a direct LIST of ns sees.
func waitConverged(t *testing.T, inf *informer.Informer[*corev1.ConfigMap], ns string) {
	t.Helper()
	list, err := direct(t).CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, c := range list.Items {
		want[c.Name] = c.ResourceVersion
	}
	ctx, cancel := context.WithTimeout(t.Context(), converge)
	defer cancel()
	if err := inf.WaitForResourceVersion(ctx, list.ResourceVersion); err != nil {
		t.Fatalf("cache did not reach %s: %v (health %+v)", list.ResourceVersion, err, inf.Health())
	}
	got := map[string]string{}
	cached, err := inf.Lister().List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cached {
		got[c.Name] = c.ResourceVersion
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cache (-server +cache):\n%s", diff)
	}
}
