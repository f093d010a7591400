//go:build e2e

package e2e

import (
	"fmt"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/internal/testrun"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/testenv"
)

// TestShardedListAndWatch: two reflectors, each given one half of the UID hash
// space in two ranges, hold exactly their halves of a namespace's ConfigMaps through a list
// and a churn of creates, updates and deletes, with paginated and streaming
// lists: filtered by the server where it has ShardedListAndWatch (this
// package's control plane), and by the reflectors where it has not (a second
// control plane started without the gate).
func TestShardedListAndWatch(t *testing.T) {
	t.Run("gate on", func(t *testing.T) {
		shardedListAndWatch(t, env.Config(), env.Namespace(t), reflector.ShardFilteringServer)
	})
	t.Run("gate off", func(t *testing.T) {
		off, err := testenv.Start(t.Context(), testenv.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer off.Stop()
		shardedListAndWatch(t, off.Config(), off.Namespace(t), reflector.ShardFilteringClient)
	})
}

func shardedListAndWatch(t *testing.T, cfg *rest.Config, ns, wantMode string) {
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(reflector.WithProtobuf(cfg))
	cms := kube.CoreV1().ConfigMaps(ns)
	for i := range 200 {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Two shards of two ranges each, interleaved.
	q := uint64(1) << 62
	shards := []reflector.Shard{
		{Field: reflector.ShardByUID, Ranges: []reflector.Range{{Start: 0, End: q}, {Start: 2 * q, End: 3 * q}}},
		{Field: reflector.ShardByUID, Ranges: []reflector.Range{{Start: q, End: 2 * q}, {Start: 3 * q, End: 0}}},
	}
	// want returns, per shard, the server's objects in it: key → resourceVersion.
	want := func() []map[string]string {
		list, err := cms.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]map[string]string, len(shards))
		for i, s := range shards {
			out[i] = map[string]string{}
			for _, c := range list.Items {
				if s.Contains(c.Namespace, string(c.UID)) {
					out[i][c.Namespace+"/"+c.Name] = c.ResourceVersion
				}
			}
		}
		if n := len(out[0]) + len(out[1]); n != len(list.Items) || len(out[0]) == 0 || len(out[1]) == 0 {
			t.Fatalf("shards of %d and %d objects for %d objects", len(out[0]), len(out[1]), len(list.Items))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		mode reflector.WatchListMode
		lw   reflector.ListerWatcher[*corev1.ConfigMap]
	}{
		{"typed paginated", reflector.WatchListOff, reflector.FromTyped(cms)},
		{"typed streaming", reflector.WatchListOn, reflector.FromTyped(cms)},
		{"protobuf paginated", reflector.WatchListOff, reflector.FromREST[*corev1.ConfigMap](kube.CoreV1().RESTClient(), "configmaps", ns)},
	} {
		mode := tc.mode
		t.Run(tc.name, func(t *testing.T) {
			stores := make([]*mapStore[*corev1.ConfigMap], len(shards))
			refls := make([]*reflector.Reflector[*corev1.ConfigMap], len(shards))
			for i, s := range shards {
				stores[i] = newMapStore[*corev1.ConfigMap]()
				refls[i] = reflector.New(tc.lw, stores[i], reflector.Config[*corev1.ConfigMap]{Shard: s, WatchList: mode, Name: fmt.Sprintf("shard-%d", i)})
				testrun.Run(t, refls[i].Run)
			}
			w := want()
			for i := range shards {
				stores[i].waitFor(t, w[i])
			}
			// Churn: creates, updates and deletes across both shards.
			base := 1000 * (len(tc.name) + int(mode))
			for i := range 60 {
				if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new-" + strconv.Itoa(base+i)}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 30 {
				name := "cm-" + strconv.Itoa(i)
				c, err := cms.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				c.Data = map[string]string{"round": strconv.Itoa(base)}
				if _, err := cms.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 20 {
				if err := cms.Delete(ctx, "new-"+strconv.Itoa(base+i), metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			w = want()
			for i := range shards {
				stores[i].waitFor(t, w[i])
				if h := refls[i].Health(); h.ShardFiltering != wantMode || h.Stats.Failures != 0 {
					t.Errorf("shard %d: filtering %q, want %q; %d failures (%v)", i, h.ShardFiltering, wantMode, h.Stats.Failures, h.LastError)
				}
			}
			t.Logf("%s: shards of %d and %d objects, filtered by the %s", tc.name, len(w[0]), len(w[1]), wantMode)
		})
	}
}
