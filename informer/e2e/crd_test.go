//go:build e2e

package e2e

import (
	"strconv"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ctrlkit/ctrlkit/indexer"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/testrun"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// TestCustomResourceThroughDynamicClient creates a CRD through the apiextensions
// API and runs an informer of its objects through the dynamic client, with an
// index on a field of the spec.
func TestCustomResourceThroughDynamicClient(t *testing.T) {
	ctx := t.Context()
	ext, err := apiextensions.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	preserve := true
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets.informer.ctrlkit.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "informer.ctrlkit.io",
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:       "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", XPreserveUnknownFields: &preserve}},
				}},
			}},
		},
	}
	// InstallCRD creates it through the apiextensions API and waits until it is served.
	if err := env.InstallCRD(ctx, crd); err != nil {
		t.Fatal(err)
	}
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	t.Cleanup(func() { crds.Delete(t.Context(), crd.Name, metav1.DeleteOptions{}) })

	ns := env.Namespace(t)
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	gadgets := dyn.Resource(schema.GroupVersionResource{Group: "informer.ctrlkit.io", Version: "v1", Resource: "gadgets"}).Namespace(ns)
	gadget := func(name, color string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "informer.ctrlkit.io/v1",
			"kind":       "Gadget",
			"metadata":   map[string]any{"name": name},
			"spec":       map[string]any{"color": color},
		}}
	}
	for i := range 10 {
		g := gadget("g-"+strconv.Itoa(i), []string{"red", "blue"}[i%2])
		// Established may precede the moment every server handler serves the
		// new resource: retry NotFound briefly.
		for try := 0; ; try++ {
			_, err := gadgets.Create(ctx, g, metav1.CreateOptions{})
			if err == nil {
				break
			}
			if !apierrors.IsNotFound(err) || try == 50 {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	server := func() map[string]string {
		list, err := gadgets.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, u := range list.Items {
			out[key(&u)] = u.GetResourceVersion()
		}
		return out
	}

	byColor := func(u *unstructured.Unstructured) ([]string, error) {
		c, _, err := unstructured.NestedString(u.Object, "spec", "color")
		return []string{c}, err
	}
	inf := informer.New(reflector.FromDynamic(gadgets), informer.Config[*unstructured.Unstructured]{
		Indexers: indexer.Indexers[*unstructured.Unstructured]{"color": byColor},
	})
	rec := newChecker[*unstructured.Unstructured]()
	mustAdd(t, inf, rec, informer.HandlerOptions{})
	testrun.Run(t, inf.Run)
	waitInSync(t, converge, server(), inf, rec)
	if reds, err := inf.Indexer().ByIndex("color", "red"); err != nil || len(reds) != 5 {
		t.Errorf("red gadgets = %d, %v; want 5", len(reds), err)
	}

	u, err := gadgets.Get(ctx, "g-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unstructured.SetNestedField(u.Object, "red", "spec", "color")
	if _, err := gadgets.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := gadgets.Delete(ctx, "g-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitInSync(t, converge, server(), inf, rec)
	rec.check(t, "handler")
	if reds, err := inf.Indexer().ByIndex("color", "red"); err != nil || len(reds) != 5 {
		t.Errorf("red gadgets after the changes = %d, %v; want 5", len(reds), err)
	}
	got, err := inf.Lister().Get(ns, "g-1")
	if err != nil || got.GetKind() != "Gadget" {
		t.Errorf("cached g-1 = %v, %v", got, err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.initial != 10 || rec.updates != 1 || rec.deletes != 1 {
		t.Errorf("handler calls: %d initial, %d updates, %d deletes; want 10, 1, 1", rec.initial, rec.updates, rec.deletes)
	}
}
