package reflector

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// TestUnsafeDeleteOfCorruptObjectRelists covers client-go
// TestReflectorReplacesStoreOnUnsafeDelete: when an object that can no longer be
// decoded is deleted with the unsafe-delete option, the server cannot send a
// Deleted event for it; the watch gets an Error event with reason
// StoreReadError instead, as does any new watch from a resourceVersion before the
// deletion. Only a new list removes the object from the store.
func TestUnsafeDeleteOfCorruptObjectRelists(t *testing.T) {
	bubble(t, func(t *testing.T) {
		storeReadError := &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusInternalServerError,
			Reason:  metav1.StatusReasonStoreReadError,
			Message: "failed to prepare current and previous objects: corrupt object has been deleted",
		}
		d := &driver{
			list: func(opts metav1.ListOptions) ([]configMap, metav1.ListMeta, error) {
				if opts.ResourceVersion == "0" {
					return listOf("3", cmAt("foo-1", "1"), cmAt("foo-2", "2"), cmAt("foo-3", "3"))(opts)
				}
				return listOf("5", cmAt("foo-1", "1"), cmAt("foo-2", "2"), cmAt("foo-3", "3"))(opts)
			},
			opened: func(n int, w *testWatch) {
				if n == 0 {
					w.send(watch.Added, cmAt("corrupt", "4"))
				}
				// The deletion at 5 cannot be decoded by any watch from before it.
				if rv, _ := strconv.Atoi(w.opts.ResourceVersion); rv < 5 {
					w.send(watch.Error, storeReadError)
				}
			},
		}
		st := newMemStore[configMap]()
		r := New[configMap](d, st, Config[configMap]{WatchList: WatchListOff})
		start(t, r)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if diff := cmp.Diff([]string{"ns/foo-1@1", "ns/foo-2@2", "ns/foo-3@3"}, st.Contents()); diff != "" {
			t.Errorf("store after the unsafe deletion (-want +got):\n%s", diff)
		}
		if got := r.LastSyncResourceVersion(); got != "5" {
			t.Errorf("LastSyncResourceVersion = %q, want 5; requests %v", got, d.requests())
		}
	})
}

// stopEnds is a testWatch that ignores its request's context but ends when
// stopped, as client-go's fake watchers do.
type stopEnds struct{ *testWatch }

func (w stopEnds) Stop() { w.testWatch.Stop(); w.end() }

// TestGivesUpOnAWatchTheListerWatcherKeepsOpen: MinWatchTimeout's doc says the
// reflector gives up on a watch some time after its timeout if the server failed
// to close it. A ListerWatcher whose watch outlives its context (as client-go's
// fake clientsets' do) must not keep the reflector on it forever, for a plain
// watch or a streaming list: the reflector stops it.
func TestGivesUpOnAWatchTheListerWatcherKeepsOpen(t *testing.T) {
	for _, mode := range []WatchListMode{WatchListOff, WatchListOn} {
		t.Run(mode.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				d := &driver{list: listOf("1")}
				lw := Funcs[configMap]{ListFunc: d.List, WatchFunc: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
					w, err := d.Watch(ctx, opts)
					if err != nil {
						return nil, err
					}
					return stopEnds{w.(*testWatch)}, nil
				}}
				r := New[configMap](lw, newMemStore[configMap](), Config[configMap]{WatchList: mode, MinWatchTimeout: 10 * time.Second})
				start(t, r)
				synctest.Wait()
				if mode == WatchListOn {
					d.watch(t, 0).send(watch.Bookmark, endOfInitialEvents("1"))
				}
				time.Sleep(2 * time.Minute)
				synctest.Wait()
				w := d.watch(t, 0)
				if w.ctx.Err() == nil {
					t.Fatal("the watch request's context is still live")
				}
				if n := len(d.requests()); n < 3 {
					t.Errorf("requests after 2 minutes: %v; the first watch (timeout %ds) was never given up", d.requests(), *w.opts.TimeoutSeconds)
				}
			})
		})
	}
}

// TestFakeClientsetWithDefaults: a reflector on client-go's fake clientset, with
// the default configuration (WatchListAuto), syncs and follows changes: the fake
// client says it cannot stream lists, so the reflector lists.
func TestFakeClientsetWithDefaults(t *testing.T) {
	bubble(t, func(t *testing.T) {
		client := fake.NewClientset(cm("ns", "a"))
		st := newMemStore[configMap]()
		r := New(FromTyped(client.CoreV1().ConfigMaps("ns")), st, Config[configMap]{})
		start(t, r)
		synctest.Wait()
		if h := r.Health(); !h.Synced || h.Stats.Lists != 1 || h.Stats.StreamingLists != 0 {
			t.Fatalf("health = %+v, want synced by one LIST", h)
		}
		if _, err := client.CoreV1().ConfigMaps("ns").Create(t.Context(), cm("ns", "b"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := len(st.Contents()); got != 2 {
			t.Errorf("store holds %v, want a and b", st.Contents())
		}
	})
}

// clientDecodingError is the Status client-go's stream watcher makes up when it
// cannot read the stream.
func clientDecodingError() *metav1.Status {
	st := apierrors.NewInternalError(errors.New("unable to decode an event from the watch stream: bad object")).ErrStatus
	st.Details.Causes = append(st.Details.Causes, metav1.StatusCause{Type: "ClientWatchDecoding", Message: "bad object"})
	return &st
}

// TestClientSideWatchErrors: an Error event the client made up is not news from
// the server (LastEventTime stays), is retried from the same resourceVersion the
// first time, and relists at the most recent resourceVersion when it comes again
// with no event in between (the same undecodable event would come back forever).
// A server's Error event does count as news.
func TestClientSideWatchErrors(t *testing.T) {
	bubble(t, func(t *testing.T) {
		d := &driver{list: listOf("3", cmAt("a", "3"))}
		var errs errorLog
		r := New[configMap](d, newMemStore[configMap](), Config[configMap]{WatchList: WatchListOff, OnError: errs.add})
		start(t, r)
		synctest.Wait()
		heard := r.Health().LastEventTime
		time.Sleep(time.Minute)
		d.watch(t, 0).send(watch.Error, clientDecodingError())
		synctest.Wait()
		if h := r.Health(); !h.LastEventTime.Equal(heard) || h.State != StateBackingOff {
			t.Errorf("after a client-side error: LastEventTime %v (was %v), state %v; want unchanged, backing off", h.LastEventTime, heard, h.State)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		d.watch(t, 1).send(watch.Error, clientDecodingError())
		time.Sleep(time.Minute)
		synctest.Wait()
		want := []string{"list rv=0 limit=500", "watch rv=3", "watch rv=3", "list rv= limit=500", "watch rv=3"}
		if diff := cmp.Diff(want, d.requests()); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
		if h := r.Health(); h.LastEventTime.Equal(heard) {
			t.Error("the relist did not count as news from the server")
		}

		// A server's error event is news.
		heard = r.Health().LastEventTime
		time.Sleep(time.Minute)
		d.watch(t, 2).fail(apierrors.NewInternalError(errors.New("etcd hiccup")))
		synctest.Wait()
		if h := r.Health(); !h.LastEventTime.After(heard) {
			t.Errorf("a server's error event left LastEventTime at %v", h.LastEventTime)
		}
	})
}

// healthAtReplace is a store that records the reflector's Stats.ListedObjects
// when Replace is called.
type healthAtReplace struct {
	*memStore[configMap]
	r      *Reflector[configMap]
	listed []int64
}

func (s *healthAtReplace) Replace(objs []configMap, rv string) error {
	s.listed = append(s.listed, s.r.Health().Stats.ListedObjects)
	return s.memStore.Replace(objs, rv)
}

// TestListCountedBeforeTheStoreHasIt: whoever sees the store holding a list (an
// informer's WaitForSync) sees it counted in Stats, for paginated and streaming
// lists alike.
func TestListCountedBeforeTheStoreHasIt(t *testing.T) {
	for _, mode := range []WatchListMode{WatchListOff, WatchListOn} {
		t.Run(mode.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				srv := newServer(t, reflectortest.Config{WatchList: true}, 5)
				st := &healthAtReplace{memStore: newMemStore[configMap]()}
				r := New(srv, st, Config[configMap]{WatchList: mode, PageSize: 2})
				st.r = r
				start(t, r)
				synctest.Wait()
				if diff := cmp.Diff([]int64{5}, st.listed); diff != "" {
					t.Errorf("Stats.ListedObjects when Replace was called (-want +got):\n%s", diff)
				}
			})
		})
	}
}
