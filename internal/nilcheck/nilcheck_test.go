package nilcheck

import (
	"fmt"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type obj struct{ n int }

func TestFor(t *testing.T) {
	var nilPtr *obj
	var nilMap map[string]int
	var nilStringer fmt.Stringer
	check := func(name string, got, want bool) {
		t.Helper()
		if got != want {
			t.Errorf("%s: nil = %v, want %v", name, got, want)
		}
	}
	check("nil pointer", For[*obj]()(nilPtr), true)
	check("pointer", For[*obj]()(&obj{}), false)
	check("nil map", For[map[string]int]()(nilMap), true)
	check("map", For[map[string]int]()(map[string]int{}), false)
	check("nil slice", For[[]int]()(nil), true)
	check("nil interface", For[any]()(nil), true)
	check("typed nil in interface", For[any]()(nilPtr), true)
	check("value in interface", For[any]()(obj{}), false)
	check("nil Stringer", For[fmt.Stringer]()(nilStringer), true)
	check("struct", For[obj]()(obj{}), false)
	check("int zero", For[int]()(0), false)
}
