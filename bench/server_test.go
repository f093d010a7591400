//go:build e2e

package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
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
	"k8s.io/client-go/rest"
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
// that time; B/op and allocs/op what the process allocated meanwhile), measures
// the live heap it holds (heap-MB: HeapAlloc after a GC, minus the same before
// the informer was created; see srvLiveHeap), then forces a relist and
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
// Two more sides measure the floor of the time (see floor_test.go): floor-stream
// is a bare streaming list and floor-list bare paginated LIST requests (500 per
// page), each decoding the protobuf into the objects and keeping them in a slice,
// nothing else; their sync-ms is the time from the request to the last object
// decoded and their heap-MB what the slice holds.
//
// The control plane is started and filled once per process and shared by the
// rounds of -count; each library syncs once, unmeasured, before the first round.
// The sides are measured in rounds (see srvRounds): the i-th iteration of any
// side reports round i, in which every side was measured once, one after the
// other, in an order rotated from round to round; after a relist (which restarts
// the API server) an unmeasured streaming list warms the new server, so that
// every measured sync follows a full list served by the same server process.
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
	srvWriters   = 64
	srvTimeout   = 90 * time.Second
)

// srvEnv is the control plane and its contents, shared by the sub-benchmarks.
type srvEnv struct {
	env *testenv.Env
	// client is the clientset the informers and the floor read with; filler the
	// one that writes the objects, without a client-side rate limit.
	client, filler kubernetes.Interface
	objectsMB      float64
}

// srvShared is the control plane of the first srvStart, reused by the later
// rounds of -count and by BenchmarkServerInformerScale, and stopped by
// TestMain, so that the objects are written once.
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
	cfg := reflector.WithProtobuf(env.Config())
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	fcfg := *cfg
	fcfg.QPS = -1 // no client-side rate limit: the writers are bounded by their number
	filler, err := kubernetes.NewForConfig(&fcfg)
	if err != nil {
		return nil, err
	}
	s := &srvEnv{env: env, client: client, filler: filler}
	t0 := time.Now()
	if err := s.fill(ctx, srvNamespace, 0, srvObjects); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "bench: %d ConfigMaps written in %v\n", srvObjects, time.Since(t0).Round(time.Millisecond))
	if s.objectsMB, err = srvObjectsMB(ctx, client); err != nil {
		return nil, err
	}
	// One unmeasured sync by each library, so that the first measured one does
	// not pay for the API server's cold watch cache alone.
	for _, start := range []srvStartFunc{srvStartCtrlkit, srvStartClientgo} {
		inf := start(client, srvNamespace, srvObjects)
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

// fill creates the ConfigMaps from to to (exclusive) in namespace ns, creating
// the namespace with the first, with srvWriters concurrent writers.
func (s *srvEnv) fill(ctx context.Context, ns string, from, to int) error {
	if from == 0 {
		if _, err := s.filler.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	var next atomic.Int64
	next.Store(int64(from))
	errs := make(chan error, srvWriters)
	var wg sync.WaitGroup
	for range srvWriters {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(to) {
					return
				}
				cm := &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{
						Name:   srvName(int(i)),
						Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%7)},
					},
					Data: map[string]string{"key": fmt.Sprintf("value-%d", i)},
				}
				if _, err := s.filler.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("create %s/%s: %w", ns, cm.Name, err)
					next.Store(int64(to)) // stop the other writers
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// srvName is the name of the i-th ConfigMap of a namespace.
func srvName(i int) string { return fmt.Sprintf("cm-%06d", i) }

func srvKey(ns string, i int) string { return ns + "/" + srvName(i) }

// srvLiveHeap returns the live heap after two full collections: the second
// frees what the first left in sync.Pool's victim caches (the HTTP/2 data buffers
// of the last responses, a few MB), which no side holds.
func srvLiveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// srvColdHeap returns the live heap as srvLiveHeap does, after handing the
// heap's free memory back to the operating system. A measured sync starts from
// it, as a new process starts with no memory of its own: each side then pays
// for the memory its own peak needs, rather than reusing what the side measured
// before it left mapped (whichever side follows a larger peak would fault in
// less, and the order of the sides rotates between rounds).
func srvColdHeap() uint64 {
	debug.FreeOSMemory()
	return srvLiveHeap()
}

// srvAllocs returns the bytes and objects the process has allocated so far.
func srvAllocs() (bytes, objects uint64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc, ms.Mallocs
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

// srvStartFunc starts an informer of the n ConfigMaps of namespace ns.
type srvStartFunc func(client kubernetes.Interface, ns string, n int) *srvInformer

func srvStartCtrlkit(client kubernetes.Interface, ns string, _ int) *srvInformer {
	lw := reflector.FromREST[*corev1.ConfigMap](client.CoreV1().RESTClient(), "configmaps", ns)
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

func srvStartClientgo(client kubernetes.Interface, ns string, n int) *srvInformer {
	cms := client.CoreV1().ConfigMaps(ns)
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
	// is applied once n objects went through the transform and a sample of keys,
	// the first and last names among them, hold new instances.
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
			probe = []string{srvKey(ns, 0), srvKey(ns, n-1)}
			for range 62 {
				probe = append(probe, srvKey(ns, rand.IntN(n)))
			}
			old = old[:0]
			for _, k := range probe {
				obj, _, _ := inf.GetIndexer().GetByKey(k)
				old = append(old, obj)
			}
		},
		relisted: func() bool {
			if transformed.Load()-transformedBefore < int64(n) {
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

// srvResult is what one measurement of one side found.
type srvResult struct {
	n    int // objects listed
	sync time.Duration
	// allocB and allocs are what the process allocated during the sync, and
	// cpu the CPU time it spent (the client's alone: the API server and etcd
	// are other processes).
	allocB, allocs uint64
	cpu            time.Duration
	heapMB, peakMB float64
	stats          string
	// syncHeap and relistHeap are the heap (objects bytes above the baseline, in
	// MB) every srvSeriesEvery during the sync and during the relist; relistHeap
	// is nil for a side that does not relist.
	syncHeap, relistHeap []seriesPoint
}

const srvSeriesEvery = 20 * time.Millisecond

// srvHeapSeries samples the heap in MB above base.
func srvHeapSeries(base uint64) *seriesRecorder {
	return seriesRecord(srvSeriesEvery, func() float64 { return srvMB(seriesHeapBytes(), base) })
}

// once starts an informer of the n ConfigMaps of ns, measures its sync and, if
// relist is set, its relist, and stops it.
func (s *srvEnv) once(ctx context.Context, start srvStartFunc, ns string, n int, relist, series bool) (r srvResult, err error) {
	r.n = n
	base := srvColdHeap()
	var syncSeries *seriesRecorder
	if series {
		syncSeries = srvHeapSeries(base)
	}
	b0, a0 := srvAllocs()
	c0 := idxCPUTime()
	t0 := time.Now()
	inf := start(s.client, ns, n)
	defer func() {
		if serr := inf.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	werr := srvWait("initial sync", srvTimeout, inf.hasSynced)
	r.sync = time.Since(t0)
	r.cpu = idxCPUTime() - c0
	b1, a1 := srvAllocs()
	r.allocB, r.allocs = b1-b0, a1-a0
	if syncSeries != nil {
		r.syncHeap = syncSeries.Stop()
	}
	if werr != nil {
		return r, werr
	}
	r.heapMB = srvMB(srvLiveHeap(), base)
	if got := inf.len(); got != n {
		return r, fmt.Errorf("cache holds %d objects after sync, want %d", got, n)
	}
	if !relist {
		r.stats = inf.stats()
		return r, nil
	}

	inf.relistMark()
	sampler := srvSample()
	var relistSeries *seriesRecorder
	if series {
		relistSeries = srvHeapSeries(base)
	}
	restarts, err := s.srvRelist(ctx, inf)
	time.Sleep(250 * time.Millisecond) // the tail of the relist's garbage
	peak := sampler.peak()
	if relistSeries != nil {
		r.relistHeap = relistSeries.Stop()
	}
	if err != nil {
		return r, err
	}
	r.peakMB = srvMB(peak, base)
	if got := inf.len(); got != n {
		return r, fmt.Errorf("cache holds %d objects after relist, want %d", got, n)
	}
	r.stats = fmt.Sprintf("%s; %d API server restart(s)", inf.stats(), restarts)
	return r, nil
}

// floorFunc is a floor list (floor_test.go).
type floorFunc func(ctx context.Context, c rest.Interface, ns string) (floorResult, error)

// floorOnce measures one floor list of the n ConfigMaps of ns: its time, what it
// allocated and the live heap of the objects it keeps.
func (s *srvEnv) floorOnce(ctx context.Context, list floorFunc, ns string, n int) (srvResult, error) {
	r := srvResult{n: n}
	base := srvColdHeap()
	b0, a0 := srvAllocs()
	c0 := idxCPUTime()
	t0 := time.Now()
	res, err := list(ctx, s.client.CoreV1().RESTClient(), ns)
	r.sync = time.Since(t0)
	r.cpu = idxCPUTime() - c0
	b1, a1 := srvAllocs()
	r.allocB, r.allocs = b1-b0, a1-a0
	if err != nil {
		return r, err
	}
	r.heapMB = srvMB(srvLiveHeap(), base)
	if len(res.objs) != n {
		return r, fmt.Errorf("floor listed %d objects, want %d", len(res.objs), n)
	}
	runtime.KeepAlive(res.objs)
	r.stats = fmt.Sprintf("floor: %d objects in %d request(s) at resourceVersion %s", len(res.objs), res.requests, res.rv)
	return r, nil
}

// srvSide is one side of a server benchmark: its sub-benchmark name (impl=…) and
// how to measure it once.
type srvSide struct {
	impl    string
	measure func(ctx context.Context) (srvResult, error)
	// relists is set for a side whose measurement restarts the API server.
	relists bool
}

// srvRounds measures sides in rounds. Go runs each sub-benchmark's iterations
// (and -count repetitions) before the next sub-benchmark's, so that a change of
// the machine's load between them would show as a difference between the sides.
// Instead, the first time a side needs round i, every side is measured once, in
// the order of sides rotated by i; the later sides' iterations report what was
// measured then. A round is measured in full even when only some sides run.
type srvRounds struct {
	sides   []srvSide
	results map[string][]srvResult // by impl, by round
	taken   map[string]int         // rounds reported, by impl
	// warm is run, unmeasured, after a side that relists.
	warm func(ctx context.Context) error
}

func newSrvRounds(warm func(ctx context.Context) error, sides ...srvSide) *srvRounds {
	return &srvRounds{sides: sides, results: map[string][]srvResult{}, taken: map[string]int{}, warm: warm}
}

// next returns impl's result of the next round it has not reported.
func (r *srvRounds) next(ctx context.Context, impl string) (srvResult, error) {
	i := r.taken[impl]
	for len(r.results[impl]) <= i {
		if err := r.round(ctx); err != nil {
			return srvResult{}, err
		}
	}
	r.taken[impl]++
	return r.results[impl][i], nil
}

// round measures every side once.
func (r *srvRounds) round(ctx context.Context) error {
	k := len(r.results[r.sides[0].impl])
	for j := range r.sides {
		side := r.sides[(j+k)%len(r.sides)]
		res, err := side.measure(ctx)
		if err != nil {
			return fmt.Errorf("round %d, %s: %w", k+1, side.impl, err)
		}
		r.results[side.impl] = append(r.results[side.impl], res)
		if side.relists && r.warm != nil {
			if err := r.warm(ctx); err != nil {
				return fmt.Errorf("round %d, warm-up after %s: %w", k+1, side.impl, err)
			}
		}
	}
	return nil
}

// report runs b.N iterations of impl's side, each reporting one round, and
// reports the means. ns/op is the sync time, B/op and allocs/op what the process
// allocated during the sync. each, if set, is called with every result.
func (r *srvRounds) report(b *testing.B, impl string, objectsMB float64, each func(srvResult)) {
	b.StopTimer()
	ctx := context.Background()
	var sum srvResult
	for range b.N {
		res, err := r.next(ctx, impl)
		if err != nil {
			b.Fatal(err)
		}
		if each != nil {
			each(res)
		}
		sum.n = res.n
		sum.sync += res.sync
		sum.cpu += res.cpu
		sum.allocB += res.allocB
		sum.allocs += res.allocs
		sum.heapMB += res.heapMB
		sum.peakMB += res.peakMB
	}
	n := float64(b.N)
	b.ReportMetric(float64(sum.sync.Nanoseconds())/n, "ns/op")
	b.ReportMetric(float64(sum.allocB)/n, "B/op")
	b.ReportMetric(float64(sum.allocs)/n, "allocs/op")
	b.ReportMetric(float64(sum.sync.Milliseconds())/n, "sync-ms")
	b.ReportMetric(float64(sum.cpu.Milliseconds())/n, "cpu-ms")
	b.ReportMetric(sum.heapMB/n, "heap-MB")
	if sum.peakMB != 0 {
		b.ReportMetric(sum.peakMB/n, "relist-peak-MB")
	}
	if objectsMB != 0 {
		b.ReportMetric(objectsMB, "objects-MB")
	}
	if sum.n > 0 {
		b.ReportMetric(float64(sum.sync.Nanoseconds())/n/float64(sum.n), "ns/object")
		b.ReportMetric(sum.heapMB/n*(1<<20)/float64(sum.n), "B/object")
		b.ReportMetric(float64(sum.cpu.Nanoseconds())/n/float64(sum.n), "cpu-ns/object")
	}
}

// srvSyncRounds are the rounds of BenchmarkServerInformerSync, shared by its
// sub-benchmarks and by the repetitions of -count.
var srvSyncRounds *srvRounds

// BenchmarkServerInformerSync: initial sync of srvObjects ConfigMaps from a real
// API server, heap after sync and peak heap during a forced relist, ctrlkit
// against client-go's SharedIndexInformer, and the floor: a bare streaming list
// and bare paginated LIST requests that decode the same objects and keep them in
// a slice. One op is one informer started and synced, or one floor list.
func BenchmarkServerInformerSync(b *testing.B) {
	s := srvStart(b)
	if srvSyncRounds == nil {
		inf := func(start srvStartFunc) func(context.Context) (srvResult, error) {
			return func(ctx context.Context) (srvResult, error) {
				return s.once(ctx, start, srvNamespace, srvObjects, true, true)
			}
		}
		floor := func(list floorFunc) func(context.Context) (srvResult, error) {
			return func(ctx context.Context) (srvResult, error) { return s.floorOnce(ctx, list, srvNamespace, srvObjects) }
		}
		warm := func(ctx context.Context) error {
			_, err := floorStream(ctx, s.client.CoreV1().RESTClient(), srvNamespace)
			return err
		}
		srvSyncRounds = newSrvRounds(warm,
			srvSide{impl: "ctrlkit", measure: inf(srvStartCtrlkit), relists: true},
			srvSide{impl: "client-go", measure: inf(srvStartClientgo), relists: true},
			srvSide{impl: "floor-stream", measure: floor(floorStream)},
			srvSide{impl: "floor-list", measure: floor(floorList)},
		)
	}
	for _, side := range srvSyncRounds.sides {
		b.Run("impl="+side.impl, func(b *testing.B) {
			first := true
			srvSyncRounds.report(b, side.impl, s.objectsMB, func(r srvResult) {
				if first {
					first = false
					b.Log(r.stats)
				}
				if r.syncHeap != nil {
					seriesWrite(b, "heap-sync", side.impl, "heap_mb", r.syncHeap)
				}
				if r.relistHeap != nil {
					seriesWrite(b, "heap-relist", side.impl, "heap_mb", r.relistHeap)
				}
			})
		})
	}
}
