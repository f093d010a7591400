// Command foo-controller runs Kubernetes' sample-controller on ctrlkit's
// manager (package foo): for every Foo it keeps a Deployment of spec.replicas
// nginx Pods and reports its available replicas.
//
//	go run ./examples/foo-controller -kubeconfig ~/.kube/config -install
//
// Flags: -kubeconfig (default $KUBECONFIG, then ~/.kube/config, then in-cluster),
// -install (create the Foo CRD first; needs the install ClusterRole of rbac.yaml),
// -namespace (one namespace only), -workers, -leader-elect (hold a Lease in
// -leader-elect-namespace before reconciling), -v (log verbosity). It runs until
// SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/examples/foo-controller/foo"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	install := flag.Bool("install", false, "create the Foo CRD before starting")
	namespace := flag.String("namespace", "", "watch only this namespace (default: all)")
	workers := flag.Int("workers", 0, "number of reconcile workers (0: 2)")
	leaderElect := flag.Bool("leader-elect", false, "reconcile only while holding the Lease foo-controller")
	leaseNamespace := flag.String("leader-elect-namespace", "ctrlkit-examples", "namespace of the leader election's Lease")
	verbosity := flag.Int("v", 0, "log verbosity")
	flag.Parse()

	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: *verbosity})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, *kubeconfig, *install, *leaderElect, *leaseNamespace, manager.Config{Logger: log}, foo.Config{Namespace: *namespace, Workers: *workers, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "foo-controller:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig string, install, leaderElect bool, leaseNamespace string, mc manager.Config, fc foo.Config) error {
	cfg, err := manager.LoadRESTConfig(kubeconfig)
	if err != nil {
		return err
	}
	if install {
		if err := foo.Install(ctx, cfg); err != nil {
			return err
		}
		mc.Logger.Info("Foo CRD installed")
	}
	if leaderElect {
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		host, _ := os.Hostname()
		lock := reconcile.NewLeaseLock(kube, leaseNamespace, foo.Name, host+"_"+string(uuid.NewUUID()))
		mc.LeaderElection = &reconcile.LeaderElection{Lock: lock, ReleaseOnCancel: true}
	}
	mc.RESTConfig = cfg
	m, err := manager.New(mc)
	if err != nil {
		return err
	}
	if err := foo.Add(m, fc); err != nil {
		return err
	}
	mc.Logger.Info("running; Ctrl-C to stop")
	if err := m.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	mc.Logger.Info("controller stopped")
	return nil
}
