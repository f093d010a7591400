//go:build e2e

package e2e

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
)

// TestLeaseLostWhileReconcileHangs takes the Lease away from a leading manager
// one of whose reconciles ignores its context: Run must still return, within
// the renew deadline and the controller's shutdown timeout, with
// reconcile.ErrLeadershipLost and the key the controller abandoned.
func TestLeaseLostWhileReconcileHangs(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	kube := kubernetes.NewForConfigOrDie(env.Config())
	createConfigMaps(ctx, t, kube, ns, 3, 10, 1)
	const lease = "hung-lock"
	m, err := manager.New(manager.Config{
		RESTConfig: env.Config(),
		LeaderElection: &reconcile.LeaderElection{
			Lock:          reconcile.NewLeaseLock(kube, ns, lease, "a"),
			LeaseDuration: leaseDuration,
			RenewDeadline: renewDeadline,
			RetryPeriod:   retryPeriod,
		},
		ShutdownTimeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	cms, err := manager.Typed[*corev1.ConfigMap](m, manager.Options[*corev1.ConfigMap]{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) }) // ends the abandoned reconcile
	entered := make(chan types.NamespacedName, 1)
	var first atomic.Bool
	const shutdownTimeout = 2 * time.Second
	addConfigMapController(t, m, cms, reconcile.Config[types.NamespacedName]{
		Name: "hangs", Workers: 2, DrainTimeout: time.Hour, ShutdownTimeout: shutdownTimeout,
	}, func(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
		if first.CompareAndSwap(false, true) { // the first reconcile ignores its context
			entered <- key
			<-hang
		}
		return reconcile.Result{}, nil
	})
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var stuck types.NamespacedName
	select {
	case stuck = <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no reconcile started")
	}

	// An intruder takes the Lease over, as a replica that saw it expire would.
	leases := kube.CoordinationV1().Leases(ns)
	for i := 0; ; i++ {
		l, err := leases.Get(ctx, lease, metav1.GetOptions{})
		if err == nil {
			l.Spec.HolderIdentity = ptr.To("intruder")
			l.Spec.LeaseDurationSeconds = ptr.To(int32(600))
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if err == nil {
			break
		}
		if i == 10 {
			t.Fatal(err)
		}
	}
	stolen := time.Now()
	select {
	case err := <-done:
		if !errors.Is(err, reconcile.ErrLeadershipLost) || !errors.Is(err, reconcile.ErrShutdownTimeout) {
			t.Fatalf("Run = %v, want ErrLeadershipLost and ErrShutdownTimeout", err)
		}
		var se *reconcile.ShutdownError
		if !errors.As(err, &se) || len(se.Keys) != 1 || se.Keys[0] != stuck.String() {
			t.Errorf("Run = %v, want the controller's *reconcile.ShutdownError naming %v", err, stuck)
		}
		t.Logf("Run returned %v after the Lease was taken: %v", time.Since(stolen), err)
	case <-time.After(renewDeadline + shutdownTimeout + 5*time.Second):
		t.Fatal("manager still running after losing its Lease, with a reconcile that ignores its context")
	}
}
