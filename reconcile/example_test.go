package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ctrlkit/ctrlkit/reconcile"
)

// listSource is a minimal Source delivering a fixed list of keys.
type listSource struct {
	keys []string
}

func (s listSource) Name() string { return "list" }
func (s listSource) Start(enqueue func(string, reconcile.Priority)) (func(), error) {
	for _, k := range s.keys {
		enqueue(k, reconcile.Live)
	}
	return nil, nil
}
func (s listSource) HasSynced() bool                  { return true }
func (s listSource) AppendKeys(dst []string) []string { return append(dst, s.keys...) }

func Example() {
	var mu sync.Mutex
	attempts := map[string]int{}
	done := make(chan struct{})
	r := reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		attempts[key]++
		switch {
		case key == "flaky" && attempts[key] < 3:
			return reconcile.Result{}, errors.New("not yet") // retried with backoff
		case key == "broken":
			return reconcile.Result{}, reconcile.Terminal(errors.New("invalid spec")) // not retried
		}
		if key == "flaky" {
			close(done)
		}
		return reconcile.Result{}, nil
	})
	c := reconcile.New[string](r, reconcile.Config[string]{Name: "example"})
	if err := c.Watch(listSource{keys: []string{"broken", "ok", "flaky"}}); err != nil {
		fmt.Println(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { errc <- c.Run(ctx) }()
	<-done
	cancel()
	fmt.Println("Run:", <-errc)
	mu.Lock()
	fmt.Println("broken:", attempts["broken"], "ok:", attempts["ok"], "flaky:", attempts["flaky"])
	mu.Unlock()
	// Output:
	// Run: <nil>
	// broken: 1 ok: 1 flaky: 3
}

func ExampleTerminal() {
	err := fmt.Errorf("sync pod: %w", reconcile.Terminal(errors.New("image name is empty")))
	fmt.Println(err)
	fmt.Println(errors.Is(err, reconcile.ErrTerminal))
	// Output:
	// sync pod: terminal: image name is empty
	// true
}
