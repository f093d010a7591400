package main

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var (
	colorCtrlkit  = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff} // blue
	colorClientgo = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff} // red
	colorMet      = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	colorBorder   = color.RGBA{R: 0xff, G: 0x9f, B: 0x0e, A: 0xff}
	colorNotMet   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colorNone     = color.RGBA{R: 0x88, G: 0x88, B: 0x88, A: 0xff}
)

// speedup returns how many times faster ctrlkit is than the baseline in a
// throughput row (time or rate unit), with its bounds from the two intervals.
func speedup(r result) (v, lo, hi float64, ok bool) {
	if !r.hasCK || !r.hasBS || math.IsNaN(r.ratio) || r.ratio <= 0 {
		return 0, 0, 0, false
	}
	if r.better == higherBetter {
		return r.ratio, r.ratioLo, r.ratioHi, true
	}
	return 1 / r.ratio, 1 / r.ratioHi, 1 / r.ratioLo, true
}

// isThroughput reports whether a row measures time or rate (a bar of the
// throughput chart).
func isThroughput(r result) bool {
	switch r.unit {
	case "sec/op", "sec/key", "sec/item", "events/s", "sync-ms":
		return true
	}
	return false
}

// speedupChart draws horizontal bars of ctrlkit's speed-up over the baseline, on a
// log scale starting at parity (1×), coloured by target status; a thin black line
// spans the speed-up's confidence bounds.
func speedupChart(path string, res []result) error {
	type bar struct {
		label      string
		v, lo, hi  float64
		c          color.Color
		targetMark float64
	}
	var bars []bar
	for _, r := range res {
		if !isThroughput(r) {
			continue
		}
		v, lo, hi, ok := speedup(r)
		if !ok {
			continue
		}
		c := colorNone
		switch r.status {
		case statusMet:
			c = colorMet
		case statusBorderline:
			c = colorBorder
		case statusNotMet:
			c = colorNotMet
		}
		if r.baseUnit != "" || r.base == "floor" {
			continue // not a comparison with another library
		}
		label := r.area + ": " + r.title
		if r := []rune(label); len(r) > 60 {
			label = string(r[:57]) + "..."
		}
		b := bar{label: label, v: v, lo: lo, hi: hi, c: c}
		switch r.target.kind {
		case ratioMax:
			b.targetMark = 1 / r.target.value
		case ratioMin:
			b.targetMark = r.target.value
		}
		bars = append(bars, b)
	}
	if len(bars) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "ctrlkit speed-up over the baseline (median; bar from 1× parity)"
	p.X.Label.Text = "× faster than client-go (or the named baseline); log scale; > 1 is better"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	names := make([]string, len(bars))
	xmin, xmax := 0.5, 2.0
	for i, b := range bars {
		y := float64(len(bars) - 1 - i) // first row on top
		names[len(bars)-1-i] = fmt.Sprintf("%s  %.2f×", b.label, b.v)
		poly, err := plotter.NewPolygon(plotter.XYs{{X: 1, Y: y - 0.35}, {X: b.v, Y: y - 0.35}, {X: b.v, Y: y + 0.35}, {X: 1, Y: y + 0.35}})
		if err != nil {
			return err
		}
		poly.Color = b.c
		poly.LineStyle.Width = 0
		p.Add(poly)
		xmin, xmax = math.Min(xmin, b.v), math.Max(xmax, b.v)
		if b.lo > 0 && !math.IsInf(b.hi, 0) && b.hi > 0 {
			ci, err := plotter.NewLine(plotter.XYs{{X: b.lo, Y: y}, {X: b.hi, Y: y}})
			if err != nil {
				return err
			}
			ci.Color = color.Black
			ci.Width = vg.Points(1)
			p.Add(ci)
			xmin, xmax = math.Min(xmin, b.lo), math.Max(xmax, b.hi)
		}
		if b.targetMark > 0 {
			tm, err := plotter.NewLine(plotter.XYs{{X: b.targetMark, Y: y - 0.45}, {X: b.targetMark, Y: y + 0.45}})
			if err != nil {
				return err
			}
			tm.Color = color.Black
			tm.Width = vg.Points(2)
			tm.Dashes = []vg.Length{vg.Points(2), vg.Points(1)}
			p.Add(tm)
			xmax = math.Max(xmax, b.targetMark)
		}
	}
	parity, err := plotter.NewLine(plotter.XYs{{X: 1, Y: -0.5}, {X: 1, Y: float64(len(bars)) - 0.5}})
	if err != nil {
		return err
	}
	parity.Color = color.Gray{Y: 0x40}
	p.Add(parity)
	p.NominalY(names...)
	p.X.Min, p.X.Max = xmin/1.2, xmax*1.2
	p.Legend.Add("met", legendSwatch(colorMet))
	p.Legend.Add("met at the median only", legendSwatch(colorBorder))
	p.Legend.Add("not met", legendSwatch(colorNotMet))
	p.Legend.Add("no target", legendSwatch(colorNone))
	p.Legend.Add("target (dashed)", legendLine(color.Black, true))
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.XOffs = -vg.Points(24) // keep the text inside the canvas
	p.Legend.ThumbnailWidth = vg.Points(14)
	h := vg.Points(float64(80 + 22*len(bars)))
	return p.Save(11*vg.Inch, h, path)
}

func legendSwatch(c color.Color) plot.Thumbnailer {
	poly, _ := plotter.NewPolygon(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 0}, {X: 1, Y: 1}, {X: 0, Y: 1}})
	poly.Color = c
	poly.LineStyle.Width = 0
	return poly
}

func legendLine(c color.Color, dashed bool) plot.Thumbnailer {
	l, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 0}})
	l.Color = c
	if dashed {
		l.Dashes = []vg.Length{vg.Points(2), vg.Points(1)}
	}
	return l
}

// readSeries reads a t_ms,value CSV written by package bench; nil if missing.
func readSeries(path string) (plotter.XYs, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("report: %s: %w", path, err)
	}
	var xys plotter.XYs
	for i, rec := range recs {
		if i == 0 || len(rec) < 2 {
			continue // header
		}
		t, err1 := strconv.ParseFloat(rec[0], 64)
		v, err2 := strconv.ParseFloat(rec[1], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("report: %s line %d: not numbers: %q", path, i+1, rec)
		}
		xys = append(xys, plotter.XY{X: t / 1000, Y: v})
	}
	return xys, nil
}

// seriesChart draws the ctrlkit and client-go series of one name on one chart and
// returns false if neither exists.
func seriesChart(seriesDir, name, path, title, ylabel string) (bool, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	any := false
	for _, side := range []struct {
		impl string
		c    color.Color
	}{{"ctrlkit", colorCtrlkit}, {"client-go", colorClientgo}} {
		xys, err := readSeries(filepath.Join(seriesDir, name+"-"+side.impl+".csv"))
		if err != nil {
			return false, err
		}
		if len(xys) == 0 {
			continue
		}
		any = true
		l, err := plotter.NewLine(xys)
		if err != nil {
			return false, err
		}
		l.Color = side.c
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(side.impl, l)
	}
	if !any {
		return false, nil
	}
	p.Legend.Top = true
	p.Legend.Left = true // the series start low and grow to the right
	p.Add(plotter.NewGrid())
	return true, p.Save(8*vg.Inch, 4*vg.Inch, path)
}
