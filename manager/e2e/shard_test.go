//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/indexer"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// shardLedger records, outside the replicas, who reconciles which key, and
// which keys were reconciled after their object was gone.
type shardLedger struct {
	mu       sync.Mutex
	active   map[string]string
	overlaps []string
	gone     map[string]string // key → replica that reconciled it absent
}

func (l *shardLedger) enter(id, key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if other, ok := l.active[key]; ok && other != id {
		l.overlaps = append(l.overlaps, key+" by "+other+" and "+id)
		return false
	}
	l.active[key] = id
	return true
}

func (l *shardLedger) leave(id, key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active[key] == id {
		delete(l.active, key)
	}
}

// shardedReplica is one manager of the group: owner ConfigMaps sharded by
// name, their child Secrets by their controller's name, one controller that
// writes each owner's count of children.
type shardedReplica struct {
	id       string
	m        *manager.Manager
	owners   *informer.Informer[*corev1.ConfigMap]
	children *informer.Informer[*corev1.Secret]
	stop     func()
}

const byOwnerIndex = "by-controller-uid"

func startShardedReplica(t *testing.T, ns, id string, l *shardLedger, metrics bool) *shardedReplica {
	t.Helper()
	cfg := manager.Config{RESTConfig: env.Config(), Sharding: &manager.Sharding{
		Namespace: ns, Group: "owners", Identity: id, Slots: 64,
		LeaseDuration: 3 * time.Second, RenewPeriod: 300 * time.Millisecond, RenewDeadline: 2 * time.Second,
	}}
	if metrics {
		cfg.HTTP.MetricsAddress = "127.0.0.1:0"
		cfg.HTTP.UnsafeInsecureServing = true
	}
	m, err := manager.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	owners, err := manager.Typed(m, manager.Options[*corev1.ConfigMap]{Namespace: ns, Shard: manager.ShardByObject})
	if err != nil {
		t.Fatal(err)
	}
	children, err := manager.Typed(m, manager.Options[*corev1.Secret]{Namespace: ns, Shard: manager.ShardByController,
		Indexers: indexer.Indexers[*corev1.Secret]{byOwnerIndex: func(s *corev1.Secret) ([]string, error) {
			return []string{string(reflector.ControllerUID(s))}, nil
		}}})
	if err != nil {
		t.Fatal(err)
	}
	kube := m.Kubernetes()
	ctl := reconcile.New(reconcile.Func[types.NamespacedName](func(ctx context.Context, k types.NamespacedName) (reconcile.Result, error) {
		key := k.String()
		if !l.enter(id, key) {
			return reconcile.Result{}, nil
		}
		defer l.leave(id, key)
		time.Sleep(2 * time.Millisecond)
		cm, err := owners.Lister().Get(k.Namespace, k.Name)
		if err != nil {
			l.mu.Lock()
			l.gone[key] = id
			l.mu.Unlock()
			return reconcile.Result{}, nil
		}
		kids, err := children.Indexer().ByIndex(byOwnerIndex, string(cm.UID))
		if err != nil {
			return reconcile.Result{}, err
		}
		n := strconv.Itoa(len(kids))
		if cm.Data["children"] == n {
			return reconcile.Result{}, nil
		}
		cp := cm.DeepCopy()
		if cp.Data == nil {
			cp.Data = map[string]string{}
		}
		cp.Data["children"], cp.Data["by"] = n, id
		_, err = kube.CoreV1().ConfigMaps(k.Namespace).Update(ctx, cp, metav1.UpdateOptions{})
		return reconcile.Result{}, err
	}), reconcile.Config[types.NamespacedName]{Name: "owners-" + id, Workers: 4, Restrictable: true})
	for _, src := range []reconcile.Source[types.NamespacedName]{
		reconcile.FromInformer(owners, reconcile.ByObject[*corev1.ConfigMap]()),
		reconcile.FromInformer(children, reconcile.ByControllerOwner[*corev1.Secret](schema.GroupKind{Kind: "ConfigMap"})),
	} {
		if err := ctl.Watch(src); err != nil {
			t.Fatal(err)
		}
	}
	if err := manager.AddSharded(m, ctl, manager.OwnsKey); err != nil {
		t.Fatal(err)
	}
	return &shardedReplica{id: id, m: m, owners: owners, children: children, stop: runManager(context.Background(), t, m)}
}

// TestShardedManagers: three managers split a controller of owner ConfigMaps
// whose child Secrets are mapped to their owner: each caches about a third of
// the owners and exactly their children (filtered by the reflector, by name
// and by controller name), every owner converges to its count
// of children, a deleted owner's key is reconciled by the replica that held
// it, no key is reconciled by two replicas at once, also while one replica
// leaves, and /metrics shows the split.
func TestShardedManagers(t *testing.T) {
	ns := env.Namespace(t)
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(env.Config())
	const owners = 240
	want := map[string]int{} // owner name → children
	uids := map[string]types.UID{}
	yes := true
	for i := range owners {
		cm, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("owner-%d", i)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[cm.Name] = cm.UID
		want[cm.Name] = 0
	}
	addChild := func(owner string, j int) {
		t.Helper()
		_, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			Name:            fmt.Sprintf("%s-child-%d", owner, j),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner, UID: uids[owner], Controller: &yes}},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want[owner]++
	}
	for i := range owners {
		for j := range i % 4 {
			addChild(fmt.Sprintf("owner-%d", i), j)
		}
	}
	l := &shardLedger{active: map[string]string{}, gone: map[string]string{}}
	reps := []*shardedReplica{
		startShardedReplica(t, ns, "r0", l, true),
		startShardedReplica(t, ns, "r1", l, false),
		startShardedReplica(t, ns, "r2", l, false),
	}
	converged := func(reps []*shardedReplica) func() bool {
		return func() bool {
			list, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false
			}
			seen := 0
			for _, cm := range list.Items {
				if w, ok := want[cm.Name]; ok {
					if cm.Data["children"] != strconv.Itoa(w) {
						return false
					}
					seen++
				}
			}
			if seen != len(want) {
				return false
			}
			// And the caches hold the split: every owner once.
			n := 0
			for _, r := range reps {
				n += r.owners.Indexer().Len()
			}
			return n == len(want)
		}
	}
	waitFor(t, 60*time.Second, "every owner counting its children", converged(reps))

	// The split: about a third each, children with their owner.
	var total, totalKids int
	for _, r := range reps {
		n := r.owners.Indexer().Len()
		total += n
		if n < owners/8 || n > owners/2 {
			t.Errorf("%s caches %d of %d owners", r.id, n, owners)
		}
		for _, s := range r.children.Indexer().List() {
			totalKids++
			owner := s.OwnerReferences[0].Name
			if _, ok := r.owners.Indexer().Get(ns + "/" + owner); !ok {
				t.Errorf("%s caches %s without its owner %s", r.id, s.Name, owner)
			}
		}
		if h := r.owners.Health(); h.ShardFiltering != reflector.ShardFilteringClient {
			t.Errorf("%s: owners filtered by %q, want the client (the server cannot filter by name)", r.id, h.ShardFiltering)
		}
		if h := r.children.Health(); h.ShardFiltering != reflector.ShardFilteringClient {
			t.Errorf("%s: children filtered by %q, want the client", r.id, h.ShardFiltering)
		}
		t.Logf("%s caches %d owners and %d children", r.id, n, r.children.Indexer().Len())
	}
	wantKids := 0
	for _, n := range want {
		wantKids += n
	}
	if total != owners || totalKids != wantKids {
		t.Errorf("the replicas cache %d owners and %d children in all, want %d and %d", total, totalKids, owners, wantKids)
	}

	// Metrics of r0.
	st, _ := reps[0].m.ShardStatus()
	code, body := get(t, "http://"+reps[0].m.MetricsAddr()+"/metrics")
	for _, w := range []string{
		"ctrlkit_shard_members 3",
		fmt.Sprintf("ctrlkit_shard_slots %d", st.Slots),
		fmt.Sprintf(`ctrlkit_shard_keys_owned{filtering="client",informer="configmaps in %s"} %d`, ns, reps[0].owners.Indexer().Len()),
		`ctrlkit_shard_handoffs_total{direction="granted"}`,
		`ctrlkit_shard_info{field="object.metadata.namespace/name",group="owners",identity="r0"} 1`,
		"ctrlkit_shard_range{",
	} {
		if code != 200 || !strings.Contains(body, w) {
			t.Errorf("/metrics (%d) lacks %q", code, w)
		}
	}

	// Deletions, in a steady state: each reconciled, absent, by one replica.
	var deleted []string
	for i := 0; i < owners; i += 12 {
		name := fmt.Sprintf("owner-%d", i)
		if err := kube.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		delete(want, name)
		deleted = append(deleted, ns+"/"+name)
	}
	waitFor(t, 30*time.Second, "every deleted owner reconciled", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, k := range deleted {
			if l.gone[k] == "" {
				return false
			}
		}
		return true
	})

	// One replica leaves while children come: the others take its share.
	for i := 1; i < owners; i += 7 {
		if _, ok := want[fmt.Sprintf("owner-%d", i)]; ok {
			addChild(fmt.Sprintf("owner-%d", i), 10)
		}
	}
	reps[2].stop()
	for i := 3; i < owners; i += 7 {
		if _, ok := want[fmt.Sprintf("owner-%d", i)]; ok {
			addChild(fmt.Sprintf("owner-%d", i), 11)
		}
	}
	waitFor(t, 60*time.Second, "the two left converging", converged(reps[:2]))
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.overlaps) > 0 {
		t.Errorf("%d keys reconciled by two replicas at once: %v", len(l.overlaps), l.overlaps[:min(5, len(l.overlaps))])
	}
	st0, _ := reps[0].m.ShardStatus()
	st1, _ := reps[1].m.ShardStatus()
	if st0.Slots+st1.Slots != 64 || st0.Granted == 0 {
		t.Errorf("after r2 left, r0 and r1 hold %d and %d of 64 slots (r0 granted %d)", st0.Slots, st1.Slots, st0.Granted)
	}
}
