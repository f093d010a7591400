//go:build e2e

// Package e2e tests shard's membership against the real etcd and
// kube-apiserver that testenv starts.
package e2e

import (
	"os"
	"testing"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunTests(m, testenv.Config{}, &env, leakcheck.Check))
}
