package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// progress prints the progress lines: on a terminal one a second, rewriting the same line;
// otherwise one every five seconds, each on a line of its own, so logs stay short. A line
// covers the time since the previous one: its reconciles per second and its cache lags are
// those of every second in between, not only of the last.
type progress struct {
	w        *workload
	out      io.Writer
	tty      bool
	every    int // ticks per line
	start    time.Time
	last     time.Time // of the previous line
	lastRecs [3]int64  // reconciles at the previous line
	ticks    int       // since the previous line
	open     bool      // a terminal line is not finished yet
	pods     int
}

func newProgress(w *workload, out io.Writer, tty bool) *progress {
	now := time.Now()
	p := &progress{w: w, out: out, tty: tty, every: 5, start: now, last: now}
	if tty {
		p.every = 1
	}
	return p
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// tick is called once a second; it prints a line when one is due.
func (p *progress) tick() {
	p.ticks++
	if p.ticks >= p.every {
		p.print()
	}
}

// flush prints a line for the ticks since the previous line, if there were any.
func (p *progress) flush() {
	if p.ticks > 0 {
		p.print()
	}
}

func (p *progress) print() {
	now := time.Now()
	secs := now.Sub(p.last).Seconds()
	p.last = now
	p.ticks = 0
	var rates, depths []string
	var lags []time.Duration
	for i, k := range p.w.kinds {
		n := k.stats.reconciles.Load()
		rates = append(rates, fmt.Sprintf("%.0f", float64(n-p.lastRecs[i])/secs))
		p.lastRecs[i] = n
		depths = append(depths, fmt.Sprint(max(k.stats.depth.Load(), 0)))
		lags = append(lags, k.stats.recentLag()...)
	}
	if pods, err := p.w.c.kube.CoreV1().Pods(demoNS).List(context.Background(), metav1.ListOptions{ResourceVersion: "0"}); err == nil {
		p.pods = len(pods.Items)
	}
	line := fmt.Sprintf("[%3.0fs] objects: %d deploy, %d net, %d podset, %d pods | writes %d | reconciles/s %s | queue %s | cache lag p50 %s max %s",
		now.Sub(p.start).Seconds(), p.w.kinds[0].live.Load(), p.w.kinds[1].live.Load(), p.w.kinds[2].live.Load(), p.pods,
		p.w.writes.Load(), strings.Join(rates, "/"), strings.Join(depths, "/"), ms(quantile(lags, 0.5)), ms(quantile(lags, 1)))
	if p.tty {
		fmt.Fprintf(p.out, "\r\033[K%s", line)
		p.open = true
	} else {
		fmt.Fprintln(p.out, line)
	}
}

// end finishes the progress line.
func (p *progress) end() {
	if p.open {
		fmt.Fprintln(p.out)
	}
	p.open = false
}
