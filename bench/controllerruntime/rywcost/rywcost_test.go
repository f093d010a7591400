//go:build e2e

package rywcost

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/testenv"
)

// env is the control plane shared by the benchmarks of the package.
var env *testenv.Env

func TestMain(m *testing.M) {
	crlog.SetLogger(logr.Discard())
	os.Exit(testenv.RunTests(m, testenv.Config{}, &env, leakcheck.Check))
}

const (
	defaultObjects = 1000
	workers        = 4
	quiet          = 300 * time.Millisecond // no reconcile for this long, and the server agrees: converged
	convergeLimit  = 3 * time.Minute
)

type side struct {
	name  string
	start Start
	ryw   bool
}

var sides = []side{
	{"ctrlkit-ryw", StartCtrlkit, true},
	{"ctrlkit", StartCtrlkit, false},
	{"controller-runtime-ryw", StartControllerRuntime, true},
	{"controller-runtime", StartControllerRuntime, false},
}

// fixture is one side's namespace and objects, kept across rounds.
type fixture struct {
	ns   string
	spec int // the spec the ConfigMaps hold
}

// BenchmarkRYWCost: one op is one change of data["spec"] of every one of K
// ConfigMaps (CTRLKIT_RYWCOST_OBJECTS, default 1000), made by the benchmark on
// the server, and the wait until the side's controller (4 workers) has
// converged every object with no reconcile pending; the end state is then
// checked with a LIST. The sides run one after another within a round, their
// order rotated from round to round, CTRLKIT_RYWCOST_ROUNDS rounds (default 5;
// -count would repeat each side back to back instead). Run with -benchtime=1x
// -count=1 and read with benchstat -ignore round.
//
// Metrics per op: converge-ms (from the first spec change to the end of the
// last reconcile), reconciles/obj, writes/obj, conflicts (409s per op),
// errors (failed reconciles), extra-children (Child: Secrets of the current
// spec beyond one per ConfigMap, created from a stale cache), and cpu-ms (this
// process's user+system CPU while the op ran; the API server and etcd are
// other processes).
func BenchmarkRYWCost(b *testing.B) {
	k := envInt(b, "CTRLKIT_RYWCOST_OBJECTS", defaultObjects)
	rounds := envInt(b, "CTRLKIT_RYWCOST_ROUNDS", 5)
	fixtures := map[string]*fixture{} // by shape/side, kept across rounds
	for r := range rounds {
		b.Run(fmt.Sprintf("round=%d", r+1), func(b *testing.B) {
			for _, shape := range []Shape{Steps, Child} {
				b.Run("shape="+shape.String(), func(b *testing.B) {
					for i := range sides {
						s := sides[(i+r)%len(sides)]
						fx := fixtures[shape.String()+"/"+s.name]
						if fx == nil {
							fx = &fixture{ns: env.Namespace(b)}
							fixtures[shape.String()+"/"+s.name] = fx
						}
						b.Run("impl="+s.name, func(b *testing.B) { benchSide(b, shape, s, fx, k) })
					}
				})
			}
		})
	}
}

// envInt reads a positive integer from the environment variable name, or
// returns def when it is unset.
func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func benchSide(b *testing.B, shape Shape, s side, fx *fixture, k int) {
	ctx := b.Context()
	kube, err := kubernetes.NewForConfig(env.Config())
	if err != nil {
		b.Fatal(err)
	}
	if err := ensureConfigMaps(ctx, kube, fx.ns, k, fx.spec); err != nil {
		b.Fatal(err)
	}

	var c Counters
	stop, err := s.start(ctx, env.Config(), Config{Namespace: fx.ns, Workers: workers, ReadYourWrites: s.ryw, Logic: Logic{Shape: shape, C: &c}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			b.Errorf("%s: %v", s.name, err)
		}
	}()
	// Warm up: the controller lists, syncs and converges what the last round
	// left (all of it, after the first round); not measured.
	if _, _, err := waitConverged(ctx, kube, &c, shape, fx.ns, k, fx.spec); err != nil {
		b.Fatalf("%s warm-up: %v", s.name, err)
	}

	var sum struct {
		ms, cpu                                  float64
		reconciles, writes, conflicts, errs, dup int64
	}
	b.ResetTimer()
	for range b.N {
		r0, w0, c0, e0 := c.Reconciles.Load(), c.Writes.Load(), c.Conflicts.Load(), c.Errors.Load()
		cpu0 := cpuTime()
		start := time.Now()
		fx.spec++
		if err := setSpec(ctx, kube, fx.ns, k, fx.spec); err != nil {
			b.Fatal(err)
		}
		last, dup, err := waitConverged(ctx, kube, &c, shape, fx.ns, k, fx.spec)
		if err != nil {
			b.Fatalf("%s: %v", s.name, err)
		}
		sum.cpu += float64(cpuTime()-cpu0) / float64(time.Millisecond)
		sum.ms += float64(last.Sub(start)) / float64(time.Millisecond)
		sum.reconciles += c.Reconciles.Load() - r0
		sum.writes += c.Writes.Load() - w0
		sum.conflicts += c.Conflicts.Load() - c0
		sum.errs += c.Errors.Load() - e0
		sum.dup += int64(dup)
	}
	b.StopTimer()
	n, kn := float64(b.N), float64(b.N*k)
	b.ReportMetric(sum.ms/n, "converge-ms")
	b.ReportMetric(float64(sum.reconciles)/kn, "reconciles/obj")
	b.ReportMetric(float64(sum.writes)/kn, "writes/obj")
	b.ReportMetric(float64(sum.conflicts)/n, "conflicts")
	b.ReportMetric(float64(sum.errs)/n, "errors")
	b.ReportMetric(float64(sum.dup)/n, "extra-children")
	b.ReportMetric(sum.cpu/n, "cpu-ms")
}

// cpuTime is the user and system CPU this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func cmName(i int) string { return fmt.Sprintf("cm-%05d", i) }

// parallel runs fn(i) for i in [0, n) on 8 goroutines and returns the first error.
func parallel(n int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// ensureConfigMaps creates the k ConfigMaps of ns that do not exist, at spec.
func ensureConfigMaps(ctx context.Context, kube kubernetes.Interface, ns string, k, spec int) error {
	list, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, cm := range list.Items {
		have[cm.Name] = true
	}
	return parallel(k, func(i int) error {
		if have[cmName(i)] {
			return nil
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cmName(i)},
			Data:       map[string]string{SpecKey: strconv.Itoa(spec)},
		}
		_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		return err
	})
}

// setSpec sets data["spec"] of the k ConfigMaps of ns on the server.
func setSpec(ctx context.Context, kube kubernetes.Interface, ns string, k, spec int) error {
	patch := fmt.Appendf(nil, `{"data":{%q:%q}}`, SpecKey, strconv.Itoa(spec))
	return parallel(k, func(i int) error {
		_, err := kube.CoreV1().ConfigMaps(ns).Patch(ctx, cmName(i), "application/merge-patch+json", patch, metav1.PatchOptions{})
		return err
	})
}

// waitConverged waits until the controller has been idle for quiet and a LIST
// of the server shows every ConfigMap converged at spec. It returns when the
// last reconcile ended and, in the Child shape, how many Secrets of spec there
// are beyond one per ConfigMap.
func waitConverged(ctx context.Context, kube kubernetes.Interface, c *Counters, shape Shape, ns string, k, spec int) (time.Time, int, error) {
	deadline := time.Now().Add(convergeLimit)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var why error
	for {
		select {
		case <-ctx.Done():
			return time.Time{}, 0, ctx.Err()
		case <-tick.C:
		}
		now := time.Now()
		if now.After(deadline) {
			return time.Time{}, 0, fmt.Errorf("not converged in %v: %w", convergeLimit, why)
		}
		idle, last := c.Idle(now, quiet)
		if !idle {
			continue
		}
		dup, err := checkServer(ctx, kube, shape, ns, k, spec)
		if err == nil {
			if idle2, last2 := c.Idle(time.Now(), quiet); idle2 && last2.Equal(last) {
				return last, dup, nil
			}
			continue
		}
		why = err
	}
}

// checkServer lists the ConfigMaps (and Secrets) of ns and returns an error
// unless every one of the k ConfigMaps is converged at spec.
func checkServer(ctx context.Context, kube kubernetes.Interface, shape Shape, ns string, k, spec int) (extra int, err error) {
	want := strconv.Itoa(spec)
	cms, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, cm := range cms.Items {
		if cm.Name == "kube-root-ca.crt" {
			continue
		}
		n++
		if cm.Data[SpecKey] != want || cm.Annotations[ObservedAnno] != want {
			return 0, fmt.Errorf("configmap %s: spec %q observed %q, want %q", cm.Name, cm.Data[SpecKey], cm.Annotations[ObservedAnno], want)
		}
		if shape == Steps && cm.Annotations[StepAnno] != strconv.Itoa(NumSteps) {
			return 0, fmt.Errorf("configmap %s: step %q, want %d", cm.Name, cm.Annotations[StepAnno], NumSteps)
		}
	}
	if n != k {
		return 0, fmt.Errorf("%d configmaps, want %d", n, k)
	}
	if shape != Child {
		return 0, nil
	}
	secrets, err := kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: OwnerLabel})
	if err != nil {
		return 0, err
	}
	per := map[string]int{}
	for _, s := range secrets.Items {
		if s.DeletionTimestamp != nil {
			continue
		}
		if s.Labels[SpecLabel] != want {
			return 0, fmt.Errorf("secret %s of spec %q left over, want only %q", s.Name, s.Labels[SpecLabel], want)
		}
		per[s.Labels[OwnerLabel]]++
	}
	for i := range k {
		c := per[cmName(i)]
		if c == 0 {
			return 0, fmt.Errorf("configmap %s has no secret of spec %q", cmName(i), want)
		}
		extra += c - 1
	}
	return extra, nil
}
