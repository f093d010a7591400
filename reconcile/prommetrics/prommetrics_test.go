package prommetrics_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reconcile/prommetrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type keys []string

func (k keys) Name() string { return "keys" }
func (k keys) Start(enqueue func(string, reconcile.Priority)) (func(), error) {
	for _, key := range k {
		enqueue(key, reconcile.Live)
	}
	return nil, nil
}
func (k keys) HasSynced() bool                  { return true }
func (k keys) AppendKeys(dst []string) []string { return append(dst, k...) }

func TestControllerRuntimeNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		m, err := prommetrics.New(reg, "demo")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		seen := map[string]int{}
		r := reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
			mu.Lock()
			n := seen[key]
			seen[key]++
			mu.Unlock()
			if n > 0 {
				return reconcile.Result{}, nil
			}
			switch key {
			case "later":
				return reconcile.Result{RequeueAfter: time.Second}, nil
			case "term":
				return reconcile.Result{}, reconcile.Terminal(errors.New("bad"))
			case "panic":
				panic("boom")
			case "err":
				return reconcile.Result{}, errors.New("retry me")
			}
			return reconcile.Result{}, nil
		})
		c := reconcile.New[string](r, reconcile.Config[string]{Name: "demo", Workers: 2, Metrics: m, QueueMetrics: m.Queue()})
		c.Watch(keys{"ok", "later", "term", "panic", "err"})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- c.Run(ctx) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		want := `
# HELP controller_runtime_active_workers Number of currently used workers per controller.
# TYPE controller_runtime_active_workers gauge
controller_runtime_active_workers{controller="demo"} 0
# HELP controller_runtime_max_concurrent_reconciles Maximum number of concurrent reconciles per controller.
# TYPE controller_runtime_max_concurrent_reconciles gauge
controller_runtime_max_concurrent_reconciles{controller="demo"} 2
# HELP controller_runtime_reconcile_errors_total Total number of reconciliation errors per controller.
# TYPE controller_runtime_reconcile_errors_total counter
controller_runtime_reconcile_errors_total{controller="demo"} 3
# HELP controller_runtime_reconcile_panics_total Total number of reconciliation panics per controller.
# TYPE controller_runtime_reconcile_panics_total counter
controller_runtime_reconcile_panics_total{controller="demo"} 1
# HELP controller_runtime_reconcile_total Total number of reconciliations per controller, by result.
# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="demo",result="error"} 3
controller_runtime_reconcile_total{controller="demo",result="requeue"} 0
controller_runtime_reconcile_total{controller="demo",result="requeue_after"} 1
controller_runtime_reconcile_total{controller="demo",result="success"} 4
# HELP controller_runtime_terminal_reconcile_errors_total Total number of terminal reconciliation errors per controller.
# TYPE controller_runtime_terminal_reconcile_errors_total counter
controller_runtime_terminal_reconcile_errors_total{controller="demo"} 1
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
			"controller_runtime_active_workers", "controller_runtime_max_concurrent_reconciles",
			"controller_runtime_reconcile_errors_total", "controller_runtime_reconcile_panics_total",
			"controller_runtime_reconcile_total", "controller_runtime_terminal_reconcile_errors_total"); err != nil {
			t.Error(err)
		}
		// 8 reconciles observed; the queue's metrics are there under the controller's name.
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]bool{}
		for _, mf := range mfs {
			found[mf.GetName()] = true
			if mf.GetName() == "controller_runtime_reconcile_time_seconds" {
				if n := mf.GetMetric()[0].GetHistogram().GetSampleCount(); n != 8 {
					t.Errorf("reconcile_time_seconds count = %d, want 8", n)
				}
			}
			if mf.GetName() == "workqueue_adds_total" {
				l := mf.GetMetric()[0].GetLabel()[0]
				if l.GetName() != "name" || l.GetValue() != "demo" {
					t.Errorf("workqueue_adds_total label %v, want name=demo", l)
				}
			}
		}
		for _, name := range []string{"controller_runtime_reconcile_time_seconds", "workqueue_adds_total", "workqueue_depth"} {
			if !found[name] {
				t.Errorf("metric %s missing", name)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestNewErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := prommetrics.New(reg, ""); err == nil {
		t.Error("empty name accepted")
	}
	if _, err := prommetrics.New(nil, "x"); err == nil {
		t.Error("nil registerer accepted")
	}
	if _, err := prommetrics.New(reg, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := prommetrics.New(reg, "b"); err != nil {
		t.Fatalf("second controller: %v", err)
	}
	_, err := prommetrics.New(reg, "a")
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("duplicate controller: %v, want an AlreadyRegisteredError", err)
	}
	// The failed New left nothing behind: "c" registers and "a" still counts once.
	if _, err := prommetrics.New(reg, "c"); err != nil {
		t.Fatalf("after a failed New: %v", err)
	}
	if n := testutil.CollectAndCount(reg, "controller_runtime_active_workers"); n != 3 {
		t.Errorf("%d active_workers series, want 3", n)
	}
}
