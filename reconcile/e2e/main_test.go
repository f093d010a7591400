//go:build e2e

// Package e2e tests the reconcile package against the real etcd and kube-apiserver
// that testenv starts: a controller that mirrors owner ConfigMaps into Secrets they
// own must converge after storms of changes, apiserver restarts and downtime, and
// two replicas under leader election must hand over without overlapping.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/testenv"
)

// env is shared by every test of the package; each test works in its own namespace.
var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start(context.Background(), testenv.Config{
		Users: []testenv.User{{Name: "norights"}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(leakcheck.Options()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
