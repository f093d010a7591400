//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/ctrlkit/ctrlkit/internal/testrun"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
	"github.com/ctrlkit/ctrlkit/testenv"
)

// storm runs n random creates, updates and deletes of ConfigMaps in ns from
// four goroutines.
func storm(t *testing.T, ns string, n int) {
	t.Helper()
	c := admin(t).CoreV1().ConfigMaps(ns)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range n / 4 {
				name := "storm-" + strconv.Itoa(rnd.IntN(40))
				var err error
				switch rnd.IntN(3) {
				case 0:
					_, err = c.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
				case 1:
					_, err = c.Update(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": strconv.Itoa(i)}}, metav1.UpdateOptions{})
				case 2:
					err = c.Delete(t.Context(), name, metav1.DeleteOptions{})
				}
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsConflict(err) {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestTypedClient syncs ConfigMaps through the typed adapter (protobuf),
// with the server's streaming list and with paginated LIST, then follows a
// storm of writes.
func TestTypedClient(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode reflector.WatchListMode
	}{
		{"streaming", reflector.WatchListAuto},
		{"paginated", reflector.WatchListOff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			createConfigMaps(t, ns, 230)
			st := newMapStore[*corev1.ConfigMap]()
			r := reflector.New(reflector.FromTyped(admin(t).CoreV1().ConfigMaps(ns)), st, reflector.Config[*corev1.ConfigMap]{
				WatchList: tc.mode,
				PageSize:  100,
				Transform: reflector.StripManagedFields[*corev1.ConfigMap],
			})
			testrun.Run(t, r.Run)
			st.waitFor(t, serverConfigMaps(t, ns))

			h := healthy(t, r, func(h reflector.Health) bool {
				if !h.Synced || h.State != reflector.StateWatching || h.ConsecutiveFailures != 0 || h.Stats.Failures != 0 {
					return false
				}
				if tc.mode == reflector.WatchListAuto {
					// The streaming path was taken.
					return h.Stats.StreamingLists == 1 && h.Stats.Lists == 0 && h.Stats.Watches == 0
				}
				return h.Stats.StreamingLists == 0 && h.Stats.Lists == 1 && h.Stats.Watches == 1
			})
			if o, ok := st.get(ns + "/cm-7"); !ok || o.ManagedFields != nil || o.Data["i"] != "7" {
				t.Errorf("stored cm-7 = %+v", o)
			}

			storm(t, ns, 400)
			want := serverConfigMaps(t, ns)
			st.waitFor(t, want)
			healthy(t, r, func(got reflector.Health) bool {
				return got.Stats.Events > 0 && got.LastResourceVersion != h.LastResourceVersion
			})
		})
	}
}

func TestMetadataClient(t *testing.T) {
	ns := env.Namespace(t)
	createConfigMaps(t, ns, 20)
	md, err := metadata.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	st := newMapStore[*metav1.PartialObjectMetadata]()
	lw := reflector.FromMetadata(md.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(ns))
	r := reflector.New(lw, st, reflector.Config[*metav1.PartialObjectMetadata]{})
	testrun.Run(t, r.Run)
	st.waitFor(t, serverConfigMaps(t, ns))
	if err := admin(t).CoreV1().ConfigMaps(ns).Delete(t.Context(), "cm-3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	st.waitFor(t, serverConfigMaps(t, ns))
	healthy(t, r, func(h reflector.Health) bool { return h.Stats.StreamingLists == 1 && h.Stats.Events == 1 })
}

// TestDynamicClientOnCRD creates a CRD through the apiextensions API and
// watches its objects through the dynamic client, with a label selector.
func TestDynamicClientOnCRD(t *testing.T) {
	ctx := t.Context()
	ext, err := apiextensions.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.e2e.ctrlkit.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "e2e.ctrlkit.io",
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", XPreserveUnknownFields: ptr(true)},
					},
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
	gvr := schema.GroupVersionResource{Group: "e2e.ctrlkit.io", Version: "v1", Resource: "widgets"}
	widgets := dyn.Resource(gvr).Namespace(ns)
	widget := func(name, color string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "e2e.ctrlkit.io/v1",
			"kind":       "Widget",
			"metadata":   map[string]any{"name": name, "labels": map[string]any{"color": color}},
			"spec":       map[string]any{"size": int64(len(name))},
		}}
		return u
	}
	create := func(name, color string) {
		t.Helper()
		if _, err := widgets.Create(ctx, widget(name, color), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 12 {
		create("w-"+strconv.Itoa(i), []string{"red", "blue"}[i%2])
	}
	serverRed := func() map[string]string {
		list, err := widgets.List(ctx, metav1.ListOptions{LabelSelector: "color=red"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, u := range list.Items {
			out[u.GetNamespace()+"/"+u.GetName()] = u.GetResourceVersion()
		}
		return out
	}

	st := newMapStore[*unstructured.Unstructured]()
	r := reflector.New(reflector.FromDynamic(widgets), st, reflector.Config[*unstructured.Unstructured]{LabelSelector: "color=red"})
	testrun.Run(t, r.Run)
	want := serverRed()
	if len(want) != 6 {
		t.Fatalf("server has %d red widgets, want 6", len(want))
	}
	st.waitFor(t, want)

	// One widget turns red, one turns blue, one red one goes.
	for name, color := range map[string]string{"w-1": "red", "w-0": "blue"} {
		u, err := widgets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u.SetLabels(map[string]string{"color": color})
		if _, err := widgets.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := widgets.Delete(ctx, "w-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	st.waitFor(t, serverRed())
	if u, ok := st.get(ns + "/w-1"); !ok || u.GetKind() != "Widget" || u.Object["spec"].(map[string]any)["size"] != int64(3) {
		t.Errorf("stored w-1 = %v", u)
	}
	healthy(t, r, func(h reflector.Health) bool { return h.Stats.StreamingLists == 1 && h.Stats.Failures == 0 })
}

func ptr[T any](v T) *T { return &v }

// TestRelistAfterCompactionAndRestart cuts two reflectors (streaming and
// paginated) off the server, changes and deletes objects, compacts etcd and
// restarts the API server, so that their resourceVersion is gone. When they
// reconnect they get 410, relist, and end up equal to the server: the
// objects deleted meanwhile are gone.
func TestRelistAfterCompactionAndRestart(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	createConfigMaps(t, ns, 60)
	type subject struct {
		gate *reflectortest.Partition[*corev1.ConfigMap]
		st   *mapStore[*corev1.ConfigMap]
		r    *reflector.Reflector[*corev1.ConfigMap]
	}
	var subjects []subject
	for _, mode := range []reflector.WatchListMode{reflector.WatchListAuto, reflector.WatchListOff} {
		g := reflectortest.NewPartition(reflector.FromTyped(admin(t).CoreV1().ConfigMaps(ns)))
		st := newMapStore[*corev1.ConfigMap]()
		r := reflector.New[*corev1.ConfigMap](g, st, reflector.Config[*corev1.ConfigMap]{
			Name: mode.String(), WatchList: mode, Backoff: reflector.Backoff{Max: 2 * time.Second},
		})
		testrun.Run(t, r.Run)
		subjects = append(subjects, subject{g, st, r})
	}
	want := serverConfigMaps(t, ns)
	for _, s := range subjects {
		s.st.waitFor(t, want)
		s.gate.Cut()
	}

	c := admin(t).CoreV1().ConfigMaps(ns)
	for i := range 20 {
		name := "cm-" + strconv.Itoa(i)
		switch i % 2 {
		case 0:
			if err := c.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		case 1:
			if _, err := c.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": "2"}}, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if err := env.RestartAPIServer(ctx, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}

	want = serverConfigMaps(t, ns)
	if len(want) != 51 {
		t.Fatalf("server holds %d ConfigMaps, want 51", len(want))
	}
	for _, s := range subjects {
		s.gate.Heal()
	}
	for _, s := range subjects {
		s.st.waitFor(t, want)
		// It relisted after a 410.
		healthy(t, s.r, func(h reflector.Health) bool {
			return h.Stats.Expired >= 1 && h.Stats.Lists+h.Stats.StreamingLists == 2
		})
	}
	// And they watch again.
	if _, err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want = serverConfigMaps(t, ns)
	for _, s := range subjects {
		s.st.waitFor(t, want)
	}
}

// TestAPIServerRestarts restarts the API server under a watching reflector,
// gracefully (SIGTERM) and by SIGKILL, with writes as soon as it is back,
// while the reflector may still be backing off.
func TestAPIServerRestarts(t *testing.T) {
	ns := env.Namespace(t)
	createConfigMaps(t, ns, 30)
	st := newMapStore[*corev1.ConfigMap]()
	onError, errs := testrun.Errors()
	r := reflector.New(reflector.FromTyped(admin(t).CoreV1().ConfigMaps(ns)), st, reflector.Config[*corev1.ConfigMap]{
		OnError: onError, Backoff: reflector.Backoff{Max: 2 * time.Second},
	})
	testrun.Run(t, r.Run)
	st.waitFor(t, serverConfigMaps(t, ns))
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if err := env.RestartAPIServer(t.Context(), sig); err != nil {
			t.Fatal(err)
		}
		storm(t, ns, 40)
		st.waitFor(t, serverConfigMaps(t, ns))
	}
	select {
	case err := <-errs:
		t.Logf("first error seen during the restarts: %v", err)
	default:
		t.Error("restarting the API server twice caused no error at all")
	}
	healthy(t, r, func(h reflector.Health) bool { return h.State == reflector.StateWatching })
}

// grant gives user the verbs on ConfigMaps of ns, replacing earlier grants.
func grant(t *testing.T, ns, user string, verbs ...string) {
	t.Helper()
	env.Grant(t, ns, user, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs})
}

func isAccessError(verb string) func(error) bool {
	return func(err error) bool {
		var ae *reflector.AccessError
		return errors.As(err, &ae) && ae.Verb == verb && errors.Is(err, reflector.ErrForbidden)
	}
}

// TestUserWithoutWatch: a user who may list but not watch gets a typed
// Forbidden error within seconds, keeps retrying, and recovers once RBAC
// grants watch.
func TestUserWithoutWatch(t *testing.T) {
	ns := env.Namespace(t)
	createConfigMaps(t, ns, 10)
	grant(t, ns, userLister, "get", "list")
	client := clientsetFor(t, userLister)

	type subject struct {
		st   *mapStore[*corev1.ConfigMap]
		r    *reflector.Reflector[*corev1.ConfigMap]
		errs <-chan error
	}
	var subjects []subject
	for _, mode := range []reflector.WatchListMode{reflector.WatchListAuto, reflector.WatchListOff} {
		onError, errs := testrun.Errors()
		st := newMapStore[*corev1.ConfigMap]()
		r := reflector.New(reflector.FromTyped(client.CoreV1().ConfigMaps(ns)), st, reflector.Config[*corev1.ConfigMap]{
			Name: mode.String(), WatchList: mode, OnError: onError,
		})
		started := time.Now()
		testrun.Run(t, r.Run)
		err := waitError(t, errs, 5*time.Second, isAccessError("watch"))
		t.Logf("%s: %v after %v", mode, err, time.Since(started))
		var ae *reflector.AccessError
		if h := r.Health(); !errors.As(h.LastError, &ae) || h.ConsecutiveFailures == 0 {
			t.Errorf("%s: health = %+v", mode, h)
		}
		subjects = append(subjects, subject{st, r, errs})
	}
	// Without watch, a streaming list gets nothing; a LIST still fills the
	// store, whose watch is then refused.
	if h := subjects[0].r.Health(); h.Synced {
		t.Errorf("streaming without watch synced: %+v", h)
	}
	healthy(t, subjects[1].r, func(h reflector.Health) bool { return h.Synced })
	// Still retrying: another refusal comes.
	for _, s := range subjects {
		waitError(t, s.errs, 10*time.Second, isAccessError("watch"))
	}

	grant(t, ns, userLister, "get", "list", "watch")
	if _, err := admin(t).CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-grant"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := serverConfigMaps(t, ns)
	for _, s := range subjects {
		s.st.waitFor(t, want)
		healthy(t, s.r, func(h reflector.Health) bool { return h.Synced && h.State == reflector.StateWatching })
	}
}

// TestNamespaceScopedUser: a user allowed to list and watch ConfigMaps of
// one namespace syncs that namespace, and is refused the others.
func TestNamespaceScopedUser(t *testing.T) {
	allowed := env.Namespace(t)
	other := env.Namespace(t)
	createConfigMaps(t, allowed, 15)
	createConfigMaps(t, other, 5)
	grant(t, allowed, userNSReader, "list", "watch")
	client := clientsetFor(t, userNSReader)

	st := newMapStore[*corev1.ConfigMap]()
	r := reflector.New(reflector.FromTyped(client.CoreV1().ConfigMaps(allowed)), st, reflector.Config[*corev1.ConfigMap]{})
	testrun.Run(t, r.Run)
	st.waitFor(t, serverConfigMaps(t, allowed))
	storm(t, allowed, 40)
	st.waitFor(t, serverConfigMaps(t, allowed))
	healthy(t, r, func(h reflector.Health) bool { return h.Stats.Failures == 0 && h.Stats.StreamingLists == 1 })

	for _, ns := range []string{other, metav1.NamespaceAll} {
		onError, errs := testrun.Errors()
		denied := reflector.New(reflector.FromTyped(client.CoreV1().ConfigMaps(ns)), newMapStore[*corev1.ConfigMap](),
			reflector.Config[*corev1.ConfigMap]{OnError: onError})
		testrun.Run(t, denied.Run)
		waitError(t, errs, 5*time.Second, isAccessError("watch"))
	}
}

// TestServerWithoutWatchList starts a second control plane whose API server
// has the WatchList feature off: the reflector's streaming list is rejected
// and it falls back to LIST, without counting a failure.
func TestServerWithoutWatchList(t *testing.T) {
	old, err := testenv.Start(t.Context(), testenv.Config{APIServerFlags: []string{"--feature-gates=WatchList=false"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { old.Stop() })
	client, err := kubernetes.NewForConfig(reflector.WithProtobuf(old.Config()))
	if err != nil {
		t.Fatal(err)
	}
	ns := "fallback"
	if _, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		if _, err := client.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("cm-", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	onError, errs := testrun.Errors()
	st := newMapStore[*corev1.ConfigMap]()
	r := reflector.New(reflector.FromTyped(client.CoreV1().ConfigMaps(ns)), st, reflector.Config[*corev1.ConfigMap]{OnError: onError})
	testrun.Run(t, r.Run)
	list := func() map[string]string {
		l, err := client.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, c := range l.Items {
			out[ns+"/"+c.Name] = c.ResourceVersion
		}
		return out
	}
	st.waitFor(t, list())
	if err := client.CoreV1().ConfigMaps(ns).Delete(t.Context(), "cm-4", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	st.waitFor(t, list())
	healthy(t, r, func(h reflector.Health) bool {
		return h.Stats.StreamingLists == 0 && h.Stats.Lists == 1 && h.Stats.Failures == 0 && h.LastError == nil
	})
	select {
	case err := <-errs:
		t.Errorf("the fallback reported an error: %v", err)
	default:
	}
}

// TestWithoutWatchCache reads Secrets, which have no watch cache here: etcd
// paginates the first list, a continue token expires when etcd is
// compacted in the middle of a list, and a relist at a compacted
// resourceVersion gets 410 from etcd.
func TestWithoutWatchCache(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	secrets := admin(t).CoreV1().Secrets(ns)
	for i := range 230 {
		if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("s-", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	serverSecrets := func() map[string]string {
		list, err := secrets.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, s := range list.Items {
			out[s.Namespace+"/"+s.Name] = s.ResourceVersion
		}
		return out
	}
	g := reflectortest.NewPartition(reflector.FromTyped(secrets))
	sp := &spy[*corev1.Secret]{ListerWatcher: g}
	// Before the first continue request, write and compact: the token's
	// snapshot is then older than etcd's history.
	var once sync.Once
	compacted := make(chan struct{})
	sp.beforeList = func(o metav1.ListOptions) {
		if o.Continue == "" {
			return
		}
		once.Do(func() {
			defer close(compacted)
			if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "during-list"}}, metav1.CreateOptions{}); err != nil {
				t.Error(err)
			}
			if _, err := env.Compact(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	st := newMapStore[*corev1.Secret]()
	r := reflector.New[*corev1.Secret](sp, st, reflector.Config[*corev1.Secret]{
		WatchList: reflector.WatchListOff, PageSize: 100, Backoff: reflector.Backoff{Max: 2 * time.Second},
	})
	testrun.Run(t, r.Run)
	select {
	case <-compacted:
	case <-time.After(waitTimeout):
		t.Fatal("the reflector never asked for a second page")
	}
	st.waitFor(t, serverSecrets())
	want := []string{
		"rv=0 limit=100", "continue limit=100", // expired
		"rv= limit=100", "continue limit=100", "continue limit=100",
	}
	if diff := cmp.Diff(want, sp.listed()); diff != "" {
		t.Errorf("lists (-want +got):\n%s", diff)
	}
	healthy(t, r, func(h reflector.Health) bool {
		return h.Stats.Expired == 1 && h.Stats.Lists == 1 && h.Stats.Failures == 0
	})

	// Cut off, the reflector misses deletions; etcd is compacted; its watch
	// from the old resourceVersion gets 410, and so does a paginated list at
	// it, so it lists the most recent state.
	g.Cut()
	for i := range 30 {
		if err := secrets.Delete(ctx, fmt.Sprint("s-", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	before := len(sp.listed())
	g.Heal()
	st.waitFor(t, serverSecrets())
	relist := sp.listed()[before:]
	t.Logf("relist requests: %v", relist)
	if len(relist) < 2 || relist[0] == "rv= limit=100" || relist[len(relist)-3] != "rv= limit=100" {
		t.Errorf("relist requests = %v, want one at the old resourceVersion, then pages at the most recent", relist)
	}
	healthy(t, r, func(h reflector.Health) bool { return h.Stats.Expired >= 2 && h.Stats.Lists == 2 })
}
