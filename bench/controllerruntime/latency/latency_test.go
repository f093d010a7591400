//go:build e2e

package latency

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/testenv"
)

// env is the control plane shared by the benchmarks of the package.
var env *testenv.Env

func TestMain(m *testing.M) {
	// controller-runtime's loggers all delegate to this one; without it the
	// package warns on stderr after 30s.
	crlog.SetLogger(logr.Discard())
	os.Exit(testenv.RunTests(m, testenv.Config{}, &env, leakcheck.Check))
}

// The workload. CTRLKIT_LATENCY_WINDOW overrides the measured window and
// CTRLKIT_LATENCY_RATES the write rates (comma-separated writes/s).
const (
	numKeys       = 1000
	objectSize    = 1024 // bytes of payload per ConfigMap
	workers       = 4    // reconciles at once, both sides
	writerConns   = 4    // connections the writer spreads its requests over
	writerWorkers = 64   // writes in flight at most
	warmup        = 2 * time.Second
	window        = 10 * time.Second
	shortWindow   = 3 * time.Second
	catchUpLimit  = 30 * time.Second
)

var defaultRates = []int{100, 1000, 5000}

type side struct {
	name  string
	start Start
}

var sides = []side{
	{"ctrlkit", StartCtrlkit},
	{"controller-runtime", StartControllerRuntime},
}

// BenchmarkE2ELatency measures change-to-reconcile latency and the write rate a
// controller keeps up with, ctrlkit against controller-runtime, on testenv's
// kube-apiserver. For each target rate it runs -count rounds; each round runs
// both sides one after the other (ctrlkit first in odd rounds, controller-runtime
// first in even ones), so that a change of the machine's load hits both. A run
// starts a fresh manager on 1,000 ConfigMaps of 1 KiB, waits until every key was
// reconciled once, writes at the target rate for 2 s of warm-up and the window
// (10 s, 3 s with -short), then waits up to 30 s for the controller to catch up.
//
// All rounds run first; then each sub-benchmark "<side>/rate=<R>" reports one
// round per call, so -count N prints N lines per side and rate, the rounds in
// the order they ran. Run it with -benchtime 1x. ns/op means nothing here.
// Metrics: lat-p50-ms, lat-p99-ms (send of a write to the first reconcile that
// saw it or a newer version; a write never covered counts as 1e9 ms), writes/s
// (successful writes of the window per second), recon/s, event-p50-ms and
// event-p99-ms (a write's send → its watch event reaching an informer handler:
// the server's part and the informer's), handler-p50-ms and
// handler-p99-ms (a write's watch event reaching an informer handler → the
// reconcile that covered it: the controller's own part), write-p50-ms (the
// server's answer time, inside every latency on both sides), lag-ms (last write
// sent → every key's last write reconciled), caught-up (1 or 0).
func BenchmarkE2ELatency(b *testing.B) {
	benchLatency(b, false)
}

// BenchmarkE2ELatencyPaired is BenchmarkE2ELatency with both controllers
// running at once, in the same process, on the same writes: each round is one
// run, and each side's figures come from the same server conditions, which
// takes the load of a shared machine out of the comparison (the two
// controllers share the process's CPU instead). Sub-benchmarks are named as
// BenchmarkE2ELatency's; writes/s and write-p50-ms are the same for both.
func BenchmarkE2ELatencyPaired(b *testing.B) {
	benchLatency(b, true)
}

func benchLatency(b *testing.B, paired bool) {
	rounds := 1
	if f := flag.Lookup("test.count"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n > 0 {
			rounds = n
		}
	}
	win := window
	if testing.Short() {
		win = shortWindow
	}
	if v := os.Getenv("CTRLKIT_LATENCY_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("CTRLKIT_LATENCY_WINDOW=%q: want a positive duration", v)
		}
		win = d
	}
	rates := defaultRates
	if v := os.Getenv("CTRLKIT_LATENCY_RATES"); v != "" {
		rates = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("CTRLKIT_LATENCY_RATES=%q: want positive integers", v)
			}
			rates = append(rates, n)
		}
	}

	ctx := b.Context()
	ns := env.Namespace(b)
	admin := kubernetes.NewForConfigOrDie(env.Config())
	if err := CreateConfigMaps(ctx, admin, ns, numKeys, objectSize); err != nil {
		b.Fatal(err)
	}
	clients := make([]kubernetes.Interface, writerConns)
	for i := range clients {
		cfg := rest.CopyConfig(env.Config())
		cfg.QPS, cfg.Burst = 1e6, 1e6
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		// A Dial of its own keeps client-go from sharing one cached transport
		// (and so one HTTP/2 connection) among the clients.
		cfg.Dial = (&net.Dialer{}).DialContext
		clients[i] = kubernetes.NewForConfigOrDie(cfg)
	}

	nameOf := func(s side, rate int) string { return fmt.Sprintf("%s/rate=%d", s.name, rate) }
	results := map[string][]Result{}
	for _, rate := range rates {
		for r := range rounds {
			runs := [][]side{sides}
			if !paired {
				runs = [][]side{{sides[0]}, {sides[1]}}
				if r%2 == 1 {
					runs[0], runs[1] = runs[1], runs[0]
				}
			}
			for _, run := range runs {
				load := loadavg()
				res := runOnce(ctx, b, run, ns, clients, rate, win, uint64(r+1))
				for i, s := range run {
					name := nameOf(s, rate)
					results[name] = append(results[name], res[i])
					b.Logf("round %d %s: writes/s %.0f of %d, lat p50 %v p99 %v max %v, send→event p50 %v p99 %v, event→reconcile p50 %v p99 %v, write p50 %v, recon/s %.0f, lag %v, caught up %v, uncovered %d; load %s",
						r+1, name, res[i].WriteRate, rate, ms(res[i].P50), ms(res[i].P99), ms(res[i].Max), ms(res[i].EventP50), ms(res[i].EventP99),
						ms(res[i].HandlerP50), ms(res[i].HandlerP99), ms(res[i].WriteP50),
						res[i].ReconcileRate, res[i].Lag.Round(time.Millisecond), res[i].CaughtUp, res[i].Uncovered, load)
				}
			}
		}
	}
	for _, rate := range rates {
		for _, s := range sides {
			name := nameOf(s, rate)
			next := 0
			b.Run(name, func(b *testing.B) {
				rs := results[name]
				res := rs[next%len(rs)]
				next++
				b.ReportMetric(msf(res.P50), "lat-p50-ms")
				b.ReportMetric(msf(res.P99), "lat-p99-ms")
				b.ReportMetric(res.WriteRate, "writes/s")
				b.ReportMetric(res.ReconcileRate, "recon/s")
				b.ReportMetric(msf(res.EventP50), "event-p50-ms")
				b.ReportMetric(msf(res.EventP99), "event-p99-ms")
				b.ReportMetric(msf(res.HandlerP50), "handler-p50-ms")
				b.ReportMetric(msf(res.HandlerP99), "handler-p99-ms")
				b.ReportMetric(msf(res.WriteP50), "write-p50-ms")
				b.ReportMetric(msf(res.Lag), "lag-ms")
				caught := 0.0
				if res.CaughtUp {
					caught = 1
				}
				b.ReportMetric(caught, "caught-up")
			})
		}
	}
}

// runOnce measures the controllers of run, all at once, at one rate: a fresh
// manager each, warm (every key reconciled once), then warm-up, window and
// catch-up. It returns one Result per side, in order.
func runOnce(ctx context.Context, b *testing.B, run []side, ns string, clients []kubernetes.Interface, rate int, win time.Duration, seed uint64) []Result {
	b.Helper()
	recs := make([]*Recorder, len(run))
	for i, s := range run {
		recs[i] = NewRecorder(numKeys)
		stop, err := s.start(ctx, env.Config(), Config{Namespace: ns, Workers: workers, Recorder: recs[i]})
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			if err := stop(); err != nil {
				b.Errorf("%s: %v", s.name, err)
			}
		}()
	}
	for i, s := range run {
		if !Poll(ctx, time.Minute, func() bool { return recs[i].Distinct() == numKeys }) {
			b.Fatalf("%s: %d of %d keys reconciled after a minute", s.name, recs[i].Distinct(), numKeys)
		}
	}
	w := &Writer{Clients: clients, Namespace: ns, Keys: numKeys, Rate: float64(rate), Workers: writerWorkers, Seed: seed}
	from := Now() + warmup
	writes, st, err := w.Run(ctx, warmup+win)
	if err != nil {
		b.Fatal(err)
	}
	to := from + win
	if st.Errors > 0 {
		b.Logf("%d writes failed, the first: %v", st.Errors, st.FirstErr)
	}
	if st.Skipped > 0 {
		b.Logf("%d of %d writes due were skipped, all %d writers busy", st.Skipped, st.Due, writerWorkers)
	}
	last := LastRVs(writes, numKeys)
	deadline := time.Now().Add(catchUpLimit)
	res := make([]Result, len(run))
	for i := range run {
		Poll(ctx, time.Until(deadline), func() bool { return recs[i].Covers(last) })
	}
	for i := range run {
		res[i] = Analyze(writes, recs[i].Observations(), recs[i].Arrivals(), numKeys, from, to)
	}
	return res
}

func msf(d time.Duration) float64 {
	if d == Forever {
		return 1e9
	}
	return float64(d) / float64(time.Millisecond)
}

func ms(d time.Duration) string {
	if d == Forever {
		return "never"
	}
	return d.Round(100 * time.Microsecond).String()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
