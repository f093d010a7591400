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
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
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
	cfg, err := restConfig(kubeconfig)
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
	c, err := podset.New(cfg, podset.Options{Workers: workers, Logger: log, Namespace: namespace})
	if err != nil {
		return err
	}
	log.Info("controller running; Ctrl-C to stop")
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("controller stopped")
	return nil
}

// restConfig loads the flag's kubeconfig, else the files $KUBECONFIG lists, else
// ~/.kube/config, else the in-cluster configuration.
func restConfig(path string) (*rest.Config, error) {
	var rules *clientcmd.ClientConfigLoadingRules
	switch env := os.Getenv("KUBECONFIG"); {
	case path != "":
		rules = &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	case env != "":
		path = env
		rules = &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(env)}
	default:
		if home, err := os.UserHomeDir(); err == nil {
			if p := filepath.Join(home, ".kube", "config"); fileExists(p) {
				path = p
				rules = &clientcmd.ClientConfigLoadingRules{ExplicitPath: p}
			}
		}
	}
	if rules == nil {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no kubeconfig (-kubeconfig, $KUBECONFIG or ~/.kube/config) and not in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
