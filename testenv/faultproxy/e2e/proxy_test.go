//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/testenv/faultproxy"
)

// TestDelayedWatchEvents: with every watch event delayed 200–400ms, a write reaches
// the cache no sooner than 200ms after it was sent, and every write arrives; through
// JSON and protobuf watches.
func TestDelayedWatchEvents(t *testing.T) {
	const minDelay = 200 * time.Millisecond
	for _, tc := range []struct {
		name  string
		proto bool
	}{{"json", false}, {"protobuf", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			p := startProxy(t, faultproxy.Config{Seed: 1, Rules: []faultproxy.Rule{{
				Resource:         "configmaps",
				DelayWatchEvents: faultproxy.Delay{Min: minDelay, Max: 400 * time.Millisecond},
			}}})
			cfg := p.Config()
			if tc.proto {
				cfg = reflector.WithProtobuf(cfg)
			}
			inf := runInformer(t, cfg, ns, reflector.WatchListOff)
			for i := range 5 {
				sent := time.Now()
				cm, err := direct(t).CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{GenerateName: "delayed-"},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(t.Context(), converge)
				err = inf.WaitForResourceVersion(ctx, cm.ResourceVersion)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				if d := time.Since(sent); d < minDelay {
					t.Errorf("write %d reached the cache after %v, before the %v delay", i, d, minDelay)
				}
			}
			waitConverged(t, inf, ns)
			if s := p.Stats()["configmaps"]; s.Delayed < 5 {
				t.Errorf("Delayed = %d, want at least 5", s.Delayed)
			}
		})
	}
}

// TestDroppedWatchResumes: watches broken every 3 events are resumed from the last
// resourceVersion without a relist and without losing an event.
func TestDroppedWatchResumes(t *testing.T) {
	ns := env.Namespace(t)
	p := startProxy(t, faultproxy.Config{Rules: []faultproxy.Rule{{
		Resource:       "configmaps",
		DropWatchAfter: faultproxy.Drop{Events: 3},
	}}})
	inf := runInformer(t, reflector.WithProtobuf(p.Config()), ns, reflector.WatchListOff)
	createConfigMaps(t, ns, "drop", 20)
	waitConverged(t, inf, ns)
	s := p.Stats()["configmaps"]
	h := inf.Health().Stats
	if s.DroppedWatches < 3 || h.Watches < 4 {
		t.Errorf("dropped %d watches, informer opened %d: want at least 3 and 4", s.DroppedWatches, h.Watches)
	}
	if h.Lists != 1 {
		t.Errorf("informer listed %d times, want 1: a dropped watch is resumed, not relisted", h.Lists)
	}
}

// TestGoneRelists: a 410 on every watch makes the informer relist; once the fault is
// lifted it converges.
func TestGoneRelists(t *testing.T) {
	ns := env.Namespace(t)
	p := startProxy(t, faultproxy.Config{Rules: []faultproxy.Rule{{
		Resource: "configmaps",
		Status:   faultproxy.Status{Code: 410, Probability: 1, Verbs: []string{"watch"}},
	}}})
	inf := runInformer(t, p.Config(), ns, reflector.WatchListOff)
	createConfigMaps(t, ns, "gone", 5)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(converge)
	for inf.Health().Stats.Lists < 3 {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no relists after 410s: %+v", inf.Health())
		}
	}
	if err := p.SetRules(nil); err != nil {
		t.Fatal(err)
	}
	createConfigMaps(t, ns, "after", 5)
	waitConverged(t, inf, ns)
	if h := inf.Health().Stats; h.Expired < 2 {
		t.Errorf("Expired = %d, want the 410s counted as expiries", h.Expired)
	}
	if s := p.Stats()["configmaps"]; s.Statuses < 2 {
		t.Errorf("Statuses = %d", s.Statuses)
	}
}

// TestStaleList: a LIST of the latest state through the proxy is served from an
// older resourceVersion, so an object created after it is absent.
func TestStaleList(t *testing.T) {
	ns := env.Namespace(t)
	createConfigMaps(t, ns, "early", 1)
	p := startProxy(t, faultproxy.Config{Rules: []faultproxy.Rule{{
		Resource:  "configmaps",
		StaleList: faultproxy.Stale{Versions: 1},
	}}})
	c := kubernetes.NewForConfigOrDie(reflector.WithProtobuf(p.Config())).CoreV1().ConfigMaps(ns)
	first, err := c.List(t.Context(), metav1.ListOptions{}) // remembered
	if err != nil {
		t.Fatal(err)
	}
	createConfigMaps(t, ns, "late", 1)
	if _, err := c.List(t.Context(), metav1.ListOptions{}); err != nil { // fresh: no older version yet
		t.Fatal(err)
	}
	stale, err := c.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if stale.ResourceVersion != first.ResourceVersion || names(stale) != "early-0" {
		t.Errorf("stale list at %s has %q, want the state at %s: early-0", stale.ResourceVersion, names(stale), first.ResourceVersion)
	}
	fresh, err := direct(t).CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if names(fresh) != "early-0 late-0" {
		t.Errorf("direct list has %q", names(fresh))
	}
	if s := p.Stats()["configmaps"]; s.StaleLists != 1 {
		t.Errorf("StaleLists = %d, want 1", s.StaleLists)
	}
}

func names(l *corev1.ConfigMapList) string {
	var s string
	for i, c := range l.Items {
		if i > 0 {
			s += " "
		}
		s += c.Name
	}
	return s
}
