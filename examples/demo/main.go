// Command demo starts a local control plane (etcd + kube-apiserver from testenv), runs a
// ctrlkit informer on ConfigMaps in a namespace, creates, updates and deletes a few of them,
// prints every change the informer's handler sees and what its cache holds, and stops
// everything. Ctrl-C stops it cleanly at any point.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/testenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	fmt.Println("starting etcd and kube-apiserver on 127.0.0.1 ...")
	start := time.Now()
	env, err := testenv.Start(ctx, testenv.Config{})
	if err != nil {
		return err
	}
	defer func() {
		env.Stop()
		fmt.Println("control plane stopped, temporary files removed")
	}()
	fmt.Printf("control plane ready at %s in %v\n", env.APIServerURL(), time.Since(start).Round(time.Millisecond))

	client, err := kubernetes.NewForConfig(env.Config())
	if err != nil {
		return err
	}
	const ns = "demo"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	cms := client.CoreV1().ConfigMaps(ns)

	// The informer lists and watches the namespace and tells the handler what changed.
	inf := informer.New(reflector.FromTyped(cms), informer.Config[*corev1.ConfigMap]{})
	events := make(chan string, 64)
	_, err = inf.AddHandler(informer.HandlerFuncs[*corev1.ConfigMap]{
		AddFunc: func(cm *corev1.ConfigMap, inInitialList bool) {
			events <- fmt.Sprintf("informer  add     %s/%s rv=%s data=%v", cm.Namespace, cm.Name, cm.ResourceVersion, cm.Data)
		},
		UpdateFunc: func(_, cm *corev1.ConfigMap) {
			events <- fmt.Sprintf("informer  update  %s/%s rv=%s data=%v", cm.Namespace, cm.Name, cm.ResourceVersion, cm.Data)
		},
		DeleteFunc: func(d informer.Deleted[*corev1.ConfigMap]) {
			events <- fmt.Sprintf("informer  delete  %s", d.Key)
		},
	}, informer.HandlerOptions{})
	if err != nil {
		return err
	}
	runCtx, cancelRun := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- inf.Run(runCtx) }()
	defer func() {
		cancelRun()
		<-runDone
	}()
	if err := inf.WaitForSync(ctx); err != nil {
		return err
	}
	fmt.Println("informer synced; writing objects")

	// The writer creates, updates and deletes objects while the handler prints what it sees.
	const n = 3
	writeErr := make(chan error, 1)
	go func() { writeErr <- write(ctx, cms, n) }()

	want := 3 * n // n adds, n updates, n deletes
	for seen := 0; seen < want; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-writeErr:
			if err != nil {
				return err
			}
			writeErr = nil
		case line := <-events:
			seen++
			fmt.Println(line)
			if seen == 2*n {
				fmt.Printf("cache now holds %d ConfigMaps, applied up to rv %s\n", len(inf.Indexer().List()), inf.LastAppliedResourceVersion())
			}
		}
	}
	fmt.Printf("handler saw all %d changes; cache holds %d ConfigMaps\n", want, len(inf.Indexer().List()))
	return nil
}

func write(ctx context.Context, cms interface {
	Create(context.Context, *corev1.ConfigMap, metav1.CreateOptions) (*corev1.ConfigMap, error)
	Update(context.Context, *corev1.ConfigMap, metav1.UpdateOptions) (*corev1.ConfigMap, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}, n int) error {
	var objs []*corev1.ConfigMap
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"step": "created"}}
		created, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		fmt.Printf("write     create   %s\n", created.Name)
		objs = append(objs, created)
	}
	for _, cm := range objs {
		cm.Data["step"] = "updated"
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return err
		}
		fmt.Printf("write     update   %s\n", cm.Name)
	}
	for _, cm := range objs {
		if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		fmt.Printf("write     delete   %s\n", cm.Name)
	}
	return nil
}
