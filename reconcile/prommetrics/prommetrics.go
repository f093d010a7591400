// Package prommetrics exports a reconcile.Controller's metrics to Prometheus under
// the names and labels of controller-runtime, so dashboards and alerts written for
// controller-runtime controllers keep working:
//
//	controller_runtime_reconcile_total{controller,result}          counter    reconciles by result: success, error, requeue, requeue_after
//	controller_runtime_reconcile_errors_total{controller}          counter    reconciles that returned an error (or panicked)
//	controller_runtime_terminal_reconcile_errors_total{controller} counter    reconciles that returned a terminal error
//	controller_runtime_reconcile_panics_total{controller}          counter    reconciles that panicked
//	controller_runtime_reconcile_time_seconds{controller}          histogram  time per reconcile
//	controller_runtime_max_concurrent_reconciles{controller}       gauge      configured workers
//	controller_runtime_active_workers{controller}                  gauge      workers reconciling now
//	ctrlkit_source_panics_total{controller}                        counter    panics of a source's Mapper or Predicate
//
// plus the controller's work queue metrics (workqueue_*{name=<controller>}) from
// workqueue/prommetrics. The "requeue" result exists for compatibility and stays 0:
// a reconcile.Result has no bare requeue.
//
// Nothing is registered globally: New registers on the Registerer it is given.
package prommetrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/workqueue"
	wqprom "github.com/ctrlkit/ctrlkit/workqueue/prommetrics"
)

// Buckets are the reconcile_time_seconds buckets, controller-runtime's: fine below
// one second, coarser up to a minute.
var Buckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45,
	0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9,
	10, 15, 20, 25, 30, 40, 50, 60}

// Metrics implements reconcile.Metrics for one controller, and holds its queue's
// metrics. Put it in reconcile.Config.Metrics and Queue() in Config.QueueMetrics.
// It is safe for concurrent use. Create it with New.
type Metrics struct {
	total                             *prometheus.CounterVec
	errs, terminal, panics            prometheus.Counter
	sourcePanics                      prometheus.Counter
	took                              prometheus.Histogram
	maxWorkers, active                prometheus.Gauge
	success, requeueAfter, errResults prometheus.Counter
	queue                             *wqprom.Metrics
}

var _ reconcile.Metrics = (*Metrics)(nil)

// New creates the metrics of the controller called controller (its Config.Name)
// and of its queue, and registers them on reg. It fails if controller is empty or
// reg is nil, or if reg refuses a metric (for example because a controller of the
// same name is registered); then nothing stays registered.
func New(reg prometheus.Registerer, controller string) (*Metrics, error) {
	if controller == "" {
		return nil, errors.New("prommetrics: empty controller name")
	}
	if reg == nil {
		return nil, errors.New("prommetrics: nil Registerer")
	}
	labels := prometheus.Labels{"controller": controller}
	m := &Metrics{}
	m.total = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "controller_runtime", Name: "reconcile_total", ConstLabels: labels,
		Help: "Total number of reconciliations per controller, by result.",
	}, []string{"result"})
	m.errs = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "controller_runtime", Name: "reconcile_errors_total", ConstLabels: labels,
		Help: "Total number of reconciliation errors per controller.",
	})
	m.terminal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "controller_runtime", Name: "terminal_reconcile_errors_total", ConstLabels: labels,
		Help: "Total number of terminal reconciliation errors per controller.",
	})
	m.panics = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "controller_runtime", Name: "reconcile_panics_total", ConstLabels: labels,
		Help: "Total number of reconciliation panics per controller.",
	})
	m.sourcePanics = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "ctrlkit", Name: "source_panics_total", ConstLabels: labels,
		Help: "Total number of panics of a source's mapper or predicate per controller.",
	})
	m.took = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "controller_runtime", Name: "reconcile_time_seconds", ConstLabels: labels,
		Buckets: Buckets,
		Help:    "Length of time per reconciliation per controller.",
	})
	m.maxWorkers = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "controller_runtime", Name: "max_concurrent_reconciles", ConstLabels: labels,
		Help: "Maximum number of concurrent reconciles per controller.",
	})
	m.active = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "controller_runtime", Name: "active_workers", ConstLabels: labels,
		Help: "Number of currently used workers per controller.",
	})
	// Every result series exists from the start, at 0, as controller-runtime does.
	m.success = m.total.WithLabelValues("success")
	m.requeueAfter = m.total.WithLabelValues("requeue_after")
	m.errResults = m.total.WithLabelValues("error")
	m.total.WithLabelValues("requeue")

	all := []prometheus.Collector{m.total, m.errs, m.terminal, m.panics, m.sourcePanics, m.took, m.maxWorkers, m.active}
	for i, c := range all {
		if err := reg.Register(c); err != nil {
			for _, done := range all[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("prommetrics: register metrics of controller %q: %w", controller, err)
		}
	}
	q, err := wqprom.New(reg, controller)
	if err != nil {
		for _, done := range all {
			reg.Unregister(done)
		}
		return nil, fmt.Errorf("prommetrics: controller %q: %w", controller, err)
	}
	m.queue = q
	return m, nil
}

// Queue returns the metrics of the controller's work queue, for
// reconcile.Config.QueueMetrics.
func (m *Metrics) Queue() workqueue.Metrics { return m.queue }

// Workers implements reconcile.Metrics.
func (m *Metrics) Workers(n int) { m.maxWorkers.Set(float64(n)) }

// ReconcileStarted implements reconcile.Metrics.
func (m *Metrics) ReconcileStarted() { m.active.Inc() }

// Panicked implements reconcile.Metrics.
func (m *Metrics) Panicked() { m.panics.Inc() }

// SourcePanicked implements reconcile.Metrics.
func (m *Metrics) SourcePanicked() { m.sourcePanics.Inc() }

// ReconcileFinished implements reconcile.Metrics.
func (m *Metrics) ReconcileFinished(o reconcile.Outcome, took time.Duration) {
	m.active.Dec()
	m.took.Observe(took.Seconds())
	switch o {
	case reconcile.Succeeded:
		m.success.Inc()
	case reconcile.RequeuedAfter:
		m.requeueAfter.Inc()
	case reconcile.FailedTerminal:
		m.errResults.Inc()
		m.errs.Inc()
		m.terminal.Inc()
	default:
		m.errResults.Inc()
		m.errs.Inc()
	}
}
