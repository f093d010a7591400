package testrun

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a testing.TB that records Errorf and runs its cleanups on demand.
type recorder struct {
	testing.TB
	cleanups []func()
	errs     []string
}

func (r *recorder) Helper()          {}
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// Run's goroutine sees its context cancelled at the end of the test, is waited for,
// and an error it returns is reported.
func TestRun(t *testing.T) {
	for _, want := range []error{nil, errors.New("boom")} {
		r := &recorder{TB: t}
		stopped := make(chan struct{})
		Run(r, func(ctx context.Context) error {
			<-ctx.Done()
			close(stopped)
			return want
		})
		select {
		case <-stopped:
			t.Fatal("run stopped before the test ended")
		default:
		}
		r.end()
		<-stopped
		if got := len(r.errs); (want == nil) != (got == 0) {
			t.Errorf("run returned %v: reported %q", want, r.errs)
		}
	}
}

// Errors keeps the first 100 errors in order and drops the rest without blocking.
func TestErrors(t *testing.T) {
	onError, ch := Errors()
	for i := range 150 {
		onError(fmt.Errorf("e%d", i))
	}
	if len(ch) != 100 {
		t.Fatalf("%d errors kept, want 100", len(ch))
	}
	for i := range 100 {
		if err := <-ch; err.Error() != fmt.Sprint("e", i) {
			t.Fatalf("error %d = %v", i, err)
		}
	}
}
