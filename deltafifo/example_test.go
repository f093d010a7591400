package deltafifo_test

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/deltafifo"
	"github.com/ctrlkit/ctrlkit/indexer"
)

// The indexer is the store the consumer keeps; the FIFO reads it to compute deletions.
var _ deltafifo.KnownObjects[*corev1.ConfigMap] = (*indexer.Indexer[*corev1.ConfigMap])(nil)

func configMap(name, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, ResourceVersion: rv}}
}

// apply is what an informer does with a batch: update its store, then notify.
func apply(store *indexer.Indexer[*corev1.ConfigMap]) func(deltafifo.Batch[*corev1.ConfigMap]) error {
	return func(b deltafifo.Batch[*corev1.ConfigMap]) error {
		if b.Relist {
			fmt.Printf("relist at resourceVersion %s (initial list: %v)\n", b.ResourceVersion, b.InitialList)
		}
		for _, d := range b.Deltas {
			var err error
			switch d.Type {
			case deltafifo.Deleted:
				err = store.DeleteKey(d.Key)
			default:
				err = store.Update(d.Object)
			}
			if err != nil {
				return err
			}
			tombstone := ""
			if d.FinalStateUnknown {
				tombstone = " (deleted while disconnected)"
			}
			fmt.Printf("  %s %s%s\n", d.Type, d.Key, tombstone)
		}
		return nil
	}
}

// A reflector feeds the FIFO; a consumer pops batches and applies them to an indexer.
func Example() {
	store := indexer.New(indexer.Config[*corev1.ConfigMap]{})
	fifo := deltafifo.New(deltafifo.Config[*corev1.ConfigMap]{KnownObjects: store})
	ctx := context.Background()

	// The initial list, then watch events.
	_ = fifo.Replace([]*corev1.ConfigMap{configMap("a", "1"), configMap("b", "2")}, "2")
	_ = fifo.Add(configMap("c", "3"))
	_ = fifo.Update(configMap("a", "4"))
	for range 2 {
		_ = fifo.Pop(ctx, apply(store))
	}
	fmt.Println("synced:", fifo.HasSynced())

	// The watch broke; b was deleted meanwhile. The relist finds out.
	_ = fifo.Replace([]*corev1.ConfigMap{configMap("a", "4"), configMap("c", "3")}, "7")
	_ = fifo.Pop(ctx, apply(store))

	keys := store.ListKeys()
	slices.Sort(keys)
	fmt.Println(keys)
	// Output:
	// relist at resourceVersion 2 (initial list: true)
	//   Replaced default/a
	//   Replaced default/b
	//   Added default/c
	//   Updated default/a
	// synced: true
	// relist at resourceVersion 7 (initial list: false)
	//   Deleted default/b (deleted while disconnected)
	//   Replaced default/a
	//   Replaced default/c
	// [default/a default/c]
}

// A batch whose function fails is handed out again by the next Pop.
func ExampleFIFO_Pop_retry() {
	fifo := deltafifo.New(deltafifo.Config[*corev1.ConfigMap]{})
	_ = fifo.Add(configMap("a", "1"))

	attempts := 0
	process := func(b deltafifo.Batch[*corev1.ConfigMap]) error {
		attempts++
		if attempts == 1 {
			return fmt.Errorf("store unavailable")
		}
		fmt.Println("processed", b.Deltas[0].Key, "on attempt", attempts)
		return nil
	}
	fmt.Println(fifo.Pop(context.Background(), process))
	fmt.Println(fifo.Pop(context.Background(), process))
	// Output:
	// store unavailable
	// processed default/a on attempt 2
	// <nil>
}

// Close ends a consumer loop: Pop returns ErrClosed.
func ExampleFIFO_Close() {
	fifo := deltafifo.New(deltafifo.Config[*corev1.ConfigMap]{})
	fifo.Close()
	err := fifo.Pop(context.Background(), func(deltafifo.Batch[*corev1.ConfigMap]) error { return nil })
	fmt.Println(err)
	// Output: deltafifo: closed
}
