package podset

import (
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pod(name string, created time.Time, node string, phase corev1.PodPhase, ready bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase},
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: status}}
	return p
}

// TestDeletionOrder: whatever the input order, pods sort by the documented
// criteria, each deciding only when the earlier ones tie.
func TestDeletionOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old, young := t0, t0.Add(time.Hour)
	want := []*corev1.Pod{
		pod("unscheduled-young", young, "", corev1.PodPending, false),
		pod("unscheduled-old-a", old, "", corev1.PodPending, false), // same time: by name
		pod("unscheduled-old-b", old, "", corev1.PodPending, false),
		pod("unscheduled-running", young, "", corev1.PodRunning, false), // scheduling beats phase
		pod("pending", old, "n", corev1.PodPending, true),               // phase beats readiness
		pod("unknown", old, "n", corev1.PodUnknown, false),
		pod("running-unready-old", old, "n", corev1.PodRunning, false), // readiness beats age
		pod("running-ready-young", young, "n", corev1.PodRunning, true),
		pod("running-ready-old", old, "n", corev1.PodRunning, true),
	}
	names := func(ps []*corev1.Pod) []string {
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = p.Name
		}
		return out
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		got := append([]*corev1.Pod(nil), want...)
		r.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
		deletionOrder(got)
		if diff := cmp.Diff(names(want), names(got)); diff != "" {
			t.Fatalf("deletion order (-want +got):\n%s", diff)
		}
	}
}

func TestIsActive(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		pod  *corev1.Pod
		want bool
	}{
		{&corev1.Pod{}, true},
		{&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, true},
		{&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, false},
		{&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, false},
		{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, false},
	} {
		if got := isActive(tc.pod); got != tc.want {
			t.Errorf("isActive(phase %q, deleting %v) = %v, want %v", tc.pod.Status.Phase, tc.pod.DeletionTimestamp != nil, got, tc.want)
		}
	}
}

// TestSlowStart: creations go in doubling batches and stop after the first batch
// with a failure.
func TestSlowStart(t *testing.T) {
	var calls atomic.Int64
	created, err := slowStart(10, func() error { calls.Add(1); return nil })
	if created != 10 || err != nil || calls.Load() != 10 {
		t.Errorf("all succeed: %d created, %d calls, %v; want 10, 10, nil", created, calls.Load(), err)
	}

	// The second call fails: it is in the second batch (2 calls), so 3 calls are
	// made and 2 succeed.
	calls.Store(0)
	boom := errors.New("boom")
	created, err = slowStart(10, func() error {
		if calls.Add(1) == 2 {
			return boom
		}
		return nil
	})
	if created != 2 || !errors.Is(err, boom) || calls.Load() != 3 {
		t.Errorf("second call fails: %d created, %d calls, %v; want 2, 3, boom", created, calls.Load(), err)
	}

	created, err = slowStart(0, func() error { t.Error("called for n = 0"); return nil })
	if created != 0 || err != nil {
		t.Errorf("n = 0: %d, %v", created, err)
	}
}
