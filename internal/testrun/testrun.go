// Package testrun holds the helpers the test suites share to run a component for the
// length of a test.
package testrun

import (
	"context"
	"testing"
)

// Run calls run in a goroutine with a context that is cancelled when the test ends;
// the test's cleanup then waits for run to return and reports an error if it returned
// one.
func Run(t testing.TB, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// Errors returns an error callback (an OnError) and the channel it feeds. The channel
// holds up to 100 errors; later ones are dropped while it is full.
func Errors() (func(error), <-chan error) {
	ch := make(chan error, 100)
	return func(err error) {
		select {
		case ch <- err:
		default:
		}
	}, ch
}
