package reflector

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// TestRelistOnRequest: Relist ends the open watch and lists again with a
// consistent read (resourceVersion ""), which the store gets as a Replace at
// the server's current resourceVersion, then watches again; no failure is
// counted and nothing is missed; calls while one is pending add nothing.
// ServerResourceVersion reads the server's resourceVersion with a LIST of at
// most one object.
func TestRelistOnRequest(t *testing.T) {
	for _, mode := range []WatchListMode{WatchListOff, WatchListOn} {
		t.Run(mode.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				srv := newServer(t, reflectortest.Config{WatchList: true}, 3)
				st := newMemStore[configMap]()
				r := New(srv, st, Config[configMap]{WatchList: mode})
				start(t, r)
				synctest.Wait()
				checkInSync(t, srv, st)
				time.Sleep(5 * time.Second)
				synctest.Wait()

				rv, err := r.ServerResourceVersion(context.Background())
				if err != nil || rv != srv.ResourceVersion() {
					t.Fatalf("ServerResourceVersion = %q, %v; want %q", rv, err, srv.ResourceVersion())
				}
				if last := srv.Requests()[len(srv.Requests())-1]; last.Verb != reflectortest.List || last.Options.Limit != 1 || last.Options.ResourceVersion != "" {
					t.Fatalf("ServerResourceVersion's request = %+v, want a consistent LIST of one", last)
				}
				replaces := func() int {
					n := 0
					for _, c := range st.Calls() {
						if c.op == "replace" {
							n++
						}
					}
					return n
				}
				before, reqs := replaces(), len(srv.Requests())
				r.Relist()
				synctest.Wait()
				if got := replaces(); got != before+1 {
					t.Fatalf("%d replaces after Relist, want %d", got, before+1)
				}
				after := srv.Requests()[reqs:]
				if len(after) == 0 || after[0].Options.ResourceVersion != "" || after[0].Options.Limit == 1 {
					t.Fatalf("requests after Relist = %+v, want a consistent list first", after)
				}
				h := r.Health()
				if h.Stats.Failures != 0 || h.State != StateWatching || srv.OpenWatches() != 1 {
					t.Fatalf("after Relist: state %v, %d open watches, stats %+v, last error %v", h.State, srv.OpenWatches(), h.Stats, h.LastError)
				}
				if calls := st.Calls(); calls[len(calls)-1].rv != srv.ResourceVersion() {
					t.Fatalf("last store call %v, want a replace at %s", calls[len(calls)-1], srv.ResourceVersion())
				}

				// Calls while one is pending add nothing: both are made while the
				// reflector is held opening a watch (the server's watch timeout
				// ended the previous one), so neither can have been taken yet.
				time.Sleep(5 * time.Second)
				gate, held := make(chan struct{}), make(chan struct{}, 1)
				srv.SetHook(func(req reflectortest.Request) error {
					if req.Verb == reflectortest.Watch && (req.Options.SendInitialEvents == nil || !*req.Options.SendInitialEvents) {
						select {
						case held <- struct{}{}:
						default:
						}
						<-gate
					}
					return nil
				})
				srv.CloseWatches()
				synctest.Wait()
				select {
				case <-held:
				default:
					t.Fatal("the reflector did not watch again after the server closed its watch")
				}
				before = replaces()
				r.Relist()
				r.Relist()
				close(gate)
				synctest.Wait()
				if got := replaces(); got != before+1 {
					t.Fatalf("%d replaces after two Relists, want %d", got, before+1)
				}
				h = r.Health()
				if h.Stats.Failures != 0 || h.State != StateWatching || srv.OpenWatches() != 1 {
					t.Fatalf("after two Relists: state %v, %d open watches, stats %+v, last error %v", h.State, srv.OpenWatches(), h.Stats, h.LastError)
				}
				// Still in step.
				mustCreate(t, srv, cm("ns", "late"))
				synctest.Wait()
				checkInSync(t, srv, st)
			})
		})
	}
}
