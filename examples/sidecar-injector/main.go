// Command sidecar-injector injects the sidecar defined in a ConfigMap into the pod
// template of every Deployment annotated sidecar.ctrlkit.dev/inject: "true", and takes
// it out again when the annotation goes. See README.md and package injector.
//
//	go run ./examples/sidecar-injector -kubeconfig ~/.kube/config
//
// It runs until SIGINT or SIGTERM.
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
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ctrlkit/ctrlkit/examples/sidecar-injector/injector"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the in-cluster config)")
	cmNamespace := flag.String("config-namespace", injector.DefaultConfigNamespace, "namespace of the sidecar ConfigMap")
	cmName := flag.String("config-name", injector.DefaultConfigName, "name of the sidecar ConfigMap (data key "+injector.ConfigKey+")")
	namespace := flag.String("namespace", "", "watch the Deployments of this namespace only (default: all namespaces)")
	workers := flag.Int("workers", injector.DefaultWorkers, "number of Deployments patched at once")
	verbosity := flag.Int("v", 0, "log verbosity (1 logs every patch)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, injector.Options{
		Workers:         *workers,
		ConfigNamespace: *cmNamespace,
		ConfigName:      *cmName,
		Namespace:       *namespace,
		Logger: funcr.New(func(prefix, args string) {
			fmt.Fprintln(os.Stderr, prefix, args)
		}, funcr.Options{Verbosity: *verbosity}),
	}); err != nil {
		fmt.Fprintln(os.Stderr, "sidecar-injector:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig string, opts injector.Options) error {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return err
	}
	if err := injector.Install(ctx, cfg); err != nil {
		return err
	}
	c, err := injector.New(cfg, opts)
	if err != nil {
		return err
	}
	opts.Logger.Info("running", "configMap", opts.ConfigNamespace+"/"+opts.ConfigName, "namespace", opts.Namespace)
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	opts.Logger.Info("stopped")
	return nil
}

// restConfig loads the -kubeconfig file if given; otherwise $KUBECONFIG, then
// ~/.kube/config, then the in-cluster configuration.
func restConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	return cfg, nil
}
