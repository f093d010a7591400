//go:build e2e

package stale

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/testenv"
	"github.com/ctrlkit/ctrlkit/testenv/faultproxy"
)

// env is the control plane shared by the tests of the package.
var env *testenv.Env

func TestMain(m *testing.M) {
	// controller-runtime's loggers all delegate to this one; without it the
	// package warns on stderr after 30s.
	crlog.SetLogger(logr.Discard())
	os.Exit(testenv.RunTests(m, testenv.Config{}, &env, leakcheck.Check))
}

// The workload. CTRLKIT_STALE_SEED, CTRLKIT_STALE_CHANGES and
// CTRLKIT_STALE_MAX_DELAY override the seed, the number of scale changes and the
// largest delay of a Pod watch event.
const (
	numPodSets      = 4
	maxReplicas     = 10
	batchSize       = 20                    // scale changes between two settle points
	changeGap       = 50 * time.Millisecond // between two scale changes of a batch
	defaultMaxDelay = time.Second           // Pod watch events are delayed by [0, max delay]
	minQuiet        = time.Second           // quiescence is no Pod change for max(2 × max delay, minQuiet)
	quietLimit      = time.Minute           // a settle point gives up waiting after this
)

// result is what one variant did over the whole workload.
type result struct {
	variant  string
	seed     uint64
	changes  int
	maxDelay time.Duration
	settles  int
	// While a batch ran: Pods created beyond the largest spec.replicas the PodSet
	// had since the last settle point, Pods deleted below the smallest, and the
	// largest distance past either bound.
	excessCreates, excessDeletes int
	maxOver, maxUnder            int
	// At the settle points, summed: Pods beyond spec.replicas, Pods missing, Pods
	// without a controller, and settle points that were not quiet in quietLimit.
	extra, missing, orphans, noisy int
	creates, deletes               int   // Pod ADDED and DELETED events in all
	delayed                        int64 // watch events the proxy delayed
	elapsed                        time.Duration
}

// TestStaleCache runs the workload once per variant against the API server behind
// a proxy that delays Pod watch events by 0–1 s (CTRLKIT_STALE_MAX_DELAY), and
// logs what each variant did.
//
// It asserts that the harness works: its own watch of the Pods agrees with a LIST
// at every settle point; the default client, which trusts the lagging cache,
// creates Pods beyond spec.replicas; and once the proxy is gone a fresh manager of
// the same variant brings every PodSet to exactly spec.replicas Pods, none
// orphaned. What read-your-writes does is measured, not asserted.
func TestStaleCache(t *testing.T) {
	seed := envUint(t, "CTRLKIT_STALE_SEED", 1)
	changes := int(envUint(t, "CTRLKIT_STALE_CHANGES", 200))
	maxDelay := defaultMaxDelay
	if v := os.Getenv("CTRLKIT_STALE_MAX_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			t.Fatalf("CTRLKIT_STALE_MAX_DELAY=%q: want a duration of at least 0", v)
		}
		maxDelay = d
	}
	if err := podset.Install(t.Context(), env.Config()); err != nil {
		t.Fatal(err)
	}
	variants := []struct {
		name string
		cfg  Config
		// lags says the variant trusts the lagging cache: with the default
		// delays it must create Pods beyond the bounds, or the proxy's delays did
		// not reach the controller. (Shorter delays are measured, not asserted.)
		lags bool
	}{
		{"default-client", Config{}, true},
		{"read-your-writes", Config{ReadYourWrites: true}, false},
	}
	var results []result
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			r := runWorkload(t, v.cfg, seed, changes, maxDelay)
			r.variant = v.name
			results = append(results, r)
			if v.lags && maxDelay >= defaultMaxDelay && r.excessCreates == 0 {
				t.Errorf("no Pod created beyond spec.replicas in %d changes: the controller's cache did not lag", changes)
			}
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| variant | seed | K | max delay | settles | excess creates | max over | excess deletes | max under | extra@settle | missing@settle | orphans@settle | not quiet | creates | deletes | delayed events | time |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %d | %d | %v | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %.0fs |\n",
			r.variant, r.seed, r.changes, r.maxDelay, r.settles, r.excessCreates, r.maxOver, r.excessDeletes, r.maxUnder,
			r.extra, r.missing, r.orphans, r.noisy, r.creates, r.deletes, r.delayed, r.elapsed.Seconds())
	}
	t.Log(b.String())
}

// runWorkload scales numPodSets PodSets changes times, in batches, through a
// manager of variant cfg behind the delaying proxy, and measures at each settle
// point. Then it removes the proxy, restarts the manager on the server directly and
// checks that every PodSet converges.
func runWorkload(t *testing.T, cfg Config, seed uint64, changes int, maxDelay time.Duration) result {
	start := time.Now()
	ctx := t.Context()
	quiet := max(2*maxDelay, minQuiet)
	ns := env.Namespace(t)
	cfg.Namespace = ns
	live := liveClient(t)

	names := make([]string, numPodSets)
	for i := range names {
		names[i] = "set-" + strconv.Itoa(i)
		createPodSet(t, live, ns, names[i])
	}
	tr := watchPods(t, ns, names)

	proxy, err := faultproxy.Start(ctx, env.Config(), faultproxy.Config{Seed: seed, Rules: []faultproxy.Rule{
		{Resource: "pods", DelayWatchEvents: faultproxy.Delay{Max: maxDelay}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := proxy.Close(); err != nil {
			t.Error(err)
		}
	}()
	stop := startManager(t, proxy.Config(), cfg)

	res := result{seed: seed, changes: changes, maxDelay: maxDelay}
	rng := rand.New(rand.NewPCG(seed, 1))
	desired := make([]int, numPodSets)
	gap := time.NewTimer(0)
	defer gap.Stop()
	<-gap.C
	for done := 0; done < changes; {
		for b := 0; b < batchSize && done < changes; b++ {
			i, n := rng.IntN(numPodSets), rng.IntN(maxReplicas+1)
			desired[i] = n
			tr.widen(i, n) // before the change, so no Pod made for it is counted as excess
			scale(t, live, ns, names[i], n)
			done++
			gap.Reset(changeGap)
			select {
			case <-gap.C:
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
		if !tr.waitQuiet(ctx, quiet, quietLimit) {
			res.noisy++
		}
		extra, missing, orphans := tr.check(t, live, ns, desired)
		res.extra += extra
		res.missing += missing
		res.orphans += orphans
		res.settles++
		tr.settle(desired)
	}
	stop()
	s := tr.snapshot()
	res.excessCreates, res.excessDeletes, res.maxOver, res.maxUnder = s.excessCreates, s.excessDeletes, s.maxOver, s.maxUnder
	res.creates, res.deletes = s.creates, s.deletes
	res.delayed = proxy.Stats()["pods"].Delayed
	res.elapsed = time.Since(start)
	t.Logf("seed %d, %d changes, %d settle points: %d excess creates (max %d over), %d excess deletes (max %d under); at settle points %d extra, %d missing, %d orphans, %d not quiet",
		seed, changes, res.settles, res.excessCreates, res.maxOver, res.excessDeletes, res.maxUnder, res.extra, res.missing, res.orphans, res.noisy)

	// Without the proxy a fresh manager lists everything and must converge.
	if err := proxy.Close(); err != nil {
		t.Error(err)
	}
	startManager(t, env.Config(), cfg)
	tr.touch() // quiescence counts from the manager's start
	if !tr.waitQuiet(ctx, quiet, quietLimit) {
		t.Fatalf("Pods still changing %v after the proxy was removed", quietLimit)
	}
	if extra, missing, orphans := tr.check(t, live, ns, desired); extra+missing+orphans != 0 {
		t.Errorf("without the proxy: %d extra, %d missing, %d orphaned Pods; want none", extra, missing, orphans)
	}
	return res
}

// envUint reads a positive integer from the environment variable name, or
// returns def when it is unset.
func envUint(t *testing.T, name string, def uint64) uint64 {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// liveClient returns an uncached client of the API server itself, not of the proxy.
func liveClient(t *testing.T) client.Client {
	t.Helper()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// createPodSet creates a PodSet of 0 replicas selecting app=name.
func createPodSet(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	labels := map[string]string{"app": name}
	ps := &podset.PodSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: podset.PodSetSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	if err := c.Create(t.Context(), ps); err != nil {
		t.Fatal(err)
	}
}

// scale sets spec.replicas of a PodSet on the server.
func scale(t *testing.T, c client.Client, ns, name string, n int) {
	t.Helper()
	ps := &podset.PodSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n))
	if err := c.Patch(t.Context(), ps, patch); err != nil {
		t.Fatal(err)
	}
}

// startManager starts a manager of cfg on restCfg and returns the function that
// stops it and waits for it; the test's cleanup calls it too.
func startManager(t *testing.T, restCfg *rest.Config, cfg Config) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	mgr, err := NewManager(ctx, restCfg, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// podStats are the counters of a tracker.
type podStats struct {
	creates, deletes             int
	excessCreates, excessDeletes int
	maxOver, maxUnder            int
}

// tracker follows the Pods of a namespace through a watch of the API server
// itself, and holds per PodSet the bounds a correct controller stays within: as
// many Pods as the largest spec.replicas since the last settle point at most, as
// many as the smallest at least. All fields require mu held.
type tracker struct {
	names []string // PodSet names by index

	mu      sync.Mutex
	count   map[string]int // PodSet name → Pods it controls; "" → Pods without a controller
	hi, lo  []int          // by PodSet index
	stats   podStats
	last    time.Time     // of the last Pod event
	changed chan struct{} // capacity 1, signalled on every Pod event
	err     error         // why the watch ended early
}

// watchPods starts a tracker of the Pods of ns; the test's cleanup stops it.
func watchPods(t *testing.T, ns string, names []string) *tracker {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	pods := cs.CoreV1().Pods(ns)
	list, err := pods.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr := &tracker{
		names:   names,
		count:   map[string]int{},
		hi:      make([]int, len(names)),
		lo:      make([]int, len(names)),
		last:    time.Now(),
		changed: make(chan struct{}, 1),
	}
	for i := range list.Items {
		tr.count[owner(&list.Items[i])]++
	}
	w, err := pods.Watch(t.Context(), metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.follow(w.ResultChan())
	}()
	t.Cleanup(func() {
		w.Stop()
		<-done
	})
	return tr
}

// owner returns the name of the PodSet controlling p, or "".
func owner(p *corev1.Pod) string {
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == podset.Kind {
		return ref.Name
	}
	return ""
}

// follow applies the watch events to the counts until the watch ends.
func (tr *tracker) follow(events <-chan watch.Event) {
	for ev := range events {
		p, ok := ev.Object.(*corev1.Pod)
		tr.mu.Lock()
		switch {
		case !ok:
			tr.err = fmt.Errorf("watch event %s of %T", ev.Type, ev.Object)
		case ev.Type == watch.Added:
			tr.add(owner(p), 1)
		case ev.Type == watch.Deleted:
			tr.add(owner(p), -1)
		}
		tr.last = time.Now()
		tr.mu.Unlock()
		select {
		case tr.changed <- struct{}{}:
		default:
		}
	}
	tr.mu.Lock()
	if tr.err == nil {
		tr.err = errors.New("watch ended") // seen only if it ends before the test does
	}
	tr.mu.Unlock()
}

// add changes the count of PodSet name by d and checks the bounds. Requires mu held.
func (tr *tracker) add(name string, d int) {
	tr.count[name] += d
	n := tr.count[name]
	if d > 0 {
		tr.stats.creates++
	} else {
		tr.stats.deletes++
	}
	i := slices.Index(tr.names, name)
	if i < 0 {
		return
	}
	if over := n - tr.hi[i]; d > 0 && over > 0 {
		tr.stats.excessCreates++
		tr.stats.maxOver = max(tr.stats.maxOver, over)
	}
	if under := tr.lo[i] - n; d < 0 && under > 0 {
		tr.stats.excessDeletes++
		tr.stats.maxUnder = max(tr.stats.maxUnder, under)
	}
}

// widen lets PodSet i have n Pods from now on.
func (tr *tracker) widen(i, n int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.hi[i] = max(tr.hi[i], n)
	tr.lo[i] = min(tr.lo[i], n)
}

// touch counts the time without Pod events from now.
func (tr *tracker) touch() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.last = time.Now()
}

// settle narrows every PodSet's bounds to its desired count.
func (tr *tracker) settle(desired []int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	copy(tr.hi, desired)
	copy(tr.lo, desired)
}

func (tr *tracker) snapshot() podStats {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.stats
}

// waitQuiet waits until no Pod event has come for quiet, and reports whether that
// happened within limit.
func (tr *tracker) waitQuiet(ctx context.Context, quiet, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	timer := time.NewTimer(quiet)
	defer timer.Stop()
	for {
		tr.mu.Lock()
		left := quiet - time.Since(tr.last)
		tr.mu.Unlock()
		if left <= 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		timer.Reset(left)
		select {
		case <-timer.C:
		case <-tr.changed:
		case <-ctx.Done():
			return false
		}
	}
}

// check lists the Pods of ns on the server, fails t if the tracker's counts
// disagree, and returns the Pods beyond and below desired and those without a
// controller.
func (tr *tracker) check(t *testing.T, c client.Client, ns string, desired []int) (extra, missing, orphans int) {
	t.Helper()
	var list corev1.PodList
	if err := c.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for i := range list.Items {
		if p := &list.Items[i]; p.DeletionTimestamp == nil {
			got[owner(p)]++
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.err != nil {
		t.Fatalf("pod watch: %v", tr.err)
	}
	for name, n := range tr.count {
		if n != got[name] {
			t.Errorf("tracker counts %d Pods of %q, the server lists %d", n, name, got[name])
		}
	}
	for i, name := range tr.names {
		extra += max(0, got[name]-desired[i])
		missing += max(0, desired[i]-got[name])
	}
	return extra, missing, got[""]
}
