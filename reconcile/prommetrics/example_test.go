package prommetrics_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reconcile/prommetrics"
)

func Example() {
	reg := prometheus.NewRegistry()
	m, err := prommetrics.New(reg, "configmap-mirror")
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan struct{})
	c := reconcile.New(reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
		close(done)
		return reconcile.Result{}, nil
	}), reconcile.Config[string]{Name: "configmap-mirror", Metrics: m, QueueMetrics: m.Queue()})
	c.Watch(keys{"default/a"})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { errc <- c.Run(ctx) }()
	<-done
	cancel()
	<-errc

	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "controller_runtime_reconcile_total") {
			for _, s := range mf.GetMetric() {
				if s.GetCounter().GetValue() > 0 {
					fmt.Println(mf.GetName(), s.GetLabel()[0].GetValue(), s.GetLabel()[1].GetValue(), s.GetCounter().GetValue())
				}
			}
		}
	}
	// Output:
	// controller_runtime_reconcile_total configmap-mirror success 1
}
