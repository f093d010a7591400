package main

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// stats counts one controller's reconciles and queue depth through the reconcile.Metrics and
// workqueue.Metrics hooks, and the cache lag the workload generator measures. With a
// parent, the stats of one replica's controller, its reconciles and queue depth count
// in the parent too, the totals of every replica's.
type stats struct {
	name   string
	parent *stats // nil or the totals

	reconciles atomic.Int64
	failed     atomic.Int64
	depth      atomic.Int64
	maxDepth   atomic.Int64

	mu   sync.Mutex
	lags []time.Duration // since the last recentLag
	all  []time.Duration // whole run
}

var (
	_ reconcile.Metrics = (*stats)(nil)
	_ workqueue.Metrics = (*stats)(nil)
)

func (s *stats) Workers(int)       {}
func (s *stats) ReconcileStarted() {}
func (s *stats) Panicked()         {}
func (s *stats) SourcePanicked()   {}
func (s *stats) ReconcileFinished(o reconcile.Outcome, _ time.Duration) {
	s.reconciles.Add(1)
	if o != reconcile.Succeeded {
		s.failed.Add(1)
	}
	if s.parent != nil {
		s.parent.ReconcileFinished(o, 0)
	}
}

func (s *stats) Added() {
	if s.parent != nil {
		s.parent.Added()
	}
	d := s.depth.Add(1)
	for {
		m := s.maxDepth.Load()
		if d <= m || s.maxDepth.CompareAndSwap(m, d) {
			return
		}
	}
}
func (s *stats) Started(time.Duration) {
	s.depth.Add(-1)
	if s.parent != nil {
		s.parent.Started(0)
	}
}
func (s *stats) Finished(time.Duration)           {}
func (s *stats) Retried()                         {}
func (s *stats) Attach(func() workqueue.InFlight) {}

// lag records how long a write took to reach the controller's cache.
func (s *stats) lag(d time.Duration) {
	s.mu.Lock()
	s.lags = append(s.lags, d)
	s.all = append(s.all, d)
	s.mu.Unlock()
}

// recentLag returns the lags recorded since the previous call.
func (s *stats) recentLag() []time.Duration {
	s.mu.Lock()
	l := s.lags
	s.lags = nil
	s.mu.Unlock()
	return l
}

// totalLag returns a copy of every lag recorded in the run.
func (s *stats) totalLag() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.all)
}

// quantile returns the q-quantile (0..1) of d, or 0 for none; it sorts d.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[int(q*float64(len(d)-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
