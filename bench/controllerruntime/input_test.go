package controllerruntime

import (
	"fmt"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/types"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSameInput checks the premise of the benchmark: every side reconciles each
// of the 100,000 keys exactly once per iteration, at 1 and 8 workers, and
// leaves no goroutine behind.
func TestSameInput(t *testing.T) {
	sides := []struct {
		name string
		run  func(t *testing.T, workers int, r *noop)
	}{
		{"ctrlkit", func(t *testing.T, w int, r *noop) { runCtrlkit(t, w, r, false) }},
		{"ctrlkit-prometheus", func(t *testing.T, w int, r *noop) { runCtrlkit(t, w, r, true) }},
		{"controller-runtime", func(t *testing.T, w int, r *noop) { runControllerRuntime(t, w, r, true) }},
		{"controller-runtime-classicqueue", func(t *testing.T, w int, r *noop) { runControllerRuntime(t, w, r, false) }},
	}
	for _, side := range sides {
		for _, workers := range []int{1, 8} {
			t.Run(fmt.Sprintf("%s/workers=%d", side.name, workers), func(t *testing.T) {
				var mu sync.Mutex
				seen := make(map[types.NamespacedName]int, numKeys)
				r := newNoop()
				r.record = func(k types.NamespacedName) {
					mu.Lock()
					seen[k]++
					mu.Unlock()
				}
				side.run(t, workers, r)
				mu.Lock()
				defer mu.Unlock()
				if len(seen) != numKeys {
					t.Fatalf("workers=%d: %d distinct keys reconciled, want %d", workers, len(seen), numKeys)
				}
				for _, k := range keys {
					if seen[k] != 1 {
						t.Fatalf("workers=%d: key %v reconciled %d times, want 1", workers, k, seen[k])
					}
				}
			})
		}
	}
}
