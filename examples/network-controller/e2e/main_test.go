//go:build e2e

// Package e2e tests the network controller against the real etcd and kube-apiserver
// that testenv starts and a real backend on loopback. The CRD is installed as admin;
// the controller runs as the user "controller" holding exactly the rules of
// ../rbac.yaml.
package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/examples/network-controller/backend"
	"github.com/ctrlkit/ctrlkit/examples/network-controller/network"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/rbacfile"
	"github.com/ctrlkit/ctrlkit/internal/testrun"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunTests(m, testenv.Config{Users: []testenv.User{{Name: "controller"}}}, &env, leakcheck.Check))
}

// converge bounds every wait for the controller to reach a state.
const converge = 30 * time.Second

func admin(t *testing.T) (*kubernetes.Clientset, dynamic.NamespaceableResourceInterface) {
	t.Helper()
	cfg := env.Config()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, dyn.Resource(network.GroupVersionResource)
}

// namespaces counts the namespaces made by setup.
// setup installs the CRD as admin, grants the controller user the rules of
// rbac.yaml, and creates a namespace named after the test.
func setup(t *testing.T) (ns string) {
	t.Helper()
	ctx := t.Context()
	if err := network.Install(ctx, env.Config()); err != nil {
		t.Fatal(err)
	}
	cs, _ := admin(t)
	if err := rbacfile.Apply(ctx, cs, "../rbac.yaml", "controller"); err != nil {
		t.Fatal(err)
	}
	return env.Namespace(t)
}

// testBackend is a backend.Server served on a fixed loopback address, which can be
// stopped and started again on the same address and state directory.
type testBackend struct {
	t    *testing.T
	dir  string
	addr string
	srv  *backend.Server // nil while stopped
	stop func()
}

// newBackend prepares a backend on a free loopback port; it is not started.
func newBackend(t *testing.T) *testBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	b := &testBackend{t: t, dir: t.TempDir(), addr: addr}
	t.Cleanup(b.Stop)
	return b
}

func (b *testBackend) URL() string { return "http://" + b.addr }

// Start starts the backend on its address, loading its state from disk.
func (b *testBackend) Start() *backend.Server {
	b.t.Helper()
	if b.srv != nil {
		b.t.Fatal("backend already running")
	}
	srv, err := backend.New(b.dir)
	if err != nil {
		b.t.Fatal(err)
	}
	var ln net.Listener
	// The port was free a moment ago; retry briefly in case it lingers.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err = net.Listen("tcp", b.addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	b.srv = srv
	b.stop = func() {
		cancel()
		if err := <-done; err != nil {
			b.t.Errorf("backend Serve = %v", err)
		}
	}
	return srv
}

// Stop stops the backend if it runs.
func (b *testBackend) Stop() {
	if b.srv != nil {
		b.stop()
		b.srv = nil
	}
}

// Networks returns the backend's state, read from its state directory when stopped.
func (b *testBackend) Networks() []backend.Network {
	b.t.Helper()
	if b.srv != nil {
		return b.srv.Networks()
	}
	srv, err := backend.New(b.dir)
	if err != nil {
		b.t.Fatal(err)
	}
	return srv.Networks()
}

// controller is a running network.Controller with counters of its API traffic.
type controller struct {
	*network.Controller
	conflicts       atomic.Int64 // 409 answers the controller got from the API server
	objectConflicts atomic.Int64 // those of them on the object itself (finalizers), not its status
}

// startController runs a controller for ns as the least-privilege user, in a
// manager of its own, until the end of the test.
func startController(t *testing.T, ns, backendURL string, opts network.Options) *controller {
	t.Helper()
	cfg, err := env.UserConfig("controller")
	if err != nil {
		t.Fatal(err)
	}
	c := &controller{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && resp.StatusCode == http.StatusConflict {
				c.conflicts.Add(1)
				if !strings.HasSuffix(req.URL.Path, "/status") {
					c.objectConflicts.Add(1)
				}
			}
			return resp, err
		})
	})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	opts.Namespace = ns
	opts.BackendURL = backendURL
	opts.HTTPClient = &http.Client{Transport: tr, Timeout: 5 * time.Second}
	if opts.OrphanSweepPeriod == 0 {
		opts.OrphanSweepPeriod = time.Second
	}
	m, err := manager.New(manager.Config{RESTConfig: cfg})
	if err != nil {
		t.Fatal(err)
	}
	c.Controller, err = network.New(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	testrun.Run(t, m.Run)
	return c
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// create creates a Network as admin and returns it.
func create(t *testing.T, ns, name, cidr, gateway string) *network.Network {
	t.Helper()
	_, res := admin(t)
	u, err := network.ToUnstructured(&network.Network{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       network.Spec{CIDR: cidr, Gateway: gateway},
	})
	if err != nil {
		t.Fatal(err)
	}
	u, err = res.Namespace(ns).Create(t.Context(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := network.FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// get reads a Network as admin; nil if it does not exist.
func get(t *testing.T, ns, name string) *network.Network {
	t.Helper()
	_, res := admin(t)
	u, err := res.Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	n, err := network.FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// modify changes a Network as admin with a read-modify-write, retrying on conflicts.
// It returns the object written, or nil if the Network does not exist.
func modify(ctx context.Context, res dynamic.ResourceInterface, name string, change func(*network.Network)) (*network.Network, error) {
	for {
		u, err := res.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		n, err := network.FromUnstructured(u)
		if err != nil {
			return nil, err
		}
		change(n)
		if u, err = network.ToUnstructured(n); err != nil {
			return nil, err
		}
		u, err = res.Update(ctx, u, metav1.UpdateOptions{})
		switch {
		case err == nil:
			return network.FromUnstructured(u)
		case apierrors.IsNotFound(err):
			return nil, nil
		case !apierrors.IsConflict(err):
			return nil, err
		}
	}
}

// ready returns a description of n's Ready condition.
func ready(n *network.Network) string {
	if n == nil {
		return "object gone"
	}
	c := meta.FindStatusCondition(n.Status.Conditions, network.ConditionReady)
	if c == nil {
		return fmt.Sprintf("no Ready condition (generation %d, observed %d)", n.Generation, n.Status.ObservedGeneration)
	}
	return fmt.Sprintf("Ready=%s reason=%s observedGeneration=%d/%d (condition %d) message=%q",
		c.Status, c.Reason, n.Status.ObservedGeneration, n.Generation, c.ObservedGeneration, c.Message)
}

// isReady reports whether n's status says reason for its current generation.
func hasReason(n *network.Network, status metav1.ConditionStatus, reason string) bool {
	if n == nil {
		return false
	}
	c := meta.FindStatusCondition(n.Status.Conditions, network.ConditionReady)
	return c != nil && c.Status == status && c.Reason == reason &&
		c.ObservedGeneration == n.Generation && n.Status.ObservedGeneration == n.Generation
}

// eventually polls cond every 50ms until it returns "" (met), and fails the test with
// its last answer after d.
func eventually(t *testing.T, d time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		last := cond()
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in %v: %s", what, d, last)
		}
		select {
		case <-tick.C:
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, t.Context().Err())
		}
	}
}

// backendHas returns "" if the backend holds exactly want for the keys of ns,
// whatever owner UID each names.
func backendHas(b *testBackend, ns string, want ...backend.Network) string {
	var got []backend.Network
	for _, n := range b.Networks() {
		if n.Namespace == ns {
			n.Owner = ""
			got = append(got, n)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Sprintf("backend has %+v, want %+v", got, want)
	}
	return ""
}

func bnet(ns, name, cidr, gw string) backend.Network {
	return backend.Network{Namespace: ns, Name: name, Spec: backend.Spec{CIDR: cidr, Gateway: gw}}
}
