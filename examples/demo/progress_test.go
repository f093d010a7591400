package main

import (
	"bytes"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

// newTestProgress returns a progress line writer for a workload that made no write, and
// the stats of its three controllers.
func newTestProgress(out *bytes.Buffer, tty bool) (*progress, []*stats) {
	s := []*stats{{name: "sidecar"}, {name: "network"}, {name: "podset"}}
	w := newWorkload(&clients{kube: fake.NewClientset()}, 1, s, nil, nil, nil)
	return newProgress(w, out, tty), s
}

// A line printed every fifth second reports the reconciles and the cache lags of all five
// seconds since the previous line, not only those of its last second: a 2 s lag recorded in
// the first second shows in the line.
func TestProgressLineCoversEverySecondSinceThePrevious(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		p, s := newTestProgress(&out, false)
		s[2].reconciles.Add(10)
		s[2].lag(2 * time.Second)
		s[0].lag(5 * time.Millisecond)
		for range 4 {
			time.Sleep(time.Second)
			p.tick()
		}
		if out.Len() != 0 {
			t.Fatalf("printed before the fifth second: %q", out.String())
		}
		s[1].lag(7 * time.Millisecond)
		time.Sleep(time.Second)
		p.tick()
		line := out.String()
		for _, want := range []string{"[  5s]", "reconciles/s 0/0/2 ", "cache lag p50 7.0ms max 2000.0ms\n"} {
			if !strings.Contains(line, want) {
				t.Errorf("line %q lacks %q", line, want)
			}
		}
		if n := strings.Count(line, "\n"); n != 1 {
			t.Errorf("printed %d lines, want 1: %q", n, line)
		}
	})
}

// flush prints the seconds since the last line, and nothing when there are none; on a
// terminal every tick rewrites the line and end finishes it.
func TestProgressFlushAndTerminal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		p, s := newTestProgress(&out, false)
		for range 5 {
			time.Sleep(time.Second)
			p.tick()
		}
		p.flush()
		if n := strings.Count(out.String(), "\n"); n != 1 {
			t.Fatalf("flush right after a line printed again: %q", out.String())
		}
		s[2].lag(3 * time.Millisecond)
		time.Sleep(time.Second)
		p.tick()
		p.flush()
		if got := out.String(); strings.Count(got, "\n") != 2 || !strings.Contains(got, "[  6s]") || !strings.Contains(got, "max 3.0ms\n") {
			t.Errorf("flush after a second did not print it: %q", got)
		}
		p.end()
		if strings.Count(out.String(), "\n") != 2 {
			t.Errorf("end printed on a log: %q", out.String())
		}

		out.Reset()
		p, _ = newTestProgress(&out, true)
		time.Sleep(time.Second)
		p.tick()
		time.Sleep(time.Second)
		p.tick()
		p.end()
		got := out.String()
		if strings.Count(got, "\r\033[K") != 2 || !strings.HasSuffix(got, "\n") || strings.Count(got, "\n") != 1 {
			t.Errorf("terminal output %q: want two rewritten lines, finished once", got)
		}
	})
}
