// Command report runs ctrlkit's benchmark suite (package bench, its e2e-tagged
// server benchmark and bench/controllerruntime) side by side with client-go and
// controller-runtime, keeps the raw `go test -bench` outputs, and writes a
// Markdown report: the machine, a table of ratios ctrlkit/baseline with medians and
// confidence intervals (golang.org/x/perf/benchmath, as benchstat), PNG charts
// (gonum.org/v1/plot) and the top CPU and allocation functions of ctrlkit code from
// pprof profiles.
//
// Run it through the Makefile: `make bench` (full, about 15 minutes on 2 cores) or
// `make bench-short` (about 2 minutes). By hand, from bench/report:
//
//	go run . [-short] [-norun] [-only regexp]
//
// A full run writes bench/RESULTS.md, bench/results/*.png and bench/results/raw/;
// a short run writes the same under bench/results/short/. -norun regenerates the
// report from the raw files already there.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// layout is where a run's files go.
type layout struct {
	root      string // repository root
	report    string // the Markdown report
	outDir    string // charts
	rawDir    string // raw outputs and profiles
	seriesDir string // time series CSV
}

func newLayout(root string, short bool) layout {
	bench := filepath.Join(root, "bench")
	l := layout{root: root, report: filepath.Join(bench, "RESULTS.md"), outDir: filepath.Join(bench, "results")}
	if short {
		l.outDir = filepath.Join(bench, "results", "short")
		l.report = filepath.Join(l.outDir, "RESULTS.md")
	}
	l.rawDir = filepath.Join(l.outDir, "raw")
	l.seriesDir = filepath.Join(l.rawDir, "series")
	return l
}

func run() error {
	var (
		rootFlag = flag.String("root", "../..", "the repository root")
		short    = flag.Bool("short", false, "quick run: 1 round, -short inputs, report under bench/results/short")
		norun    = flag.Bool("norun", false, "do not run benchmarks; regenerate the report from the raw files")
		only     = flag.String("only", "", "run only the phases (and profiles) whose name matches this regexp")
	)
	flag.Parse()
	root, err := filepath.Abs(*rootFlag)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "bench", "doc.go")); err != nil {
		return fmt.Errorf("report: %s is not the ctrlkit repository root (use -root): %w", root, err)
	}
	var onlyRE *regexp.Regexp
	if *only != "" {
		if onlyRE, err = regexp.Compile(*only); err != nil {
			return fmt.Errorf("report: -only: %w", err)
		}
	}
	l := newLayout(root, *short)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	var runErr error
	if !*norun {
		runErr = runSuite(ctx, l, *short, onlyRE)
		if ctx.Err() != nil {
			return fmt.Errorf("report: interrupted: %w", ctx.Err())
		}
	}
	rep, err := loadReport(l, *short)
	if err != nil {
		return errors.Join(runErr, err)
	}
	if err := writeReport(l, rep); err != nil {
		return errors.Join(runErr, err)
	}
	fmt.Printf("report: wrote %s\n", l.report)
	return runErr
}

// runSuite builds the binaries, runs every phase and profile and records the
// machine and the timings in raw/machine.txt.
func runSuite(ctx context.Context, l layout, short bool, only *regexp.Regexp) error {
	start := time.Now()
	for _, d := range []string{l.rawDir, l.seriesDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	work, err := os.MkdirTemp("", "ctrlkit-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	r := &runner{root: l.root, work: work, rawDir: l.rawDir, short: short, log: os.Stdout}
	m := probeMachine(ctx, start)
	m.loadStart = loadAvg()
	if err := r.build(ctx); err != nil {
		return err
	}
	phases, profiles := suite(short)
	var errs []error
	for _, p := range phases {
		if only != nil && !only.MatchString(p.name) {
			continue
		}
		d, err := r.runPhase(ctx, p, l.seriesDir)
		m.phases = append(m.phases, phaseTime{p.name, d, err})
		errs = append(errs, err)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	for _, p := range profiles {
		if only != nil && !only.MatchString("profile-"+p.name) {
			continue
		}
		t0 := time.Now()
		err := r.runProfile(ctx, p)
		m.phases = append(m.phases, phaseTime{"profile-" + p.name, time.Since(t0), err})
		errs = append(errs, err)
	}
	m.loadEnd = loadAvg()
	m.wall = time.Since(start)
	if only != nil {
		// Keep the record of the phases this partial run left alone.
		m.note = "partial run (-only " + only.String() + "): the wall time is this run's; other phases are from an earlier run"
		if old, err := readMachine(filepath.Join(l.rawDir, "machine.txt")); err == nil {
			var kept []phaseTime
			for _, p := range old.phases {
				if !only.MatchString(strings.TrimPrefix(p.name, "profile-")) && !only.MatchString(p.name) {
					kept = append(kept, p)
				}
			}
			m.phases = append(kept, m.phases...)
		}
	}
	if err := m.write(filepath.Join(l.rawDir, "machine.txt")); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
