// Package leakcheck holds the goleak options shared by ctrlkit's end-to-end tests.
//
// client-go keeps HTTP transports in a process-wide cache, so their idle connections' read
// and write loops outlive any one client; klog starts a flush daemon on first use. Those
// goroutines belong to the libraries, not to the code under test, and are ignored here.
// Everything else still counts as a leak.
package leakcheck

import (
	"fmt"

	"go.uber.org/goleak"
)

// Options returns the goleak options for tests that talk to a real API server.
func Options() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*clientConnReadLoop).run"),
		goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	}
}

// Check reports goroutines left running, other than the ones Options ignores.
func Check() error {
	if err := goleak.Find(Options()...); err != nil {
		return fmt.Errorf("goleak: %w", err)
	}
	return nil
}
