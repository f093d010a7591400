package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// RunTests is the body of a TestMain that shares one Env among all tests of a package: it
// starts the Env with cfg and stores it in *env, runs the tests, stops the Env, and then,
// if everything passed, runs each of after (a goroutine-leak check, say). It returns the
// exit code for os.Exit:
//
//	var env *testenv.Env
//
//	func TestMain(m *testing.M) { os.Exit(testenv.RunTests(m, testenv.Config{}, &env)) }
//
// Failures to start or stop, and errors from after, are printed to stderr and make the
// code non-zero.
func RunTests(m *testing.M, cfg Config, env **Env, after ...func() error) int {
	e, err := Start(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	for _, f := range after {
		if code != 0 {
			break
		}
		if err := f(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	return code
}
