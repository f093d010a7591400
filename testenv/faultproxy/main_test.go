package faultproxy

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakcheck.Options()...)
}
