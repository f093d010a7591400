package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// binKind names one of the test binaries the suite runs.
type binKind int

const (
	binRoot      binKind = iota // package bench of the root module
	binE2E                      // the same, built with -tags e2e (BenchmarkServerInformerSync)
	binCR                       // bench/controllerruntime, its own module
	binCRLatency                // bench/controllerruntime/latency, built with -tags e2e
	binCRMany                   // bench/controllerruntime/manyctl, built with -tags e2e
	binCRRYW                    // bench/controllerruntime/rywcost, built with -tags e2e
)

// crE2EDirs are the directories, under bench/controllerruntime, of the binaries
// built with -tags e2e from that module.
var crE2EDirs = map[binKind]string{binCRLatency: "latency", binCRMany: "manyctl", binCRRYW: "rywcost"}

// invocation is one run of a test binary: which benchmarks, for how long.
type invocation struct {
	bench     string // -test.bench
	benchtime string // -test.benchtime
}

// phase is a group of invocations whose outputs go, concatenated, to one raw file.
//
// A phase runs in rounds: each round runs every invocation once with -test.count 1,
// in a new process, so that ctrlkit and its baseline run back to back in every
// round and a change of the machine's load hits both sides alike (with -count N
// in one process Go runs the N rounds of one side before the other's). A phase
// with inProcess set runs its rounds with -test.count N in one process instead,
// for a setup too costly to repeat (the control plane and its objects).
type phase struct {
	name      string // raw/<name>.txt
	bin       binKind
	prefix    string // prepended to the cases of this file when parsing
	runs      []invocation
	rounds    int
	inProcess bool
	series    bool // set CTRLKIT_BENCH_SERIES for it
	// roundsEnv, for an inProcess phase whose benchmark runs its rounds itself
	// (naming each round=N), is the variable that tells it how many: it then
	// runs with -test.count 1.
	roundsEnv string
}

// profileRun is a benchmark run under the CPU and memory profilers.
type profileRun struct {
	name      string // raw/profile-<name>.{txt,cpu.pprof,mem.pprof}
	title     string
	bench     string
	benchtime string
}

// suite returns the phases of a full or a short run. The -benchtime of each
// benchmark is chosen so that the full suite, before the shard and latency phases,
// fits in about 36 minutes on a 2-core machine (10 rounds of the in-memory phases,
// 5 of the others; see fullRounds) and the short one in 2 minutes (1 round, -short
// inputs).
func suite(short bool) ([]phase, []profileRun) {
	rounds := 5
	fast, addAfter, heavy, reconcile, once, wire := "300ms", "1000000x", "3x", "3x", "10x", "2x"
	// passes of the root module's BenchmarkReconcileThroughput (about 30 ms each for
	// ctrlkit, 60 ms for client-go): enough that the first passes of a process, on a
	// heap still growing, do not decide the row.
	passes := "10x"
	if short {
		rounds = 1
		fast, addAfter, heavy, reconcile, once, passes, wire = "100ms", "100000x", "1x", "1x", "2x", "1x", "1x"
	}
	one := func(bench, benchtime string) invocation { return invocation{bench, benchtime} }
	phases := []phase{
		{name: "workqueue", bin: binRoot, runs: []invocation{
			one("^BenchmarkWorkqueueAddGetDone$", fast),
			one("^BenchmarkWorkqueueAddAfter$", addAfter),
			one("^BenchmarkWorkqueueAddAfter(Long|Mixed)$", addAfter),
			one("^BenchmarkWorkqueueDedup$", fast),
			one("^BenchmarkWorkqueue(Struct|Pointer)Items$", fast),
			one("^BenchmarkWorkqueue(Serial|OneAtATime)$", fast),
			one("^BenchmarkWorkqueue(Metrics|Fairness)$", fast),
			one("^BenchmarkWorkqueueAddRateLimited$", fast),
			one("^BenchmarkWorkqueueOtherShapes$", fast),
			one("^BenchmarkWorkqueueRequeue$", fast),
			one("^BenchmarkWorkqueueAddDistinct$", addAfter),
			one("^BenchmarkWorkqueueWaitingMemory$", "1x"),
			one("^BenchmarkWorkqueueCancelWaitingGets$", heavy),
		}},
		{name: "indexer", bin: binRoot, runs: []invocation{
			one("^BenchmarkIndexer(Add|Update|UpdateMove|Delete|ByIndex|ByIndexChanging|Shapes|ManyValues|GetAbsent|GetRandom)$", fast),
			one("^BenchmarkIndexerReplace$", heavy),
			one("^BenchmarkIndexerMemory$", "1x"),
			one("^BenchmarkIndexerReads$", fast),
			one("^BenchmarkIndexerListKeysOnce(Long|Cluster)?$", once),
		}},
		// Indexer shapes of their own: an index added to a full store, one
		// namespace holding every object, churn.
		{name: "indexershapes", bin: binRoot, runs: []invocation{
			one("^BenchmarkIndexer(OneNamespace|Churn)$", fast),
			one("^BenchmarkIndexerAddIndexes$", heavy),
		}},
		{name: "deltafifo", bin: binRoot, runs: []invocation{
			one("^BenchmarkDeltaFIFOThroughput$", fast),
			one("^BenchmarkDeltaFIFOHotKeys$", fast),
			one("^BenchmarkDeltaFIFORelist$", heavy),
		}},
		{name: "informer", bin: binRoot, runs: []invocation{
			one("^BenchmarkInformerEvents$", fast),
			one("^BenchmarkInformerInitialList$", fast),
		}},
		// The list-watch path behind an httptest server, and informer shapes of
		// their own (bookmarks, relists, a slow handler, a late handler, resync).
		{name: "wire", bin: binRoot, runs: []invocation{
			one("^BenchmarkWire(Sync|Watch)$", wire),
		}},
		{name: "shapes", bin: binRoot, runs: []invocation{
			one("^BenchmarkShape", "1x"),
		}},
		{name: "reconcile", bin: binRoot, runs: []invocation{
			one("^BenchmarkReconcileThroughput$", passes),
		}},
		{name: "resync", bin: binRoot, series: true, runs: []invocation{
			one("^BenchmarkResyncQueueDepth$", "1x"),
		}},
		{name: "controllerruntime", bin: binCR, prefix: "CR", runs: []invocation{
			one("^BenchmarkReconcileThroughput$", reconcile),
			one("^BenchmarkReconcileOutcomes$", "1x"),
			one("^BenchmarkMapperSources$", "1x"),
			one("^BenchmarkPriorityQueue(AddGetDone|AddOnly|AddLockContended|DistinctPriorities)$", fast),
			one("^BenchmarkPriorityQueueManyWorkers$", "1x"),
		}},
		{name: "server", bin: binE2E, series: true, inProcess: true, runs: []invocation{
			// One process: the scale curve grows its own namespace on the control
			// plane that the sync benchmark started.
			one("^BenchmarkServerInformer(Sync|Scale)$", "1x"),
		}},
		{name: "shard", bin: binE2E, inProcess: true, runs: []invocation{
			one("^BenchmarkShardScale$", "1x"),
		}},
		// 1, 10 and 30 controllers in one manager on shared informers, ctrlkit's
		// and controller-runtime's, rotated round by round inside the process.
		{name: "manyctl", bin: binCRMany, prefix: "CR", inProcess: true, runs: []invocation{
			one("^BenchmarkManyControllers$", "1x"),
		}},
		// Read-your-writes on controllers that write, ctrlkit's and
		// controller-runtime's, with and without it; the benchmark runs its
		// rounds itself, the sides rotated from round to round.
		{name: "rywcost", bin: binCRRYW, prefix: "CR", inProcess: true, roundsEnv: "CTRLKIT_RYWCOST_ROUNDS", runs: []invocation{
			one("^BenchmarkRYWCost$", "1x"),
		}},
		// Alternates ctrlkit and controller-runtime round by round inside the
		// process (see BenchmarkE2ELatency), then runs both at once on the same
		// writes (BenchmarkE2ELatencyPaired); a round of both at the three rates
		// takes about 150 s (about 60 s short).
		{name: "latency", bin: binCRLatency, prefix: "CR", inProcess: true, runs: []invocation{
			one("^BenchmarkE2ELatency$", "1x"),
			one("^BenchmarkE2ELatencyPaired$", "1x"),
		}},
	}
	for i := range phases {
		phases[i].rounds = rounds
		if !short {
			phases[i].rounds = fullRounds(phases[i])
		}
	}
	profTime := "2s"
	if short {
		profTime = "300ms"
	}
	profiles := []profileRun{
		{name: "informer", title: "informer pipeline (BenchmarkInformerEvents/handlers=1/impl=ctrlkit)", bench: "^BenchmarkInformerEvents$/^handlers=1$/^impl=ctrlkit$", benchtime: profTime},
		{name: "workqueue", title: "work queue Add/Get/Done (BenchmarkWorkqueueAddGetDone/p4w4k1000/impl=ctrlkit)", bench: "^BenchmarkWorkqueueAddGetDone$/^p4w4k1000$/^impl=ctrlkit$", benchtime: profTime},
	}
	return phases, profiles
}

// latencyRounds is the latency phase's -count in a full run: 5 rounds, as the
// other phases against a control plane, so that its rows get confidence intervals
// (about 10 minutes).
const latencyRounds = 5

// microRounds is the rounds of a full run's phases that run in memory, each round
// in a new process. With 5 rounds the confidence interval of a median is the
// range of the rounds (93.75%), so one round slowed by a neighbour on the shared
// machine widens it to that round; with 10, the 95% interval runs from the second
// smallest to the second largest, and one such round no longer decides it.
const microRounds = 10

// fullRounds is the rounds of phase p in a full run: microRounds for the phases in
// memory, 5 for those against a control plane (started and filled once per
// process, which a round of the in-memory phases is not) and for resync and the
// informer shapes, whose one sample a round takes seconds (resync, relists after
// client-go's backoff).
func fullRounds(p phase) int {
	switch {
	case p.name == "latency":
		return latencyRounds
	case p.inProcess || p.series, p.name == "shapes":
		return 5
	}
	return microRounds
}

// runner builds the test binaries and runs phases.
type runner struct {
	root   string // the repository root
	work   string // a temporary directory for the binaries
	rawDir string
	short  bool
	log    io.Writer
}

func (r *runner) benchDir(b binKind) string {
	switch b {
	case binCR:
		return filepath.Join(r.root, "bench", "controllerruntime")
	}
	if d, ok := crE2EDirs[b]; ok {
		return filepath.Join(r.root, "bench", "controllerruntime", d)
	}
	return filepath.Join(r.root, "bench")
}

func (r *runner) binPath(b binKind) string {
	return filepath.Join(r.work, [...]string{"bench.test", "bench-e2e.test", "controllerruntime.test", "latency-e2e.test", "manyctl-e2e.test", "rywcost-e2e.test"}[b])
}

// build compiles the test binaries.
func (r *runner) build(ctx context.Context) error {
	for _, b := range []binKind{binRoot, binE2E, binCR, binCRLatency, binCRMany, binCRRYW} {
		args := []string{"test", "-c", "-o", r.binPath(b)}
		if _, crE2E := crE2EDirs[b]; b == binE2E || crE2E {
			args = append(args, "-tags", "e2e")
		}
		args = append(args, ".")
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = r.benchDir(b)
		cmd.Stdout, cmd.Stderr = r.log, r.log
		fmt.Fprintf(r.log, "report: (cd %s && go %s)\n", cmd.Dir, strings.Join(args, " "))
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("report: building %s: %w", r.binPath(b), err)
		}
	}
	return nil
}

// testArgs are the flags of one benchmark run.
func (r *runner) testArgs(inv invocation, count int) []string {
	args := []string{"-test.run", "^$", "-test.bench", inv.bench, "-test.benchmem",
		"-test.benchtime", inv.benchtime, "-test.count", strconv.Itoa(count), "-test.timeout", "30m"}
	if r.short {
		args = append(args, "-test.short")
	}
	return args
}

// job is one process: an invocation and its -test.count.
type job struct {
	inv   invocation
	count int
	round int // the round's index, given to the process in roundEnv
}

// roundEnv tells a benchmark process which round it runs (0, 1, ...), for a
// benchmark that alternates the side it times first from round to round.
const roundEnv = "CTRLKIT_BENCH_ROUND"

// phaseJobs returns the processes of a phase in order: round after round of every
// invocation with count 1, or each invocation once with count rounds if inProcess.
func phaseJobs(p phase) []job {
	var jobs []job
	if p.inProcess {
		count := p.rounds
		if p.roundsEnv != "" {
			count = 1
		}
		for _, inv := range p.runs {
			jobs = append(jobs, job{inv, count, 0})
		}
		return jobs
	}
	for round := range p.rounds {
		for _, inv := range p.runs {
			jobs = append(jobs, job{inv, 1, round})
		}
	}
	return jobs
}

// runPhase runs every invocation of p, writing the outputs to raw/<name>.txt and to
// the log. It goes on after a failed invocation and returns the first error.
func (r *runner) runPhase(ctx context.Context, p phase, seriesDir string) (time.Duration, error) {
	start := time.Now()
	f, err := os.Create(filepath.Join(r.rawDir, p.name+".txt"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var first error
	for _, j := range phaseJobs(p) {
		inv := j.inv
		args := r.testArgs(inv, j.count)
		cmd := exec.CommandContext(ctx, r.binPath(p.bin), args...)
		cmd.Dir = r.benchDir(p.bin)
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", roundEnv, j.round))
		if p.series {
			cmd.Env = append(cmd.Env, "CTRLKIT_BENCH_SERIES="+seriesDir)
		}
		if p.roundsEnv != "" {
			cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", p.roundsEnv, p.rounds))
		}
		// Only stdout goes to the raw file: library logs on stderr (klog) could otherwise
		// land in the middle of a result line and lose it.
		cmd.Stdout = io.MultiWriter(f, r.log)
		cmd.Stderr = r.log
		fmt.Fprintf(r.log, "report: %s %s\n", filepath.Base(r.binPath(p.bin)), strings.Join(args, " "))
		if err := cmd.Run(); err != nil && first == nil {
			first = fmt.Errorf("report: %s: %s: %w", p.name, inv.bench, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return time.Since(start), first
}

// runProfile runs one profiled benchmark.
func (r *runner) runProfile(ctx context.Context, p profileRun) error {
	out, err := os.Create(filepath.Join(r.rawDir, "profile-"+p.name+".txt"))
	if err != nil {
		return err
	}
	defer out.Close()
	args := append(r.testArgs(invocation{p.bench, p.benchtime}, 1),
		"-test.cpuprofile", filepath.Join(r.rawDir, "profile-"+p.name+".cpu.pprof"),
		"-test.memprofile", filepath.Join(r.rawDir, "profile-"+p.name+".mem.pprof"))
	cmd := exec.CommandContext(ctx, r.binPath(binRoot), args...)
	cmd.Dir = r.benchDir(binRoot)
	cmd.Stdout = io.MultiWriter(out, r.log)
	cmd.Stderr = cmd.Stdout
	fmt.Fprintf(r.log, "report: bench.test %s\n", strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("report: profile %s: %w", p.name, err)
	}
	return nil
}
