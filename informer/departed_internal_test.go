package informer

import (
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestDepartedForgetsTheOldest: past DepartedLimit departures the oldest are
// forgotten first, and a key that departs again keeps one entry with its
// latest UID.
func TestDepartedForgetsTheOldest(t *testing.T) {
	var d departed
	for i := range DepartedLimit + 10 {
		d.record("k"+strconv.Itoa(i), types.UID("u"+strconv.Itoa(i)))
	}
	for i := range 10 {
		if _, ok := d.get("k" + strconv.Itoa(i)); ok {
			t.Fatalf("k%d is still remembered after %d later departures", i, DepartedLimit)
		}
	}
	for _, i := range []int{10, DepartedLimit, DepartedLimit + 9} {
		if uid, ok := d.get("k" + strconv.Itoa(i)); !ok || uid != types.UID("u"+strconv.Itoa(i)) {
			t.Fatalf("k%d: %q, %v", i, uid, ok)
		}
	}
	d.record("k20", "again")
	if uid, _ := d.get("k20"); uid != "again" || len(d.uids) != DepartedLimit || len(d.ring) != DepartedLimit {
		t.Fatalf("after a second departure: %q, %d keys, ring %d", uid, len(d.uids), len(d.ring))
	}
}
