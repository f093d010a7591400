package bench

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ctrlkit/ctrlkit/indexer"
)

// Indexer shapes the package's own benchmarks were not written for: an index added
// to a store that already holds 100k objects, every object in one namespace (the
// namespace index has one value), and churn (each object deleted and added back).

// idxOneNamespace returns n ConfigMaps as idxObjs does, all in namespace "default".
func idxOneNamespace(n int) []*corev1.ConfigMap {
	objs := idxObjs(n, 0, "1")
	for _, o := range objs {
		o.Namespace = "default"
	}
	return objs
}

// BenchmarkIndexerAddIndexes adds an index (the "tier" label, one value shared by
// all) to a store of 100k objects, which indexes every object under it: ctrlkit's
// AddIndexes against client-go's AddIndexers. Filling the store is not timed.
func BenchmarkIndexerAddIndexes(b *testing.B) {
	objs := idxObjs(idxObjects, 0, "1")
	b.Run("impl=ctrlkit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			x := idxCtrlkit()
			for _, o := range objs {
				if err := x.Add(o); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			if err := x.AddIndexes(indexer.Indexers[*corev1.ConfigMap]{"tier": func(cm *corev1.ConfigMap) ([]string, error) {
				return []string{cm.Labels["tier"]}, nil
			}}); err != nil {
				b.Fatal(err)
			}
			if got, _ := x.IndexKeys("tier", "backend"); len(got) != len(objs) {
				b.Fatalf("%d objects under the new index, want %d", len(got), len(objs))
			}
		}
	})
	b.Run("impl=client-go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			x := idxClientgo()
			for _, o := range objs {
				if err := x.Add(o); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			if err := x.AddIndexers(cache.Indexers{"tier": func(obj any) ([]string, error) {
				m, err := meta.Accessor(obj)
				if err != nil {
					return nil, err
				}
				return []string{m.GetLabels()["tier"]}, nil
			}}); err != nil {
				b.Fatal(err)
			}
			if got, _ := x.IndexKeys("tier", "backend"); len(got) != len(objs) {
				b.Fatalf("%d objects under the new index, want %d", len(got), len(objs))
			}
		}
	})
}

// BenchmarkIndexerOneNamespace reads a store whose 100k objects are all in one
// namespace, through each library's lister: the namespace's List (all 100k), its
// List with a label selector (1k match), and Get by name.
func BenchmarkIndexerOneNamespace(b *testing.B) {
	objs := idxOneNamespace(idxObjects)
	x, c := idxCtrlkit(), idxClientgo()
	for _, o := range objs {
		if err := x.Add(o); err != nil {
			b.Fatal(err)
		}
		if err := c.Add(o); err != nil {
			b.Fatal(err)
		}
	}
	l, cl := indexer.NewLister(x), corelisters.NewConfigMapLister(c)
	sel := labels.SelectorFromSet(labels.Set{"app": "app-7"})
	lists := []struct {
		name string
		sel  labels.Selector
		want int
	}{{"list", labels.Everything(), idxObjects}, {"selector", sel, idxObjects / idxApps}}
	for _, tc := range lists {
		b.Run(tc.name+"/impl=ctrlkit", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got, err := l.Namespace("default").List(tc.sel); err != nil || len(got) != tc.want {
					b.Fatalf("%d objects, %v; want %d", len(got), err, tc.want)
				}
			}
		})
		b.Run(tc.name+"/impl=client-go", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got, err := cl.ConfigMaps("default").List(tc.sel); err != nil || len(got) != tc.want {
					b.Fatalf("%d objects, %v; want %d", len(got), err, tc.want)
				}
			}
		})
	}
	get := map[string]func(name string) error{
		"ctrlkit": func(name string) error {
			_, err := l.Namespace("default").Get(name)
			return err
		},
		"client-go": func(name string) error {
			_, err := cl.ConfigMaps("default").Get(name)
			return err
		},
	}
	for _, impl := range []string{"ctrlkit", "client-go"} {
		b.Run("get/impl="+impl, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := get[impl](objs[i%len(objs)].Name); err != nil {
					b.Fatal(err)
				}
				i += 7919 // a prime: the objects in a scattered order
			}
		})
	}
}

// BenchmarkIndexerChurn deletes an object of a store of 100k and adds it back, in a
// scattered order (ns per delete and add), with the objects spread over 100
// namespaces or all in one.
func BenchmarkIndexerChurn(b *testing.B) {
	for _, ns := range []string{"100", "1"} {
		objs := idxObjs(idxObjects, 0, "1")
		if ns == "1" {
			objs = idxOneNamespace(idxObjects)
		}
		for _, impl := range idxImpls {
			b.Run(fmt.Sprintf("namespaces=%s/impl=%s", ns, impl.name), func(b *testing.B) {
				b.ReportAllocs()
				s := impl.new()
				idxMustFill(b, s, objs)
				i := 0
				for b.Loop() {
					o := objs[i%len(objs)]
					if err := s.del(o); err != nil {
						b.Fatal(err)
					}
					if err := s.add(o); err != nil {
						b.Fatal(err)
					}
					i += 7919
				}
				if n, _ := s.byIndex(indexer.NamespaceIndexName, objs[0].Namespace); n == 0 {
					b.Fatal("the namespace index lost its objects")
				}
			})
		}
	}
}
