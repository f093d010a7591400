package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ctrlkit/ctrlkit/examples/network-controller/backend"
	"github.com/ctrlkit/ctrlkit/examples/network-controller/network"
	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
)

// checkSplit: each running replica caches as many Deployments, Networks, PodSets and Pods
// as its shard holds on the server (an object placed by its key, a Pod by its
// controller's), and their shards hold every object once between them.
func checkSplit(reps []*replica) check {
	return func(ctx context.Context, c *clients, _ *backend.Server) (string, []string, error) {
		var uids [cachedKinds][]string // the key that places each object, "namespace/name"
		deps, err := c.kube.AppsV1().Deployments(demoNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", nil, err
		}
		for _, d := range deps.Items {
			uids[cachedDeployments] = append(uids[cachedDeployments], d.Namespace+"/"+d.Name)
		}
		for i, res := range map[int]schema.GroupVersionResource{cachedNetworks: network.GroupVersionResource, cachedPodSets: podset.GroupVersionResource} {
			list, err := c.dyn.Resource(res).Namespace(demoNS).List(ctx, metav1.ListOptions{})
			if err != nil {
				return "", nil, err
			}
			for _, u := range list.Items {
				uids[i] = append(uids[i], u.GetNamespace()+"/"+u.GetName())
			}
		}
		pods, err := c.kube.CoreV1().Pods(demoNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", nil, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			name := p.Name
			if ref := metav1.GetControllerOf(p); ref != nil {
				name = ref.Name
			}
			uids[cachedPods] = append(uids[cachedPods], p.Namespace+"/"+name)
		}

		var problems, parts []string
		var holders [cachedKinds][]int // per object, how many running replicas' shards hold it
		for k := range uids {
			holders[k] = make([]int, len(uids[k]))
		}
		for _, v := range views(reps) {
			if !v.left.IsZero() {
				continue
			}
			var want [cachedKinds]int
			for k := range uids {
				for j, u := range uids[k] {
					ns, name, _ := strings.Cut(u, "/")
					if v.held.ContainsKey(ns, name) {
						want[k]++
						holders[k][j]++
					}
				}
			}
			if want != v.cached {
				problems = append(problems, fmt.Sprintf("%s caches %s, its shard holds %s", v.id, kindCounts(v.cached), kindCounts(want)))
			}
			parts = append(parts, fmt.Sprintf("%s %d/%d/%d/%d", v.id, v.cached[0], v.cached[1], v.cached[2], v.cached[3]))
		}
		for k := range holders {
			for j, n := range holders[k] {
				if n != 1 {
					problems = append(problems, fmt.Sprintf("%s hashed by %q is in %d replicas' shards", cachedNames[k], uids[k][j], n))
				}
			}
		}
		line := fmt.Sprintf("sharding: each replica caches exactly the objects of its shard (Deployments/Networks/PodSets/Pods): %s", strings.Join(parts, ", "))
		return line, problems, nil
	}
}

// kindCounts describes the counts of replicaView.cached.
func kindCounts(c [cachedKinds]int) string {
	return fmt.Sprintf("%s, %s, %s and %s", plural(c[cachedDeployments], "Deployment"), plural(c[cachedNetworks], "Network"),
		plural(c[cachedPodSets], "PodSet"), plural(c[cachedPods], "Pod"))
}

func plural(n int, what string) string {
	if n != 1 {
		what += "s"
	}
	return fmt.Sprintf("%d %s", n, what)
}

// printSummary prints how the replicas split the work: each one's reconciles, the slots
// and objects it held at the end (or when it left), and its hand-offs, counted in slots
// (those taken at the start, from initial, included).
func printSummary(reps []*replica, initial []replicaView, left *handoff, start time.Time) {
	vs := views(reps)
	fmt.Printf("how %d replicas split the work (objects placed by their key, Pods by their PodSet's; filtered: %s):\n", len(reps), filtering(vs))
	for i, v := range vs {
		where := fmt.Sprintf("at the end %d slots (%.1f%%) holding %s", v.slots, 100*v.fraction, kindCounts(v.cached))
		if !v.left.IsZero() {
			where = fmt.Sprintf("left at %.0fs", v.left.Sub(start).Seconds())
			if left != nil && left.id == v.id {
				where += fmt.Sprintf(" with %d slots holding %s", left.before.slots, kindCounts(left.before.cached))
			}
		}
		fmt.Printf("  %s  reconciles %d/%d/%d (sidecar/network/podset); %s; hand-offs: took %d slots (%d at the start), gave up %d\n",
			v.id, v.reconciles[0], v.reconciles[1], v.reconciles[2], where, v.granted, initial[i].granted, v.revoked)
	}
}
