package reconcile

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// logLines is a logr sink that keeps the error lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	l.lines = append(l.lines, args)
	l.mu.Unlock()
}

func (l *logLines) containing(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// TestMapperAndPredicatePanicsAreContained: a Mapper and a Predicate that panic
// on some objects, under churn and through resyncs, do not stop the process or
// the controller: every other object is reconciled to its latest state, each
// panic is logged with the object's key and its stack and counted.
func TestMapperAndPredicatePanicsAreContained(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := reflectortest.NewServer[*corev1.ConfigMap](reflectortest.Config{})
		create := func(name string, v int) {
			c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string]string{"v": strconv.Itoa(v)}}
			if _, err := srv.Update(c); apierrors.IsNotFound(err) {
				_, err = srv.Create(c)
			} else if err != nil {
				t.Fatal(err)
			}
		}
		for i := range 20 {
			create("cm-"+strconv.Itoa(i), 0)
		}
		inf := informer.New(srv, informer.Config[*corev1.ConfigMap]{})
		// The mapper panics on names ending in 3, the predicate on names ending in 7.
		mapper := func(c *corev1.ConfigMap) []types.NamespacedName {
			if strings.HasSuffix(c.Name, "3") {
				panic("mapper bug")
			}
			return ByObject[*corev1.ConfigMap]()(c)
		}
		pred := func(e Event[*corev1.ConfigMap]) bool {
			if strings.HasSuffix(e.Obj.Name, "7") {
				panic("predicate bug")
			}
			return true
		}
		var mu sync.Mutex
		seen := map[string]string{} // key → the v the reconciler last read
		rec := Func[types.NamespacedName](func(ctx context.Context, key types.NamespacedName) (Result, error) {
			c, err := inf.Lister().Get(key.Namespace, key.Name)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				delete(seen, key.Name)
				return Result{}, nil
			}
			seen[key.Name] = c.Data["v"]
			return Result{}, nil
		})
		var logs logLines
		m := &countingMetrics{}
		c := New(rec, Config[types.NamespacedName]{
			Name: "cms", Metrics: m, ResyncPeriod: time.Minute,
			Logger: funcr.New(logs.add, funcr.Options{}),
		})
		if err := c.Watch(FromInformer(inf, mapper, pred)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { inf.Run(ctx) })
		errc := make(chan error, 1)
		wg.Go(func() { errc <- c.Run(ctx) })
		synctest.Wait()
		for round := 1; round <= 30; round++ {
			for i := range 25 {
				create("cm-"+strconv.Itoa(i), round)
			}
			if round%10 == 0 {
				srv.Delete("ns", "cm-"+strconv.Itoa(round/10))
				time.Sleep(2 * time.Minute) // resyncs under churn, with the panicking mapper
			}
			synctest.Wait()
		}
		// Two objects are gone at the end: their clean-up must run.
		srv.Delete("ns", "cm-1")
		srv.Delete("ns", "cm-2")
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		cancel()
		wg.Wait()
		if err := <-errc; err != nil {
			t.Fatalf("Run = %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, o := range srv.Items() {
			if strings.HasSuffix(o.Name, "3") || strings.HasSuffix(o.Name, "7") {
				continue
			}
			if got := seen[o.Name]; got != o.Data["v"] {
				t.Errorf("%s reconciled at v=%q, the server has v=%q", o.Name, got, o.Data["v"])
			}
		}
		for _, gone := range []string{"cm-1", "cm-2"} {
			if _, ok := seen[gone]; ok {
				t.Errorf("%s was deleted but its clean-up never ran", gone)
			}
		}
		n := m.srcPanic.Load()
		if n < 30*4 {
			t.Errorf("Metrics.SourcePanicked counted %d panics, want at least one per change of the 4 panicking objects", n)
		}
		if got := logs.containing(`"object"="ns/cm-13"`) + logs.containing(`"object"="ns/cm-3"`); got == 0 {
			t.Error("no log line names the object whose mapping panicked")
		}
		if got := logs.containing("mapper bug"); got == 0 || logs.containing(`"stack"=`) == 0 {
			t.Error("the mapper's panic is not logged with its value and stack")
		}
		if got := logs.containing("predicate bug"); got == 0 {
			t.Error("the predicate's panic is not logged")
		}
	})
}

// TestSyncErrorExplainsItself: a controller whose informer is refused its list
// returns a *SyncError that wraps the informer's *reflector.AccessError, whether
// the sync timeout ran out or Run's context ended first; in the second case it
// says so and wraps the context's error too.
func TestSyncErrorExplainsItself(t *testing.T) {
	for _, tc := range []struct {
		name      string
		timeout   time.Duration
		cancelled bool
	}{
		{"timeout", time.Minute, false},
		{"context ends", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := reflectortest.NewServer[*corev1.ConfigMap](reflectortest.Config{})
				srv.Forbid(reflectortest.List, true)
				inf := informer.New(srv, informer.Config[*corev1.ConfigMap]{Reflector: reflector.Config[*corev1.ConfigMap]{WatchList: reflector.WatchListOff}})
				c := New(Func[types.NamespacedName](func(context.Context, types.NamespacedName) (Result, error) {
					return Result{}, nil
				}), Config[types.NamespacedName]{Name: "cms", SyncTimeout: tc.timeout})
				c.Watch(FromInformer(inf, ByObject[*corev1.ConfigMap]()))
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var wg sync.WaitGroup
				wg.Go(func() { inf.Run(ctx) })
				if tc.cancelled {
					time.AfterFunc(30*time.Second, cancel)
				}
				err := c.Run(ctx)
				cancel()
				wg.Wait()
				var se *SyncError
				if !errors.As(err, &se) || se.Source != "informer *v1.ConfigMap" {
					t.Fatalf("Run = %v, want a *SyncError", err)
				}
				if !errors.Is(err, reflector.ErrForbidden) {
					t.Errorf("Run = %v, which does not wrap the informer's Forbidden error", err)
				}
				if got := errors.Is(err, context.Canceled); got != tc.cancelled {
					t.Errorf("errors.Is(%v, context.Canceled) = %v, want %v", err, got, tc.cancelled)
				}
				if tc.cancelled && !strings.Contains(err.Error(), "stopped before source informer *v1.ConfigMap synced") {
					t.Errorf("Run = %q, which does not say that it stopped before the sync", err)
				}
			})
		})
	}
}
