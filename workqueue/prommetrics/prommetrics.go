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
// 10ns to 10s by powers of ten. Metrics is a workqueue.Binned: the queue itself counts the
// adds and bins the durations, with the lock it holds for those events anyway, and the
// depth and in-flight gauges come from its own counts too; all of them are read when
// scraped. So an item costs no update of a shared counter, and no goroutine updates the
// gauges.
//
// Nothing is registered globally: New registers on the Registerer it is given.
package prommetrics

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/workqueue"
)

// Buckets are the histogram buckets, in seconds: client-go's, 1e-8 to 10 by powers of ten.
var Buckets = prometheus.ExponentialBuckets(10e-9, 10, 10)

// Metrics implements workqueue.Metrics and workqueue.Binned for one queue name. Put it
// in workqueue.Config.Metrics. It is safe for concurrent use. Create it with New.
//
// One Metrics may serve several queues; its series then add them up (the in-flight gauges
// sum the unfinished work and take the longest processor over all of them).
//
// Metrics is also the prometheus.Collector of the seven series, which New registers. A
// scrape reads every queue's counts, and a queue first applies the adds still in its Add
// buffer (see workqueue.Queue), so the scrape counts every add made before it.
//
// Its Added, Started and Finished methods count what they are told as well, for a caller
// that reports events itself rather than through a queue's counts.
type Metrics struct {
	retriesC                                              prometheus.Counter
	depthD, addsD, latencyD, workD, unfinishedD, longestD *prometheus.Desc

	mu     sync.Mutex
	probes []func() workqueue.InFlight
	stats  []func(*workqueue.Stats)
	own    workqueue.Stats // what Added, Started and Finished were told
	bins   []time.Duration // Buckets as durations
	les    []float64       // Buckets
}

var (
	_ workqueue.Binned     = (*Metrics)(nil)
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
	m := &Metrics{les: Buckets, bins: make([]time.Duration, len(Buckets))}
	for i, b := range Buckets {
		m.bins[i] = time.Duration(math.Round(b * 1e9))
	}
	m.depthD = prometheus.NewDesc("workqueue_depth",
		"Number of items waiting in the workqueue to be handed to a worker.", nil, labels)
	m.addsD = prometheus.NewDesc("workqueue_adds_total",
		"Number of adds the workqueue took in (adds of an item already waiting are not counted).", nil, labels)
	m.latencyD = prometheus.NewDesc("workqueue_queue_duration_seconds",
		"Seconds an item waited in the workqueue before a worker took it.", nil, labels)
	m.workD = prometheus.NewDesc("workqueue_work_duration_seconds",
		"Seconds a worker spent on an item taken from the workqueue.", nil, labels)
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
	m.retriesC.Describe(ch)
	for _, d := range []*prometheus.Desc{m.depthD, m.addsD, m.latencyD, m.workD, m.unfinishedD, m.longestD} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	total, longest, ready := m.inFlight()
	var st workqueue.Stats
	m.mu.Lock()
	st.Add(&m.own)
	stats := m.stats
	m.mu.Unlock()
	for _, f := range stats {
		f(&st)
	}
	m.retriesC.Collect(ch)
	ch <- prometheus.MustNewConstMetric(m.depthD, prometheus.GaugeValue, float64(ready))
	ch <- prometheus.MustNewConstMetric(m.addsD, prometheus.CounterValue, float64(st.Adds))
	ch <- m.histogram(m.latencyD, &st.Waited)
	ch <- m.histogram(m.workD, &st.Worked)
	ch <- prometheus.MustNewConstMetric(m.unfinishedD, prometheus.GaugeValue, total.Seconds())
	ch <- prometheus.MustNewConstMetric(m.longestD, prometheus.GaugeValue, longest.Seconds())
}

// histogram returns h as a Prometheus histogram with cumulative buckets.
func (m *Metrics) histogram(d *prometheus.Desc, h *workqueue.Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(m.les))
	var cum uint64
	for i, le := range m.les {
		if i < len(h.Buckets) {
			cum += h.Buckets[i]
		}
		buckets[le] = cum
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets)
}

// Bounds implements workqueue.Binned: Buckets as durations.
func (m *Metrics) Bounds() []time.Duration { return slices.Clone(m.bins) }

// AttachStats implements workqueue.Binned.
func (m *Metrics) AttachStats(stats func(into *workqueue.Stats)) {
	m.mu.Lock()
	m.stats = append(m.stats, stats)
	m.mu.Unlock()
}

// Added implements workqueue.Metrics. A queue does not call it (it counts its adds).
func (m *Metrics) Added() {
	m.mu.Lock()
	m.own.Adds++
	m.mu.Unlock()
}

// Started implements workqueue.Metrics. A queue does not call it (it bins the durations).
func (m *Metrics) Started(waited time.Duration) { m.observe(&m.own.Waited, waited) }

// Finished implements workqueue.Metrics. A queue does not call it (it bins the durations).
func (m *Metrics) Finished(worked time.Duration) { m.observe(&m.own.Worked, worked) }

func (m *Metrics) observe(h *workqueue.Histogram, d time.Duration) {
	i, _ := slices.BinarySearch(m.bins, d) // the first bound >= d, or len(bins)
	m.mu.Lock()
	if h.Buckets == nil {
		h.Buckets = make([]uint64, len(m.bins)+1)
	}
	h.Buckets[i]++
	h.Count++
	h.Sum += d
	m.mu.Unlock()
}

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
