//go:build e2e

package e2e

import (
	"context"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// bucket puts a name in one of n buckets, the same on every run.
func bucket(name string, n uint32) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return h.Sum32() % n
}

// The objects of the mapper-panic storm fall in four buckets: the Mapper panics
// on the first, the Predicate on the second, and both pass the other two.
func mapperPanicsOn(name string) bool    { return bucket(name, 4) == 0 }
func predicatePanicsOn(name string) bool { return bucket(name, 4) == 1 }

// countingMetrics counts a controller's reconcile events.
type countingMetrics struct {
	started, finished, panicked, sourcePanicked atomic.Int64
}

func (m *countingMetrics) Workers(int)                                        {}
func (m *countingMetrics) ReconcileStarted()                                  { m.started.Add(1) }
func (m *countingMetrics) ReconcileFinished(reconcile.Outcome, time.Duration) { m.finished.Add(1) }
func (m *countingMetrics) Panicked()                                          { m.panicked.Add(1) }
func (m *countingMetrics) SourcePanicked()                                    { m.sourcePanicked.Add(1) }

// errorLog is a logr.LogSink that keeps the errors logged, and drops the rest.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) Init(logr.RuntimeInfo)          {}
func (l *errorLog) Enabled(int) bool               { return false }
func (l *errorLog) Info(int, string, ...any)       {}
func (l *errorLog) WithValues(...any) logr.LogSink { return l }
func (l *errorLog) WithName(string) logr.LogSink   { return l }
func (l *errorLog) Error(err error, _ string, _ ...any) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}
func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// lastRead records, per key, the resourceVersion of the object the reconciler
// last found in the cache ("" for none) and how often it reconciled the key.
type lastRead struct {
	mu    sync.Mutex
	rv    map[key]string
	calls map[key]int
}

func (r *lastRead) snapshot() map[key]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[key]string, len(r.rv))
	for k, v := range r.rv {
		out[k] = v
	}
	return out
}

// churnConfigMaps creates, updates and deletes cm-0 … cm-(names-1) of ns from
// writers goroutines until stop is closed, and returns the number of writes done.
func churnConfigMaps(t *testing.T, c kubernetes.Interface, ns string, writers, names int, stop <-chan struct{}) int64 {
	t.Helper()
	var writes atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	cms := c.CoreV1().ConfigMaps(ns)
	for w := range writers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 13))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(rnd.IntN(names))},
					Data: map[string]string{"w": strconv.Itoa(w), "i": strconv.Itoa(i)}}
				var err error
				switch rnd.IntN(4) {
				case 0:
					_, err = cms.Create(context.Background(), cm, metav1.CreateOptions{})
				case 1:
					err = cms.Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
				default:
					_, err = cms.Update(context.Background(), cm, metav1.UpdateOptions{})
				}
				switch {
				case err == nil:
					writes.Add(1)
				case apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
				default:
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("churn: %v", err)
	}
	return writes.Load()
}

// TestMapperPanicStorm runs a controller over 1,000 ConfigMaps under a storm of
// creates, updates and deletes, with a Mapper that panics on a quarter of the
// objects and a Predicate that panics on another quarter, and a resync every
// three seconds, which runs every cached object through the Mapper again.
// Nothing may crash and Run must return nil when stopped. At the end the
// reconciler must have read from the cache the final server state of every
// object of the other half (its resourceVersion, or its absence), and of every
// surviving object whose Predicate panicked (resyncs do not filter); the objects
// whose Mapper panicked are never reconciled. Every panic is counted
// (Metrics.SourcePanicked) and logged once as a *reconcile.PanicError naming the
// object, and the Mapper goes on panicking in resyncs after the storm.
//
// No upstream test covers this: controller-runtime recovers panics of Reconcile
// only; a map function or predicate that panics crashes the process.
func TestMapperPanicStorm(t *testing.T) {
	const (
		objects = 1000
		writers = 6
		length  = 12 * time.Second
		resync  = 3 * time.Second
	)
	begin := time.Now()
	c, err := kubernetes.NewForConfig(reflector.WithProtobuf(env.Config()))
	if err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	{
		var wg sync.WaitGroup
		errs := make(chan error, objects)
		for w := range 16 {
			wg.Go(func() {
				for i := w; i < objects; i += 16 {
					cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(i)}}
					if _, err := c.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}

	inf := informer.New(reflector.FromTyped(c.CoreV1().ConfigMaps(ns)), informer.Config[*corev1.ConfigMap]{
		Name:      "configmaps",
		Transform: reflector.StripManagedFields[*corev1.ConfigMap],
	})
	var mapperPanics, predicatePanics atomic.Int64
	mapper := func(cm *corev1.ConfigMap) []key {
		if mapperPanicsOn(cm.Name) {
			mapperPanics.Add(1)
			panic("mapper bug on " + cm.Name)
		}
		return []key{{Namespace: cm.Namespace, Name: cm.Name}}
	}
	predicate := func(e reconcile.Event[*corev1.ConfigMap]) bool {
		if predicatePanicsOn(e.Obj.Name) {
			predicatePanics.Add(1)
			panic("predicate bug on " + e.Obj.Name)
		}
		return true
	}
	read := &lastRead{rv: map[key]string{}, calls: map[key]int{}}
	rec := reconcile.Func[key](func(_ context.Context, k key) (reconcile.Result, error) {
		rv := ""
		cm, err := inf.Lister().Get(k.Namespace, k.Name)
		switch {
		case err == nil:
			rv = cm.ResourceVersion
		case !apierrors.IsNotFound(err):
			return reconcile.Result{}, err
		}
		read.mu.Lock()
		read.rv[k] = rv
		read.calls[k]++
		read.mu.Unlock()
		return reconcile.Result{}, nil
	})
	metrics := &countingMetrics{}
	logs := &errorLog{}
	ctl := reconcile.New(rec, reconcile.Config[key]{
		Name:         "mapper-panic",
		Workers:      4,
		ResyncPeriod: resync,
		Metrics:      metrics,
		Logger:       logr.New(logs),
	})
	if err := ctl.Watch(reconcile.FromInformer(inf, mapper, predicate)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var infDone sync.WaitGroup
	infDone.Go(func() {
		if err := inf.Run(ctx); err != nil {
			t.Errorf("informer: Run = %v", err)
		}
	})
	runErr := make(chan error, 1)
	go func() { runErr <- ctl.Run(ctx) }()
	stopped := false
	stop := func() error {
		stopped = true
		cancel()
		err := <-runErr
		infDone.Wait()
		return err
	}
	defer func() {
		if !stopped {
			_ = stop()
		}
	}()

	// The storm starts once the cache holds every object: an object the storm deleted
	// before the informer's first list, and never created again, is one the controller
	// never saw, and so never reconciles (its want is "": deleted, but nothing is read).
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	storm := make(chan struct{})
	time.AfterFunc(length, func() { close(storm) })
	writes := churnConfigMaps(t, c, ns, writers, objects, storm)

	list, err := c.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	onServer := map[key]string{}
	for _, cm := range list.Items {
		onServer[key{Namespace: ns, Name: cm.Name}] = cm.ResourceVersion
	}
	// want: the final state of every object whose Mapper and Predicate pass, and
	// of every surviving one whose Predicate panics.
	want := map[key]string{}
	predicateOnly := 0
	for i := range objects {
		k := key{Namespace: ns, Name: "cm-" + strconv.Itoa(i)}
		switch rv, ok := onServer[k]; {
		case mapperPanicsOn(k.Name):
		case predicatePanicsOn(k.Name):
			if ok {
				want[k] = rv
				predicateOnly++
			}
		default:
			want[k] = rv // "" when deleted
		}
	}
	got := func() map[key]string {
		out := read.snapshot()
		for k := range out {
			if _, ok := want[k]; !ok && predicatePanicsOn(k.Name) {
				delete(out, k) // deleted at the end: no resync brings its deletion
			}
		}
		return out
	}
	converged := time.Now()
	deadline := time.Now().Add(60 * time.Second)
	for {
		diff := cmp.Diff(want, got())
		if diff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reconciler did not read the final state of every object within 60s (-server +read):\n%s", diff)
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(converged)

	// The storm is over: only resyncs call the Mapper now, and it goes on
	// panicking in them.
	atEnd := mapperPanics.Load()
	for mapperPanics.Load() == atEnd {
		if time.Since(converged) > 60*time.Second+3*resync {
			t.Fatalf("no Mapper panic in the %v after the storm: no resync ran through the Mapper", 3*resync)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}

	panics := mapperPanics.Load() + predicatePanics.Load()
	logged := 0
	for _, err := range logs.all() {
		var pe *reconcile.PanicError
		if !errors.As(err, &pe) || pe.Source == "" {
			t.Errorf("logged error %v, want only the source's panics", err)
			continue
		}
		logged++
		name := pe.Object[len(ns)+1:]
		if pe.Object != ns+"/"+name || pe.Source != "informer configmaps" || len(pe.Stack) == 0 ||
			!(mapperPanicsOn(name) && pe.Value == "mapper bug on "+name || predicatePanicsOn(name) && pe.Value == "predicate bug on "+name) {
			t.Errorf("logged panic %+v: want the object's key, the source's name, the panic's value and a stack", pe)
		}
	}
	t.Logf("%d objects, %d writes in %v; %d on the server at the end; read the final state %v after the storm",
		objects, writes, length, len(onServer), took.Round(time.Millisecond))
	t.Logf("%d Mapper panics (%d after the storm), %d Predicate panics; SourcePanicked %d, %d logged; %d reconciles; test took %v",
		mapperPanics.Load(), mapperPanics.Load()-atEnd, predicatePanics.Load(), metrics.sourcePanicked.Load(), logged,
		metrics.started.Load(), time.Since(begin).Round(time.Millisecond))
	if sp := metrics.sourcePanicked.Load(); sp == 0 || sp != panics || int64(logged) != panics {
		t.Errorf("SourcePanicked = %d, %d panics logged, %d made; want all three equal and not 0", sp, logged, panics)
	}
	if mapperPanics.Load() == 0 || predicatePanics.Load() == 0 || predicateOnly == 0 {
		t.Errorf("%d Mapper panics, %d Predicate panics, %d surviving objects whose Predicate panics: want all three, or the test proves nothing",
			mapperPanics.Load(), predicatePanics.Load(), predicateOnly)
	}
	if n := metrics.panicked.Load(); n != 0 {
		t.Errorf("%d reconciles panicked", n)
	}
	read.mu.Lock()
	for k := range read.calls {
		if mapperPanicsOn(k.Name) {
			t.Errorf("%s was reconciled, but the Mapper panics on it", k)
		}
	}
	read.mu.Unlock()
}
