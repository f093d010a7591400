package podset

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// deletionOrder sorts pods in the order a scale-down deletes them: the Pods whose
// loss costs least first. It compares, in turn:
//
//  1. not yet scheduled (no spec.nodeName) before scheduled;
//  2. phase Pending before Unknown before Running;
//  3. not Ready before Ready;
//  4. newer before older (creationTimestamp), since a young Pod has done less work
//     and may still be starting;
//  5. name, so that the order is total and the same on every run.
func deletionOrder(pods []*corev1.Pod) {
	slices.SortFunc(pods, compareForDeletion)
}

// compareForDeletion returns a negative number if a should be deleted before b.
func compareForDeletion(a, b *corev1.Pod) int {
	if c := cmp.Compare(scheduledRank(a), scheduledRank(b)); c != 0 {
		return c
	}
	if c := cmp.Compare(phaseRank(a.Status.Phase), phaseRank(b.Status.Phase)); c != 0 {
		return c
	}
	if c := cmp.Compare(readyRank(a), readyRank(b)); c != 0 {
		return c
	}
	// Newer first: the later timestamp sorts first.
	if c := b.CreationTimestamp.Time.Compare(a.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

func scheduledRank(p *corev1.Pod) int {
	if p.Spec.NodeName == "" {
		return 0
	}
	return 1
}

func phaseRank(phase corev1.PodPhase) int {
	switch phase {
	case corev1.PodPending, "":
		return 0
	case corev1.PodUnknown:
		return 1
	default: // Running; Succeeded and Failed Pods are not active and never ranked
		return 2
	}
}

func readyRank(p *corev1.Pod) int {
	if isReady(p) {
		return 1
	}
	return 0
}

// isReady reports whether the Pod's Ready condition is True.
func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// isActive reports whether the Pod counts toward the replicas: not finished and not
// being deleted.
func isActive(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}
