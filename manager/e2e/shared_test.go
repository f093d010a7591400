//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
)

// requestCounter counts the list and watch requests of each resource that pass
// through a rest.Config's transport.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int // "LIST pods", "WATCH configmaps"
}

func (c *requestCounter) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	c.counts = map[string]int{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet {
				parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
				resource := parts[len(parts)-1]
				kind := "LIST"
				if req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1" {
					kind = "WATCH"
				}
				c.mu.Lock()
				c.counts[kind+" "+resource]++
				c.mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

func (c *requestCounter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[key]
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestSharedInformers: two controllers that ask the manager for the same Pod and
// ConfigMap informers get the same ones, and the manager lists and watches each
// resource once, counted at the transport.
func TestSharedInformers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := env.Namespace(t)
	kube := kubernetes.NewForConfigOrDie(env.Config())
	for i := range 20 {
		_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	var counter requestCounter
	m, err := manager.New(manager.Config{RESTConfig: counter.wrap(env.Config())})
	if err != nil {
		t.Fatal(err)
	}
	var reconciled [2]sync.Map
	var calls [2]atomic.Int64
	for i := range 2 {
		cms, err := manager.Typed[*corev1.ConfigMap](m, manager.Options[*corev1.ConfigMap]{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		pods, err := manager.Typed[*corev1.Pod](m, manager.Options[*corev1.Pod]{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		c := reconcile.New(reconcile.Func[types.NamespacedName](func(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
			reconciled[i].Store(key.Name, true)
			calls[i].Add(1)
			return reconcile.Result{}, nil
		}), reconcile.Config[types.NamespacedName]{Name: fmt.Sprintf("c%d", i)})
		if err := c.Watch(reconcile.FromInformer(cms, reconcile.ByObject[*corev1.ConfigMap]())); err != nil {
			t.Fatal(err)
		}
		if err := c.Watch(reconcile.FromInformer(pods, reconcile.ByObject[*corev1.Pod]())); err != nil {
			t.Fatal(err)
		}
		if err := m.Add(c); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(m.Informers()); n != 2 {
		t.Fatalf("manager holds %d informers, want 2 (one per resource)", n)
	}
	stop := runManager(ctx, t, m)
	// Both controllers see every ConfigMap, and a new one.
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		for _, name := range []string{"cm-0", "cm-19", "late"} {
			for {
				if _, ok := reconciled[i].Load(name); ok {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("controller %d never reconciled %s", i, name)
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
	}
	stop()
	t.Logf("requests: %v", counter.counts)
	for _, res := range []string{"configmaps", "pods"} {
		lists, watches := counter.get("LIST "+res), counter.get("WATCH "+res)
		if lists+watches == 0 || lists > 1 || watches > 1 {
			t.Errorf("%s: %d LIST and %d WATCH requests, want one list (a LIST or a streaming WATCH) and at most one more WATCH", res, lists, watches)
		}
	}
}
