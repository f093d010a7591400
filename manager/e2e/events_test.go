//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
)

// TestEventsReachTheServer: a controller's recorder, from the manager, sends
// events.k8s.io events about the objects it reconciles while Run runs, and
// drops what it records before Run.
func TestEventsReachTheServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := env.Namespace(t)
	kube := kubernetes.NewForConfigOrDie(env.Config())
	createConfigMaps(ctx, t, kube, ns, 5, 10, 5)

	m, err := manager.New(manager.Config{RESTConfig: env.Config()})
	if err != nil {
		t.Fatal(err)
	}
	rec := m.EventRecorder("event-test")
	rec.Eventf(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm-0"}}, nil, corev1.EventTypeNormal, "Early", "Test", "before Run")
	cms, err := manager.Typed[*corev1.ConfigMap](m, manager.Options[*corev1.ConfigMap]{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	addConfigMapController(t, m, cms, reconcile.Config[types.NamespacedName]{Name: "event-test"}, reconcile.Func[types.NamespacedName](func(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
		cm, err := cms.Lister().Get(key.Namespace, key.Name)
		if err == nil {
			rec.Eventf(cm, nil, corev1.EventTypeNormal, "Seen", "Reconcile", "reconciled %s", key.Name)
		}
		return reconcile.Result{}, nil
	}))
	stop := runManager(ctx, t, m)

	want := map[string]bool{"cm-0": true, "cm-1": true, "cm-2": true, "cm-3": true, "cm-4": true}
	waitFor(t, time.Minute, "an event about every ConfigMap", func() bool {
		list, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, e := range list.Items {
			if e.Reason == "Early" {
				t.Fatalf("an event recorded before Run reached the server: %+v", e)
			}
			if e.Reason == "Seen" && e.ReportingController == "event-test" && e.Regarding.Kind == "ConfigMap" && want[e.Regarding.Name] {
				got++
			}
		}
		return got == len(want)
	})
	stop()
}
