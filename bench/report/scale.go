package main

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// The scale curve of the initial sync (BenchmarkServerInformerScale, issue 19):
// each side syncs the ConfigMaps of a namespace grown through several sizes, and
// reports its sync time and heap per object. Its rows are made from the sizes
// found in the raw outputs (the -short run measures smaller ones), and a section
// of the report says whether each side's cost per object stays flat.

// scaleCasePrefix starts the case of every size: "ServerInformerScale/objects=N".
const scaleCasePrefix = "ServerInformerScale/objects="

// scaleImpls are the sides of the curve, in display order.
var scaleImpls = []string{"ctrlkit", "client-go", "floor-stream"}

// Linearity tolerances: the cost per object at the largest size over that at the
// smallest. Time is noisier (the server shares the machine) than the heap.
const (
	scaleTimeTolerance = 1.25
	scaleHeapTolerance = 1.05
)

// scaleSizes returns the sizes of the scale curve in the samples, smallest first.
func scaleSizes(s samples) []int {
	var sizes []int
	for c := range s {
		rest, ok := strings.CutPrefix(string(c), scaleCasePrefix)
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(rest); err == nil && n > 0 {
			sizes = append(sizes, n)
		}
	}
	sort.Ints(sizes)
	return sizes
}

func scaleCase(n int) caseKey { return caseKey(scaleCasePrefix + strconv.Itoa(n)) }

// countLabel shows a count of objects: "10k", "200k", "2.5k", "800".
func countLabel(n int) string {
	if n >= 1000 && n%100 == 0 {
		return strconv.FormatFloat(float64(n)/1000, 'f', -1, 64) + "k"
	}
	return strconv.Itoa(n)
}

// scaleRows returns the table's rows of the scale curve: per size, ctrlkit's sync
// time and heap per object against client-go and against the streaming floor.
func scaleRows(s samples) []row {
	var rs []row
	for _, n := range scaleSizes(s) {
		c, l := scaleCase(n), countLabel(n)
		rs = append(rs,
			row{area: "informer", title: fmt.Sprintf("scale curve, %s ConfigMaps: initial sync time per object", l), c: c, unit: "sec/object"},
			row{area: "informer", title: fmt.Sprintf("scale curve, %s ConfigMaps: sync time per object vs the floor (bare streaming list + decode)", l), c: c, base: "floor-stream", unit: "sec/object"},
			row{area: "informer", title: fmt.Sprintf("scale curve, %s ConfigMaps: client CPU per object during the sync", l), c: c, unit: "cpu-sec/object"},
			row{area: "informer", title: fmt.Sprintf("scale curve, %s ConfigMaps: client CPU per object vs the floor", l), c: c, base: "floor-stream", unit: "cpu-sec/object"},
			row{area: "informer", title: fmt.Sprintf("scale curve, %s ConfigMaps: heap after sync per object", l), c: c, unit: "B/object"},
			row{area: "informer", title: fmt.Sprintf("scale curve, %s ConfigMaps: heap per object vs the floor's decoded objects", l), c: c, base: "floor-stream", unit: "B/object"},
		)
	}
	return rs
}

// withScaleRows returns rs with extra inserted after the last row of the
// informer area (at the end if there is none).
func withScaleRows(rs, extra []row) []row {
	at := len(rs)
	for i, r := range rs {
		if r.area == "informer" {
			at = i + 1
		}
	}
	out := make([]row, 0, len(rs)+len(extra))
	out = append(out, rs[:at]...)
	out = append(out, extra...)
	return append(out, rs[at:]...)
}

// scaleCurve is one side's median cost per object at each size (NaN where
// there is no data).
type scaleCurve struct {
	impl       string
	nsPerObj   []float64
	cpuPerObj  []float64 // client CPU ns per object
	bytePerObj []float64
}

// scaleCurves returns the curve of every side with data, in scaleImpls order.
func scaleCurves(s samples, sizes []int) []scaleCurve {
	var out []scaleCurve
	for _, impl := range scaleImpls {
		cv := scaleCurve{impl: impl}
		found := false
		for _, n := range sizes {
			t, cpu, b := math.NaN(), math.NaN(), math.NaN()
			if v := s[scaleCase(n)][impl]["sec/object"]; len(v) > 0 {
				t, found = summarize(v).center*1e9, true
			}
			if v := s[scaleCase(n)][impl]["cpu-sec/object"]; len(v) > 0 {
				cpu, found = summarize(v).center*1e9, true
			}
			if v := s[scaleCase(n)][impl]["B/object"]; len(v) > 0 {
				b, found = summarize(v).center, true
			}
			cv.nsPerObj = append(cv.nsPerObj, t)
			cv.cpuPerObj = append(cv.cpuPerObj, cpu)
			cv.bytePerObj = append(cv.bytePerObj, b)
		}
		if found {
			out = append(out, cv)
		}
	}
	return out
}

// growth is the cost per object at the largest size over that at the smallest.
func growth(v []float64) float64 {
	if len(v) < 2 {
		return math.NaN()
	}
	return v[len(v)-1] / v[0]
}

// linear says whether a curve's cost per object stays flat within the
// tolerances; ok is false when there is not enough data to tell. The time is the
// client's CPU time: the sync's wall time also counts the API server and etcd,
// which share the machine and slow down as the collection grows (the floor's
// wall time per object grows with them).
func (cv scaleCurve) linear() (linear, ok bool) {
	gt, gb := growth(cv.cpuPerObj), growth(cv.bytePerObj)
	if math.IsNaN(gt) || math.IsNaN(gb) {
		return false, false
	}
	return gt <= scaleTimeTolerance && gb <= scaleHeapTolerance, true
}

// writeScale writes the scale curve's section: a table of the cost per object at
// each size and, for each side, whether it stays flat.
func writeScale(sb *strings.Builder, rep *report) {
	w := func(format string, a ...any) { fmt.Fprintf(sb, format, a...) }
	sizes := scaleSizes(rep.samples)
	w("## Scale curve of the initial sync (real server)\n\n")
	if len(sizes) == 0 {
		w("*no data: BenchmarkServerInformerScale did not run.*\n\n")
		return
	}
	labels := make([]string, len(sizes))
	for i, n := range sizes {
		labels[i] = countLabel(n)
	}
	w("BenchmarkServerInformerScale: each side syncs the ConfigMaps of one namespace, grown from %s to %s objects "+
		"on the same control plane, without the relist (medians of the rounds). floor-stream is the floor: a bare "+
		"streaming list decoding the protobuf into the objects, kept in a slice, nothing else. Wall time counts the API server and etcd "+
		"(on the same machine), which slow down as the collection grows; client CPU is the benchmark process's own CPU time during the sync. "+
		"Each measured sync starts from a heap handed back to the operating system, as a new process's is, so that every side "+
		"pays for the pages its own peak touches. "+
		"Linear means the cost per object at %s is at most %.2f× that at %s for client CPU "+
		"and %.2f× for heap.\n\n",
		labels[0], labels[len(labels)-1], labels[len(labels)-1], scaleTimeTolerance, labels[0], scaleHeapTolerance)
	curves := scaleCurves(rep.samples, sizes)
	w("| objects |")
	for _, cv := range curves {
		w(" %s µs/object |", cv.impl)
	}
	for _, cv := range curves {
		w(" %s CPU µs/object |", cv.impl)
	}
	for _, cv := range curves {
		w(" %s B/object |", cv.impl)
	}
	w("\n|---|%s\n", strings.Repeat("---|", 3*len(curves)))
	for i, l := range labels {
		w("| %s |", l)
		for _, cv := range curves {
			w(" %s |", scaleValue(cv.nsPerObj[i]/1e3))
		}
		for _, cv := range curves {
			w(" %s |", scaleValue(cv.cpuPerObj[i]/1e3))
		}
		for _, cv := range curves {
			w(" %s |", scaleValue(cv.bytePerObj[i]))
		}
		w("\n")
	}
	w("\n")
	var flat, notFlat []string
	for _, cv := range curves {
		linear, ok := cv.linear()
		verdict := "not enough sizes to tell"
		switch {
		case ok && linear:
			verdict = "linear (flat cost per object)"
			flat = append(flat, cv.impl)
		case ok:
			verdict = "**not linear**"
			notFlat = append(notFlat, cv.impl)
		}
		w("- %s: per object %s→%s, client CPU ×%s, heap ×%s (wall time ×%s): %s.\n",
			cv.impl, labels[0], labels[len(labels)-1], scaleRatio(growth(cv.cpuPerObj)), scaleRatio(growth(cv.bytePerObj)), scaleRatio(growth(cv.nsPerObj)), verdict)
	}
	w("\n")
	switch {
	case len(flat) > 0 && len(notFlat) == 0:
		w("Cost per object stays flat for every side (%s): the sync grows linearly with the objects.\n\n", strings.Join(flat, ", "))
	case len(notFlat) > 0:
		w("Cost per object does not stay flat for %s.\n\n", strings.Join(notFlat, ", "))
	}
}

// scaleValue is formatValue, with a dash for a missing value.
func scaleValue(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return formatValue(v)
}

// scaleRatio is formatRatio, with a dash for a missing ratio.
func scaleRatio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	return formatRatio(v)
}
