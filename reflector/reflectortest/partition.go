package reflectortest

import (
	"context"
	"fmt"
	"sync"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// listerWatcher is the method set of reflector.ListerWatcher[T], restated so that this
// package does not import reflector (whose own tests import this package).
type listerWatcher[T any] interface {
	List(ctx context.Context, opts metav1.ListOptions) ([]T, metav1.ListMeta, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// ErrPartitioned is returned by a cut Partition's List and Watch. It wraps
// syscall.ECONNREFUSED, as a refused connection would.
var ErrPartitioned = fmt.Errorf("reflectortest: partitioned: %w", syscall.ECONNREFUSED)

// Partition wraps a ListerWatcher (an in-memory Server's or a real client's) so that a test
// can cut its reader off the server, as a network partition does, while the server keeps
// running and accepting writes from others. It satisfies reflector.ListerWatcher[T].
//
// A Partition is goroutine-safe; its zero value is not usable (use NewPartition).
type Partition[T any] struct {
	lw listerWatcher[T]

	mu      sync.Mutex
	cut     bool              // while true, List and Watch fail with ErrPartitioned
	watches []watch.Interface // watches opened since the last Cut
}

// NewPartition returns a connected Partition in front of lw.
func NewPartition[T any](lw interface {
	List(ctx context.Context, opts metav1.ListOptions) ([]T, metav1.ListMeta, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}) *Partition[T] {
	return &Partition[T]{lw: lw}
}

// List lists through the wrapped ListerWatcher, or fails with ErrPartitioned while cut.
func (p *Partition[T]) List(ctx context.Context, opts metav1.ListOptions) ([]T, metav1.ListMeta, error) {
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut {
		return nil, metav1.ListMeta{}, ErrPartitioned
	}
	return p.lw.List(ctx, opts)
}

// Watch watches through the wrapped ListerWatcher, or fails with ErrPartitioned while cut.
func (p *Partition[T]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return nil, ErrPartitioned
	}
	w, err := p.lw.Watch(ctx, opts)
	if err == nil {
		p.watches = append(p.watches, w)
	}
	return w, err
}

// Cut ends every open watch and makes List and Watch fail until Heal.
func (p *Partition[T]) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, w := range p.watches {
		w.Stop()
	}
	p.watches = nil
}

// Heal lets requests through again.
func (p *Partition[T]) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}
