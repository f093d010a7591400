//go:build e2e

// Package e2e tests the manager against the real etcd and kube-apiserver that
// testenv starts: informers shared by controllers make one list and one watch per
// resource, the lifecycle starts and stops everything in order, and two managers
// hand leadership over with warm caches.
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
		Users: []testenv.User{{Name: "norights"}, {Name: managerUser}},
		// Sharded list and watch (KEP-5866, alpha), for the sharded managers.
		APIServerFlags: []string{"--feature-gates=ShardedListAndWatch=true"},
	}, &env, leakcheck.Check))
}
