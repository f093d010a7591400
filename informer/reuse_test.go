package informer

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/reflector"
)

// TestFeedReusesCachedInstances: the store the reflector writes to offers it the
// cached instance of a listed object exactly when the cache holds that object at the
// same, known, resourceVersion.
func TestFeedReusesCachedInstances(t *testing.T) {
	inf := idleInformer()
	mk := func(name, rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
	}
	cached, noRV := mk("a", "5"), mk("b", "")
	for _, o := range []*corev1.ConfigMap{cached, noRV} {
		if err := inf.idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	var store reflector.Store[*corev1.ConfigMap] = feed[*corev1.ConfigMap]{inf}
	rs, ok := store.(reflector.ReuseStore[*corev1.ConfigMap])
	if !ok {
		t.Fatal("the informer's store is not a reflector.ReuseStore")
	}
	if got, ok := rs.Reuse(mk("a", "5")); !ok || got != cached {
		t.Errorf("Reuse of an unchanged object = %p, %v; want the cached %p", got, ok, cached)
	}
	for _, o := range []*corev1.ConfigMap{mk("a", "6"), mk("b", ""), mk("c", "5"), {ObjectMeta: metav1.ObjectMeta{ResourceVersion: "5"}}} {
		if got, ok := rs.Reuse(o); ok {
			t.Errorf("Reuse(%s/%s@%q) = %p, want no reuse", o.Namespace, o.Name, o.ResourceVersion, got)
		}
	}
}

// idleInformer returns an informer, not running, over a source that lists nothing:
// for tests that fill its cache themselves.
func idleInformer() *Informer[*corev1.ConfigMap] {
	lw := reflector.Funcs[*corev1.ConfigMap]{
		ListFunc: func(context.Context, metav1.ListOptions) ([]*corev1.ConfigMap, metav1.ListMeta, error) {
			return nil, metav1.ListMeta{}, nil
		},
		WatchFunc: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}
	return New(lw, Config[*corev1.ConfigMap]{})
}

// TestFeedReuseKey: the store the reflector writes to offers FromREST the cached
// instance of namespace/name exactly when the cache holds it at that known
// resourceVersion, for namespaced and cluster-scoped keys, without allocating.
func TestFeedReuseKey(t *testing.T) {
	inf := idleInformer()
	var store reflector.Store[*corev1.ConfigMap] = feed[*corev1.ConfigMap]{inf}
	rs, ok := store.(reflector.ReuseKeyStore[*corev1.ConfigMap])
	if !ok {
		t.Fatal("the informer's store is not a reflector.ReuseKeyStore")
	}
	if got, ok := rs.ReuseKey("ns", "a", "5"); ok {
		t.Errorf("ReuseKey on an empty cache = %p, want no reuse", got)
	}
	mk := func(ns, name, rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}}
	}
	namespaced, clusterScoped, noRV := mk("ns", "a", "5"), mk("", "global", "7"), mk("ns", "b", "")
	for _, o := range []*corev1.ConfigMap{namespaced, clusterScoped, noRV} {
		if err := inf.idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	if got, ok := rs.ReuseKey("ns", "a", "5"); !ok || got != namespaced {
		t.Errorf("ReuseKey(ns, a, 5) = %p, %v; want the cached %p", got, ok, namespaced)
	}
	if got, ok := rs.ReuseKey("", "global", "7"); !ok || got != clusterScoped {
		t.Errorf("ReuseKey(\"\", global, 7) = %p, %v; want the cached %p", got, ok, clusterScoped)
	}
	for _, k := range [][3]string{{"ns", "a", "6"}, {"ns", "b", ""}, {"ns", "c", "5"}, {"other", "a", "5"}, {"", "a", "5"}, {"ns", "global", "7"}} {
		if got, ok := rs.ReuseKey(k[0], k[1], k[2]); ok {
			t.Errorf("ReuseKey(%q, %q, %q) = %p, want no reuse", k[0], k[1], k[2], got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { rs.ReuseKey("ns", "a", "5") }); n != 0 {
		t.Errorf("ReuseKey allocates %v times per hit, want 0", n)
	}
}
