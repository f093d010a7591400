// Package prommetrics exports a workqueue's metrics to Prometheus under the names and
// labels of client-go's workqueue metrics (k8s.io/component-base/metrics/prometheus/
// workqueue), so dashboards and alerts written for client-go controllers keep working:
//
//	workqueue_depth                              gauge      items waiting to be handed out
//	workqueue_adds_total                         counter    items that became pending
//	workqueue_queue_duration_seconds             histogram  time from add to Get
//	workqueue_work_duration_seconds              histogram  time from Get to Done
//	workqueue_unfinished_work_seconds            gauge      summed age of items in flight
//	workqueue_longest_running_processor_seconds  gauge      age of the oldest item in flight
//	workqueue_retries_total                      counter    delayed and rate-limited adds
//
// Every series has the label name="<queue name>". Histograms use client-go's buckets,
// 10ns to 10s by powers of ten. The depth and the two in-flight gauges are computed when
// scraped, from the queues' own counts: no goroutine updates them, and an add or a Get
// pays no update of a gauge that the other side also writes.
//
// Nothing is registered globally: New registers on the Registerer it is given.
package prommetrics

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/workqueue"
)

// Buckets are the histogram buckets, in seconds: client-go's, 1e-8 to 10 by powers of ten.
var Buckets = prometheus.ExponentialBuckets(10e-9, 10, 10)

// Metrics implements workqueue.Metrics for one queue name. Put it in
// workqueue.Config.Metrics. It is safe for concurrent use. Create it with New.
//
// One Metrics may serve several queues; its series then add them up (the in-flight gauges
// sum the unfinished work and take the longest processor over all of them).
//
// Metrics is also the prometheus.Collector of the seven series, which New registers. A
// scrape first asks every queue for its work in flight; a queue then also applies the adds
// still in its Add buffer and reports them (see workqueue.Queue), so the scrape counts
// every add made before it.
type Metrics struct {
	addsC, retriesC               prometheus.Counter
	latency, work                 prometheus.Histogram
	depthD, unfinishedD, longestD *prometheus.Desc

	mu     sync.Mutex
	probes []func() workqueue.InFlight
}

var (
	_ workqueue.Metrics    = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)

// New creates the seven workqueue metrics for the queue called name and registers them on
// reg. It fails if name is empty or if reg refuses a metric (for example because a queue
// of the same name is already registered); then nothing stays registered.
func New(reg prometheus.Registerer, name string) (*Metrics, error) {
	if name == "" {
		return nil, errors.New("prommetrics: empty queue name")
	}
	if reg == nil {
		return nil, errors.New("prommetrics: nil Registerer")
	}
	labels := prometheus.Labels{"name": name}
	m := &Metrics{}
	m.depthD = prometheus.NewDesc("workqueue_depth",
		"Number of items waiting in the workqueue to be handed to a worker.", nil, labels)
	m.addsC = prometheus.NewCounter(prometheus.CounterOpts{
		Subsystem: "workqueue", Name: "adds_total", ConstLabels: labels,
		Help: "Number of adds the workqueue took in (adds of an item already waiting are not counted).",
	})
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: "workqueue", Name: "queue_duration_seconds", ConstLabels: labels, Buckets: Buckets,
		Help: "Seconds an item waited in the workqueue before a worker took it.",
	})
	m.work = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: "workqueue", Name: "work_duration_seconds", ConstLabels: labels, Buckets: Buckets,
		Help: "Seconds a worker spent on an item taken from the workqueue.",
	})
	m.unfinishedD = prometheus.NewDesc("workqueue_unfinished_work_seconds",
		"Seconds of work in progress not yet reported in work_duration_seconds: the summed "+
			"age of items being processed. Steady growth means stuck workers; its rate of "+
			"increase is the number of them.", nil, labels)
	m.longestD = prometheus.NewDesc("workqueue_longest_running_processor_seconds",
		"Seconds the longest-running worker of the workqueue has spent on its current item.", nil, labels)
	m.retriesC = prometheus.NewCounter(prometheus.CounterOpts{
		Subsystem: "workqueue", Name: "retries_total", ConstLabels: labels,
		Help: "Number of delayed or rate-limited adds the workqueue took in.",
	})
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("prommetrics: register metrics of queue %q: %w", name, err)
	}
	return m, nil
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
	ch <- m.depthD
	ch <- m.unfinishedD
	ch <- m.longestD
}

// Collect implements prometheus.Collector. It asks the queues for their work in flight
// before reading the other series, so that the adds the queues apply then are counted.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	total, longest, ready := m.inFlight()
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
	ch <- prometheus.MustNewConstMetric(m.depthD, prometheus.GaugeValue, float64(ready))
	ch <- prometheus.MustNewConstMetric(m.unfinishedD, prometheus.GaugeValue, total.Seconds())
	ch <- prometheus.MustNewConstMetric(m.longestD, prometheus.GaugeValue, longest.Seconds())
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.addsC, m.latency, m.work, m.retriesC}
}

// Added implements workqueue.Metrics.
func (m *Metrics) Added() { m.addsC.Inc() }

// Started implements workqueue.Metrics.
func (m *Metrics) Started(waited time.Duration) { m.latency.Observe(waited.Seconds()) }

// Finished implements workqueue.Metrics.
func (m *Metrics) Finished(worked time.Duration) { m.work.Observe(worked.Seconds()) }

// Retried implements workqueue.Metrics.
func (m *Metrics) Retried() { m.retriesC.Inc() }

// Attach implements workqueue.Metrics.
func (m *Metrics) Attach(inFlight func() workqueue.InFlight) {
	m.mu.Lock()
	m.probes = append(m.probes, inFlight)
	m.mu.Unlock()
}

func (m *Metrics) inFlight() (total, longest time.Duration, ready int) {
	m.mu.Lock()
	probes := m.probes
	m.mu.Unlock()
	for _, p := range probes {
		f := p()
		total += f.Total
		longest = max(longest, f.Longest)
		ready += f.Ready
	}
	return total, longest, ready
}
