package workqueue

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestProcessingListsItemsBetweenGetAndDone(t *testing.T) {
	ctx := context.Background()
	q := New(Config[string]{})
	defer q.ShutDown()
	if got := q.Processing(); len(got) != 0 {
		t.Fatalf("Processing of an empty queue = %v", got)
	}
	q.Add("a")
	q.Add("b")
	q.Add("c")
	for range 3 {
		if _, err := q.Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, q.Processing()); diff != "" {
		t.Errorf("Processing after three Gets (-want +got):\n%s", diff)
	}
	q.Add("b") // re-added while processed: still in flight until its Done
	q.Done("a")
	if diff := cmp.Diff([]string{"b", "c"}, q.Processing()); diff != "" {
		t.Errorf("Processing after Done(a) (-want +got):\n%s", diff)
	}
	q.Done("b")
	q.Done("c")
	if got := q.Processing(); len(got) != 0 {
		t.Errorf("Processing after every Done = %v", got)
	}
	if q.Len() != 1 {
		t.Errorf("Len = %d, want 1 (b, added while processed)", q.Len())
	}
}
