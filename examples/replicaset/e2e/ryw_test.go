//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/testrun"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/testenv/faultproxy"
)

// cacheWaits is a reconcile.Metrics that counts read-your-writes waits
// (reconcile.CacheWaitMetrics) and knows when the controller last did anything.
type cacheWaits struct {
	skips, waits, timeouts atomic.Int64
	reconciles, running    atomic.Int64
	last                   atomic.Int64 // UnixNano of the last reconcile start or end
}

func (m *cacheWaits) Workers(int) {}
func (m *cacheWaits) ReconcileStarted() {
	m.reconciles.Add(1)
	m.running.Add(1)
	m.last.Store(time.Now().UnixNano())
}
func (m *cacheWaits) ReconcileFinished(reconcile.Outcome, time.Duration) {
	m.running.Add(-1)
	m.last.Store(time.Now().UnixNano())
}
func (m *cacheWaits) Panicked()       {}
func (m *cacheWaits) SourcePanicked() {}
func (m *cacheWaits) StaleSkipped()   { m.skips.Add(1) }
func (m *cacheWaits) CacheWaited(_ time.Duration, timedOut bool) {
	m.waits.Add(1)
	if timedOut {
		m.timeouts.Add(1)
	}
}

// envInt reads a positive integer from the environment variable name, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// TestScaleChangesUnderDelayedWatch is the proof that read-your-writes alone keeps
// the PodSet controller from over-creating. The controller's manager talks to the
// server through a fault proxy that delays every watch event of Pods and PodSets by
// 0–1 s (seeded). A seeded workload makes CTRLKIT_SCALE_CHANGES (default 200)
// changes of spec.replicas, each to a random count in [0, 10], of a few PodSets, in
// batches. After each batch it waits for a settle point: the controller has no
// reconcile running and none started, and no Pod changed on the server, for longer
// than the largest delay, and every PodSet's status is of its latest generation. It
// then checks on the server, with a client that bypasses the proxy, that each
// PodSet controls exactly spec.replicas active Pods and that no orphan Pod matches
// a selector. Meanwhile an informer on that direct client watches every Pod
// change: a PodSet controlling more Pods than the largest replica count it had in
// the batch (the count at the last settle point included) has been given Pods no
// spec asked for; each such creation counts as over-created.
//
// With read-your-writes on (the default) every settle point is exact and no Pod is
// over-created. With it off (Options.UnsafeNoReadYourWrites) the same run shows the
// over-creation: a reconcile started by the first of its Pods' delayed events, or by
// its own status write, counts the Pods its cache shows and creates the rest again.
func TestScaleChangesUnderDelayedWatch(t *testing.T) {
	changes := envInt(t, "CTRLKIT_SCALE_CHANGES", 200)
	seed := uint64(envInt(t, "CTRLKIT_SCALE_SEED", 1))
	for _, tc := range []struct {
		name string
		ryw  bool
	}{{"on", true}, {"off", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each in a namespace of its own, with its own proxy and watcher
			r := runScaleChanges(t, changes, seed, tc.ryw)
			t.Logf("read-your-writes %s: K=%d seed=%d: %d settle points, %d of them inexact, %d over-created Pods, max overshoot %d, %d orphans; %d reconciles, %d stale skips, %d cache waits (%d timed out); %v",
				tc.name, changes, seed, r.settles, r.inexact, r.overCreated, r.maxOvershoot, r.orphans,
				r.reconciles, r.skips, r.waits, r.timeouts, r.took.Round(time.Millisecond))
			if tc.ryw {
				if r.inexact != 0 || r.overCreated != 0 || r.orphans != 0 || r.timeouts != 0 {
					t.Errorf("with read-your-writes: %d inexact settle points, %d over-created Pods, %d orphans, %d cache waits timed out; want 0 of each",
						r.inexact, r.overCreated, r.orphans, r.timeouts)
				}
				if r.skips == 0 {
					t.Error("with read-your-writes no reconcile was held back: the proxy's delays did not show")
				}
			} else if r.overCreated == 0 {
				t.Error("without read-your-writes no Pod was over-created: the race did not show")
			}
		})
	}
}

// scaleResult is what one run of the scale workload measured.
type scaleResult struct {
	settles, inexact          int
	overCreated, maxOvershoot int
	orphans                   int
	reconciles, skips, waits  int64
	timeouts                  int64
	took                      time.Duration
}

// scaleSets is how many PodSets the workload scales; batch how many changes it
// makes between settle points; quiet how long nothing must happen for a settle
// point (more than the largest delay of a watch event).
const (
	scaleSets  = 4
	batch      = 40
	maxDelay   = time.Second
	quiet      = maxDelay + 500*time.Millisecond
	maxScale   = 10
	settleWait = 2 * time.Minute
)

// podWatch follows, on the direct client, the active Pods each PodSet controls,
// and counts those beyond bound, the largest replica count a PodSet had since the
// last settle point.
type podWatch struct {
	mu          sync.Mutex
	owner       map[types.UID]types.UID // active Pod → its controller
	owned       map[types.UID]int       // PodSet → active Pods it controls
	bound       map[types.UID]int
	overCreated int
	overshoot   int
	last        time.Time // of the last Pod change
}

func (w *podWatch) set(p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = time.Now()
	ref := metav1.GetControllerOfNoCopy(p)
	active := ref != nil && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
	if old, ok := w.owner[p.UID]; ok && (!active || old != ref.UID) {
		delete(w.owner, p.UID)
		w.owned[old]--
	}
	if !active {
		return
	}
	if _, ok := w.owner[p.UID]; ok {
		return
	}
	w.owner[p.UID] = ref.UID
	w.owned[ref.UID]++
	if b, ok := w.bound[ref.UID]; ok && w.owned[ref.UID] > b {
		w.overCreated++
		w.overshoot = max(w.overshoot, w.owned[ref.UID]-b)
	}
}

func (w *podWatch) gone(p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = time.Now()
	if old, ok := w.owner[p.UID]; ok {
		delete(w.owner, p.UID)
		w.owned[old]--
	}
}

// raise makes the bound of PodSet uid at least n.
func (w *podWatch) raise(uid types.UID, n int) {
	w.mu.Lock()
	w.bound[uid] = max(w.bound[uid], n)
	w.mu.Unlock()
}

// reset sets the bound of PodSet uid to n.
func (w *podWatch) reset(uid types.UID, n int) {
	w.mu.Lock()
	w.bound[uid] = n
	w.mu.Unlock()
}

func (w *podWatch) lastChange() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// runScaleChanges runs the workload of TestScaleChangesUnderDelayedWatch once.
func runScaleChanges(t *testing.T, changes int, seed uint64, ryw bool) scaleResult {
	setup(t)
	ns := env.Namespace(t)
	rng := rand.New(rand.NewPCG(seed, 0x5ca1e))

	// The direct watcher, up before any Pod exists.
	w := &podWatch{owner: map[types.UID]types.UID{}, owned: map[types.UID]int{}, bound: map[types.UID]int{}}
	direct := adminKube(t)
	watched := informer.New(reflector.FromREST[*corev1.Pod](direct.CoreV1().RESTClient(), "pods", ns), informer.Config[*corev1.Pod]{Name: "direct pods"})
	if _, err := watched.AddHandler(informer.HandlerFuncs[*corev1.Pod]{
		AddFunc:    func(p *corev1.Pod, _ bool) { w.set(p) },
		UpdateFunc: func(_, p *corev1.Pod) { w.set(p) },
		DeleteFunc: func(d informer.Deleted[*corev1.Pod]) { w.gone(d.Obj) },
	}, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	testrun.Run(t, func(ctx context.Context) error { watched.Run(ctx); return nil })
	if err := watched.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}

	// The controller, through the proxy, as the least-privilege user.
	user, err := env.UserConfig("controller")
	if err != nil {
		t.Fatal(err)
	}
	delay := faultproxy.Delay{Min: 0, Max: maxDelay}
	p, err := faultproxy.Start(context.Background(), user, faultproxy.Config{Seed: seed, Rules: []faultproxy.Rule{
		{Resource: "pods", DelayWatchEvents: delay},
		{Resource: podset.Resource + "." + podset.Group, DelayWatchEvents: delay},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() }) // after the manager has stopped: cleanups run last first
	m, err := manager.New(manager.Config{RESTConfig: p.Config()})
	if err != nil {
		t.Fatal(err)
	}
	metrics := &cacheWaits{}
	if _, err := podset.New(m, podset.Options{Namespace: ns, Metrics: metrics, UnsafeNoReadYourWrites: !ryw}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	testrun.Run(t, m.Run)

	replicas := make([]int, scaleSets)
	uids := make([]types.UID, scaleSets)
	for i := range scaleSets {
		replicas[i] = rng.IntN(maxScale + 1)
		ps := createPodSet(t, ns, fmt.Sprintf("ps-%d", i), int32(replicas[i]))
		uids[i] = ps.UID
		w.reset(ps.UID, replicas[i])
	}
	var r scaleResult
	settle := func() {
		t.Helper()
		r.settles++
		waitSettled(t, ns, w, metrics)
		inexact, orphans := checkSettled(t, ns, replicas, uids, ryw)
		r.inexact += inexact
		r.orphans += orphans
		for i, uid := range uids {
			w.reset(uid, replicas[i])
		}
	}
	settle()
	for done := 0; done < changes; {
		for n := min(batch, changes-done); n > 0; n-- {
			i, to := rng.IntN(scaleSets), rng.IntN(maxScale+1)
			w.raise(uids[i], to) // before the write: the controller may act at once
			patchSpec(t, ns, fmt.Sprintf("ps-%d", i), fmt.Sprintf(`{"replicas":%d}`, to))
			replicas[i] = to
			done++
			pause := time.NewTimer(time.Duration(rng.IntN(60)) * time.Millisecond) // pace the workload, not a wait for state
			<-pause.C
		}
		settle()
	}
	r.took = time.Since(began)
	w.mu.Lock()
	r.overCreated, r.maxOvershoot = w.overCreated, w.overshoot
	w.mu.Unlock()
	r.reconciles, r.skips, r.waits, r.timeouts = metrics.reconciles.Load(), metrics.skips.Load(), metrics.waits.Load(), metrics.timeouts.Load()
	return r
}

// waitSettled waits for a settle point: for quiet, no reconcile ran or started and
// no Pod changed, and every PodSet's status, read on the server, is of its latest
// generation.
func waitSettled(t *testing.T, ns string, w *podWatch, metrics *cacheWaits) {
	t.Helper()
	eventually(t, settleWait, func() string {
		if n := metrics.running.Load(); n != 0 {
			return fmt.Sprintf("%d reconciles running", n)
		}
		last := w.lastChange()
		if rec := time.Unix(0, metrics.last.Load()); rec.After(last) {
			last = rec
		}
		if since := time.Since(last); since < quiet {
			return fmt.Sprintf("last activity %v ago, want %v of quiet", since.Round(time.Millisecond), quiet)
		}
		list, err := adminPodSets(t, ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range list.Items {
			ps, err := podset.FromUnstructured(&u)
			if err != nil {
				t.Fatal(err)
			}
			if ps.Status.ObservedGeneration != ps.Generation {
				return fmt.Sprintf("%s: status of generation %d, want %d", ps.Name, ps.Status.ObservedGeneration, ps.Generation)
			}
		}
		return ""
	})
}

// checkSettled compares, on the server, the active Pods each PodSet controls with
// its replicas, and counts the orphan Pods a selector matches. With
// read-your-writes a difference is an error; without, it is only counted.
func checkSettled(t *testing.T, ns string, replicas []int, uids []types.UID, ryw bool) (inexact, orphans int) {
	t.Helper()
	all := pods(t, ns)
	for i, uid := range uids {
		owned := ownedBy(all, uid)
		if len(owned) == replicas[i] {
			continue
		}
		inexact++
		if ryw {
			t.Errorf("settle point: ps-%d controls %d Pods %v, want %d", i, len(owned), names(owned), replicas[i])
		}
	}
	for _, p := range all {
		if metav1.GetControllerOfNoCopy(&p) != nil {
			continue
		}
		for i := range uids {
			if labels.SelectorFromSet(labels.Set{"app": fmt.Sprintf("ps-%d", i)}).Matches(labels.Set(p.Labels)) {
				orphans++
				t.Errorf("settle point: orphan Pod %s matches ps-%d", p.Name, i)
			}
		}
	}
	return inexact, orphans
}
