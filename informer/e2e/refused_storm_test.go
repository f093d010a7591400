//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// badKey is the data key that marks a ConfigMap bad; its value says how
// refuseBad refuses it.
const badKey = "bad"

// The three ways a Transform refuses an object.
var refusals = []string{"error", "nil", "panic"}

var errBadObject = errors.New("marked bad")

// refuseBad is the Transform of the refused-object storm: it refuses the
// ConfigMaps marked bad by returning an error, nil or panicking, as the mark
// says, and keeps the others unchanged.
func refuseBad(c configMap) (configMap, error) {
	switch c.Data[badKey] {
	case "":
		return c, nil
	case "error":
		return nil, errBadObject
	case "nil":
		return nil, nil
	}
	panic("transform bug on " + key(c))
}

func withBadMark(c configMap, how string) configMap {
	if how != "" {
		c.Data[badKey] = how
	}
	return c
}

// serverObjects lists the ConfigMaps of ns and splits them into the good ones,
// by key, and the bad ones.
func serverObjects(t *testing.T, ns string) (good map[string]configMap, bad []configMap, rv string) {
	t.Helper()
	list, err := admin(t).CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good = map[string]configMap{}
	for i := range list.Items {
		c := &list.Items[i]
		if c.Data[badKey] == "" {
			good[key(c)] = c
		} else {
			bad = append(bad, c)
		}
	}
	return good, bad, list.ResourceVersion
}

func versionsOf(objs map[string]configMap) map[string]string {
	out := make(map[string]string, len(objs))
	for k, o := range objs {
		out[k] = o.ResourceVersion
	}
	return out
}

// refusingInformer is one informer of the refused-object storm with what it
// reported.
type refusingInformer struct {
	name string
	inf  *informer.Informer[configMap]
	mode reflector.WatchListMode
	rec  *checker[configMap]
	sink *errorSink
	stop func()
}

// refusedSoFar returns the refusals inf reported, by cause ("error", "nil",
// "panic"), and the errors it reported that are not refusals.
func (r *refusingInformer) refusedSoFar(t *testing.T) (byCause map[string]int, keys map[string]bool, other []error) {
	t.Helper()
	refused, other := errorsOf[*reflector.RefusedError](r.sink.all())
	byCause, keys = map[string]int{}, map[string]bool{}
	for _, ref := range refused {
		var pe *reflector.PanicError
		switch {
		case errors.Is(ref, errBadObject):
			byCause["error"]++
		case errors.As(ref, &pe):
			if fmt.Sprint(pe.Value) != "transform bug on "+ref.Key || len(pe.Stack) == 0 {
				t.Errorf("%s: refusal for a panic %v: want the panic's value and a stack", r.name, ref)
			}
			byCause["panic"]++
		default:
			byCause["nil"]++
		}
		if ref.Name != r.inf.Name() || ref.Err == nil || ref.ResourceVersion == "" {
			t.Errorf("%s: refusal %+v: want the informer's name, a cause and a resourceVersion", r.name, ref)
		}
		keys[ref.Key] = true
	}
	return byCause, keys, other
}

// checkCache compares the cache with want object by object.
func (r *refusingInformer) checkCache(t *testing.T, when string, want map[string]configMap) {
	t.Helper()
	w := make([]configMap, 0, len(want))
	for _, o := range want {
		w = append(w, o)
	}
	if diff := cmp.Diff(sortedByKey(w), sortedByKey(r.inf.Indexer().List())); diff != "" {
		t.Errorf("%s, %s: cache differs from the server's good objects (-server +cache):\n%s", r.name, when, diff)
	}
}

// TestRefusedObjectStorm runs four informers over one namespace of 2,000
// ConfigMaps, a tenth of them marked bad from the start: through FromTyped and
// FromREST (protobuf), each with streaming lists on and off. Their Transform
// refuses the bad objects, by an error, by returning nil or by panicking, as each
// is marked. While a storm of creates, updates and deletes runs, a fifth of the
// writes mark their object bad (and the others good). Each informer must sync
// despite the bad objects; after the storm and one last write that turns a good
// object bad, WaitForResourceVersion of that write returns and the cache then
// equals the server's good objects exactly; a checker handler's calls are
// consistent and end at the same state (a cached object turned bad is a
// tombstone); every refusal is reported once as a *reflector.RefusedError and
// counted in Health().Stats.Refused, with no failure and no relist, and every
// write of the storm was one watch event, stored or refused. At last every bad
// object is made good and must come back.
//
// No upstream test covers this: client-go logs and skips a watch event whose
// Transform fails (the cache keeps the previous state) and fails the whole list
// on one such object, retrying it with backoff.
func TestRefusedObjectStorm(t *testing.T) {
	const (
		objects = 2000
		writers = 6
		length  = 12 * time.Second
	)
	begin := time.Now()
	ns := env.Namespace(t)
	initialBad := map[string]bool{}
	createEach(t, ns, objects, 16, func(i int) configMap {
		c := newConfigMap("cm-"+strconv.Itoa(i), i)
		if i%10 == 0 {
			withBadMark(c, refusals[i/10%3])
		}
		return c
	})
	for i := 0; i < objects; i += 10 {
		initialBad[ns+"/cm-"+strconv.Itoa(i)] = true
	}
	created := time.Since(begin)

	client := admin(t)
	var infs []*refusingInformer
	for _, src := range []string{"typed", "rest"} {
		for _, mode := range []reflector.WatchListMode{reflector.WatchListOn, reflector.WatchListOff} {
			lw := reflector.FromTyped(client.CoreV1().ConfigMaps(ns))
			if src == "rest" {
				lw = reflector.FromREST[configMap](client.CoreV1().RESTClient(), "configmaps", ns)
			}
			r := &refusingInformer{name: src + "/watchlist-" + mode.String(), mode: mode, rec: newChecker[configMap](), sink: &errorSink{}}
			r.inf = informer.New(lw, informer.Config[configMap]{
				Name:      r.name,
				OnError:   r.sink.add,
				Transform: refuseBad,
				Reflector: reflector.Config[configMap]{WatchList: mode},
			})
			mustAdd(t, r.inf, r.rec, informer.HandlerOptions{})
			infs = append(infs, r)
		}
	}
	for _, r := range infs {
		r.stop = runInformer(t, r.inf)
	}

	// Every informer syncs without the bad objects, having refused each once.
	good, bad, _ := serverObjects(t, ns)
	if len(bad) != len(initialBad) {
		t.Fatalf("the server holds %d bad objects, want %d", len(bad), len(initialBad))
	}
	ctx, cancel := context.WithTimeout(t.Context(), converge)
	defer cancel()
	for _, r := range infs {
		if err := r.inf.WaitForSync(ctx); err != nil {
			t.Fatalf("%s did not sync with bad objects on the server: %v (health %+v)", r.name, err, r.inf.Health())
		}
		r.checkCache(t, "after the sync", good)
		waitView(t, converge, r.name+" checker", versionsOf(good), r.rec)
		byCause, keys, other := r.refusedSoFar(t)
		s := r.inf.Health().Stats
		if diff := cmp.Diff(initialBad, keys); diff != "" || s.Refused != int64(len(initialBad)) {
			t.Errorf("%s after the sync: %d refused (%v), Stats.Refused %d; want the %d bad objects once each; keys (-bad +refused):\n%s",
				r.name, len(keys), byCause, s.Refused, len(initialBad), diff)
		}
		if lists, streamed := s.Lists, s.StreamingLists; (r.mode == reflector.WatchListOn) != (streamed == 1 && lists == 0) ||
			(r.mode == reflector.WatchListOff) != (lists == 1 && streamed == 0) {
			t.Errorf("%s synced with %d LISTs and %d streaming lists", r.name, lists, streamed)
		}
		for _, err := range other {
			t.Errorf("%s: unexpected error while syncing: %v", r.name, err)
		}
	}
	synced := time.Since(begin)

	var marked atomic.Int64 // creates and updates tried with a bad object
	storm := startChurn(t, ns, writers, objects, func(rnd *rand.Rand, name string, i int) configMap {
		c := newConfigMap(name, i)
		if rnd.IntN(5) == 0 {
			marked.Add(1)
			withBadMark(c, refusals[rnd.IntN(3)])
		}
		return c
	})
	<-time.After(length)
	writes := storm.end(t)

	// The last write of all turns a good object bad: the informers must pass its
	// resourceVersion although they refuse it.
	good, _, _ = serverObjects(t, ns)
	var victim configMap
	for _, o := range good {
		victim = o.DeepCopy()
		break
	}
	last, err := client.CoreV1().ConfigMaps(ns).Update(ctx, withBadMark(victim, "panic"), metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good, bad, _ = serverObjects(t, ns)
	for _, r := range infs {
		start := time.Now()
		if err := r.inf.WaitForResourceVersion(ctx, last.ResourceVersion); err != nil {
			t.Fatalf("%s: WaitForResourceVersion(%s) of the last write = %v (health %+v)", r.name, last.ResourceVersion, err, r.inf.Health())
		}
		if _, err := r.inf.Lister().Get(ns, last.Name); err == nil {
			t.Errorf("%s: %s is cached after it was refused", r.name, last.Name)
		}
		r.checkCache(t, "after the storm", good)
		waitView(t, converge, r.name+" checker", versionsOf(good), r.rec)
		t.Logf("%s reached the last write %v after the storm ended", r.name, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("%d writes in %v (%s; %d of the creates and updates tried wrote a bad object); at the end %d good and %d bad objects on the server",
		writes, length, storm, marked.Load(), len(good), len(bad))

	for _, r := range infs {
		byCause, _, other := r.refusedSoFar(t)
		n := byCause["error"] + byCause["nil"] + byCause["panic"]
		h := r.inf.Health()
		t.Logf("%s: refused %d %v; stats %+v", r.name, n, byCause, h.Stats)
		if h.Stats.Refused != int64(n) || byCause["error"] == 0 || byCause["nil"] == 0 || byCause["panic"] == 0 {
			t.Errorf("%s: Stats.Refused = %d, %d refusals reported %v; want the same, each cause present", r.name, h.Stats.Refused, n, byCause)
		}
		// No relist: each write since the sync was one watch event, stored or
		// refused.
		if s := h.Stats; s.Lists+s.StreamingLists != 1 || s.Events+s.Refused-int64(len(initialBad)) != writes+1 {
			t.Errorf("%s: %d events stored and %d refused since the sync, %d lists; want %d writes, one list",
				r.name, s.Events, s.Refused-int64(len(initialBad)), s.Lists+s.StreamingLists, writes+1)
		}
		if n <= len(initialBad) {
			t.Errorf("%s: %d refusals, no more than in the initial list: the storm's bad writes were not refused", r.name, n)
		}
		if h.Stats.Failures != 0 || h.ConsecutiveFailures != 0 {
			t.Errorf("%s: failures during the storm: %+v (last error %v)", r.name, h.Stats, h.LastError)
		}
		for _, err := range other {
			t.Errorf("%s: unexpected error: %v", r.name, err)
		}
	}

	// Every bad object is made good: each comes back to the cache and to the
	// handler.
	fixed := make(chan string, len(bad))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < len(bad); i += 8 {
				c := bad[i].DeepCopy()
				delete(c.Data, badKey)
				u, err := client.CoreV1().ConfigMaps(ns).Update(ctx, c, metav1.UpdateOptions{})
				if err != nil {
					errs <- err
					return
				}
				fixed <- u.ResourceVersion
			}
		})
	}
	wg.Wait()
	close(errs)
	close(fixed)
	for err := range errs {
		t.Fatal(err)
	}
	maxRV := int64(0)
	for rv := range fixed {
		maxRV = max(maxRV, rvOf(&metav1.ObjectMeta{ResourceVersion: rv}))
	}
	all, stillBad, _ := serverObjects(t, ns)
	if len(stillBad) != 0 {
		t.Fatalf("%d objects still bad on the server", len(stillBad))
	}
	for _, r := range infs {
		before := r.inf.Health().Stats.Refused
		if err := r.inf.WaitForResourceVersion(ctx, strconv.FormatInt(maxRV, 10)); err != nil {
			t.Fatalf("%s: WaitForResourceVersion after making every object good = %v", r.name, err)
		}
		r.checkCache(t, "after making every object good", all)
		waitView(t, converge, r.name+" checker", versionsOf(all), r.rec)
		if got := r.inf.Health().Stats.Refused; got != before {
			t.Errorf("%s: %d refusals after every object was made good", r.name, got-before)
		}
		r.stop()
		r.rec.check(t, r.name+" checker")
		r.rec.mu.Lock()
		t.Logf("%s checker: %d initial adds, %d adds, %d updates, %d deletes (%d tombstones)",
			r.name, r.rec.initial, r.rec.adds, r.rec.updates, r.rec.deletes, len(r.rec.tombstones))
		r.rec.mu.Unlock()
	}
	t.Logf("%d objects (%d bad) created in %v, four informers synced at %v, %d bad objects made good; test took %v",
		objects, len(initialBad), created.Round(time.Millisecond), synced.Round(time.Millisecond), len(bad), time.Since(begin).Round(time.Millisecond))
}
