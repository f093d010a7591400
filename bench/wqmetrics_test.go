package bench

// Add/Get/Done with Prometheus metrics on both sides: the workqueue as controllers run it.
// client-go's queue gets a MetricsProvider of prometheus client_golang collectors with the
// names and buckets of its own workqueue metrics (what controller-runtime registers for
// every controller); ctrlkit's gets workqueue/prommetrics. Each case registers on a
// registry of its own.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	cgwq "k8s.io/client-go/util/workqueue"

	"github.com/ctrlkit/ctrlkit/workqueue"
	"github.com/ctrlkit/ctrlkit/workqueue/prommetrics"
)

// BenchmarkWorkqueueMetrics is BenchmarkWorkqueueAddGetDone with metrics turned on.
func BenchmarkWorkqueueMetrics(b *testing.B) {
	for _, c := range []struct{ p, w, k int }{{1, 1, 1000}, {4, 4, 1000}, {4, 16, 10000}} {
		keys := wqOwnedKeys(c.k, c.p)
		b.Run(fmt.Sprintf("p%dw%dk%d/impl=ctrlkit", c.p, c.w, c.k), func(b *testing.B) {
			m, err := prommetrics.New(prometheus.NewRegistry(), "bench")
			if err != nil {
				b.Fatal(err)
			}
			q := wqNewCtrlkitWith(workqueue.Config[string]{Metrics: m})
			wqRunAddGetDone(b, q, c.p, c.w, keys)
		})
		b.Run(fmt.Sprintf("p%dw%dk%d/impl=clientgo", c.p, c.w, c.k), func(b *testing.B) {
			q := cgwq.NewTypedRateLimitingQueueWithConfig(cgwq.DefaultTypedControllerRateLimiter[string](),
				cgwq.TypedRateLimitingQueueConfig[string]{
					Name:            "bench",
					MetricsProvider: cgPromProvider{prometheus.NewRegistry()},
				})
			wqRunAddGetDone(b, &wqClientgo{q: q}, c.p, c.w, keys)
		})
	}
}

// cgPromProvider is a client-go workqueue.MetricsProvider of prometheus collectors
// registered on reg, named as client-go's component-base provider names them.
type cgPromProvider struct{ reg *prometheus.Registry }

// register registers c on p's registry and returns it.
func register[C prometheus.Collector](p cgPromProvider, c C) C {
	p.reg.MustRegister(c)
	return c
}

func (p cgPromProvider) gauge(name, metric string) prometheus.Gauge {
	return register(p, prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: "workqueue", Name: metric,
		ConstLabels: prometheus.Labels{"name": name}, Help: metric}))
}

func (p cgPromProvider) counter(name, metric string) prometheus.Counter {
	return register(p, prometheus.NewCounter(prometheus.CounterOpts{Subsystem: "workqueue", Name: metric,
		ConstLabels: prometheus.Labels{"name": name}, Help: metric}))
}

func (p cgPromProvider) histogram(name, metric string) prometheus.Histogram {
	return register(p, prometheus.NewHistogram(prometheus.HistogramOpts{Subsystem: "workqueue", Name: metric,
		ConstLabels: prometheus.Labels{"name": name}, Help: metric, Buckets: prometheus.ExponentialBuckets(10e-9, 10, 10)}))
}

func (p cgPromProvider) NewDepthMetric(name string) cgwq.GaugeMetric { return p.gauge(name, "depth") }
func (p cgPromProvider) NewAddsMetric(name string) cgwq.CounterMetric {
	return p.counter(name, "adds_total")
}
func (p cgPromProvider) NewLatencyMetric(name string) cgwq.HistogramMetric {
	return p.histogram(name, "queue_duration_seconds")
}
func (p cgPromProvider) NewWorkDurationMetric(name string) cgwq.HistogramMetric {
	return p.histogram(name, "work_duration_seconds")
}
func (p cgPromProvider) NewUnfinishedWorkSecondsMetric(name string) cgwq.SettableGaugeMetric {
	return p.gauge(name, "unfinished_work_seconds")
}
func (p cgPromProvider) NewLongestRunningProcessorSecondsMetric(name string) cgwq.SettableGaugeMetric {
	return p.gauge(name, "longest_running_processor_seconds")
}
func (p cgPromProvider) NewRetriesMetric(name string) cgwq.CounterMetric {
	return p.counter(name, "retries_total")
}

// BenchmarkWorkqueueFairness is BenchmarkWorkqueueAddGetDone with ctrlkit's
// Config.FairnessKey set to the key's namespace (97 namespaces), so that items are handed
// out round-robin across namespaces. client-go has no such option: its side is its plain
// queue on the same workload, so the ratio is what the fairness costs against it.
func BenchmarkWorkqueueFairness(b *testing.B) {
	namespace := func(key string) string {
		ns, _, _ := strings.Cut(key[3:], "/") // after the producer's "NN/"
		return ns
	}
	for _, c := range []struct{ p, w, k int }{{1, 1, 1000}, {4, 4, 1000}} {
		keys := wqOwnedKeys(c.k, c.p)
		b.Run(fmt.Sprintf("p%dw%dk%d/impl=ctrlkit", c.p, c.w, c.k), func(b *testing.B) {
			wqRunAddGetDone(b, wqNewCtrlkitWith(workqueue.Config[string]{FairnessKey: namespace}), c.p, c.w, keys)
		})
		b.Run(fmt.Sprintf("p%dw%dk%d/impl=clientgo", c.p, c.w, c.k), func(b *testing.B) {
			wqRunAddGetDone(b, wqNewClientgo(), c.p, c.w, keys)
		})
	}
}
