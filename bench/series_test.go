package bench

// Time series for the report's charts. A recorder samples a value (queue depth,
// heap bytes) at a fixed interval while a benchmark runs; when the environment
// variable CTRLKIT_BENCH_SERIES names a directory, the benchmark writes the last
// series it recorded there as <name>-<impl>.csv (columns t_ms,value), which the
// report generator in bench/report turns into SVG charts. Without the variable
// nothing is written; the summary figures (peak-depth, mean-depth) are reported
// either way.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	cgworkqueue "k8s.io/client-go/util/workqueue"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// seriesEnv names the directory the series are written to.
const seriesEnv = "CTRLKIT_BENCH_SERIES"

// seriesPoint is one sample: the time since the recorder started and the value.
type seriesPoint struct {
	t time.Duration
	v float64
}

// seriesRecorder samples a function at a fixed interval on its own goroutine
// until stopped.
type seriesRecorder struct {
	stop chan struct{}
	done chan []seriesPoint
}

// seriesRecord starts sampling fn now (the first sample is taken at once) and then
// every interval.
func seriesRecord(interval time.Duration, fn func() float64) *seriesRecorder {
	r := &seriesRecorder{stop: make(chan struct{}), done: make(chan []seriesPoint, 1)}
	go func() {
		t0 := time.Now()
		var pts []seriesPoint
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			pts = append(pts, seriesPoint{time.Since(t0), fn()})
			select {
			case <-r.stop:
				pts = append(pts, seriesPoint{time.Since(t0), fn()})
				r.done <- pts
				return
			case <-tick.C:
			}
		}
	}()
	return r
}

// Stop ends the sampling and returns the samples, in time order.
func (r *seriesRecorder) Stop() []seriesPoint {
	close(r.stop)
	return <-r.done
}

// seriesHeapBytes reads the bytes of heap objects, live or not yet swept: what the
// process holds at that instant, garbage included.
func seriesHeapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// seriesWrite writes pts to $CTRLKIT_BENCH_SERIES/<name>-<impl>.csv if the
// variable is set, replacing the file of an earlier run.
func seriesWrite(b testing.TB, name, impl, unit string, pts []seriesPoint) {
	dir := os.Getenv(seriesEnv)
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "t_ms,%s\n", unit)
	for _, p := range pts {
		fmt.Fprintf(&sb, "%.3f,%g\n", float64(p.t)/float64(time.Millisecond), p.v)
	}
	if err := os.WriteFile(filepath.Join(dir, name+"-"+impl+".csv"), []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
}

// seriesPeakMean returns the largest and the mean value of pts.
func seriesPeakMean(pts []seriesPoint) (peak, mean float64) {
	for _, p := range pts {
		peak = max(peak, p.v)
		mean += p.v
	}
	if len(pts) > 0 {
		mean /= float64(len(pts))
	}
	return peak, mean
}

// Resync smoothness: a controller over rsKeys objects of an in-memory informer,
// with rsWorkers workers whose reconcile takes rsWork (a sleep, as a call to the
// API server would, so the two sides do not compete for the CPU), resyncs every
// rsPeriod. After the initial list has been reconciled, the queue depth is sampled
// every rsSample for rsWindow periods. ctrlkit's reconcile.Controller spreads a
// resync over the period; client-go's SharedIndexInformer delivers every object at
// once to a handler that adds it to a client-go work queue, as controllers built on
// it do. Both read the same list.
const (
	rsWorkers = 4
	rsWork    = time.Millisecond
	rsSample  = 10 * time.Millisecond
	rsWindow  = 2.25 // periods observed
)

// rsParams returns the number of keys and the resync period: 2,000 keys every 2s
// (1,000 keys/s, about a quarter of the workers' capacity); 500 every 1s with -short.
func rsParams() (keys int, period time.Duration) {
	if testing.Short() {
		return 500, time.Second
	}
	return 2000, 2 * time.Second
}

func rsList(n int) *corev1.ConfigMapList {
	l := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: make([]corev1.ConfigMap, n)}
	for i := range l.Items {
		l.Items[i] = *infConfigMap(i, 1)
	}
	return l
}

// rsDepth counts the pending items of a ctrlkit queue through its metrics hooks.
type rsDepth struct{ n atomic.Int64 }

func (d *rsDepth) Added()                           { d.n.Add(1) }
func (d *rsDepth) Started(time.Duration)            { d.n.Add(-1) }
func (d *rsDepth) Finished(time.Duration)           {}
func (d *rsDepth) Retried()                         {}
func (d *rsDepth) Attach(func() workqueue.InFlight) {}
func (d *rsDepth) depth() float64                   { return float64(d.n.Load()) }

// rsWait polls cond every millisecond for at most timeout.
func rsWait(what string, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not done after %v", what, timeout)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// rsRunCtrlkit runs one observation window of ctrlkit's controller and returns the
// queue depth series.
func rsRunCtrlkit(list *corev1.ConfigMapList, period time.Duration) ([]seriesPoint, error) {
	lw := reflector.Funcs[*corev1.ConfigMap]{
		ListFunc: func(context.Context, metav1.ListOptions) ([]*corev1.ConfigMap, metav1.ListMeta, error) {
			objs := make([]*corev1.ConfigMap, len(list.Items))
			for i := range list.Items {
				objs[i] = &list.Items[i]
			}
			return objs, list.ListMeta, nil
		},
		WatchFunc: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}
	inf := informer.New(lw, informer.Config[*corev1.ConfigMap]{
		Reflector: reflector.Config[*corev1.ConfigMap]{WatchList: reflector.WatchListOff},
	})
	depth := &rsDepth{}
	var reconciled atomic.Int64
	c := reconcile.New(reconcile.Func[types.NamespacedName](func(context.Context, types.NamespacedName) (reconcile.Result, error) {
		time.Sleep(rsWork)
		reconciled.Add(1)
		return reconcile.Result{}, nil
	}), reconcile.Config[types.NamespacedName]{Workers: rsWorkers, ResyncPeriod: period, QueueMetrics: depth})
	if err := c.Watch(reconcile.FromInformer(inf, reconcile.ByObject[*corev1.ConfigMap]())); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	infDone := make(chan error, 1)
	ctlDone := make(chan error, 1)
	go func() { infDone <- inf.Run(ctx) }()
	go func() { ctlDone <- c.Run(ctx) }()
	stop := func() error {
		cancel()
		return errors.Join(<-ctlDone, <-infDone)
	}
	n := int64(len(list.Items))
	if err := rsWait("ctrlkit initial list", time.Minute, func() bool { return reconciled.Load() >= n && depth.n.Load() == 0 }); err != nil {
		_ = stop()
		return nil, err
	}
	rec := seriesRecord(rsSample, depth.depth)
	time.Sleep(time.Duration(rsWindow * float64(period))) // the observation window itself
	pts := rec.Stop()
	return pts, stop()
}

// rsCGLW is a client-go ListerWatcher over the list, with idle watches.
type rsCGLW struct{ list *corev1.ConfigMapList }

func (l rsCGLW) List(metav1.ListOptions) (k8sruntime.Object, error) { return l.list, nil }
func (l rsCGLW) Watch(metav1.ListOptions) (watch.Interface, error)  { return watch.NewFake(), nil }
func (l rsCGLW) IsWatchListSemanticsUnSupported() bool              { return true }

// rsRunClientgo runs one observation window of a client-go controller: a
// SharedIndexInformer with a resync period feeding a rate-limited work queue,
// drained by workers written like sample-controller's.
func rsRunClientgo(list *corev1.ConfigMapList, period time.Duration) ([]seriesPoint, error) {
	inf := cache.NewSharedIndexInformer(rsCGLW{list}, &corev1.ConfigMap{}, period, cache.Indexers{})
	q := cgworkqueue.NewTypedRateLimitingQueue(cgworkqueue.DefaultTypedControllerRateLimiter[string]())
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			q.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				q.Add(key)
			}
		},
	}); err != nil {
		return nil, err
	}
	var reconciled atomic.Int64
	stopCh := make(chan struct{})
	infDone := make(chan struct{})
	go func() { inf.Run(stopCh); close(infDone) }()
	workersDone := make(chan struct{}, rsWorkers)
	for range rsWorkers {
		go func() {
			defer func() { workersDone <- struct{}{} }()
			for {
				key, shutdown := q.Get()
				if shutdown {
					return
				}
				time.Sleep(rsWork)
				reconciled.Add(1)
				q.Forget(key)
				q.Done(key)
			}
		}()
	}
	stop := func() {
		close(stopCh)
		<-infDone
		q.ShutDown()
		for range rsWorkers {
			<-workersDone
		}
	}
	n := int64(len(list.Items))
	if err := rsWait("client-go initial list", time.Minute, func() bool { return reconciled.Load() >= n && q.Len() == 0 }); err != nil {
		stop()
		return nil, err
	}
	rec := seriesRecord(rsSample, func() float64 { return float64(q.Len()) })
	time.Sleep(time.Duration(rsWindow * float64(period))) // the observation window itself
	pts := rec.Stop()
	stop()
	return pts, nil
}

// BenchmarkResyncQueueDepth: queue depth while a controller resyncs (see the
// constants above). peak-depth and mean-depth summarize the samples of the window;
// lower is smoother. One op is one whole observation window, so run it with
// -benchtime 1x; ns/op is not a figure of merit.
func BenchmarkResyncQueueDepth(b *testing.B) {
	keys, period := rsParams()
	list := rsList(keys)
	for _, impl := range []struct {
		name string
		run  func(*corev1.ConfigMapList, time.Duration) ([]seriesPoint, error)
	}{{"ctrlkit", rsRunCtrlkit}, {"client-go", rsRunClientgo}} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			var peak, mean float64
			var last []seriesPoint
			for b.Loop() {
				pts, err := impl.run(list, period)
				if err != nil {
					b.Fatal(err)
				}
				p, m := seriesPeakMean(pts)
				peak += p
				mean += m
				last = pts
			}
			b.ReportMetric(peak/float64(b.N), "peak-depth")
			b.ReportMetric(mean/float64(b.N), "mean-depth")
			seriesWrite(b, "resync-depth", impl.name, "depth", last)
		})
	}
}
