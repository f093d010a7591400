//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// churn creates, updates and deletes the ConfigMaps cm-0 … cm-(names-1) of a
// namespace from several goroutines until ended. Unlike storm it expects a healthy
// server: any error but a conflict with another writer (not found, already
// exists) ends it and fails the test.
type churn struct {
	c                         typedcorev1.ConfigMapInterface
	stop                      chan struct{}
	wg                        sync.WaitGroup
	creates, updates, deletes atomic.Int64
	seq                       atomic.Int64 // numbers the objects built, across writers
	mu                        sync.Mutex
	err                       error // the first unexpected error
}

// startChurn starts writers goroutines; build makes the object that a create or
// an update of name writes, from the writer's random source (seeded per writer,
// so a run's sequence of choices is fixed) and a number unique across writers:
// two writers never write the same content, nor the content an object was
// created with before the churn, so no update is a no-op the server would
// answer without an event.
func startChurn(t *testing.T, ns string, writers, names int, build func(rnd *rand.Rand, name string, i int) configMap) *churn {
	s := &churn{c: admin(t).CoreV1().ConfigMaps(ns), stop: make(chan struct{})}
	// The numbers start past those of the objects made before the churn
	// (createConfigMaps numbers cm-i with i): an update of cm-37 numbered 37
	// would write the content it was created with, a no-op without an event.
	s.seq.Store(1 << 30)
	for w := range writers {
		s.wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 11))
			for {
				select {
				case <-s.stop:
					return
				default:
				}
				// Each writer has names of its own (those equal to w modulo
				// writers): two concurrent deletes of one object can both succeed
				// with one event between them, which would make the count of
				// writes differ from the events the server sent.
				name := "cm-" + strconv.Itoa(rnd.IntN(names/writers)*writers+w)
				var err error
				n := &s.updates
				switch rnd.IntN(4) {
				case 0:
					n = &s.creates
					_, err = s.c.Create(context.Background(), build(rnd, name, int(s.seq.Add(1))), metav1.CreateOptions{})
				case 1:
					n = &s.deletes
					err = s.c.Delete(context.Background(), name, metav1.DeleteOptions{})
				default:
					_, err = s.c.Update(context.Background(), build(rnd, name, int(s.seq.Add(1))), metav1.UpdateOptions{})
				}
				switch {
				case err == nil:
					n.Add(1)
				case apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
				default:
					s.mu.Lock()
					if s.err == nil {
						s.err = err
					}
					s.mu.Unlock()
					return
				}
			}
		})
	}
	return s
}

// end stops the writers, waits for the writes in flight, and returns the number
// of writes that succeeded.
func (s *churn) end(t *testing.T) int64 {
	t.Helper()
	close(s.stop)
	s.wg.Wait()
	if s.err != nil {
		t.Fatalf("churn: %v", s.err)
	}
	return s.creates.Load() + s.updates.Load() + s.deletes.Load()
}

func (s *churn) String() string {
	return strconv.FormatInt(s.creates.Load(), 10) + " creates, " + strconv.FormatInt(s.updates.Load(), 10) + " updates, " +
		strconv.FormatInt(s.deletes.Load(), 10) + " deletes"
}

// createEach creates build(0) … build(n-1) in ns from workers goroutines.
func createEach(t *testing.T, ns string, n, workers int, build func(i int) configMap) {
	t.Helper()
	c := admin(t).CoreV1().ConfigMaps(ns)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if _, err := c.Create(t.Context(), build(i), metav1.CreateOptions{}); err != nil {
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

// bucket puts a key in one of n buckets, the same on every run.
func bucket(key string, n uint32) uint32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return h.Sum32() % n
}

// errorSink collects every error given to OnError, without bound.
type errorSink struct {
	mu   sync.Mutex
	errs []error
}

func (s *errorSink) add(err error) {
	s.mu.Lock()
	s.errs = append(s.errs, err)
	s.mu.Unlock()
}

func (s *errorSink) all() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.errs)
}

// errorsOf splits errs into those that are (or wrap) an E and the others.
func errorsOf[E error](errs []error) (match []E, other []error) {
	for _, err := range errs {
		var e E
		if errors.As(err, &e) {
			match = append(match, e)
		} else {
			other = append(other, err)
		}
	}
	return match, other
}

// runInformer runs inf until the returned stop is called (or the test ends);
// stop returns once Run has, so that no handler call is in progress, and fails
// the test if Run returned an error.
func runInformer[T reflector.Object](t *testing.T, inf *informer.Informer[T]) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inf.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("%s: Run = %v", inf.Name(), err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitView waits until c's view equals want, for at most d.
func waitView[T reflector.Object](t *testing.T, d time.Duration, name string, want map[string]string, c *checker[T]) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		diff := gocmp.Diff(want, c.versions())
		if diff == "" {
			return
		}
		select {
		case <-c.changed:
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("%s did not converge in %v (-want +%s):\n%s", name, d, name, diff)
		}
	}
}

// sortedByKey returns objs sorted by namespace and name.
func sortedByKey[T reflector.Object](objs []T) []T {
	return slices.SortedFunc(slices.Values(objs), func(a, b T) int { return cmp.Compare(key(a), key(b)) })
}
