// Command demo starts a local control plane (etcd and kube-apiserver from testenv), installs the
// three example controllers (the sidecar injector, the Network controller with its loopback
// backend, and the PodSet controller) and runs them while a workload generator creates, changes
// and deletes their objects for a while. It prints one line of progress a second (objects,
// reconciles per second, queue depths, cache lag) and a summary after checking that every
// controller converged to what the final objects ask for. It leaves nothing running; Ctrl-C
// stops everything cleanly at any point.
//
// With -replicas N (N > 1) the controllers run in N managers in this process, replicas r0,
// r1, ... of one group (manager.Config.Sharding) that split the objects by their key (a Pod
// by its PodSet's): each caches and reconciles its share, and no key is ever reconciled by
// two replicas, also when an object is deleted and re-created. The progress lines then show each
// replica's share; unless -leave=false, the last replica leaves half-way through and the
// others take its slots; the summary tells how the work was split.
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
	"github.com/ctrlkit/ctrlkit/testenv"
)

func main() {
	duration := flag.Duration("duration", time.Minute, "how long the workload generator runs")
	rate := flag.Float64("rate", 10, "writes per second of the workload generator")
	seed := flag.Uint64("seed", 0, "random seed of the workload (0: from the clock)")
	replicas := flag.Int("replicas", 1, "run the controllers as this many replicas that split the objects (1: one manager, no sharding)")
	leave := flag.Bool("leave", true, "with -replicas above 1, the last replica leaves half-way through the workload")
	flag.Parse()
	if *duration <= 0 || *rate <= 0 {
		fmt.Fprintln(os.Stderr, "demo: -duration and -rate must be positive")
		os.Exit(2)
	}
	if *replicas < 1 || *replicas > maxReplicas {
		fmt.Fprintf(os.Stderr, "demo: -replicas must be between 1 and %d\n", maxReplicas)
		os.Exit(2)
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, options{duration: *duration, rate: *rate, seed: *seed, replicas: *replicas, leave: *leave})
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

// maxReplicas bounds -replicas: every replica is a manager of its own in this process.
const maxReplicas = 8

// options are the command line's.
type options struct {
	duration time.Duration
	rate     float64
	seed     uint64
	replicas int
	leave    bool
}

func run(ctx context.Context, o options) error {
	duration, rate, seed := o.duration, o.rate, o.seed
	sharded := o.replicas > 1
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

	// The three controllers in one manager, or in each of the replicas' managers, each
	// counting its reconciles and queue depth for the progress line.
	totals := []*stats{{name: "sidecar"}, {name: "network"}, {name: "podset"}}
	var reps []*replica
	for i := range o.replicas {
		r, err := newReplica(cfg, fmt.Sprintf("r%d", i), sharded, backendURL, totals)
		if err != nil {
			return err
		}
		reps = append(reps, r)
	}
	ctrlErr := make(chan error, 1)
	started := time.Now()
	runReplicas(runCtx, &wg, reps, ctrlErr)
	// The controllers fill their caches meanwhile.
	held, err := waitCRDCreateHold(ctx, c)
	if err != nil {
		return err
	}
	if held > 0 {
		fmt.Printf("waited %v before the first write: kube-apiserver holds every create of a custom resource for %v after its CRD is established\n",
			held.Round(time.Millisecond), crdCreateHold)
	}
	var replicaViews func() []replicaView
	var initial []replicaView // the split when the workload begins
	if sharded {
		initial, err = waitSplit(ctx, reps)
		if err != nil {
			return err
		}
		printSplit(initial, time.Since(started))
		replicaViews = func() []replicaView { return views(reps) }
	}
	fmt.Printf("controllers running; workload for %v at about %.0f writes/s (-seed %d)\n", duration, rate, seed)
	printInformers(reps)

	inj, netc, psc := waiters(reps)
	w := newWorkload(c, seed, totals, inj, netc, psc)
	genCtx, stopGen := context.WithCancel(runCtx)
	defer stopGen()
	genDone := make(chan error, 1)
	go func() { genDone <- w.run(genCtx, duration, rate) }()

	// The last replica leaves half-way through; the others take its slots.
	var leaveAt <-chan time.Time
	if sharded && o.leave {
		leaveAt = time.After(duration / 2)
	}
	handoffs := make(chan handoff, 1)
	handoffErr := make(chan error, 1)
	var left *handoff
	leaving := false

	fmt.Println("progress columns: sidecar/network/podset; cache lag is from sending a write to the controller's cache holding it")
	p := newProgress(w, replicaViews, os.Stdout, isTerminal(os.Stdout))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for genDone != nil {
		select {
		case <-leaveAt:
			leaveAt, leaving = nil, true
			wg.Go(func() {
				h, err := leaveAndWait(runCtx, reps, reps[len(reps)-1])
				if err != nil {
					handoffErr <- err
					return
				}
				handoffs <- h
			})
		case h := <-handoffs:
			left = &h
			p.end()
			fmt.Println(h)
		case err := <-handoffErr:
			if runCtx.Err() == nil {
				p.end()
				stopGen()
				<-genDone
				w.waitLag()
				return err
			}
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
	checks := []check{checkSidecars, checkNetworks, checkPodSets}
	if sharded {
		if leaving && left == nil {
			// The hand-off finishes before the convergence is checked.
			select {
			case h := <-handoffs:
				left = &h
				fmt.Println(h)
			case err := <-handoffErr:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		checks = append(checks, checkSplit(reps))
	}
	report, err := converge(ctx, c, be, checks)
	if err != nil {
		return err
	}
	fmt.Printf("converged %v after the last write:\n", time.Since(settle).Round(time.Millisecond))
	for _, line := range report {
		fmt.Println("  " + line)
	}
	w.summary()
	if sharded {
		printSummary(reps, initial, left, p.start)
	}
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

// printInformers prints the managers' shared informers and how many controllers use each:
// every replica has the same.
func printInformers(reps []*replica) {
	m := reps[0].m
	infs := m.Informers()
	if len(reps) == 1 {
		fmt.Printf("one manager runs %d controllers on %d shared informers:", len(m.Controllers()), len(infs))
	} else {
		fmt.Printf("each of the %d managers runs %d controllers on %d shared informers:", len(reps), len(m.Controllers()), len(infs))
	}
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
