//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// TestStaleCacheRace makes the controller's Pod cache lag: the watch events of the
// Pod informer are held back until the test lets them through. The PodSet's first
// reconcile creates its replicas Pods, which its cache does not show; meanwhile the
// test changes the PodSet three times.
//
// Without read-your-writes the controller reconciles each change (the test waits
// for status.observedGeneration), believes each time that the Pods are missing and
// creates them again: more than replicas Pods exist. With read-your-writes it does
// not reconcile the PodSet again while the Pod cache lacks its own creations: each
// change is taken from the queue and skipped (counted as a stale skip), the status
// stays at the first generation and replicas Pods exist. Either way, once the
// events flow the PodSet converges to replicas Pods.
func TestStaleCacheRace(t *testing.T) {
	const replicas = 2
	run := func(t *testing.T, ryw bool) int {
		ns := env.Namespace(t)
		gate := &gatedPods{open: make(chan struct{})}
		waits := &cacheWaits{}
		start(t, podset.Options{
			Namespace:              ns,
			Metrics:                waits,
			UnsafeNoReadYourWrites: !ryw,
			WrapPods: func(lw reflector.ListerWatcher[*corev1.Pod]) reflector.ListerWatcher[*corev1.Pod] {
				gate.lw = lw
				return gate
			},
		})
		ps := createPodSet(t, ns, "lagging", replicas)
		waitObserved(t, ns, "lagging", ps.Generation)
		for i := range 3 {
			skipped := waits.skips.Load()
			gen := patchSpec(t, ns, "lagging", fmt.Sprintf(`{"template":{"metadata":{"annotations":{"poke":"%d"}}}}`, i))
			if ryw {
				eventually(t, converge, func() string {
					if waits.skips.Load() == skipped {
						return "the change was not skipped"
					}
					return ""
				})
			} else {
				waitObserved(t, ns, "lagging", gen)
			}
		}
		created := len(ownedBy(pods(t, ns), ps.UID))
		st := getPodSet(t, ns, "lagging").Status
		if st.Replicas != 0 {
			t.Fatalf("status.replicas = %d while the Pod cache is held back; the cache did not lag", st.Replicas)
		}
		if ryw && st.ObservedGeneration != ps.Generation {
			t.Errorf("status.observedGeneration = %d, want %d: the PodSet was reconciled while its cache lacked the controller's writes", st.ObservedGeneration, ps.Generation)
		}
		t.Logf("read-your-writes %t: %d Pods created for %d replicas; %d stale skips, %d cache waits (%d timed out)",
			ryw, created, replicas, waits.skips.Load(), waits.waits.Load(), waits.timeouts.Load())

		close(gate.open)
		waitConverged(t, ns, "lagging", replicas)
		return created
	}

	t.Run("without read-your-writes", func(t *testing.T) {
		if n := run(t, false); n <= replicas {
			t.Errorf("%d Pods created while the cache lagged, want more than %d: the race did not show", n, replicas)
		}
	})
	t.Run("with read-your-writes", func(t *testing.T) {
		if n := run(t, true); n != replicas {
			t.Errorf("%d Pods created while the cache lagged, want exactly %d", n, replicas)
		}
	})
}

// gatedPods is a ListerWatcher whose watches hold every event back until open is
// closed, except those of a streaming list's initial phase (up to its
// "initial-events-end" bookmark), so that the informer still syncs.
type gatedPods struct {
	lw   reflector.ListerWatcher[*corev1.Pod]
	open chan struct{}
}

func (g *gatedPods) List(ctx context.Context, opts metav1.ListOptions) ([]*corev1.Pod, metav1.ListMeta, error) {
	return g.lw.List(ctx, opts)
}

func (g *gatedPods) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := g.lw.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	h := &heldWatch{in: w, out: make(chan watch.Event), stop: make(chan struct{})}
	initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	go h.run(g.open, initial)
	return h, nil
}

// heldWatch forwards the events of in, in order, holding them while open is not
// closed (past the initial phase).
type heldWatch struct {
	in   watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func (h *heldWatch) Stop() {
	h.once.Do(func() {
		close(h.stop)
		h.in.Stop()
	})
}

func (h *heldWatch) ResultChan() <-chan watch.Event { return h.out }

func (h *heldWatch) run(open <-chan struct{}, initial bool) {
	defer close(h.out)
	in := h.in.ResultChan()
	var held []watch.Event
	for in != nil || len(held) > 0 {
		var out chan<- watch.Event
		var next watch.Event
		isOpen := false
		select {
		case <-open:
			isOpen = true
		default:
		}
		if len(held) > 0 && (isOpen || initial) {
			out, next = h.out, held[0]
		}
		wake := open
		if isOpen {
			wake = nil
		}
		select {
		case ev, ok := <-in:
			if !ok {
				in = nil
				if !isOpen {
					return // nothing could be delivered; the reflector watches again
				}
				continue
			}
			held = append(held, ev)
			if initial && ev.Type == watch.Bookmark {
				if m, err := meta.Accessor(ev.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					// Deliver what came so far; hold from now on.
					for _, e := range held {
						select {
						case h.out <- e:
						case <-h.stop:
							return
						}
					}
					held, initial = nil, false
				}
			}
		case out <- next:
			held = held[1:]
		case <-wake:
		case <-h.stop:
			return
		}
	}
}
