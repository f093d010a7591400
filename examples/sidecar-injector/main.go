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
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr/funcr"

	"github.com/ctrlkit/ctrlkit/examples/sidecar-injector/injector"
	"github.com/ctrlkit/ctrlkit/manager"
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
	cfg, err := manager.LoadRESTConfig(kubeconfig)
	if err != nil {
		return err
	}
	if err := injector.Install(ctx, cfg); err != nil {
		return err
	}
	m, err := manager.New(manager.Config{RESTConfig: cfg, Logger: opts.Logger})
	if err != nil {
		return err
	}
	if _, err := injector.New(m, opts); err != nil {
		return err
	}
	opts.Logger.Info("running", "configMap", opts.ConfigNamespace+"/"+opts.ConfigName, "namespace", opts.Namespace)
	if err := m.Run(ctx); err != nil {
		return err
	}
	opts.Logger.Info("stopped")
	return nil
}
