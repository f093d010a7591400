package reconcile_test

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// ExampleFromInformer drives a controller from an informer: the reconciler reads
// the informer's cache, and a deleted object's key still reaches it.
func ExampleFromInformer() {
	server := reflectortest.NewServer[*corev1.ConfigMap](reflectortest.Config{}) // stands for kube-apiserver
	server.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}})
	inf := informer.New(server, informer.Config[*corev1.ConfigMap]{})

	seen := make(chan string)
	c := reconcile.New(reconcile.Func[types.NamespacedName](func(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
		msg := fmt.Sprintf("%s: present", key)
		if _, err := inf.Lister().Get(key.Namespace, key.Name); err != nil {
			msg = fmt.Sprintf("%s: gone, cleaning up", key)
		}
		select {
		case seen <- msg:
		case <-ctx.Done():
		}
		return reconcile.Result{}, nil
	}), reconcile.Config[types.NamespacedName]{Name: "configmaps"})
	c.Watch(reconcile.FromInformer(inf, reconcile.ByObject[*corev1.ConfigMap]()))

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { inf.Run(ctx) })
	wg.Go(func() { c.Run(ctx) })
	fmt.Println(<-seen) // from the initial list
	server.Delete("default", "a")
	fmt.Println(<-seen) // from the deletion
	cancel()
	wg.Wait()
	// Output:
	// default/a: present
	// default/a: gone, cleaning up
}
