package bench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ctrlkit/ctrlkit/indexer"
)

// The indexer benchmarks store realistic ConfigMaps (namespace, labels, a little
// data) in both stores, with the same two indexes: by namespace and by the "app"
// label. ctrlkit uses its ready-made MetaKey and NamespaceIndex, client-go its own
// MetaNamespaceKeyFunc and MetaNamespaceIndexFunc: what each library's users write.

const (
	idxObjects    = 100_000
	idxNamespaces = 100 // 1k objects per namespace
	idxApps       = 100 // 1k objects per app label value
	idxAppIndex   = "app"
)

// idxObjs returns n ConfigMaps with keys ns-<i%namespaces>/cm-<i+offset> and
// resourceVersion rv.
func idxObjs(n, offset int, rv string) []*corev1.ConfigMap {
	objs := make([]*corev1.ConfigMap, n)
	for i := range objs {
		id := i + offset
		objs[i] = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:       fmt.Sprintf("ns-%d", id%idxNamespaces),
				Name:            fmt.Sprintf("cm-%d", id),
				ResourceVersion: rv,
				UID:             "3c5a6b0e-6a0f-4a43-9d5e-6b1c2e1b8f00",
				Labels: map[string]string{
					"app":  fmt.Sprintf("app-%d", (id/idxNamespaces)%idxApps),
					"tier": "backend",
				},
			},
			Data: map[string]string{"config.yaml": "key: value\n"},
		}
	}
	return objs
}

func idxCtrlkit() *indexer.Indexer[*corev1.ConfigMap] {
	return indexer.New(indexer.Config[*corev1.ConfigMap]{
		Indexers: indexer.Indexers[*corev1.ConfigMap]{
			indexer.NamespaceIndexName: indexer.NamespaceIndex[*corev1.ConfigMap],
			idxAppIndex: func(cm *corev1.ConfigMap) ([]string, error) {
				return []string{cm.Labels["app"]}, nil
			},
		},
	})
}

func idxClientgo() cache.Indexer {
	return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		idxAppIndex: func(obj any) ([]string, error) {
			m, err := meta.Accessor(obj)
			if err != nil {
				return nil, err
			}
			return []string{m.GetLabels()["app"]}, nil
		},
	})
}

// idxStore is what the write benchmarks need from either implementation.
type idxStore struct {
	add, update, del func(*corev1.ConfigMap) error
	// replace prepares the argument each library's Replace takes (client-go's is a
	// []any, as its reflector builds it) and returns the call to time.
	replace func([]*corev1.ConfigMap) func() error
	// byIndex returns how many objects ByIndex returned.
	byIndex func(index, value string) (int, error)
}

func idxCtrlkitStore() idxStore {
	x := idxCtrlkit()
	return idxStore{add: x.Add, update: x.Update, del: x.Delete,
		replace: func(objs []*corev1.ConfigMap) func() error {
			return func() error { return x.Replace(objs) }
		},
		byIndex: func(index, value string) (int, error) {
			objs, err := x.ByIndex(index, value)
			return len(objs), err
		},
	}
}

func idxClientgoStore() idxStore {
	x := idxClientgo()
	return idxStore{
		add:    func(cm *corev1.ConfigMap) error { return x.Add(cm) },
		update: func(cm *corev1.ConfigMap) error { return x.Update(cm) },
		del:    func(cm *corev1.ConfigMap) error { return x.Delete(cm) },
		replace: func(objs []*corev1.ConfigMap) func() error {
			list := make([]any, len(objs))
			for i, o := range objs {
				list[i] = o
			}
			return func() error { return x.Replace(list, "1") }
		},
		byIndex: func(index, value string) (int, error) {
			objs, err := x.ByIndex(index, value)
			return len(objs), err
		},
	}
}

var idxImpls = []struct {
	name string
	new  func() idxStore
}{{"ctrlkit", idxCtrlkitStore}, {"client-go", idxClientgoStore}}

var (
	idxOnce      sync.Once
	idxBaseObjs  []*corev1.ConfigMap // the 100k objects every write benchmark starts from
	idxNewerObjs []*corev1.ConfigMap // the same keys, a newer resourceVersion
	idxExtraObjs []*corev1.ConfigMap // 100k other keys
)

func idxBenchObjs() {
	idxOnce.Do(func() {
		idxBaseObjs = idxObjs(idxObjects, 0, "1")
		idxNewerObjs = idxObjs(idxObjects, 0, "2")
		idxExtraObjs = idxObjs(idxObjects, idxObjects, "1")
	})
}

func idxMustFill(b *testing.B, s idxStore, objs []*corev1.ConfigMap) {
	for _, o := range objs {
		if err := s.add(o); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIndexerAdd adds new keys to a store of 100k objects (it grows to at most
// 200k, then is rebuilt, after a collection, with the timer stopped). Each side first
// runs one such cycle untimed, and the collections keep the discarded stores from
// piling up: otherwise the first benchmark of a fresh process grows its heap into
// pages it has never touched, and pays their page faults (measured on the 2-core VM:
// about 0.4 µs an Add for ctrlkit, 0.7 µs for client-go, on whichever side runs first;
// ctrlkit's always did).
func BenchmarkIndexerAdd(b *testing.B) {
	idxBenchObjs()
	for _, impl := range idxImpls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			warm := impl.new()
			idxMustFill(b, warm, idxBaseObjs)
			idxMustFill(b, warm, idxExtraObjs)
			warm = idxStore{}
			runtime.GC() // its memory is what the timed stores reuse
			var s idxStore
			i := 0
			for b.Loop() {
				if i%idxObjects == 0 {
					b.StopTimer()
					s = idxStore{}
					runtime.GC()
					s = impl.new()
					idxMustFill(b, s, idxBaseObjs)
					b.StartTimer()
				}
				if err := s.add(idxExtraObjs[i%idxObjects]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// idxShape is a store configuration other than the default one of the benchmarks
// above, as each library's users would write it.
type idxShape struct {
	name string
	// customKey sets a KeyFunc on ctrlkit's side (keys are then stored, not derived);
	// client-go's key function is always its own MetaNamespaceKeyFunc.
	customKey bool
	// labels makes the second index multi-valued: every label as "key=value" (2 an
	// object) instead of the app label's value.
	labels bool
	n      int // objects in the store
}

func (sh idxShape) appValues(lbls map[string]string) []string {
	if !sh.labels {
		return []string{lbls["app"]}
	}
	out := make([]string, 0, len(lbls))
	for k, v := range lbls {
		out = append(out, k+"="+v)
	}
	return out
}

func (sh idxShape) ctrlkit() idxStore {
	cfg := indexer.Config[*corev1.ConfigMap]{
		Indexers: indexer.Indexers[*corev1.ConfigMap]{
			indexer.NamespaceIndexName: indexer.NamespaceIndex[*corev1.ConfigMap],
			idxAppIndex: func(cm *corev1.ConfigMap) ([]string, error) {
				return sh.appValues(cm.Labels), nil
			},
		},
	}
	if sh.customKey {
		cfg.KeyFunc = func(cm *corev1.ConfigMap) (string, error) { return cm.Namespace + "/" + cm.Name, nil }
	}
	x := indexer.New(cfg)
	return idxStore{add: x.Add, update: x.Update, del: x.Delete}
}

func (sh idxShape) clientgo() idxStore {
	x := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		idxAppIndex: func(obj any) ([]string, error) {
			m, err := meta.Accessor(obj)
			if err != nil {
				return nil, err
			}
			return sh.appValues(m.GetLabels()), nil
		},
	})
	return idxStore{
		add:    func(cm *corev1.ConfigMap) error { return x.Add(cm) },
		update: func(cm *corev1.ConfigMap) error { return x.Update(cm) },
		del:    func(cm *corev1.ConfigMap) error { return x.Delete(cm) },
	}
}

// BenchmarkIndexerShapes runs the write benchmarks on stores set up otherwise than
// the default: a custom KeyFunc (ctrlkit then stores the keys), a multi-valued index
// (every label, 2 an object), and a small store (1k objects). "update" updates the
// objects to newer versions indexed the same way, and back; "add-delete" adds a new
// object and deletes it.
func BenchmarkIndexerShapes(b *testing.B) {
	idxBenchObjs()
	for _, sh := range []idxShape{
		{name: "custom-key", customKey: true, n: idxObjects},
		{name: "label-index", labels: true, n: idxObjects},
		{name: "small", n: 1000},
	} {
		for _, impl := range []struct {
			name string
			new  func() idxStore
		}{{"ctrlkit", sh.ctrlkit}, {"client-go", sh.clientgo}} {
			b.Run(sh.name+"/update/impl="+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				s := impl.new()
				idxMustFill(b, s, idxBaseObjs[:sh.n])
				i := 0
				for b.Loop() {
					objs := idxNewerObjs
					if (i/sh.n)%2 == 1 {
						objs = idxBaseObjs
					}
					if err := s.update(objs[i%sh.n]); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
			b.Run(sh.name+"/add-delete/impl="+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				s := impl.new()
				idxMustFill(b, s, idxBaseObjs[:sh.n])
				i := 0
				for b.Loop() {
					o := idxExtraObjs[i%sh.n]
					if err := s.add(o); err != nil {
						b.Fatal(err)
					}
					if err := s.del(o); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

// idxCPUTime returns the CPU time the process has used so far (all threads: the
// benchmark's and the garbage collector's).
func idxCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// idxReportCPU reports the process CPU time per operation since start as cpu-ns/op.
// On a shared machine it is steadier than ns/op, which also counts the time the
// benchmark waited for a core.
func idxReportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(idxCPUTime()-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkIndexerUpdate replaces objects of a 100k store with newer versions that
// index the same way (the common watch event).
func BenchmarkIndexerUpdate(b *testing.B) {
	idxBenchObjs()
	idxRunUpdates(b, idxNewerObjs)
}

// BenchmarkIndexerUpdateMove updates objects so that they move to another value of
// the app index.
func BenchmarkIndexerUpdateMove(b *testing.B) {
	idxBenchObjs()
	moved := idxObjs(idxObjects, 0, "2")
	for _, o := range moved {
		o.Labels["app"] = "moved-" + o.Labels["app"]
	}
	idxRunUpdates(b, moved)
}

// idxRunUpdates fills each implementation's store with the base objects and updates
// them, in passes of idxObjects, alternately to next and back to the base objects.
func idxRunUpdates(b *testing.B, next []*corev1.ConfigMap) {
	for _, impl := range idxImpls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			s := impl.new()
			idxMustFill(b, s, idxBaseObjs)
			i := 0
			defer idxReportCPU(b, idxCPUTime())
			for b.Loop() {
				objs := next
				if (i/idxObjects)%2 == 1 {
					objs = idxBaseObjs
				}
				if err := s.update(objs[i%idxObjects]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkIndexerDelete deletes from a store of 200k objects down to 100k, then
// refills it with the timer stopped.
func BenchmarkIndexerDelete(b *testing.B) {
	idxBenchObjs()
	for _, impl := range idxImpls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			var s idxStore
			i := 0
			for b.Loop() {
				if i%idxObjects == 0 {
					b.StopTimer()
					s = impl.new()
					idxMustFill(b, s, idxBaseObjs)
					idxMustFill(b, s, idxExtraObjs)
					b.StartTimer()
				}
				if err := s.del(idxExtraObjs[i%idxObjects]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkIndexerByIndex reads the 1k objects of one app label value out of 100k.
func BenchmarkIndexerByIndex(b *testing.B) {
	idxBenchObjs()
	apps := make([]string, idxApps)
	for i := range apps {
		apps[i] = fmt.Sprint("app-", i)
	}
	b.Run("impl=ctrlkit", func(b *testing.B) {
		x := idxCtrlkit()
		for _, o := range idxBaseObjs {
			_ = x.Add(o)
		}
		b.ReportAllocs()
		i := 0
		defer idxReportCPU(b, idxCPUTime())
		for b.Loop() {
			got, err := x.ByIndex(idxAppIndex, apps[i%idxApps])
			if err != nil || len(got) != idxObjects/idxApps {
				b.Fatal(len(got), err)
			}
			i++
		}
	})
	b.Run("impl=ctrlkit-append", func(b *testing.B) {
		// AppendByIndex into a reused buffer: the zero-allocation form.
		x := idxCtrlkit()
		for _, o := range idxBaseObjs {
			_ = x.Add(o)
		}
		b.ReportAllocs()
		var buf []*corev1.ConfigMap
		i := 0
		defer idxReportCPU(b, idxCPUTime())
		for b.Loop() {
			var err error
			buf, err = x.AppendByIndex(buf[:0], idxAppIndex, apps[i%idxApps])
			if err != nil || len(buf) != idxObjects/idxApps {
				b.Fatal(len(buf), err)
			}
			i++
		}
	})
	b.Run("impl=client-go", func(b *testing.B) {
		x := idxClientgo()
		for _, o := range idxBaseObjs {
			_ = x.Add(o)
		}
		b.ReportAllocs()
		i := 0
		defer idxReportCPU(b, idxCPUTime())
		for b.Loop() {
			got, err := x.ByIndex(idxAppIndex, apps[i%idxApps])
			if err != nil || len(got) != idxObjects/idxApps {
				b.Fatal(len(got), err)
			}
			i++
		}
	})
	b.Run("impl=client-go-typed", func(b *testing.B) {
		// client-go's ByIndex turned into the typed slice ctrlkit's ByIndex returns, as a
		// typed caller (a generated lister) needs it.
		x := idxClientgo()
		for _, o := range idxBaseObjs {
			_ = x.Add(o)
		}
		b.ReportAllocs()
		i := 0
		defer idxReportCPU(b, idxCPUTime())
		for b.Loop() {
			objs, err := x.ByIndex(idxAppIndex, apps[i%idxApps])
			if err != nil || len(objs) != idxObjects/idxApps {
				b.Fatal(len(objs), err)
			}
			got := make([]*corev1.ConfigMap, len(objs))
			for j, o := range objs {
				got[j] = o.(*corev1.ConfigMap)
			}
			i++
		}
	})
}

// BenchmarkIndexerByIndexChanging is ByIndex when the value's bucket changed since
// the last read: every iteration first updates one object of the 100k so that it
// moves out of (or back into) the bucket of app-0, then reads app-0 (1k objects). It
// measures the cost when ctrlkit's cached snapshot was invalidated; ns/op and
// allocs/op include the Update, the same for both libraries.
func BenchmarkIndexerByIndexChanging(b *testing.B) {
	idxBenchObjs()
	in := idxBaseObjs[0] // indexed under app-0
	out := in.DeepCopy()
	out.ResourceVersion = "2"
	out.Labels["app"] = "moved"
	want := idxObjects / idxApps
	for _, impl := range idxImpls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			s := impl.new()
			idxMustFill(b, s, idxBaseObjs)
			b.ReportAllocs()
			i := 0
			defer idxReportCPU(b, idxCPUTime())
			for b.Loop() {
				obj, n := out, want-1
				if i%2 == 1 {
					obj, n = in, want
				}
				if err := s.update(obj); err != nil {
					b.Fatal(err)
				}
				got, err := s.byIndex(idxAppIndex, "app-0")
				if err != nil || got != n {
					b.Fatal(got, err)
				}
				i++
			}
		})
	}
}

// idxPeakHeap samples the bytes of live-or-unswept heap objects while fn runs and
// reports the highest value above the level before fn.
func idxPeakHeap(fn func()) uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	base := read()
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Microsecond)
		defer t.Stop()
		for {
			if v := read(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	fn()
	if v := read(); v > peak.Load() {
		peak.Store(v)
	}
	close(stop)
	<-done
	if p := peak.Load(); p > base {
		return p - base
	}
	return 0
}

// BenchmarkIndexerReplace measures Replace of 100k objects: "initial" into an empty
// store (the first list), "relist" into a store holding the same 100k keys (a relist
// after a watch error; every object is a new value). peak-MB is the highest heap
// growth seen while Replace ran (sampled); B/op counts all bytes it allocated.
func BenchmarkIndexerReplace(b *testing.B) {
	idxBenchObjs()
	for _, kind := range []string{"initial", "relist"} {
		for _, impl := range idxImpls {
			b.Run(kind+"/impl="+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				var peak uint64
				for b.Loop() {
					b.StopTimer()
					s := impl.new()
					next := idxBaseObjs
					if kind == "relist" {
						if err := s.replace(idxBaseObjs)(); err != nil {
							b.Fatal(err)
						}
						next = idxNewerObjs
					}
					replace := s.replace(next)
					runtime.GC()
					b.StartTimer()
					var err error
					peak += idxPeakHeap(func() { err = replace() })
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(peak)/float64(b.N)/1e6, "peak-MB")
			})
		}
	}
}

// idxReader is what the read benchmarks need from either implementation, each through
// what its users call: ctrlkit's Indexer and Lister, client-go's Indexer and the
// generated ConfigMap lister.
type idxReader struct {
	get      func(ns, name string) bool // Lister.Get in a namespace
	list     func() int                 // every object
	listKeys func() int                 // every key
	// listReuse and listKeysReuse list into a slice kept from call to call:
	// ctrlkit's AppendList and AppendKeys; client-go has no such call, so they are
	// its List and ListKeys.
	listReuse     func() int
	listKeysReuse func() int
	keys          func(app string) int                     // IndexKeys of one app label value
	nsList        func(ns string, sel labels.Selector) int // a namespace's objects matching sel
	sel           func(sel labels.Selector) int            // every object matching sel
	update        func(*corev1.ConfigMap) error
}

func idxCtrlkitReader() idxReader {
	x := idxCtrlkit()
	for _, o := range idxBaseObjs {
		_ = x.Add(o)
	}
	l := indexer.NewLister(x)
	var objBuf []*corev1.ConfigMap
	var keyBuf []string
	return idxReader{
		get: func(ns, name string) bool {
			_, err := l.Namespace(ns).Get(name)
			return err == nil
		},
		list:     func() int { return len(x.List()) },
		listKeys: func() int { return len(x.ListKeys()) },
		listReuse: func() int {
			objBuf = x.AppendList(objBuf[:0])
			return len(objBuf)
		},
		listKeysReuse: func() int {
			keyBuf = x.AppendKeys(keyBuf[:0])
			return len(keyBuf)
		},
		keys: func(app string) int {
			keys, _ := x.IndexKeys(idxAppIndex, app)
			return len(keys)
		},
		nsList: func(ns string, sel labels.Selector) int {
			objs, _ := l.Namespace(ns).List(sel)
			return len(objs)
		},
		sel: func(sel labels.Selector) int {
			objs, _ := l.List(sel)
			return len(objs)
		},
		update: x.Update,
	}
}

func idxClientgoReader() idxReader {
	x := idxClientgo()
	for _, o := range idxBaseObjs {
		_ = x.Add(o)
	}
	l := corelisters.NewConfigMapLister(x)
	return idxReader{
		get: func(ns, name string) bool {
			_, err := l.ConfigMaps(ns).Get(name)
			return err == nil
		},
		list:          func() int { return len(x.List()) },
		listKeys:      func() int { return len(x.ListKeys()) },
		listReuse:     func() int { return len(x.List()) },
		listKeysReuse: func() int { return len(x.ListKeys()) },
		keys: func(app string) int {
			keys, _ := x.IndexKeys(idxAppIndex, app)
			return len(keys)
		},
		nsList: func(ns string, sel labels.Selector) int {
			objs, _ := l.ConfigMaps(ns).List(sel)
			return len(objs)
		},
		sel: func(sel labels.Selector) int {
			objs, _ := l.List(sel)
			return len(objs)
		},
		update: func(o *corev1.ConfigMap) error { return x.Update(o) },
	}
}

// BenchmarkIndexerReads reads a store of 100k objects the ways controllers do: Get by
// namespace and name (alone, from 2 goroutines, and from 2 goroutines while a third
// updates objects), List and ListKeys of everything, the keys of one index value (1k),
// a namespace's objects (1k) with and without a label selector, and a label selector
// over everything (1k match). Each library is read through its listers.
func BenchmarkIndexerReads(b *testing.B) {
	idxBenchObjs()
	app := labels.SelectorFromSet(labels.Set{"app": "app-3"})
	perNS := idxObjects / idxNamespaces
	perApp := idxObjects / idxApps
	impls := []struct {
		name string
		r    idxReader
	}{{"ctrlkit", idxCtrlkitReader()}, {"client-go", idxClientgoReader()}}
	// Warm the process up before the first timed case: a fresh process's heap is
	// cold, and the side timed first paid for it (its first allocating case, ListKeys
	// again and again, took 6 ms a listing against 1.1 ms once warm). Both sides list
	// in turn, so both stores are listed before their cases, as in a running
	// controller.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		for _, impl := range impls {
			impl.r.list()
			impl.r.listKeys()
		}
	}
	// The cases of each side are collected first, then run case by case, the two
	// sides of a case one after the other, the side that goes first swapped from
	// one round of bench/report to the next (CTRLKIT_BENCH_ROUND): a case that
	// allocates is then timed in the heap state of its pair's case, not after every
	// case of its own side (after get-under-writes, the list cases of the side timed
	// there took 2–5 times as long as once the collector had cycled: fresh pages are
	// faulted in).
	type idxCase struct {
		name string
		f    func(b *testing.B)
	}
	byImpl := make([][]idxCase, len(impls))
	for k, impl := range impls {
		r := impl.r
		run := func(name string, f func(b *testing.B)) {
			byImpl[k] = append(byImpl[k], idxCase{name, f})
		}
		check := func(b *testing.B, got, want int) {
			if got != want {
				b.Fatalf("read %d objects, want %d", got, want)
			}
		}
		getParallel := func(b *testing.B) {
			var start atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(start.Add(idxObjects / 3))
				for pb.Next() {
					o := idxBaseObjs[i%idxObjects]
					if !r.get(o.Namespace, o.Name) {
						b.Error("missed", o.Name)
						return
					}
					i++
				}
			})
		}
		run("get", func(b *testing.B) {
			i := 0
			for b.Loop() {
				o := idxBaseObjs[i%idxObjects]
				if !r.get(o.Namespace, o.Name) {
					b.Fatal("missed", o.Name)
				}
				i++
			}
		})
		run("get-parallel", getParallel)
		run("get-under-writes", func(b *testing.B) {
			stop, done := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					objs := idxNewerObjs
					if (i/idxObjects)%2 == 1 {
						objs = idxBaseObjs
					}
					if err := r.update(objs[i%idxObjects]); err != nil {
						b.Error(err)
						return
					}
				}
			}()
			getParallel(b)
			close(stop)
			<-done
		})
		run("list", func(b *testing.B) {
			for b.Loop() {
				check(b, r.list(), idxObjects)
			}
		})
		run("listkeys", func(b *testing.B) {
			for b.Loop() {
				check(b, r.listKeys(), idxObjects)
			}
		})
		run("list-reuse", func(b *testing.B) {
			for b.Loop() {
				check(b, r.listReuse(), idxObjects)
			}
		})
		run("listkeys-reuse", func(b *testing.B) {
			for b.Loop() {
				check(b, r.listKeysReuse(), idxObjects)
			}
		})
		run("indexkeys", func(b *testing.B) {
			i := 0
			for b.Loop() {
				check(b, r.keys(fmt.Sprint("app-", i%idxApps)), perApp)
				i++
			}
		})
		run("namespace", func(b *testing.B) {
			i := 0
			for b.Loop() {
				check(b, r.nsList(fmt.Sprint("ns-", i%idxNamespaces), labels.Everything()), perNS)
				i++
			}
		})
		run("namespace-selector", func(b *testing.B) {
			i := 0
			for b.Loop() {
				// In each namespace, 10 of the 1k objects carry app-3.
				check(b, r.nsList(fmt.Sprint("ns-", i%idxNamespaces), app), perApp/idxNamespaces)
				i++
			}
		})
		run("selector", func(b *testing.B) {
			for b.Loop() {
				check(b, r.sel(app), perApp)
			}
		})
	}
	round, _ := strconv.Atoi(os.Getenv("CTRLKIT_BENCH_ROUND")) // 0 when unset
	first := round % len(impls)
	for i := range byImpl[0] {
		for j := range impls {
			k := (j + first) % len(impls)
			c := byImpl[k][i]
			b.Run(c.name+"/impl="+impls[k].name, func(b *testing.B) {
				b.ReportAllocs()
				defer idxReportCPU(b, idxCPUTime())
				c.f(b)
			})
		}
	}
}

// BenchmarkIndexerListKeysOnce times the first ListKeys of a freshly filled store of
// 100k objects (a store listed once, say at start-up): ctrlkit builds every key from
// its object (it keeps the keys from a second listing on, which the listkeys row of
// BenchmarkIndexerReads measures), client-go copies the keys it stores. Each store is
// filled and the heap collected with the timer stopped, after one untimed store and
// listing (see BenchmarkIndexerAdd: a fresh process's heap is cold). The keys are
// those of the other benchmarks, 13 bytes ("ns-7/cm-12345").
func BenchmarkIndexerListKeysOnce(b *testing.B) {
	idxBenchObjs()
	idxListKeysOnce(b, idxBaseObjs)
}

// BenchmarkIndexerListKeysOnceLong is BenchmarkIndexerListKeysOnce with keys of 46
// bytes ("team-payments-07/checkout-api-012345-7d9f8b6c4"), as a Deployment's pods
// have: ctrlkit builds and writes 3.5 times the key bytes, client-go's cost does not
// depend on them.
func BenchmarkIndexerListKeysOnceLong(b *testing.B) {
	idxListKeysOnce(b, idxNamedObjs(func(i int) (string, string) {
		return fmt.Sprintf("team-payments-%02d", i%idxNamespaces), fmt.Sprintf("checkout-api-%06d-7d9f8b6c4", i)
	}))
}

// BenchmarkIndexerListKeysOnceCluster is BenchmarkIndexerListKeysOnce with objects in
// no namespace (as Nodes, Namespaces or PersistentVolumes): a key is the name, which
// ctrlkit returns as it is, without building it.
func BenchmarkIndexerListKeysOnceCluster(b *testing.B) {
	idxListKeysOnce(b, idxNamedObjs(func(i int) (string, string) {
		return "", fmt.Sprintf("node-%06d", i)
	}))
}

// idxNamedObjs returns idxObjects ConfigMaps, the i-th with the namespace and name
// that nsName(i) gives.
func idxNamedObjs(nsName func(i int) (ns, name string)) []*corev1.ConfigMap {
	objs := make([]*corev1.ConfigMap, idxObjects)
	for i := range objs {
		ns, name := nsName(i)
		objs[i] = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:       ns,
				Name:            name,
				ResourceVersion: "1",
				Labels:          map[string]string{"app": fmt.Sprintf("app-%d", (i/idxNamespaces)%idxApps)},
			},
		}
	}
	return objs
}

func idxListKeysOnce(b *testing.B, objs []*corev1.ConfigMap) {
	for _, impl := range []struct {
		name string
		new  func() func() []string
	}{{"ctrlkit", func() func() []string {
		x := idxCtrlkit()
		for _, o := range objs {
			_ = x.Add(o)
		}
		return x.ListKeys
	}}, {"client-go", func() func() []string {
		x := idxClientgo()
		for _, o := range objs {
			_ = x.Add(o)
		}
		return x.ListKeys
	}}} {
		b.Run("impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			impl.new()()
			for b.Loop() {
				b.StopTimer()
				listKeys := impl.new()
				runtime.GC()
				b.StartTimer()
				if n := len(listKeys()); n != len(objs) {
					b.Fatalf("listed %d keys, want %d", n, len(objs))
				}
			}
		})
	}
}

// BenchmarkIndexerMemory reports the heap retained by a store of 100k objects, per
// object, not counting the objects themselves (they are allocated before).
// "ctrlkit-snapshots" also reads every value of both indexes with ByIndex once, so
// that the store holds a cached snapshot for each: the most ByIndex can add.
func BenchmarkIndexerMemory(b *testing.B) {
	idxBenchObjs()
	impls := append(idxImpls[:len(idxImpls):len(idxImpls)], struct {
		name string
		new  func() idxStore
	}{"ctrlkit-snapshots", func() idxStore {
		x := idxCtrlkit()
		s := idxStore{add: func(cm *corev1.ConfigMap) error {
			if err := x.Add(cm); err != nil {
				return err
			}
			if x.Len() == idxObjects {
				// The store is full: cache the snapshot of every index value.
				for _, name := range []string{indexer.NamespaceIndexName, idxAppIndex} {
					vals, _ := x.IndexValues(name)
					for _, v := range vals {
						_, _ = x.ByIndex(name, v)
					}
				}
			}
			return nil
		}}
		return s
	}})
	for _, impl := range impls {
		b.Run("impl="+impl.name, func(b *testing.B) {
			var total uint64
			for b.Loop() {
				b.StopTimer()
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				b.StartTimer()
				s := impl.new()
				idxMustFill(b, s, idxBaseObjs)
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				total += after.HeapAlloc - before.HeapAlloc
				runtime.KeepAlive(s)
				b.StartTimer()
			}
			b.ReportMetric(float64(total)/float64(b.N)/idxObjects, "B/object")
		})
	}
}

// BenchmarkIndexerManyValues: 300 objects, each indexed under the same 3,000 values (a
// label holding a list, split by the index function: say every node a pod may run on),
// updated in turn with the same values (new objects, as a relist brings) and moved to
// 3,000 other values (ns per update). Removing an object from a value moves another
// object's membership, so the cost per object must stay near-linear in its values.
func BenchmarkIndexerManyValues(b *testing.B) {
	const n, v = 300, 3000
	mk := func(rv, prefix string) []*corev1.ConfigMap {
		vals := make([]string, v)
		for j := range vals {
			vals[j] = fmt.Sprintf("%s%d", prefix, j)
		}
		joined := strings.Join(vals, ",")
		objs := make([]*corev1.ConfigMap, n)
		for i := range objs {
			objs[i] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint("cm-", i), ResourceVersion: rv, Labels: map[string]string{"vals": joined}}}
		}
		return objs
	}
	base, same, moved := mk("1", "v"), mk("2", "v"), mk("2", "w")
	split := func(cm *corev1.ConfigMap) []string { return strings.Split(cm.Labels["vals"], ",") }
	for _, c := range []struct {
		name  string
		newer []*corev1.ConfigMap
	}{{"same-values", same}, {"other-values", moved}} {
		for _, impl := range []struct {
			name   string
			update func() func(*corev1.ConfigMap) error
		}{{"ctrlkit", func() func(*corev1.ConfigMap) error {
			x := indexer.New(indexer.Config[*corev1.ConfigMap]{Indexers: indexer.Indexers[*corev1.ConfigMap]{
				"vals": func(cm *corev1.ConfigMap) ([]string, error) { return split(cm), nil },
			}})
			for _, o := range base {
				_ = x.Add(o)
			}
			return x.Update
		}}, {"client-go", func() func(*corev1.ConfigMap) error {
			x := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
				"vals": func(obj any) ([]string, error) { return split(obj.(*corev1.ConfigMap)), nil },
			})
			for _, o := range base {
				_ = x.Add(o)
			}
			return func(cm *corev1.ConfigMap) error { return x.Update(cm) }
		}}} {
			b.Run(c.name+"/impl="+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				update := impl.update()
				i := 0
				for b.Loop() {
					objs := c.newer
					if (i/n)%2 == 1 {
						objs = base
					}
					if err := update(objs[i%n]); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

// BenchmarkIndexerGetAbsent times a read of an object the store does not hold, as a
// controller does for every key whose object was deleted: through the listers
// (by=lister: the lookup and the NotFound error, which both build) and by key
// (by=key: Get of ctrlkit, GetByKey of client-go; the lookup alone). At two sizes:
// 100k objects (a table about 3/4 full) and 114,688, the most a table of 131,072
// cells holds before it grows (7/8 full, the longest probes). The keys asked for are
// in the store's namespaces, named as its objects are but with ids past them.
func BenchmarkIndexerGetAbsent(b *testing.B) {
	for _, n := range []int{idxObjects, 114_688} {
		objs := idxObjs(n, 0, "1")
		absent := idxObjs(1<<14, n, "1")
		keys := make([]string, len(absent))
		for i, o := range absent {
			keys[i] = o.Namespace + "/" + o.Name
		}
		type reads struct {
			lister func(ns, name string) error
			key    func(key string) bool
		}
		for _, impl := range []struct {
			name string
			r    reads
		}{{"ctrlkit", func() reads {
			x := idxCtrlkit()
			for _, o := range objs {
				_ = x.Add(o)
			}
			l := indexer.NewLister(x)
			return reads{
				lister: func(ns, name string) error {
					_, err := l.Namespace(ns).Get(name)
					return err
				},
				key: func(key string) bool {
					_, ok := x.Get(key)
					return ok
				},
			}
		}()}, {"client-go", func() reads {
			x := idxClientgo()
			for _, o := range objs {
				_ = x.Add(o)
			}
			l := corelisters.NewConfigMapLister(x)
			return reads{
				lister: func(ns, name string) error {
					_, err := l.ConfigMaps(ns).Get(name)
					return err
				},
				key: func(key string) bool {
					_, ok, _ := x.GetByKey(key)
					return ok
				},
			}
		}()}} {
			b.Run(fmt.Sprintf("n=%d/by=lister/impl=%s", n, impl.name), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					o := absent[i%len(absent)]
					if err := impl.r.lister(o.Namespace, o.Name); !apierrors.IsNotFound(err) {
						b.Fatalf("Get %s/%s: %v, want not found", o.Namespace, o.Name, err)
					}
					i++
				}
			})
			b.Run(fmt.Sprintf("n=%d/by=key/impl=%s", n, impl.name), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if impl.r.key(keys[i%len(keys)]) {
						b.Fatalf("Get %s found an object", keys[i%len(keys)])
					}
					i++
				}
			})
		}
	}
}

// BenchmarkIndexerGetRandom reads objects the store holds, 100k of them, in a shuffled
// order, as a controller reads the objects of the keys its events bring: by key (Get
// of ctrlkit, GetByKey of client-go: the lookup alone) and through the listers. Unlike
// the Lister Get of BenchmarkIndexerReads, which reads in the order the objects were
// stored, each read lands on table cells and object memory that are usually out of
// cache. ctrlkit keeps no key strings: it compares the key asked for with the name in
// the stored object (and its namespace in the namespace index), memory that client-go's
// own copies of the keys, allocated together when the objects were stored, are denser
// than.
func BenchmarkIndexerGetRandom(b *testing.B) {
	objs := idxObjs(idxObjects, 0, "1")
	order := rand.New(rand.NewPCG(1, 2)).Perm(len(objs))
	// The keys and names asked for are copies, as a controller's are (they come from
	// its queue), laid out together in the order they are asked for.
	keys := make([]string, len(objs))
	refs := make([]struct{ ns, name string }, len(objs))
	for i, j := range order {
		keys[i] = objs[j].Namespace + "/" + objs[j].Name
		refs[i].ns, refs[i].name = strings.Clone(objs[j].Namespace), strings.Clone(objs[j].Name)
	}
	x := idxCtrlkit()
	y := idxClientgo()
	for _, o := range objs {
		_ = x.Add(o)
		_ = y.Add(o)
	}
	xl := indexer.NewLister(x)
	yl := corelisters.NewConfigMapLister(y)
	for _, impl := range []struct {
		name   string
		key    func(key string) bool
		lister func(ns, name string) bool
	}{
		{"ctrlkit",
			func(key string) bool { _, ok := x.Get(key); return ok },
			func(ns, name string) bool { _, err := xl.Namespace(ns).Get(name); return err == nil }},
		{"client-go",
			func(key string) bool { _, ok, _ := y.GetByKey(key); return ok },
			func(ns, name string) bool { _, err := yl.ConfigMaps(ns).Get(name); return err == nil }},
	} {
		b.Run("by=key/impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if !impl.key(keys[i%len(keys)]) {
					b.Fatalf("Get %s found nothing", keys[i%len(keys)])
				}
				i++
			}
		})
		b.Run("by=lister/impl="+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := refs[i%len(refs)]
				if !impl.lister(r.ns, r.name) {
					b.Fatalf("Get %s/%s found nothing", r.ns, r.name)
				}
				i++
			}
		})
	}
}
