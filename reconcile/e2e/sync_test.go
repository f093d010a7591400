//go:build e2e

package e2e

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// TestSyncErrorNamesSource runs a controller as a user without any RBAC rights:
// its informer cannot list, and Run must fail with an error naming that source
// instead of stalling, without reconciling anything.
func TestSyncErrorNamesSource(t *testing.T) {
	cfg, err := env.UserConfig("norights")
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var accessErr sync.Once
	denied := make(chan struct{})
	inf := informer.New(reflector.FromTyped(c.CoreV1().ConfigMaps("default")), informer.Config[*corev1.ConfigMap]{
		Name: "configmaps",
		OnError: func(err error) {
			var ae *reflector.AccessError
			if errors.As(err, &ae) {
				accessErr.Do(func() { close(denied) })
			}
		},
	})
	var called atomic.Bool
	ctl := reconcile.New(reconcile.Func[key](func(context.Context, key) (reconcile.Result, error) {
		called.Store(true)
		return reconcile.Result{}, nil
	}), reconcile.Config[key]{Name: "unprivileged", SyncTimeout: 3 * time.Second})
	if err := ctl.Watch(reconcile.FromInformer(inf, reconcile.ByObject[*corev1.ConfigMap]())); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = inf.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	start := time.Now()
	err = ctl.Run(ctx)
	var se *reconcile.SyncError
	if !errors.As(err, &se) {
		t.Fatalf("Run = %v, want a *reconcile.SyncError", err)
	}
	if !strings.Contains(se.Source, "configmaps") || !strings.Contains(err.Error(), "configmaps") {
		t.Errorf("error %q does not name the informer", err)
	}
	if took := time.Since(start); took < 3*time.Second || took > 10*time.Second {
		t.Errorf("Run gave up after %v, want the 3s sync timeout", took)
	}
	select {
	case <-denied:
	default:
		t.Error("the informer reported no *reflector.AccessError: the test did not exercise missing RBAC")
	}
	if called.Load() {
		t.Error("reconciled without synced sources")
	}
}
