package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// progress prints one line a second: on a terminal it rewrites the same line, otherwise it
// prints a new line every five seconds so logs stay short.
type progress struct {
	w        *workload
	start    time.Time
	last     time.Time
	lastRecs [3]int64
	tty      bool
	printed  int
	pods     int
}

func newProgress(w *workload) *progress {
	fi, err := os.Stdout.Stat()
	now := time.Now()
	return &progress{w: w, start: now, last: now, tty: err == nil && fi.Mode()&os.ModeCharDevice != 0}
}

func (p *progress) print() {
	now := time.Now()
	secs := now.Sub(p.last).Seconds()
	p.last = now
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
	p.printed++
	if !p.tty && p.printed%5 != 0 {
		return
	}
	line := fmt.Sprintf("[%3.0fs] objects: %d deploy, %d net, %d podset, %d pods | writes %d | reconciles/s %s | queue %s | cache lag p50 %s max %s",
		now.Sub(p.start).Seconds(), p.w.kinds[0].live.Load(), p.w.kinds[1].live.Load(), p.w.kinds[2].live.Load(), p.pods,
		p.w.writes.Load(), strings.Join(rates, "/"), strings.Join(depths, "/"), ms(quantile(lags, 0.5)), ms(quantile(lags, 1)))
	if p.tty {
		fmt.Printf("\r\033[K%s", line)
	} else {
		fmt.Println(line)
	}
}

// end finishes the progress line.
func (p *progress) end() {
	if p.tty && p.printed > 0 {
		fmt.Println()
	}
	p.printed = 0
}
