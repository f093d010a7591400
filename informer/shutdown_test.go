package informer_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// TestShutdownTimeoutAbandonsBusyHandler: a handler whose call never returns
// keeps Run only Config.ShutdownTimeout past the end of its context; Run then
// returns a *ShutdownError, and the other handler is unaffected.
func TestShutdownTimeoutAbandonsBusyHandler(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		want    time.Duration
	}{
		{"set", 3 * time.Second, 3 * time.Second},
		{"default", 0, informer.DefaultShutdownTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				defer close(release) // the abandoned call ends with the test
				srv := newServer(t, reflectortest.Config{}, 3)
				inf := informer.New(srv, informer.Config[cm]{Name: "cms", ShutdownTimeout: tc.timeout})
				mustAdd(t, inf, informer.HandlerFuncs[cm]{AddFunc: func(obj cm, _ bool) {
					if obj.Name == "cm-1" {
						<-release
					}
				}}, informer.HandlerOptions{})
				mustAdd(t, inf, informer.HandlerFuncs[cm]{}, informer.HandlerOptions{})
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- inf.Run(ctx) }()
				synctest.Wait()
				cancel()
				cancelled := time.Now()
				var err error
				select {
				case err = <-done:
				case <-time.After(time.Hour):
					t.Fatal("Run did not return within an hour")
				}
				if took := time.Since(cancelled); took != tc.want {
					t.Errorf("Run returned %v after its context ended, want %v", took, tc.want)
				}
				var se *informer.ShutdownError
				if !errors.As(err, &se) || !errors.Is(err, informer.ErrShutdownTimeout) {
					t.Fatalf("Run = %v, want a *ShutdownError wrapping ErrShutdownTimeout", err)
				}
				if diff := cmp.Diff(&informer.ShutdownError{Informer: "cms", Timeout: tc.want, Handlers: 1}, se); diff != "" {
					t.Errorf("ShutdownError (-want +got):\n%s", diff)
				}
			})
		})
	}
}
