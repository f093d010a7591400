package informer_test

import (
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// TestHandlerStats: Informer.HandlerStats reports every registered handler's
// backlog (a stuck handler's changes wait in it, a free handler's do not), drops a
// removed handler, and is empty once Run has returned.
func TestHandlerStats(t *testing.T) {
	srv := newServer(t, reflectortest.Config{}, 2)
	inf := informer.New(srv, informer.Config[cm]{})

	entered, release := make(chan struct{}), make(chan struct{})
	var once bool
	stuck := informer.HandlerFuncs[cm]{AddFunc: func(cm, bool) {
		if !once { // only this handler's goroutine calls it
			once = true
			close(entered)
			<-release
		}
	}}
	calls := make(chan string, 10)
	if _, err := inf.AddHandler(stuck, informer.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	free, err := inf.AddHandler(describing(calls), informer.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := backlogs(inf); !slices.Equal(got, []int{0, 0}) {
		t.Fatalf("before Run: backlogs %v, want [0 0]", got)
	}

	stop := start(t, inf)
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // before stop, should the test fail
	<-entered
	for range 2 {
		<-calls // the initial list
	}
	for i := range 3 {
		mustCreate(t, srv, configMap("new-"+strconv.Itoa(i)))
	}
	for range 3 {
		<-calls
	}
	// The free handler has taken every change; the stuck one holds the 3 new ones
	// (the initial list was taken in one go when it started).
	if got := backlogs(inf); !slices.Equal(got, []int{0, 3}) {
		t.Fatalf("backlogs %v, want [0 3]", got)
	}
	if err := inf.RemoveHandler(free); err != nil {
		t.Fatal(err)
	}
	if got := backlogs(inf); !slices.Equal(got, []int{3}) {
		t.Fatalf("after RemoveHandler: backlogs %v, want [3]", got)
	}
	unblock()
	stop()
	if got := inf.HandlerStats(); len(got) != 0 {
		t.Fatalf("after Run returned: HandlerStats %+v, want none", got)
	}
}

// backlogs returns the Backlog of each of inf's handlers, sorted.
func backlogs(inf *informer.Informer[cm]) []int {
	var out []int
	for _, s := range inf.HandlerStats() {
		out = append(out, s.Backlog)
	}
	slices.Sort(out)
	return out
}
