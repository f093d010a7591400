//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/testenv/faultproxy"
)

// cacheWaits counts read-your-writes waits.
type cacheWaits struct {
	skips, waits, timeouts atomic.Int64
}

func (m *cacheWaits) Workers(int)                                        {}
func (m *cacheWaits) ReconcileStarted()                                  {}
func (m *cacheWaits) ReconcileFinished(reconcile.Outcome, time.Duration) {}
func (m *cacheWaits) Panicked()                                          {}
func (m *cacheWaits) SourcePanicked()                                    {}
func (m *cacheWaits) StaleSkipped()                                      { m.skips.Add(1) }
func (m *cacheWaits) CacheWaited(_ time.Duration, timedOut bool) {
	m.waits.Add(1)
	if timedOut {
		m.timeouts.Add(1)
	}
}

// TestReadYourWritesUnderDelayedWatch: through a proxy that delays every
// ConfigMap watch event by 100–300 ms, a controller counts each ConfigMap's
// data up to 10, one update per reconcile, requeued at once, reading the count
// from its cache and updating with the cached resourceVersion. With
// read-your-writes (the default) it never acts on a cache that lacks its own
// last write: 0 conflicts. With it off, the same run updates from stale copies
// and the server answers Conflict.
func TestReadYourWritesUnderDelayedWatch(t *testing.T) {
	const objects, target = 5, 10
	for _, tc := range []struct {
		name    string
		timeout time.Duration
	}{{"on", 0}, {"off", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ns := env.Namespace(t)
			direct := kubernetes.NewForConfigOrDie(env.Config())
			for i := range objects {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"count": "0"}}
				if _, err := direct.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			p, err := faultproxy.Start(ctx, env.Config(), faultproxy.Config{Seed: 7, Rules: []faultproxy.Rule{
				{Resource: "configmaps", DelayWatchEvents: faultproxy.Delay{Min: 100 * time.Millisecond, Max: 300 * time.Millisecond}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			m, err := manager.New(manager.Config{RESTConfig: p.Config()})
			if err != nil {
				t.Fatal(err)
			}
			cms, err := manager.Typed[*corev1.ConfigMap](m, manager.Options[*corev1.ConfigMap]{Namespace: ns})
			if err != nil {
				t.Fatal(err)
			}
			var conflicts, updates atomic.Int64
			waits := &cacheWaits{}
			addConfigMapController(t, m, cms, reconcile.Config[types.NamespacedName]{Name: "counter-" + tc.name, Workers: 2, CacheWaitTimeout: tc.timeout, Metrics: waits},
				func(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
					cm, err := cms.Lister().Get(key.Namespace, key.Name)
					if err != nil {
						return reconcile.Result{}, nil
					}
					n, _ := strconv.Atoi(cm.Data["count"])
					if n >= target {
						return reconcile.Result{}, nil
					}
					cp := cm.DeepCopy()
					cp.Data["count"] = strconv.Itoa(n + 1)
					if _, err := m.Kubernetes().CoreV1().ConfigMaps(key.Namespace).Update(ctx, cp, metav1.UpdateOptions{}); err != nil {
						if apierrors.IsConflict(err) {
							conflicts.Add(1)
						}
						return reconcile.Result{}, err
					}
					updates.Add(1)
					return reconcile.Result{RequeueAfter: time.Millisecond}, nil
				})
			start := time.Now()
			stop := runManager(ctx, t, m)
			waitFor(t, time.Minute, "every count to reach the target", func() bool {
				list, err := direct.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				done := 0
				for _, cm := range list.Items {
					if cm.Data["count"] == strconv.Itoa(target) {
						done++
					}
				}
				return done == objects
			})
			// The last update may be on the server before its reconcile has
			// counted it: stop, which waits for the reconciles, before counting.
			stop()
			t.Logf("read-your-writes %s: %d updates, %d conflicts, %d stale skips, %d waits (%d timed out), %v",
				tc.name, updates.Load(), conflicts.Load(), waits.skips.Load(), waits.waits.Load(), waits.timeouts.Load(), time.Since(start).Round(time.Millisecond))
			if updates.Load() != objects*target {
				t.Errorf("%d successful updates, want %d", updates.Load(), objects*target)
			}
			switch tc.name {
			case "on":
				if conflicts.Load() != 0 || waits.skips.Load() == 0 || waits.timeouts.Load() != 0 {
					t.Errorf("with read-your-writes: %d conflicts (want 0), %d stale skips (want some), %d timeouts (want 0)", conflicts.Load(), waits.skips.Load(), waits.timeouts.Load())
				}
			case "off":
				if conflicts.Load() == 0 {
					t.Errorf("without read-your-writes no update met a stale cache: the proxy's delay did not show")
				}
			}
		})
	}
}
