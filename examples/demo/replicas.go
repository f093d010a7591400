package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ctrlkit/ctrlkit/examples/network-controller/network"
	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
	"github.com/ctrlkit/ctrlkit/examples/sidecar-injector/injector"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/reflector"
)

// The replicas of -replicas N are one group of manager.Config.Sharding: their Leases live
// in the sidecar's namespace, out of the workload's way. The lease timings are short so
// that the split settles in about a second and a replica that leaves is replaced at once;
// LeaseDuration bounds the take-over of one that dies without leaving.
const (
	shardGroup         = "demo-controllers"
	shardNamespace     = injector.DefaultConfigNamespace
	shardSlots         = 64
	shardLeaseDuration = 6 * time.Second
	shardRenewPeriod   = 500 * time.Millisecond
	shardRenewDeadline = 4 * time.Second
	// splitTimeout bounds the wait for every replica to hold its share before the workload.
	splitTimeout = 30 * time.Second
)

// replica is one manager running the three example controllers: the only one of the
// default mode, or one of the group of -replicas N, whose controllers and primary
// informers are sharded.
type replica struct {
	id      string
	m       *manager.Manager
	sharded bool
	stats   [3]*stats // sidecar, network, podset: this replica's counts

	inj  *injector.Controller
	netc *network.Controller
	psc  *podset.Controller

	stop context.CancelFunc // ends this replica's Run only
	done chan struct{}      // closed when its Run has returned
	left atomic.Int64       // when it was told to leave, unix nanoseconds; 0 while it runs
}

// newReplica builds a manager with the three controllers. With sharded, the manager is
// replica id of the group and each controller runs with Options.Sharded: the injector's
// Deployments, the Networks and the PodSets are sharded by their key (namespace/name), the
// Pods by their controller's (with their PodSet). Each controller counts into its stats, whose
// parents are the totals of every replica.
func newReplica(cfg *rest.Config, id string, sharded bool, backendURL string, totals []*stats) (*replica, error) {
	mc := manager.Config{RESTConfig: cfg}
	if sharded {
		mc.Sharding = &manager.Sharding{
			Namespace: shardNamespace, Group: shardGroup, Identity: id,
			Slots:         shardSlots,
			LeaseDuration: shardLeaseDuration, RenewPeriod: shardRenewPeriod, RenewDeadline: shardRenewDeadline,
		}
	}
	m, err := manager.New(mc)
	if err != nil {
		return nil, err
	}
	r := &replica{id: id, m: m, sharded: sharded, done: make(chan struct{})}
	for i, name := range []string{"sidecar", "network", "podset"} {
		r.stats[i] = totals[i]
		if sharded {
			r.stats[i] = &stats{name: name, parent: totals[i]}
		}
	}
	sc, nc, pc := r.stats[0], r.stats[1], r.stats[2]
	if r.inj, err = injector.New(m, injector.Options{Namespace: demoNS, Metrics: sc, QueueMetrics: sc, Sharded: sharded}); err != nil {
		return nil, err
	}
	if r.netc, err = network.New(m, network.Options{Namespace: demoNS, BackendURL: backendURL, Metrics: nc, QueueMetrics: nc, Sharded: sharded}); err != nil {
		return nil, err
	}
	if r.psc, err = podset.New(m, podset.Options{Namespace: demoNS, Metrics: pc, QueueMetrics: pc, Sharded: sharded}); err != nil {
		return nil, err
	}
	return r, nil
}

// leave stops the replica as a rolling update would: its controllers drain, its
// member gives every slot up and deletes its Lease, so that the others take them at
// once. It returns without waiting; done closes when the replica has stopped.
func (r *replica) leave() {
	r.left.Store(time.Now().UnixNano())
	r.stop()
}

// leftAt returns when the replica was told to leave, or false while it runs.
func (r *replica) leftAt() (time.Time, bool) {
	n := r.left.Load()
	return time.Unix(0, n), n != 0
}

// Indexes of cached in a replica's view: the sharded informers' objects.
const (
	cachedDeployments = iota
	cachedNetworks
	cachedPodSets
	cachedPods
	cachedKinds
)

// cachedNames are the resources of the informers counted in replicaView.cached.
var cachedNames = [cachedKinds]string{"deployments.apps", "networks." + network.Group, "podsets." + podset.Group, "pods"}

// replicaView is a snapshot of one replica for the progress lines and the summary.
type replicaView struct {
	id         string
	members    int
	slots      int
	fraction   float64
	held       reflector.Shard
	granted    int64
	revoked    int64
	cached     [cachedKinds]int
	filtering  [cachedKinds]string // each informer's Health.ShardFiltering
	reconciles [3]int64
	left       time.Time // zero while it runs
}

// view returns a snapshot of r.
func (r *replica) view() replicaView {
	v := replicaView{id: r.id}
	if st, ok := r.m.ShardStatus(); ok {
		v.members, v.slots, v.fraction, v.held = len(st.Members), st.Slots, st.Fraction, st.Held
		v.granted, v.revoked = st.Granted, st.Revoked
	}
	for _, inf := range r.m.Informers() {
		if i := cachedIndex(inf.Name); i >= 0 {
			v.cached[i] = inf.Objects
			v.filtering[i] = inf.Health.ShardFiltering
		}
	}
	for i, s := range r.stats {
		v.reconciles[i] = s.reconciles.Load()
	}
	if t, ok := r.leftAt(); ok {
		v.left = t
	}
	return v
}

// cachedIndex returns the index in replicaView.cached of the informer named name
// ("pods in demo"), or -1 for one not counted (the sidecar ConfigMap).
func cachedIndex(name string) int {
	res, _, _ := strings.Cut(name, " ")
	for i, n := range cachedNames {
		if res == n {
			return i
		}
	}
	return -1
}

// views returns a snapshot of every replica.
func views(reps []*replica) []replicaView {
	out := make([]replicaView, len(reps))
	for i, r := range reps {
		out[i] = r.view()
	}
	return out
}

// waitSplit waits until every running replica sees them all as members and their
// slots add up to the whole hash space, and returns the views then.
func waitSplit(ctx context.Context, reps []*replica) ([]replicaView, error) {
	ctx, cancel := context.WithTimeout(ctx, splitTimeout)
	defer cancel()
	for {
		vs := views(reps)
		if split(vs) {
			return vs, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("demo: the replicas did not split the hash space within %v: %+v", splitTimeout, vs)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// split reports whether the running replicas of vs hold every slot between them, each
// seeing all of them as members.
func split(vs []replicaView) bool {
	slots, running := 0, 0
	for _, v := range vs {
		if v.left.IsZero() {
			running++
		}
	}
	for _, v := range vs {
		if !v.left.IsZero() {
			continue
		}
		if v.members != running || v.slots == 0 {
			return false
		}
		slots += v.slots
	}
	return slots == shardSlots
}

// printSplit prints how the hash space is split.
func printSplit(vs []replicaView, took time.Duration) {
	var parts []string
	for _, v := range vs {
		parts = append(parts, fmt.Sprintf("%s %d slots (%.1f%%)", v.id, v.slots, 100*v.fraction))
	}
	fmt.Printf("the %d replicas (Leases %s/%s-r*) split the hash space of %d slots in %v: %s\n",
		len(vs), shardNamespace, shardGroup, shardSlots, took.Round(time.Millisecond), strings.Join(parts, ", "))
}

// filtering describes who filters each sharded informer, as the running replicas'
// informers last found (reflector.Health.ShardFiltering): the server, or the replica
// itself (client-side), which is always so for objects placed by their key or their
// controller's; "mixed" where the replicas disagree.
func filtering(vs []replicaView) string {
	var parts []string
	for i, n := range cachedNames {
		mode := ""
		for _, v := range vs {
			switch f := v.filtering[i]; {
			case !v.left.IsZero():
			case mode == "":
				mode = f
			case f != mode:
				mode = "mixed"
			}
		}
		switch mode {
		case reflector.ShardFilteringServer, reflector.ShardFilteringClient:
			mode += "-side"
		case "":
			mode = "unknown"
		}
		parts = append(parts, n+" "+mode)
	}
	return strings.Join(parts, ", ")
}

// handoff is what happened when a replica left: how long the others took to hold its
// slots, and what they hold then.
type handoff struct {
	id     string
	before replicaView   // the leaver's, just before it left
	took   time.Duration // from leaving until the others held every slot
	after  []replicaView // of every replica then
}

// leaveAndWait makes r leave and waits until the others hold all the slots.
func leaveAndWait(ctx context.Context, reps []*replica, r *replica) (handoff, error) {
	h := handoff{id: r.id, before: r.view()}
	r.leave()
	start, _ := r.leftAt()
	for {
		vs := views(reps)
		select {
		case <-r.done:
			if split(vs) {
				h.took, h.after = time.Since(start), vs
				return h, nil
			}
		default:
		}
		select {
		case <-ctx.Done():
			return h, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Since(start) > splitTimeout {
			return h, fmt.Errorf("demo: %s left, and the others did not take its slots within %v", r.id, splitTimeout)
		}
	}
}

func (h handoff) String() string {
	var parts []string
	for _, v := range h.after {
		if v.left.IsZero() {
			parts = append(parts, fmt.Sprintf("%s %d slots (%.1f%%)", v.id, v.slots, 100*v.fraction))
		}
	}
	c := h.before.cached
	return fmt.Sprintf("%s left (controllers drained, Lease deleted) holding %d slots with %s; %v later the others held them: %s",
		h.id, h.before.slots, kindCounts(c), h.took.Round(time.Millisecond), strings.Join(parts, ", "))
}

// anyCache measures cache lag across replicas: a write has reached the controllers
// when the first replica's cache has applied it, which is the one whose shard holds
// the object (the others filter it out).
type anyCache []cacheWaiter

func (a anyCache) WaitForCache(ctx context.Context, rv string) error {
	if len(a) == 1 {
		return a[0].WaitForCache(ctx, rv)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(a))
	for _, w := range a {
		go func() { errs <- w.WaitForCache(ctx, rv) }()
	}
	var err error
	for range a {
		e := <-errs
		if e == nil {
			return nil
		}
		err = errors.Join(err, e)
	}
	return err
}

// waiters returns the cache waiters of the three kinds across reps.
func waiters(reps []*replica) (inj, netc, psc cacheWaiter) {
	var a, b, c anyCache
	for _, r := range reps {
		a, b, c = append(a, r.inj), append(b, r.netc), append(c, r.psc)
	}
	return a, b, c
}

// runReplicas runs every replica in wg until ctx ends; the first error of one goes to errc.
func runReplicas(ctx context.Context, wg *sync.WaitGroup, reps []*replica, errc chan<- error) {
	for _, r := range reps {
		rctx, stop := context.WithCancel(ctx)
		r.stop = stop
		wg.Go(func() {
			defer close(r.done)
			if err := r.m.Run(rctx); err != nil {
				if r.sharded {
					err = fmt.Errorf("replica %s: %w", r.id, err)
				}
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
}
