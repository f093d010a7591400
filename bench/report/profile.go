package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/google/pprof/profile"
)

// hotspot is one function's share of a profile.
type hotspot struct {
	fn        string
	flat, cum int64
	flatPct   float64 // of the profile's total
	cumPct    float64
	file      string // the function's source file, from the repository's root
}

// anyCode keeps every function.
func anyCode(string) bool { return true }

// profileTop is the top of one sample type of a profile, restricted to some
// functions.
type profileTop struct {
	sampleType, unit string
	total            int64   // every sample of the profile
	keptFlat         int64   // flat of the kept functions together
	keptPct          float64 // keptFlat of total
	top              []hotspot
}

// ctrlkitCode reports whether a function is ctrlkit library code (not the bench
// harness).
func ctrlkitCode(fn string) bool {
	return strings.HasPrefix(fn, "github.com/ctrlkit/ctrlkit/") && !strings.HasPrefix(fn, "github.com/ctrlkit/ctrlkit/bench")
}

// topFunctions reads a pprof profile and returns the n functions that keep accepts
// with the largest flat value of sampleType ("cpu", "alloc_space"), with their
// cumulative values. Flat is attributed to the innermost function of a sample's
// leaf location (inlined frames included), as pprof does; cum counts a function
// once per sample wherever it appears in the stack.
func topFunctions(p *profile.Profile, sampleType string, keep func(string) bool, n int) (profileTop, error) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == sampleType {
			idx = i
		}
	}
	if idx < 0 {
		return profileTop{}, fmt.Errorf("report: profile has no sample type %q", sampleType)
	}
	out := profileTop{sampleType: sampleType, unit: p.SampleType[idx].Unit}
	flat := map[string]int64{}
	cum := map[string]int64{}
	where := map[string]string{}
	for _, s := range p.Sample {
		v := s.Value[idx]
		out.total += v
		seen := map[string]bool{}
		for li, loc := range s.Location {
			for i, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				fn := line.Function.Name
				if _, ok := where[fn]; !ok {
					where[fn] = shortFile(fn, line.Function.Filename)
				}
				if li == 0 && i == 0 {
					flat[fn] += v
				}
				if !seen[fn] {
					seen[fn] = true
					cum[fn] += v
				}
			}
		}
	}
	var hs []hotspot
	for fn, c := range cum {
		if !keep(fn) || flat[fn] == 0 {
			continue // only functions that hold samples themselves
		}
		out.keptFlat += flat[fn]
		hs = append(hs, hotspot{fn: fn, flat: flat[fn], cum: c, file: where[fn]})
	}
	sort.Slice(hs, func(i, j int) bool {
		if hs[i].flat != hs[j].flat {
			return hs[i].flat > hs[j].flat
		}
		return hs[i].fn < hs[j].fn
	})
	if len(hs) > n {
		hs = hs[:n]
	}
	for i := range hs {
		if out.total > 0 {
			hs[i].flatPct = 100 * float64(hs[i].flat) / float64(out.total)
			hs[i].cumPct = 100 * float64(hs[i].cum) / float64(out.total)
		}
	}
	if out.total > 0 {
		out.keptPct = 100 * float64(out.keptFlat) / float64(out.total)
	}
	out.top = hs
	return out, nil
}

// shortFile names a function's file as <package directory>/<file>, taking the
// directory from the function's import path (the build directory in the
// profile may be anywhere): "deltafifo/fifo.go".
func shortFile(fn, file string) string {
	base := file
	if i := strings.LastIndex(file, "/"); i >= 0 {
		base = file[i+1:]
	}
	pkg := fn
	if i := strings.LastIndex(pkg, "/"); i >= 0 {
		pkg = pkg[i+1:]
	}
	if i := strings.Index(pkg, "."); i >= 0 {
		pkg = pkg[:i]
	}
	return pkg + "/" + base
}

// readProfile parses a pprof file.
func readProfile(path string) (*profile.Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return profile.Parse(f)
}

// formatProfileValue shows a sample value in its unit.
func formatProfileValue(v int64, unit string) string {
	switch unit {
	case "nanoseconds":
		return fmt.Sprintf("%.2fs", float64(v)/1e9)
	case "bytes":
		switch {
		case v >= 1<<30:
			return fmt.Sprintf("%.2fGB", float64(v)/(1<<30))
		case v >= 1<<20:
			return fmt.Sprintf("%.1fMB", float64(v)/(1<<20))
		case v >= 1<<10:
			return fmt.Sprintf("%.1fkB", float64(v)/(1<<10))
		}
		return fmt.Sprintf("%dB", v)
	}
	return fmt.Sprintf("%d %s", v, unit)
}
