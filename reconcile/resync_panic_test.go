package reconcile

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

// TestAppendKeysKeepsOtherKeysWhenTheMapperPanics: a Mapper that panics on one
// object during a resync drops that object's keys only; the keys already
// appended (by this source, by earlier sources, and the caller's) and those of
// the objects after it are kept, so that the resync brings every other object.
func TestAppendKeysKeepsOtherKeysWhenTheMapperPanics(t *testing.T) {
	h := &fakeHost{objs: []cm{configMap("ns", "a"), configMap("ns", "bad"), configMap("ns", "b")}}
	mapper := func(c cm) []types.NamespacedName {
		if c.Name == "bad" {
			panic("mapper bug")
		}
		return ByObject[cm]()(c)
	}
	src := newInformerSource(h, mapper, nil)
	var reports int
	src.reportPanicsTo(func(*PanicError) { reports++ })
	got := src.AppendKeys([]types.NamespacedName{nn("ns", "from-another-source")})
	want := []types.NamespacedName{nn("ns", "from-another-source"), nn("ns", "a"), nn("ns", "b")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("AppendKeys (-want +got):\n%s", diff)
	}
	if reports != 1 {
		t.Errorf("%d panics reported, want 1", reports)
	}
}
