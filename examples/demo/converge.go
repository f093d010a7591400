package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/examples/network-controller/backend"
	"github.com/ctrlkit/ctrlkit/examples/network-controller/network"
	"github.com/ctrlkit/ctrlkit/examples/replicaset/podset"
	"github.com/ctrlkit/ctrlkit/examples/sidecar-injector/injector"
)

// convergeTimeout bounds the wait for the controllers to reach the final objects' state.
const convergeTimeout = 2 * time.Minute

// check compares one controller's work with what the objects ask for: it returns a line
// describing the state and the problems found.
type check func(context.Context, *clients, *backend.Server) (line string, problems []string, err error)

// converge polls the cluster and the backend until every check passes, and returns the
// lines of the checks then. The controllers' checks read the server (not the controllers'
// caches), so they check the controllers' effects.
func converge(ctx context.Context, c *clients, be *backend.Server, checks []check) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, convergeTimeout)
	defer cancel()
	for {
		var report, problems []string
		for _, check := range checks {
			line, bad, err := check(ctx, c, be)
			if err != nil && ctx.Err() == nil {
				return nil, err
			}
			report = append(report, line)
			problems = append(problems, bad...)
		}
		if len(problems) == 0 && ctx.Err() == nil {
			return report, nil
		}
		select {
		case <-ctx.Done():
			if len(problems) > 10 {
				problems = append(problems[:10], fmt.Sprintf("... and %d more", len(problems)-10))
			}
			return nil, fmt.Errorf("demo: the controllers did not converge within %v: %w:\n  %s",
				convergeTimeout, ctx.Err(), joinLines(problems))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func joinLines(s []string) string {
	out := ""
	for i, l := range s {
		if i > 0 {
			out += "\n  "
		}
		out += l
	}
	return out
}

// checkSidecars: every opted-in Deployment carries the current sidecar, no other does, and
// the user's own container is still there.
func checkSidecars(ctx context.Context, c *clients, _ *backend.Server) (string, []string, error) {
	cm, err := c.kube.CoreV1().ConfigMaps(injector.DefaultConfigNamespace).Get(ctx, injector.DefaultConfigName, metav1.GetOptions{})
	if err != nil {
		return "", nil, err
	}
	sc, err := injector.ParseSidecar("demo", []byte(cm.Data[injector.ConfigKey]))
	if err != nil {
		return "", nil, err
	}
	deps, err := c.kube.AppsV1().Deployments(demoNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", nil, err
	}
	var problems []string
	optedIn := 0
	for _, d := range deps.Items {
		containers := d.Spec.Template.Spec.Containers
		if !slices.ContainsFunc(containers, func(c corev1.Container) bool { return c.Name == "app" }) {
			problems = append(problems, fmt.Sprintf("Deployment %s lost its own container", d.Name))
		}
		in := injector.OptedIn(&d)
		if in {
			optedIn++
		}
		for _, want := range sc.Containers {
			i := slices.IndexFunc(containers, func(c corev1.Container) bool { return c.Name == want.Name })
			switch {
			case in && i < 0:
				problems = append(problems, fmt.Sprintf("Deployment %s opted in but has no %s", d.Name, want.Name))
			case in && containers[i].Image != want.Image:
				problems = append(problems, fmt.Sprintf("Deployment %s has %s %s, want %s", d.Name, want.Name, containers[i].Image, want.Image))
			case !in && i >= 0:
				problems = append(problems, fmt.Sprintf("Deployment %s did not opt in but has %s", d.Name, want.Name))
			}
		}
	}
	line := fmt.Sprintf("sidecar-injector: %d Deployments; the %d that opt in carry %s, the other %d none",
		len(deps.Items), optedIn, sc.Containers[0].Image, len(deps.Items)-optedIn)
	return line, problems, nil
}

// checkNetworks: the backend holds exactly the valid Networks with their specs, invalid ones
// are reported as such, and every Network's status describes its current generation.
func checkNetworks(ctx context.Context, c *clients, be *backend.Server) (string, []string, error) {
	list, err := c.dyn.Resource(network.GroupVersionResource).Namespace(demoNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", nil, err
	}
	inBackend := map[string]network.Spec{}
	for _, n := range be.Networks() {
		if n.Namespace == demoNS {
			inBackend[n.Name] = network.Spec{CIDR: n.CIDR, Gateway: n.Gateway}
		}
	}
	var problems []string
	valid, invalid := 0, 0
	for i := range list.Items {
		n, err := network.FromUnstructured(&list.Items[i])
		if err != nil {
			return "", nil, err
		}
		ready := meta.FindStatusCondition(n.Status.Conditions, network.ConditionReady)
		if n.Status.ObservedGeneration != n.Generation || ready == nil {
			problems = append(problems, fmt.Sprintf("Network %s: status not up to date", n.Name))
			continue
		}
		got, has := inBackend[n.Name]
		delete(inBackend, n.Name)
		var specErr *network.SpecError
		switch err := n.Spec.Validate(); {
		case errors.As(err, &specErr):
			invalid++
			if ready.Status != metav1.ConditionFalse || ready.Reason != network.ReasonInvalidSpec {
				problems = append(problems, fmt.Sprintf("Network %s: invalid spec not reported: %s %s", n.Name, ready.Status, ready.Reason))
			}
		case err != nil:
			return "", nil, err
		default:
			valid++
			if !has || got != n.Spec {
				problems = append(problems, fmt.Sprintf("Network %s: backend has %+v (present %v), want %+v", n.Name, got, has, n.Spec))
			}
			if ready.Status != metav1.ConditionTrue {
				problems = append(problems, fmt.Sprintf("Network %s: Ready %s %s", n.Name, ready.Status, ready.Reason))
			}
		}
	}
	for name := range inBackend {
		problems = append(problems, fmt.Sprintf("backend network %s has no valid Network object", name))
	}
	line := fmt.Sprintf("network-controller: %d Networks; the backend holds exactly the %d valid ones, %d rejected as %s",
		len(list.Items), valid, invalid, network.ReasonInvalidSpec)
	return line, problems, nil
}

// checkPodSets: every PodSet owns exactly its replicas in live Pods and reports them.
func checkPodSets(ctx context.Context, c *clients, _ *backend.Server) (string, []string, error) {
	list, err := c.dyn.Resource(podset.GroupVersionResource).Namespace(demoNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", nil, err
	}
	pods, err := c.kube.CoreV1().Pods(demoNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", nil, err
	}
	owned := map[string]int{}
	for _, p := range pods.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && p.DeletionTimestamp == nil {
			owned[string(ref.UID)]++
		}
	}
	var problems []string
	total := 0
	for i := range list.Items {
		ps, err := podset.FromUnstructured(&list.Items[i])
		if err != nil {
			return "", nil, err
		}
		want := 1
		if ps.Spec.Replicas != nil {
			want = int(*ps.Spec.Replicas)
		}
		total += want
		if got := owned[string(ps.UID)]; got != want {
			problems = append(problems, fmt.Sprintf("PodSet %s owns %d Pods, wants %d", ps.Name, got, want))
		}
		if ps.Status.ObservedGeneration != ps.Generation || int(ps.Status.Replicas) != want {
			problems = append(problems, fmt.Sprintf("PodSet %s: status %d replicas at generation %d, want %d at %d",
				ps.Name, ps.Status.Replicas, ps.Status.ObservedGeneration, want, ps.Generation))
		}
	}
	line := fmt.Sprintf("replicaset: %d PodSets own exactly the %d Pods they ask for", len(list.Items), total)
	return line, problems, nil
}
