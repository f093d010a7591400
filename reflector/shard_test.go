package reflector

import (
	"fmt"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/reflector/reflectortest"
)

// TestShardMatchesKubernetesHash: Shard's selector string and membership agree
// with k8s.io/apimachinery/pkg/sharding's, for both fields, on ranges that
// split the space in 1 to 5 and at its ends.
func TestShardMatchesKubernetesHash(t *testing.T) {
	for _, field := range []string{ShardByUID, ShardByNamespace} {
		for n := 1; n <= 5; n++ {
			shards := SplitShards(field, n)
			for i, s := range shards {
				r := s.Ranges[0]
				end := fmt.Sprintf("0x%016x", r.End)
				if r.End == 0 {
					end = "0x10000000000000000"
				}
				want := sharding.NewSelector(sharding.ShardRangeRequirement{Key: field, Start: fmt.Sprintf("0x%016x", r.Start), End: end})
				if s.Selector() != want.String() {
					t.Fatalf("%s %d/%d: Selector() = %q, want %q", field, i, n, s.Selector(), want.String())
				}
				for k := range 300 {
					obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns-" + strconv.Itoa(k), UID: types.UID(fmt.Sprintf("%08x-4b1c-4f2e-9a3d-%012x", k*7919, k))}}
					ok, err := want.Matches(obj)
					if err != nil {
						t.Fatal(err)
					}
					if got := s.Contains(obj.Namespace, string(obj.UID)); got != ok {
						t.Fatalf("%s %d/%d %s: Contains = %v, sharding says %v", field, i, n, obj.UID, got, ok)
					}
				}
			}
		}
	}
	// Each object is in exactly one shard of a split.
	for n := 1; n <= 7; n++ {
		for k := range 200 {
			uid := fmt.Sprintf("%016x", uint64(k+1)*0x9e3779b97f4a7c15)
			in := 0
			for _, s := range SplitShards(ShardByUID, n) {
				if s.Contains("", uid) {
					in++
				}
			}
			if in != 1 {
				t.Fatalf("%s is in %d of %d shards", uid, in, n)
			}
		}
	}
	if err := (Shard{Field: "metadata.name"}).validate(); err == nil {
		t.Error("a Shard on an unsupported field validates")
	}
	if err := (Shard{Field: ShardByUID, Ranges: []Range{{Start: 5, End: 5}}}).validate(); err == nil {
		t.Error("an empty Shard range validates")
	}
	// Several ranges: the union, and the selector Kubernetes writes for it.
	multi := Shard{Field: ShardByUID, Ranges: []Range{{0, 1 << 62}, {3 << 62, 0}}}
	reqs := []sharding.ShardRangeRequirement{
		{Key: ShardByUID, Start: "0x0000000000000000", End: "0x4000000000000000"},
		{Key: ShardByUID, Start: "0xc000000000000000", End: "0x10000000000000000"},
	}
	if got, want := multi.Selector(), sharding.NewSelector(reqs...).String(); got != want {
		t.Errorf("Selector() = %q, want %q", got, want)
	}
	for k := range 500 {
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{UID: types.UID(fmt.Sprintf("%016x", uint64(k+1)*0x9e3779b97f4a7c15))}}
		ok, _ := sharding.NewSelector(reqs...).Matches(obj)
		if multi.Contains("", string(obj.UID)) != ok {
			t.Fatalf("%s: Contains disagrees with sharding (%v)", obj.UID, ok)
		}
	}
}

// shardContents is the server's objects in shard sh, as memStore.Contents
// writes them.
func shardContents(srv *reflectortest.Server[configMap], sh Shard) []string {
	m := map[string]configMap{}
	for _, o := range srv.Items() {
		if sh.ContainsObject(o) {
			m[o.Namespace+"/"+o.Name] = o
		}
	}
	return contents(m)
}

func shardObject(i int) *corev1.ConfigMap {
	c := cm("ns-"+strconv.Itoa(i%4), "cm-"+strconv.Itoa(i))
	// UIDs as random as real ones: FNV-1a spreads similar short strings badly.
	c.UID = types.UID(fmt.Sprintf("%016x-%d", uint64(i+1)*0x9e3779b97f4a7c15, i))
	return c
}

// TestShardFilteredByTheReflector: against a server that ignores the shard
// selector (as one without the ShardedListAndWatch gate does), the reflector
// sends it on every request, keeps only its shard's objects through lists,
// streaming lists and watch events, advances its store past other shards'
// events (as bookmarks), and reports client-side filtering.
func TestShardFilteredByTheReflector(t *testing.T) {
	for _, mode := range []WatchListMode{WatchListOff, WatchListOn} {
		t.Run(mode.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				srv := reflectortest.NewServer[configMap](reflectortest.Config{WatchList: true})
				for i := range 40 {
					mustCreate(t, srv, shardObject(i))
				}
				shard := SplitShards(ShardByUID, 2)[1]
				st := newMemStore[configMap]()
				r := New(srv, st, Config[configMap]{WatchList: mode, Shard: shard})
				start(t, r)
				synctest.Wait()
				want := func() []string { return shardContents(srv, shard) }
				check := func(when string) {
					t.Helper()
					got, w := st.Contents(), want()
					if fmt.Sprint(got) != fmt.Sprint(w) {
						t.Fatalf("%s: store holds %v, want the shard's %v", when, got, w)
					}
					if len(w) == 0 || len(w) == len(srv.Items()) {
						t.Fatalf("%s: the shard holds %d of %d objects: the test needs a split", when, len(w), len(srv.Items()))
					}
				}
				check("after the list")
				time.Sleep(2 * time.Second)
				for i := 40; i < 60; i++ {
					mustCreate(t, srv, shardObject(i))
				}
				for i := range 10 {
					c := shardObject(i)
					c.Data = map[string]string{"v": "2"}
					if _, err := srv.Update(c); err != nil {
						t.Fatal(err)
					}
				}
				for i := 10; i < 20; i++ {
					if _, err := srv.Delete("ns-"+strconv.Itoa(i%4), "cm-"+strconv.Itoa(i)); err != nil {
						t.Fatal(err)
					}
				}
				synctest.Wait()
				check("after the events")
				if rv := r.LastSyncResourceVersion(); rv != srv.ResourceVersion() {
					t.Errorf("after the events the reflector is at %s, the server at %s: other shards' events did not advance it", rv, srv.ResourceVersion())
				}
				if h := r.Health(); h.ShardFiltering != ShardFilteringClient || h.Stats.Failures != 0 {
					t.Errorf("health %+v, want client-side filtering and no failure", h)
				}
				for _, req := range srv.Requests() {
					if req.Options.ShardSelector != shard.Selector() {
						t.Fatalf("a %v request carried shard selector %q, want %q", req.Verb, req.Options.ShardSelector, shard.Selector())
					}
				}
			})
		})
	}
}

// TestSetShard: SetShard re-scopes a running reflector: it relists, and the
// store holds the new shard's objects, and only them, also as events come;
// an invalid shard is refused and changes nothing.
func TestSetShard(t *testing.T) {
	for _, mode := range []WatchListMode{WatchListOff, WatchListOn} {
		t.Run(mode.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				srv := reflectortest.NewServer[configMap](reflectortest.Config{WatchList: true})
				for i := range 40 {
					mustCreate(t, srv, shardObject(i))
				}
				halves := SplitShards(ShardByUID, 2)
				st := newMemStore[configMap]()
				r := New(srv, st, Config[configMap]{WatchList: mode, Shard: halves[0]})
				start(t, r)
				synctest.Wait()
				of := func(sh Shard) []string { return shardContents(srv, sh) }
				if fmt.Sprint(st.Contents()) != fmt.Sprint(of(halves[0])) {
					t.Fatalf("before: store %v, want %v", st.Contents(), of(halves[0]))
				}
				time.Sleep(2 * time.Second)
				if err := r.SetShard(Shard{Field: "spec.nodeName", Ranges: []Range{{0, 0}}}); err == nil {
					t.Fatal("SetShard accepted an unsupported field")
				}
				if r.Shard().Ranges[0] != halves[0].Ranges[0] {
					t.Fatalf("a refused SetShard changed the shard to %v", r.Shard())
				}
				if err := r.SetShard(halves[1]); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				if fmt.Sprint(st.Contents()) != fmt.Sprint(of(halves[1])) {
					t.Fatalf("after SetShard: store %v, want %v", st.Contents(), of(halves[1]))
				}
				for i := 40; i < 60; i++ {
					mustCreate(t, srv, shardObject(i))
				}
				synctest.Wait()
				if fmt.Sprint(st.Contents()) != fmt.Sprint(of(halves[1])) {
					t.Fatalf("after events: store %v, want %v", st.Contents(), of(halves[1]))
				}
				// Back to everything.
				if err := r.SetShard(Shard{}); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				checkInSync(t, srv, st)
				if h := r.Health(); h.Stats.Failures != 0 {
					t.Fatalf("failures: %+v %v", h.Stats, h.LastError)
				}
			})
		})
	}
}

// TestShardByControllerAndEmptyShard: a shard by the controller's key keeps
// the children of the owners in its range (an object without a controller by
// its own key), is filtered by the reflector alone
// (no selector sent; client-side filtering reported at once, also when no
// object outside came), and the empty shard holds nothing, asking the server
// for the range [0, 1).
func TestShardByControllerAndEmptyShard(t *testing.T) {
	for _, mode := range []WatchListMode{WatchListOff, WatchListOn} {
		t.Run(mode.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				srv := reflectortest.NewServer[configMap](reflectortest.Config{WatchList: true})
				yes := true
				for i := range 48 {
					c := shardObject(i)
					if i%8 != 0 { // every 8th has no controller
						c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Owner", Name: fmt.Sprintf("owner-%d", i%6), UID: shardObject(100 + i%6).UID, Controller: &yes}}
					}
					mustCreate(t, srv, c)
				}
				half := SplitShards(ShardByControllerName, 2)[0]
				st := newMemStore[configMap]()
				r := New(srv, st, Config[configMap]{WatchList: mode, Shard: half})
				start(t, r)
				synctest.Wait()
				want := shardContents(srv, half)
				if fmt.Sprint(st.Contents()) != fmt.Sprint(want) || len(want) == 0 || len(want) == 48 {
					t.Fatalf("store %v, want the %d children of the half's owners", st.Contents(), len(want))
				}
				// The same, computed from the owner references by hand.
				byHand := map[string]configMap{}
				for _, o := range srv.Items() {
					for _, ref := range o.OwnerReferences {
						if half.ContainsHash(HashKey(o.Namespace, ref.Name)) {
							byHand[o.Namespace+"/"+o.Name] = o
						}
					}
					if len(o.OwnerReferences) == 0 && half.ContainsHash(HashKey(o.Namespace, o.Name)) {
						byHand[o.Namespace+"/"+o.Name] = o
					}
				}
				if fmt.Sprint(contents(byHand)) != fmt.Sprint(want) {
					t.Fatalf("ContainsObject keeps %v, the owners' hashes say %v", want, contents(byHand))
				}
				if h := r.Health(); h.ShardFiltering != ShardFilteringClient {
					t.Errorf("ShardFiltering %q, want %q", h.ShardFiltering, ShardFilteringClient)
				}
				for _, req := range srv.Requests() {
					if req.Options.ShardSelector != "" {
						t.Fatalf("a %v request carried shard selector %q for a field the server cannot filter", req.Verb, req.Options.ShardSelector)
					}
				}
				// Only its children, whatever the shard holds by UID: the empty
				// shard holds nothing.
				time.Sleep(2 * time.Second)
				empty := Shard{Field: ShardByUID}
				if err := r.SetShard(empty); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				mustCreate(t, srv, shardObject(60))
				synctest.Wait()
				if got := st.Contents(); len(got) != 0 {
					t.Fatalf("the empty shard holds %v", got)
				}
				reqs := srv.Requests()
				if got, want := reqs[len(reqs)-1].Options.ShardSelector, "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000001')"; got != want {
					t.Errorf("the empty shard sent selector %q, want %q", got, want)
				}
			})
		})
	}
}

// TestEmptyShardNeitherListsNorWatches: a reflector of the empty shard reads
// the collection's resourceVersion with one LIST of at most one object, is
// synced with nothing at that version, and opens no watch however the
// collection changes; Relist reads the version again; SetShard to a shard
// with ranges lists and watches it, and back to the empty shard drops it all
// and stops watching. Run returns while it waits.
func TestEmptyShardNeitherListsNorWatches(t *testing.T) {
	for _, mode := range []WatchListMode{WatchListOff, WatchListOn} {
		t.Run(mode.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				srv := reflectortest.NewServer[configMap](reflectortest.Config{WatchList: true})
				for i := range 30 {
					mustCreate(t, srv, shardObject(i))
				}
				st := newMemStore[configMap]()
				r := New(srv, st, Config[configMap]{WatchList: mode, Shard: Shard{Field: ShardByUID}})
				rr := start(t, r)
				synctest.Wait()
				onlyProbes := func(stage string, from, want int) {
					t.Helper()
					reqs := srv.Requests()[from:]
					if len(reqs) != want {
						t.Fatalf("%s: %d requests %v, want %d", stage, len(reqs), describe(reqs), want)
					}
					for _, req := range reqs {
						if req.Verb != reflectortest.List || req.Options.Limit != 1 || req.Options.ResourceVersion != "" {
							t.Fatalf("%s: request %v, want a consistent LIST of one object", stage, describe([]reflectortest.Request{req}))
						}
					}
				}
				onlyProbes("start", 0, 1)
				h := r.Health()
				if !h.Synced || h.State != StateWatching || len(st.Contents()) != 0 {
					t.Fatalf("start: synced %v, state %v, store %v", h.Synced, h.State, st.Contents())
				}
				if h.ShardFiltering != ShardFilteringClient {
					t.Errorf("ShardFiltering %q after an object outside the shard came, want %q", h.ShardFiltering, ShardFilteringClient)
				}
				if h.LastResourceVersion != r.LastSyncResourceVersion() || h.LastResourceVersion == "" {
					t.Fatalf("resourceVersion %q", h.LastResourceVersion)
				}
				atStart := h.LastResourceVersion
				for i := 30; i < 40; i++ {
					mustCreate(t, srv, shardObject(i))
				}
				time.Sleep(10 * time.Minute)
				synctest.Wait()
				onlyProbes("after changes", 0, 1)
				r.Relist()
				synctest.Wait()
				onlyProbes("after Relist", 0, 2)
				if rv := r.LastSyncResourceVersion(); rv == atStart {
					t.Fatalf("Relist left the resourceVersion at %s, the server is further", rv)
				}
				half := SplitShards(ShardByUID, 2)[1]
				if err := r.SetShard(half); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				n := len(srv.Requests())
				if fmt.Sprint(st.Contents()) != fmt.Sprint(shardContents(srv, half)) || len(st.Contents()) == 0 {
					t.Fatalf("after SetShard: store %v, want %v", st.Contents(), shardContents(srv, half))
				}
				if len(requestsOf(srv.Requests(), reflectortest.Watch)) == 0 {
					t.Fatal("a shard with ranges is not watched")
				}
				mustCreate(t, srv, shardObject(40))
				mustCreate(t, srv, shardObject(41))
				synctest.Wait()
				if fmt.Sprint(st.Contents()) != fmt.Sprint(shardContents(srv, half)) {
					t.Fatalf("after events: store %v, want %v", st.Contents(), shardContents(srv, half))
				}
				if err := r.SetShard(Shard{Field: ShardByUID}); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				if got := st.Contents(); len(got) != 0 {
					t.Fatalf("back to the empty shard, the store holds %v", got)
				}
				onlyProbes("back to the empty shard", n, 1)
				mustCreate(t, srv, shardObject(42))
				time.Sleep(10 * time.Minute)
				synctest.Wait()
				onlyProbes("back to the empty shard, after changes", n, 1)
				if h := r.Health(); h.Stats.Failures != 0 {
					t.Fatalf("failures: %+v %v", h.Stats, h.LastError)
				}
				if err := rr.stop(); err != nil {
					t.Fatalf("Run returned %v", err)
				}
			})
		})
	}
}

// TestShardByNameKeepsKeys: a shard by name places an object by its key
// alone, so a key deleted and re-created with another UID stays where it was
// (a shard by UID moves it); ContainsKey of a controller's key agrees with
// where ShardByControllerName puts its children; and the splits of the name
// fields hold each key exactly once.
func TestShardByNameKeepsKeys(t *testing.T) {
	yes := true
	for n := 1; n <= 5; n++ {
		names := SplitShards(ShardByName, n)
		kids := SplitShards(ShardByControllerName, n)
		moved := 0
		for k := range 400 {
			ns, name := fmt.Sprintf("ns-%d", k%7), fmt.Sprintf("obj-%d", k)
			if k%11 == 0 {
				ns = "" // cluster-scoped
			}
			in := 0
			for i, sh := range names {
				first := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("a-%d", k))}}
				again := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("b-%d", k))}}
				if sh.ContainsObject(first) != sh.ContainsObject(again) || sh.ContainsObject(first) != sh.ContainsKey(ns, name) {
					t.Fatalf("%d/%d: %s/%s re-created moves, or ContainsKey disagrees", i, n, ns, name)
				}
				child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "child-" + name,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Owner", Name: name, UID: first.UID, Controller: &yes}}}}
				if kids[i].ContainsObject(child) != sh.ContainsKey(ns, name) {
					t.Fatalf("%d/%d: the child of %s/%s is not with its owner", i, n, ns, name)
				}
				if sh.ContainsKey(ns, name) {
					in++
				}
				byUID := SplitShards(ShardByUID, n)[i]
				if n > 1 && byUID.ContainsObject(first) != byUID.ContainsObject(again) {
					moved++
				}
			}
			if in != 1 {
				t.Fatalf("%s/%s is in %d of %d shards", ns, name, in, n)
			}
		}
		if n > 1 && moved == 0 {
			t.Fatalf("no re-created object moved between shards by UID: the test shows nothing")
		}
	}
	if (Shard{Field: ShardByUID, Ranges: []Range{{0, 0}}}).ContainsKey("ns", "a") {
		t.Error("a shard by UID claims a key")
	}
	if err := (Shard{Field: ShardByName}).validate(); err != nil {
		t.Errorf("ShardByName does not validate: %v", err)
	}
	if (Shard{Field: ShardByName, Ranges: []Range{{0, 0}}}).Selector() != "" {
		t.Error("a shard by name asks the server to filter by a field it cannot")
	}
}

// TestShardCovers: Covers is range inclusion, the zero Shard covering all.
func TestShardCovers(t *testing.T) {
	q := uint64(1) << 62
	whole := Shard{Field: ShardByName, Ranges: []Range{{0, 0}}}
	left := Shard{Field: ShardByName, Ranges: []Range{{0, 2 * q}}}
	right := Shard{Field: ShardByName, Ranges: []Range{{2 * q, 0}}}
	for _, c := range []struct {
		s, t Shard
		want bool
	}{
		{Shard{}, right, true},
		{whole, left, true},
		{whole, right, true},
		{left, right, false},
		{right, Shard{Field: ShardByName, Ranges: []Range{{3 * q, 0}}}, true},
		{left, Shard{Field: ShardByName, Ranges: []Range{{q, 2 * q}}}, true},
		{left, Shard{Field: ShardByName, Ranges: []Range{{q, 0}}}, false},
		{left, Shard{Field: ShardByName}, true}, // the empty shard
		{whole, Shard{}, false},
		{Shard{Field: ShardByUID, Ranges: []Range{{0, 0}}}, left, false},
	} {
		if got := c.s.Covers(c.t); got != c.want {
			t.Errorf("%v.Covers(%v) = %v, want %v", c.s, c.t, got, c.want)
		}
	}
}

// TestListedShard: ListedShard says what the last list stored covers: the
// shard asked for, after the list that SetShard started.
func TestListedShard(t *testing.T) {
	for _, mode := range []WatchListMode{WatchListOff, WatchListOn} {
		t.Run(mode.String(), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				srv := reflectortest.NewServer[configMap](reflectortest.Config{WatchList: true})
				for i := range 20 {
					mustCreate(t, srv, shardObject(i))
				}
				halves := SplitShards(ShardByName, 2)
				st := newMemStore[configMap]()
				r := New(srv, st, Config[configMap]{WatchList: mode, Shard: halves[0]})
				if _, ok := r.ListedShard(); ok {
					t.Fatal("ListedShard before any list")
				}
				start(t, r)
				synctest.Wait()
				if got, ok := r.ListedShard(); !ok || !got.Covers(halves[0]) || got.Covers(halves[1]) {
					t.Fatalf("ListedShard = %v, %v; want the first half", got, ok)
				}
				if err := r.SetShard(SplitShards(ShardByName, 1)[0]); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				if got, _ := r.ListedShard(); !got.Covers(halves[1]) {
					t.Fatalf("ListedShard = %v after widening to the whole space", got)
				}
				if fmt.Sprint(st.Contents()) != fmt.Sprint(shardContents(srv, Shard{})) {
					t.Fatalf("store %v after widening", st.Contents())
				}
			})
		})
	}
}
