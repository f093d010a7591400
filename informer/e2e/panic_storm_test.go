//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// doomed reports whether the panicking handler panics on the object of key: one
// half of the keys, the same on every run.
func doomed(key string) bool { return bucket(key, 2) == 0 }

// panicker is a Handler that panics in every call (OnAdd, OnUpdate, OnDelete and
// resyncs) for the doomed half of the keys, and hands its calls for the other
// half, resyncs aside, to a checker: what it is given for that half must still
// form a consistent story that ends at the server's state.
type panicker struct {
	good *checker[configMap]

	mu           sync.Mutex
	calls        int            // every call, returned or panicked
	panics       map[string]int // the calls that panicked, by method
	resyncs      int
	resyncPanics int
}

func newPanicker() *panicker {
	return &panicker{good: newChecker[configMap](), panics: map[string]int{}}
}

// enter counts a call and reports whether it must panic.
func (p *panicker) enter(call, k string, resync bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if resync {
		p.resyncs++
	}
	if !doomed(k) {
		return false
	}
	p.panics[call]++
	if resync {
		p.resyncPanics++
	}
	return true
}

func (p *panicker) OnAdd(obj configMap, inInitialList bool) {
	if p.enter("OnAdd", key(obj), false) {
		panic("handler bug on " + key(obj))
	}
	p.good.OnAdd(obj, inInitialList)
}

func (p *panicker) OnUpdate(old, obj configMap) {
	resync := old == obj
	if p.enter("OnUpdate", key(obj), resync) {
		panic("handler bug on " + key(obj))
	}
	if !resync {
		p.good.OnUpdate(old, obj)
	}
}

func (p *panicker) OnDelete(d informer.Deleted[configMap]) {
	if p.enter("OnDelete", d.Key, false) {
		panic("handler bug on " + d.Key)
	}
	p.good.OnDelete(d)
}

// TestHandlerPanicStorm runs a create/update/delete storm over 2,000 ConfigMaps
// against an informer with two handlers: one panics in every call for half of
// the objects (initial adds, adds, updates, deletes and resyncs every two
// seconds), the other checks that its calls form a consistent story. Nothing may
// crash; at the end the cache and the checker equal the server, the panicking
// handler's calls for the other half equal the server's objects of that half
// (it went on after each panic), and every panic was reported once as a
// *informer.PanicError naming the key and the call, and counted: Panicked equals
// the panics reported, and Delivered + Panicked the calls the handler got.
//
// No upstream test covers this: client-go's processorListener lets a handler's
// panic crash the process (utilruntime.HandleCrash re-panics by default).
func TestHandlerPanicStorm(t *testing.T) {
	const (
		objects = 2000
		writers = 6
		length  = 12 * time.Second
	)
	begin := time.Now()
	ns := env.Namespace(t)
	createConfigMaps(t, ns, objects, 16)
	var sink errorSink
	inf := informer.New(reflector.FromTyped(admin(t).CoreV1().ConfigMaps(ns)), informer.Config[configMap]{
		Name:      "panic-storm",
		OnError:   sink.add,
		Transform: reflector.StripManagedFields[configMap],
	})
	bad := newPanicker()
	badReg := mustAdd(t, inf, bad, informer.HandlerOptions{ResyncPeriod: 2 * time.Second})
	steady := newChecker[configMap]()
	steadyReg := mustAdd(t, inf, steady, informer.HandlerOptions{})
	stop := runInformer(t, inf)
	ctx, cancel := context.WithTimeout(t.Context(), converge)
	defer cancel()
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := badReg.WaitForSync(ctx); err != nil {
		t.Fatalf("the panicking handler did not sync: %v", err)
	}

	storm := startChurn(t, ns, writers, objects, func(_ *rand.Rand, name string, i int) configMap { return newConfigMap(name, i) })
	<-time.After(length)
	writes := storm.end(t)

	want := serverVersions(t, ns)
	took := waitInSync(t, converge, want, inf, steady)
	wantGood := map[string]string{}
	for k, rv := range want {
		if !doomed(k) {
			wantGood[k] = rv
		}
	}
	waitView(t, converge, "the panicking handler's other half", wantGood, bad.good)
	stop() // no call in progress from here on
	steady.check(t, "checker")
	bad.good.check(t, "panicking handler, other half")

	st := badReg.Stats()
	panics, other := errorsOf[*informer.PanicError](sink.all())
	for _, err := range other {
		t.Errorf("OnError got %v, want only the handler's panics", err)
	}
	bad.mu.Lock()
	calls, resyncs, resyncPanics := bad.calls, bad.resyncs, bad.resyncPanics
	made := bad.panics
	bad.mu.Unlock()
	total := made["OnAdd"] + made["OnUpdate"] + made["OnDelete"]
	t.Logf("%d objects, %d writes in %v (%s), %d on the server at the end; cache and checker converged %v after the storm",
		objects, writes, length, storm, len(want), took.Round(time.Millisecond))
	t.Logf("panicking handler: %d calls (%d resyncs), %d panics %v (%d in resyncs); stats %+v; checker stats %+v; test took %v",
		calls, resyncs, total, made, resyncPanics, st, steadyReg.Stats(), time.Since(begin).Round(time.Millisecond))

	if st.Panicked == 0 || int(st.Panicked) != len(panics) || int(st.Panicked) != total {
		t.Errorf("Stats.Panicked = %d, %d panics reported, %d made; want all three equal and not 0", st.Panicked, len(panics), total)
	}
	if int(st.Delivered+st.Panicked) != calls {
		t.Errorf("Delivered %d + Panicked %d = %d, want the %d calls the handler got", st.Delivered, st.Panicked, st.Delivered+st.Panicked, calls)
	}
	reported := map[string]int{}
	for _, p := range panics {
		reported[p.Call]++
		if !doomed(p.Key) || p.Informer != inf.Name() || len(p.Stack) == 0 || fmt.Sprint(p.Value) != "handler bug on "+p.Key ||
			!strings.Contains(p.Error(), p.Key) {
			t.Errorf("panic report %+v: want a doomed key, the informer's name, the panic's value and a stack", p)
			break
		}
	}
	if diff := cmp.Diff(made, reported); diff != "" {
		t.Errorf("panics by call (-made +reported):\n%s", diff)
	}
	if made["OnAdd"] == 0 || made["OnUpdate"] == 0 || made["OnDelete"] == 0 || resyncPanics == 0 {
		t.Errorf("panics %v, %d in resyncs: the storm did not make every kind of call panic", made, resyncPanics)
	}
	if h := inf.Health(); h.Stats.Failures != 0 {
		t.Errorf("reflector failures during the storm: %+v (last error %v)", h.Stats, h.LastError)
	}
}
