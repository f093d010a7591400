//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/netcut"
	"github.com/ctrlkit/ctrlkit/reconcile"
	"github.com/ctrlkit/ctrlkit/reflector"
	"github.com/ctrlkit/ctrlkit/shard"
)

// keyLedger records, outside the replicas, which replica reconciles which key,
// to catch two replicas on one key at once.
type keyLedger struct {
	mu       sync.Mutex
	active   map[string]string // key → replica reconciling it
	overlaps []string
	count    map[string]int // reconciles per replica
}

func (l *keyLedger) enter(id, key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count[id]++
	if other, ok := l.active[key]; ok && other != id {
		l.overlaps = append(l.overlaps, fmt.Sprintf("%s by %s and %s", key, other, id))
		return false
	}
	l.active[key] = id
	return true
}

func (l *keyLedger) leave(id, key string) {
	l.mu.Lock()
	if l.active[key] == id {
		delete(l.active, key)
	}
	l.mu.Unlock()
}

// replica is one controller replica: a shard member, an informer re-scoped to
// what the member holds, and a controller restricted to it.
type replica struct {
	id     string
	inf    *informer.Informer[*corev1.ConfigMap]
	member *shard.Member
	cut    *netcut.Cutter
	stop   context.CancelFunc
	done   chan struct{}
}

func startReplica(t *testing.T, ns, id string, l *keyLedger) *replica {
	t.Helper()
	r := &replica{id: id, cut: netcut.New(), done: make(chan struct{})}
	kube := kubernetes.NewForConfigOrDie(r.cut.Wrap(env.Config()))
	inf := informer.New(reflector.FromTyped(kube.CoreV1().ConfigMaps(ns)), informer.Config[*corev1.ConfigMap]{Name: id})
	ownsFor := func(sh reflector.Shard) func(types.NamespacedName) bool {
		return func(k types.NamespacedName) bool {
			obj, err := inf.Lister().Get(k.Namespace, k.Name)
			return err == nil && sh.Contains(obj.Namespace, string(obj.UID))
		}
	}
	ctl := reconcile.New(reconcile.Func[types.NamespacedName](func(ctx context.Context, k types.NamespacedName) (reconcile.Result, error) {
		if !l.enter(id, k.Name) {
			return reconcile.Result{}, nil
		}
		defer l.leave(id, k.Name)
		time.Sleep(5 * time.Millisecond) // the work
		cm, err := inf.Lister().Get(k.Namespace, k.Name)
		if err != nil || cm.Data["seen"] == cm.Data["gen"] {
			return reconcile.Result{}, nil
		}
		cp := cm.DeepCopy()
		cp.Data["seen"] = cm.Data["gen"]
		cp.Data["by"] = id
		_, err = kube.CoreV1().ConfigMaps(k.Namespace).Update(ctx, cp, metav1.UpdateOptions{})
		return reconcile.Result{}, err
	}), reconcile.Config[types.NamespacedName]{Name: id, Workers: 4, Restrictable: true})
	if err := ctl.Watch(reconcile.FromInformer(inf, reconcile.ByObject[*corev1.ConfigMap]())); err != nil {
		t.Fatal(err)
	}
	// Nothing is this replica's until the member holds slots.
	if err := ctl.Restrict(context.Background(), func(types.NamespacedName) bool { return false }); err != nil {
		t.Fatal(err)
	}
	m, err := shard.New(shard.Config{
		Client: kube, Namespace: ns, Group: "controller", Identity: id, Field: reflector.ShardByUID, Slots: slots,
		LeaseDuration: leaseDuration, RenewPeriod: renewPeriod, RenewDeadline: renewDeadline,
		// Keys first, then the cache: a revoked key stops before its object
		// leaves the cache (the cache's relist tells of it as a deletion of
		// unknown final state, which the restricted controller drops); a
		// granted key is let in before its object arrives.
		Revoke: func(ctx context.Context, keep reflector.Shard) error {
			if err := ctl.Restrict(ctx, ownsFor(keep)); err != nil {
				return err
			}
			if len(keep.Ranges) > 0 {
				return inf.SetShard(keep)
			}
			return nil
		},
		Grant: func(hold reflector.Shard) {
			_ = ctl.Restrict(context.Background(), ownsFor(hold))
			_ = inf.SetShard(hold)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.member, r.inf = m, inf
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	var wg sync.WaitGroup
	wg.Go(func() { _ = inf.Run(ctx) })
	wg.Go(func() { _ = ctl.Run(ctx) })
	wg.Go(func() { _ = m.Run(ctx) })
	go func() { wg.Wait(); close(r.done) }()
	return r
}

// TestShardedController: replicas of a controller split 1,000 ConfigMaps with
// shard.Member, reconcile.Restrict and informer.SetShard while a writer keeps
// changing them and replicas join, leave and are cut off, 10 times. No key is
// ever reconciled by two replicas at once (recorded outside the replicas),
// every ConfigMap ends reconciled at its last change, and each replica caches
// only its shard: together, every object once.
func TestShardedController(t *testing.T) {
	const objects = 1000
	ctx := t.Context()
	ns := env.Namespace(t)
	kube := kubernetes.NewForConfigOrDie(env.Config())
	cms := kube.CoreV1().ConfigMaps(ns)
	for i := range objects {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(i)}, Data: map[string]string{"gen": "0"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	l := &keyLedger{active: map[string]string{}, count: map[string]int{}}
	rnd := rand.New(rand.NewPCG(5, 5))
	var live []*replica
	next := 0
	add := func() {
		next++
		live = append(live, startReplica(t, ns, fmt.Sprintf("r-%d", next), l))
	}
	defer func() {
		for _, r := range live {
			r.stop()
			<-r.done
		}
	}()
	add()
	add()
	// The writer: bumps gen of random ConfigMaps until the end.
	wctx, stopWriter := context.WithCancel(ctx)
	var writes sync.WaitGroup
	writes.Go(func() {
		wr := rand.New(rand.NewPCG(9, 9))
		for wctx.Err() == nil {
			name := "cm-" + strconv.Itoa(wr.IntN(objects))
			cm, err := cms.Get(wctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			n, _ := strconv.Atoi(cm.Data["gen"])
			cm.Data["gen"] = strconv.Itoa(n + 1)
			_, _ = cms.Update(wctx, cm, metav1.UpdateOptions{})
			time.Sleep(5 * time.Millisecond)
		}
	})
	kinds := map[string]int{}
	for change := range 10 {
		time.Sleep(1500 * time.Millisecond)
		kind := []string{"join", "leave", "cut"}[rnd.IntN(3)]
		if len(live) <= 1 {
			kind = "join"
		} else if len(live) >= 4 {
			kind = []string{"leave", "cut"}[rnd.IntN(2)]
		}
		kinds[kind]++
		switch kind {
		case "join":
			add()
		case "leave", "cut":
			i := rnd.IntN(len(live))
			r := live[i]
			live = append(live[:i:i], live[i+1:]...)
			if kind == "cut" {
				r.cut.Cut()
				deadline := time.Now().Add(leaseDuration)
				for r.member.Status().Slots > 0 && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
			}
			r.stop()
			<-r.done
		}
		l.mu.Lock()
		if len(l.overlaps) > 0 {
			t.Fatalf("change %d (%s): keys reconciled by two replicas at once: %v", change, kind, l.overlaps)
		}
		l.mu.Unlock()
	}
	stopWriter()
	writes.Wait()
	// Every ConfigMap reconciled at its last change.
	deadline := time.Now().Add(time.Minute)
	for {
		list, err := cms.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		behind := 0
		for _, cm := range list.Items {
			if cm.Data["seen"] != cm.Data["gen"] && cm.Data["gen"] != "0" {
				behind++
			}
		}
		if behind == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d ConfigMaps not reconciled at their last change", behind)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Each replica caches its shard only: together, every object once.
	waitCaches := time.Now().Add(30 * time.Second)
	for {
		total, sizes := 0, []int{}
		for _, r := range live {
			n := r.inf.Indexer().Len()
			total += n
			sizes = append(sizes, n)
		}
		if total == objects {
			t.Logf("the replicas cache %v objects of %d", sizes, objects)
			break
		}
		if time.Now().After(waitCaches) {
			t.Fatalf("the replicas cache %v objects, %d in all, want %d: each its shard", sizes, total, objects)
		}
		time.Sleep(100 * time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.overlaps) > 0 {
		t.Fatalf("keys reconciled by two replicas at once: %v", l.overlaps)
	}
	t.Logf("10 membership changes %v under writes: 0 keys reconciled by two replicas at once; reconciles per replica %v", kinds, l.count)
}
