package latency

import (
	"testing"
	"time"
)

func TestKeyIndex(t *testing.T) {
	for _, i := range []int{0, 7, 999, 12345} {
		if got := KeyIndex(KeyName(i)); got != i {
			t.Errorf("KeyIndex(%q) = %d, want %d", KeyName(i), got, i)
		}
	}
	for _, name := range []string{"", "cm-1", "xx-00001", "cm-abcde", "cm-000001"} {
		if got := KeyIndex(name); got != -1 {
			t.Errorf("KeyIndex(%q) = %d, want -1", name, got)
		}
	}
}

func TestAnalyze(t *testing.T) {
	ms := time.Millisecond
	writes := []Write{
		// key 0: two writes before the controller looks, covered by one reconcile
		{Key: 0, RV: 10, Send: 0, Ack: 2 * ms},
		{Key: 0, RV: 12, Send: 1 * ms, Ack: 3 * ms},
		// key 1: covered by a later reconcile that saw a newer version
		{Key: 1, RV: 11, Send: 2 * ms, Ack: 4 * ms},
		{Key: 1, RV: 14, Send: 5 * ms, Ack: 6 * ms},
		// key 2: never reconciled
		{Key: 2, RV: 13, Send: 3 * ms, Ack: 5 * ms},
		// outside the window
		{Key: 0, RV: 20, Send: 50 * ms, Ack: 51 * ms},
	}
	obs := []Observation{
		{Key: 1, RV: 9, At: 4 * ms}, // an older version: covers nothing
		{Key: 0, RV: 12, At: 6 * ms},
		{Key: 1, RV: 14, At: 9 * ms},
		{Key: 0, RV: 20, At: 60 * ms},
	}
	arr := []Observation{{Key: 0, RV: 10, At: 3 * ms}, {Key: 0, RV: 12, At: 4 * ms}, {Key: 1, RV: 14, At: 8 * ms}}
	r := Analyze(writes, obs, arr, 3, 0, 10*ms)
	if r.Writes != 5 || r.Uncovered != 1 {
		t.Errorf("writes %d uncovered %d, want 5 and 1", r.Writes, r.Uncovered)
	}
	// latencies: key 0: 6, 5; key 1: 7, 4; key 2: never
	if r.P50 != 6*ms || r.P99 != Forever || r.Max != Forever {
		t.Errorf("p50 %v p99 %v max %v, want 6ms, never, never", r.P50, r.P99, r.Max)
	}
	// handler latencies: RV 10: 6−3, RV 12: 6−4, RV 14: 9−8
	if r.HandlerP50 != 2*ms || r.HandlerP99 != 3*ms {
		t.Errorf("handler p50 %v p99 %v, want 2ms and 3ms", r.HandlerP50, r.HandlerP99)
	}
	// event latencies: RV 10: 3−0, RV 12: 4−1, RV 14: 8−5
	if r.EventP50 != 3*ms || r.EventP99 != 3*ms {
		t.Errorf("event p50 %v p99 %v, want 3ms and 3ms", r.EventP50, r.EventP99)
	}
	if r.WriteP50 != 2*ms {
		t.Errorf("write p50 %v, want 2ms", r.WriteP50)
	}
	if r.CaughtUp {
		t.Error("caught up with key 2 never reconciled")
	}
	if want := 500.0; r.WriteRate != want {
		t.Errorf("write rate %v, want %v", r.WriteRate, want)
	}
	if want := 300.0; r.ReconcileRate != want {
		t.Errorf("reconcile rate %v, want %v", r.ReconcileRate, want)
	}

	writes = writes[:4]
	writes = append(writes, Write{Key: 0, RV: 20, Send: 50 * ms, Ack: 51 * ms})
	r = Analyze(writes, obs, arr, 3, 0, 10*ms)
	if !r.CaughtUp || r.Lag != 10*ms || r.P99 != 7*ms {
		t.Errorf("caught up %v lag %v p99 %v, want true, 10ms, 7ms", r.CaughtUp, r.Lag, r.P99)
	}
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {1, 10}, {0, 1}} {
		if got := Percentile(d, c.q); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
}
