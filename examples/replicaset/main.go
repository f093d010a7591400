// Command replicaset runs the PodSet controller (package podset) against a cluster:
// it keeps spec.replicas Pods for every PodSet, like the ReplicaSet controller.
//
//	go run ./examples/replicaset -kubeconfig ~/.kube/config -install
//
// Flags: -kubeconfig (default $KUBECONFIG, then ~/.kube/config, then the in-cluster
// configuration), -install (create the PodSet CRD first; needs the Install
// ClusterRole of rbac.yaml), -namespace (watch one namespace only), -workers, -v
// (log verbosity). It runs until SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr/funcr"

	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
	"github.com/ctrlkit/ctrlkit/manager"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	install := flag.Bool("install", false, "create the PodSet CRD before starting (needs the Install ClusterRole)")
	namespace := flag.String("namespace", "", "watch only this namespace (default: all)")
	workers := flag.Int("workers", 0, "number of reconcile workers (0: default)")
	verbosity := flag.Int("v", 0, "log verbosity")
	flag.Parse()

	if err := run(*kubeconfig, *install, *namespace, *workers, *verbosity); err != nil {
		fmt.Fprintln(os.Stderr, "replicaset:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string, install bool, namespace string, workers, verbosity int) error {
	cfg, err := manager.LoadRESTConfig(kubeconfig)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: verbosity})
	if install {
		if err := podset.Install(ctx, cfg); err != nil {
			return err
		}
		log.Info("PodSet CRD installed")
	}
	m, err := manager.New(manager.Config{RESTConfig: cfg, Logger: log})
	if err != nil {
		return err
	}
	if _, err := podset.New(m, podset.Options{Workers: workers, Logger: log, Namespace: namespace}); err != nil {
		return err
	}
	log.Info("controller running; Ctrl-C to stop")
	if err := m.Run(ctx); err != nil {
		return err
	}
	log.Info("controller stopped")
	return nil
}
