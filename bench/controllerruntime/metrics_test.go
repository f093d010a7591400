package controllerruntime

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// promMetrics gives ctrlkit the Prometheus updates controller-runtime makes on
// every reconcile and queue event (its reconcile total, reconcile time, active
// workers, and the queue's depth, adds, latency, work duration and retries), on
// a private registry, so that the ctrlkit-prometheus variant does the same
// metrics work as controller-runtime. Label values are resolved once here;
// controller-runtime looks them up on each event.
type promMetrics struct {
	total                      [4]prometheus.Counter // by reconcile.Outcome
	reconcileTime              prometheus.Observer
	activeWorkers, workerCount prometheus.Gauge
	panics                     prometheus.Counter
	depth                      prometheus.Gauge
	adds, retries              prometheus.Counter
	latency, workDuration      prometheus.Observer
}

var (
	_ reconcile.Metrics = (*promMetrics)(nil)
	_ workqueue.Metrics = (*promMetrics)(nil)
)

func newPromMetrics(name string) *promMetrics {
	reg := prometheus.NewRegistry()
	total := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "controller_runtime_reconcile_total"}, []string{"controller", "result"})
	reconcileTime := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "controller_runtime_reconcile_time_seconds",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
			1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60}}, []string{"controller"})
	active := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "controller_runtime_active_workers"}, []string{"controller"})
	workers := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "controller_runtime_max_concurrent_reconciles"}, []string{"controller"})
	panics := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "controller_runtime_reconcile_panics_total"}, []string{"controller"})
	depth := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_depth"}, []string{"name"})
	adds := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total"}, []string{"name"})
	retries := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_retries_total"}, []string{"name"})
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 12)
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_queue_duration_seconds", Buckets: buckets}, []string{"name"})
	work := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds", Buckets: buckets}, []string{"name"})
	reg.MustRegister(total, reconcileTime, active, workers, panics, depth, adds, retries, latency, work)
	m := &promMetrics{
		reconcileTime: reconcileTime.WithLabelValues(name),
		activeWorkers: active.WithLabelValues(name),
		workerCount:   workers.WithLabelValues(name),
		panics:        panics.WithLabelValues(name),
		depth:         depth.WithLabelValues(name),
		adds:          adds.WithLabelValues(name),
		retries:       retries.WithLabelValues(name),
		latency:       latency.WithLabelValues(name),
		workDuration:  work.WithLabelValues(name),
	}
	for o := range m.total {
		m.total[o] = total.WithLabelValues(name, reconcile.Outcome(o).String())
	}
	return m
}

func (m *promMetrics) Workers(n int)     { m.workerCount.Set(float64(n)) }
func (m *promMetrics) ReconcileStarted() { m.activeWorkers.Inc() }
func (m *promMetrics) ReconcileFinished(o reconcile.Outcome, took time.Duration) {
	m.activeWorkers.Dec()
	m.total[o].Inc()
	m.reconcileTime.Observe(took.Seconds())
}
func (m *promMetrics) Panicked()       { m.panics.Inc() }
func (m *promMetrics) SourcePanicked() {}

func (m *promMetrics) Added() { m.adds.Inc(); m.depth.Inc() }
func (m *promMetrics) Started(waited time.Duration) {
	m.depth.Dec()
	m.latency.Observe(waited.Seconds())
}
func (m *promMetrics) Finished(worked time.Duration)    { m.workDuration.Observe(worked.Seconds()) }
func (m *promMetrics) Retried()                         { m.retries.Inc() }
func (m *promMetrics) Attach(func() workqueue.InFlight) {}
