//go:build e2e

// Package e2e tests testenv against the real etcd and kube-apiserver it starts.
package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/testenv"
)

// env is shared by every test in this package. Secrets have no watch cache, so that watches
// on them reach etcd and see its compactions.
var env *testenv.Env

const childEnvVar = "CTRLKIT_TESTENV_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnvVar) == "1" {
		runChild()
		return
	}
	os.Exit(testenv.RunTests(m, testenv.Config{
		APIServerFlags: []string{"--watch-cache-sizes=secrets#0"},
		Users:          []testenv.User{{Name: "reader"}, {Name: "cluster-reader"}},
	}, &env, leakcheck.Check))
}

// runChild starts an environment, reports it on stdout, and waits to be killed.
func runChild() {
	e, err := testenv.Start(context.Background(), testenv.Config{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	etcdPID, apiPID := e.PIDs()
	fmt.Printf("started %d %d %s\n", etcdPID, apiPID, e.Dir())
	select {}
}

func clientset(t *testing.T) *kubernetes.Clientset {
	t.Helper()
	c, err := kubernetes.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func createNamespace(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// nextEvent returns the next event from w, failing the test after a timeout.
func nextEvent(t *testing.T, w watch.Interface) (watch.Event, bool) {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		return ev, ok
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event within 30s")
		return watch.Event{}, false
	}
}

func TestWatchDeliversCreatedConfigMap(t *testing.T) {
	ctx := context.Background()
	c := clientset(t)
	createNamespace(t, c, "watch-create")
	cms := c.CoreV1().ConfigMaps("watch-create")
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "one"}, Data: map[string]string{"k": "v"}}
	created, err := cms.Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev, ok := nextEvent(t, w)
	if !ok {
		t.Fatal("watch closed before delivering the ConfigMap")
	}
	got, isCM := ev.Object.(*corev1.ConfigMap)
	if ev.Type != watch.Added || !isCM || got.Name != "one" || got.ResourceVersion != created.ResourceVersion || got.Data["k"] != "v" {
		t.Fatalf("got event %s %#v, want Added of one at rv %s", ev.Type, ev.Object, created.ResourceVersion)
	}
}

func TestClientReconnectsAfterAPIServerRestart(t *testing.T) {
	ctx := context.Background()
	c := clientset(t)
	createNamespace(t, c, "restart")
	cms := c.CoreV1().ConfigMaps("restart")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			list, err := cms.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			_, oldAPI := env.PIDs()
			start := time.Now()
			if err := env.RestartAPIServer(ctx, sig); err != nil {
				t.Fatal(err)
			}
			t.Logf("restart with %v took %v", sig, time.Since(start))
			if _, newAPI := env.PIDs(); newAPI == oldAPI || newAPI == 0 {
				t.Fatalf("apiserver pid %d after restart, was %d", newAPI, oldAPI)
			}
			// The old watch ends with the server that served it.
			for {
				if _, ok := nextEvent(t, w); !ok {
					break
				}
			}
			// The same clientset reconnects: a list, a watch and a write succeed, and the
			// watch delivers the write.
			list, err = cms.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("list after restart: %v", err)
			}
			w2, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
			if err != nil {
				t.Fatalf("watch after restart: %v", err)
			}
			defer w2.Stop()
			name := "after-" + strings.ToLower(sig.String())
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create after restart: %v", err)
			}
			ev, ok := nextEvent(t, w2)
			if !ok || ev.Type != watch.Added || ev.Object.(*corev1.ConfigMap).Name != name {
				t.Fatalf("after restart got %v %v, want Added %s", ev.Type, ev.Object, name)
			}
		})
	}
}

func TestCompactionMakesOldResourceVersionGone(t *testing.T) {
	ctx := context.Background()
	c := clientset(t)
	createNamespace(t, c, "compact")
	secrets := c.CoreV1().Secrets("compact")
	s, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldRV := s.ResourceVersion
	for i := range 3 {
		s.StringData = map[string]string{"i": strconv.Itoa(i)}
		if s, err = secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Before compaction, a watch from the old RV replays the updates.
	w, err := secrets.Watch(ctx, metav1.ListOptions{ResourceVersion: oldRV})
	if err != nil {
		t.Fatal(err)
	}
	ev, ok := nextEvent(t, w)
	w.Stop()
	if !ok || ev.Type != watch.Modified {
		t.Fatalf("before compaction: got %v %v, want Modified", ev.Type, ev.Object)
	}

	rev, err := env.Compact(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cur, _ := strconv.ParseInt(s.ResourceVersion, 10, 64); rev < cur {
		t.Fatalf("compacted to %d, below the last write %d", rev, cur)
	}
	w, err = secrets.Watch(ctx, metav1.ListOptions{ResourceVersion: oldRV})
	if err != nil {
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("watch from compacted RV: %v, want 410", err)
		}
		return
	}
	defer w.Stop()
	ev, ok = nextEvent(t, w)
	if !ok || ev.Type != watch.Error {
		t.Fatalf("watch from compacted RV: got %v %v, want an Error event", ev.Type, ev.Object)
	}
	status, _ := ev.Object.(*metav1.Status)
	if status == nil || status.Code != 410 {
		t.Fatalf("watch from compacted RV: got %#v, want status 410", ev.Object)
	}
}

// TestExpireMakesServedVersionsGone: after Expire, a watch of ConfigMaps (which the
// API server serves from its watch cache) from a resourceVersion served before gets
// 410, while one from the current version works, and the data is all there.
func TestExpireMakesServedVersionsGone(t *testing.T) {
	ctx := context.Background()
	c := clientset(t)
	createNamespace(t, c, "expire")
	cms := c.CoreV1().ConfigMaps("expire")
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Expire(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "a" {
		t.Fatalf("after Expire the namespace holds %d ConfigMaps, want a", len(list.Items))
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: cm.ResourceVersion})
	if err == nil {
		ev, ok := nextEvent(t, w)
		w.Stop()
		status, _ := ev.Object.(*metav1.Status)
		if !ok || ev.Type != watch.Error || status == nil || status.Code != 410 {
			t.Fatalf("watch from a version served before Expire: got %v %#v, want a 410 Error event", ev.Type, ev.Object)
		}
	} else if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("watch from a version served before Expire: %v, want 410", err)
	}
	w, err = cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watch from the current version: %v", err)
	}
	defer w.Stop()
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev, ok := nextEvent(t, w); !ok || ev.Type != watch.Added {
		t.Fatalf("watch from the current version: got %v %v, want Added", ev.Type, ev.Object)
	}
}

func TestLeastPrivilegeUser(t *testing.T) {
	ctx := context.Background()
	admin := clientset(t)
	createNamespace(t, admin, "lp-allowed")
	createNamespace(t, admin, "lp-other")
	for _, ns := range []string{"lp-allowed", "lp-other"} {
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := env.UserConfig("reader")
	if err != nil {
		t.Fatal(err)
	}
	reader := kubernetes.NewForConfigOrDie(cfg)

	// Without any grant, the user is refused.
	if _, err := reader.CoreV1().ConfigMaps("lp-allowed").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list before grant: %v, want Forbidden", err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "cm-reader", Namespace: "lp-allowed"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}
	if _, err := admin.RbacV1().Roles("lp-allowed").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cm-reader", Namespace: "lp-allowed"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "cm-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "reader"}},
	}
	if _, err := admin.RbacV1().RoleBindings("lp-allowed").Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// RBAC changes take effect through the authorizer's informer; wait for the grant.
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := reader.CoreV1().ConfigMaps("lp-allowed").List(ctx, metav1.ListOptions{})
		if err == nil {
			if len(list.Items) != 1 || list.Items[0].Name != "cm" {
				t.Fatalf("reader sees %d ConfigMaps, want [cm]", len(list.Items))
			}
			break
		}
		if !apierrors.IsForbidden(err) || time.Now().After(deadline) {
			t.Fatalf("list after grant: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := reader.CoreV1().ConfigMaps("lp-other").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list in another namespace: %v, want Forbidden", err)
	}
	if _, err := reader.CoreV1().ConfigMaps("lp-allowed").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("create without the verb: %v, want Forbidden", err)
	}
	if _, err := reader.CoreV1().Secrets("lp-allowed").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list another resource: %v, want Forbidden", err)
	}
}

func TestEtcdRestart(t *testing.T) {
	ctx := context.Background()
	c := clientset(t)
	createNamespace(t, c, "etcd-restart")
	if err := env.RestartEtcd(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The API server reconnects to etcd on its own; writes succeed again within seconds
	// and data written before the restart is still there.
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := c.CoreV1().ConfigMaps("etcd-restart").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create after etcd restart: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := c.CoreV1().Namespaces().Get(ctx, "etcd-restart", metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace written before the restart: %v", err)
	}
}

func TestStopAndKilledParentLeaveNothing(t *testing.T) {
	// A test binary that is killed with SIGKILL runs no cleanup: its children must die
	// through the parent-death signal, and the next Start must remove its directory.
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnvVar+"=1")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("child: %v", err)
	}
	var etcdPID, apiPID int
	var childDir string
	if _, err := fmt.Sscanf(line, "started %d %d %s", &etcdPID, &apiPID, &childDir); err != nil {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("child said %q: %v", line, err)
	}
	if !alive(etcdPID) || !alive(apiPID) {
		t.Fatalf("child's control plane not running: etcd %d apiserver %d", etcdPID, apiPID)
	}
	child.Process.Kill()
	child.Wait()
	waitGone(t, etcdPID, apiPID)
	if _, err := os.Stat(childDir); err != nil {
		t.Fatalf("the killed child's directory should still exist until the next Start: %v", err)
	}

	e, err := testenv.Start(context.Background(), testenv.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(childDir); !errors.Is(err, os.ErrNotExist) {
		e.Stop()
		t.Fatalf("Start did not remove the killed binary's directory %s: %v", childDir, err)
	}
	etcdPID, apiPID = e.PIDs()
	dir := e.Dir()
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, etcdPID, apiPID)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Stop left %s behind: %v", dir, err)
	}
	if err := e.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// alive reports whether pid names a live (not zombie) process, read from /proc.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

func waitGone(t *testing.T, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still alive", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func TestInstallCRDServesTheResourceAtOnce(t *testing.T) {
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{
			Name: "networks.samplecrd.k8s.io",
			// Groups under k8s.io are protected: the API server wants this annotation.
			Annotations: map[string]string{"api-approved.kubernetes.io": "unapproved, experimental-only"},
		},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "samplecrd.k8s.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "networks", Singular: "network", Kind: "Network", ListKind: "NetworkList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"cidr": {Type: "string"}, "gateway": {Type: "string"},
					}}},
				}},
			}},
		},
	}
	if err := env.InstallCRD(ctx, crd); err != nil {
		t.Fatal(err)
	}
	// Served at once: the first create needs no retry.
	dyn, err := dynamic.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "samplecrd.k8s.io", Version: "v1", Resource: "networks"}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
		"metadata": map[string]any{"name": "net1", "namespace": "default"},
		"spec":     map[string]any{"cidr": "192.168.0.0/16", "gateway": "192.168.0.1"},
	}}
	if _, err := dyn.Resource(gvr).Namespace("default").Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create right after InstallCRD: %v", err)
	}
	// Installing the same CRD again is a no-op.
	if err := env.InstallCRD(ctx, crd); err != nil {
		t.Fatalf("second InstallCRD: %v", err)
	}
	if err := env.InstallCRD(ctx, nil); err == nil {
		t.Fatal("InstallCRD(nil) succeeded")
	}
}

// TestNamespacePerCall: each call of Namespace creates a namespace of its own, named
// after the test, that the API server then serves.
func TestNamespacePerCall(t *testing.T) {
	a, b := env.Namespace(t), env.Namespace(t)
	if a == b || !strings.HasPrefix(a, "testnamespacepercall-") || !strings.HasPrefix(b, "testnamespacepercall-") {
		t.Fatalf("namespaces %q and %q: want two names after the test", a, b)
	}
	c := clientset(t)
	for _, name := range []string{a, b} {
		if _, err := c.CoreV1().Namespaces().Get(t.Context(), name, metav1.GetOptions{}); err != nil {
			t.Fatalf("namespace %s: %v", name, err)
		}
	}
}

// TestGrantInEffectOnReturn: right after Grant returns, the user may do what it granted
// and nothing else, in each of ten fresh namespaces.
func TestGrantInEffectOnReturn(t *testing.T) {
	cfg, err := env.UserConfig("reader")
	if err != nil {
		t.Fatal(err)
	}
	reader, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		ns := env.Namespace(t)
		env.Grant(t, ns, "reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"}})
		if _, err := reader.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{}); err != nil {
			t.Fatalf("list in %s right after Grant: %v", ns, err)
		}
		if _, err := reader.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("list of secrets in %s = %v, want Forbidden", ns, err)
		}
	}
}

// TestGrantWithResourceNames: a rule limited to named objects is in effect when Grant
// returns, for those objects only (Grant used to wait for an unnamed request, which such a
// rule never allows, and failed after 30 seconds).
func TestGrantWithResourceNames(t *testing.T) {
	ns := env.Namespace(t)
	admin := clientset(t)
	for _, name := range []string{"mine", "theirs"} {
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	env.Grant(t, ns, "reader", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"mine"}, Verbs: []string{"get"}})
	cfg, err := env.UserConfig("reader")
	if err != nil {
		t.Fatal(err)
	}
	reader := kubernetes.NewForConfigOrDie(cfg)
	if _, err := reader.CoreV1().ConfigMaps(ns).Get(t.Context(), "mine", metav1.GetOptions{}); err != nil {
		t.Fatalf("get of the named ConfigMap right after Grant: %v", err)
	}
	if _, err := reader.CoreV1().ConfigMaps(ns).Get(t.Context(), "theirs", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("get of another ConfigMap = %v, want Forbidden", err)
	}
}

// TestGrantClusterAndRevokeCluster: right after GrantCluster returns, the user may do what
// it granted in every namespace, across all namespaces, on cluster-scoped resources and on
// non-resource URLs, and nothing else; a second GrantCluster replaces the first; right after
// RevokeCluster returns, all of it is refused again, except what another binding of the user
// allows, which RevokeCluster must not wait for.
func TestGrantClusterAndRevokeCluster(t *testing.T) {
	const user = "cluster-reader"
	ctx := t.Context()
	a, b := env.Namespace(t), env.Namespace(t)
	cfg, err := env.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	c := kubernetes.NewForConfigOrDie(cfg)
	getURL := func(path string) error {
		_, err := c.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
		return err
	}
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s = %v, want Forbidden", what, err)
		}
	}
	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s = %v, want it allowed", what, err)
		}
	}

	_, err = c.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	forbidden("list of all ConfigMaps before the grant", err)
	forbidden("GET /metrics before the grant", getURL("/metrics"))

	env.GrantCluster(t, user,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{a}, Verbs: []string{"get"}},
		rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics", "/version"}, Verbs: []string{"get"}},
	)
	for _, ns := range []string{a, b, ""} {
		_, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		allowed(fmt.Sprintf("list of ConfigMaps in %q right after GrantCluster", ns), err)
	}
	_, err = c.CoreV1().Namespaces().Get(ctx, a, metav1.GetOptions{})
	allowed("get of the granted namespace", err)
	_, err = c.CoreV1().Namespaces().Get(ctx, b, metav1.GetOptions{})
	forbidden("get of another namespace", err)
	_, err = c.CoreV1().Secrets(a).List(ctx, metav1.ListOptions{})
	forbidden("list of Secrets", err)
	_, err = c.CoreV1().ConfigMaps(a).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	forbidden("create of a ConfigMap", err)
	allowed("GET /metrics right after GrantCluster", getURL("/metrics"))

	// A second grant replaces the first: its rules are in effect on return.
	env.GrantCluster(t, user, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list"}})
	_, err = c.CoreV1().Secrets(b).List(ctx, metav1.ListOptions{})
	allowed("list of Secrets right after the second GrantCluster", err)

	start := time.Now()
	env.RevokeCluster(t, user)
	t.Logf("RevokeCluster took %v", time.Since(start))
	_, err = c.CoreV1().Secrets(b).List(ctx, metav1.ListOptions{})
	forbidden("list of Secrets right after RevokeCluster", err)
	_, err = c.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	forbidden("list of all ConfigMaps right after RevokeCluster", err)
	forbidden("GET /metrics right after RevokeCluster", getURL("/metrics"))
	allowed("GET /version, which every user may", getURL("/version"))
	admin := clientset(t)
	for _, err := range []error{
		func() error {
			_, err := admin.RbacV1().ClusterRoles().Get(ctx, "testenv:"+user, metav1.GetOptions{})
			return err
		}(),
		func() error {
			_, err := admin.RbacV1().ClusterRoleBindings().Get(ctx, "testenv:"+user, metav1.GetOptions{})
			return err
		}(),
	} {
		if !apierrors.IsNotFound(err) {
			t.Errorf("after RevokeCluster: %v, want the ClusterRole and its binding gone", err)
		}
	}

	// Revoking again is a no-op.
	env.RevokeCluster(t, user)

	// What another binding allows the user stays allowed: RevokeCluster does not wait for
	// it to be refused.
	other := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user + "-public-info"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:public-info-viewer"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	env.GrantCluster(t, user, rbacv1.PolicyRule{NonResourceURLs: []string{"/version", "/metrics"}, Verbs: []string{"get"}})
	start = time.Now()
	env.RevokeCluster(t, user)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("RevokeCluster of a grant that another binding partly shares took %v", took)
	}
	forbidden("GET /metrics after the last RevokeCluster", getURL("/metrics"))
	allowed("GET /version, which the other binding allows", getURL("/version"))
}

// TestRevokeUndoesGrant: right after Revoke returns, what Grant allowed in the namespace is
// refused again; Revoke of what was never granted does nothing.
func TestRevokeUndoesGrant(t *testing.T) {
	const user = "cluster-reader"
	ns := env.Namespace(t)
	cfg, err := env.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	c := kubernetes.NewForConfigOrDie(cfg)
	env.Grant(t, ns, user, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "create"}})
	if _, err := c.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatalf("list right after Grant: %v", err)
	}
	env.Revoke(t, ns, user)
	if _, err := c.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list right after Revoke = %v, want Forbidden", err)
	}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("create right after Revoke = %v, want Forbidden", err)
	}
	env.Revoke(t, ns, user)
}
