// Command demo starts a local control plane (etcd + kube-apiserver from testenv), watches
// ConfigMaps in a namespace, creates, updates and deletes a few of them, prints every event
// it sees, and stops everything. Ctrl-C stops it cleanly at any point.
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
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

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
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()

	// The writer creates, updates and deletes objects while the watcher prints what it sees.
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
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("watch closed early")
			}
			if ev.Type == watch.Error {
				return fmt.Errorf("watch error: %v", ev.Object)
			}
			cm := ev.Object.(*corev1.ConfigMap)
			seen++
			fmt.Printf("watch  %-8s %s/%s rv=%s data=%v\n", ev.Type, cm.Namespace, cm.Name, cm.ResourceVersion, cm.Data)
		}
	}
	fmt.Printf("saw all %d events\n", want)
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
		fmt.Printf("write  create   %s\n", created.Name)
		objs = append(objs, created)
	}
	for _, cm := range objs {
		cm.Data["step"] = "updated"
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return err
		}
		fmt.Printf("write  update   %s\n", cm.Name)
	}
	for _, cm := range objs {
		if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		fmt.Printf("write  delete   %s\n", cm.Name)
	}
	return nil
}
