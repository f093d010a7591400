//go:build e2e

package e2e

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/reflector"
)

// Gadget is a custom resource's Go type written by hand, as FromJSON takes
// it: no generated client, no protobuf.
type Gadget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GadgetSpec `json:"spec"`
}

type GadgetSpec struct {
	Color string `json:"color"`
	Size  int64  `json:"size"`
}

func (g *Gadget) DeepCopyObject() runtime.Object {
	c := *g
	g.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

var gadgetGV = schema.GroupVersion{Group: "e2e.ctrlkit.io", Version: "v1"}

// installGadgets installs the Gadget CRD, cluster-wide, for the test's
// length.
func installGadgets(t *testing.T) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets.e2e.ctrlkit.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gadgetGV.Group,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: gadgetGV.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"color": {Type: "string"},
							"size":  {Type: "integer"},
						}},
					},
				}},
			}},
		},
	}
	// InstallCRD waits until the CRD is Established and its resource served.
	if err := env.InstallCRD(t.Context(), crd); err != nil {
		t.Fatal(err)
	}
	ext, err := apiextensions.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ext.ApiextensionsV1().CustomResourceDefinitions().Delete(t.Context(), crd.Name, metav1.DeleteOptions{})
	})
}

// gadgetClient writes Gadgets of one namespace through a JSONClient: the
// same client FromJSON reads with.
type gadgetClient struct {
	t  *testing.T
	c  rest.Interface
	ns string
}

func (g gadgetClient) create(name, color string, size int64) {
	g.t.Helper()
	obj := &Gadget{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: GadgetSpec{Color: color, Size: size}}
	obj.APIVersion, obj.Kind = gadgetGV.String(), "Gadget"
	body, err := json.Marshal(obj)
	if err != nil {
		g.t.Fatal(err)
	}
	if err := g.c.Post().Namespace(g.ns).Resource("gadgets").Body(body).Do(g.t.Context()).Error(); err != nil {
		g.t.Fatal(err)
	}
}

// update sets the spec of name by a merge patch.
func (g gadgetClient) update(name, color string, size int64) {
	g.t.Helper()
	patch, err := json.Marshal(map[string]any{"spec": GadgetSpec{Color: color, Size: size}})
	if err != nil {
		g.t.Fatal(err)
	}
	req := g.c.Patch(types.MergePatchType).Namespace(g.ns).Resource("gadgets").Name(name).Body(patch)
	if err := req.Do(g.t.Context()).Error(); err != nil {
		g.t.Fatal(err)
	}
}

func (g gadgetClient) delete(name string) {
	g.t.Helper()
	if err := g.c.Delete().Namespace(g.ns).Resource("gadgets").Name(name).Do(g.t.Context()).Error(); err != nil {
		g.t.Fatal(err)
	}
}

// gadgetStore is a mapStore of Gadgets that offers its objects for reuse
// (reflector.ReuseKeyStore).
type gadgetStore struct {
	*mapStore[*Gadget]
}

func (s gadgetStore) ReuseKey(namespace, name, rv string) (*Gadget, bool) {
	o, ok := s.get(namespace + "/" + name)
	if !ok || o.ResourceVersion != rv {
		return nil, false
	}
	return o, true
}

func (s gadgetStore) snapshot() map[string]*Gadget {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*Gadget, len(s.objs))
	for k, o := range s.objs {
		out[k] = o
	}
	return out
}

// freshGadgets returns the Gadgets of ns from a consistent LIST through the
// dynamic client (decoded apart from FromJSON, by the unstructured
// converter), managedFields stripped and TypeMeta left empty, by key; and
// the list's resourceVersion.
func freshGadgets(t *testing.T, ns string) (map[string]*Gadget, string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	list, err := dyn.Resource(gadgetGV.WithResource("gadgets")).Namespace(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*Gadget, len(list.Items))
	for _, u := range list.Items {
		g := new(Gadget)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, g); err != nil {
			t.Fatal(err)
		}
		g.ManagedFields = nil
		g.TypeMeta = metav1.TypeMeta{}
		out[g.Namespace+"/"+g.Name] = g
	}
	return out, list.GetResourceVersion()
}

// gadgetsCaughtUp returns once the API server's watch cache has seen every
// write made so far in ns (see cacheCaughtUp).
func gadgetsCaughtUp(t *testing.T, ns string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	_, rv := freshGadgets(t, ns)
	opts := metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}
	if _, err := dyn.Resource(gadgetGV.WithResource("gadgets")).Namespace(ns).List(t.Context(), opts); err != nil {
		t.Fatal(err)
	}
}

// TestFromJSONOnCRD installs a CRD and syncs its objects into their
// hand-written Go struct through FromJSON over a JSONClient, by streaming
// list and by paginated LIST, into a store that offers its objects for
// reuse:
//   - the first sync equals a fresh LIST decoded apart (go-cmp, field by
//     field), and creates, updates and deletes follow by watch;
//   - a second reflector over the same store, after changes made while none
//     ran, decodes only the changed and new Gadgets and keeps the store's
//     instances of the others.
func TestFromJSONOnCRD(t *testing.T) {
	installGadgets(t)
	for _, tc := range []struct {
		name string
		mode reflector.WatchListMode
	}{
		{"streaming", reflector.WatchListAuto},
		{"paginated", reflector.WatchListOff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 40
			ns := env.Namespace(t)
			client, err := reflector.JSONClient(env.Config(), gadgetGV)
			if err != nil {
				t.Fatal(err)
			}
			gadgets := gadgetClient{t: t, c: client, ns: ns}
			for i := range n {
				gadgets.create("g-"+strconv.Itoa(i), []string{"red", "blue"}[i%2], int64(i))
			}
			gadgetsCaughtUp(t, ns)

			lw := reflector.FromJSON[*Gadget](client, "gadgets", ns)
			st := gadgetStore{newMapStore[*Gadget]()}
			cfg := reflector.Config[*Gadget]{
				WatchList: tc.mode,
				PageSize:  15,
				Transform: reflector.StripManagedFields[*Gadget],
				Backoff:   reflector.Backoff{Max: 2 * time.Second},
			}
			checkFresh := func(what string) map[string]*Gadget {
				t.Helper()
				want, _ := freshGadgets(t, ns)
				versions := make(map[string]string, len(want))
				for k, g := range want {
					versions[k] = g.ResourceVersion
				}
				st.waitFor(t, versions)
				if diff := cmp.Diff(want, st.snapshot()); diff != "" {
					t.Fatalf("%s: store differs from a fresh LIST (-list +store):\n%s", what, diff)
				}
				return want
			}

			first := reflector.New(lw, st, cfg)
			stopFirst := startReflector(t, first)
			checkFresh("first sync")
			h := healthy(t, first, func(h reflector.Health) bool { return h.Synced && h.Stats.ListedObjects == n })
			if h.Stats.ListedFromStore != 0 || h.Stats.Refused != 0 {
				t.Errorf("first sync: Stats = %+v, want every object decoded, none refused", h.Stats)
			}

			gadgets.create("new", "green", 99)
			gadgets.update("g-7", "purple", 700)
			gadgets.delete("g-3")
			got := checkFresh("watch")
			if g := got[ns+"/g-7"]; g.Spec != (GadgetSpec{Color: "purple", Size: 700}) {
				t.Errorf("g-7 after an update = %+v", g)
			}
			healthy(t, first, func(h reflector.Health) bool { return h.Stats.Events >= 3 })
			stopFirst()
			before := st.snapshot()

			// While no reflector runs: 4 updates, 2 deletes, 3 creates.
			for i := range 4 {
				gadgets.update("g-"+strconv.Itoa(10+i), "changed", int64(1000+i))
			}
			gadgets.delete("g-20")
			gadgets.delete("g-21")
			for i := range 3 {
				gadgets.create("late-"+strconv.Itoa(i), "green", int64(i))
			}
			gadgetsCaughtUp(t, ns)

			second := reflector.New(lw, st, cfg)
			startReflector(t, second)
			checkFresh("second sync")
			listed := int64(n + 1 - 1 - 2 + 3) // created, deleted g-3, g-20, g-21, 3 late ones
			h = healthy(t, second, func(h reflector.Health) bool { return h.Synced && h.Stats.ListedObjects == listed })
			if want := listed - 7; h.Stats.ListedFromStore != want {
				t.Errorf("second sync: %d of %d listed Gadgets from the store, want %d (decoded: %d, want the 7 changed or new)",
					h.Stats.ListedFromStore, h.Stats.ListedObjects, want, h.Stats.ListedObjects-h.Stats.ListedFromStore)
			}
			kept := 0
			for k, o := range st.snapshot() {
				if before[k] == o {
					kept++
				}
			}
			if want := int(listed - 7); kept != want {
				t.Errorf("second sync: %d stored instances kept, want the %d unchanged", kept, want)
			}

			// Watch events after the list are decoded.
			gadgets.update("g-8", "orange", 8)
			if g := checkFresh("after a watch event")[ns+"/g-8"]; g.Spec.Color != "orange" {
				t.Errorf("g-8 after an update = %+v", g)
			}
		})
	}
}
