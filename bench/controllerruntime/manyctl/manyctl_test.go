//go:build e2e

package manyctl

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ctrlkit/ctrlkit/bench/controllerruntime/latency"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/testenv"
)

// env is the control plane shared by the benchmarks of the package.
var env *testenv.Env

func TestMain(m *testing.M) {
	crlog.SetLogger(logr.Discard())
	os.Exit(testenv.RunTests(m, testenv.Config{}, &env, leakcheck.Check))
}

// The workload.
const (
	numKeys      = 2000 // ConfigMaps
	numSecrets   = 200  // Secrets, named as the first ConfigMaps
	objectSize   = 1024 // bytes of payload per ConfigMap
	burstWrites  = 1000 // updates of the burst, one per key
	burstWorkers = 16   // writes in flight
	limit        = 2 * time.Minute
)

var controllerCounts = []int{1, 10, 30}

type side struct {
	name  string
	start Start
}

var sides = []side{
	{"ctrlkit", StartCtrlkit},
	{"controller-runtime", StartControllerRuntime},
	{"controller-runtime-nocopy", StartControllerRuntimeNoCopy},
}

// result is one side's figures of one round.
type result struct {
	start, burst time.Duration // start → every controller reconciled every key; burst's first send → every controller reconciled every update
	p50, p99     time.Duration // an update's send → a controller's reconcile that saw it, over every (controller, update)
	heap         float64       // MB of live heap over the baseline, caches synced and every key reconciled
	startCPU     time.Duration // process CPU (user+system) of the start phase
	burstCPU     time.Duration // process CPU of the burst, the writer's included
	informers    int
}

// BenchmarkManyControllers runs N controllers (1, 10 and 30) in one manager on
// shared informers, ctrlkit against controller-runtime, on testenv's
// kube-apiserver, with 2,000 ConfigMaps of 1 KiB and 200 Secrets pre-created.
// Every controller watches the ConfigMaps, every third also the Secrets (keyed
// by name, so a Secret maps to the ConfigMap of its name); a reconcile gets its
// ConfigMap from the cache and nothing else: ctrlkit from the shared
// informer's lister, controller-runtime through the manager's client, with its
// default deep copy (impl=controller-runtime) and without it
// (impl=controller-runtime-nocopy, DefaultUnsafeDisableDeepCopy, which reads
// the cache as ctrlkit's lister does). Each round runs the sides one after the
// other, the order rotated by one each round, each with a fresh manager:
// start, wait until every controller reconciled every key, measure the heap,
// then update 1,000 ConfigMaps once each (16 writes in flight) and wait until
// every controller reconciled every update.
//
// All rounds run first; then each sub-benchmark "ctrl=<N>/impl=<side>" reports
// one round per call, so -count 5 prints five lines per side. Run it with
// -benchtime 1x; ns/op means nothing here. Metrics: start-ms, burst-ms (the
// 1,000 writes take most of it, for both: a controller usually reconciles the
// last update before its write is answered), lat-p50-ms and lat-p99-ms (an update's send → each controller's reconcile of
// it), heap-MB (live heap above the baseline after two GCs, caches synced),
// start-cpu-ms and burst-cpu-ms (this process's CPU in each phase; the API
// server and etcd are other processes). The caches are one copy on both
// sides: heap-MB grows by well under a cache's size (about 4.5 MB at 1
// controller) per controller added; ctrlkit's manager also reports exactly two
// informers, checked every round.
func BenchmarkManyControllers(b *testing.B) {
	rounds := 1
	if f := flag.Lookup("test.count"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n > 0 {
			rounds = n
		}
	}
	ctx := b.Context()
	ns := env.Namespace(b)
	admin := kubernetes.NewForConfigOrDie(env.Config())
	if err := latency.CreateConfigMaps(ctx, admin, ns, numKeys, objectSize); err != nil {
		b.Fatal(err)
	}
	for i := range numSecrets {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: latency.KeyName(i)}, Data: map[string][]byte{"k": []byte("v")}}
		if _, err := admin.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(env.Config())
	cfg.QPS, cfg.Burst = 1e6, 1e6
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	writer := kubernetes.NewForConfigOrDie(cfg)

	nameOf := func(n int, s side) string { return fmt.Sprintf("ctrl=%d/impl=%s", n, s.name) }
	results := map[string][]result{}
	seq := 0
	for _, n := range controllerCounts {
		for r := range rounds {
			order := append(slices.Clone(sides[r%len(sides):]), sides[:r%len(sides)]...)
			for _, s := range order {
				seq++
				res := runOnce(ctx, b, s, n, ns, writer, seq)
				name := nameOf(n, s)
				results[name] = append(results[name], res)
				b.Logf("round %d %s: start %v, burst %v, lat p50 %v p99 %v, heap %.1f MB, cpu start %v burst %v, informers %d; load %s",
					r+1, name, res.start.Round(time.Millisecond), res.burst.Round(time.Millisecond), res.p50.Round(100*time.Microsecond), res.p99.Round(100*time.Microsecond),
					res.heap, res.startCPU.Round(time.Millisecond), res.burstCPU.Round(time.Millisecond), res.informers, loadavg())
			}
		}
	}
	for _, n := range controllerCounts {
		for _, s := range sides {
			name := nameOf(n, s)
			next := 0
			b.Run(name, func(b *testing.B) {
				rs := results[name]
				res := rs[next%len(rs)]
				next++
				b.ReportMetric(ms(res.start), "start-ms")
				b.ReportMetric(ms(res.burst), "burst-ms")
				b.ReportMetric(ms(res.p50), "lat-p50-ms")
				b.ReportMetric(ms(res.p99), "lat-p99-ms")
				b.ReportMetric(res.heap, "heap-MB")
				b.ReportMetric(ms(res.startCPU), "start-cpu-ms")
				b.ReportMetric(ms(res.burstCPU), "burst-cpu-ms")
			})
		}
	}
}

// runOnce starts side s with n controllers, measures it and stops it.
func runOnce(ctx context.Context, b *testing.B, s side, n int, ns string, writer kubernetes.Interface, seq int) result {
	b.Helper()
	var res result
	recs := make([]*Recorder, n)
	for i := range recs {
		recs[i] = NewRecorder(numKeys)
	}
	base := liveHeap()

	cpu0 := cpuTime()
	t0 := latency.Now()
	stop, informers, err := s.start(ctx, env.Config(), Config{Namespace: ns, Recorders: recs})
	if err != nil {
		b.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			if err := stop(); err != nil {
				b.Errorf("%s: %v", s.name, err)
			}
		}
	}()
	if !latency.Poll(ctx, limit, func() bool {
		for _, r := range recs {
			if r.Distinct() < numKeys {
				return false
			}
		}
		return true
	}) {
		b.Fatalf("%s, %d controllers: not every key reconciled by every controller after %v (%d of %d by the first)", s.name, n, limit, recs[0].Distinct(), numKeys)
	}
	res.startCPU = cpuTime() - cpu0
	for _, r := range recs {
		res.start = max(res.start, r.LastFirst()-t0)
		if r.Errors() > 0 {
			b.Fatalf("%s: %d reconciles failed", s.name, r.Errors())
		}
	}
	res.informers = informers()
	if res.informers >= 0 && res.informers != 2 {
		b.Fatalf("%s: %d informers, want 2 (ConfigMaps and Secrets, shared by %d controllers)", s.name, res.informers, n)
	}
	res.heap = float64(liveHeap()-base) / 1e6

	// The burst: each of the first burstWrites keys updated once.
	target := make([]int64, numKeys)
	sent := make([]time.Duration, numKeys)
	cpu0 = cpuTime()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, burstWorkers)
	burst0 := latency.Now()
	for w := range burstWorkers {
		wg.Go(func() {
			for {
				k := int(next.Add(1) - 1)
				if k >= burstWrites {
					return
				}
				patch := fmt.Appendf(nil, `{"data":{"t":"%d"}}`, seq)
				sent[k] = latency.Now()
				cm, err := writer.CoreV1().ConfigMaps(ns).Patch(ctx, latency.KeyName(k), types.MergePatchType, patch, metav1.PatchOptions{})
				if err != nil {
					errs[w] = err
					return
				}
				v, err := strconv.ParseInt(cm.ResourceVersion, 10, 64)
				if err != nil {
					errs[w] = err
					return
				}
				target[k] = v
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatalf("burst write: %v", err)
		}
	}
	if !latency.Poll(ctx, limit, func() bool {
		for _, r := range recs {
			if !r.Covered(target) {
				return false
			}
		}
		return true
	}) {
		b.Fatalf("%s, %d controllers: the burst not reconciled by every controller after %v", s.name, n, limit)
	}
	res.burstCPU = cpuTime() - cpu0
	var delays []time.Duration
	for _, r := range recs {
		var last time.Duration
		delays, last, err = r.Delays(delays, target, sent)
		if err != nil {
			b.Fatalf("%s: %v", s.name, err)
		}
		res.burst = max(res.burst, last-burst0)
		if r.Errors() > 0 {
			b.Fatalf("%s: %d reconciles failed", s.name, r.Errors())
		}
	}
	if len(delays) != n*burstWrites {
		b.Fatalf("%s: %d delays, want %d", s.name, len(delays), n*burstWrites)
	}
	slices.Sort(delays)
	res.p50 = delays[len(delays)/2]
	res.p99 = delays[len(delays)*99/100]

	stopped = true
	if err := stop(); err != nil {
		b.Fatalf("%s: %v", s.name, err)
	}
	return res
}

// liveHeap returns the live heap in bytes after two garbage collections.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// cpuTime returns the user and system CPU this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
