package reflectortest_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

func TestPartition(t *testing.T) {
	ctx := context.Background()
	s := reflectortest.NewServer[*corev1.ConfigMap](reflectortest.Config{})
	if _, err := s.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	p := reflectortest.NewPartition(s)

	items, _, err := p.List(ctx, metav1.ListOptions{})
	if err != nil || len(items) != 1 {
		t.Fatalf("connected List = %d items, %v; want 1 item", len(items), err)
	}
	w, err := p.Watch(ctx, metav1.ListOptions{ResourceVersion: s.ResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}

	p.Cut()
	// The open watch ends, as a broken connection would end it.
	select {
	case _, ok := <-w.ResultChan():
		if ok {
			t.Fatal("watch delivered an event after Cut")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch still open after Cut")
	}
	if _, _, err := p.List(ctx, metav1.ListOptions{}); !errors.Is(err, reflectortest.ErrPartitioned) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("List while cut = %v, want ErrPartitioned wrapping ECONNREFUSED", err)
	}
	if _, err := p.Watch(ctx, metav1.ListOptions{}); !errors.Is(err, reflectortest.ErrPartitioned) {
		t.Fatalf("Watch while cut = %v, want ErrPartitioned", err)
	}
	// The server keeps accepting writes meanwhile.
	if _, err := s.Delete("ns", "a"); err != nil {
		t.Fatal(err)
	}

	p.Heal()
	items, _, err = p.List(ctx, metav1.ListOptions{})
	if err != nil || len(items) != 0 {
		t.Fatalf("List after Heal = %d items, %v; want the deletion seen", len(items), err)
	}
	w, err = p.Watch(ctx, metav1.ListOptions{ResourceVersion: s.ResourceVersion()})
	if err != nil {
		t.Fatalf("Watch after Heal: %v", err)
	}
	w.Stop()
}
