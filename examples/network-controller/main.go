// Command network-controller runs the Network controller of seed 002 against any
// cluster: it reconciles samplecrd.k8s.io/v1 Networks against the network backend of
// package backend.
//
//	go run ./examples/network-controller -kubeconfig ~/.kube/config -install
//
// Without -backend it also runs a backend in-process on 127.0.0.1, keeping its state
// in -state-dir, and prints its URL. It runs until SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/ctrlkit/ctrlkit/examples/network-controller/backend"
	"github.com/ctrlkit/ctrlkit/examples/network-controller/network"
	"github.com/ctrlkit/ctrlkit/manager"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig; default $KUBECONFIG, then ~/.kube/config, then the in-cluster config")
	namespace := flag.String("namespace", "", "reconcile the Networks of this namespace only (default: all namespaces)")
	backendURL := flag.String("backend", "", "URL of a running network backend; empty runs one in-process on -listen")
	listen := flag.String("listen", "127.0.0.1:0", "address of the in-process backend")
	stateDir := flag.String("state-dir", defaultStateDir(), "state directory of the in-process backend (made readable by this user only)")
	install := flag.Bool("install", false, "install the Network CRD first (needs the rights of the Install ClusterRole)")
	workers := flag.Int("workers", network.DefaultWorkers, "number of reconcile workers")
	sweep := flag.Duration("orphan-sweep", network.DefaultOrphanSweepPeriod, "how often the backend is searched for orphaned networks")
	verbose := flag.Bool("v", false, "verbose logs")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.Level(-1) // logr's V(1)
	}
	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, log, *kubeconfig, *install, *backendURL, *listen, *stateDir, network.Options{
		Workers: *workers, Logger: log, Namespace: *namespace, OrphanSweepPeriod: *sweep,
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "network-controller:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log logr.Logger, kubeconfig string, install bool, backendURL, listen, stateDir string, opts network.Options) error {
	cfg, err := manager.LoadRESTConfig(kubeconfig)
	if err != nil {
		return err
	}
	if install {
		if err := network.Install(ctx, cfg); err != nil {
			return err
		}
		log.Info("CRD installed", "crd", network.CRDName)
	}
	backendDone := make(chan error, 1)
	if backendURL == "" {
		if stateDir == "" {
			return errors.New("no user cache directory: give -state-dir")
		}
		srv, err := backend.New(stateDir)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return err
		}
		backendURL = "http://" + ln.Addr().String()
		ctx, cancel := context.WithCancel(ctx)
		defer func() {
			cancel()
			if err := <-backendDone; err != nil {
				log.Error(err, "backend")
			}
		}()
		go func() { backendDone <- srv.Serve(ctx, ln) }()
		log.Info("backend running", "url", backendURL, "state", filepath.Join(stateDir, backend.StateFile))
	}
	opts.BackendURL = backendURL
	m, err := manager.New(manager.Config{RESTConfig: cfg, Logger: log})
	if err != nil {
		return err
	}
	if _, err := network.New(m, opts); err != nil {
		return err
	}
	log.Info("controller running", "namespace", opts.Namespace, "backend", backendURL)
	start := time.Now()
	err = m.Run(ctx)
	log.Info("controller stopped", "ran", time.Since(start).Round(time.Second))
	return err
}

// defaultStateDir is the in-process backend's state directory: in the user's own
// cache directory, never in the shared temporary directory, where another user could
// plant or read it.
func defaultStateDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "" // -state-dir is then required
	}
	return filepath.Join(dir, "ctrlkit", "network-backend")
}
