// Command controlplane builds the etcd and kube-apiserver binaries that testenv runs, with
// testenv.Build, and prints the folder that holds them. From any module that requires ctrlkit:
//
//	go run github.com/ctrlkit/ctrlkit/testenv/cmd/controlplane
//
// builds them into the folder testenv.Start searches by default (or into
// $CTRLKIT_CONTROLPLANE_BIN when that is set, or into the folder given with -dir). It is a
// no-op when they are there already. Progress goes to standard error: a first build takes
// 3 to 20 minutes on 2 cores; with a warm Go build cache, later builds only link, in about a
// minute. The folder is the only thing printed on standard output, so
//
//	export CTRLKIT_CONTROLPLANE_BIN=$(go run github.com/ctrlkit/ctrlkit/testenv/cmd/controlplane)
//
// works too.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ctrlkit/ctrlkit/testenv"
)

func main() {
	dir := flag.String("dir", "", "folder to build into (default $"+testenv.BinEnv+", else the user cache folder testenv.Start searches)")
	quiet := flag.Bool("q", false, "print no progress, only the folder or the error")
	interval := flag.Duration("progress", 15*time.Second, "time between two progress lines")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: controlplane [-dir folder] [-q] [-progress interval]\n\n"+
			"Builds etcd %s and kube-apiserver %s for testenv and prints their folder.\n\n", testenv.EtcdVersion, testenv.KubernetesVersion)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	cfg := testenv.BuildConfig{Dir: *dir, Progress: os.Stderr, ProgressInterval: *interval}
	if *quiet {
		cfg.Progress = io.Discard
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run builds the binaries and prints their folder. SIGINT and SIGTERM cancel the build.
func run(cfg testenv.BuildConfig) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := testenv.Build(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Println(dir)
	return nil
}
