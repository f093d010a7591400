package workqueue

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// recMetrics records what the queue reports.
type recMetrics struct {
	hook    func() // called from every event, to prove no queue lock is held
	onAdded func() // called from Added

	mu       sync.Mutex
	added    int
	retried  int
	waited   []time.Duration
	worked   []time.Duration
	inFlight func() InFlight
}

func (m *recMetrics) event(f func()) {
	if m.hook != nil {
		m.hook()
	}
	m.mu.Lock()
	f()
	m.mu.Unlock()
}

func (m *recMetrics) Added() {
	if m.onAdded != nil {
		m.onAdded()
	}
	m.event(func() { m.added++ })
}
func (m *recMetrics) Retried() { m.event(func() { m.retried++ }) }
func (m *recMetrics) Started(d time.Duration) {
	m.event(func() { m.waited = append(m.waited, d) })
}
func (m *recMetrics) Finished(d time.Duration) {
	m.event(func() { m.worked = append(m.worked, d) })
}
func (m *recMetrics) Attach(f func() InFlight) { m.inFlight = f }

func TestMetricsHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &recMetrics{}
		q := New(Config[string]{Metrics: m})
		ctx := context.Background()
		if m.inFlight == nil {
			t.Fatal("New did not call Attach")
		}

		q.Add("a")
		q.Add("a") // duplicate: not an add
		time.Sleep(2 * time.Second)
		q.Add("b")
		if got := m.inFlight().Ready; got != 2 {
			t.Fatalf("ready = %d after two adds, want 2", got)
		}
		time.Sleep(time.Second)
		a, _ := q.Get(ctx) // waited 3s
		time.Sleep(time.Second)
		b, _ := q.Get(ctx) // waited 2s
		time.Sleep(4 * time.Second)
		if got, want := m.inFlight(), (InFlight{Items: 2, Total: 9 * time.Second, Longest: 5 * time.Second}); got != want {
			t.Fatalf("in flight = %+v, want %+v", got, want)
		}
		q.Add(a)  // re-added while processing: an add
		q.Done(a) // worked 5s; queued again
		time.Sleep(time.Second)
		q.Done(b) // worked 5s
		if got, want := m.inFlight(), (InFlight{Ready: 1}); got != want {
			t.Fatalf("in flight = %+v, want %+v", got, want)
		}
		a, _ = q.Get(ctx) // waited 1s since its re-add
		q.Done(a)

		q.AddAfter("c", time.Second) // a retry; an add when it fires
		q.AddRateLimited("d")        // a retry; fires after 5ms
		q.AddAfter("e", 0)           // a retry and an add at once
		time.Sleep(time.Second)
		for range 3 {
			item, _ := q.Get(ctx)
			q.Done(item)
		}
		q.Done("never") // misuse: not reported

		m.mu.Lock()
		defer m.mu.Unlock()
		if m.added != 6 || m.retried != 3 {
			t.Errorf("added %d, retried %d; want 6, 3", m.added, m.retried)
		}
		// a, b, a again, then e (added at once), d (after 5ms) and c (after 1s).
		wantWaited := []time.Duration{3 * time.Second, 2 * time.Second, time.Second, time.Second, time.Second - 5*time.Millisecond, 0}
		if diff := cmp.Diff(wantWaited, m.waited); diff != "" {
			t.Errorf("waited (-want +got):\n%s", diff)
		}
		wantWorked := []time.Duration{5 * time.Second, 5 * time.Second, 0, 0, 0, 0}
		if diff := cmp.Diff(wantWorked, m.worked); diff != "" {
			t.Errorf("worked (-want +got):\n%s", diff)
		}
		q.ShutDown()
	})
}

// TestMetricsSeeBufferedAdds: adds still in Add's buffer are reported to Added at the
// latest by the in-flight function, before it returns, so a scrape that calls it first
// counts them; a duplicate among them is not an add.
func TestMetricsSeeBufferedAdds(t *testing.T) {
	m := &recMetrics{}
	q := New(Config[string]{Metrics: m})
	defer q.ShutDown()
	for range 3 {
		q.Add("a")
		q.Add("b")
		q.Add("a")
		m.inFlight()
		m.mu.Lock()
		added := m.added
		m.mu.Unlock()
		if added != 2 {
			t.Fatalf("Added reported %d times after the in-flight probe, want 2", added)
		}
		for range 2 {
			item, err := q.Get(doneCtx)
			if err != nil {
				t.Fatal(err)
			}
			q.Done(item)
		}
		m.mu.Lock()
		m.added = 0
		m.mu.Unlock()
	}
	checkInvariants(t, q)
}

// binnedMetrics is a Binned recMetrics: the queue must count and bin instead of calling
// Added, Started and Finished.
type binnedMetrics struct {
	recMetrics
	stats func(*Stats)
}

func (m *binnedMetrics) Bounds() []time.Duration {
	return []time.Duration{time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}
}
func (m *binnedMetrics) AttachStats(f func(*Stats)) { m.stats = f }

// TestBinnedMetrics: with a Binned Metrics the queue counts the adds (buffered ones
// included, and those of fired delays) and bins the waiting and processing times, through
// both the ready path of Get and the hand-over to a blocked Get, and reports none of them
// one by one.
func TestBinnedMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &binnedMetrics{}
		q := New(Config[string]{Metrics: m})
		ctx := context.Background()
		if m.stats == nil || m.inFlight == nil {
			t.Fatal("New did not call AttachStats and Attach")
		}
		q.Add("a")
		q.Add("a")
		time.Sleep(2 * time.Second)
		q.Add("b")
		time.Sleep(time.Second)
		a, _ := q.Get(ctx) // waited 3s
		time.Sleep(time.Second)
		b, _ := q.Get(ctx) // waited 2s
		time.Sleep(4 * time.Second)
		q.Add(a)
		q.Done(a) // worked 5s
		time.Sleep(time.Second)
		q.Done(b)         // worked 5s
		a, _ = q.Get(ctx) // waited 1s
		q.Done(a)
		q.AddAfter("c", time.Second)
		q.AddRateLimited("d")
		q.AddAfter("e", 0)
		time.Sleep(time.Second)
		for range 3 {
			item, _ := q.Get(ctx) // 1s, 995ms, 0
			q.Done(item)
		}
		got := make(chan string)
		go func() {
			item, _ := q.Get(ctx) // blocks; handed "f" at once: waited 0
			time.Sleep(500 * time.Millisecond)
			q.Done(item) // worked 500ms
			got <- item
		}()
		synctest.Wait()
		q.Add("f")
		<-got
		q.Add("g") // buffered: counted by the stats function

		var st Stats
		m.stats(&st)
		want := Stats{
			Adds:   8,
			Waited: Histogram{Buckets: []uint64{2, 3, 1, 1, 0}, Count: 7, Sum: 7*time.Second + 995*time.Millisecond},
			Worked: Histogram{Buckets: []uint64{4, 1, 0, 0, 2}, Count: 7, Sum: 10*time.Second + 500*time.Millisecond},
		}
		if diff := cmp.Diff(want, st); diff != "" {
			t.Errorf("stats (-want +got):\n%s", diff)
		}
		m.stats(&st) // adds to what it is given
		if st.Adds != 16 || st.Waited.Count != 14 || st.Worked.Buckets[4] != 4 {
			t.Errorf("a second call gave %+v, want every count doubled", st)
		}
		m.mu.Lock()
		if m.added != 0 || len(m.waited) != 0 || len(m.worked) != 0 || m.retried != 3 {
			t.Errorf("reported one by one: %d adds, %d waits, %d works, %d retries; want 0, 0, 0, 3", m.added, len(m.waited), len(m.worked), m.retried)
		}
		m.mu.Unlock()
		if r := m.inFlight().Ready; r != 1 {
			t.Errorf("ready = %d, want 1 (g)", r)
		}
		q.ShutDown()
	})
}

// TestBinnedStagedDone: with Binned metrics a Done that finds the lock taken is staged
// too, and the item's processing time ends at the Done, not when the Done is applied.
func TestBinnedStagedDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &binnedMetrics{}
		q := New(Config[string]{Metrics: m})
		q.Add("a")
		mustGet(t, q, "a")
		time.Sleep(3 * time.Second)
		q.mu.Lock() // another holder of the lock
		returned := make(chan struct{})
		go func() {
			q.Done("a")
			close(returned)
		}()
		<-returned // staged: it did not wait for the lock
		time.Sleep(2 * time.Second)
		q.amu.Lock()
		staged := len(q.adds) == 1 && q.adds[0].done
		q.amu.Unlock()
		q.mu.Unlock()
		if !staged {
			t.Fatal("the Done was not staged")
		}
		q.Add("b")
		mustGet(t, q, "b") // applies the staged Done
		var st Stats
		m.stats(&st)
		if st.Worked.Count != 1 || st.Worked.Sum != 3*time.Second {
			t.Fatalf("worked %d items for %v, want 1 for 3s", st.Worked.Count, st.Worked.Sum)
		}
		if n := m.inFlight().Items; n != 1 {
			t.Fatalf("%d in flight, want 1 (b)", n)
		}
		q.Done("b")
		q.ShutDown()
	})
}
