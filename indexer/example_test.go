package indexer_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ctrlkit/ctrlkit/indexer"
)

func pod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{NodeName: node},
	}
}

// An Indexer of pods with an index by node: find every pod on a node without a scan.
func Example() {
	pods := indexer.New(indexer.Config[*corev1.Pod]{
		Indexers: indexer.Indexers[*corev1.Pod]{
			"node": func(p *corev1.Pod) ([]string, error) { return []string{p.Spec.NodeName}, nil },
		},
	})
	_ = pods.Add(pod("default", "web", "node-1"))
	_ = pods.Add(pod("default", "db", "node-2"))
	_ = pods.Add(pod("kube-system", "dns", "node-1"))

	keys, _ := pods.IndexKeys("node", "node-1")
	slices.Sort(keys)
	fmt.Println(keys)

	p, ok := pods.Get("default/db")
	fmt.Println(p.Spec.NodeName, ok)
	// Output:
	// [default/web kube-system/dns]
	// node-2 true
}

// A Lister answers Kubernetes-style reads; a missing object is a NotFound error.
func ExampleLister() {
	pods := indexer.New(indexer.Config[*corev1.Pod]{
		Indexers: indexer.Indexers[*corev1.Pod]{indexer.NamespaceIndexName: indexer.NamespaceIndex[*corev1.Pod]},
	})
	_ = pods.Add(pod("default", "web", "node-1"))
	_ = pods.Add(pod("default", "db", "node-2"))
	_ = pods.Add(pod("other", "web", "node-1"))

	lister := indexer.NewLister(pods)
	web, _ := lister.Namespace("default").List(labels.SelectorFromSet(labels.Set{"app": "web"}))
	fmt.Println(len(web), web[0].Namespace)

	_, err := lister.Get("default", "cache")
	fmt.Println(apierrors.IsNotFound(err))
	// Output:
	// 1 default
	// true
}

// Indexes can be added while the store holds data.
func ExampleIndexer_AddIndexes() {
	pods := indexer.New(indexer.Config[*corev1.Pod]{})
	_ = pods.Add(pod("default", "web", "node-1"))
	_ = pods.Add(pod("default", "db", "node-1"))

	err := pods.AddIndexes(indexer.Indexers[*corev1.Pod]{
		"node": func(p *corev1.Pod) ([]string, error) { return []string{p.Spec.NodeName}, nil },
	})
	onNode, _ := pods.ByIndex("node", "node-1")
	fmt.Println(err, len(onNode))
	// Output: <nil> 2
}

// An index function that fails leaves the store unchanged and its error is returned.
func ExampleIndexError() {
	errNoNode := errors.New("pod is not scheduled")
	pods := indexer.New(indexer.Config[*corev1.Pod]{
		Indexers: indexer.Indexers[*corev1.Pod]{
			"node": func(p *corev1.Pod) ([]string, error) {
				if p.Spec.NodeName == "" {
					return nil, errNoNode
				}
				return []string{p.Spec.NodeName}, nil
			},
		},
	})
	err := pods.Add(pod("default", "pending", ""))
	fmt.Println(err)
	fmt.Println(errors.Is(err, errNoNode), pods.Len())
	// Output:
	// indexer: index "node" on object "default/pending": pod is not scheduled
	// true 0
}

// The mutation detector, for tests, reports cached objects that a caller changed.
func ExampleIndexer_CheckMutations() {
	pods := indexer.New(indexer.Config[*corev1.Pod]{DetectMutations: true})
	_ = pods.Add(pod("default", "web", "node-1"))

	p, _ := pods.Get("default/web")
	p.Labels["app"] = "changed" // wrong: cached objects are read-only

	fmt.Println(pods.CheckMutations())
	// Output: indexer: 1 cached object(s) were mutated: default/web
}

// Swap stores an object and returns the one it replaced, in one atomic write: an
// informer tells its handlers about an update without reading the cache first.
func ExampleIndexer_Swap() {
	pods := indexer.New(indexer.Config[*corev1.Pod]{})
	_, had, _ := pods.Swap(pod("default", "web", "node-1"))
	fmt.Println(had)

	old, had, _ := pods.Swap(pod("default", "web", "node-2"))
	fmt.Println(had, old.Spec.NodeName)
	// Output:
	// false
	// true node-1
}

// Absent tells which stored objects a complete list no longer holds: what a relist
// deletes.
func ExampleIndexer_Absent() {
	pods := indexer.New(indexer.Config[*corev1.Pod]{})
	_ = pods.Add(pod("default", "web", "node-1"))
	_ = pods.Add(pod("default", "db", "node-2"))

	gone, objs := pods.Absent([]string{"default/web", "default/new"})
	fmt.Println(gone, objs[0].Spec.NodeName)
	// Output: [default/db] node-2
}

// ByIndex returns a shared, read-only snapshot: to sort or filter the result, copy it
// first (or use AppendByIndex, which fills a slice of your own).
func ExampleIndexer_ByIndex() {
	pods := indexer.New(indexer.Config[*corev1.Pod]{
		Indexers: indexer.Indexers[*corev1.Pod]{
			"node": func(p *corev1.Pod) ([]string, error) { return []string{p.Spec.NodeName}, nil },
		},
	})
	_ = pods.Add(pod("default", "web", "node-1"))
	_ = pods.Add(pod("kube-system", "dns", "node-1"))

	onNode, _ := pods.ByIndex("node", "node-1")
	mine := slices.Clone(onNode) // never sort onNode itself
	slices.SortFunc(mine, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range mine {
		fmt.Println(p.Namespace, p.Name)
	}

	// Until node-1's pods change, ByIndex returns the same slice again.
	again, _ := pods.ByIndex("node", "node-1")
	fmt.Println(&again[0] == &onNode[0])
	_ = pods.Add(pod("default", "cache", "node-1"))
	fresh, _ := pods.ByIndex("node", "node-1")
	fmt.Println(len(onNode), len(fresh))
	// Output:
	// kube-system dns
	// default web
	// true
	// 2 3
}

// A loop that lists the whole store again and again (here, a periodic pass) can keep
// one slice and have AppendKeys refill it, instead of a new one from ListKeys each
// time.
func ExampleIndexer_AppendKeys() {
	pods := indexer.New(indexer.Config[*corev1.Pod]{})
	_ = pods.Add(pod("default", "web", "node-1"))
	_ = pods.Add(pod("kube-system", "dns", "node-2"))

	var keys []string
	for pass := range 2 {
		keys = pods.AppendKeys(keys[:0])
		slices.Sort(keys)
		fmt.Println(pass, keys)
		_ = pods.Add(pod("default", "db", "node-1"))
	}
	// Output:
	// 0 [default/web kube-system/dns]
	// 1 [default/db default/web kube-system/dns]
}
