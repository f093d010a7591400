//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/internal/rbacfile"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
)

// managerUser is the static-token user the guarded manager runs as, with the
// rights of manager/rbac/rbac.yaml and nothing else but its controller's.
const managerUser = "metrics-manager"

// rbacNamespace is the namespace manager/rbac/rbac.yaml names.
const rbacNamespace = "ctrlkit-system"

// TestMetricsGuardedByAPIServer: a leader-elected manager running with exactly
// the rights of manager/rbac/rbac.yaml serves /metrics over TLS, and the real
// API server decides who reads it: a scrape without a token, or with a token it
// does not know, is refused 401; the token of a ServiceAccount without the
// ctrlkit-metrics-reader ClusterRole is refused 403; once that role is bound to
// another ServiceAccount, its token gets the controller's series (200). The
// same token is refused the pprof server (403: the role names /metrics only),
// which an admin reads. No answer says why it refuses.
func TestMetricsGuardedByAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := env.Namespace(t)
	admin := kubernetes.NewForConfigOrDie(env.Config())

	// The manager's rights: the manifest's, and its controller's ConfigMaps.
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rbacNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := rbacfile.Apply(ctx, admin, "../rbac/rbac.yaml", managerUser); err != nil {
		t.Fatal(err)
	}
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Group: "authentication.k8s.io", Resource: "tokenreviews", Verb: "create"},
		{Group: "authorization.k8s.io", Resource: "subjectaccessreviews", Verb: "create"},
		{Group: "coordination.k8s.io", Resource: "leases", Verb: "update", Namespace: rbacNamespace},
	} {
		waitAllowed(ctx, t, admin, authorizationv1.SubjectAccessReviewSpec{User: managerUser, ResourceAttributes: &attrs})
	}
	env.Grant(t, ns, managerUser, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch"}})
	const n = 3
	for i := range n {
		if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Two ServiceAccounts: the scraper, bound to the readers' ClusterRole,
	// and a stranger.
	scraper, stranger := saToken(ctx, t, admin, ns, "scraper"), saToken(ctx, t, admin, ns, "stranger")
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-scraper-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ctrlkit-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: ns}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	waitAllowed(ctx, t, admin, authorizationv1.SubjectAccessReviewSpec{
		User:                  "system:serviceaccount:" + ns + ":scraper",
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
	})

	cfg, err := env.UserConfig(managerUser)
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.Config{
		RESTConfig: cfg,
		LeaderElection: &reconcile.LeaderElection{
			Lock:            reconcile.NewLeaseLock(kubernetes.NewForConfigOrDie(cfg), rbacNamespace, "metrics-"+ns, "only"),
			ReleaseOnCancel: true, // releasing and publishing the floor need the manifest's rights too
		},
		HTTP: manager.HTTPConfig{MetricsAddress: "127.0.0.1:0", PprofAddress: "127.0.0.1:0"},
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
	addConfigMapController(t, m, cms, reconcile.Config[types.NamespacedName]{Name: "configmaps", Metrics: pm, QueueMetrics: pm.Queue()}, reconcile.Func[types.NamespacedName](func(context.Context, types.NamespacedName) (reconcile.Result, error) {
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

	metrics, pprof := "https://"+waitAddr(t, m.MetricsAddr)+"/metrics", "https://"+waitAddr(t, m.PprofAddr)+"/debug/pprof/"
	for _, tt := range []struct {
		name, url, token string
		code             int
	}{
		{"no token", metrics, "", http.StatusUnauthorized},
		{"a token the API server does not know", metrics, "forged", http.StatusUnauthorized},
		{"a ServiceAccount without the role", metrics, stranger, http.StatusForbidden},
		{"the ServiceAccount with the role", metrics, scraper, http.StatusOK},
		{"the ServiceAccount with the role, on pprof", pprof, scraper, http.StatusForbidden},
		{"an admin, on pprof", pprof, env.Config().BearerToken, http.StatusOK},
	} {
		code, body := getTLS(t, tt.url, tt.token)
		if code != tt.code {
			t.Errorf("%s: GET %s: %d %q, want %d", tt.name, tt.url, code, body[:min(len(body), 200)], tt.code)
			continue
		}
		switch code {
		case http.StatusUnauthorized, http.StatusForbidden:
			if want := http.StatusText(code) + "\n"; body != want {
				t.Errorf("%s: body %q, want %q and no reason", tt.name, body, want)
			}
		case http.StatusOK:
			if tt.url != metrics {
				break
			}
			for _, series := range []string{
				`workqueue_adds_total{name="configmaps"}`,
				`controller_runtime_reconcile_total{controller="configmaps",result="success"}`,
			} {
				if v, found := sample(body, series); !found || v < n {
					t.Errorf("%s: %s = %v (found %v), want at least %d", tt.name, series, v, found, n)
				}
			}
		}
	}
}

// saToken creates the ServiceAccount name in ns and returns a token of it.
func saToken(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string) string {
	t.Helper()
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secs := int64(600)
	tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// waitAllowed asks the API server about spec until it allows it: its
// authorizer learns of new bindings through a watch.
func waitAllowed(ctx context.Context, t *testing.T, c kubernetes.Interface, spec authorizationv1.SubjectAccessReviewSpec) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if err == nil && got.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%+v not allowed within 30s (%v)", spec, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// getTLS answers a GET of url over TLS, skipping the verification of the
// manager's self-signed certificate, with token as bearer token unless empty.
func getTLS(t *testing.T, url, token string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
	}}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.TLS == nil {
		t.Errorf("GET %s: not over TLS", url)
	}
	return resp.StatusCode, string(b)
}
