package informer_test

import (
	"fmt"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// TestDepartedUID: a sharded informer tells the UID of an object deleted from
// its cache, and of one that left with its shard, from the moment its
// handlers hear of it; not of an object it holds (back again, or never gone);
// and an unsharded informer remembers nothing.
func TestDepartedUID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := reflectortest.NewServer[cm](reflectortest.Config{})
		uidOf := func(i int) types.UID { return types.UID(fmt.Sprintf("%016x-%d", uint64(i+1)*0x9e3779b97f4a7c15, i)) }
		for i := range 40 {
			c := configMap("cm-" + strconv.Itoa(i))
			c.UID = uidOf(i)
			mustCreate(t, srv, c)
		}
		halves := reflector.SplitShards(reflector.ShardByUID, 2)
		sharded := informer.New(srv, informer.Config[cm]{Reflector: reflector.Config[cm]{Shard: halves[0]}})
		whole := informer.New(srv, informer.Config[cm]{})
		// What DepartedUID says when the handler hears of the deletion.
		heard := map[string]types.UID{}
		if _, err := sharded.AddHandler(informer.HandlerFuncs[cm]{DeleteFunc: func(d informer.Deleted[cm]) {
			uid, _ := sharded.DepartedUID(d.Key)
			heard[d.Key] = uid
		}}, informer.HandlerOptions{}); err != nil {
			t.Fatal(err)
		}
		start(t, sharded)
		start(t, whole)
		synctest.Wait()
		var in, out []int // of halves[0]
		for i := range 40 {
			if halves[0].Contains("", string(uidOf(i))) {
				in = append(in, i)
			} else {
				out = append(out, i)
			}
		}
		if len(in) < 2 || len(out) < 2 {
			t.Fatalf("the test needs a split: %d in, %d out", len(in), len(out))
		}
		key := func(i int) string { return "ns/cm-" + strconv.Itoa(i) }
		mustDelete(t, srv, "cm-"+strconv.Itoa(in[0]))
		synctest.Wait()
		if uid, ok := sharded.DepartedUID(key(in[0])); !ok || uid != uidOf(in[0]) {
			t.Errorf("deleted %s: DepartedUID = %q, %v; want %q", key(in[0]), uid, ok, uidOf(in[0]))
		}
		if heard[key(in[0])] != uidOf(in[0]) {
			t.Errorf("the handler heard of the deletion of %s before DepartedUID knew it (%q)", key(in[0]), heard[key(in[0])])
		}
		if _, ok := sharded.DepartedUID(key(in[1])); ok {
			t.Errorf("%s is cached, yet DepartedUID knows it", key(in[1]))
		}
		if _, ok := whole.DepartedUID(key(in[0])); ok {
			t.Error("an unsharded informer remembers a deletion")
		}
		// The other half: what was held leaves (but for what had been deleted).
		time.Sleep(2 * time.Second)
		if err := sharded.SetShard(halves[1]); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for _, i := range in[1:] {
			if uid, ok := sharded.DepartedUID(key(i)); !ok || uid != uidOf(i) {
				t.Fatalf("%s left with the shard: DepartedUID = %q, %v; want %q", key(i), uid, ok, uidOf(i))
			}
		}
		for _, i := range out {
			if _, ok := sharded.DepartedUID(key(i)); ok {
				t.Fatalf("%s came with the shard, yet DepartedUID knows it", key(i))
			}
		}
	})
}
