package reflector

import (
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
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
