//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/examples/network-controller/backend"
	"github.com/ctrlkit/ctrlkit/examples/network-controller/network"
)

// TestInstallIdempotent installs twice and checks the CRD is served with its status
// subresource.
func TestInstallIdempotent(t *testing.T) {
	ns := setup(t)
	if err := network.Install(t.Context(), env.Config()); err != nil {
		t.Fatalf("second Install = %v", err)
	}
	n := create(t, ns, "probe", "10.0.0.0/24", "10.0.0.1")
	if n.Generation != 1 {
		t.Errorf("generation = %d", n.Generation)
	}
	// The status subresource exists: an update of the main resource ignores status.
	_, res := admin(t)
	n.Status.ObservedGeneration = 7
	u, err := network.ToUnstructured(n)
	if err != nil {
		t.Fatal(err)
	}
	u, err = res.Namespace(ns).Update(t.Context(), u, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := network.FromUnstructured(u); got.Status.ObservedGeneration != 0 {
		t.Errorf("status written through the main resource: %+v", got.Status)
	}
}

// TestLifecycle: create → provisioned and Ready; spec change → backend updated;
// drift in the backend → repaired by the resync; delete → the finalizer removes the
// backend network and the object goes away.
func TestLifecycle(t *testing.T) {
	ns := setup(t)
	b := newBackend(t)
	srv := b.Start()
	c := startController(t, ns, b.URL(), network.Options{ResyncPeriod: 2 * time.Second})

	created := create(t, ns, "net-a", "192.168.0.0/16", "192.168.0.1")
	if err := c.WaitForCache(t.Context(), created.ResourceVersion); err != nil {
		t.Fatalf("WaitForCache(%s) = %v", created.ResourceVersion, err)
	}
	eventually(t, converge, "provisioned", func() string {
		n := get(t, ns, "net-a")
		if !hasReason(n, metav1.ConditionTrue, network.ReasonProvisioned) {
			return ready(n)
		}
		if !slices.Contains(n.Finalizers, network.Finalizer) {
			return fmt.Sprintf("finalizers %q", n.Finalizers)
		}
		return backendHas(b, ns, bnet(ns, "net-a", "192.168.0.0/16", "192.168.0.1"))
	})

	_, res := admin(t)
	if _, err := modify(t.Context(), res.Namespace(ns), "net-a", func(n *network.Network) {
		n.Spec = network.Spec{CIDR: "10.10.0.0/16", Gateway: "10.10.0.254"}
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, converge, "spec update", func() string {
		n := get(t, ns, "net-a")
		if n.Generation != 2 || !hasReason(n, metav1.ConditionTrue, network.ReasonProvisioned) {
			return ready(n)
		}
		return backendHas(b, ns, bnet(ns, "net-a", "10.10.0.0/16", "10.10.0.254"))
	})

	// Drift: someone changes the backend behind the controller's back.
	bc, err := backend.NewClient(b.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bc.Put(t.Context(), bnet(ns, "net-a", "172.16.0.0/12", "172.16.0.1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, converge, "drift repaired by the resync", func() string {
		return backendHas(b, ns, bnet(ns, "net-a", "10.10.0.0/16", "10.10.0.254"))
	})

	if err := res.Namespace(ns).Delete(t.Context(), "net-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, converge, "deleted through the finalizer", func() string {
		if n := get(t, ns, "net-a"); n != nil {
			return fmt.Sprintf("object still there: deletionTimestamp %v, finalizers %q", n.DeletionTimestamp, n.Finalizers)
		}
		return backendHas(b, ns)
	})
	if srv.RequestCount(ns, "net-a") == 0 {
		t.Error("the backend saw no request for net-a")
	}
}

// TestInvalidSpec: an invalid CIDR or a gateway outside the CIDR gets Ready=False
// InvalidSpec with a clear message and never reaches the backend; fixing the spec
// provisions it.
func TestInvalidSpec(t *testing.T) {
	ns := setup(t)
	b := newBackend(t)
	srv := b.Start()
	startController(t, ns, b.URL(), network.Options{})

	cases := []struct{ name, cidr, gateway, message string }{
		{"bad-cidr", "192.168.0.0/40", "192.168.0.1", `spec.cidr "192.168.0.0/40" is not a valid CIDR`},
		{"not-a-cidr", "banana", "192.168.0.1", `spec.cidr "banana" is not a valid CIDR`},
		{"gw-outside", "192.168.0.0/16", "10.0.0.1", "spec.gateway 10.0.0.1 is outside spec.cidr 192.168.0.0/16"},
	}
	for _, tc := range cases {
		create(t, ns, tc.name, tc.cidr, tc.gateway)
	}
	// A valid one too, so that we know when the controller has been through them all.
	create(t, ns, "good", "10.0.0.0/8", "10.0.0.1")
	for _, tc := range cases {
		eventually(t, converge, tc.name+" rejected", func() string {
			n := get(t, ns, tc.name)
			if !hasReason(n, metav1.ConditionFalse, network.ReasonInvalidSpec) {
				return ready(n)
			}
			if msg := meta.FindStatusCondition(n.Status.Conditions, network.ConditionReady).Message; !strings.Contains(msg, tc.message) {
				return fmt.Sprintf("message %q, want it to contain %q", msg, tc.message)
			}
			return ""
		})
	}
	eventually(t, converge, "good provisioned", func() string {
		return backendHas(b, ns, bnet(ns, "good", "10.0.0.0/8", "10.0.0.1"))
	})
	for _, tc := range cases {
		if n := srv.RequestCount(ns, tc.name); n != 0 {
			t.Errorf("%s: the backend got %d requests for an invalid spec", tc.name, n)
		}
	}

	// Fixing the spec provisions the network.
	_, res := admin(t)
	if _, err := modify(t.Context(), res.Namespace(ns), "gw-outside", func(n *network.Network) { n.Spec.Gateway = "192.168.0.1" }); err != nil {
		t.Fatal(err)
	}
	eventually(t, converge, "fixed spec provisioned", func() string {
		if n := get(t, ns, "gw-outside"); !hasReason(n, metav1.ConditionTrue, network.ReasonProvisioned) {
			return ready(n)
		}
		return backendHas(b, ns, bnet(ns, "good", "10.0.0.0/8", "10.0.0.1"), bnet(ns, "gw-outside", "192.168.0.0/16", "192.168.0.1"))
	})
	// An invalid Network is deleted like any other (the finalizer's DELETE finds nothing).
	if err := res.Namespace(ns).Delete(t.Context(), "bad-cidr", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, converge, "invalid network deleted", func() string {
		if n := get(t, ns, "bad-cidr"); n != nil {
			return fmt.Sprintf("still there, finalizers %q", n.Finalizers)
		}
		return ""
	})
}

// TestOrphans: backend networks with no Network object are deleted, whether they
// were there before the controller started, appeared while it runs, or lost their
// object without the finalizer running; other namespaces' networks are left alone.
func TestOrphans(t *testing.T) {
	ns := setup(t)
	b := newBackend(t)
	b.Start()
	bc, err := backend.NewClient(b.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	other := bnet(ns+"-elsewhere", "kept", "10.9.0.0/16", "10.9.0.1")
	for _, n := range []backend.Network{
		bnet(ns, "orphan-before", "10.1.0.0/16", "10.1.0.1"),
		bnet(ns, "kept", "10.2.0.0/16", "10.2.0.1"), // has a Network
		other,
	} {
		if _, err := bc.Put(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	create(t, ns, "kept", "10.2.0.0/16", "10.2.0.1")
	startController(t, ns, b.URL(), network.Options{OrphanSweepPeriod: 500 * time.Millisecond})
	eventually(t, converge, "orphan at start removed", func() string {
		return backendHas(b, ns, bnet(ns, "kept", "10.2.0.0/16", "10.2.0.1"))
	})

	if _, err := bc.Put(ctx, bnet(ns, "orphan-later", "10.3.0.0/16", "10.3.0.1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, converge, "orphan appearing while running removed", func() string {
		return backendHas(b, ns, bnet(ns, "kept", "10.2.0.0/16", "10.2.0.1"))
	})

	// A Network whose finalizer an admin strips while deleting it: the object goes at
	// once, the backend network becomes an orphan.
	create(t, ns, "stripped", "10.4.0.0/16", "10.4.0.1")
	eventually(t, converge, "stripped provisioned", func() string {
		return backendHas(b, ns, bnet(ns, "kept", "10.2.0.0/16", "10.2.0.1"), bnet(ns, "stripped", "10.4.0.0/16", "10.4.0.1"))
	})
	_, res := admin(t)
	if _, err := modify(ctx, res.Namespace(ns), "stripped", func(n *network.Network) { n.Finalizers = nil }); err != nil {
		t.Fatal(err)
	}
	if err := res.Namespace(ns).Delete(ctx, "stripped", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, converge, "orphan of a stripped Network removed", func() string {
		return backendHas(b, ns, bnet(ns, "kept", "10.2.0.0/16", "10.2.0.1"))
	})
	if got, err := bc.Get(ctx, other.Namespace, other.Name); err != nil || got != other {
		t.Errorf("network of another namespace: %+v, %v; want it kept", got, err)
	}
}

// TestBackendOutage: while the backend is down or failing, Networks get Ready=False
// BackendError and the controller retries; once it is back (restarted on the same
// state directory) everything converges, including a deletion held by the finalizer.
func TestBackendOutage(t *testing.T) {
	ns := setup(t)
	b := newBackend(t)
	b.Start()
	startController(t, ns, b.URL(), network.Options{})
	create(t, ns, "early", "10.1.0.0/16", "10.1.0.1")
	eventually(t, converge, "early provisioned", func() string {
		return backendHas(b, ns, bnet(ns, "early", "10.1.0.0/16", "10.1.0.1"))
	})

	b.Stop() // connection refused from now on
	create(t, ns, "during", "10.2.0.0/16", "10.2.0.1")
	_, res := admin(t)
	if err := res.Namespace(ns).Delete(t.Context(), "early", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"during", "early"} {
		eventually(t, converge, name+" reports the outage", func() string {
			n := get(t, ns, name)
			c := meta.FindStatusCondition(n.Status.Conditions, network.ConditionReady)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != network.ReasonBackendError || !strings.Contains(c.Message, "backend:") {
				return ready(n)
			}
			return ""
		})
	}
	if n := get(t, ns, "early"); n == nil || !slices.Contains(n.Finalizers, network.Finalizer) {
		t.Fatal("early was deleted while its backend network could not be")
	}

	// Back, with its state from disk, but failing the next requests with 500.
	srv := b.Start()
	srv.FailNext(3)
	eventually(t, converge, "converged after the outage", func() string {
		if n := get(t, ns, "during"); !hasReason(n, metav1.ConditionTrue, network.ReasonProvisioned) {
			return ready(n)
		}
		if n := get(t, ns, "early"); n != nil {
			return "early still there: " + ready(n)
		}
		return backendHas(b, ns, bnet(ns, "during", "10.2.0.0/16", "10.2.0.1"))
	})
}

// TestConflictStorm: writers keep changing the labels of the same Networks while the
// controller adds finalizers, writes status, follows spec changes and finalizes
// deletions. Its writes conflict; it must retry from fresh state, so nothing is lost:
// every Network ends Ready for its latest generation with the finalizer, the writers'
// labels are intact, the backend matches, and the deleted ones are gone from both.
// The test goes on adding and deleting Networks under writers until at least one
// finalizer write has met a 409, so that it always tests that path.
func TestConflictStorm(t *testing.T) {
	ns := setup(t)
	b := newBackend(t)
	b.Start()
	_, res := admin(t)
	nsRes := res.Namespace(ns)

	const count = 6
	for i := range count {
		create(t, ns, "storm-"+strconv.Itoa(i), fmt.Sprintf("10.%d.0.0/16", i), fmt.Sprintf("10.%d.0.1", i))
	}

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	lastLabel := make([]string, count) // per Network, the label value last written
	var mu sync.Mutex
	errs := make(chan error, 2*count+40) // two writers per Network, extras included
	for i := range count {
		name := "storm-" + strconv.Itoa(i)
		for w := range 2 {
			wg.Go(func() {
				for j := 0; ctx.Err() == nil; j++ {
					value := fmt.Sprintf("w%d-%d", w, j)
					mu.Lock() // the write and lastLabel together, so the last write is known
					// Not ctx: a write cancelled in flight may still be applied, and
					// then the last value would be unknown.
					n, err := modify(t.Context(), nsRes, name, func(n *network.Network) {
						if n.Labels == nil {
							n.Labels = map[string]string{}
						}
						n.Labels["storm"] = value
					})
					if err == nil && n != nil {
						lastLabel[i] = value
					}
					mu.Unlock()
					if err != nil {
						errs <- fmt.Errorf("%s: %w", name, err)
						return
					}
					if n == nil {
						return
					}
				}
			})
		}
	}

	// The controller starts in the storm: its first writes (the finalizers) are made
	// from a list that is already out of date.
	c := startController(t, ns, b.URL(), network.Options{Workers: 4})

	// Meanwhile, change the specs, so that status must be written again, until the
	// controller has met a good number of conflicts; then delete two Networks, so
	// that finalizers must be removed, through the storm.
	lastGateway := 0
	for round := 0; round < 3 || c.conflicts.Load() < 10; round++ {
		if round == 300 {
			t.Fatalf("only %d conflicts after %d rounds of spec changes", c.conflicts.Load(), round)
		}
		for i := range count {
			if _, err := modify(t.Context(), nsRes, "storm-"+strconv.Itoa(i), func(n *network.Network) {
				n.Spec.Gateway = fmt.Sprintf("10.%d.0.%d", i, 10+round)
			}); err != nil {
				t.Fatal(err)
			}
		}
		lastGateway = 10 + round
	}
	// Delete while the writers go on, so that removing the finalizers meets them too,
	// and wait until the Networks are gone.
	deleteAndWait := func(names ...string) {
		for _, name := range names {
			if err := nsRes.Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		eventually(t, converge, "deleted through the storm", func() string {
			for _, name := range names {
				if n := get(t, ns, name); n != nil {
					return name + " still there: " + ready(n)
				}
			}
			return ""
		})
	}
	deleteAndWait("storm-4", "storm-5")
	// Whether a finalizer write meets a writer is a race. Until one has, add and
	// delete more Networks under two writers each, for at most 20 rounds.
	for k := 0; c.objectConflicts.Load() == 0; k++ {
		if k == 20 {
			t.Fatalf("no 409 Conflict on a finalizer write after %d extra Networks", k)
		}
		name := "extra-" + strconv.Itoa(k)
		create(t, ns, name, "10.200.0.0/16", "10.200.0.1")
		for w := range 2 {
			wg.Go(func() {
				for j := 0; ctx.Err() == nil; j++ {
					n, err := modify(t.Context(), nsRes, name, func(n *network.Network) {
						if n.Labels == nil {
							n.Labels = map[string]string{}
						}
						n.Labels["storm"] = fmt.Sprintf("w%d-%d", w, j)
					})
					if err != nil {
						errs <- fmt.Errorf("%s: %w", name, err)
						return
					}
					if n == nil {
						return
					}
				}
			})
		}
		eventually(t, converge, "finalizer added through the storm", func() string {
			if n := get(t, ns, name); n == nil || !slices.Contains(n.Finalizers, network.Finalizer) {
				return name + " has no finalizer yet"
			}
			return ""
		})
		deleteAndWait(name)
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	var want []backend.Network
	for i := range 4 {
		want = append(want, bnet(ns, "storm-"+strconv.Itoa(i), fmt.Sprintf("10.%d.0.0/16", i), fmt.Sprintf("10.%d.0.%d", i, lastGateway)))
	}
	eventually(t, converge, "converged after the storm", func() string {
		for i := range count {
			name := "storm-" + strconv.Itoa(i)
			n := get(t, ns, name)
			if i >= 4 {
				if n != nil {
					return name + " not deleted: " + ready(n)
				}
				continue
			}
			if !hasReason(n, metav1.ConditionTrue, network.ReasonProvisioned) {
				return name + ": " + ready(n)
			}
			if !slices.Contains(n.Finalizers, network.Finalizer) {
				return fmt.Sprintf("%s lost its finalizer: %q", name, n.Finalizers)
			}
			if diff := cmp.Diff(map[string]string{"storm": lastLabel[i]}, n.Labels); diff != "" {
				return fmt.Sprintf("%s labels (-writer +server):\n%s", name, diff)
			}
		}
		return backendHas(b, ns, want...)
	})
	t.Logf("the controller got %d conflicts on status writes, %d on finalizer writes", c.conflicts.Load()-c.objectConflicts.Load(), c.objectConflicts.Load())
}
