package main

import (
	"testing"
	"time"
)

func TestCachedIndex(t *testing.T) {
	for name, want := range map[string]int{
		"deployments.apps in demo":                 cachedDeployments,
		"networks.samplecrd.k8s.io in demo":        cachedNetworks,
		"podsets.examples.ctrlkit.dev in demo":     cachedPodSets,
		"pods in demo":                             cachedPods,
		"pods":                                     cachedPods,
		"configmaps in ctrlkit-system fields x=y":  -1,
		"podsets.examples.ctrlkit.dev.other in ns": -1,
	} {
		if got := cachedIndex(name); got != want {
			t.Errorf("cachedIndex(%q) = %d, want %d", name, got, want)
		}
	}
}

// split: the running replicas hold every slot between them and each sees all of
// them; a replica that left counts for neither.
func TestSplit(t *testing.T) {
	gone := time.Unix(1, 0)
	for _, tc := range []struct {
		name string
		vs   []replicaView
		want bool
	}{
		{"split", []replicaView{{members: 2, slots: 30}, {members: 2, slots: 34}}, true},
		{"slots missing", []replicaView{{members: 2, slots: 30}, {members: 2, slots: 33}}, false},
		{"one without slots", []replicaView{{members: 2, slots: 64}, {members: 2}}, false},
		{"a member unseen", []replicaView{{members: 1, slots: 30}, {members: 2, slots: 34}}, false},
		{"one left", []replicaView{{members: 2, slots: 30}, {members: 2, slots: 34}, {slots: 0, left: gone}}, true},
		{"one left, its slots not taken", []replicaView{{members: 2, slots: 30}, {members: 2, slots: 20}, {members: 3, slots: 14, left: gone}}, false},
	} {
		if got := split(tc.vs); got != tc.want {
			t.Errorf("%s: split = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// filtering reports each sharded informer's mode, as the running replicas agree on it.
func TestFiltering(t *testing.T) {
	vs := []replicaView{
		{filtering: [cachedKinds]string{"server", "server", "client", "client"}},
		{filtering: [cachedKinds]string{"server", "client", "client", ""}},
		{filtering: [cachedKinds]string{"client", "client", "client", "client"}, left: time.Unix(1, 0)},
	}
	want := "deployments.apps server-side, networks.samplecrd.k8s.io mixed, podsets.examples.ctrlkit.dev client-side, pods mixed"
	if got := filtering(vs); got != want {
		t.Errorf("filtering = %q, want %q", got, want)
	}
	if got, want := filtering([]replicaView{{}}), "deployments.apps unknown, networks.samplecrd.k8s.io unknown, podsets.examples.ctrlkit.dev unknown, pods unknown"; got != want {
		t.Errorf("filtering = %q, want %q", got, want)
	}
}

func TestKindCounts(t *testing.T) {
	if got, want := kindCounts([cachedKinds]int{1, 0, 2, 1}), "1 Deployment, 0 Networks, 2 PodSets and 1 Pod"; got != want {
		t.Errorf("kindCounts = %q, want %q", got, want)
	}
}
