//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
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
	const objects, target = 5, 30
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
			lat := &rywLatency{cache: cms, cacheAt: map[string]time.Time{}, pending: map[string]pendingWrite{}}
			waits := &cacheWaits{}
			addConfigMapController(t, m, cms, reconcile.Config[types.NamespacedName]{Name: "counter-" + tc.name, Workers: objects, CacheWaitTimeout: tc.timeout, Metrics: waits},
				func(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
					lat.started(key.Name)
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
					updated, err := m.Kubernetes().CoreV1().ConfigMaps(key.Namespace).Update(ctx, cp, metav1.UpdateOptions{})
					if err != nil {
						if apierrors.IsConflict(err) {
							conflicts.Add(1)
						}
						return reconcile.Result{}, err
					}
					updates.Add(1)
					lat.wrote(ctx, key.Name, updated.ResourceVersion)
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
				added, lags, early := lat.summary()
				t.Logf("read-your-writes on: %d rereconciles after a write: added latency over the cache's own lag p50 %v p99 %v max %v; cache lag p50 %v p99 %v; %d of them started before the test's own waiter noted the cache (counted as 0)",
					len(added), pct(added, 50), pct(added, 99), pct(added, 100), pct(lags, 50), pct(lags, 99), early)
				if len(added) == 0 || pct(added, 50) > 5*time.Millisecond {
					t.Errorf("added latency p50 %v over %d rereconciles: the key is not woken when its cache catches up", pct(added, 50), len(added))
				}
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

// rywLatency measures what read-your-writes adds to a key's next reconcile
// after a write: from the moment the cache reached the write (seen by a
// WaitForResourceVersion of the test's own, woken as the controller's is)
// to the start of that reconcile, which without read-your-writes would have
// started a millisecond after the write (RequeueAfter).
type rywLatency struct {
	cache interface {
		WaitForResourceVersion(ctx context.Context, rv string) error
	}
	mu      sync.Mutex
	cacheAt map[string]time.Time // key/rv → when the cache reached rv
	pending map[string]pendingWrite
	added   []time.Duration
	lags    []time.Duration
	early   int
}

type pendingWrite struct {
	rv string
	at time.Time
}

func (l *rywLatency) wrote(ctx context.Context, key, rv string) {
	now := time.Now()
	l.mu.Lock()
	l.pending[key] = pendingWrite{rv: rv, at: now}
	l.mu.Unlock()
	go func() {
		if l.cache.WaitForResourceVersion(context.WithoutCancel(ctx), rv) == nil {
			t := time.Now()
			l.mu.Lock()
			l.cacheAt[key+"/"+rv] = t
			l.mu.Unlock()
		}
	}()
}

func (l *rywLatency) started(key string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.pending[key]
	if !ok {
		return
	}
	delete(l.pending, key)
	c, ok := l.cacheAt[key+"/"+p.rv]
	if !ok {
		// Admitted before the test's waiter, woken at the same moment, noted
		// the time: nothing added.
		l.early++
		l.added = append(l.added, 0)
		return
	}
	from := c // the reconcile could not start before the cache had the write
	if due := p.at.Add(time.Millisecond); due.After(from) {
		from = due // nor before its RequeueAfter
	}
	l.added = append(l.added, now.Sub(from))
	l.lags = append(l.lags, c.Sub(p.at))
}

func (l *rywLatency) summary() (added, lags []time.Duration, early int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.added), slices.Clone(l.lags), l.early
}

// pct returns the p-th percentile of ds (100: the maximum), 0 if empty.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}
