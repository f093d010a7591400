package informer_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ctrlkit/ctrlkit/indexer"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// TestEmptyResyncBatch drives the window in which a resync comes out of the FIFO
// with nothing to resync, deterministically: an index function holds the pop loop
// on one update while the resync is queued behind it and a second update of the
// only object is queued behind the resync. When the resync is popped, its one key
// has a newer change queued, so its batch is empty. The informer must take that
// in its stride, and resync normally the next time.
func TestEmptyResyncBatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(t *testing.T, srv *reflectortest.Server[cm])
	}{
		{"updated again", func(t *testing.T, srv *reflectortest.Server[cm]) {
			mustUpdate(t, srv, configMap("cm-0", "i", "2"))
		}},
		{"deleted", func(t *testing.T, srv *reflectortest.Server[cm]) {
			mustDelete(t, srv, "cm-0")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newServer(t, reflectortest.Config{}, 1)
				gate := make(chan struct{})
				held := make(chan struct{}, 1)
				inf := informer.New(srv, informer.Config[cm]{
					ResyncPeriod: time.Second,
					Indexers: indexer.Indexers[cm]{"gated": func(c cm) ([]string, error) {
						if c.Data["i"] == "1" {
							held <- struct{}{}
							<-gate
						}
						return nil, nil
					}},
				})
				rec := newRecorder()
				mustAdd(t, inf, rec, informer.HandlerOptions{})
				start(t, inf)
				synctest.Wait()
				rec.takeCalls()

				mustUpdate(t, srv, configMap("cm-0", "i", "1"))
				<-held // the pop loop is applying that update
				time.Sleep(time.Second)
				synctest.Wait() // the resync is queued behind the update
				tc.after(t, srv)
				synctest.Wait() // and the next change behind the resync
				close(gate)
				synctest.Wait()
				checkInSync(t, srv, inf, rec)
				for _, c := range rec.takeCalls() {
					if c[:4] == "sync" {
						t.Errorf("a resync was delivered for a key with a newer change queued: %s", c)
					}
				}
				if len(srv.Items()) == 0 {
					return
				}
				// The next resync finds the object and delivers it.
				time.Sleep(time.Second)
				synctest.Wait()
				want := []string{"sync cm-0@" + srv.Items()[0].ResourceVersion}
				if diff := cmp.Diff(want, rec.takeCalls()); diff != "" {
					t.Errorf("the resync after the empty one (-want +got):\n%s", diff)
				}
			})
		})
	}
}
