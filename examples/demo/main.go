// Command demo starts a local control plane (etcd and kube-apiserver from testenv), installs the
// three example controllers (the sidecar injector, the Network controller with its loopback
// backend, and the PodSet controller) and runs them while a workload generator creates, changes
// and deletes their objects for a while. It prints one line of progress a second (objects,
// reconciles per second, queue depths, cache lag) and a summary after checking that every
// controller converged to what the final objects ask for. It leaves nothing running; Ctrl-C
// stops everything cleanly at any point.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/examples/network-controller/backend"
	"github.com/ctrlkit/ctrlkit/examples/network-controller/network"
	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
	"github.com/ctrlkit/ctrlkit/examples/sidecar-injector/injector"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/testenv"
)

func main() {
	duration := flag.Duration("duration", time.Minute, "how long the workload generator runs")
	rate := flag.Float64("rate", 10, "writes per second of the workload generator")
	seed := flag.Uint64("seed", 0, "random seed of the workload (0: from the clock)")
	flag.Parse()
	if *duration <= 0 || *rate <= 0 {
		fmt.Fprintln(os.Stderr, "demo: -duration and -rate must be positive")
		os.Exit(2)
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, *duration, *rate, *seed)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		fmt.Println("interrupted; everything stopped")
	default:
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// demoNS holds the demo's objects.
const demoNS = "demo"

func run(ctx context.Context, duration time.Duration, rate float64, seed uint64) error {
	fmt.Println("starting etcd and kube-apiserver on 127.0.0.1 ...")
	start := time.Now()
	env, err := testenv.Start(ctx, testenv.Config{})
	if err != nil {
		return err
	}
	defer func() {
		env.Stop()
		fmt.Println("control plane stopped, temporary files removed")
	}()
	etcdPID, apiPID := env.PIDs()
	fmt.Printf("control plane ready at %s in %v (etcd pid %d, kube-apiserver pid %d)\n",
		env.APIServerURL(), time.Since(start).Round(time.Millisecond), etcdPID, apiPID)
	cfg := env.Config()

	// The Network controller's external system: an HTTP service on loopback, state on disk.
	backendDir, err := os.MkdirTemp("", "ctrlkit-demo-backend-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(backendDir)

	// Everything below runs until runCtx ends; the deferred calls stop it in order.
	var wg sync.WaitGroup
	defer wg.Wait()
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	be, err := backend.New(backendDir)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	wg.Go(func() { be.Serve(runCtx, ln) })
	backendURL := "http://" + ln.Addr().String()

	c, err := newClients(cfg)
	if err != nil {
		return err
	}
	if err := setup(ctx, cfg, c); err != nil {
		return err
	}
	fmt.Printf("installed CRDs %s and %s, the sidecar ConfigMap %s/%s, and the network backend at %s\n",
		network.GroupVersionResource.GroupResource(), podset.GroupVersionResource.GroupResource(),
		injector.DefaultConfigNamespace, injector.DefaultConfigName, backendURL)

	// The three controllers in one manager, each counting its reconciles and queue depth for
	// the progress line.
	m, err := manager.New(manager.Config{RESTConfig: cfg})
	if err != nil {
		return err
	}
	sc, nc, pc := &stats{name: "sidecar"}, &stats{name: "network"}, &stats{name: "podset"}
	inj, err := injector.New(m, injector.Options{Namespace: demoNS, Metrics: sc, QueueMetrics: sc})
	if err != nil {
		return err
	}
	netc, err := network.New(m, network.Options{Namespace: demoNS, BackendURL: backendURL, Metrics: nc, QueueMetrics: nc})
	if err != nil {
		return err
	}
	psc, err := podset.New(m, podset.Options{Namespace: demoNS, Metrics: pc, QueueMetrics: pc})
	if err != nil {
		return err
	}
	ctrlErr := make(chan error, 1)
	wg.Go(func() {
		if err := m.Run(runCtx); err != nil {
			ctrlErr <- err
		}
	})
	// The controllers fill their caches meanwhile.
	held, err := waitCRDCreateHold(ctx, c)
	if err != nil {
		return err
	}
	if held > 0 {
		fmt.Printf("waited %v before the first write: kube-apiserver holds every create of a custom resource for %v after its CRD is established\n",
			held.Round(time.Millisecond), crdCreateHold)
	}
	fmt.Printf("controllers running; workload for %v at about %.0f writes/s (-seed %d)\n", duration, rate, seed)
	printInformers(m)

	w := newWorkload(c, seed, []*stats{sc, nc, pc}, inj, netc, psc)
	genCtx, stopGen := context.WithCancel(runCtx)
	defer stopGen()
	genDone := make(chan error, 1)
	go func() { genDone <- w.run(genCtx, duration, rate) }()

	fmt.Println("progress columns: sidecar/network/podset; cache lag is from sending a write to the controller's cache holding it")
	p := newProgress(w, os.Stdout, isTerminal(os.Stdout))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for genDone != nil {
		select {
		case <-ctx.Done():
			p.end()
			<-genDone
			w.waitLag()
			return ctx.Err()
		case err := <-ctrlErr:
			p.end()
			stopGen()
			<-genDone
			w.waitLag()
			return err
		case err := <-genDone:
			genDone = nil
			w.waitLag()
			if err != nil && genCtx.Err() == nil {
				p.end()
				return err
			}
		case <-tick.C:
			p.tick()
		}
	}
	p.flush()
	p.end()

	fmt.Println("workload done; checking that every controller converges ...")
	settle := time.Now()
	report, err := converge(ctx, c, be)
	if err != nil {
		return err
	}
	fmt.Printf("converged %v after the last write:\n", time.Since(settle).Round(time.Millisecond))
	for _, line := range report {
		fmt.Println("  " + line)
	}
	w.summary()
	cancelRun()
	wg.Wait()
	fmt.Printf("controllers stopped; demo ran %v\n", time.Since(start).Round(time.Second))
	return nil
}

// clients are the admin clients of the workload generator and the checks.
type clients struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
	ext  apiextensions.Interface
}

func newClients(cfg *rest.Config) (*clients, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ext, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &clients{kube: kube, dyn: dyn, ext: ext}, nil
}

// setup installs the CRDs, the namespaces and the sidecar definition.
func setup(ctx context.Context, cfg *rest.Config, c *clients) error {
	for _, install := range []func(context.Context, *rest.Config) error{injector.Install, network.Install, podset.Install} {
		if err := install(ctx, cfg); err != nil {
			return err
		}
	}
	for _, ns := range []string{demoNS, injector.DefaultConfigNamespace} {
		_, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	_, err := c.kube.CoreV1().ConfigMaps(injector.DefaultConfigNamespace).Create(ctx, sidecarConfigMap(1), metav1.CreateOptions{})
	return err
}

// printInformers prints the manager's shared informers and how many controllers use each.
func printInformers(m *manager.Manager) {
	infs := m.Informers()
	fmt.Printf("one manager runs %d controllers on %d shared informers:", len(m.Controllers()), len(infs))
	for i, inf := range infs {
		sep := ";"
		if i == 0 {
			sep = ""
		}
		users := "user"
		if inf.Users != 1 {
			users += "s"
		}
		fmt.Printf("%s %s [%d %s]", sep, inf.Name, inf.Users, users)
	}
	fmt.Println()
}
