package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctrlkit/ctrlkit/reconcile"
)

// A Reconcile that ignores its context cannot keep Run from returning: once the
// reconciles' contexts are cancelled (at once here: DrainTimeout is negative),
// Run waits ShutdownTimeout for them, then abandons them and says which keys
// were left running.
func ExampleShutdownError() {
	started := make(chan struct{})
	release := make(chan struct{})
	defer close(release) // the abandoned reconcile ends here
	c := reconcile.New(reconcile.Func[string](func(ctx context.Context, key string) (reconcile.Result, error) {
		close(started)
		<-release // ignores ctx: a bug
		return reconcile.Result{}, nil
	}), reconcile.Config[string]{Name: "stubborn", DrainTimeout: -1, ShutdownTimeout: 50 * time.Millisecond})
	c.Watch(listSource{keys: []string{"default/stuck"}})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	<-started
	cancel()
	err := <-done
	var se *reconcile.ShutdownError
	fmt.Println(errors.Is(err, reconcile.ErrShutdownTimeout), errors.As(err, &se) && se.Keys[0] == "default/stuck")
	fmt.Println(err)
	// Output:
	// true true
	// reconcile: controller "stubborn": 1 reconciles still running 50ms after their contexts were cancelled, abandoned: [default/stuck]
}
