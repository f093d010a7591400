package informer_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

func cmv(name, v string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Data:       map[string]string{"v": v},
	}
}

// describing returns a handler that describes each call on calls.
func describing(calls chan<- string) informer.HandlerFuncs[*corev1.ConfigMap] {
	return informer.HandlerFuncs[*corev1.ConfigMap]{
		AddFunc: func(c *corev1.ConfigMap, inInitialList bool) {
			calls <- fmt.Sprintf("add %s v=%s initial=%v", c.Name, c.Data["v"], inInitialList)
		},
		UpdateFunc: func(old, c *corev1.ConfigMap) {
			calls <- fmt.Sprintf("update %s v=%s→%s", c.Name, old.Data["v"], c.Data["v"])
		},
		DeleteFunc: func(d informer.Deleted[*corev1.ConfigMap]) {
			calls <- fmt.Sprintf("delete %s finalStateUnknown=%v", d.Key, d.FinalStateUnknown)
		},
	}
}

// An informer over an in-memory server: a handler gets the initial list, then
// every change; a caller waits until its own write is in the cache.
func Example() {
	srv := reflectortest.NewServer[*corev1.ConfigMap](reflectortest.Config{WatchList: true})
	srv.Create(cmv("a", "1"))
	srv.Create(cmv("b", "1"))

	inf := informer.New(srv, informer.Config[*corev1.ConfigMap]{
		Transform: reflector.StripManagedFields[*corev1.ConfigMap],
	})
	calls := make(chan string, 10)
	reg, _ := inf.AddHandler(describing(calls), informer.HandlerOptions{})

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- inf.Run(ctx) }()
	fmt.Println(<-calls)
	fmt.Println(<-calls)

	updated, _ := srv.Update(cmv("a", "2"))
	inf.WaitForResourceVersion(ctx, updated.ResourceVersion)
	a, _ := inf.Lister().Get("default", "a")
	fmt.Println("the cache has a at", a.ResourceVersion, "with v =", a.Data["v"])
	fmt.Println(<-calls)

	srv.Delete("default", "b")
	fmt.Println(<-calls)

	cancel()
	fmt.Println("Run returned", <-stopped)
	fmt.Println("delivered", reg.Stats().Delivered)
	// Output:
	// add a v=1 initial=true
	// add b v=1 initial=true
	// the cache has a at 3 with v = 2
	// update a v=1→2
	// delete default/b finalStateUnknown=false
	// Run returned <nil>
	// delivered 4
}

// A handler added to a running informer first gets the whole cache, with
// inInitialList set, then the changes that follow.
func ExampleInformer_AddHandler() {
	srv := reflectortest.NewServer[*corev1.ConfigMap](reflectortest.Config{})
	srv.Create(cmv("a", "1"))
	inf := informer.New(srv, informer.Config[*corev1.ConfigMap]{})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- inf.Run(ctx) }()
	inf.WaitForSync(ctx)

	calls := make(chan string, 10)
	reg, _ := inf.AddHandler(describing(calls), informer.HandlerOptions{})
	reg.WaitForSync(ctx)
	fmt.Println(<-calls)
	srv.Create(cmv("b", "1"))
	fmt.Println(<-calls)
	inf.RemoveHandler(reg)
	cancel()
	<-stopped
	// Output:
	// add a v=1 initial=true
	// add b v=1 initial=false
}

// A handler that falls behind more than its BufferLimit gets the latest state of
// each key instead of every change, and the other handlers are not held up. The
// deletion of an object it knew is never lost.
func ExampleRegistration_Stats() {
	srv := reflectortest.NewServer[*corev1.ConfigMap](reflectortest.Config{})
	srv.Create(cmv("a", "0"))
	srv.Create(cmv("b", "0"))
	inf := informer.New(srv, informer.Config[*corev1.ConfigMap]{})

	calls := make(chan string, 10)
	slow := describing(calls)
	entered, release := make(chan struct{}), make(chan struct{})
	add := slow.AddFunc
	slow.AddFunc = func(c *corev1.ConfigMap, inInitialList bool) {
		if c.Name == "a" {
			close(entered)
			<-release // stuck until released
		}
		add(c, inInitialList)
	}
	reg, _ := inf.AddHandler(slow, informer.HandlerOptions{BufferLimit: 2})
	otherCalls := make(chan string, 100)
	other, _ := inf.AddHandler(describing(otherCalls), informer.HandlerOptions{})

	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- inf.Run(ctx) }()
	<-entered
	for i := range 10 {
		srv.Update(cmv("a", fmt.Sprint(i+1)))
	}
	srv.Delete("default", "b")
	for range 2 + 10 + 1 {
		<-otherCalls // the other handler gets every change meanwhile
	}
	fmt.Println("other handler delivered", other.Stats().Delivered >= 12)
	s := reg.Stats()
	fmt.Println("slow handler coalescing", s.Coalescing, "backlog", s.Backlog)

	close(release)
	for range 4 {
		fmt.Println(<-calls)
	}
	cancel()
	<-stopped
	s = reg.Stats()
	fmt.Println("delivered", s.Delivered, "coalesced", s.Coalesced)
	// Output:
	// other handler delivered true
	// slow handler coalescing true backlog 2
	// add a v=0 initial=true
	// add b v=0 initial=true
	// update a v=0→10
	// delete default/b finalStateUnknown=false
	// delivered 4 coalesced 9
}
