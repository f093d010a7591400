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
	lw := reflector.Funcs[*corev1.ConfigMap]{
		ListFunc: func(context.Context, metav1.ListOptions) ([]*corev1.ConfigMap, metav1.ListMeta, error) {
			return nil, metav1.ListMeta{}, nil
		},
		WatchFunc: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}
	inf := New(lw, Config[*corev1.ConfigMap]{})
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
