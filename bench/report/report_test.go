package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lines repeats a benchmark line once per value, with the value in the %v slot.
func lines(format string, values ...float64) string {
	var sb strings.Builder
	for _, v := range values {
		sb.WriteString(strings.ReplaceAll(format, "%v", strconv.FormatFloat(v, 'g', -1, 64)) + "\n")
	}
	return sb.String()
}

// The fixture: each case with 5 rounds per side, so that the confidence interval
// of a median is [min, max] (93.75%).
var fixture = "goos: linux\ngoarch: amd64\npkg: github.com/ctrlkit/ctrlkit/bench\ncpu: Test CPU\n" +
	// met: ratio 0.25, bounds 99/410 .. 102/395
	lines("BenchmarkWorkqueueAddGetDone/p4w4k1000/impl=ctrlkit-2 \t 1000\t %v ns/op\t 0 B/op\t 0 allocs/op", 100, 101, 102, 99, 100) +
	lines("BenchmarkWorkqueueAddGetDone/p4w4k1000/impl=clientgo-2 \t 1000\t %v ns/op\t 30 B/op\t 0 allocs/op", 400, 410, 405, 395, 400) +
	// a variant that no row uses
	lines("BenchmarkWorkqueueAddGetDone/p4w4k1000/impl=ctrlkit-nokeep-2 \t 1000\t %v ns/op\t 0 B/op\t 0 allocs/op", 300, 300, 300, 300, 300) +
	// borderline: median ratio 0.5, upper bound 210/395 > 0.5
	lines("BenchmarkIndexerAdd/impl=ctrlkit-2 \t 1000\t %v ns/op\t 300 B/op\t 3 allocs/op", 195, 200, 200, 205, 210) +
	lines("BenchmarkIndexerAdd/impl=client-go-2 \t 1000\t %v ns/op\t 370 B/op\t 3 allocs/op", 395, 400, 400, 405, 410) +
	// not met, higher is better: 150k/100k = 1.5 < 2
	lines("BenchmarkInformerEvents/handlers=1/impl=ctrlkit-2 \t 1000\t 6600 ns/op\t %v events/s\t 216 B/op\t 3 allocs/op", 150000, 151000, 149000, 150000, 150500) +
	lines("BenchmarkInformerEvents/handlers=1/impl=client-go-2 \t 1000\t 10000 ns/op\t %v events/s\t 792 B/op\t 11 allocs/op", 100000, 99000, 101000, 100000, 100500) +
	// custom MB units: peak-MB is tidied to peak-B by benchfmt
	lines("BenchmarkIndexerReplace/initial/impl=ctrlkit-2 \t 10\t 80000000 ns/op\t %v peak-MB", 14.8, 14.9, 14.7, 14.8, 15.0) +
	lines("BenchmarkIndexerReplace/initial/impl=client-go-2 \t 10\t 350000000 ns/op\t %v peak-MB", 31.6, 31.0, 32.0, 31.5, 31.7) +
	// relUnitMax: heap-MB against objects-MB of the same side
	lines("BenchmarkServerInformerSync/impl=ctrlkit-2 \t 1\t 3000000000 ns/op\t %v heap-MB\t 10.2 objects-MB", 10.0, 10.1, 10.0, 9.9, 10.4) +
	"BenchmarkNoImplementation-2 \t 1000\t 5 ns/op\n" +
	"--- BENCH: a log line that is not a result\n"

func TestSplitName(t *testing.T) {
	for _, tc := range []struct {
		full, c, impl string
		ok            bool
	}{
		{"BenchmarkWorkqueueAddGetDone/p4w4k1000/impl=clientgo-2", "WorkqueueAddGetDone/p4w4k1000", "client-go", true},
		{"BenchmarkWorkqueueAddGetDone/p4w4k1000/impl=ctrlkit-nokeep-2", "WorkqueueAddGetDone/p4w4k1000", "ctrlkit-nokeep", true},
		{"BenchmarkDeltaFIFOThroughput/impl=client-go-atomic-2", "DeltaFIFOThroughput", "client-go-atomic", true},
		{"BenchmarkInformerEvents/handlers=10/impl=ctrlkit", "InformerEvents/handlers=10", "ctrlkit", true},
		// bench/controllerruntime: the side is a plain part
		{"BenchmarkReconcileThroughput/controller-runtime/workers=8-2", "ReconcileThroughput/workers=8", "controller-runtime", true},
		{"BenchmarkReconcileThroughput/ctrlkit/workers=1-16", "ReconcileThroughput/workers=1", "ctrlkit", true},
		{"BenchmarkNoImplementation-2", "NoImplementation", "", false},
		// rounds run inside one process are samples of one case
		{"BenchmarkRYWCost/round=3/shape=steps/impl=ctrlkit-ryw-2", "RYWCost/shape=steps", "ctrlkit-ryw", true},
		{"BenchmarkX/round=x/impl=ctrlkit", "X/round=x", "ctrlkit", true},
	} {
		c, impl, ok := splitName(tc.full)
		if string(c) != tc.c || impl != tc.impl || ok != tc.ok {
			t.Errorf("splitName(%q) = %q, %q, %v; want %q, %q, %v", tc.full, c, impl, ok, tc.c, tc.impl, tc.ok)
		}
	}
}

func parseFixture(t *testing.T) samples {
	t.Helper()
	s := samples{}
	cfg, err := parseBench(s, strings.NewReader(fixture), "fixture.txt", "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg["cpu"] != "Test CPU" {
		t.Errorf("config cpu = %q, want %q", cfg["cpu"], "Test CPU")
	}
	return s
}

func TestParseBench(t *testing.T) {
	s := parseFixture(t)
	if got := s["WorkqueueAddGetDone/p4w4k1000"]["client-go"]["sec/op"]; len(got) != 5 || math.Abs(got[0]-400e-9) > 1e-15 {
		t.Errorf("client-go sec/op = %v, want 5 values starting at 400e-9", got)
	}
	if got := s["IndexerReplace/initial"]["ctrlkit"]["peak-B"]; len(got) != 5 || math.Abs(got[0]-14.8e6) > 1 {
		t.Errorf("ctrlkit peak-B = %v, want 5 values starting at 14.8e6", got)
	}
	if _, ok := s["NoImplementation"]; ok {
		t.Error("a benchmark without an implementation was kept")
	}
	if got := len(s["WorkqueueAddGetDone/p4w4k1000"]); got != 3 {
		t.Errorf("%d implementations of WorkqueueAddGetDone/p4w4k1000, want 3", got)
	}
	// The prefix keeps same-named benchmarks of another package apart.
	cr := samples{}
	if _, err := parseBench(cr, strings.NewReader("BenchmarkReconcileThroughput/ctrlkit/workers=1-2 \t 3\t 100 ns/op\t 5 ns/key\n"), "cr.txt", "CR"); err != nil {
		t.Fatal(err)
	}
	if got := cr["CRReconcileThroughput/workers=1"]["ctrlkit"]["sec/key"]; len(got) != 1 || math.Abs(got[0]-5e-9) > 1e-18 {
		t.Errorf("CR sec/key = %v, want [5e-9]", got)
	}
	// A latency metric in ns is tidied to sec, judged against an absolute bound and
	// shown in the unit that fits.
	pq := samples{}
	in := lines("BenchmarkPriorityQueueManyWorkers/ctrlkit/workers=1000-2 \t 1\t 500000000 ns/op\t %v add-p99-ns\t 520 ns/item", 600, 450, 700, 520, 610) +
		lines("BenchmarkPriorityQueueManyWorkers/controller-runtime/workers=1000-2 \t 1\t 4000000000 ns/op\t %v add-p99-ns\t 4000 ns/item", 500, 11000, 400, 600, 700)
	if _, err := parseBench(pq, strings.NewReader(in), "pq.txt", "CR"); err != nil {
		t.Fatal(err)
	}
	c := caseKey("CRPriorityQueueManyWorkers/workers=1000")
	p99 := evaluate(pq, row{c: c, base: "controller-runtime", unit: "add-p99-sec", target: target{kind: absMax, value: 10e-6}})
	if math.Abs(p99.ck.center-600e-9) > 1e-15 || p99.status != statusMet {
		t.Errorf("add-p99: median %v status %v, want 600e-9 met", p99.ck.center, p99.status)
	}
	if got := formatSummary(p99.unit, p99.ck); got != "600 add-p99-ns ±25%" {
		t.Errorf("formatSummary(add-p99) = %q", got)
	}
	if got := unitLabel("add-p99-sec", 12e-6); got != "add-p99-µs" {
		t.Errorf("unitLabel(add-p99-sec, 12µs) = %q", got)
	}
	if r := evaluate(pq, row{c: c, base: "controller-runtime", unit: "sec/item", target: target{kind: ratioMax, value: 1.0 / 3}}); r.status != statusMet || math.Abs(r.ratio-0.13) > 1e-9 {
		t.Errorf("sec/item: ratio %v status %v, want 0.13 met", r.ratio, r.status)
	}
}

func TestSummarize(t *testing.T) {
	s := summarize([]float64{5, 1, 4, 2, 3})
	if s.center != 3 || s.lo != 1 || s.hi != 5 {
		t.Errorf("summary of 1..5 = median %v [%v, %v], want 3 [1, 5]", s.center, s.lo, s.hi)
	}
	if s.confidence < 0.9 {
		t.Errorf("confidence %v, want at least 0.9", s.confidence)
	}
	// Too few rounds: an infinite interval, shown as such.
	one := summarize([]float64{7e-9})
	if !math.IsInf(one.lo, -1) || !math.IsInf(one.hi, 1) {
		t.Errorf("summary of one value: [%v, %v], want infinite", one.lo, one.hi)
	}
	if got := formatSummary("sec/op", one); got != "7.00 ns/op ±∞" {
		t.Errorf("formatSummary = %q", got)
	}
	// A time per unit with a prefix, as benchfmt tidies "start-ns/key".
	if got := formatSummary("start-sec/key", summarize([]float64{2.5e-6})); got != "2.50 start-µs/key ±∞" {
		t.Errorf("formatSummary of start-sec/key = %q", got)
	}
}

func TestEvaluate(t *testing.T) {
	s := parseFixture(t)
	byTitle := func(r row) result { return evaluate(s, r) }
	met := byTitle(row{c: "WorkqueueAddGetDone/p4w4k1000", unit: "sec/op", target: target{kind: ratioMax, value: 0.5}})
	if math.Abs(met.ratio-0.25) > 1e-9 || met.status != statusMet {
		t.Errorf("met row: ratio %v status %v, want 0.25 met", met.ratio, met.status)
	}
	if want := 99.0 / 410; math.Abs(met.ratioLo-want) > 1e-9 {
		t.Errorf("ratio lower bound %v, want %v", met.ratioLo, want)
	}
	if want := 102.0 / 395; math.Abs(met.ratioHi-want) > 1e-9 {
		t.Errorf("ratio upper bound %v, want %v", met.ratioHi, want)
	}
	if !(met.p < 0.05) {
		t.Errorf("p = %v for clearly different samples, want < 0.05", met.p)
	}

	border := byTitle(row{c: "IndexerAdd", unit: "sec/op", target: target{kind: ratioMax, value: 0.5}})
	if math.Abs(border.ratio-0.5) > 1e-9 || border.status != statusBorderline {
		t.Errorf("borderline row: ratio %v status %v, want 0.5 borderline", border.ratio, border.status)
	}

	notMet := byTitle(row{c: "InformerEvents/handlers=1", unit: "events/s", better: higherBetter, target: target{kind: ratioMin, value: 2}})
	if math.Abs(notMet.ratio-1.5) > 1e-9 || notMet.status != statusNotMet {
		t.Errorf("rate row: ratio %v status %v, want 1.5 NOT met", notMet.ratio, notMet.status)
	}
	// The same rate against a target it meets.
	if r := byTitle(row{c: "InformerEvents/handlers=1", unit: "events/s", better: higherBetter, target: target{kind: ratioMin, value: 1.4}}); r.status != statusMet {
		t.Errorf("rate row against 1.4: status %v, want met", r.status)
	}

	zero := byTitle(row{c: "WorkqueueAddGetDone/p4w4k1000", unit: "allocs/op", target: target{kind: absMax, value: 0}})
	if zero.status != statusMet {
		t.Errorf("0 allocs row: status %v, want met", zero.status)
	}
	if r := byTitle(row{c: "IndexerAdd", unit: "allocs/op", target: target{kind: absMax, value: 0}}); r.status != statusNotMet {
		t.Errorf("3 allocs against 0: status %v, want NOT met", r.status)
	}

	peak := byTitle(row{c: "IndexerReplace/initial", unit: "peak-B", target: target{kind: ratioMax, value: 0.6}})
	if math.Abs(peak.ratio-14.8/31.6) > 1e-9 || peak.status != statusMet {
		t.Errorf("peak row: ratio %v status %v, want %v met", peak.ratio, peak.status, 14.8/31.6)
	}
	if got := formatSummary(peak.unit, peak.ck); got != "14.8 peak-MB ±1%" {
		t.Errorf("formatSummary(peak) = %q", got)
	}

	// heap-MB 9.9..10.4 (median 10.0) against objects-MB 10.2 of the same side.
	rel := byTitle(row{c: "ServerInformerSync", unit: "heap-B", baseUnit: "objects-B", target: target{kind: ratioMax, value: 1.05}})
	if math.Abs(rel.ratio-10.0/10.2) > 1e-9 || rel.status != statusMet {
		t.Errorf("heap vs objects: status %v ratio %v, want met, %v", rel.status, rel.ratio, 10.0/10.2)
	}
	if r := byTitle(row{c: "ServerInformerSync", unit: "heap-B", baseUnit: "objects-B", target: target{kind: ratioMax, value: 0.97}}); r.status != statusNotMet {
		t.Errorf("heap 10.0 vs 0.97 × 10.2: status %v, want NOT met", r.status)
	}

	missing := byTitle(row{c: "ServerInformerSync", unit: "heap-B", target: target{kind: ratioMax, value: 1}})
	if missing.status != statusNoData {
		t.Errorf("row without a client-go side: status %v, want no data", missing.status)
	}
	if r := byTitle(row{c: "IndexerAdd", unit: "sec/op"}); r.status != statusNone {
		t.Errorf("row without target: status %v, want none", r.status)
	}
}

// TestRowsUseKnownTargets checks that every row of the table is complete.
func TestRowsUseKnownTargets(t *testing.T) {
	for _, r := range rows {
		if r.target.kind != noTarget && r.target.text == "" {
			t.Errorf("row %q has a target without text", r.title)
		}
		if r.c == "" || r.unit == "" || r.area == "" {
			t.Errorf("row %+v is incomplete", r)
		}
	}
}

func TestTopFunctions(t *testing.T) {
	fn := func(id uint64, name string) *profile.Function {
		return &profile.Function{ID: id, Name: name, Filename: "/src/github.com/ctrlkit/ctrlkit/x/x.go"}
	}
	add := fn(1, "github.com/ctrlkit/ctrlkit/workqueue.(*Queue[...]).Add")
	malloc := fn(2, "runtime.mallocgc")
	harness := fn(3, "github.com/ctrlkit/ctrlkit/bench.wqRunAddGetDone")
	loc := func(id uint64, f *profile.Function) *profile.Location {
		return &profile.Location{ID: id, Line: []profile.Line{{Function: f, Line: int64(id)}}}
	}
	lAdd, lMalloc, lHarness := loc(1, add), loc(2, malloc), loc(3, harness)
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{lAdd, lHarness}, Value: []int64{3, 30}},
			{Location: []*profile.Location{lMalloc, lAdd, lHarness}, Value: []int64{5, 50}},
			{Location: []*profile.Location{lHarness}, Value: []int64{2, 20}},
		},
		Function: []*profile.Function{add, malloc, harness},
		Location: []*profile.Location{lAdd, lMalloc, lHarness},
	}
	top, err := topFunctions(p, "cpu", ctrlkitCode, 8)
	if err != nil {
		t.Fatal(err)
	}
	if top.total != 100 || top.keptFlat != 30 || len(top.top) != 1 {
		t.Fatalf("total %d kept %d top %+v; want 100, 30 and only Add", top.total, top.keptFlat, top.top)
	}
	h := top.top[0]
	if h.fn != add.Name || h.flat != 30 || h.cum != 80 || h.flatPct != 30 || h.cumPct != 80 || h.file != "workqueue/x.go" {
		t.Errorf("Add: %+v, want flat 30 (30%%) cum 80 (80%%) in workqueue/x.go", h)
	}
	if _, err := topFunctions(p, "alloc_space", ctrlkitCode, 8); err == nil {
		t.Error("a missing sample type gave no error")
	}
}

// TestWriteReport renders a report from fixed raw files and checks the table,
// the machine section and the charts.
func TestWriteReport(t *testing.T) {
	root := t.TempDir()
	l := newLayout(root, false)
	if err := os.MkdirAll(l.seriesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(l.rawDir, "workqueue.txt"), fixture)
	write(filepath.Join(l.seriesDir, "resync-depth-ctrlkit.csv"), "t_ms,depth\n0,0\n10,1\n20,0\n")
	write(filepath.Join(l.seriesDir, "resync-depth-client-go.csv"), "t_ms,depth\n0,0\n10,2000\n20,1500\n")
	m := &machine{cpu: "Test CPU", cores: 2, goVersion: "go1.26.8", osArch: "linux/amd64", date: time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC),
		loadStart: "1.00 1.00 1.00", loadEnd: "2.00 1.50 1.00", wall: 812 * time.Second,
		phases: []phaseTime{{name: "workqueue", d: time.Minute}, {name: "server", d: time.Second, err: errString("exit status 1")}}}
	if err := m.write(filepath.Join(l.rawDir, "machine.txt")); err != nil {
		t.Fatal(err)
	}
	rep, err := loadReport(l, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeReport(l, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(l.report)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{
		"| CPU | Test CPU |",
		"13m32s",
		"**Phase server failed**: exit status 1",
		"| workqueue | Add/Get/Done 4 producers × 4 workers × 1k keys | ns/op (lower is better) | 100 ns/op ±2% | 400 ns/op ±3% | **0.250** [0.241–0.258] | 0.008 | 5/5 | ≥2× throughput (ratio ≤ 0.50) | ✅ met |",
		"| indexer | Add to 100k objects, 2 indexes | ns/op (lower is better) | 200 ns/op ±5% | 400 ns/op ±3% | **0.500** [0.476–0.532] |",
		"⚠️ met at the median, not across the CI",
		"| informer | in-memory events → 1 handler | events/s (higher is better) |",
		"❌ NOT met",
		"| WorkqueueAddGetDone/p4w4k1000 | ctrlkit-nokeep | ",
		"![throughput speed-up](results/speedup.png)",
		"![resync-depth](results/resync-depth.png)",
		"*no data: the series files heap-sync-*.csv are missing*",
		"Raw files missing (phases not run): indexer.txt",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, chart := range []string{"speedup.png", "resync-depth.png"} {
		b, err := os.ReadFile(filepath.Join(l.outDir, chart))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s is not a PNG", chart)
		}
	}
	// -norun regenerates the same machine section from raw/machine.txt.
	m2, err := readMachine(filepath.Join(l.rawDir, "machine.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if m2.cpu != m.cpu || m2.cores != 2 || m2.wall != m.wall || len(m2.phases) != 2 || m2.phases[1].err == nil {
		t.Errorf("machine read back: %+v", m2)
	}
}

func TestPhaseJobs(t *testing.T) {
	a, b := invocation{bench: "A", benchtime: "1x"}, invocation{bench: "B", benchtime: "1x"}
	got := phaseJobs(phase{runs: []invocation{a, b}, rounds: 3})
	want := []job{{a, 1, 0}, {b, 1, 0}, {a, 1, 1}, {b, 1, 1}, {a, 1, 2}, {b, 1, 2}}
	if len(got) != len(want) {
		t.Fatalf("jobs %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("job %d = %v, want %v (rounds interleave the invocations, numbered)", i, got[i], want[i])
		}
	}
	in := phaseJobs(phase{runs: []invocation{a}, rounds: 5, inProcess: true})
	if len(in) != 1 || in[0] != (job{a, 5, 0}) {
		t.Errorf("in-process jobs %v, want one with count 5", in)
	}
}

func TestSuite(t *testing.T) {
	for _, short := range []bool{false, true} {
		phases, profiles := suite(short)
		wantRounds := 5
		if short {
			wantRounds = 1
		}
		names := map[string]bool{}
		for _, p := range phases {
			names[p.name] = true
			want := wantRounds
			switch {
			case short:
			case p.name == "latency":
				want = latencyRounds
			case p.name == "server" || p.name == "shard" || p.name == "resync" || p.name == "shapes" || p.name == "manyctl" || p.name == "rywcost":
				want = 5
			default:
				want = microRounds
			}
			if p.rounds != want {
				t.Errorf("short=%v: phase %s has %d rounds, want %d", short, p.name, p.rounds, want)
			}
			// The phases against real control planes fill them once per process.
			if p.inProcess != (p.name == "server" || p.name == "shard" || p.name == "latency" || p.name == "manyctl" || p.name == "rywcost") {
				t.Errorf("short=%v: phase %s inProcess=%v", short, p.name, p.inProcess)
			}
		}
		for _, n := range []string{"workqueue", "indexer", "deltafifo", "informer", "wire", "shapes", "reconcile", "resync", "controllerruntime", "server", "shard", "latency", "indexershapes", "manyctl", "rywcost"} {
			if !names[n] {
				t.Errorf("short=%v: no phase %s", short, n)
			}
		}
		if len(profiles) != 2 {
			t.Errorf("short=%v: %d profiles, want 2", short, len(profiles))
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestScale checks the rows and the linearity verdicts of the scale curve.
func TestScale(t *testing.T) {
	in := "" +
		// ctrlkit's wall time per object doubles (the server slows down) while
		// its client CPU per object stays flat: linear. client-go's CPU grows.
		lines("BenchmarkServerInformerScale/objects=10000/impl=ctrlkit-2 \t 1\t %v ns/object\t 8000 cpu-ns/object\t 1100 B/object", 10000, 10100, 9900) +
		lines("BenchmarkServerInformerScale/objects=200000/impl=ctrlkit-2 \t 1\t %v ns/object\t 8400 cpu-ns/object\t 1090 B/object", 20000, 20100, 19900) +
		lines("BenchmarkServerInformerScale/objects=10000/impl=client-go-2 \t 1\t %v ns/object\t 10000 cpu-ns/object\t 1200 B/object", 20000, 20100, 19900) +
		lines("BenchmarkServerInformerScale/objects=200000/impl=client-go-2 \t 1\t %v ns/object\t 15000 cpu-ns/object\t 1300 B/object", 30000, 30100, 29900) +
		lines("BenchmarkServerInformerScale/objects=10000/impl=floor-stream-2 \t 1\t %v ns/object\t 7000 cpu-ns/object\t 1080 B/object", 9000, 9100, 8900)
	s := samples{}
	if _, err := parseBenchBytes(s, []byte(in), "scale.txt", ""); err != nil {
		t.Fatal(err)
	}
	if got := scaleSizes(s); len(got) != 2 || got[0] != 10000 || got[1] != 200000 {
		t.Fatalf("sizes %v, want [10000 200000]", got)
	}
	rs := scaleRows(s)
	if len(rs) != 12 || rs[0].c != "ServerInformerScale/objects=10000" || !strings.Contains(rs[6].title, "200k ConfigMaps") {
		t.Fatalf("rows %+v", rs)
	}
	if r := evaluate(s, rs[1]); math.Abs(r.ratio-10000.0/9000) > 1e-9 {
		t.Errorf("ratio to the floor %v, want %v", r.ratio, 10000.0/9000)
	}
	if r := evaluate(s, rs[3]); math.Abs(r.ratio-8000.0/7000) > 1e-9 {
		t.Errorf("CPU ratio to the floor %v, want %v", r.ratio, 8000.0/7000)
	}
	all := withScaleRows(rows, rs)
	last := -1
	for i, r := range all {
		if r.area == "informer" {
			last = i
		}
	}
	if all[last].c != rs[len(rs)-1].c || len(all) != len(rows)+len(rs) {
		t.Error("the scale rows are not the informer area's last")
	}
	verdicts := map[string]string{}
	for _, cv := range scaleCurves(s, scaleSizes(s)) {
		linear, ok := cv.linear()
		verdicts[cv.impl] = fmt.Sprint(linear, ok)
	}
	want := map[string]string{"ctrlkit": "true true", "client-go": "false true", "floor-stream": "false false"}
	for impl, v := range want {
		if verdicts[impl] != v {
			t.Errorf("%s: linear, ok = %s, want %s", impl, verdicts[impl], v)
		}
	}
	rep := &report{samples: s}
	var sb strings.Builder
	writeScale(&sb, rep)
	for _, want := range []string{
		"| 10k | 10.0 | 20.0 | 9.00 | 8.00 | 10.0 | 7.00 | 1100 | 1200 | 1080 |",
		"| 200k | 20.0 | 30.0 | — | 8.40 | 15.0 | — |",
		"- ctrlkit: per object 10k→200k, client CPU ×1.050, heap ×0.991 (wall time ×2.000): linear (flat cost per object).",
		"- client-go: per object 10k→200k, client CPU ×1.500, heap ×1.083 (wall time ×1.500): **not linear**.",
		"Cost per object does not stay flat for client-go.",
	} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("scale section lacks %q:\n%s", want, sb.String())
		}
	}
	if countLabel(2500) != "2.5k" || countLabel(800) != "800" {
		t.Errorf("countLabel: %q %q", countLabel(2500), countLabel(800))
	}
}
