//go:build e2e

// Package e2e runs the Foo controller in a manager against the real etcd and
// kube-apiserver that testenv starts, as a user holding exactly the rights of
// ../rbac.yaml: Deployments created, scaled and recreated for Foos, status
// following the Deployment, no takeover of a Deployment the Foo does not own,
// and the events on the server. There is no kube-controller-manager: the tests
// write Deployments' status themselves, and nothing garbage-collects.
package e2e

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/examples/foo-controller/foo"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/internal/rbacfile"
	"github.com/ctrlkit/ctrlkit/internal/testrun"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunTests(m, testenv.Config{Users: []testenv.User{{Name: "controller"}}}, &env, leakcheck.Check))
}

// converge bounds every wait for the controller to reach a state.
const converge = 30 * time.Second

// leaseNamespace is where rbac.yaml lets the controller hold its Lease.
const leaseNamespace = "ctrlkit-examples"

var (
	setupOnce sync.Once
	setupErr  error
)

// setup installs the CRD (as admin), creates the Lease's namespace and grants
// the controller user the rules of rbac.yaml, once per package.
func setup(t *testing.T) {
	t.Helper()
	setupOnce.Do(func() {
		ctx := context.Background()
		if setupErr = foo.Install(ctx, env.Config()); setupErr != nil {
			return
		}
		kube := adminKube(t)
		_, setupErr = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNamespace}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(setupErr) {
			setupErr = nil
		}
		if setupErr != nil {
			return
		}
		setupErr = rbacfile.Apply(ctx, kube, "../rbac.yaml", "controller")
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
}

func adminKube(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// start runs a manager with the Foo controller for namespace ns, as the
// least-privilege user and under a process-wide leader election (as
// -leader-elect does), until the end of the test; Run must return nil.
func start(t *testing.T, ns string) {
	t.Helper()
	setup(t)
	cfg, err := env.UserConfig("controller")
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.Config{
		RESTConfig: cfg,
		LeaderElection: &reconcile.LeaderElection{
			Lock:            reconcile.NewLeaseLock(kube, leaseNamespace, "foo-"+ns, "e2e"),
			ReleaseOnCancel: true,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := foo.Add(m, foo.Config{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	testrun.Run(t, m.Run)
}

// waitFor polls cond every 20ms until it holds, failing the test after converge.
// cond returns what it saw, for the failure message.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(converge)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last seen: %s", converge, what, saw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
