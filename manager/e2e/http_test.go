//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// TestHTTPReadyzForbidden: a manager whose user may not list ConfigMaps serves
// /readyz as 503 naming the ConfigMap informer and the controller over real
// HTTP, but not why (the Forbidden message names the user and what it may not
// do: that is logged, and Manager.Informers tells the program); once the user
// is granted list and watch, the informer syncs, the controller starts and
// /readyz answers 200.
func TestHTTPReadyzForbidden(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := env.Namespace(t)
	cfg, err := env.UserConfig("norights")
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.Config{
		RESTConfig:  cfg,
		SyncTimeout: 2 * time.Minute,
		HTTP:        manager.HTTPConfig{HealthAddress: "127.0.0.1:0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	cms, err := manager.Typed[*corev1.ConfigMap](m, manager.Options[*corev1.ConfigMap]{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	addConfigMapController(t, m, cms, reconcile.Config[types.NamespacedName]{Name: "configmaps"}, reconcile.Func[types.NamespacedName](func(context.Context, types.NamespacedName) (reconcile.Result, error) {
		return reconcile.Result{}, nil
	}))
	runManager(ctx, t, m)

	addr := waitAddr(t, m.HealthAddr)
	waitFor(t, 30*time.Second, "the informer's list to be refused", func() bool {
		infs := m.Informers()
		return len(infs) == 1 && errors.Is(infs[0].Health.LastError, reflector.ErrForbidden)
	})
	code, body := get(t, "http://"+addr+"/readyz")
	want := "[-]informer/configmaps in " + ns + " failed\n[-]controller/configmaps failed\nreadyz check failed\n"
	if code != http.StatusServiceUnavailable || body != want {
		t.Fatalf("/readyz without rights: %d %q, want 503 %q (names, no reasons)", code, body, want)
	}
	if code, body := get(t, "http://"+addr+"/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz: %d %q, want 200 ok", code, body)
	}

	env.Grant(t, ns, "norights", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch"}})
	// The informer retries with backoff (up to 30s between attempts).
	code, body = waitHTTP(t, "http://"+addr+"/readyz?verbose", 90*time.Second, func(code int, _ string) bool {
		return code == http.StatusOK
	})
	want = "[+]shutdown ok\n[+]informer/configmaps in " + ns + " ok\n[+]controller/configmaps ok\nreadyz check passed\n"
	if code != http.StatusOK || body != want {
		t.Fatalf("/readyz?verbose after the grant: %d %q, want 200 %q", code, body, want)
	}
}

// TestHTTPMetrics: /metrics scraped over HTTP holds the controller's queue and
// reconcile series (through Manager.ControllerMetrics), client-go's REST client
// requests, the ConfigMap informer's series with its object count, and the
// leader gauge.
func TestHTTPMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := env.Namespace(t)
	kube := kubernetes.NewForConfigOrDie(env.Config())
	const n = 7
	for i := range n {
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := manager.New(manager.Config{
		RESTConfig: env.Config(),
		// Plain HTTP: TestMetricsGuardedByAPIServer covers the guard.
		HTTP: manager.HTTPConfig{MetricsAddress: "127.0.0.1:0", UnsafeInsecureServing: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	cms, err := manager.Typed[*corev1.ConfigMap](m, manager.Options[*corev1.ConfigMap]{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	pm, err := m.ControllerMetrics("configmaps")
	if err != nil {
		t.Fatal(err)
	}
	var reconciled atomic.Int64
	all := make(chan struct{})
	addConfigMapController(t, m, cms, reconcile.Config[types.NamespacedName]{Name: "configmaps", Metrics: pm, QueueMetrics: pm.Queue()}, reconcile.Func[types.NamespacedName](func(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
		// A read through the manager's client, which client-go times (its
		// lists and watches are counted, not timed).
		if _, err := m.Kubernetes().CoreV1().ConfigMaps(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{}); err != nil {
			return reconcile.Result{}, err
		}
		if reconciled.Add(1) == n {
			close(all)
		}
		return reconcile.Result{}, nil
	}))
	runManager(ctx, t, m)
	select {
	case <-all:
	case <-ctx.Done():
		t.Fatalf("%d reconciles, want %d", reconciled.Load(), n)
	}

	code, body := get(t, "http://"+m.MetricsAddr()+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	inf := `{informer="configmaps in ` + ns + `"}`
	for series, ok := range map[string]func(float64) bool{
		`workqueue_adds_total{name="configmaps"}`:                                                      func(v float64) bool { return v >= n },
		`controller_runtime_reconcile_total{controller="configmaps",result="success"}`:                 func(v float64) bool { return v >= n },
		`rest_client_requests_total{code="200",host="` + hostOf(env.Config().Host) + `",method="GET"}`: func(v float64) bool { return v >= n },
		`ctrlkit_informer_objects` + inf:                                                               func(v float64) bool { return v == n },
		`ctrlkit_informer_synced` + inf:                                                                func(v float64) bool { return v == 1 },
		`ctrlkit_informer_resource_version` + inf:                                                      func(v float64) bool { return v > 0 },
		`ctrlkit_informer_handlers` + inf:                                                              func(v float64) bool { return v == 1 },
		`ctrlkit_manager_leader`:                                                                       func(v float64) bool { return v == 1 },
	} {
		v, found := sample(body, series)
		if !found || !ok(v) {
			t.Errorf("/metrics: %s = %v (found %v)", series, v, found)
		}
	}
	if v, _ := sample(body, `rest_client_request_duration_seconds_count{host="`+hostOf(env.Config().Host)+`",verb="GET"}`); v < n {
		t.Errorf("/metrics: rest_client_request_duration_seconds_count of GETs = %v, want at least %d", v, n)
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}

// sample returns the value of one series in a text exposition.
func sample(body, series string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// hostOf returns the host and port of a URL.
func hostOf(url string) string {
	_, rest, _ := strings.Cut(url, "://")
	host, _, _ := strings.Cut(rest, "/")
	return host
}

// waitAddr waits until addr returns an address: Run has bound it.
func waitAddr(t *testing.T, addr func() string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if a := addr(); a != "" {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatal("the server did not start listening within 30s")
		}
		<-tick.C
	}
}

// waitHTTP GETs url until done accepts the answer or within passes, and
// returns the last answer.
func waitHTTP(t *testing.T, url string, within time.Duration, done func(code int, body string) bool) (int, string) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		code, body := get(t, url)
		if done(code, body) || time.Now().After(deadline) {
			return code, body
		}
		<-tick.C
	}
}

// get answers a GET of url: status code and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}
