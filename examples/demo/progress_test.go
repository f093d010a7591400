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
	return newProgress(w, nil, out, tty), s
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

// With replicas, each line is followed by one line per replica: its slots, share of the
// hash space, cached objects and reconciles per second since the previous line; a
// replica that left says when. On a terminal the whole block is rewritten in place.
func TestProgressReplicaLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		s := []*stats{{name: "sidecar"}, {name: "network"}, {name: "podset"}}
		w := newWorkload(&clients{kube: fake.NewClientset()}, 1, s, nil, nil, nil)
		start := time.Now()
		vs := []replicaView{
			{id: "r0", slots: 33, fraction: 33.0 / 64, cached: [cachedKinds]int{1, 2, 3, 4}, reconciles: [3]int64{5, 10, 15}},
			{id: "r1", slots: 31, fraction: 31.0 / 64, reconciles: [3]int64{0, 0, 5}},
			{id: "r2", reconciles: [3]int64{7, 8, 9}, left: start.Add(2 * time.Second)},
		}
		p := newProgress(w, func() []replicaView { return vs }, &out, false)
		for range 5 {
			time.Sleep(time.Second)
			p.tick()
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		want := []string{
			"       r0 33 slots  51.6% | caches 1 deploy, 2 net, 3 podset, 4 pods | reconciles/s 1/2/3",
			"       r1 31 slots  48.4% | caches 0 deploy, 0 net, 0 podset, 0 pods | reconciles/s 0/0/1",
			"       r2 left at 2s | reconciled 7/8/9 before",
		}
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "[  5s] objects:") {
			t.Fatalf("printed %q: want the line and 3 replica lines", out.String())
		}
		for i, w := range want {
			if lines[i+1] != w {
				t.Errorf("replica line %d = %q, want %q", i, lines[i+1], w)
			}
		}

		// The next line counts from the previous one.
		vs[0].reconciles = [3]int64{10, 10, 15}
		out.Reset()
		for range 5 {
			time.Sleep(time.Second)
			p.tick()
		}
		if got := strings.Split(out.String(), "\n")[1]; !strings.HasSuffix(got, "reconciles/s 1/0/0") {
			t.Errorf("second r0 line %q: want the reconciles since the first", got)
		}

		// A terminal block goes back to its first line and rewrites each.
		out.Reset()
		p = newProgress(w, func() []replicaView { return vs }, &out, true)
		for range 2 {
			time.Sleep(time.Second)
			p.tick()
		}
		p.end()
		got := out.String()
		if n := strings.Count(got, "\033[A"); n != 3 {
			t.Errorf("terminal output moved up %d lines, want 3 (once, over the block of 4): %q", n, got)
		}
		if n := strings.Count(got, "\033[K"); n != 8 {
			t.Errorf("terminal output cleared %d lines, want 8: %q", n, got)
		}
		if !strings.HasSuffix(got, "before\n") {
			t.Errorf("terminal block not finished by end: %q", got)
		}
	})
}
