package indexer_test

import (
	"errors"
	"reflect"
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/indexer"
)

func cm(ns, name string, lbls map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls}}
}

func names(objs []*corev1.ConfigMap) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Namespace + "/" + o.Name
	}
	sort.Strings(out)
	return out
}

func TestLister(t *testing.T) {
	x := indexer.New(indexer.Config[*corev1.ConfigMap]{
		Indexers: indexer.Indexers[*corev1.ConfigMap]{indexer.NamespaceIndexName: indexer.NamespaceIndex[*corev1.ConfigMap]},
	})
	for _, o := range []*corev1.ConfigMap{
		cm("a", "web", map[string]string{"app": "web"}),
		cm("a", "db", map[string]string{"app": "db"}),
		cm("b", "web", map[string]string{"app": "web"}),
		cm("", "global", map[string]string{"app": "web"}),
	} {
		if err := x.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	l := indexer.NewLister(x)
	web := labels.SelectorFromSet(labels.Set{"app": "web"})

	if got, err := l.Get("a", "db"); err != nil || got.Name != "db" || got.Namespace != "a" {
		t.Fatalf("Get(a, db) = %v, %v", got, err)
	}
	if got, err := l.Get("", "global"); err != nil || got.Name != "global" {
		t.Fatalf("Get of a cluster-scoped object = %v, %v", got, err)
	}
	_, err := l.Get("b", "db")
	if !apierrors.IsNotFound(err) {
		t.Fatalf("Get(b, db) = %v, want NotFound", err)
	}
	if got, _ := l.Namespace("b").Get("web"); got == nil || got.Namespace != "b" {
		t.Fatalf("Namespace(b).Get(web) = %v", got)
	}
	if _, err := l.Namespace("b").Get("nope"); !apierrors.IsNotFound(err) {
		t.Fatalf("Namespace(b).Get(nope) = %v, want NotFound", err)
	}

	for _, tc := range []struct {
		ns   string
		sel  labels.Selector
		want []string
	}{
		{metav1.NamespaceAll, nil, []string{"/global", "a/db", "a/web", "b/web"}},
		{metav1.NamespaceAll, web, []string{"/global", "a/web", "b/web"}},
		{metav1.NamespaceAll, labels.Nothing(), []string{}},
		{"a", labels.Everything(), []string{"a/db", "a/web"}},
		{"a", web, []string{"a/web"}},
		{"a", labels.Nothing(), []string{}},
		{"c", nil, []string{}},
	} {
		got, err := l.Namespace(tc.ns).List(tc.sel)
		if err != nil {
			t.Fatalf("Namespace(%q).List(%v): %v", tc.ns, tc.sel, err)
		}
		if g := names(got); !slices.Equal(g, tc.want) {
			t.Errorf("Namespace(%q).List(%v) = %v, want %v", tc.ns, tc.sel, g, tc.want)
		}
	}
	all, _ := l.List(web)
	if g := names(all); !slices.Equal(g, []string{"/global", "a/web", "b/web"}) {
		t.Errorf("List(app=web) = %v", g)
	}
}

// TestListerNamespaceUsesIndex registers a "namespace" index that deliberately lies
// (it files everything under "x"): the per-namespace listing must follow it, which
// proves it reads the index rather than scanning objects.
func TestListerNamespaceUsesIndex(t *testing.T) {
	x := indexer.New(indexer.Config[*corev1.ConfigMap]{
		Indexers: indexer.Indexers[*corev1.ConfigMap]{
			indexer.NamespaceIndexName: func(*corev1.ConfigMap) ([]string, error) { return []string{"x"}, nil },
		},
	})
	_ = x.Add(cm("a", "one", nil))
	_ = x.Add(cm("b", "two", nil))
	l := indexer.NewLister(x)
	if got, _ := l.Namespace("x").List(nil); len(got) != 2 {
		t.Fatalf("Namespace(x).List = %v, want both objects from the index", names(got))
	}
	if got, _ := l.Namespace("a").List(nil); len(got) != 0 {
		t.Fatalf("Namespace(a).List = %v, want none (the index says so)", names(got))
	}
}

func TestListerWithoutNamespaceIndex(t *testing.T) {
	x := indexer.New(indexer.Config[*corev1.ConfigMap]{})
	_ = x.Add(cm("a", "one", nil))
	_, err := indexer.NewLister(x).Namespace("a").List(nil)
	if !errors.Is(err, indexer.ErrUnknownIndex) {
		t.Fatalf("List without a namespace index = %v, want ErrUnknownIndex", err)
	}
}

// TestListerNotFoundIsNewNotFound checks that a Get of a missing object returns what
// apierrors.NewNotFound does, field for field and message for message, for names that
// quote plainly and for names that need escapes; and that it allocates at most two
// objects (NewNotFound takes six).
func TestListerNotFoundIsNewNotFound(t *testing.T) {
	x := indexer.New(indexer.Config[*corev1.ConfigMap]{})
	l := indexer.NewLister(x)
	for _, name := range []string{
		"web", "", "a.b-c", "~ !#", `say "hi"`, `back\slash`, "tab\there", "new\nline",
		"\x00", "\x7f", "ünïcode", "日本", "\xff\xfe", "emoji-😀",
	} {
		_, err := l.Get("ns", name)
		want := apierrors.NewNotFound(schema.GroupResource{Resource: "configmap"}, name)
		var got *apierrors.StatusError
		if !errors.As(err, &got) || !reflect.DeepEqual(got, want) {
			t.Errorf("Get(ns, %q) = %#v, want %#v", name, err, want)
		}
		if err == nil || err.Error() != want.Error() {
			t.Errorf("Get(ns, %q): message %v, want %q", name, err, want.Error())
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = l.Get("ns", "web") }); n > 2 {
		t.Errorf("a Get of a missing object allocates %v times, want at most 2", n)
	}
}
