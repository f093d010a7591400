package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	cmPath = "/api/v1/namespaces/ns/configmaps"
	psPath = "/apis/example.com/v1/podsets"
)

func TestParseRequest(t *testing.T) {
	for _, tc := range []struct {
		method, target string
		want           request
	}{
		{"GET", "/api/v1/namespaces/ns/configmaps", request{"configmaps", "list"}},
		{"GET", "/api/v1/configmaps?watch=true", request{"configmaps", "watch"}},
		{"GET", "/api/v1/namespaces/ns/configmaps?watch=1", request{"configmaps", "watch"}},
		{"GET", "/api/v1/namespaces/ns/configmaps/a", request{"configmaps", "get"}},
		{"GET", "/api/v1/namespaces/ns", request{"namespaces", "get"}},
		{"GET", "/api/v1/namespaces", request{"namespaces", "list"}},
		{"POST", "/apis/example.com/v1/namespaces/ns/podsets", request{"podsets.example.com", "create"}},
		{"PUT", "/apis/apps/v1/namespaces/ns/deployments/d/status", request{"deployments.apps", "update"}},
		{"PATCH", "/apis/apps/v1/namespaces/ns/deployments/d", request{"deployments.apps", "patch"}},
		{"DELETE", "/api/v1/nodes/n", request{"nodes", "delete"}},
		{"GET", "/apis/example.com/v1/podsets", request{"podsets.example.com", "list"}},
		{"GET", "/version", request{"", "get"}},
		{"GET", "/apis/apps/v1", request{"", "get"}},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		if got := parseRequest(r); got != tc.want {
			t.Errorf("%s %s = %+v, want %+v", tc.method, tc.target, got, tc.want)
		}
	}
}

// TestForwards checks that a request no rule touches reaches the upstream with its
// credentials and query, and that the answer comes back unchanged.
func TestForwards(t *testing.T) {
	f := newFakeAPI(t)
	p := start(t, f, Config{Rules: []Rule{{Resource: "pods", Status: Status{Code: 500, Probability: 1}}}})
	code, hdr, body := get(t, p, cmPath+"?labelSelector=a%3Db")
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	want := `{"kind":"ConfigMapList","metadata":{"resourceVersion":"10"},"items":[]}`
	if string(body) != want || hdr.Get("Content-Type") != "application/json" {
		t.Errorf("got %s %q, want %q", hdr.Get("Content-Type"), body, want)
	}
	if q := f.seenQueries(); len(q) != 1 || q[0].Get("labelSelector") != "a=b" {
		t.Errorf("upstream saw %v", q)
	}
	if s := p.Stats()["configmaps"]; s != (Stats{}) {
		t.Errorf("stats = %+v, want none", s)
	}
	if cfg := p.Config(); cfg.Host != p.URL() || cfg.BearerToken != "" || !strings.HasPrefix(cfg.Host, "http://127.0.0.1:") {
		t.Errorf("Config() = %+v", cfg)
	}
}

func TestDelayKeepsOrderWithinBounds(t *testing.T) {
	const minD, maxD = 100 * time.Millisecond, 250 * time.Millisecond
	for _, tc := range []struct {
		name  string
		path  string
		key   string
		proto bool
		event func(string, string, int) []byte
	}{
		{"json", cmPath, "configmaps", false, jsonEvent},
		{"protobuf", psPath, "podsets.example.com", true, protoEvent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAPI(t)
			p := start(t, f, Config{Seed: 7, Rules: []Rule{{Resource: tc.key, DelayWatchEvents: Delay{Min: minD, Max: maxD}}}})
			ch, end := watch(t, p, tc.path, tc.proto)
			const n = 12
			var sent []time.Time
			var want []string
			for i := range n {
				typ := "MODIFIED"
				if i == n-1 {
					typ = "BOOKMARK"
				}
				b := tc.event(typ, fmt.Sprint("o", i), 20+i)
				want = append(want, string(b))
				sent = append(sent, time.Now())
				f.send(t, b)
			}
			var got []string
			var last time.Time
			for i := range n {
				r := next(t, ch, 10*time.Second)
				got = append(got, r.data)
				// Released no sooner than Min after the upstream sent it (nor before the
				// previous event); generous upper bound for a loaded machine.
				if d := r.at.Sub(sent[i]); d < minD || d > maxD+2*time.Second {
					t.Errorf("event %d arrived after %v, want within [%v, %v]", i, d, minD, maxD)
				}
				if r.at.Before(last) {
					t.Errorf("event %d arrived before event %d", i, i-1)
				}
				last = r.at
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("events (-sent +received):\n%s", diff)
			}
			if s := p.Stats()[tc.key]; s.Delayed != n {
				t.Errorf("Delayed = %d, want %d", s.Delayed, n)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if err := waitEnd(t, ch, end); err == nil {
				t.Log("stream ended cleanly at Close")
			}
		})
	}
}

// TestDelayNeverReorders sends a slow event then a fast one: the fast one waits.
func TestDelayNeverReorders(t *testing.T) {
	f := newFakeAPI(t)
	p := start(t, f, Config{Rules: []Rule{{DelayWatchEvents: Delay{Min: 300 * time.Millisecond, Max: 300 * time.Millisecond}}}})
	ch, _ := watch(t, p, cmPath, false)
	f.send(t, jsonEvent("ADDED", "slow", 1))
	waitStats(t, p, "configmaps", func(s Stats) bool { return s.Delayed == 1 })
	if err := p.SetRules(nil); err != nil {
		t.Fatal(err)
	}
	f.send(t, jsonEvent("ADDED", "fast", 2))
	first := next(t, ch, 10*time.Second)
	second := next(t, ch, 10*time.Second)
	if !strings.Contains(first.data, `"slow"`) || !strings.Contains(second.data, `"fast"`) {
		t.Errorf("order: %q then %q", first.data, second.data)
	}
}

func TestHoldUntilRelease(t *testing.T) {
	f := newFakeAPI(t)
	p := start(t, f, Config{Rules: []Rule{{Resource: "configmaps", HoldWatchEvents: true}}})
	ch, _ := watch(t, p, cmPath, false)
	for i := range 3 {
		f.send(t, jsonEvent("ADDED", fmt.Sprint("o", i), i+1))
	}
	waitStats(t, p, "configmaps", func(s Stats) bool { return s.Held == 3 })
	select {
	case r := <-ch:
		t.Fatalf("held event written: %q", r.data)
	case <-time.After(200 * time.Millisecond):
	}
	p.Release("pods") // another resource: nothing moves
	select {
	case r := <-ch:
		t.Fatalf("event written on another resource's release: %q", r.data)
	case <-time.After(100 * time.Millisecond):
	}
	p.Release("configmaps")
	for i := range 3 {
		if r := next(t, ch, 10*time.Second); !strings.Contains(r.data, fmt.Sprintf(`"o%d"`, i)) {
			t.Errorf("event %d = %q", i, r.data)
		}
	}
	// Still holding: the next event waits for the next release, here by SetRules.
	f.send(t, jsonEvent("ADDED", "later", 9))
	waitStats(t, p, "configmaps", func(s Stats) bool { return s.Held == 4 })
	select {
	case r := <-ch:
		t.Fatalf("held event written: %q", r.data)
	case <-time.After(100 * time.Millisecond):
	}
	if err := p.SetRules(nil); err != nil {
		t.Fatal(err)
	}
	if r := next(t, ch, 10*time.Second); !strings.Contains(r.data, `"later"`) {
		t.Errorf("after SetRules: %q", r.data)
	}
}

func TestDropWatchAfterEvents(t *testing.T) {
	f := newFakeAPI(t)
	p := start(t, f, Config{Rules: []Rule{{Resource: "podsets.example.com", DropWatchAfter: Drop{Events: 2}}}})
	ch, end := watch(t, p, psPath, true)
	for i := range 2 {
		f.send(t, protoEvent("ADDED", fmt.Sprint("o", i), i+1))
		next(t, ch, 10*time.Second)
	}
	err := waitEnd(t, ch, end)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("stream ended with %v, want a broken connection (unexpected EOF)", err)
	}
	if s := p.Stats()["podsets.example.com"]; s.DroppedWatches != 1 {
		t.Errorf("DroppedWatches = %d, want 1", s.DroppedWatches)
	}
}

func TestDropWatchAfterDuration(t *testing.T) {
	f := newFakeAPI(t)
	p := start(t, f, Config{Rules: []Rule{{DropWatchAfter: Drop{After: 100 * time.Millisecond}}}})
	began := time.Now()
	ch, end := watch(t, p, cmPath, false)
	f.send(t, jsonEvent("ADDED", "a", 1))
	next(t, ch, 10*time.Second)
	err := waitEnd(t, ch, end)
	if err == nil || time.Since(began) < 100*time.Millisecond {
		t.Errorf("stream ended after %v with %v, want a break after 100ms", time.Since(began), err)
	}
	if s := p.Stats()["configmaps"]; s.DroppedWatches != 1 {
		t.Errorf("DroppedWatches = %d, want 1", s.DroppedWatches)
	}
}

func TestStatusInjection(t *testing.T) {
	for _, code := range []int{410, 429, 500} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			f := newFakeAPI(t)
			p := start(t, f, Config{Rules: []Rule{{Resource: "configmaps", Status: Status{Code: code, Probability: 1, Verbs: []string{"list"}}}}})
			got, hdr, body := get(t, p, cmPath)
			if got != code {
				t.Fatalf("status %d, want %d", got, code)
			}
			st := decodeStatus(t, body)
			if st.Code != int32(code) || st.Status != "Failure" || st.Kind != "Status" || st.Reason == "" {
				t.Errorf("body = %+v", st)
			}
			if ra := hdr.Get("Retry-After"); (code == 429) != (ra == "1") {
				t.Errorf("Retry-After = %q", ra)
			}
			if q := f.seenQueries(); len(q) != 0 {
				t.Errorf("upstream got %d requests, want none", len(q))
			}
			// Another verb and another resource go through.
			if c, _, _ := get(t, p, cmPath+"/x"); c != http.StatusOK {
				t.Errorf("get: %d", c)
			}
			if c, _, _ := get(t, p, psPath); c != http.StatusOK {
				t.Errorf("other resource: %d", c)
			}
			if s := p.Stats()["configmaps"]; s.Statuses != 1 {
				t.Errorf("Statuses = %d, want 1", s.Statuses)
			}
		})
	}
	t.Run("probability 0", func(t *testing.T) {
		f := newFakeAPI(t)
		p := start(t, f, Config{Rules: []Rule{{Status: Status{Code: 500, Probability: 0}}}})
		for range 20 {
			if c, _, b := get(t, p, cmPath); c != http.StatusOK {
				t.Fatalf("status %d: %s", c, b)
			}
		}
		if s := p.Stats()["configmaps"]; s.Statuses != 0 {
			t.Errorf("Statuses = %d", s.Statuses)
		}
	})
	t.Run("watch", func(t *testing.T) {
		f := newFakeAPI(t)
		p := start(t, f, Config{Rules: []Rule{{Status: Status{Code: 410, Probability: 1, Verbs: []string{"watch"}}}}})
		if c, _, b := get(t, p, cmPath+"?watch=true"); c != http.StatusGone || decodeStatus(t, b).Reason != "Expired" {
			t.Errorf("watch: %d %s", c, b)
		}
	})
}

// TestSeedReproducible: the same seed gives the same decisions and delays, another
// seed others.
func TestSeedReproducible(t *testing.T) {
	f := newFakeAPI(t)
	pattern := func(seed uint64) string {
		p := start(t, f, Config{Seed: seed, Rules: []Rule{{Status: Status{Code: 500, Probability: 0.5}}}})
		var b strings.Builder
		for range 40 {
			c, _, _ := get(t, p, cmPath)
			b.WriteString(map[bool]string{true: "x", false: "."}[c == 500])
		}
		return b.String()
	}
	a, b, c := pattern(1), pattern(1), pattern(2)
	if a != b {
		t.Errorf("seed 1 twice: %s vs %s", a, b)
	}
	if a == c {
		t.Errorf("seeds 1 and 2 agree: %s", a)
	}
	if !strings.Contains(a, "x") || !strings.Contains(a, ".") {
		t.Errorf("probability 0.5 gave %s", a)
	}

	delays := func(seed, n uint64, key string) []time.Duration {
		p := &Proxy{seed: seed}
		rnd := p.streamRand(key, n)
		var out []time.Duration
		for range 20 {
			out = append(out, drawDelay(rnd, Delay{Min: time.Millisecond, Max: time.Second}))
		}
		return out
	}
	d := delays(1, 0, "pods")
	if diff := cmp.Diff(d, delays(1, 0, "pods")); diff != "" {
		t.Errorf("same seed, stream and resource:\n%s", diff)
	}
	for _, other := range [][]time.Duration{delays(2, 0, "pods"), delays(1, 1, "pods"), delays(1, 0, "nodes")} {
		if cmp.Equal(d, other) {
			t.Errorf("different stream gave the same delays %v", d)
		}
	}
	for _, x := range d {
		if x < time.Millisecond || x > time.Second {
			t.Errorf("delay %v outside [1ms, 1s]", x)
		}
	}
}

func TestStaleList(t *testing.T) {
	f := newFakeAPI(t)
	p := start(t, f, Config{Rules: []Rule{{Resource: "configmaps", StaleList: Stale{Versions: 1}}}})
	get(t, p, cmPath) // no history: fresh, remembers 10
	f.setRV(20)
	get(t, p, cmPath) // history [10]: one version back does not exist yet; remembers 20
	f.setRV(30)
	get(t, p, cmPath) // served from 10
	get(t, p, cmPath+"?resourceVersion=0")
	var got []string
	for _, q := range f.seenQueries() {
		got = append(got, q.Encode())
	}
	want := []string{"", "", "resourceVersion=10&resourceVersionMatch=Exact", "resourceVersion=0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("upstream queries (-want +got):\n%s", diff)
	}
	if s := p.Stats()["configmaps"]; s.StaleLists != 1 {
		t.Errorf("StaleLists = %d, want 1", s.StaleLists)
	}
}

// TestStaleListFromWatchAndProtobuf: resourceVersions seen in protobuf watch events and
// LISTs count, and By picks by age.
func TestStaleListFromWatchAndProtobuf(t *testing.T) {
	f := newFakeAPI(t)
	p := start(t, f, Config{Rules: []Rule{{Resource: "podsets.example.com", StaleList: Stale{By: time.Hour}}}})
	get(t, p, psPath) // remembers 10 (protobuf list), seen now: not an hour old
	ch, _ := watch(t, p, psPath, true)
	f.send(t, protoEvent("ADDED", "a", 15))
	next(t, ch, 10*time.Second)
	p.mu.Lock()
	h := p.resources["podsets.example.com"].history
	var rvs []string
	for _, s := range h {
		rvs = append(rvs, s.rv)
	}
	p.resources["podsets.example.com"].history[0].at = time.Now().Add(-2 * time.Hour) // 10 is old now
	p.mu.Unlock()
	if diff := cmp.Diff([]string{"10", "15"}, rvs); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	get(t, p, psPath)
	q := f.seenQueries()
	if last := q[len(q)-1]; last.Get("resourceVersion") != "10" || last.Get("resourceVersionMatch") != "Exact" {
		t.Errorf("upstream query %v, want resourceVersion=10 Exact", last)
	}
}

func TestCloseEndsStreams(t *testing.T) {
	f := newFakeAPI(t)
	p, err := Start(t.Context(), f.config(), Config{Rules: []Rule{{HoldWatchEvents: true}}})
	if err != nil {
		t.Fatal(err)
	}
	ch1, end1 := watch(t, p, cmPath, false)
	f.send(t, jsonEvent("ADDED", "held", 1)) // one stream waits on a held event
	waitStats(t, p, "configmaps", func(s Stats) bool { return s.Held == 1 })
	// The other stream is idle. It opens only now: the fake API hands a frame to
	// whichever open watch takes it first.
	ch2, end2 := watch(t, p, psPath, true)
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	waitEnd(t, ch1, end1)
	waitEnd(t, ch2, end2)
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := http.Get(p.URL() + cmPath); err == nil {
		t.Error("proxy still answers after Close")
	}
}

func TestStartRejectsBadRules(t *testing.T) {
	f := newFakeAPI(t)
	for _, r := range []Rule{
		{DelayWatchEvents: Delay{Min: -1}},
		{DropWatchAfter: Drop{Events: -1}},
		{Status: Status{Code: 200, Probability: 1}},
		{Status: Status{Code: 500, Probability: 2}},
		{StaleList: Stale{Versions: -1}},
	} {
		p, err := Start(t.Context(), f.config(), Config{Rules: []Rule{r}})
		if err == nil || !strings.HasPrefix(err.Error(), "faultproxy: ") {
			t.Errorf("%+v: err = %v", r, err)
		}
		if p != nil {
			p.Close()
		}
	}
	if _, err := Start(t.Context(), nil, Config{}); err == nil {
		t.Error("nil upstream accepted")
	}
}
