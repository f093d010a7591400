//go:build e2e

package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/testenv"
)

// The server benchmarks run both informers against testenv's real kube-apiserver
// and etcd, on the same clientset (protobuf), the same namespace of srvObjects small
// ConfigMaps and the same transform (managedFields stripped). Each one is a
// streaming watch-list where the server offers it, as both libraries default to.
// client-go lists and watches through the clientset's typed ConfigMaps client;
// ctrlkit through reflector.FromREST on the same clientset's core/v1 REST client,
// which reads the protobuf responses itself: during a relist it reads each
// object's namespace, name and resourceVersion from the wire and does not decode
// the objects its cache already holds at that version.
//
// One iteration starts an informer, waits for HasSynced (ns/op and sync-ms are
// that time), measures the live heap it holds (heap-MB: HeapAlloc after a GC,
// minus the same before the informer was created), then forces a relist and
// samples the heap every millisecond until the cache holds the new list
// (relist-peak-MB: the highest /memory/classes/heap/objects:bytes, garbage
// included, minus the same baseline). The relist is forced by testenv's Expire:
// writes to etcd outside the API server's data (so that the informer's
// resourceVersion falls behind), compaction, and the API server killed with
// SIGKILL and started again: its new watch cache cannot serve the informer's
// resourceVersion and answers 410 Gone.
//
// objects-MB is the live heap of the decoded objects alone, each allocated on
// its own as a streaming list decodes them, managedFields stripped, held by a
// []*corev1.ConfigMap: the floor any cache of these objects must pay.
//
// The control plane is started and filled once per process and shared by the
// rounds of -count; each library syncs once, unmeasured, before the first round.
// With -short it holds 5,000 objects. When CTRLKIT_BENCH_SERIES
// names a directory, the heap during the first sync and relist of each round is
// written there as heap-sync-<impl>.csv and heap-relist-<impl>.csv (every 20ms).
//
// Run with -benchtime 1x: every iteration is a whole sync and relist.
//
//	CTRLKIT_CONTROLPLANE_BIN=... go test -tags e2e -run '^$' -bench BenchmarkServerInformerSync -benchtime 1x -count 5 -timeout 30m ./bench/

// srvObjects is the number of ConfigMaps: 50,000, or 5,000 with -short.
var srvObjects = 50000

const (
	srvNamespace = "srv-bench"
	srvWriters   = 32
	srvTimeout   = 90 * time.Second
)

// srvEnv is the control plane and its contents, shared by the sub-benchmarks.
type srvEnv struct {
	env       *testenv.Env
	client    kubernetes.Interface
	objectsMB float64
}

// srvShared is the control plane of the first srvStart, reused by the later
// rounds of -count and stopped by TestMain, so that the objects are written once.
var (
	srvShared    *srvEnv
	srvSharedErr error
	srvOnce      sync.Once
)

func TestMain(m *testing.M) {
	if os.Getenv("CTRLKIT_SHARD_REPLICA") != "" {
		os.Exit(runShardReplica()) // a replica process of BenchmarkShardScale
	}
	code := m.Run()
	if srvShared != nil {
		srvShared.env.Stop()
	}
	stopShardEnvs()
	os.Exit(code)
}

// srvStart returns the shared control plane, started, filled and measured on the
// first call.
func srvStart(b *testing.B) *srvEnv {
	srvOnce.Do(func() {
		if testing.Short() {
			srvObjects = 5000
		}
		srvShared, srvSharedErr = srvStartEnv()
	})
	if srvSharedErr != nil {
		b.Fatal(srvSharedErr)
	}
	return srvShared
}

// srvStartEnv starts the control plane, fills it and measures the objects' size.
func srvStartEnv() (_ *srvEnv, err error) {
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.Config{})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			env.Stop()
		}
	}()
	client, err := kubernetes.NewForConfig(reflector.WithProtobuf(env.Config()))
	if err != nil {
		return nil, err
	}
	s := &srvEnv{env: env, client: client}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: srvNamespace}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := srvFill(ctx, client); err != nil {
		return nil, err
	}
	if s.objectsMB, err = srvObjectsMB(ctx, client); err != nil {
		return nil, err
	}
	// One unmeasured sync by each library, so that the first measured one (always
	// ctrlkit's: Go runs the sub-benchmarks in order) does not pay for the API
	// server's cold watch cache alone.
	for _, start := range []func(kubernetes.Interface) *srvInformer{srvStartCtrlkit, srvStartClientgo} {
		inf := start(client)
		werr := srvWait("warm-up sync", srvTimeout, inf.hasSynced)
		if serr := inf.stop(); werr == nil {
			werr = serr
		}
		if werr != nil {
			return nil, werr
		}
	}
	return s, nil
}

// srvFill creates srvObjects ConfigMaps with srvWriters concurrent writers.
func srvFill(ctx context.Context, client kubernetes.Interface) error {
	var next atomic.Int64
	errs := make(chan error, srvWriters)
	var wg sync.WaitGroup
	for range srvWriters {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(srvObjects) {
					return
				}
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{
						Name:   fmt.Sprintf("cm-%05d", i),
						Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%7)},
					},
					Data: map[string]string{"key": fmt.Sprintf("value-%d", i)},
				}
				if _, err := client.CoreV1().ConfigMaps(srvNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("create %s: %w", cm.Name, err)
					next.Store(int64(srvObjects)) // stop the other writers
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// srvLiveHeap returns the live heap after a full collection.
func srvLiveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func srvMB(after, before uint64) float64 {
	return (float64(after) - float64(before)) / (1 << 20)
}

// srvObjectsMB measures the live heap of one LIST's objects, each in its own
// allocation, managedFields stripped.
func srvObjectsMB(ctx context.Context, client kubernetes.Interface) (float64, error) {
	base := srvLiveHeap()
	list, err := client.CoreV1().ConfigMaps(srvNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	if len(list.Items) != srvObjects {
		return 0, fmt.Errorf("listed %d ConfigMaps, want %d", len(list.Items), srvObjects)
	}
	objs := make([]*corev1.ConfigMap, len(list.Items))
	for i := range list.Items {
		p := new(corev1.ConfigMap)
		*p = list.Items[i]
		p.ManagedFields = nil
		objs[i] = p
	}
	list = nil
	after := srvLiveHeap()
	runtime.KeepAlive(objs)
	return srvMB(after, base), nil
}

// srvSampler records the peak of the heap's object bytes (garbage included),
// sampled every millisecond.
type srvSampler struct {
	stop chan struct{}
	done chan uint64
}

func srvSample() *srvSampler {
	s := &srvSampler{stop: make(chan struct{}), done: make(chan uint64, 1)}
	go func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var peak uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-s.stop:
				s.done <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *srvSampler) peak() uint64 {
	close(s.stop)
	return <-s.done
}

// srvInformer is one running informer of either library.
type srvInformer struct {
	hasSynced func() bool
	len       func() int
	// relistMark is called before the relist is forced; relisted then reports
	// whether the cache holds the new list.
	relistMark func()
	relisted   func() bool
	// stats describes how the informer listed, as far as the library tells.
	stats func() string
	stop  func() error
}

func srvStartCtrlkit(client kubernetes.Interface) *srvInformer {
	lw := reflector.FromREST[*corev1.ConfigMap](client.CoreV1().RESTClient(), "configmaps", srvNamespace)
	inf := informer.New(lw, informer.Config[*corev1.ConfigMap]{
		Transform: reflector.StripManagedFields[*corev1.ConfigMap],
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	lists := func() int64 {
		s := inf.Health().Stats
		return s.Lists + s.StreamingLists
	}
	var before int64
	return &srvInformer{
		hasSynced:  inf.HasSynced,
		len:        func() int { return inf.Indexer().Len() },
		relistMark: func() { before = lists() },
		relisted: func() bool {
			if lists() <= before {
				return false
			}
			// The list is in the FIFO; it is applied once the cache's resourceVersion
			// is the reflector's.
			return inf.LastAppliedResourceVersion() == inf.Health().LastResourceVersion
		},
		stats: func() string {
			s := inf.Health().Stats
			return fmt.Sprintf("ctrlkit: lists %d, streaming lists %d, expired %d, failures %d, listed objects %d of which %d not decoded (cached)",
				s.Lists, s.StreamingLists, s.Expired, s.Failures, s.ListedObjects, s.ListedFromStore)
		},
		stop: func() error {
			cancel()
			return <-done
		},
	}
}

func srvStartClientgo(client kubernetes.Interface) *srvInformer {
	cms := client.CoreV1().ConfigMaps(srvNamespace)
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (k8sruntime.Object, error) {
			return cms.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return cms.Watch(ctx, opts)
		},
	}, cms)
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	var transformed atomic.Int64
	if err := inf.SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		transformed.Add(1)
		return obj, nil
	}); err != nil {
		panic(err)
	}
	stopCh := make(chan struct{})
	done := make(chan struct{})
	go func() { inf.Run(stopCh); close(done) }()

	// client-go says nothing when a relist has been applied. Every relisted object
	// is a new instance, and the FIFO applies them in the list's order: the relist
	// is applied once srvObjects objects went through the transform and a sample
	// of keys, the first and last names among them, hold new instances.
	var (
		transformedBefore int64
		probe             []string
		old               []any
	)
	return &srvInformer{
		hasSynced: inf.HasSynced,
		len:       func() int { return len(inf.GetStore().ListKeys()) },
		relistMark: func() {
			transformedBefore = transformed.Load()
			probe = []string{srvKey(0), srvKey(srvObjects - 1)}
			for range 62 {
				probe = append(probe, srvKey(rand.IntN(srvObjects)))
			}
			old = old[:0]
			for _, k := range probe {
				obj, _, _ := inf.GetIndexer().GetByKey(k)
				old = append(old, obj)
			}
		},
		relisted: func() bool {
			if transformed.Load()-transformedBefore < int64(srvObjects) {
				return false
			}
			for i, k := range probe {
				obj, _, _ := inf.GetIndexer().GetByKey(k)
				if obj == old[i] {
					return false
				}
			}
			return true
		},
		stats: func() string {
			return fmt.Sprintf("client-go: %d objects transformed since the relist was forced", transformed.Load()-transformedBefore)
		},
		stop: func() error {
			close(stopCh)
			<-done
			return nil
		},
	}
}

func srvKey(i int) string { return fmt.Sprintf("%s/cm-%05d", srvNamespace, i) }

// srvWait polls cond every millisecond, the same way for both libraries, for at
// most timeout.
func srvWait(what string, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not done after %v", what, timeout)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// srvRelist makes the informer's resourceVersion unservable and restarts the API
// server, until the informer has relisted. A watch can sometimes resume after the
// restart; then it tries again, at most srvRelistTries times.
func (s *srvEnv) srvRelist(ctx context.Context, inf *srvInformer) (restarts int, err error) {
	for restarts < srvRelistTries {
		restarts++
		if err := s.env.Expire(ctx); err != nil {
			return restarts, err
		}
		if err = srvWait("relist", 30*time.Second, inf.relisted); err == nil {
			return restarts, nil
		}
	}
	return restarts, fmt.Errorf("%w (%d API server restarts; %s)", err, restarts, inf.stats())
}

const srvRelistTries = 3

// srvResult is what one iteration measured.
type srvResult struct {
	sync           time.Duration
	heapMB, peakMB float64
	stats          string
	// syncHeap and relistHeap are the heap (objects bytes above the baseline, in
	// MB) every srvSeriesEvery during the sync and during the relist.
	syncHeap, relistHeap []seriesPoint
}

const srvSeriesEvery = 20 * time.Millisecond

// srvHeapSeries samples the heap in MB above base.
func srvHeapSeries(base uint64) *seriesRecorder {
	return seriesRecord(srvSeriesEvery, func() float64 { return srvMB(seriesHeapBytes(), base) })
}

// once starts one informer, measures its sync and its relist, and stops it.
func (s *srvEnv) once(ctx context.Context, b *testing.B, start func(kubernetes.Interface) *srvInformer) (r srvResult, err error) {
	base := srvLiveHeap()
	syncSeries := srvHeapSeries(base)
	t0 := time.Now()
	b.StartTimer()
	inf := start(s.client)
	defer func() {
		if serr := inf.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	if err := srvWait("initial sync", srvTimeout, inf.hasSynced); err != nil {
		b.StopTimer()
		syncSeries.Stop()
		return r, err
	}
	b.StopTimer()
	r.sync = time.Since(t0)
	r.syncHeap = syncSeries.Stop()
	r.heapMB = srvMB(srvLiveHeap(), base)
	if n := inf.len(); n != srvObjects {
		return r, fmt.Errorf("cache holds %d objects after sync, want %d", n, srvObjects)
	}

	inf.relistMark()
	sampler := srvSample()
	relistSeries := srvHeapSeries(base)
	restarts, err := s.srvRelist(ctx, inf)
	time.Sleep(250 * time.Millisecond) // the tail of the relist's garbage
	peak := sampler.peak()
	r.relistHeap = relistSeries.Stop()
	if err != nil {
		return r, err
	}
	r.peakMB = srvMB(peak, base)
	if n := inf.len(); n != srvObjects {
		return r, fmt.Errorf("cache holds %d objects after relist, want %d", n, srvObjects)
	}
	r.stats = fmt.Sprintf("%s; %d API server restart(s)", inf.stats(), restarts)
	return r, nil
}

// run measures b.N iterations; the heap series of the first one are written for
// the report's charts (see seriesEnv) under the name impl.
func (s *srvEnv) run(b *testing.B, impl string, start func(kubernetes.Interface) *srvInformer) {
	ctx := context.Background()
	var sum srvResult
	b.StopTimer()
	for i := range b.N {
		r, err := s.once(ctx, b, start)
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			b.Log(r.stats)
			seriesWrite(b, "heap-sync", impl, "heap_mb", r.syncHeap)
			seriesWrite(b, "heap-relist", impl, "heap_mb", r.relistHeap)
		}
		sum.sync += r.sync
		sum.heapMB += r.heapMB
		sum.peakMB += r.peakMB
	}
	n := float64(b.N)
	b.ReportMetric(float64(sum.sync.Milliseconds())/n, "sync-ms")
	b.ReportMetric(sum.heapMB/n, "heap-MB")
	b.ReportMetric(sum.peakMB/n, "relist-peak-MB")
	b.ReportMetric(s.objectsMB, "objects-MB")
}

// BenchmarkServerInformerSync: initial sync of srvObjects ConfigMaps from a real
// API server, heap after sync and peak heap during a forced relist, ctrlkit
// against client-go's SharedIndexInformer. One op is one informer started and
// synced.
func BenchmarkServerInformerSync(b *testing.B) {
	s := srvStart(b)
	b.Run("impl=ctrlkit", func(b *testing.B) { s.run(b, "ctrlkit", srvStartCtrlkit) })
	b.Run("impl=client-go", func(b *testing.B) { s.run(b, "client-go", srvStartClientgo) })
}
