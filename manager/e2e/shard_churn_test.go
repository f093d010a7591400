//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/indexer"
	"github.com/ctrlkit/ctrlkit/internal/netcut"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reconcile"
)

// churnBackend is the world outside the cluster that the replicas provision
// for each owner key (as the network example's backend): an entry per key,
// naming the UID of the owner it was made for. It records, outside the
// replicas, every delete of the entry of the owner that is live on the server
// at that moment (live names the owners the workload has created and not yet
// begun to delete).
type churnBackend struct {
	mu          sync.Mutex
	entries     map[string]types.UID
	live        map[string]types.UID
	liveDeletes []string
}

func (b *churnBackend) put(key string, uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.entries[key] = uid
}

func (b *churnBackend) remove(id, key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	uid, ok := b.entries[key]
	if !ok {
		return
	}
	if live, ok := b.live[key]; ok && live == uid {
		b.liveDeletes = append(b.liveDeletes, fmt.Sprintf("%s (%s) by %s", key, uid, id))
	}
	delete(b.entries, key)
}

func (b *churnBackend) setLive(key string, uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if uid == "" {
		delete(b.live, key)
	} else {
		b.live[key] = uid
	}
}

// keys is a reconcile.Source of the backend's keys, for the controller's
// periodic resync: a level-triggered controller also looks at the world it
// provisions, so that it cleans up after an owner deleted while no replica
// watched its key (between one replica giving a slot up and the next
// listing it), as the network example's orphan sweep does.
func (b *churnBackend) keys(ns string) reconcile.Source[types.NamespacedName] {
	return backendKeys{b, ns}
}

type backendKeys struct {
	b  *churnBackend
	ns string
}

func (backendKeys) Name() string { return "backend" }
func (backendKeys) Start(func(types.NamespacedName, reconcile.Priority)) (func(), error) {
	return func() {}, nil
}
func (backendKeys) HasSynced() bool { return true }
func (k backendKeys) AppendKeys(dst []types.NamespacedName) []types.NamespacedName {
	k.b.mu.Lock()
	defer k.b.mu.Unlock()
	for key := range k.b.entries {
		dst = append(dst, types.NamespacedName{Namespace: k.ns, Name: strings.TrimPrefix(key, k.ns+"/")})
	}
	return dst
}

// skewedClock makes a replica's Lease traffic look as if its wall clock were
// offset: the times it writes on Leases are shifted by the offset, and those
// it reads by its opposite (it would compare them with its own clock). The
// offset can step while the replica runs. Lease requests are rewritten as JSON
// and their answers asked for in JSON.
type skewedClock struct {
	offset atomic.Int64 // nanoseconds
}

func (s *skewedClock) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return skewRT{s, rt} })
	return cfg
}

type skewRT struct {
	s  *skewedClock
	rt http.RoundTripper
}

func (t skewRT) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.Contains(req.URL.Path, "/leases") {
		return t.rt.RoundTrip(req)
	}
	d := time.Duration(t.s.offset.Load())
	req = req.Clone(req.Context())
	req.Header.Set("Accept", "application/json")
	if req.Body != nil && (req.Method == http.MethodPut || req.Method == http.MethodPost) {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("skewed clock: decoding a Lease write: %w", err)
		}
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return nil, fmt.Errorf("skewed clock: a %T written to leases", obj)
		}
		for _, at := range []*metav1.MicroTime{l.Spec.RenewTime, l.Spec.AcquireTime} {
			if at != nil {
				at.Time = at.Add(d)
			}
		}
		l.APIVersion, l.Kind = "coordination.k8s.io/v1", "Lease"
		if body, err = json.Marshal(l); err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := t.rt.RoundTrip(req)
	if err != nil || resp.StatusCode >= 300 {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	body = shiftLeaseTimes(body, -d)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// shiftLeaseTimes shifts spec.renewTime and spec.acquireTime of a Lease or of
// each Lease of a LeaseList, in JSON; other bodies pass unchanged.
func shiftLeaseTimes(body []byte, d time.Duration) []byte {
	var doc map[string]any
	if d == 0 || json.Unmarshal(body, &doc) != nil {
		return body
	}
	shift := func(obj map[string]any) {
		spec, _ := obj["spec"].(map[string]any)
		for _, f := range []string{"renewTime", "acquireTime"} {
			s, ok := spec[f].(string)
			if !ok {
				continue
			}
			if at, err := time.Parse(time.RFC3339Nano, s); err == nil {
				spec[f] = at.Add(d).UTC().Format("2006-01-02T15:04:05.000000Z07:00")
			}
		}
	}
	if items, ok := doc["items"].([]any); ok {
		for _, it := range items {
			if obj, ok := it.(map[string]any); ok {
				shift(obj)
			}
		}
	} else {
		shift(doc)
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return body
	}
	return out
}

// churnReplica is one manager of the churn test's group.
type churnReplica struct {
	id     string
	clock  *skewedClock
	cut    *netcut.Cutter
	stop   func() error
	status func() manager.ShardStatus
}

const churnOwnerIndex = "by-controller-uid"

func startChurnReplica(t *testing.T, ns, id string, offset time.Duration, l *shardLedger, b *churnBackend) *churnReplica {
	t.Helper()
	r := &churnReplica{id: id, clock: &skewedClock{}, cut: netcut.New()}
	r.clock.offset.Store(int64(offset))
	m, err := manager.New(manager.Config{RESTConfig: r.cut.Wrap(r.clock.wrap(env.Config())), Sharding: &manager.Sharding{
		Namespace: ns, Group: "churn", Identity: id, Slots: 32,
		LeaseDuration: 3 * time.Second, RenewPeriod: 300 * time.Millisecond, RenewDeadline: 2 * time.Second,
	}})
	if err != nil {
		t.Fatal(err)
	}
	owners, err := manager.Typed(m, manager.Options[*corev1.ConfigMap]{Namespace: ns, Shard: manager.ShardByObject})
	if err != nil {
		t.Fatal(err)
	}
	children, err := manager.Typed(m, manager.Options[*corev1.Secret]{Namespace: ns, Shard: manager.ShardByController,
		Indexers: indexer.Indexers[*corev1.Secret]{churnOwnerIndex: func(s *corev1.Secret) ([]string, error) {
			if ref := metav1.GetControllerOf(s); ref != nil {
				return []string{string(ref.UID)}, nil
			}
			return nil, nil
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
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // a window for another replica to overlap
		cm, err := owners.Lister().Get(k.Namespace, k.Name)
		if apierrors.IsNotFound(err) {
			b.remove(id, key) // no owner: clean up after it, as a level-triggered controller does
			return reconcile.Result{}, nil
		}
		if err != nil {
			return reconcile.Result{}, err
		}
		b.put(key, cm.UID)
		kids, err := children.Indexer().ByIndex(churnOwnerIndex, string(cm.UID))
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
		cp.Data["children"] = n
		_, err = kube.CoreV1().ConfigMaps(k.Namespace).Update(ctx, cp, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, nil
		}
		return reconcile.Result{}, err
	}), reconcile.Config[types.NamespacedName]{Name: "churn-" + id, Workers: 3, Restrictable: true, ResyncPeriod: 2 * time.Second})
	for _, src := range []reconcile.Source[types.NamespacedName]{
		reconcile.FromInformer(owners, reconcile.ByObject[*corev1.ConfigMap]()),
		reconcile.FromInformer(children, reconcile.ByControllerOwner[*corev1.Secret](schema.GroupKind{Kind: "ConfigMap"})),
		b.keys(ns),
	} {
		if err := ctl.Watch(src); err != nil {
			t.Fatal(err)
		}
	}
	if err := manager.AddSharded(m, ctl, manager.OwnsKey); err != nil {
		t.Fatal(err)
	}
	r.status = func() manager.ShardStatus { st, _ := m.ShardStatus(); return st }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	var runErr error
	r.stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() { _ = r.stop() })
	return r
}

// TestShardedChurn: a seeded randomized run of 3 to 5 sharded replicas, each
// with a wall clock offset by up to a minute that steps while it runs, while
// owners are deleted and re-created under the same names (their UIDs landing
// anywhere), with children left behind by the owners they belonged to,
// replicas joining, leaving and cut off the network. Recorded outside the
// replicas: no key is reconciled by two replicas at once, no replica deletes
// the backend entry of an owner live on the server, and every key converges
// (its backend entry names its owner's UID, its count of children is right,
// and the keys without an owner have no entry). CTRLKIT_SHARD_SEED replays a
// run.
func TestShardedChurn(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CTRLKIT_SHARD_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CTRLKIT_SHARD_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (CTRLKIT_SHARD_SEED replays it)", seed)
	rnd := rand.New(rand.NewPCG(seed, 42))
	offset := func() time.Duration { return time.Duration(rnd.IntN(121)-60) * time.Second }
	ns := env.Namespace(t)
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(env.Config())
	l := &shardLedger{active: map[string]string{}, gone: map[string]string{}}
	b := &churnBackend{entries: map[string]types.UID{}, live: map[string]types.UID{}}

	var reps []*churnReplica
	next := 0
	join := func() {
		reps = append(reps, startChurnReplica(t, ns, fmt.Sprintf("r%d", next), offset(), l, b))
		next++
	}
	for range 3 {
		join()
	}

	const keys = 24
	live := map[string]types.UID{} // owner name → UID, as the workload made them
	kids := map[types.UID]int{}
	yes := true
	create := func(name string) {
		cm, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return // the last delete is not through yet
		}
		if err != nil {
			t.Fatal(err)
		}
		live[name] = cm.UID
		b.setLive(ns+"/"+name, cm.UID)
	}
	addChild := func(name string) {
		uid := live[name]
		_, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			GenerateName:    name + "-",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: name, UID: uid, Controller: &yes}},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		kids[uid]++
	}
	remove := func(name string) {
		delete(live, name)
		b.setLive(ns+"/"+name, "") // before: a clean-up after the delete is no live delete
		err := kube.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	for i := range keys {
		create(fmt.Sprintf("owner-%d", i))
	}
	names := func() []string {
		var out []string
		for n := range live {
			out = append(out, n)
		}
		slices.Sort(out)
		return out
	}

	deadline := time.Now().Add(45 * time.Second)
	var recreated, cuts, leaves, steps int
	for time.Now().Before(deadline) {
		switch r := rnd.IntN(100); {
		case r < 40: // delete and re-create at once: a new UID under the old name, its old children left behind
			if ns := names(); len(ns) > 0 {
				name := ns[rnd.IntN(len(ns))]
				remove(name)
				create(name)
				recreated++
			}
		case r < 50:
			if ns := names(); len(ns) > 0 {
				remove(ns[rnd.IntN(len(ns))])
			}
		case r < 60:
			create(fmt.Sprintf("owner-%d", rnd.IntN(keys)))
		case r < 80:
			if ns := names(); len(ns) > 0 {
				addChild(ns[rnd.IntN(len(ns))])
			}
		case r < 88: // a clock steps
			reps[rnd.IntN(len(reps))].clock.offset.Store(int64(offset()))
			steps++
		case r < 92 && len(reps) < 5:
			join()
		case r < 95 && len(reps) > 3:
			i := rnd.IntN(len(reps))
			if err := reps[i].stop(); err != nil {
				t.Errorf("%s stopped with %v", reps[i].id, err)
			}
			reps = slices.Delete(reps, i, i+1)
			leaves++
		case r < 97 && len(reps) > 3: // cut off: its Lease lapses, the others take its slots
			i := rnd.IntN(len(reps))
			reps[i].cut.Cut()
			cut := reps[i]
			reps = slices.Delete(reps, i, i+1)
			go func() { _ = cut.stop() }() // its Run ends as it can; the cleanup waits
			cuts++
			join()
		}
		time.Sleep(time.Duration(20+rnd.IntN(60)) * time.Millisecond)
	}
	t.Logf("%d re-creations, %d leaves, %d cuts, %d clock steps; %d replicas at the end", recreated, leaves, cuts, steps, len(reps))

	// diverged describes what has not converged yet, "" once everything has.
	diverged := func() string {
		var out []string
		b.mu.Lock()
		for name, uid := range live {
			if got := b.entries[ns+"/"+name]; got != uid {
				out = append(out, fmt.Sprintf("%s: backend entry %q, owner %s", name, got, uid))
			}
		}
		for key := range b.entries {
			if _, ok := live[strings.TrimPrefix(key, ns+"/")]; !ok {
				out = append(out, key+": backend entry without owner")
			}
		}
		b.mu.Unlock()
		list, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		for _, cm := range list.Items {
			if uid, ok := live[cm.Name]; ok && cm.UID == uid && cm.Data["children"] != strconv.Itoa(kids[uid]) {
				out = append(out, fmt.Sprintf("%s: counts %q children, has %d", cm.Name, cm.Data["children"], kids[uid]))
			}
		}
		slices.Sort(out)
		return strings.Join(out, "; ")
	}
	var last string
	deadline = time.Now().Add(60 * time.Second)
	for last = diverged(); last != "" && time.Now().Before(deadline); last = diverged() {
		time.Sleep(100 * time.Millisecond)
	}
	l.mu.Lock()
	if len(l.overlaps) > 0 {
		t.Errorf("%d reconciles of a key by two replicas at once: %v", len(l.overlaps), l.overlaps[:min(5, len(l.overlaps))])
	}
	l.mu.Unlock()
	b.mu.Lock()
	if len(b.liveDeletes) > 0 {
		t.Errorf("%d backend entries of live owners deleted: %v", len(b.liveDeletes), b.liveDeletes[:min(5, len(b.liveDeletes))])
	}
	b.mu.Unlock()
	if last != "" {
		for _, r := range reps {
			t.Logf("%s: %+v", r.id, r.status())
		}
		t.Errorf("not converged after 60 s: %s", last)
	}
	// The offsets reached the server: a Lease of a replica whose clock is off
	// by more than 20 s says a renewTime that far from the server's clock.
	skewed := 0
	for _, r := range reps {
		off := time.Duration(r.clock.offset.Load())
		if off.Abs() < 20*time.Second {
			continue
		}
		l, err := kube.CoordinationV1().Leases(ns).Get(ctx, "churn-"+r.id, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Spec.RenewTime == nil || time.Until(l.Spec.RenewTime.Time).Abs() < 10*time.Second {
			t.Errorf("%s's clock is off by %v, yet its Lease says renewTime %v at %v", r.id, off, l.Spec.RenewTime, time.Now())
		}
		skewed++
	}
	if recreated == 0 || steps == 0 || skewed == 0 {
		t.Errorf("the run re-created %d owners, stepped %d clocks and ended with %d replicas off by 20 s or more: it shows nothing", recreated, steps, skewed)
	}
}
