package reflectortest_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// A Server answers lists and watches with resourceVersions, and forgets
// history on Compact as etcd does.
func ExampleServer() {
	ctx := context.Background()
	s := reflectortest.NewServer[*corev1.ConfigMap](reflectortest.Config{})
	for _, name := range []string{"a", "b", "c"} {
		s.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
	}

	page, meta, _ := s.List(ctx, metav1.ListOptions{Limit: 2})
	fmt.Println(len(page), "items at", meta.ResourceVersion, "remaining", *meta.RemainingItemCount)

	w, _ := s.Watch(ctx, metav1.ListOptions{ResourceVersion: "1"})
	for range 2 {
		ev := <-w.ResultChan()
		c := ev.Object.(*corev1.ConfigMap)
		fmt.Println(ev.Type, c.Name, c.ResourceVersion)
	}
	w.Stop()

	s.Delete("default", "a")
	s.Compact()
	_, _, err := s.List(ctx, metav1.ListOptions{Limit: 1, Continue: meta.Continue})
	fmt.Println(apierrors.IsResourceExpired(err))
	// Output:
	// 2 items at 3 remaining 1
	// ADDED b 2
	// ADDED c 3
	// true
}
