package reflector_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// printStore prints what it receives and signals each call on done.
type printStore struct {
	done  chan struct{}
	noRVs bool // do not print the list's resourceVersion
}

func (p printStore) Add(c *corev1.ConfigMap) error    { return p.print("add", c) }
func (p printStore) Update(c *corev1.ConfigMap) error { return p.print("update", c) }
func (p printStore) Delete(c *corev1.ConfigMap) error { return p.print("delete", c) }

func (p printStore) print(op string, c *corev1.ConfigMap) error {
	fmt.Printf("%s %s/%s at %s, managedFields %d\n", op, c.Namespace, c.Name, c.ResourceVersion, len(c.ManagedFields))
	p.done <- struct{}{}
	return nil
}

func (p printStore) Replace(cms []*corev1.ConfigMap, rv string) error {
	var names []string
	for _, c := range cms {
		names = append(names, c.Namespace+"/"+c.Name)
	}
	if p.noRVs {
		fmt.Printf("replace [%s]\n", strings.Join(names, " "))
	} else {
		fmt.Printf("replace [%s] at %s\n", strings.Join(names, " "), rv)
	}
	p.done <- struct{}{}
	return nil
}

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace:     "default",
		Name:          name,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}}
}

// A reflector over an in-memory server: one streamed list, then watch events,
// with managedFields stripped before anything is stored.
func Example() {
	srv := reflectortest.NewServer[*corev1.ConfigMap](reflectortest.Config{WatchList: true})
	srv.Create(configMap("a"))
	srv.Create(configMap("b"))

	store := printStore{done: make(chan struct{})}
	r := reflector.New(srv, store, reflector.Config[*corev1.ConfigMap]{
		Transform: reflector.StripManagedFields[*corev1.ConfigMap],
	})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- r.Run(ctx) }()

	<-store.done // the list
	srv.Update(configMap("a"))
	<-store.done
	srv.Delete("default", "b")
	<-store.done

	cancel()
	fmt.Println("Run returned", <-stopped)
	h := r.Health()
	fmt.Println(h.State, h.Synced, h.LastResourceVersion, h.Stats.StreamingLists, h.Stats.Events)
	// Output:
	// replace [default/a default/b] at 2
	// update default/a at 3, managedFields 0
	// delete default/b at 4, managedFields 0
	// Run returned <nil>
	// Stopped true 4 1 2
}

// FromTyped adapts any client-go typed client; the object type is inferred.
// client-go's fake clientset cannot stream lists, hence WatchListOff.
func ExampleFromTyped() {
	client := fake.NewClientset(configMap("a"), configMap("b"))
	store := printStore{done: make(chan struct{}, 10), noRVs: true}
	r := reflector.New(reflector.FromTyped(client.CoreV1().ConfigMaps("default")), store,
		reflector.Config[*corev1.ConfigMap]{WatchList: reflector.WatchListOff})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- r.Run(ctx) }()
	<-store.done // the list
	cancel()
	<-stopped
	// Output:
	// replace [default/a default/b]
}

// A reflector denied access reports a typed error at once, and keeps
// retrying until RBAC allows it.
func ExampleAccessError() {
	srv := reflectortest.NewServer[*corev1.ConfigMap](reflectortest.Config{})
	srv.Forbid(reflectortest.List, true)

	errs := make(chan error, 1)
	r := reflector.New(srv, printStore{done: make(chan struct{}, 10)}, reflector.Config[*corev1.ConfigMap]{
		Name:      "configmaps",
		WatchList: reflector.WatchListOff,
		OnError: func(err error) {
			select {
			case errs <- err:
			default:
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- r.Run(ctx) }()

	err := <-errs
	var access *reflector.AccessError
	fmt.Println(errors.Is(err, reflector.ErrForbidden), errors.As(err, &access), access.Verb)
	fmt.Println(err)
	fmt.Println(r.Health().State)
	cancel()
	<-stopped
	// Output:
	// true true list
	// reflector: configmaps: list refused (Forbidden): objects is forbidden: reflectortest: list is forbidden
	// BackingOff
}
