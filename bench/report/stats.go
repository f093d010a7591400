package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
)

// A measurement set: every sample of every benchmark in the raw outputs, grouped
// by case (the benchmark name without its impl part), implementation and unit.

// caseKey names one benchmark case independently of the implementation, for
// example "WorkqueueAddGetDone/p4w4k1000" or "InformerEvents/handlers=1".
type caseKey string

// samples maps case → implementation → unit → values, in file order.
type samples map[caseKey]map[string]map[string][]float64

// knownImpls are the implementation names recognised in a sub-benchmark part that
// has no "impl=" prefix (bench/controllerruntime names its sides "ctrlkit/workers=1").
var knownImpls = map[string]bool{
	"ctrlkit": true, "client-go": true, "controller-runtime": true,
	"ctrlkit-prometheus": true, "controller-runtime-classicqueue": true,
}

var procsSuffix = regexp.MustCompile(`-\d+$`)

// splitName splits a full benchmark name ("BenchmarkX/a=1/impl=clientgo-2") into its
// case ("X/a=1") and implementation ("client-go"). The implementation is the part
// "impl=NAME", or else a part that is a known implementation name; "clientgo" is
// spelled "client-go". ok is false when the name has no implementation part.
func splitName(full string) (c caseKey, impl string, ok bool) {
	full = strings.TrimPrefix(full, "Benchmark")
	full = procsSuffix.ReplaceAllString(full, "")
	parts := strings.Split(full, "/")
	rest := parts[:0:0]
	for i, p := range parts {
		switch {
		case i > 0 && impl == "" && strings.HasPrefix(p, "impl="):
			impl = strings.TrimPrefix(p, "impl=")
		case i > 0 && impl == "" && knownImpls[p]:
			impl = p
		case i > 0 && isRound(p):
			// A benchmark that runs its rounds inside one process names them;
			// the round is a sample of the case, as -count's are.
		default:
			rest = append(rest, p)
		}
	}
	if impl == "" {
		return caseKey(full), "", false
	}
	impl = strings.ReplaceAll(impl, "clientgo", "client-go")
	return caseKey(strings.Join(rest, "/")), impl, true
}

// isRound reports whether a name element is "round=N".
func isRound(p string) bool {
	n, ok := strings.CutPrefix(p, "round=")
	_, err := strconv.Atoi(n)
	return ok && err == nil
}

// parseBench reads Go benchmark output (several files may be concatenated) and adds
// every result to s. Units are benchfmt's tidied ones: ns/op becomes sec/op,
// ns/key sec/key; other units are kept. Results without an implementation in their
// name are ignored. The configuration lines ("key: value") of the input are
// returned, last value wins. prefix is prepended to every case, to keep apart
// benchmarks of the same name from different packages.
func parseBench(s samples, r io.Reader, fileName, prefix string) (map[string]string, error) {
	cfg := map[string]string{}
	br := benchfmt.NewReader(r, fileName)
	for br.Scan() {
		switch rec := br.Result(); rec := rec.(type) {
		case *benchfmt.Result:
			for _, c := range rec.Config {
				cfg[c.Key] = string(c.Value)
			}
			c, impl, ok := splitName(rec.Name.String())
			if !ok {
				continue
			}
			c = caseKey(prefix) + c
			if s[c] == nil {
				s[c] = map[string]map[string][]float64{}
			}
			if s[c][impl] == nil {
				s[c][impl] = map[string][]float64{}
			}
			for _, v := range rec.Values {
				s[c][impl][v.Unit] = append(s[c][impl][v.Unit], v.Value)
			}
		case *benchfmt.SyntaxError:
			// Test logs and other lines in the output are not results; skip them.
		}
	}
	return cfg, br.Err()
}

// parseBenchBytes is parseBench on a byte slice.
func parseBenchBytes(s samples, b []byte, fileName, prefix string) (map[string]string, error) {
	return parseBench(s, bytes.NewReader(b), fileName, prefix)
}

// summary is the median of a sample and its confidence interval.
type summary struct {
	n              int
	center, lo, hi float64
	confidence     float64
	values         []float64 // sorted
	warnings       []string
}

// confidenceFor is the confidence level asked of benchmath: 95% when the sample is
// large enough for it (6 or more), else 90% (5 samples give 93.75%).
func confidenceFor(n int) float64 {
	if n >= 6 {
		return 0.95
	}
	return 0.90
}

// summarize returns the median of values with its distribution-free confidence
// interval (benchmath.AssumeNothing, as benchstat).
func summarize(values []float64) summary {
	smp := benchmath.NewSample(values, &benchmath.DefaultThresholds)
	sum := benchmath.AssumeNothing.Summary(smp, confidenceFor(len(values)))
	out := summary{n: len(values), center: sum.Center, lo: sum.Lo, hi: sum.Hi, confidence: sum.Confidence, values: smp.Values}
	for _, w := range append(smp.Warnings, sum.Warnings...) {
		out.warnings = append(out.warnings, w.Error())
	}
	return out
}

// pValue is the Mann-Whitney U test's p-value that the two samples come from the
// same distribution (as benchstat prints it); NaN if it cannot be computed.
func pValue(a, b []float64) float64 {
	sa := benchmath.NewSample(a, &benchmath.DefaultThresholds)
	sb := benchmath.NewSample(b, &benchmath.DefaultThresholds)
	c := benchmath.AssumeNothing.Compare(sa, sb)
	if len(c.Warnings) > 0 {
		return math.NaN() // too few samples for the test
	}
	return c.P
}

// better says which direction of a unit is better.
type better int

const (
	lowerBetter better = iota
	higherBetter
)

func (b better) String() string {
	if b == higherBetter {
		return "higher"
	}
	return "lower"
}

// targetKind is how a row's target is checked.
type targetKind int

const (
	noTarget targetKind = iota
	ratioMax            // ratio ctrlkit/base ≤ value
	ratioMin            // ratio ctrlkit/base ≥ value
	absMax              // ctrlkit's median ≤ value
)

// target is one row's goal, from the package issues.
type target struct {
	kind  targetKind
	value float64
	text  string // how the goal reads in the table
}

// row is one line of the ratio table: a case, a unit, the ctrlkit side, the
// baseline side and the target.
type row struct {
	area  string
	title string  // a human name of the case
	c     caseKey // the benchmark case
	unit  string  // benchfmt unit
	impl  string  // ctrlkit's side; default "ctrlkit"
	base  string  // the baseline; default "client-go"
	// baseUnit, if set, makes the baseline another unit of ctrlkit's own side
	// (heap-MB against objects-MB); base is then ignored.
	baseUnit string
	better   better
	target   target
}

// status of a row against its target.
type status int

const (
	statusNone       status = iota // no target
	statusNoData                   // a side has no samples
	statusMet                      // the whole confidence interval meets the target
	statusBorderline               // the median meets it, the interval crosses it
	statusNotMet                   // the median does not meet it
)

func (s status) String() string {
	switch s {
	case statusNoData:
		return "no data"
	case statusMet:
		return "met"
	case statusBorderline:
		return "met at the median, not across the CI"
	case statusNotMet:
		return "NOT met"
	}
	return "—"
}

// result is an evaluated row.
type result struct {
	row
	ck, bs       summary
	hasCK, hasBS bool
	// ratio is ck median / base median; ratioLo and ratioHi bound it with the
	// two confidence intervals (ck.lo/bs.hi, ck.hi/bs.lo).
	ratio, ratioLo, ratioHi float64
	p                       float64
	status                  status
}

// evaluate computes a row's summaries, ratio and status from the samples.
func evaluate(s samples, r row) result {
	if r.impl == "" {
		r.impl = "ctrlkit"
	}
	if r.base == "" {
		r.base = "client-go"
	}
	res := result{row: r, ratio: math.NaN(), ratioLo: math.NaN(), ratioHi: math.NaN(), p: math.NaN()}
	ck := s[r.c][r.impl][r.unit]
	bs := s[r.c][r.base][r.unit]
	if r.baseUnit != "" {
		bs = s[r.c][r.impl][r.baseUnit]
	}
	if len(ck) > 0 {
		res.ck, res.hasCK = summarize(ck), true
	}
	if len(bs) > 0 {
		res.bs, res.hasBS = summarize(bs), true
	}
	if res.hasCK && res.hasBS {
		res.ratio = res.ck.center / res.bs.center
		res.ratioLo = res.ck.lo / res.bs.hi
		res.ratioHi = res.ck.hi / res.bs.lo
		if res.bs.lo <= 0 {
			res.ratioHi = math.Inf(1)
		}
		res.p = pValue(ck, bs)
	}
	res.status = judge(res)
	return res
}

// judge decides a row's status.
func judge(res result) status {
	t := res.target
	if t.kind == noTarget {
		return statusNone
	}
	meets := func(v float64) bool {
		switch t.kind {
		case ratioMax, absMax:
			return v <= t.value
		case ratioMin:
			return v >= t.value
		}
		return false
	}
	var center, worst float64
	switch t.kind {
	case ratioMax, ratioMin:
		if !res.hasCK || !res.hasBS {
			return statusNoData
		}
		center = res.ratio
		worst = res.ratioHi
		if t.kind == ratioMin {
			worst = res.ratioLo
		}
	case absMax:
		if !res.hasCK {
			return statusNoData
		}
		center, worst = res.ck.center, res.ck.hi
	}
	switch {
	case !meets(center):
		return statusNotMet
	case !meets(worst):
		return statusBorderline
	}
	return statusMet
}

// unitScale returns how to show a benchfmt unit: a factor, the shown unit, and
// whether it is a time.
func unitScale(unit string, v float64) (factor float64, shown string) {
	if rest, ok := strings.CutPrefix(unit, "sec/"); ok {
		switch a := math.Abs(v); {
		case a >= 1:
			return 1, "s/" + rest
		case a >= 1e-3:
			return 1e3, "ms/" + rest
		case a >= 1e-6:
			return 1e6, "µs/" + rest
		}
		return 1e9, "ns/" + rest
	}
	if rest, ok := strings.CutPrefix(unit, "B/"); ok {
		switch a := math.Abs(v); {
		case a >= 1e6:
			return 1e-6, "MB/" + rest
		case a >= 1e4:
			return 1e-3, "kB/" + rest
		}
		return 1, unit
	}
	if rest, ok := strings.CutSuffix(unit, "-sec"); ok {
		// benchfmt turned "add-p99-ns" into "add-p99-sec", scaled by 1e-9.
		switch a := math.Abs(v); {
		case a >= 1:
			return 1, rest + "-s"
		case a >= 1e-3:
			return 1e3, rest + "-ms"
		case a >= 1e-6:
			return 1e6, rest + "-µs"
		}
		return 1e9, rest + "-ns"
	}
	if pre, rest, ok := strings.Cut(unit, "-sec/"); ok {
		// benchfmt turned "start-ns/key" into "start-sec/key", scaled by 1e-9.
		f, shown := unitScale("sec/"+rest, v)
		return f, pre + "-" + shown
	}
	if rest, ok := strings.CutSuffix(unit, "-B"); ok {
		// benchfmt turned "peak-MB" into "peak-B", scaled by 1e6; show it as written.
		return 1e-6, rest + "-MB"
	}
	return 1, unit
}

// formatValue shows a value with about three significant digits.
func formatValue(v float64) string {
	switch a := math.Abs(v); {
	case math.IsInf(v, 0) || math.IsNaN(v):
		return "∞"
	case a == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// formatSummary shows "median unit ±pct%" (the larger half-width of the CI).
func formatSummary(unit string, s summary) string {
	f, shown := unitScale(unit, s.center)
	pm := "±∞"
	if !math.IsInf(s.lo, 0) && !math.IsInf(s.hi, 0) && s.center != 0 {
		pct := 100 * max(s.hi-s.center, s.center-s.lo) / math.Abs(s.center)
		pm = fmt.Sprintf("±%.0f%%", pct)
	} else if s.center == 0 && s.lo == 0 && s.hi == 0 {
		pm = "±0%"
	}
	return fmt.Sprintf("%s %s %s", formatValue(s.center*f), shown, pm)
}

// sortedCases returns the cases of s in name order.
func sortedCases(s samples) []caseKey {
	cs := make([]caseKey, 0, len(s))
	for c := range s {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i] < cs[j] })
	return cs
}
