// Package leakcheck holds the goleak options shared by ctrlkit's tests.
//
// Only klog's flush daemon, which klog starts on first use and never stops, is ignored.
// Goroutines blocked in network I/O are not: a listener left accepting, a server left
// serving or a connection left open counts as a leak. Client connections are not ignored
// either; they end when their server goes, which is how tests are to end them: an e2e
// package's Env is stopped before its check runs (see testenv.RunTests), which ends every
// connection to the API server, and a test that starts an in-process server closes it
// (httptest.Server.Close, http.Server.Shutdown) and the idle connections of the clients it
// made for it (http.Client.CloseIdleConnections).
package leakcheck

import (
	"fmt"

	"go.uber.org/goleak"
)

// Options returns the goleak options for ctrlkit's tests.
func Options() []goleak.Option {
	return []goleak.Option{
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
