package indexer_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/ctrlkit/ctrlkit/indexer"
)

// TestMatchesClientGo drives ctrlkit's Indexer and client-go v0.37.2's cache.NewIndexer
// with the same random operations on ConfigMaps and compares every read, as sets,
// after each step: List, ListKeys, index values, IndexKeys and ByIndex.
func TestMatchesClientGo(t *testing.T) {
	labelValues := func(cm *corev1.ConfigMap) []string {
		var out []string
		for k, v := range cm.Labels {
			out = append(out, k+"="+v)
		}
		return out
	}
	byLabels := func(obj any) ([]string, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		var out []string
		for k, v := range m.GetLabels() {
			out = append(out, k+"="+v)
		}
		return out, nil
	}
	byData := func(cm *corev1.ConfigMap) []string { return []string{cm.Data["k"]} }

	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 40 {
		ck := indexer.New(indexer.Config[*corev1.ConfigMap]{
			Indexers: indexer.Indexers[*corev1.ConfigMap]{
				indexer.NamespaceIndexName: indexer.NamespaceIndex[*corev1.ConfigMap],
				"labels":                   func(cm *corev1.ConfigMap) ([]string, error) { return labelValues(cm), nil },
			},
		})
		cg := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
			cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
			"labels":             byLabels,
		})
		names := []string{indexer.NamespaceIndexName, "labels"}
		randomCM := func() *corev1.ConfigMap {
			o := cm(fmt.Sprint("ns", rng.IntN(3)), fmt.Sprint("n", rng.IntN(12)), map[string]string{})
			for _, k := range []string{"app", "tier"} {
				if rng.IntN(3) > 0 {
					o.Labels[k] = fmt.Sprint(k, rng.IntN(3))
				}
			}
			o.Data = map[string]string{"k": fmt.Sprint(rng.IntN(4))}
			return o
		}
		for step := range 200 {
			switch op := rng.IntN(20); {
			case op < 8:
				o := randomCM()
				if err := ck.Add(o); err != nil {
					t.Fatal(err)
				}
				if err := cg.Add(o); err != nil {
					t.Fatal(err)
				}
			case op < 12:
				o := randomCM()
				_ = ck.Update(o)
				_ = cg.Update(o)
			case op < 17:
				o := randomCM()
				_ = ck.Delete(o)
				_ = cg.Delete(o)
			case op < 19:
				n := rng.IntN(15)
				objs := make([]*corev1.ConfigMap, n)
				list := make([]any, n)
				for i := range objs {
					objs[i] = randomCM()
					list[i] = objs[i]
				}
				if err := ck.Replace(objs); err != nil {
					t.Fatal(err)
				}
				if err := cg.Replace(list, "1"); err != nil {
					t.Fatal(err)
				}
			default:
				if !slices.Contains(names, "data") {
					if err := ck.AddIndexes(indexer.Indexers[*corev1.ConfigMap]{"data": func(cm *corev1.ConfigMap) ([]string, error) { return byData(cm), nil }}); err != nil {
						t.Fatal(err)
					}
					if err := cg.AddIndexers(cache.Indexers{"data": func(obj any) ([]string, error) { return byData(obj.(*corev1.ConfigMap)), nil }}); err != nil {
						t.Fatal(err)
					}
					names = append(names, "data")
				}
			}
			where := fmt.Sprintf("round %d step %d", round, step)
			compareWithClientGo(t, where, ck, cg, names)
		}
	}
}

func compareWithClientGo(t *testing.T, where string, ck *indexer.Indexer[*corev1.ConfigMap], cg cache.Indexer, indexNames []string) {
	t.Helper()
	keyList := func(objs []any) []string {
		out := make([]string, len(objs))
		for i, o := range objs {
			out[i], _ = cache.MetaNamespaceKeyFunc(o)
		}
		sort.Strings(out)
		return out
	}
	ckKeys := func(objs []*corev1.ConfigMap) []string {
		out := make([]string, len(objs))
		for i, o := range objs {
			out[i], _ = cache.MetaNamespaceKeyFunc(o)
		}
		sort.Strings(out)
		return out
	}
	sortedCopy := func(s []string) []string {
		s = slices.Clone(s)
		sort.Strings(s)
		return s
	}
	if got, want := sortedCopy(ck.ListKeys()), sortedCopy(cg.ListKeys()); !slices.Equal(got, want) {
		t.Fatalf("%s: ListKeys = %v, client-go %v", where, got, want)
	}
	if got, want := ckKeys(ck.List()), keyList(cg.List()); !slices.Equal(got, want) {
		t.Fatalf("%s: List = %v, client-go %v", where, got, want)
	}
	for _, key := range cg.ListKeys() {
		want, _, _ := cg.GetByKey(key)
		if got, ok := ck.Get(key); !ok || got != want {
			t.Fatalf("%s: Get(%q) = %v, client-go holds %v", where, key, got, want)
		}
	}
	for _, name := range indexNames {
		vals, err := ck.IndexValues(name)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := sortedCopy(vals), sortedCopy(cg.ListIndexFuncValues(name)); !slices.Equal(got, want) {
			t.Fatalf("%s: values of %q = %v, client-go %v", where, name, got, want)
		}
		for _, v := range append(vals, "absent") {
			gotKeys, err := ck.IndexKeys(name, v)
			if err != nil {
				t.Fatal(err)
			}
			wantKeys, err := cg.IndexKeys(name, v)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(sortedCopy(gotKeys), sortedCopy(wantKeys)) {
				t.Fatalf("%s: IndexKeys(%q, %q) = %v, client-go %v", where, name, v, gotKeys, wantKeys)
			}
			gotObjs, _ := ck.ByIndex(name, v)
			wantObjs, _ := cg.ByIndex(name, v)
			if got, want := ckKeys(gotObjs), keyList(wantObjs); !slices.Equal(got, want) {
				t.Fatalf("%s: ByIndex(%q, %q) = %v, client-go %v", where, name, v, got, want)
			}
		}
	}
}
