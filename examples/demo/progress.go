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
// those of every second in between, not only of the last. With replicas, each line is
// followed by one line per replica: its share of the hash space, what its sharded
// informers cache, and its own reconciles per second.
type progress struct {
	w        *workload
	replicas func() []replicaView // nil without replicas
	out      io.Writer
	tty      bool
	every    int // ticks per line
	start    time.Time
	last     time.Time // of the previous line
	lastRecs [3]int64  // reconciles at the previous line
	ticks    int       // since the previous line
	open     int       // lines of a terminal block not finished yet
	pods     int

	lastReplicaRecs map[string][3]int64 // each replica's reconciles at the previous line
}

func newProgress(w *workload, replicas func() []replicaView, out io.Writer, tty bool) *progress {
	now := time.Now()
	p := &progress{w: w, replicas: replicas, out: out, tty: tty, every: 5, start: now, last: now, lastReplicaRecs: map[string][3]int64{}}
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
	lines := []string{line}
	if p.replicas != nil {
		for _, v := range p.replicas() {
			lines = append(lines, p.replicaLine(v, secs))
		}
	}
	if p.tty {
		// Back to the first line of the open block, then each line cleared and rewritten.
		fmt.Fprintf(p.out, "\r%s\033[K%s", strings.Repeat("\033[A", max(p.open-1, 0)), strings.Join(lines, "\n\033[K"))
		p.open = len(lines)
	} else {
		fmt.Fprintln(p.out, strings.Join(lines, "\n"))
	}
}

// replicaLine is the progress line of one replica; secs is the time since the previous
// line.
func (p *progress) replicaLine(v replicaView, secs float64) string {
	last := p.lastReplicaRecs[v.id]
	p.lastReplicaRecs[v.id] = v.reconciles
	if !v.left.IsZero() {
		return fmt.Sprintf("       %s left at %.0fs | reconciled %d/%d/%d before", v.id, v.left.Sub(p.start).Seconds(),
			v.reconciles[0], v.reconciles[1], v.reconciles[2])
	}
	var rates []string
	for i, n := range v.reconciles {
		rates = append(rates, fmt.Sprintf("%.0f", float64(n-last[i])/secs))
	}
	c := v.cached
	return fmt.Sprintf("       %s %2d slots %5.1f%% | caches %d deploy, %d net, %d podset, %d pods | reconciles/s %s",
		v.id, v.slots, 100*v.fraction, c[cachedDeployments], c[cachedNetworks], c[cachedPodSets], c[cachedPods], strings.Join(rates, "/"))
}

// end finishes the progress line.
func (p *progress) end() {
	if p.open > 0 {
		fmt.Fprintln(p.out)
	}
	p.open = 0
}
