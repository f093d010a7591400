package manager_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// A whole controller process: the cluster from the usual kubeconfig places,
// a shared Pod informer, a controller that records an event about every Pod it
// sees, and probes on :8081. Run starts the informer, waits for its sync,
// starts the controller, and stops both in reverse order on SIGINT.
func Example() {
	cfg, err := manager.LoadRESTConfig("") // $KUBECONFIG, ~/.kube/config or in-cluster
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	m, err := manager.New(manager.Config{
		RESTConfig: cfg,
		HTTP:       manager.HTTPConfig{HealthAddress: ":8081"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	pods, err := manager.Typed[*corev1.Pod](m, manager.Options[*corev1.Pod]{
		Transform: reflector.StripManagedFields[*corev1.Pod],
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	events := m.EventRecorder("pod-watcher")
	c := reconcile.New(reconcile.Func[types.NamespacedName](func(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
		pod, err := pods.Lister().Get(key.Namespace, key.Name)
		if err != nil {
			return reconcile.Result{}, nil // deleted: nothing to clean up
		}
		events.Eventf(pod, nil, corev1.EventTypeNormal, "Seen", "Watch", "phase %s", pod.Status.Phase)
		return reconcile.Result{}, nil
	}), reconcile.Config[types.NamespacedName]{Name: "pod-watcher"})
	if err := c.Watch(reconcile.FromInformer(pods, reconcile.ByObject[*corev1.Pod]())); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	if err := m.Add(c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := m.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, err)
	}
}
