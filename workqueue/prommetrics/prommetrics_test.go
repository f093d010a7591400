package prommetrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/ctrlkit/ctrlkit/workqueue"
	"github.com/ctrlkit/ctrlkit/workqueue/prommetrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// client-go's workqueue metric families and their types.
var clientGoFamilies = map[string]dto.MetricType{
	"workqueue_depth":                             dto.MetricType_GAUGE,
	"workqueue_adds_total":                        dto.MetricType_COUNTER,
	"workqueue_queue_duration_seconds":            dto.MetricType_HISTOGRAM,
	"workqueue_work_duration_seconds":             dto.MetricType_HISTOGRAM,
	"workqueue_unfinished_work_seconds":           dto.MetricType_GAUGE,
	"workqueue_longest_running_processor_seconds": dto.MetricType_GAUGE,
	"workqueue_retries_total":                     dto.MetricType_COUNTER,
}

func TestNamesTypesAndLabelsMatchClientGo(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if _, err := prommetrics.New(reg, "pods"); err != nil {
		t.Fatal(err)
	}
	if _, err := prommetrics.New(reg, "nodes"); err != nil { // a second queue on the same registry
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) != len(clientGoFamilies) {
		t.Fatalf("%d metric families, want %d", len(fams), len(clientGoFamilies))
	}
	for _, f := range fams {
		want, ok := clientGoFamilies[f.GetName()]
		if !ok {
			t.Errorf("unexpected family %s", f.GetName())
			continue
		}
		if f.GetType() != want {
			t.Errorf("%s: type %v, want %v", f.GetName(), f.GetType(), want)
		}
		if f.GetHelp() == "" {
			t.Errorf("%s: no help", f.GetName())
		}
		var names []string
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "name" {
				t.Errorf("%s: labels %v, want only name", f.GetName(), m.GetLabel())
				continue
			}
			names = append(names, m.GetLabel()[0].GetValue())
			if h := m.GetHistogram(); h != nil {
				var bounds []float64
				for _, b := range h.GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				if len(bounds) != 10 || bounds[0] != 1e-8 || bounds[9] < 9.99 || bounds[9] > 10.01 {
					t.Errorf("%s: buckets %v, want 1e-8 .. 10 by powers of ten", f.GetName(), bounds)
				}
			}
		}
		if strings.Join(names, ",") != "nodes,pods" {
			t.Errorf("%s: series for %v, want nodes and pods", f.GetName(), names)
		}
	}
}

func TestValuesFollowTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		m, err := prommetrics.New(reg, "pods")
		if err != nil {
			t.Fatal(err)
		}
		q := workqueue.New(workqueue.Config[string]{Metrics: m})
		ctx := context.Background()

		q.Add("a")
		q.Add("b")
		q.Add("a") // a duplicate is not an add
		time.Sleep(2 * time.Second)
		a, _ := q.Get(ctx) // waited 2s
		time.Sleep(time.Second)
		q.Done(a)                    // worked 1s
		q.AddAfter("c", time.Second) // a retry; added at t=4s
		b, _ := q.Get(ctx)           // waited 3s
		time.Sleep(4 * time.Second)  // t=7s: b in flight for 4s

		const gauges = `
# HELP workqueue_adds_total Number of adds the workqueue took in (adds of an item already waiting are not counted).
# TYPE workqueue_adds_total counter
workqueue_adds_total{name="pods"} 3
# HELP workqueue_depth Number of items waiting in the workqueue to be handed to a worker.
# TYPE workqueue_depth gauge
workqueue_depth{name="pods"} 1
# HELP workqueue_longest_running_processor_seconds Seconds the longest-running worker of the workqueue has spent on its current item.
# TYPE workqueue_longest_running_processor_seconds gauge
workqueue_longest_running_processor_seconds{name="pods"} 4
# HELP workqueue_retries_total Number of delayed or rate-limited adds the workqueue took in.
# TYPE workqueue_retries_total counter
workqueue_retries_total{name="pods"} 1
# HELP workqueue_unfinished_work_seconds Seconds of work in progress not yet reported in work_duration_seconds: the summed age of items being processed. Steady growth means stuck workers; its rate of increase is the number of them.
# TYPE workqueue_unfinished_work_seconds gauge
workqueue_unfinished_work_seconds{name="pods"} 4
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(gauges),
			"workqueue_adds_total", "workqueue_depth", "workqueue_longest_running_processor_seconds",
			"workqueue_retries_total", "workqueue_unfinished_work_seconds"); err != nil {
			t.Fatal(err)
		}
		got := gather(t, reg)
		if h := got["workqueue_queue_duration_seconds"].GetHistogram(); h.GetSampleCount() != 2 || h.GetSampleSum() != 5 {
			t.Errorf("queue duration: %d samples, sum %v; want 2, 5s", h.GetSampleCount(), h.GetSampleSum())
		}
		checkBuckets(t, got, "workqueue_queue_duration_seconds", map[float64]uint64{0.1: 0, 1: 0, 10: 2}) // 2s and 3s
		if h := got["workqueue_work_duration_seconds"].GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 1 {
			t.Errorf("work duration: %d samples, sum %v; want 1, 1s", h.GetSampleCount(), h.GetSampleSum())
		}
		checkBuckets(t, got, "workqueue_work_duration_seconds", map[float64]uint64{0.1: 0, 1: 1, 10: 1}) // 1s: le is inclusive

		q.Done(b)
		if got := gaugeValue(t, reg, "workqueue_unfinished_work_seconds"); got != 0 {
			t.Errorf("unfinished work %v after Done", got)
		}
		q.ShutDown()
	})
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

func TestRegistrationErrors(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if _, err := prommetrics.New(reg, "pods"); err != nil {
		t.Fatal(err)
	}
	_, err := prommetrics.New(reg, "pods")
	var already prometheus.AlreadyRegisteredError
	if !errors.As(err, &already) || !strings.HasPrefix(err.Error(), "prommetrics: ") {
		t.Fatalf("second registration: %v, want AlreadyRegisteredError", err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 7 {
		t.Fatalf("%d series after a failed registration (%v), want the first queue's 7", n, err)
	}
	if _, err := prommetrics.New(reg, ""); err == nil {
		t.Fatal("empty name accepted")
	}
	if _, err := prommetrics.New(nil, "x"); err == nil {
		t.Fatal("nil Registerer accepted")
	}
}

// One Metrics shared by two queues adds them up.
func TestSharedBetweenQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		m, err := prommetrics.New(reg, "shared")
		if err != nil {
			t.Fatal(err)
		}
		q1 := workqueue.New(workqueue.Config[string]{Metrics: m})
		q2 := workqueue.New(workqueue.Config[int]{Metrics: m})
		q1.Add("a")
		q2.Add(1)
		q1.Get(context.Background())
		time.Sleep(time.Second)
		q2.Get(context.Background())
		time.Sleep(time.Second)
		const want = `
# HELP workqueue_longest_running_processor_seconds Seconds the longest-running worker of the workqueue has spent on its current item.
# TYPE workqueue_longest_running_processor_seconds gauge
workqueue_longest_running_processor_seconds{name="shared"} 2
# HELP workqueue_unfinished_work_seconds Seconds of work in progress not yet reported in work_duration_seconds: the summed age of items being processed. Steady growth means stuck workers; its rate of increase is the number of them.
# TYPE workqueue_unfinished_work_seconds gauge
workqueue_unfinished_work_seconds{name="shared"} 3
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
			"workqueue_longest_running_processor_seconds", "workqueue_unfinished_work_seconds"); err != nil {
			t.Fatal(err)
		}
		q1.ShutDown()
		q2.ShutDown()
	})
}

// Wiring a queue to Prometheus.
func ExampleNew() {
	reg := prometheus.NewRegistry()
	m, err := prommetrics.New(reg, "pods")
	if err != nil {
		panic(err)
	}
	q := workqueue.New(workqueue.Config[string]{Metrics: m})
	defer q.ShutDown()
	q.Add("default/web")
	q.Add("default/db")

	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() == "workqueue_depth" || f.GetName() == "workqueue_adds_total" {
			mt := f.GetMetric()[0]
			fmt.Printf("%s{name=%q} %v\n", f.GetName(), mt.GetLabel()[0].GetValue(), mt.GetGauge().GetValue()+mt.GetCounter().GetValue())
		}
	}
	// Output:
	// workqueue_adds_total{name="pods"} 2
	// workqueue_depth{name="pods"} 2
}

// gather returns the first series of every metric family reg gathers, by name.
func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.Metric{}
	for _, f := range fams {
		got[f.GetName()] = f.GetMetric()[0]
	}
	return got
}

// checkBuckets checks the cumulative counts of some buckets of the histogram name, by
// upper bound, and that it has client-go's ten buckets.
func checkBuckets(t *testing.T, got map[string]*dto.Metric, name string, want map[float64]uint64) {
	t.Helper()
	h := got[name].GetHistogram()
	if n := len(h.GetBucket()); n != len(prommetrics.Buckets) {
		t.Errorf("%s: %d buckets, want %d", name, n, len(prommetrics.Buckets))
	}
	for _, b := range h.GetBucket() {
		if w, ok := want[b.GetUpperBound()]; ok && b.GetCumulativeCount() != w {
			t.Errorf("%s: bucket le=%v counts %d, want %d", name, b.GetUpperBound(), b.GetCumulativeCount(), w)
		}
	}
}

// TestDirectCalls: events reported by calling Added, Started and Finished (by a caller
// other than a queue) are counted in the same series as a queue's own counts.
func TestDirectCalls(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := prommetrics.New(reg, "direct")
	if err != nil {
		t.Fatal(err)
	}
	q := workqueue.New(workqueue.Config[string]{Metrics: m})
	defer q.ShutDown()
	q.Add("x")
	m.Added()
	m.Started(50 * time.Millisecond)
	m.Finished(20 * time.Second)
	got := gather(t, reg)
	if v := got["workqueue_adds_total"].GetCounter().GetValue(); v != 2 {
		t.Errorf("adds_total = %v, want 2 (one by the queue, one direct)", v)
	}
	checkBuckets(t, got, "workqueue_queue_duration_seconds", map[float64]uint64{0.01: 0, 0.1: 1, 10: 1})
	if h := got["workqueue_work_duration_seconds"].GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 20 {
		t.Errorf("work duration: %d samples, sum %v; want 1, 20s", h.GetSampleCount(), h.GetSampleSum())
	}
	checkBuckets(t, got, "workqueue_work_duration_seconds", map[float64]uint64{10: 0}) // above every bound
}
