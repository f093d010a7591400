//go:build e2e

// Package e2e tests the reconcile package against the real etcd and kube-apiserver
// that testenv starts: a controller that mirrors owner ConfigMaps into Secrets they
// own must converge after storms of changes, apiserver restarts and downtime, and
// two replicas under leader election must hand over without overlapping, and
// a storm through a panicking Mapper and Predicate must leave the other objects
// reconciled.
package e2e

import (
	"os"
	"testing"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/testenv"
)

// env is shared by every test of the package; each test works in its own namespace.
var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunTests(m, testenv.Config{
		Users: []testenv.User{{Name: "norights"}},
	}, &env, leakcheck.Check))
}
